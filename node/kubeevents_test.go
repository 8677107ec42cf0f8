package node

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hearthvm/hearth/internal/kubeevents"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
)

func TestKubeObject_IsTheSandboxAsTheAggregatedAPIServesIt(t *testing.T) {
	for _, tc := range []struct{ ref, ns, name string }{
		{"team-a/build", "team-a", "build"},
		{"solo", "default", "solo"},
	} {
		u := kubeObject("n1", &record{ID: "sb_1", ClaimRef: tc.ref})
		require.Equal(t, "agents.x-k8s.io/v1beta1", u.GetAPIVersion())
		require.Equal(t, "Sandbox", u.GetKind())
		require.Equal(t, tc.ns, u.GetNamespace(), tc.ref)
		require.Equal(t, tc.name, u.GetName(), tc.ref)
		require.Equal(t, inventory.UID("n1", "sb_1"), u.GetUID())
	}
	require.NotEqual(t, inventory.UID("n1", "sb_1"), inventory.UID("n2", "sb_1"), "a uid names the node too")
}

// With a Kubernetes client, a pause and a resume are events.k8s.io/v1
// Events regarding the Sandbox object — its apiVersion, kind, namespace,
// name and the uid the aggregated API serves (kubectl describe selects
// on them) — while a claim, and a sandbox without a claim ref, write none.
func TestKubeEvents_PauseAndResumeWriteEventsRegardingTheSandboxClaimsWriteNone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset()
	rec := kubeevents.NewForSink(ctx, cs.EventsV1(), nodeapi.EventsController)
	defer rec.Shutdown()
	tn := startNode(t, newFakeDriver(), func(c *Config) { c.Events = rec })
	_, err := tn.root.PutPools(bg, pools("img", 3))
	require.NoError(t, err)
	tn.waitWarm(t, "img", 3)

	sb, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "team-a/build", TTLSeconds: 600})
	require.NoError(t, err)
	unnamed, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", TTLSeconds: 600})
	require.NoError(t, err)
	require.NoError(t, tn.root.Pause(bg, unnamed.ID))
	require.NoError(t, tn.root.Pause(bg, sb.ID))
	require.NoError(t, tn.root.Resume(bg, sb.ID))

	var evs []eventsv1.Event
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := cs.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		if evs = l.Items; len(evs) >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].EventTime.Before(&evs[j].EventTime) })
	require.Len(t, evs, 2, "Paused and Resumed of team-a/build: %+v", evs)
	want := corev1.ObjectReference{APIVersion: "agents.x-k8s.io/v1beta1", Kind: "Sandbox",
		Namespace: "team-a", Name: "build", UID: inventory.UID(sb.Node, sb.ID)}
	require.NotEmpty(t, want.UID)
	for i, reason := range []string{nodeapi.ReasonPaused, nodeapi.ReasonResumed} {
		e := evs[i]
		require.Equal(t, reason, e.Reason)
		require.Equal(t, want, e.Regarding)
		require.Equal(t, "team-a", e.Namespace)
		require.Equal(t, nodeapi.EventNormal, e.Type)
		require.Equal(t, nodeapi.EventsController, e.ReportingController)
		require.NotEmpty(t, e.Action)
		require.NotEmpty(t, e.Note)
	}
	require.Equal(t, int64(2), rec.Writes(), "the claims wrote no Event, the unnamed sandbox's pause none")
}
