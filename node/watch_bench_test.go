package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/hearthvm/hearth/nodeapi"
)

// hub5k is a hub publishing 5,000 sandboxes and one pool, and their state.
func hub5k() (*hub, []*nodeapi.Sandbox, []nodeapi.PoolInfo) {
	const n = 5000
	sbs := make([]*nodeapi.Sandbox, n)
	for i := range sbs {
		sbs[i] = &nodeapi.Sandbox{ID: fmt.Sprintf("sb_%016x", i), ClaimRef: fmt.Sprintf("ns/sb-%d", i), Template: "img",
			AgentAddr: "10.0.0.1:49983", Deadline: time.Unix(1_800_000_000, 0), ClaimedAt: time.Unix(1_700_000_000, 0)}
	}
	pools := []nodeapi.PoolInfo{{Template: "img", Warm: 5, Target: 5}}
	h := newHub()
	h.apply(sbs, pools)
	return h, sbs, pools
}

// BenchmarkHub_PutOneChangeOf5k is the change stream's cost per change on
// a node holding 5,000 sandboxes: one record compared and appended.
func BenchmarkHub_PutOneChangeOf5k(b *testing.B) {
	h, sbs, _ := hub5k()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		c := *sbs[i%len(sbs)]
		c.Paused = !h.sbs[c.ID].Paused
		i++
		h.put(&c)
	}
}

// BenchmarkHub_CheckOf5k is the consistency check's diff (once a minute,
// off the claim path) of 5,000 unchanged sandboxes.
func BenchmarkHub_CheckOf5k(b *testing.B) {
	h, sbs, pools := hub5k()
	b.ReportAllocs()
	for b.Loop() {
		if d := h.apply(sbs, pools); d != 0 {
			b.Fatalf("drift %d", d)
		}
	}
}
