package fleet

import (
	"fmt"
	"testing"

	"github.com/hearthvm/hearth/nodeapi"
)

func rec(ref, id, node, addr string) nodeapi.Sandbox {
	return nodeapi.Sandbox{ClaimRef: ref, ID: id, Node: node, NodeAddr: addr}
}

func TestClaimIndex_Bounded(t *testing.T) {
	x := newClaimIndex(4)
	for i := 0; i < 10; i++ {
		x.put(rec(fmt.Sprintf("ns/%d", i), fmt.Sprintf("sb_%d", i), "n", "a"))
	}
	if n := x.len(); n > 4 {
		t.Fatalf("index holds %d keys, bound 4", n)
	}
	if _, ok := x.get("sb_9", false); !ok {
		t.Fatal("newest id evicted")
	}
	if _, ok := x.get("ns/0", true); ok {
		t.Fatal("oldest ref kept")
	}
	// A key put again outlives the eviction of its older record.
	x = newClaimIndex(3)
	x.put(rec("ns/a", "", "n1", "a1"))
	x.put(rec("ns/b", "", "n", "a"))
	x.put(rec("ns/a", "", "n2", "a2")) // again
	x.put(rec("ns/c", "", "n", "a"))   // evicts the first ns/a record only
	if s, ok := x.get("ns/a", true); !ok || s.Node != "n2" {
		t.Fatalf("re-put key = %q, %v; want n2", s.Node, ok)
	}
	// Forget, then re-add: the fresh record survives the stale ring record.
	x = newClaimIndex(2)
	x.put(rec("ns/a", "sb_1", "n1", "a"))
	x.forget("ns/a", "sb_1")
	x.put(rec("ns/a", "", "n2", "a")) // ring: [ns/a sb_1 (stale)...]
	x.put(rec("ns/b", "", "n3", "a"))
	if s, ok := x.get("ns/a", true); !ok || s.Node != "n2" {
		t.Fatalf("re-added after forget = %q, %v; want n2", s.Node, ok)
	}
	for i := 0; i < 100; i++ {
		x.put(rec(fmt.Sprintf("ns/x%d", i), "", "n", "a"))
		x.put(rec("ns/hot", "", "n", "a"))
	}
	if n := x.len(); n > 2 {
		t.Fatalf("index holds %d keys, bound 2", n)
	}
}
