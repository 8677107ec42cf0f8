package node_test

import (
	"testing"
	"time"

	"github.com/hearthvm/hearth/claim"
	"github.com/hearthvm/hearth/node"
)

// node.Limits mirrors claim.Limits (node cannot import claim): a
// claim.Limits converts and grants exactly the same deadlines.
func TestLimitsMirrorClaimLimits(t *testing.T) {
	if node.Limits(claim.DefaultLimits) != node.DefaultLimits {
		t.Fatal("default limits differ")
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 700_000_000, time.UTC)
	for _, l := range []claim.Limits{claim.DefaultLimits, {Default: time.Minute, Max: time.Hour}, {Default: time.Second}} {
		for _, ask := range []int64{-1, 0, 1, 59, 3600, 86400, 1 << 40} {
			if got, want := node.Limits(l).Deadline(now, ask), l.Deadline(now, ask); !got.Equal(want) {
				t.Errorf("%+v ask %d: node %v, claim %v", l, ask, got, want)
			}
		}
	}
}
