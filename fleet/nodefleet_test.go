package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
)

var spec = nodeapi.PoolSpec{Template: key.Template, Net: key.Net, Size: key.Size}

func newFleet(t testing.TB, f *fleettest.Fleet, seed uint64) *fleet.NodeFleet {
	return f.NewFleet(t, fleet.Config{Seed: seed})
}

// newStaticFleet is a fleet over f's published view only (no change
// streams), for tests of what the fleet does with what a view advertises
// or lacks: f.View.Set and f.Publish are then the view's only changes.
func newStaticFleet(f *fleettest.Fleet, seed uint64) *fleet.NodeFleet {
	return fleet.New(fleet.Config{View: fleettest.StaticView{Static: f.View}, Secret: fleettest.Secret, Seed: seed})
}

func TestFleet_EquallyWarmNodesAllGetClaims(t *testing.T) {
	f := fleettest.Start(t, 4)
	f.SetWarm(t, spec, 60, 60, 60, 60)
	fl := newFleet(t, f, 7)
	counts := map[string]int{}
	for i := 0; i < 200; i++ {
		d, err := fl.Claim(context.Background(), nodeapi.ClaimFor(key, ""))
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		counts[d.Node]++
	}
	for _, n := range f.Nodes {
		if counts[n.Name] == 0 {
			t.Errorf("node %s got no claims over 200: %v", n.Name, counts)
		}
	}
}

func TestFleet_WarmerNodeGetsMostClaims(t *testing.T) {
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 200, 200)
	// Advertise 100 vs 1 (a stale publish), whatever the nodes hold.
	invs := []*inventory.NodeInventory{f.Nodes[0].Inventory(), f.Nodes[1].Inventory()}
	invs[0].Pools[0].Warm, invs[1].Pools[0].Warm = 100, 1
	f.View.Set(invs...)
	fl := newStaticFleet(f, 11)
	warm := 0
	for i := 0; i < 200; i++ {
		d, err := fl.Claim(context.Background(), nodeapi.ClaimFor(key, ""))
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		if d.Node == f.Nodes[0].Name {
			warm++
		}
	}
	if warm <= 130 {
		t.Fatalf("warm 100 vs 1: the warm node delivered %d of 200, want > 130", warm)
	}
}

