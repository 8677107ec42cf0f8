package simfleet

import (
	"context"
	"testing"
	"time"

	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
)

var key = pool.Key{Template: "img:1", Net: "none", Size: "small"}

func TestFleet_FillsClaimsAndPublishes(t *testing.T) {
	f, err := Start(Options{Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.SetWarm(ctx, key, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WaitWarm(ctx, key, 10, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	res, err := f.Nodes[1].Client.Claim(ctx, nodeapi.ClaimRequest{Template: key.Template, Net: key.Net, Size: key.Size, ClaimRef: "ns/a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.PublishNow(ctx); err != nil {
		t.Fatal(err)
	}
	it, ok := f.View.View().ByName("ns/a")
	if !ok || it.Entry.ID != res.ID || it.Node.Name != f.Nodes[1].Name {
		t.Fatalf("view has %+v %v for ns/a, want id %s on %s", it, ok, res.ID, f.Nodes[1].Name)
	}
	if f.Publishes() < 2 {
		t.Errorf("publishes = %d, want ≥ 2", f.Publishes())
	}
}
