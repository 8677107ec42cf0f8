package inventory

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func inv(node, addr string, entries ...Entry) *NodeInventory {
	return &NodeInventory{ObjectMeta: metav1.ObjectMeta{Name: node}, Node: node, Address: addr, Entries: entries}
}

func TestView_IndexesByNameAndID(t *testing.T) {
	v := NewView([]*NodeInventory{
		inv("n2", "10.0.0.2:1", Entry{Name: "ns/a", ID: "sb_2", Phase: "Running"}),
		nil,
		inv("n1", "10.0.0.1:1", Entry{Name: "ns/a", ID: "sb_1", Phase: "Running"}, Entry{Name: "ns/b", ID: "sb_3"}),
	})
	if got := v.Len(); got != 3 {
		t.Fatalf("Len = %d, want 3", got)
	}
	if v.Nodes()[0].Name != "n1" || v.Nodes()[1].Name != "n2" {
		t.Fatalf("nodes not ordered by name: %v, %v", v.Nodes()[0].Name, v.Nodes()[1].Name)
	}
	it, ok := v.ByName("ns/a")
	if !ok || it.Node.Name != "n1" || it.Entry.ID != "sb_1" {
		t.Fatalf("ByName(ns/a) = %+v, %v; want the n1 entry first", it, ok)
	}
	var ids []string
	v.EachByName("ns/a", func(it Item) bool { ids = append(ids, it.Entry.ID); return true })
	if fmt.Sprint(ids) != "[sb_1 sb_2]" {
		t.Fatalf("EachByName(ns/a) = %v, want both duplicates in order", ids)
	}
	it, ok = v.ByID("sb_2")
	if !ok || it.Node.Name != "n2" || it.Node.Address != "10.0.0.2:1" {
		t.Fatalf("ByID(sb_2) = %+v, %v", it, ok)
	}
	if _, ok := v.ByID(""); ok {
		t.Fatal("ByID(\"\") found something")
	}
	if _, ok := v.ByName("ns/zz"); ok {
		t.Fatal("ByName of a missing name found something")
	}
	if n, ok := v.Node("n2"); !ok || n.Address != "10.0.0.2:1" {
		t.Fatalf("Node(n2) = %+v, %v", n, ok)
	}
	var nilView *View
	if nilView.Len() != 0 || nilView.Sum() == 0 {
		t.Fatal("nil view is not empty")
	}
}

func TestHash_ChangesWithEveryField(t *testing.T) {
	t0 := metav1.NewTime(time.Unix(1700000000, 0))
	t1 := metav1.NewTime(time.Unix(1700000001, 0))
	base := Entry{Name: "ns/a", ID: "sb_1", Phase: "Running", Template: "img", ClaimRef: "ns/a", AgentAddr: "1.2.3.4:5", Deadline: &t0, ClaimedAt: &t0}
	h0 := Hash("n1", &base)
	if h0 != Hash("n1", &base) {
		t.Fatal("hash not deterministic")
	}
	muts := map[string]func(e *Entry){
		"name":      func(e *Entry) { e.Name = "ns/b" },
		"id":        func(e *Entry) { e.ID = "sb_2" },
		"phase":     func(e *Entry) { e.Phase = "Paused" },
		"template":  func(e *Entry) { e.Template = "img2" },
		"claimRef":  func(e *Entry) { e.ClaimRef = "" },
		"addr":      func(e *Entry) { e.AgentAddr = "1.2.3.4:6" },
		"deadline":  func(e *Entry) { e.Deadline = &t1 },
		"claimedAt": func(e *Entry) { e.ClaimedAt = nil },
		"boundary":  func(e *Entry) { e.Name, e.ID = "ns/as", "b_1" },
		"e2b":       func(e *Entry) { e.E2B = true },
	}
	for name, m := range muts {
		e := base
		m(&e)
		if Hash("n1", &e) == h0 {
			t.Errorf("%s: hash unchanged", name)
		}
	}
	if Hash("n2", &base) == h0 {
		t.Error("node: hash unchanged")
	}
}

