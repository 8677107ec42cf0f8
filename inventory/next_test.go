package inventory

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nextCases are successive publishes: each step lists the inventories of a
// tick; a step reuses the previous step's object for a node unless the
// node republished (a fresh object).
func nextSteps() [][]*NodeInventory {
	t0 := metav1.NewTime(time.Unix(1700000000, 0))
	t1 := metav1.NewTime(time.Unix(1700003600, 0))
	e := func(name, id string, dl *metav1.Time) Entry {
		return Entry{Name: name, ID: id, Phase: "Running", ClaimRef: name, Deadline: dl}
	}
	a1 := inv("a", "10.0.0.1:1", e("ns/x", "sb_1", &t0), e("ns/y", "sb_2", &t0))
	b1 := inv("b", "10.0.0.2:1", e("ns/z", "sb_3", &t0))
	c1 := inv("c", "10.0.0.3:1", e("ns/w", "sb_4", &t0))
	a2 := inv("a", "10.0.0.1:1", e("ns/x", "sb_1", &t1), e("ns/y", "sb_2", &t0)) // x renewed
	b2 := inv("b", "10.0.0.2:1", e("ns/y", "sb_2", &t0), e("ns/z", "sb_3", &t0)) // y moved here too (dup)
	a3 := inv("a", "10.0.0.1:1", e("ns/x", "sb_1", &t1))                         // y left a
	renamed := inv("d", "10.0.0.4:1", e("ns/w", "sb_4", &t0))                    // c's entry now on d
	return [][]*NodeInventory{
		{a1, b1, c1},
		{a2, b1, c1},          // one node republished
		{a2, b1, c1},          // nothing changed
		{a2, b2, c1},          // a duplicate name across nodes
		{a3, b2, c1},          // the duplicate resolved
		{a3, b2, renamed},     // a node replaced by another
		{b2, a3},              // a node gone, input order changed
		{nil, a3, b2, a3, c1}, // nil and a repeated object
		{},
	}
}

func TestNext_EqualsNewView(t *testing.T) {
	var prev *View
	for step, invs := range nextSteps() {
		got, want := prev.Next(invs), NewView(invs)
		if got.Len() != want.Len() || got.Sum() != want.Sum() || got.dups != want.dups {
			t.Fatalf("step %d: Next len/sum/dups = %d/%d/%v, NewView %d/%d/%v", step, got.Len(), got.Sum(), got.dups, want.Len(), want.Sum(), want.dups)
		}
		for i := 0; i < want.Len(); i++ {
			g, w := got.At(i), want.At(i)
			if g.Hash != w.Hash || g.Entry != w.Entry || g.Node.Name != w.Node.Name {
				t.Fatalf("step %d slot %d: Next %s/%d, NewView %s/%d", step, i, g.Entry.Name, g.Hash, w.Entry.Name, w.Hash)
			}
		}
		prev = got
	}
}

func TestView_RepeatedIDResolvesToFirst(t *testing.T) {
	v := NewView([]*NodeInventory{
		inv("n2", "", Entry{Name: "ns/b", ID: "sb_1"}),
		inv("n1", "", Entry{Name: "ns/a", ID: "sb_1"}, Entry{Name: "ns/c", ID: "sb_2"}, Entry{Name: "ns/d"}),
	})
	if it, ok := v.ByID("sb_1"); !ok || it.Entry.Name != "ns/a" {
		t.Fatalf("ByID(sb_1) = %+v, %v; want ns/a on n1 (first in node order)", it.Entry, ok)
	}
	if it, ok := v.ByID("sb_2"); !ok || it.Entry.Name != "ns/c" {
		t.Fatalf("ByID(sb_2) = %+v, %v", it.Entry, ok)
	}
	if _, ok := v.ByID("sb_3"); ok {
		t.Fatal("ByID of an absent id found something")
	}
	if _, ok := v.ByName("ns/zz"); ok {
		t.Fatal("ByName of an absent name found something")
	}
}
