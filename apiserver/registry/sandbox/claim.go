package sandboxstore

import (
	"encoding/json"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/nodeapi"
)

// This file is the Kubernetes front door's adapter to the one claim
// request (nodeapi.ClaimRequest): what a Sandbox records on its node and
// late-binds into its microVM, checked against the claim rules
// (docs/API.md#claim-rules) before any node is asked.

// recordOf is what a sandbox records of its object on its node
// (docs/API.md#get): the user's labels and annotations (never the stamped
// keys), spec and managedFields, checked by nodeapi.Object.Validate (the
// claim rules: labels and annotations as Kubernetes validates them, the
// bounds nodeapi.MaxObjectBytes and MaxManagedFieldsBytes) and for a
// known spec.operatingMode; every breach is a 422 before any node is asked.
func recordOf(sb *sandboxv1beta1.Sandbox, spec sandboxv1beta1.SandboxSpec) (nodeapi.Object, error) {
	o := nodeapi.Object{Labels: userPart(sb.Labels, stampedLabels), Annotations: userPart(sb.Annotations, stampedAnnotations)}
	if raw, err := json.Marshal(spec); err == nil && !isZeroSpec(spec) {
		o.Spec = raw
	}
	if len(sb.ManagedFields) > 0 {
		o.ManagedFields, _ = json.Marshal(sb.ManagedFields)
	}
	errs := objectPaths(o.Validate())
	switch sb.Spec.OperatingMode {
	case "", sandboxv1beta1.SandboxOperatingModeRunning, sandboxv1beta1.SandboxOperatingModeSuspended:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("spec", "operatingMode"), sb.Spec.OperatingMode,
			[]sandboxv1beta1.SandboxOperatingMode{sandboxv1beta1.SandboxOperatingModeRunning, sandboxv1beta1.SandboxOperatingModeSuspended}))
	}
	if len(errs) > 0 {
		return o, apierrors.NewInvalid(sandboxKind, sb.Name, errs)
	}
	return o, nil
}

// objectPaths renames the node's field paths of an object
// (nodeapi.Object.Validate) to the Sandbox's.
func objectPaths(errs field.ErrorList) field.ErrorList {
	for _, e := range errs {
		for node, k8s := range map[string]string{"labels": "metadata.labels", "annotations": "metadata.annotations",
			"managed_fields": "metadata.managedFields", "object": "metadata"} {
			if e.Field == node || strings.HasPrefix(e.Field, node+"[") {
				e.Field = k8s + strings.TrimPrefix(e.Field, node)
			}
		}
	}
	return errs
}

// envOf is the env a Create late-binds into its warm microVM: the literal
// values of the first container's env (docs/API.md#create-is-a-claim). valueFrom is a
// 400 before anything is claimed: a warm microVM booted before the request
// cannot resolve references, and the apiserver does not read secrets on a
// caller's behalf. Names and sizes are the claim rules' (claimError).
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
		env[e.Name] = e.Value
	}
	return env, nil
}

// claimError is a Create's answer to a claim that nodeapi.ClaimRequest.
// Validate refuses once recordOf has passed its object: its env (the
// only other part a Create sets that can break a rule), a 400 naming the
// first container's env.
func claimError(name string, errs field.ErrorList) error {
	for _, e := range errs {
		if e.Field == "env" || strings.HasPrefix(e.Field, "env[") {
			e.Field = "spec.podTemplate.spec.containers[0]." + e.Field
		}
	}
	return apierrors.NewBadRequest(fmt.Sprintf("sandbox %q: %v", name, errs.ToAggregate()))
}