// fleet builds nodes×perNode entries.
func fleet(nodes, perNode int) []*NodeInventory {
	ts := metav1.NewTime(time.Unix(1700000000, 0))
	out := make([]*NodeInventory, nodes)
	for n := range out {
		es := make([]Entry, perNode)
		for i := range es {
			name := fmt.Sprintf("ns%d/sandbox-%d-%d", i%7, n, i)
			es[i] = Entry{Name: name, ID: fmt.Sprintf("sb_%08x%08x", n, i), Phase: "Running", Template: "ghcr.io/x/y:1", ClaimRef: name, AgentAddr: "10.0.0.1:4000", Deadline: &ts, ClaimedAt: &ts}
		}
		out[n] = inv(fmt.Sprintf("node-%03d", n), "10.0.0.1:7000", es...)
	}
	return out
}

var sizes = []int{1_000, 10_000, 100_000, 1_000_000}

func split(total int) (nodes, per int) {
	nodes = 20
	if total < nodes {
		nodes = 1
	}
	return nodes, total / nodes
}

// BenchmarkView_Resolve measures resolving one sandbox by name and by id:
// allocations must stay flat (0) at every size.
func BenchmarkView_Resolve(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			invs := fleet(split(n))
			v := NewView(invs)
			name := invs[len(invs)/2].Entries[0].Name
			id := invs[len(invs)/2].Entries[0].ID
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, ok := v.ByName(name); !ok {
					b.Fatal("miss")
				}
				if _, ok := v.ByID(id); !ok {
					b.Fatal("miss")
				}
			}
		})
	}
}

// BenchmarkView_HeapPerEntry reports the heap a View holds per entry beyond
// the NodeInventory objects (target ≤ 150 B/entry).
func BenchmarkView_HeapPerEntry(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			invs := fleet(split(n))
			var perEntry float64
			for i := 0; i < b.N; i++ {
				perEntry = heapPerEntry(invs)
			}
			b.ReportMetric(perEntry, "B/entry")
			if perEntry > 150 {
				b.Errorf("view holds %.0f B per entry, want ≤ 150", perEntry)
			}
		})
	}
}

func heapPerEntry(invs []*NodeInventory) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := NewView(invs)
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := float64(after.HeapAlloc) - float64(before.HeapAlloc)
	per := held / float64(v.Len())
	runtime.KeepAlive(v)
	return per
}

// BenchmarkView_Build measures building a View (a watch tick after a publish).
func BenchmarkView_Build(b *testing.B) {
	for _, n := range sizes[:3] {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			invs := fleet(split(n))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				NewView(invs)
			}
		})
	}
}

func TestHash_LabelsInKeyOrderWithoutAllocating(t *testing.T) {
	a := Entry{Name: "ns/a", Labels: map[string]string{"x": "1", "y": "2", "z": "3"}}
	b := Entry{Name: "ns/a", Labels: map[string]string{"z": "3", "y": "2", "x": "1"}}
	c := Entry{Name: "ns/a", Labels: map[string]string{"x": "1", "y": "2", "z": "4"}}
	if Hash("n", &a) != Hash("n", &b) || Hash("n", &a) == Hash("n", &c) {
		t.Fatal("label hashing depends on map order or ignores values")
	}
	if Hash("n", &Entry{Name: "ns/a", Labels: map[string]string{}}) != Hash("n", &Entry{Name: "ns/a"}) {
		t.Fatal("empty and nil labels hash differently (a live read and a published entry would disagree)")
	}
	if Hash("n", &a) == Hash("n", &Entry{Name: "ns/a", Annotations: a.Labels}) {
		t.Fatal("labels and annotations are not told apart")
	}
	if n := testing.AllocsPerRun(100, func() { Hash("n", &a) }); n != 0 {
		t.Fatalf("Hash of an entry with 3 labels allocates %v times", n)
	}
}
