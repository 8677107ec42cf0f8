package fleet

import (
	"context"
	"sync"

	"github.com/hearthvm/hearth/inventory"
)

// LeaseBounds asks every node of the view for its lease bounds
// (nodeapi.Info) and returns the strictest: the smallest default and the
// smallest maximum any node reports (0: no node reported one). A lease
// within them is one no node clamps. A node that does not answer is
// skipped; err is ctx's.
func (f *NodeFleet) LeaseBounds(ctx context.Context) (defaultSeconds, maxSeconds int64, err error) {
	var mu sync.Mutex
	f.eachNode(ctx, func(ctx context.Context, n inventory.Node) {
		info, err := f.client(n.Name, n.Address).Info(ctx)
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if d := info.LeaseDefaultSeconds; d > 0 && (defaultSeconds == 0 || d < defaultSeconds) {
			defaultSeconds = d
		}
		if m := info.LeaseMaxSeconds; m > 0 && (maxSeconds == 0 || m < maxSeconds) {
			maxSeconds = m
		}
	})
	return defaultSeconds, maxSeconds, ctx.Err()
}
