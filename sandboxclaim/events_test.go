package sandboxclaim

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/internal/kubeevents"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
)

// scarceFleet has no warm microVM for its first `short` claims.
type scarceFleet struct {
	askFleet
	short int
}

func (f *scarceFleet) Claim(ctx context.Context, req nodeapi.ClaimRequest) (nodeapi.Sandbox, error) {
	if f.short > 0 {
		f.short--
		return nodeapi.Sandbox{}, &fleet.ErrNoWarmCapacity{Key: pool.Key{Template: req.Template}}
	}
	return f.askFleet.Claim(ctx, req)
}

// A claim that finds no warm microVM three times and then binds records
// one ClaimFailed (when its Ready condition changes, not per retry) and
// one Bound.
func TestController_EventsBoundAndOneClaimFailedPerChange(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Date(2026, 12, 2, 14, 0, 0, 0, time.UTC)
	wp := &extv1beta1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "rt", Namespace: "ns"}}
	wp.Spec.TemplateRef.Name = "rt"
	tpl := &extv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "rt", Namespace: "ns"}}
	tpl.Spec.PodTemplate = sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "m", Image: "img:1"}}}}
	claim := &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "ns", UID: "u1", Finalizers: []string{Finalizer}}}
	claim.Spec.WarmPoolRef.Name = "rt"
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(),
		unstructuredOf(t, claim, "SandboxClaim"), unstructuredOf(t, wp, "SandboxWarmPool"), unstructuredOf(t, tpl, "SandboxTemplate"))
	cs := fake.NewClientset()
	rec := kubeevents.NewForSink(ctx, cs.EventsV1(), "hearth.dev/sandboxclaim-controller")
	defer rec.Shutdown()
	c := &Controller{cfg: Config{Fleet: &scarceFleet{short: 3}, Now: func() time.Time { return now }, Events: rec}, dyn: dyn}
	for range 4 {
		u, err := dyn.Resource(Claims).Namespace("ns").Get(ctx, "job", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var cur extv1beta1.SandboxClaim
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cur); err != nil {
			t.Fatal(err)
		}
		if _, err := c.claim(ctx, &cur, now); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := cs.EventsV1().Events("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range l.Items {
			if e.Regarding.Kind != "SandboxClaim" || e.Regarding.Name != "job" {
				t.Fatalf("event regarding %+v", e.Regarding)
			}
			got = append(got, e.Reason+" "+e.Type)
		}
		sort.Strings(got)
		if len(got) == 2 && got[0] == "Bound Normal" && got[1] == "ClaimFailed Warning" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events %v, want one Bound and one ClaimFailed", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if w := rec.Writes(); w != 2 {
		t.Fatalf("writes %d, want 2 (one per event: the retries record nothing)", w)
	}
}

// The event writes of 1,000 SandboxClaims (docs/OPERATIONS.md#events):
// one Bound each — beside the claim's own writes — and no more.
func TestEvents_WritesPer1000SandboxClaims(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Date(2026, 12, 2, 14, 0, 0, 0, time.UTC)
	wp := &extv1beta1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "rt", Namespace: "ns"}}
	wp.Spec.TemplateRef.Name = "rt"
	tpl := &extv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "rt", Namespace: "ns"}}
	tpl.Spec.PodTemplate = sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "m", Image: "img:1"}}}}
	dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), unstructuredOf(t, wp, "SandboxWarmPool"), unstructuredOf(t, tpl, "SandboxTemplate"))
	cs := fake.NewClientset()
	rec := kubeevents.NewForSink(ctx, cs.EventsV1(), "hearth.dev/sandboxclaim-controller")
	defer rec.Shutdown()
	c := &Controller{cfg: Config{Fleet: &askFleet{}, Now: func() time.Time { return now }, Events: rec}, dyn: dyn}
	const claims = 1000
	for i := range claims {
		claim := &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("job-", i), Namespace: "ns", UID: types.UID(fmt.Sprint("u", i)), Finalizers: []string{Finalizer}}}
		claim.Spec.WarmPoolRef.Name = "rt"
		u := unstructuredOf(t, claim, "SandboxClaim")
		if _, err := dyn.Resource(Claims).Namespace("ns").Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		claim.APIVersion, claim.Kind = u.GetAPIVersion(), u.GetKind()
		if _, err := c.claim(ctx, claim, now); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for rec.Writes() < claims {
		if time.Now().After(deadline) {
			t.Fatalf("writes %d, want %d", rec.Writes(), claims)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // a bounded window for a wrong extra write
	t.Logf("%d SandboxClaims bound: %d event writes", claims, rec.Writes())
	if w := rec.Writes(); w != claims {
		t.Fatalf("writes %d, want %d", w, claims)
	}
}
