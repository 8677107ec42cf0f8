package controller_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/hearthvm/hearth/internal/kubeevents"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/pool/controller"
)

// eventsOf polls the recorded events until want (kind/reason strings,
// sorted) are all there, and returns every event's "Kind/Reason: note".
func eventsOf(t *testing.T, cs *fake.Clientset, want ...string) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := cs.EventsV1().Events("default").List(context.Background(), metav1.ListOptions{})
		require.NoError(t, err)
		var got []string
		have := map[string]bool{}
		for _, e := range l.Items {
			got = append(got, e.Regarding.Kind+"/"+e.Reason+": "+e.Note)
			have[e.Regarding.Kind+"/"+e.Reason] = true
		}
		all := true
		for _, w := range want {
			all = all && have[w]
		}
		if all {
			sort.Strings(got)
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("events %v lack some of %v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A pool whose image cannot be pulled (the node reports its boot failures)
// gets FillStarted and BootFailed, its template BootFailed with the
// node's error; a node that leaves gets NodeGone on the pool.
func TestTick_EventsForBootFailuresFillAndANodeGone(t *testing.T) {
	s, dc, a, _, _, _ := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset()
	rec := kubeevents.NewForSink(ctx, cs.EventsV1(), "hearth.dev/warm-pool-controller")
	defer rec.Shutdown()
	d, err := controller.New(controller.Config{REST: rest.CopyConfig(s.Config), Secret: secret, Interval: time.Hour, Events: rec})
	require.NoError(t, err)
	a.mu.Lock()
	a.bootErr = `pulling "img:1": manifest unknown`
	a.mu.Unlock()
	apply(t, dc, poolYAML(2))
	_, err = d.Tick(ctx)
	require.NoError(t, err)
	got := eventsOf(t, cs, "SandboxWarmPool/FillStarted", "SandboxWarmPool/BootFailed", "SandboxTemplate/BootFailed")
	joined := strings.Join(got, "\n")
	require.Contains(t, joined, `SandboxWarmPool/BootFailed: Node node-a: 1 warm boots failed in a row: pulling "img:1": manifest unknown`)
	require.Contains(t, joined, `SandboxTemplate/BootFailed: Pool rt: Node node-a`)

	// node-b leaves: its NodeInventory is deleted.
	require.NoError(t, dc.Resource(inventory.GroupVersionResource).Delete(ctx, "node-b", metav1.DeleteOptions{}))
	_, err = d.Tick(ctx)
	require.NoError(t, err)
	got = eventsOf(t, cs, "SandboxWarmPool/NodeGone")
	require.Contains(t, strings.Join(got, "\n"), "SandboxWarmPool/NodeGone: Node node-b is gone")
}
