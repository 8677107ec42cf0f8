package sandboxstore

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// envOf is the env a Create late-binds into its warm microVM: the literal
// values of the first container's env (docs/API.md#create-is-a-claim). valueFrom is a
// 400 before anything is claimed: a warm microVM booted before the request
// cannot resolve references, and the apiserver does not read secrets on a
// caller's behalf.
func envOf(sb *sandboxv1beta1.Sandbox) (map[string]string, error) {
	cs := sb.Spec.PodTemplate.Spec.Containers
	if len(cs) == 0 || len(cs[0].Env) == 0 {
		return nil, nil
	}
	env := make(map[string]string, len(cs[0].Env))
	for i, e := range cs[0].Env {
		if e.ValueFrom != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("spec.podTemplate.spec.containers[0].env[%d] (%s): valueFrom is not supported; give a literal value", i, e.Name))
		}
		if e.Name == "" {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("spec.podTemplate.spec.containers[0].env[%d]: name is required", i))
		}
		env[e.Name] = e.Value
	}
	return env, nil
}