func TestFleet_DrainedNodeIsSkippedThenNoWarmCapacity(t *testing.T) {
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 1, 1)
	// Node 0 is drained behind the view's back: it answers 429.
	if _, err := f.Nodes[0].Client.Claim(context.Background(), nodeapi.ClaimRequest{Template: key.Template, Net: key.Net, Size: key.Size}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Nodes[0].Client.PutPools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	fleettest.WaitWarm(t, f.Nodes[0], key.Template, 0)
	fl := newStaticFleet(f, 3)
	for i := 0; i < 4; i++ { // whatever the sample, node 1 delivers
		d, err := fl.Claim(context.Background(), nodeapi.ClaimFor(key, "ns/x"))
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		if d.Node != f.Nodes[1].Name {
			t.Fatalf("delivered by %s, want node-1", d.Node)
		}
		if err := fl.Release(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		fleettest.WaitWarm(t, f.Nodes[1], key.Template, 1)
	}
	f.View.Set() // nothing advertised
	_, err := fl.Claim(context.Background(), nodeapi.ClaimFor(key, ""))
	var nw *fleet.ErrNoWarmCapacity
	if !errors.As(err, &nw) {
		t.Fatalf("claim with nothing advertised = %v, want ErrNoWarmCapacity", err)
	}
}

func TestFleet_LookupsNeverWaitForAPublish(t *testing.T) {
	f := fleettest.Start(t, 3)
	f.SetWarm(t, spec, 2, 2, 2)
	fl := newFleet(t, f, 5)
	d, err := fl.Claim(context.Background(), nodeapi.ClaimFor(key, "ns/web"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The view has not been published since the claim.
	if _, ok := f.View.View().ByName("ns/web"); ok {
		t.Fatal("test setup: the view already holds the claim")
	}
	for name, fl := range map[string]*fleet.NodeFleet{"claiming replica": fl, "second replica (empty index)": newFleet(t, f, 6)} {
		loc, err := fl.ByRef(ctx, "ns/web")
		if err != nil || loc.ID != d.ID || loc.Node != d.Node {
			t.Fatalf("%s: ByRef = %+v, %v; want %s on %s", name, loc, err, d.ID, d.Node)
		}
		loc, err = fl.ByID(ctx, d.ID)
		if err != nil || loc.ClaimRef != "ns/web" || loc.NodeAddr == "" {
			t.Fatalf("%s: ByID = %+v, %v", name, loc, err)
		}
	}
	if _, err := newFleet(t, f, 8).ByRef(ctx, "ns/nope"); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("ByRef(missing) = %v, want ErrNotFound", err)
	}
	if _, err := newFleet(t, f, 8).ByID(ctx, "sb_nope"); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("ByID(missing) = %v, want ErrNotFound", err)
	}

	// Verbs by claim id; node statuses come through.
	loc, _ := fl.ByRef(ctx, "ns/web")
	if err := fl.Pause(ctx, loc); err != nil {
		t.Fatal(err)
	}
	if err := fl.Resume(ctx, loc); err != nil {
		t.Fatal(err)
	}
	kids, err := fl.Fork(ctx, loc, 2, 0)
	if err != nil || len(kids) != 2 {
		t.Fatalf("Fork = %+v, %v", kids, err)
	}
	for _, k := range kids {
		if got, err := newFleet(t, f, 9).ByID(ctx, k.ID); err != nil || got.Node != d.Node {
			t.Fatalf("fork child %s: ByID = %+v, %v", k.ID, got, err)
		}
		if k.ClaimRef != "" {
			if got, err := newFleet(t, f, 9).ByRef(ctx, k.ClaimRef); err != nil || got.ID != k.ID {
				t.Fatalf("fork child by ref %s: %+v, %v", k.ClaimRef, got, err)
			}
		}
	}
	ck, err := fl.Snapshot(ctx, loc, "snap")
	if err != nil || ck.ID == "" || ck.Node != d.Node {
		t.Fatalf("Snapshot = %+v, %v", ck, err)
	}
	cks, err := newFleet(t, f, 10).Snapshots(ctx)
	if err != nil || len(cks) != 1 || cks[0].ID != ck.ID {
		t.Fatalf("Snapshots = %+v, %v", cks, err)
	}
	if err := newFleet(t, f, 10).DeleteSnapshot(ctx, ck.ID); err != nil {
		t.Fatal(err)
	}
	if err := newFleet(t, f, 10).DeleteSnapshot(ctx, ck.ID); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("second DeleteSnapshot = %v, want ErrNotFound", err)
	}
	if _, err := fl.Stats(ctx, loc); err != nil {
		t.Fatal(err)
	}
	if _, err := fl.Renew(ctx, loc, 60); err != nil {
		t.Fatal(err)
	}
	if err := fl.Release(ctx, loc); err != nil {
		t.Fatal(err)
	}
	if err := fl.Release(ctx, loc); !errors.Is(err, fleet.ErrNotFound) || nodeapi.StatusOf(err) != http.StatusNotFound {
		t.Fatalf("second release = %v, want ErrNotFound carrying the node's 404", err)
	}
	if _, err := fl.LiveByRef(ctx, "ns/web"); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("LiveByRef after release = %v, want ErrNotFound", err)
	}
	if err := fl.Release(ctx, nodeapi.Sandbox{Node: d.Node}); err == nil {
		t.Fatal("release without a claim id succeeded")
	}

	// After a publish, List and view lookups see the children.
	f.Publish()
	all, err := fl.List(ctx)
	if err != nil || len(all) != 2 {
		t.Fatalf("List = %d entries, %v; want the 2 fork children", len(all), err)
	}
	_ = metav1.Now
}

