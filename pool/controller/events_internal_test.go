package controller

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

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
