package sandboxstore

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/sandbox"
)

func TestSynthesize_UIDIsStableAndNamedByNodeAndClaim(t *testing.T) {
	a := nodeapi.Sandbox{ID: "sb_1", Node: "n1", ClaimRef: "ns/web"}
	b := a
	b.Paused, b.Deadline = true, time.Now()
	if uidOf(&a) == "" || uidOf(&a) != uidOf(&b) || synthesize(&a, 1).UID != uidOf(&a) {
		t.Fatalf("uid changes with the record's state: %s %s", uidOf(&a), uidOf(&b))
	}
	for _, other := range []nodeapi.Sandbox{{ID: "sb_2", Node: "n1"}, {ID: "sb_1", Node: "n2"}} {
		if uidOf(&other) == uidOf(&a) {
			t.Fatalf("%+v shares uid with %+v", other, a)
		}
	}
}

func TestSynthesize_UserPartAndStampedKeysWin(t *testing.T) {
	sp := sandboxv1beta1.SandboxSpec{}
	sp.PodTemplate.Spec.Containers = []corev1.Container{{Name: "m", Image: "img:1"}}
	raw, _ := json.Marshal(sp)
	rec := nodeapi.Sandbox{ID: "sb_1", Node: "n1", ClaimRef: "ns/web", Template: "img:1", Paused: true,
		Deadline: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		Object: nodeapi.Object{Labels: map[string]string{"team": "a", sandbox.LabelNode: "forged"},
			Annotations: map[string]string{"note": "x", sandbox.AnnotationClaimID: "forged"}, Spec: raw}}
	sb := synthesize(&rec, 1)
	if sb.Labels["team"] != "a" || sb.Labels[sandbox.LabelNode] != "n1" || sb.Annotations["note"] != "x" || sb.Annotations[sandbox.AnnotationClaimID] != "sb_1" {
		t.Fatalf("labels %v annotations %v", sb.Labels, sb.Annotations)
	}
	if len(sb.Spec.PodTemplate.Spec.Containers) != 1 || sb.Spec.OperatingMode != sandboxv1beta1.SandboxOperatingModeSuspended ||
		sb.Spec.ShutdownTime == nil || !sb.Spec.ShutdownTime.Equal(&metav1.Time{Time: rec.Deadline}) {
		t.Fatalf("spec %+v", sb.Spec)
	}
	if len(sb.Status.Conditions) != 2 || sb.Status.Conditions[1].Type != string(sandboxv1beta1.SandboxConditionSuspended) ||
		sb.Status.Conditions[1].Status != metav1.ConditionTrue {
		t.Fatalf("conditions %+v", sb.Status.Conditions)
	}
	// A read records back to the same user part (never the stamped keys).
	o, err := recordOf(sb, recordedSpec(sb.Spec))
	if err != nil || o.Labels[sandbox.LabelNode] != "" || o.Labels["team"] != "a" || o.Annotations[sandbox.AnnotationClaimID] != "" {
		t.Fatalf("recordOf(read) = %+v, %v", o, err)
	}
	if f := immutableSpec(sb.Spec, specOf(&rec)); len(f) != 0 {
		t.Fatalf("unchanged spec is a change: %v", f)
	}
	changed := sb.Spec.DeepCopy()
	changed.PodTemplate.Spec.Containers[0].Image = "img:2"
	changed.OperatingMode = sandboxv1beta1.SandboxOperatingModeRunning
	if f := immutableSpec(*changed, specOf(&rec)); len(f) != 1 || f[0].Field != "spec.podTemplate" {
		t.Fatalf("image change: %v", f)
	}
}

func TestRecordOf_Bounds(t *testing.T) {
	sb := &sandboxv1beta1.Sandbox{}
	sb.Name = "big"
	sb.Annotations = map[string]string{"a": strings.Repeat("x", nodeapi.MaxObjectBytes)}
	if _, err := recordOf(sb, sb.Spec); !apierrors.IsInvalid(err) {
		t.Fatalf("oversized = %v, want 422", err)
	}
	sb.Annotations = map[string]string{"a": strings.Repeat("x", nodeapi.MaxObjectBytes-100)}
	if _, err := recordOf(sb, sb.Spec); err != nil {
		t.Fatalf("within the bound: %v", err)
	}
	sb.Labels = map[string]string{"bad key!": "v"}
	if _, err := recordOf(sb, sb.Spec); !apierrors.IsInvalid(err) {
		t.Fatalf("bad label = %v, want 422", err)
	}
}