func TestFleet_ConcurrentClaimsAndLookups(t *testing.T) {
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 20, 20)
	fl := newFleet(t, f, 1)
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ref := "ns/c" + string(rune('a'+i))
			d, err := fl.Claim(context.Background(), nodeapi.ClaimFor(key, ref))
			if err != nil {
				errs <- err
				return
			}
			loc, err := fl.ByRef(context.Background(), ref)
			if err != nil || loc.ID != d.ID {
				errs <- errors.New("lookup after claim missed " + ref)
				return
			}
			f.Publish()
			if err := fl.Release(context.Background(), loc); err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestFleet_UnreachableNodeMakesMissIncomplete(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 1)
	ln := f.Nodes[0].Inventory()
	dead := &inventory.NodeInventory{ObjectMeta: metav1.ObjectMeta{Name: "dead"}, Node: "dead", Address: "127.0.0.1:1",
		Pools: []inventory.Pool{{Template: key.Template, Net: "none", Size: "small", Warm: 50}}}
	f.View.Set(ln, dead)
	fl := newFleet(t, f, 2)
	// The dead node advertises more, so it is sampled; its dial error re-samples.
	for i := 0; i < 1; i++ {
		if _, err := fl.Claim(context.Background(), nodeapi.ClaimFor(key, "ns/x")); err != nil {
			t.Fatalf("claim with a dead candidate: %v", err)
		}
	}
	_, err := newFleet(t, f, 3).LiveByRef(context.Background(), "ns/missing")
	if !errors.Is(err, fleet.ErrNotFound) || !errors.Is(err, fleet.ErrIncomplete) {
		t.Fatalf("miss with a dead node = %v, want ErrNotFound and ErrIncomplete", err)
	}
	if loc, err := newFleet(t, f, 4).ByRef(context.Background(), "ns/x"); err != nil || loc.Node != "node-0" {
		t.Fatalf("ByRef with a dead node = %+v, %v", loc, err)
	}
}

func TestFleet_ListShowsClaimsBeforePublishWithTheirRecord(t *testing.T) {
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 2, 2)
	fl := newFleet(t, f, 11)
	ctx := context.Background()
	md := map[string]string{"team": "x"}
	d, err := fl.Claim(ctx, nodeapi.ClaimRequest{Template: key.Template, Net: key.Net, Size: key.Size, ClaimRef: "ns/early", Metadata: md})
	if err != nil {
		t.Fatal(err)
	}
	if d.Node == "" || d.NodeAddr == "" || d.AgentAddr == "" || d.Token == "" || d.Net != "none" || d.Size != "small" {
		t.Fatalf("claim record = %+v; want it located, with agent address, token and key", d)
	}
	find := func(all []nodeapi.Sandbox) *nodeapi.Sandbox {
		for i := range all {
			if all[i].ID == d.ID {
				return &all[i]
			}
		}
		return nil
	}
	all, err := fl.List(ctx)
	if s := find(all); err != nil || s == nil || s.Metadata["team"] != "x" || s.Token != "" {
		t.Fatalf("List before publish = %+v, %v; want the claim with its metadata and no token", s, err)
	}
	f.Publish()
	all, err = fl.List(ctx)
	if s := find(all); err != nil || s == nil || s.Metadata["team"] != "x" || s.Net != "none" {
		t.Fatalf("List after publish = %+v, %v; want the record filled from the index", s, err)
	}
	if err := fl.Release(ctx, d); err != nil {
		t.Fatal(err)
	}
	f.Publish()
	if all, _ := fl.List(ctx); find(all) != nil {
		t.Fatal("a released claim is still listed after its node published")
	}
}

func TestHTTPStatus(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, 200},
		{&fleet.ErrNoWarmCapacity{Key: key}, 503},
		{&nodeapi.HTTPError{Status: 429}, 429},
		{fmt.Errorf("fork: %w", &nodeapi.HTTPError{Status: 429}), 429},
		{&nodeapi.HTTPError{Status: 503}, 503},
		{fleet.ErrNotFound, 404},
		{&nodeapi.HTTPError{Status: 404}, 404},
		{&nodeapi.HTTPError{Status: 409}, 409},
		{&nodeapi.HTTPError{Status: 400}, 400},
		{&nodeapi.HTTPError{Status: 413}, 400},
		{pool.ErrInvalidKey, 400},
		{&fleet.LeaseError{Reason: "past"}, 400},
		{context.DeadlineExceeded, 504},
		{&nodeapi.HTTPError{Status: 500}, 500},
		{errors.New("dial tcp: refused"), 500},
	} {
		if got := fleet.HTTPStatus(c.err); got != c.want {
			t.Errorf("HTTPStatus(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
