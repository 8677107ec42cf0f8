package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hearthvm/hearth/internal/kubeevents"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
)

func TestEventState_RecordsChangesNotStates(t *testing.T) {
	ref := pool.Ref{Namespace: "default", Name: "rt"}
	k := pool.Key{Template: "img:1", Net: "none", Size: "small"}
	pools := []pool.WarmPool{{Ref: ref, Replicas: 2, Template: "rt"}}
	keys := map[pool.Ref]pool.Key{ref: k}
	answer := func(failures int32, evicted int64) map[string][]nodeapi.PoolInfo {
		return map[string][]nodeapi.PoolInfo{"n1": {{Template: k.Template, Net: k.Net, Size: k.Size, BootFailures: failures, BootError: "boom", Evicted: evicted}}}
	}
	var s eventState
	steps := []struct {
		name string
		v    tickView
		want []string
	}{
		{"below target: fill starts", tickView{observed: map[pool.Ref]int32{ref: 0}}, []string{"FillStarted"}},
		{"still below: nothing new", tickView{observed: map[pool.Ref]int32{ref: 1}}, nil},
		{"a boot failure", tickView{observed: map[pool.Ref]int32{ref: 1}, answers: answer(1, 0)}, []string{"BootFailed+template"}},
		{"the same count again: nothing", tickView{observed: map[pool.Ref]int32{ref: 1}, answers: answer(1, 0)}, nil},
		{"more failures", tickView{observed: map[pool.Ref]int32{ref: 1}, answers: answer(3, 0)}, []string{"BootFailed+template"}},
		{"full again, boots fine", tickView{observed: map[pool.Ref]int32{ref: 2}, answers: answer(0, 0)}, []string{"FillFinished"}},
		{"a failure after success counts from 1", tickView{observed: map[pool.Ref]int32{ref: 2}, answers: answer(1, 0)}, []string{"BootFailed+template"}},
		{"evictions", tickView{observed: map[pool.Ref]int32{ref: 2}, answers: answer(0, 2)}, []string{"Evicted"}},
		{"the node leaves", tickView{observed: map[pool.Ref]int32{ref: 2}, gone: map[string][]pool.Key{"n1": {k}}}, []string{"NodeGone"}},
		{"it comes back with evictions from before: a first sighting", tickView{observed: map[pool.Ref]int32{ref: 2}, answers: answer(0, 7)}, nil},
		{"a node gone that held another key", tickView{observed: map[pool.Ref]int32{ref: 2}, gone: map[string][]pool.Key{"n2": {{Template: "other"}}}}, nil},
	}
	for _, st := range steps {
		st.v.pools, st.v.keys = pools, keys
		var got []string
		for _, e := range s.next(st.v) {
			r := e.Reason
			if e.OnTemplate {
				r += "+template"
			}
			require.Equal(t, ref, e.Pool)
			got = append(got, r)
		}
		require.Equal(t, st.want, got, fmt.Sprintf("step %q", st.name))
	}
}

// The etcd writes the warm-pool controller's events cost per 1,000 claims
// (docs/OPERATIONS.md#events): 1,000 claims from a pool of 20 over 200
// ticks, each other tick finding it drained by 10 and the next refilled,
// are 200 fill changes — FillStarted and FillFinished each a series — and cost 4
// writes (two creates, two series starts), not one per claim or per tick.
func TestEvents_WritesPer1000Claims(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset()
	rec := kubeevents.NewForSink(ctx, cs.EventsV1(), "hearth.dev/warm-pool-controller")
	defer rec.Shutdown()
	ref := pool.Ref{Namespace: "default", Name: "rt"}
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("extensions.agents.x-k8s.io/v1beta1")
	obj.SetKind("SandboxWarmPool")
	obj.SetNamespace("default")
	obj.SetName("rt")
	obj.SetUID("u1")
	c := &Controller{cfg: Config{Events: rec}}
	pools := []listedPool{{wp: pool.WarmPool{Ref: ref, Replicas: 20, Template: "rt"}, obj: obj}}
	recorded, claims := 0, 0
	for tick := range 200 {
		observed := int32(20)
		if tick%2 == 0 {
			observed -= 10 // 10 claims since the last tick
			claims += 10
		}
		evs := c.events.next(tickView{pools: []pool.WarmPool{pools[0].wp}, keys: map[pool.Ref]pool.Key{ref: {Template: "img"}},
			observed: map[pool.Ref]int32{ref: observed}})
		recorded += len(evs)
		c.record(evs, pools, nil)
	}
	require.Equal(t, 1000, claims)
	require.Equal(t, 200, recorded)
	deadline := time.Now().Add(10 * time.Second)
	for rec.Writes() < 4 {
		require.True(t, time.Now().Before(deadline), "writes %d", rec.Writes())
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // a bounded window for a wrong extra write
	t.Logf("%d claims, %d fill changes recorded: %d event writes", claims, recorded, rec.Writes())
	require.Equal(t, int64(4), rec.Writes())
}
