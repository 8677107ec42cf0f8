package sandbox

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pod(ann map[string]string, mut func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: ann},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img"}}},
	}
	if mut != nil {
		mut(p)
	}
	return p
}

func tolFor(provider string) corev1.Toleration {
	return corev1.Toleration{Key: TaintProvider, Operator: corev1.TolerationOpEqual, Value: provider, Effect: corev1.TaintEffectNoSchedule}
}

func TestApplyRuntime(t *testing.T) {
	rtAnn := func(rt string) map[string]string { return map[string]string{AnnotationRuntime: rt} }
	cases := []struct {
		name    string
		in      *corev1.Pod
		wantErr string // substring; "" = success
		wantSel map[string]string
		wantTol []corev1.Toleration
		wantAnn map[string]string
		wantOps int
	}{
		{
			name:    "no annotation leaves the pod unchanged",
			in:      pod(nil, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"a": "b"} }),
			wantSel: map[string]string{"a": "b"},
			wantOps: 0,
		},
		{
			name:    "vk-cocoon on a bare pod",
			in:      pod(rtAnn(RuntimeVKCocoon), nil),
			wantSel: map[string]string{NodeSelectorType: NodeTypeVirtualKubelet, LabelProvider: "cocoon"},
			wantTol: []corev1.Toleration{tolFor("cocoon")},
			wantAnn: map[string]string{AnnotationRuntime: RuntimeVKCocoon, AnnotationProvider: "cocoon", AnnotationBoot: BootCold},
			wantOps: 4,
		},
		{
			name:    "sandboxd on a bare pod",
			in:      pod(rtAnn(RuntimeSandboxd), nil),
			wantSel: map[string]string{NodeSelectorType: NodeTypeVirtualKubelet, LabelProvider: "sandboxd"},
			wantTol: []corev1.Toleration{tolFor("sandboxd")},
			wantAnn: map[string]string{AnnotationRuntime: RuntimeSandboxd, AnnotationProvider: "sandboxd", AnnotationBoot: BootWarm},
			wantOps: 4,
		},
		{
			name: "other selectors and tolerations are kept, missing ones appended",
			in: pod(rtAnn(RuntimeSandboxd), func(p *corev1.Pod) {
				p.Spec.NodeSelector = map[string]string{"zone": "a"}
				p.Spec.Tolerations = []corev1.Toleration{{Key: "x", Operator: corev1.TolerationOpExists}}
			}),
			wantSel: map[string]string{"zone": "a", NodeSelectorType: NodeTypeVirtualKubelet, LabelProvider: "sandboxd"},
			wantTol: []corev1.Toleration{{Key: "x", Operator: corev1.TolerationOpExists}, tolFor("sandboxd")},
			wantAnn: map[string]string{AnnotationRuntime: RuntimeSandboxd, AnnotationProvider: "sandboxd", AnnotationBoot: BootWarm},
			wantOps: 5,
		},
		{
			name: "everything already right: no ops",
			in: pod(map[string]string{AnnotationRuntime: RuntimeSandboxd, AnnotationProvider: "sandboxd", AnnotationBoot: BootWarm}, func(p *corev1.Pod) {
				p.Spec.NodeSelector = map[string]string{NodeSelectorType: NodeTypeVirtualKubelet, LabelProvider: "sandboxd"}
				p.Spec.Tolerations = []corev1.Toleration{{Key: TaintProvider, Operator: corev1.TolerationOpExists}}
			}),
			wantSel: map[string]string{NodeSelectorType: NodeTypeVirtualKubelet, LabelProvider: "sandboxd"},
			wantTol: []corev1.Toleration{{Key: TaintProvider, Operator: corev1.TolerationOpExists}},
			wantAnn: map[string]string{AnnotationRuntime: RuntimeSandboxd, AnnotationProvider: "sandboxd", AnnotationBoot: BootWarm},
			wantOps: 0,
		},
		{
			name:    "unknown runtime",
			in:      pod(rtAnn("firecracker"), nil),
			wantErr: `unknown runtime "firecracker"`,
		},
		{
			name:    "empty runtime is unknown",
			in:      pod(rtAnn(""), nil),
			wantErr: "unknown runtime",
		},
		{
			name: "conflicting node type",
			in: pod(rtAnn(RuntimeVKCocoon), func(p *corev1.Pod) {
				p.Spec.NodeSelector = map[string]string{NodeSelectorType: "kubelet"}
			}),
			wantErr: "spec.nodeSelector[type]",
		},
		{
			name: "conflicting provider selector",
			in: pod(rtAnn(RuntimeVKCocoon), func(p *corev1.Pod) {
				p.Spec.NodeSelector = map[string]string{LabelProvider: "sandboxd"}
			}),
			wantErr: "spec.nodeSelector[" + LabelProvider + "]",
		},
		{
			name: "toleration for the other provider",
			in: pod(rtAnn(RuntimeSandboxd), func(p *corev1.Pod) {
				p.Spec.Tolerations = []corev1.Toleration{tolFor("cocoon")}
			}),
			wantErr: "spec.tolerations[0]",
		},
		{
			name: "toleration with another effect",
			in: pod(rtAnn(RuntimeSandboxd), func(p *corev1.Pod) {
				p.Spec.Tolerations = []corev1.Toleration{{Key: TaintProvider, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
			}),
			wantErr: "spec.tolerations[0]",
		},
		{
			name:    "conflicting boot annotation",
			in:      pod(map[string]string{AnnotationRuntime: RuntimeVKCocoon, AnnotationBoot: BootWarm}, nil),
			wantErr: "metadata.annotations[" + AnnotationBoot + "]",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.in.DeepCopy()
			got, ops, err := ApplyRuntime(tc.in)
			if diff := cmp.Diff(before, tc.in); diff != "" {
				t.Fatalf("input modified (-before +after):\n%s", diff)
			}
			if tc.wantErr != "" {
				var re *RuntimeError
				if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want *RuntimeError containing %q", err, tc.wantErr)
				}
				if got != nil || ops != nil {
					t.Fatalf("error case returned a patch: %v %v", got, ops)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(ops) != tc.wantOps {
				t.Fatalf("%d ops, want %d: %+v", len(ops), tc.wantOps, ops)
			}
			if diff := cmp.Diff(tc.wantSel, got.Spec.NodeSelector); diff != "" {
				t.Errorf("nodeSelector (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantTol, got.Spec.Tolerations); diff != "" {
				t.Errorf("tolerations (-want +got):\n%s", diff)
			}
			if tc.wantAnn != nil {
				if diff := cmp.Diff(tc.wantAnn, got.Annotations); diff != "" {
					t.Errorf("annotations (-want +got):\n%s", diff)
				}
			}
			// The ops, applied by a real JSON Patch engine to the input,
			// must produce exactly the patched pod.
			assertOpsProduce(t, tc.in, ops, got)
		})
	}
}

func assertOpsProduce(t *testing.T, in *corev1.Pod, ops []PatchOp, want *corev1.Pod) {
	t.Helper()
	orig, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out := orig
	if len(ops) > 0 {
		raw, err := json.Marshal(ops)
		if err != nil {
			t.Fatal(err)
		}
		p, err := jsonpatch.DecodePatch(raw)
		if err != nil {
			t.Fatal(err)
		}
		if out, err = p.Apply(orig); err != nil {
			t.Fatalf("apply %s: %v", raw, err)
		}
	}
	var applied corev1.Pod
	if err := json.Unmarshal(out, &applied); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, &applied); diff != "" {
		t.Fatalf("ops do not reproduce the patched pod (-want +applied):\n%s", diff)
	}
}

func TestApplyRuntime_NilPod(t *testing.T) {
	if _, _, err := ApplyRuntime(nil); err == nil {
		t.Fatal("nil pod accepted")
	}
}

func TestEscapePointer(t *testing.T) {
	for in, want := range map[string]string{"a/b": "a~1b", "a~b": "a~0b", "~/": "~0~1", "plain": "plain"} {
		if got := escapePointer(in); got != want {
			t.Errorf("escapePointer(%q) = %q, want %q", in, got, want)
		}
	}
}
