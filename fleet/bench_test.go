package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleetview"
	"github.com/hearthvm/hearth/inventory"
)

func viewOf(total int) (*inventory.Static, string, string) {
	ts := metav1.NewTime(time.Unix(1700000000, 0))
	const nodes = 20
	invs := make([]*inventory.NodeInventory, nodes)
	for n := range invs {
		es := make([]inventory.Entry, total/nodes)
		for i := range es {
			name := fmt.Sprintf("ns/sb-%d-%d", n, i)
			es[i] = inventory.Entry{Name: name, ID: fmt.Sprintf("sb_%d_%d", n, i), Phase: "Running", ClaimRef: name, Deadline: &ts, ClaimedAt: &ts}
		}
		// No address: a lookup then returns the view's entry without a
		// node call, so the benchmarks measure the view's part of it.
		invs[n] = &inventory.NodeInventory{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%02d", n)}, Node: fmt.Sprintf("n%02d", n), Entries: es}
	}
	mid := invs[nodes/2].Entries[len(invs[nodes/2].Entries)/2]
	return inventory.NewStatic(invs...), mid.Name, mid.ID
}

// BenchmarkFleet_LookupFromLiveStore resolves one sandbox by ref and by id
// through the fleet (claim-time index miss) from a live view's store, the
// one read model: allocations stay flat as the fleet grows.
func BenchmarkFleet_LookupFromLiveStore(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			view, ref, id := viewOf(n)
			live := fleetview.New(inventory.NewStatic(), fleetview.Config{})
			for _, nd := range view.View().Nodes() {
				live.Store().SetPublished(nd.Inventory(), time.Now())
			}
			f := fleet.New(fleet.Config{View: live})
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := f.ByRef(ctx, ref); err != nil {
					b.Fatal(err)
				}
				if _, err := f.ByID(ctx, id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
