package sandbox

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The Pod path (docs/API.md#pod-path). Against upstream's controller a Sandbox
// becomes a Pod; a Pod whose template carries AnnotationRuntime is put on a
// microVM node by ApplyRuntime, which adds the scheduling fields the runtime
// needs and never overwrites what the author wrote.

// Runtimes accepted in AnnotationRuntime.
const (
	// RuntimeVKCocoon runs the Pod as a cold-booted OCI microVM on a
	// vk-cocoon virtual-kubelet node (provider "cocoon").
	RuntimeVKCocoon = "vk-cocoon"
	// RuntimeSandboxd runs the Pod on a sandboxd virtual-kubelet node
	// (provider "sandboxd"), claiming a warm microVM when one exists.
	RuntimeSandboxd = "sandboxd"
)

// Scheduling keys the Pod path fills in.
const (
	// NodeSelectorType / NodeTypeVirtualKubelet select virtual-kubelet nodes
	// (the label every virtual-kubelet provider sets on its node).
	NodeSelectorType       = "type"
	NodeTypeVirtualKubelet = "virtual-kubelet"
	// LabelProvider selects the microVM provider among virtual-kubelet nodes.
	LabelProvider = "sandbox.cocoonstack.io/provider"
	// TaintProvider is the taint key virtual-kubelet puts on its node, with
	// the provider name as value and effect NoSchedule.
	TaintProvider = "virtual-kubelet.io/provider"
	// AnnotationProvider tells the node which provider boots the Pod.
	AnnotationProvider = "sandbox.cocoonstack.io/provider"
	// AnnotationBoot says how the microVM boots: BootCold or BootWarm.
	AnnotationBoot = "sandbox.cocoonstack.io/boot"
	BootCold       = "cold"
	BootWarm       = "warm"
)

// runtimeSpec is what one runtime requires of a Pod.
//
// +k8s:deepcopy-gen=false
type runtimeSpec struct {
	provider string
	boot     string
}

var runtimes = map[string]runtimeSpec{
	RuntimeVKCocoon: {provider: "cocoon", boot: BootCold},
	RuntimeSandboxd: {provider: "sandboxd", boot: BootWarm},
}

// PatchOp is one RFC 6902 JSON Patch operation. ApplyRuntime only emits "add".
//
// +k8s:deepcopy-gen=false
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// RuntimeError is a Pod that cannot be put on the runtime it asks for: an
// unknown runtime or an explicit value that conflicts with it.
//
// +k8s:deepcopy-gen=false
type RuntimeError struct {
	Field  string // e.g. spec.nodeSelector[type]
	Reason string
}

func (e *RuntimeError) Error() string {
	return fmt.Sprintf("%s: %s: %s", AnnotationRuntime, e.Field, e.Reason)
}

// ApplyRuntime is the pure core of the Pod path. For a Pod annotated
// AnnotationRuntime (vk-cocoon or sandboxd) it returns a patched deep copy
// carrying, in addition to what the Pod already has:
//   - nodeSelector type=virtual-kubelet and LabelProvider=<provider>;
//   - a toleration TaintProvider=<provider>:NoSchedule;
//   - annotations AnnotationProvider=<provider> and AnnotationBoot.
//
// ops are the JSON Patch operations that turn pod into patched (empty when
// nothing is missing). A field the author already set to the required value
// is kept; one set to a different value is a *RuntimeError and nothing is
// patched. An unknown runtime is a *RuntimeError. A Pod without the
// annotation is returned unchanged with no ops. pod is never modified.
func ApplyRuntime(pod *corev1.Pod) (patched *corev1.Pod, ops []PatchOp, err error) {
	if pod == nil {
		return nil, nil, &RuntimeError{Field: "pod", Reason: "no pod"}
	}
	name, ok := pod.Annotations[AnnotationRuntime]
	if !ok {
		return pod.DeepCopy(), nil, nil
	}
	rt, ok := runtimes[name]
	if !ok {
		return nil, nil, &RuntimeError{
			Field:  "metadata.annotations[" + AnnotationRuntime + "]",
			Reason: fmt.Sprintf("unknown runtime %q (want %q or %q)", name, RuntimeVKCocoon, RuntimeSandboxd),
		}
	}
	out := pod.DeepCopy()

	// Node selector.
	want := map[string]string{NodeSelectorType: NodeTypeVirtualKubelet, LabelProvider: rt.provider}
	missing := map[string]string{}
	for _, k := range sortedKeys(want) {
		have, set := out.Spec.NodeSelector[k]
		switch {
		case !set:
			missing[k] = want[k]
		case have != want[k]:
			return nil, nil, &RuntimeError{
				Field:  "spec.nodeSelector[" + k + "]",
				Reason: fmt.Sprintf("is %q, runtime %s requires %q", have, name, want[k]),
			}
		}
	}
	if len(missing) > 0 {
		if out.Spec.NodeSelector == nil {
			out.Spec.NodeSelector = map[string]string{}
			ops = append(ops, PatchOp{Op: "add", Path: "/spec/nodeSelector", Value: copyMap(missing)})
		} else {
			for _, k := range sortedKeys(missing) {
				ops = append(ops, PatchOp{Op: "add", Path: "/spec/nodeSelector/" + escapePointer(k), Value: missing[k]})
			}
		}
		for k, v := range missing {
			out.Spec.NodeSelector[k] = v
		}
	}

	// Toleration of the provider taint.
	tol := corev1.Toleration{Key: TaintProvider, Operator: corev1.TolerationOpEqual, Value: rt.provider, Effect: corev1.TaintEffectNoSchedule}
	tolerated := false
	for i, t := range out.Spec.Tolerations {
		if t.Key != TaintProvider {
			continue
		}
		if !tolerates(t, rt.provider) {
			return nil, nil, &RuntimeError{
				Field:  fmt.Sprintf("spec.tolerations[%d]", i),
				Reason: fmt.Sprintf("tolerates %s=%s:%s, runtime %s requires %s=%s:%s", t.Key, t.Value, t.Effect, name, TaintProvider, rt.provider, corev1.TaintEffectNoSchedule),
			}
		}
		tolerated = true
	}
	if !tolerated {
		if out.Spec.Tolerations == nil {
			ops = append(ops, PatchOp{Op: "add", Path: "/spec/tolerations", Value: []corev1.Toleration{tol}})
		} else {
			ops = append(ops, PatchOp{Op: "add", Path: "/spec/tolerations/-", Value: tol})
		}
		out.Spec.Tolerations = append(out.Spec.Tolerations, tol)
	}

	// Boot annotations (the runtime annotation is present, so the map is too).
	ann := map[string]string{AnnotationProvider: rt.provider, AnnotationBoot: rt.boot}
	for _, k := range sortedKeys(ann) {
		have, set := out.Annotations[k]
		switch {
		case !set:
			ops = append(ops, PatchOp{Op: "add", Path: "/metadata/annotations/" + escapePointer(k), Value: ann[k]})
			out.Annotations[k] = ann[k]
		case have != ann[k]:
			return nil, nil, &RuntimeError{
				Field:  "metadata.annotations[" + k + "]",
				Reason: fmt.Sprintf("is %q, runtime %s requires %q", have, name, ann[k]),
			}
		}
	}
	return out, ops, nil
}

// tolerates reports whether t, whose key is TaintProvider, tolerates
// TaintProvider=provider:NoSchedule.
func tolerates(t corev1.Toleration, provider string) bool {
	if t.Effect != "" && t.Effect != corev1.TaintEffectNoSchedule {
		return false
	}
	switch t.Operator {
	case corev1.TolerationOpExists:
		return true
	case corev1.TolerationOpEqual, "":
		return t.Value == provider
	}
	return false
}

// escapePointer escapes a map key for use as one JSON Pointer token (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
