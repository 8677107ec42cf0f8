package inventory

import (
	"fmt"
	"testing"
)

// BenchmarkView_Next measures a watch tick's rebuild: one node republished
// (a fresh object, one entry renewed), every other node's object reused.
func BenchmarkView_Next(b *testing.B) {
	for _, s := range []struct{ nodes, per int }{{200, 250}, {20, 2600}} {
		b.Run(fmt.Sprintf("%dx%d", s.nodes, s.per), func(b *testing.B) {
			invs := fleet(s.nodes, s.per)
			old := NewView(invs)
			next := append([]*NodeInventory(nil), invs...)
			next[0] = invs[0].DeepCopy()
			next[0].Entries[0].Phase = "Paused"
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				old.Next(next)
			}
		})
	}
}

// sameIndexes fails unless got resolves every name and id of the inventories
// in seen exactly as want does (including names and ids now absent).
func sameIndexes(t *testing.T, step int, got, want *View, seen [][]*NodeInventory) {
	t.Helper()
	if got.Len() != want.Len() || got.Sum() != want.Sum() || got.dups != want.dups {
		t.Fatalf("step %d: Next len/sum/dups = %d/%d/%v, NewView %d/%d/%v", step, got.Len(), got.Sum(), got.dups, want.Len(), want.Sum(), want.dups)
	}
	for _, invs := range seen {
		for _, x := range invs {
			if x == nil {
				continue
			}
			for i := range x.Entries {
				e := &x.Entries[i]
				var g, w []string
				got.EachByName(e.Name, func(it Item) bool { g = append(g, it.Node.Name+"/"+it.Entry.ID); return true })
				want.EachByName(e.Name, func(it Item) bool { w = append(w, it.Node.Name+"/"+it.Entry.ID); return true })
				if fmt.Sprint(g) != fmt.Sprint(w) {
					t.Fatalf("step %d: EachByName(%s) = %v, want %v", step, e.Name, g, w)
				}
				gi, gok := got.ByID(e.ID)
				wi, wok := want.ByID(e.ID)
				if gok != wok || (gok && (gi.Entry != wi.Entry || gi.Node.Name != wi.Node.Name || gi.Hash != wi.Hash)) {
					t.Fatalf("step %d: ByID(%q) differs", step, e.ID)
				}
			}
		}
	}
}

func TestNext_PatchedIndexesEqualNewView(t *testing.T) {
	e := func(name, id string) Entry { return Entry{Name: name, ID: id, Phase: "Running"} }
	a1 := inv("a", "", e("ns/1", "sb_1"), e("ns/2", "sb_2"))
	b1 := inv("b", "", e("ns/3", "sb_3"), e("ns/4", "sb_4"))
	c1 := inv("c", "", e("ns/5", "sb_5"))
	a2 := inv("a", "", e("ns/1", "sb_1"), e("ns/4", "sb_4"))  // ns/4 moved from b …
	b2 := inv("b", "", e("ns/3", "sb_3"), e("ns/2", "sb_2"))  // … and ns/2 from a
	a3 := inv("a", "", e("ns/1", "sb_1"), e("ns/6", ""))      // an entry without id
	c2 := inv("c", "", e("ns/3", "sb_9"))                     // duplicate name (general path)
	c3 := inv("c", "", e("ns/7", "sb_3"))                     // repeated id (general path)
	c4 := inv("c", "", e("ns/5", "sb_5"))                     // back to no duplicates
	a4 := inv("a", "", e("ns/1", "sb_1"), e("ns/2", "sb_2"))  // renamed entries …
	b4 := inv("b", "", e("ns/8", "sb_8"), e("ns/4", "sb_44")) // … and a changed id
	steps := [][]*NodeInventory{
		{a1, b1, c1},
		{a2, b1, c1}, // ns/4 on a and b: duplicate
		{a2, b2, c1}, // swapped between two republished nodes
		{a3, b2, c1},
		{a3, b2, c2},
		{a3, b2, c3},
		{a3, b2, c4},
		{a4, b4, c4},
		{a4, b4, c4},
		{b4, a4, c4}, // input order changed, same view
		// Entry counts change (a claim, a release): the patch path.
		{inv("a", "", e("ns/1", "sb_1"), e("ns/2", "sb_2"), e("ns/9", "sb_9")), b4, c4},
		{inv("a", "", e("ns/1", "sb_1")), b4, inv("c", "", e("ns/5", "sb_5"), e("ns/2", "sb_2"), e("ns/10", ""))},
		{inv("a", ""), inv("b", "", e("ns/8", "sb_8")), inv("c", "", e("ns/5", "sb_5"), e("ns/2", "sb_2"), e("ns/4", "sb_44"))},
		{inv("a", "", e("ns/4", "sb_44")), inv("b", "", e("ns/8", "sb_8")), inv("c", "", e("ns/5", "sb_5"))}, // moved, count changed
		{inv("a", "", e("ns/4", "sb_44"), e("ns/8", "sb_x")), inv("b", "", e("ns/8", "sb_8")), c4},           // duplicate name (general path)
	}
	fleetSteps := func() [][]*NodeInventory {
		invs := fleet(8, 50)
		var out [][]*NodeInventory
		cur := invs
		out = append(out, cur)
		for tick := 0; tick < 20; tick++ {
			next := append([]*NodeInventory(nil), cur...)
			n := tick % len(next)
			next[n] = next[n].DeepCopy()
			next[n].Entries[tick%50].Phase = fmt.Sprint("p", tick)
			if tick%3 == 0 { // rename one entry, keep the count
				next[n].Entries[(tick+1)%50].Name = fmt.Sprint("ns/renamed-", tick)
			}
			cur = next
			out = append(out, cur)
		}
		// Republished nodes gain and lose entries (claims and releases).
		for tick := 0; tick < 30; tick++ {
			next := append([]*NodeInventory(nil), cur...)
			for _, n := range []int{tick % len(next), (tick * 3) % len(next)} {
				next[n] = next[n].DeepCopy()
				es := next[n].Entries
				switch {
				case tick%3 == 0 && len(es) > 0: // release: drop an entry from the middle
					i := (tick * 7) % len(es)
					es = append(es[:i:i], es[i+1:]...)
				case tick%3 == 1: // claim: a new entry
					es = append(es, Entry{Name: fmt.Sprintf("ns/new-%d-%d", tick, n), ID: fmt.Sprintf("sb_new_%d_%d", tick, n), Phase: "Running"})
				default: // two new ones, one of them without an id
					es = append(es, Entry{Name: fmt.Sprintf("ns/new2-%d-%d", tick, n), ID: fmt.Sprintf("sb_new2_%d_%d", tick, n)},
						Entry{Name: fmt.Sprintf("ns/noid-%d-%d", tick, n)})
				}
				next[n].Entries = es
			}
			cur = next
			out = append(out, cur)
		}
		return out
	}
	for name, ss := range map[string][][]*NodeInventory{"small": steps, "fleet": fleetSteps()} {
		t.Run(name, func(t *testing.T) {
			var prev *View
			for step, invs := range ss {
				got, want := prev.Next(invs), NewView(invs)
				sameIndexes(t, step, got, want, ss[:step+1])
				prev = got
			}
		})
	}
}
