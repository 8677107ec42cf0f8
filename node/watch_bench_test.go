package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/hearthvm/hearth/nodeapi"
)

// BenchmarkHub_DiffOneChangeOf5k is the node's cost per wake of the change
// stream: the claim table read is diffed against the last revision's
// (5,000 sandboxes, one of them changed).
func BenchmarkHub_DiffOneChangeOf5k(b *testing.B) {
	const n = 5000
	sbs := make([]nodeapi.Sandbox, n)
	for i := range sbs {
		sbs[i] = nodeapi.Sandbox{ID: fmt.Sprintf("sb_%016x", i), ClaimRef: fmt.Sprintf("ns/sb-%d", i), Template: "img",
			AgentAddr: "10.0.0.1:49983", Deadline: time.Unix(1_800_000_000, 0), ClaimedAt: time.Unix(1_700_000_000, 0)}
	}
	pools := []nodeapi.PoolInfo{{Template: "img", Warm: 5, Target: 5}}
	h := newHub()
	h.apply("n1", sbs, pools)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		sbs[i%n].Paused = !sbs[i%n].Paused
		i++
		h.apply("n1", sbs, pools)
	}
}
