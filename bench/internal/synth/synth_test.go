package synth

import (
	"sort"
	"testing"
)

func TestSplit_SpreadsEveryEntrySorted(t *testing.T) {
	invs := Split(3, 10)
	total := 0
	ids := map[string]bool{}
	for _, inv := range invs {
		total += len(inv.Entries)
		if !sort.SliceIsSorted(inv.Entries, func(a, b int) bool { return inv.Entries[a].Name < inv.Entries[b].Name }) {
			t.Errorf("%s: entries not sorted by name", inv.Node)
		}
		for _, e := range inv.Entries {
			if ids[e.ID] {
				t.Errorf("duplicate id %s", e.ID)
			}
			ids[e.ID] = true
		}
	}
	if total != 10 || len(invs[0].Entries) != 4 || len(invs[2].Entries) != 3 {
		t.Errorf("split 10 over 3 = %d total, %d/%d, want 10, 4/3", total, len(invs[0].Entries), len(invs[2].Entries))
	}
}

func TestRepublish_RenewsOnlyEveryStrideAndKeepsInput(t *testing.T) {
	in := Node(1, 10)
	before := in.Entries[0].Deadline.Time
	out := Republish(in, 5, 0)
	if !in.Entries[0].Deadline.Time.Equal(before) {
		t.Fatal("Republish modified its input")
	}
	changed := 0
	for j := range out.Entries {
		if !out.Entries[j].Deadline.Equal(in.Entries[j].Deadline) {
			changed++
		}
	}
	if changed != 2 || out.ResourceVersion == in.ResourceVersion {
		t.Errorf("changed %d entries (rv %q → %q), want 2 and a new rv", changed, in.ResourceVersion, out.ResourceVersion)
	}
}
