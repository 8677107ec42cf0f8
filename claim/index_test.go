package claim

import (
	"fmt"
	"testing"
)

func TestClaimIndex_Bounded(t *testing.T) {
	x := newClaimIndex(4)
	for i := 0; i < 10; i++ {
		x.put(fmt.Sprintf("ns/%d", i), fmt.Sprintf("sb_%d", i), "n", "a")
	}
	if n := x.len(); n > 4 {
		t.Fatalf("index holds %d keys, bound 4", n)
	}
	if _, _, ok := x.get("sb_9", false); !ok {
		t.Fatal("newest id evicted")
	}
	if _, _, ok := x.get("ns/0", true); ok {
		t.Fatal("oldest ref kept")
	}
	// A key put again outlives the eviction of its older record.
	x = newClaimIndex(3)
	x.put("ns/a", "", "n1", "a1")
	x.put("ns/b", "", "n", "a")
	x.put("ns/a", "", "n2", "a2") // again
	x.put("ns/c", "", "n", "a")   // evicts the first ns/a record only
	if node, _, ok := x.get("ns/a", true); !ok || node != "n2" {
		t.Fatalf("re-put key = %q, %v; want n2", node, ok)
	}
	// Forget, then re-add: the fresh record survives the stale ring record.
	x = newClaimIndex(2)
	x.put("ns/a", "sb_1", "n1", "a")
	x.forget("ns/a", "sb_1")
	x.put("ns/a", "", "n2", "a") // ring: [ns/a sb_1 (stale)...]
	x.put("ns/b", "", "n3", "a")
	if node, _, ok := x.get("ns/a", true); !ok || node != "n2" {
		t.Fatalf("re-added after forget = %q, %v; want n2", node, ok)
	}
	for i := 0; i < 100; i++ {
		x.put(fmt.Sprintf("ns/x%d", i), "", "n", "a")
		x.put("ns/hot", "", "n", "a")
	}
	if n := x.len(); n > 2 {
		t.Fatalf("index holds %d keys, bound 2", n)
	}
}
