package sandbox

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the group the lifecycle payloads share with Sandbox.
const GroupName = "agents.x-k8s.io"

// SchemeGroupVersion is agents.x-k8s.io/v1beta1.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1beta1"}

var (
	// SchemeBuilder registers the lifecycle payloads.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the lifecycle payloads to a scheme under v1beta1.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Objects lists one zero value of every lifecycle payload kind.
func Objects() []runtime.Object {
	return []runtime.Object{
		&SandboxPauseOptions{}, &SandboxResumeOptions{},
		&SandboxForkOptions{}, &SandboxForkResult{},
		&SandboxSnapshotOptions{}, &SandboxSnapshotResult{},
		&SandboxLogOptions{}, &SandboxStats{},
	}
}

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, Objects()...)
	return nil
}
