package apiserver

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	sandboxstore "github.com/hearthvm/hearth/apiserver/registry/sandbox"
	"github.com/hearthvm/hearth/sandbox"
)

var (
	// Scheme holds every type the server speaks. Embedders may register
	// more kinds (with their own __internal identity versions) before
	// building a Config.
	Scheme = runtime.NewScheme()
	// Codecs serializes Scheme's types.
	Codecs = serializer.NewCodecFactory(Scheme)
)

// internalVersion is agents.x-k8s.io/__internal: the same Go types as
// v1beta1 (agent-sandbox has no internal types; conversion is identity).
var internalVersion = schema.GroupVersion{Group: sandboxv1beta1.GroupVersion.Group, Version: runtime.APIVersionInternal}

func init() {
	if err := AddToScheme(Scheme); err != nil {
		panic(err) // static registration; a failure is a programming error
	}
}

// sandboxObjects are the kinds served under agents.x-k8s.io.
func sandboxObjects() []runtime.Object {
	return append([]runtime.Object{&sandboxv1beta1.Sandbox{}, &sandboxv1beta1.SandboxList{}}, sandbox.Objects()...)
}

// AddToScheme registers Sandbox, SandboxList and the lifecycle payloads in
// agents.x-k8s.io/v1beta1 and, as identity, in its __internal version; the
// meta types at v1; and the field labels sandboxes can be selected by.
func AddToScheme(s *runtime.Scheme) error {
	if err := sandboxv1beta1.AddToScheme(s); err != nil {
		return err
	}
	s.AddKnownTypes(sandboxv1beta1.GroupVersion, &sandboxv1beta1.Sandbox{}, &sandboxv1beta1.SandboxList{})
	if err := sandbox.AddToScheme(s); err != nil {
		return err
	}
	s.AddKnownTypes(internalVersion, sandboxObjects()...)
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	s.AddUnversionedTypes(unversioned, &metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{},
		&metav1.APIGroup{}, &metav1.APIResourceList{})
	return s.AddFieldLabelConversionFunc(sandboxv1beta1.GroupVersion.WithKind("Sandbox"), sandboxstore.ConvertFieldLabel)
}
