package pool

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
)

const img = "ghcr.io/cocoonstack/sandbox/rt:24.04"

func rl(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func sb(ann, podAnn map[string]string, cs ...corev1.Container) *sandboxv1beta1.Sandbox {
	s := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "x", Annotations: ann}}
	s.Spec.PodTemplate.ObjectMeta.Annotations = podAnn
	s.Spec.PodTemplate.Spec.Containers = cs
	return s
}

func c(req, lim corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: "agent", Image: img, Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}
}

func TestKeyForSandbox(t *testing.T) {
	cases := []struct {
		name    string
		in      *sandboxv1beta1.Sandbox
		want    Key
		wantErr bool
	}{
		{"no resources is small", sb(nil, nil, c(nil, nil)), Key{img, "none", "small"}, false},
		{"exactly 1 cpu is small", sb(nil, nil, c(rl("cpu", "1"), nil)), Key{img, "none", "small"}, false},
		{"1001m is medium", sb(nil, nil, c(rl("cpu", "1001m"), nil)), Key{img, "none", "medium"}, false},
		{"exactly 4 cpu is medium", sb(nil, nil, c(rl("cpu", "4"), nil)), Key{img, "none", "medium"}, false},
		{"4001m is large", sb(nil, nil, c(rl("cpu", "4001m"), nil)), Key{img, "none", "large"}, false},
		{"exactly 2Gi is small", sb(nil, nil, c(rl("memory", "2Gi"), nil)), Key{img, "none", "small"}, false},
		{"2G is below 2Gi", sb(nil, nil, c(rl("memory", "2G"), nil)), Key{img, "none", "small"}, false},
		{"2049Mi is medium", sb(nil, nil, c(rl("memory", "2049Mi"), nil)), Key{img, "none", "medium"}, false},
		{"exactly 8Gi is medium", sb(nil, nil, c(rl("memory", "8Gi"), nil)), Key{img, "none", "medium"}, false},
		{"8G is medium", sb(nil, nil, c(rl("memory", "8G"), nil)), Key{img, "none", "medium"}, false},
		{"9Gi is large", sb(nil, nil, c(rl("memory", "9Gi"), nil)), Key{img, "none", "large"}, false},
		{"limit when no request", sb(nil, nil, c(nil, rl("cpu", "2"))), Key{img, "none", "medium"}, false},
		{"zero request falls back to limit", sb(nil, nil, c(rl("cpu", "0"), rl("cpu", "5"))), Key{img, "none", "large"}, false},
		{"request wins over limit", sb(nil, nil, c(rl("cpu", "1"), rl("cpu", "8"))), Key{img, "none", "small"}, false},
		{"axes mix: cpu request, memory limit", sb(nil, nil, c(rl("cpu", "500m"), rl("memory", "3Gi"))), Key{img, "none", "medium"}, false},
		{"object net", sb(map[string]string{"sandbox.cocoonstack.io/net": "egress"}, nil, c(nil, nil)), Key{img, "egress", "small"}, false},
		{"pod template net fallback", sb(nil, map[string]string{"sandbox.cocoonstack.io/net": "egress"}, c(nil, nil)), Key{img, "egress", "small"}, false},
		{"object net wins", sb(map[string]string{"sandbox.cocoonstack.io/net": "none"}, map[string]string{"sandbox.cocoonstack.io/net": "egress"}, c(nil, nil)), Key{img, "none", "small"}, false},
		{"unknown net", sb(map[string]string{"sandbox.cocoonstack.io/net": "wan"}, nil, c(nil, nil)), Key{}, true},
		{"no containers", sb(nil, nil), Key{}, true},
		{"first container only", sb(nil, nil, c(nil, nil), corev1.Container{Image: "other", Resources: corev1.ResourceRequirements{Requests: rl("cpu", "16")}}), Key{img, "none", "small"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := KeyForSandbox(tc.in)
			if tc.wantErr {
				if !errors.Is(err, ErrInvalidKey) {
					t.Fatalf("err = %v, want ErrInvalidKey", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("KeyForSandbox = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestKeyForTemplate_MatchesSandbox: a template and a Sandbox with the same
// pod template derive byte-identical keys, whichever level carries the net.
func TestKeyForTemplate_MatchesSandbox(t *testing.T) {
	for _, where := range []string{"object", "podTemplate"} {
		ann := map[string]string{"sandbox.cocoonstack.io/net": "egress"}
		tpl := &extv1beta1.SandboxTemplate{}
		s := sb(nil, nil, c(rl("cpu", "2"), nil))
		if where == "object" {
			tpl.Annotations = ann
			s.Annotations = ann
		} else {
			tpl.Spec.PodTemplate.ObjectMeta.Annotations = ann
			s.Spec.PodTemplate.ObjectMeta.Annotations = ann
		}
		tpl.Spec.PodTemplate.Spec = s.Spec.PodTemplate.Spec
		a, err1 := KeyForTemplate(tpl)
		b, err2 := KeyForSandbox(s)
		if err1 != nil || err2 != nil || a != b || a.Net != "egress" {
			t.Fatalf("%s: template %+v (%v) vs sandbox %+v (%v)", where, a, err1, b, err2)
		}
	}
}

func TestKeyForE2B(t *testing.T) {
	k, err := KeyForE2B(img, false)
	if err != nil || k != (Key{img, "none", "small"}) {
		t.Fatalf("got %+v %v", k, err)
	}
	k, _ = KeyForE2B(img, true)
	if k.Net != "egress" {
		t.Fatalf("allow_internet_access should select egress, got %+v", k)
	}
	if _, err := KeyForE2B("", false); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("empty templateID: %v", err)
	}
}
