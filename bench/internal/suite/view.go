package suite

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/hearthvm/hearth/bench/internal/stats"
	"github.com/hearthvm/hearth/bench/internal/synth"
	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleetview"
	"github.com/hearthvm/hearth/inventory"
)

// Lookup measures resolving one sandbox by claim id and by name in the
// fleet view (inventory.View) and through the fleet (fleet.NodeFleet ByID /
// ByRef answered from the published view: its nodes have no address here,
// so no node call — with one, the fleet asks the node the view names, one
// call, for its record) with 1k … 1M entries: ns/op, B/op and allocs/op,
// which must not grow with the fleet.
func Lookup(ctx context.Context, cfg Config) error {
	cfg.defaults()
	sizes := []int{1_000, 10_000, 100_000, 1_000_000}
	if cfg.Quick {
		sizes = []int{1_000, 10_000}
	}
	t := stats.Table{
		Title:  "One-sandbox lookup vs fleet size (synthetic inventories, 20 nodes)",
		Header: []string{"entries", "lookup", "wall ns/op", "CPU ns/op", "B/op", "allocs/op"},
	}
	for _, n := range sizes {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		invs := synth.Split(20, n)
		v := inventory.NewView(invs)
		// The fleet locates in a live view's store (as the servers wire
		// it), here fed the published objects without addresses: a lookup
		// then returns the view's entry without a node call.
		live := fleetview.New(inventory.NewStatic(), fleetview.Config{})
		for _, inv := range invs {
			c := *inv
			c.Address = ""
			live.Store().SetPublished(&c, time.Now())
		}
		fleet := fleet.New(fleet.Config{View: live})
		// A sandbox in the middle of the fleet.
		mid := invs[len(invs)/2]
		e := mid.Entries[len(mid.Entries)/2]
		cases := []struct {
			name string
			fn   func() bool
		}{
			{"View.ByID", func() bool { _, ok := v.ByID(e.ID); return ok }},
			{"View.ByName", func() bool { _, ok := v.ByName(e.Name); return ok }},
			{"NodeFleet.ByID (live view)", func() bool { l, err := fleet.ByID(ctx, e.ID); return err == nil && l.ID == e.ID }},
			{"NodeFleet.ByRef (live view)", func() bool { l, err := fleet.ByRef(ctx, e.Name); return err == nil && l.ID == e.ID }},
		}
		for _, c := range cases {
			if !c.fn() {
				return fmt.Errorf("%s missed %s at %d entries", c.name, e.Name, n)
			}
			const batch = 1000
			r := measure(func() {
				for i := 0; i < batch; i++ {
					c.fn()
				}
			}, 300*time.Millisecond)
			t.Add(n, c.name, fmt.Sprintf("%.0f", float64(r.wall)/batch), fmt.Sprintf("%.0f", float64(r.cpu)/batch),
				fmt.Sprintf("%.0f", r.bytes/batch), fmt.Sprintf("%.2f", r.objs/batch))
		}
		runtime.KeepAlive(invs)
	}
	t.Note("Goal: ≤ 16 KB and flat in the fleet size. Anchor: a lookup that materializes the fleet allocates ~1.4 KB per sandbox (139 MB at 100k).")
	return t.Print(cfg.Out)
}

// ReDerive measures a publish tick: one node republishes (1 % of its
// entries renewed) and the published view is rebuilt from every node's
// inventory (what inventory.Source does for the live view's membership;
// no watch re-derives anything: watches follow the live view's changes,
// and the Diff rows are gone with that path). It also reports the heap a
// View holds per entry (beyond the inventories) and the heap of the decoded
// inventories themselves, from runtime.MemStats after GC.
func ReDerive(ctx context.Context, cfg Config) error {
	cfg.defaults()
	// grow: the republished node also gains one entry (a claim), so its
	// entry count changes, as on nearly every production tick.
	type shape struct {
		nodes, per int
		grow       bool
	}
	shapes := []shape{{20, 2_600, false}, {20, 2_600, true}, {200, 5_000, false}, {200, 5_000, true}, {200, 250, false}, {200, 250, true}}
	if cfg.Quick {
		shapes = []shape{{20, 100, false}, {200, 25, false}, {200, 25, true}}
	}
	t := stats.Table{
		Title: "Watch re-derive per tick and heap per entry (synthetic NodeInventory objects)",
		Header: []string{"nodes × per node", "entries", "NewView CPU ms", "View.Next CPU ms", "tick wall ms", "tick alloc",
			"view B/entry", "inventory B/entry"},
	}
	for _, s := range shapes {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		label := fmt.Sprintf("%d × %d", s.nodes, s.per)
		if s.grow {
			label += " (+1 entry)"
		}
		cfg.logf("re-derive %s", label)
		invs := synth.Fleet(s.nodes, s.per)
		total := s.nodes * s.per
		invHeap := heapOf(func() any { return synth.Fleet(s.nodes, s.per) })
		viewHeap := heapOf(func() any { return inventory.NewView(invs) })
		old := inventory.NewView(invs)
		// The tick: node 0 republishes with every 100th entry renewed.
		next := append([]*inventory.NodeInventory(nil), invs...)
		next[0] = synth.Republish(invs[0], 100, 0)
		if s.grow {
			e := next[0].Entries[0]
			e.Name, e.ID = synth.EntryName(0, s.per), synth.EntryID(0, s.per)
			next[0].Entries = append(next[0].Entries, e)
		}
		full := measure(func() { inventory.NewView(next) }, time.Second)
		build := measure(func() { old.Next(next) }, time.Second)
		t.Add(label, total, stats.Ms(full.cpu),
			stats.Ms(build.cpu), stats.Ms(build.wall), stats.Bytes(build.bytes),
			fmt.Sprintf("%.0f", viewHeap/float64(total)), fmt.Sprintf("%.0f", invHeap/float64(total)))
	}
	t.Note("(+1 entry): the republished node also gains an entry, so its entry count changes (a claim or a release: nearly every production tick).")
	t.Note("tick = View.Next (the rebuild inventory.Source does: hashes only the republished node's entries). NewView is the from-scratch build, for comparison. CPU is process CPU time per tick; wall is inflated when the machine is busy. Watches re-derive nothing: they follow the live view's changes.")
	t.Note("Goals: ≤ 10 ms at 200 nodes / 50k sandboxes, ≤ 150 B/entry held by the view.")
	t.Note("Anchors: 1.6 ms at 20 nodes, 40 ms at 200 nodes × 50k sandboxes; 105 B per published inventory entry (the JSON object in etcd).")
	return t.Print(cfg.Out)
}

// heapOf returns the live heap that the value built by mk holds, from
// runtime.MemStats after GC.
func heapOf(mk func() any) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := mk()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(v)
	return float64(after.HeapAlloc) - float64(before.HeapAlloc)
}
