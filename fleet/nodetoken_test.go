package fleet_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
)

func keyOf(template string) pool.Key { return pool.Key{Template: template, Net: "none", Size: "small"} }

// A NodeInventory may publish any address. Pointed at a listener that is
// not the node (here a recorder), it receives only the publishing node's
// own token: not the fleet secret, not the operator root token, and a
// token every other node refuses.
func TestFleet_PublishedAddressReceivesOnlyThatNodesToken(t *testing.T) {
	f := fleettest.Start(t, 2)
	var mu sync.Mutex
	var got []string
	trap := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		http.Error(w, `{"error":"no"}`, http.StatusServiceUnavailable)
	}))
	defer trap.Close()
	evil := &inventory.NodeInventory{ObjectMeta: metav1.ObjectMeta{Name: "evil"}, Node: "evil",
		Address: strings.TrimPrefix(trap.URL, "http://"),
		Pools:   []inventory.Pool{{Template: "example.com/bait:1", Net: "none", Size: "small", Warm: 50}}}
	// "mimic" publishes node-0's address under its own name.
	mimic := &inventory.NodeInventory{ObjectMeta: metav1.ObjectMeta{Name: "mimic"}, Node: "mimic",
		Address: f.Nodes[0].Addr,
		Pools:   []inventory.Pool{{Template: "example.com/bait2:1", Net: "none", Size: "small", Warm: 50}}}
	f.View.Set(f.Nodes[0].Inventory(), f.Nodes[1].Inventory(), evil, mimic)
	fl := f.NewFleet(t, fleet.Config{Seed: 1})

	_, _ = fl.Claim(context.Background(), nodeapi.ClaimFor(keyOf("example.com/bait:1"), "ns/a"))
	_, _ = fl.Snapshots(context.Background())
	mu.Lock()
	seen := append([]string(nil), got...)
	mu.Unlock()
	if len(seen) == 0 {
		t.Fatal("the trap received nothing")
	}
	for _, h := range seen {
		tok := strings.TrimPrefix(h, "Bearer ")
		if tok != nodeapi.NodeToken(fleettest.Secret, "evil") || tok == fleettest.Secret || tok == fleettest.Token {
			t.Fatalf("trap received %q", h)
		}
		for _, n := range f.Nodes {
			if _, err := nodeapi.NewClient(n.Addr, tok).Info(context.Background()); nodeapi.StatusOf(err) != http.StatusUnauthorized {
				t.Fatalf("evil's token on %s: %v, want 401", n.Name, err)
			}
		}
	}
	// The mimic's claim reaches node-0 with the mimic's token: refused.
	_, err := fl.Claim(context.Background(), nodeapi.ClaimFor(keyOf("example.com/bait2:1"), "ns/b"))
	if err == nil {
		t.Fatal("a claim routed to node-0 under another name succeeded")
	}
	// The real nodes still answer the fleet with their own tokens.
	if _, err := fl.Snapshots(context.Background()); err != nil {
		t.Fatal(err)
	}
}
