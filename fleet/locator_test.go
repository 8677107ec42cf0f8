package fleet_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
)

// fakeLocator is a Locator over fixed entries.
type fakeLocator struct{ items []inventory.Item }

func (l *fakeLocator) Current(name string) (inventory.Versioned, bool) {
	for _, it := range l.items {
		if it.Entry.Name == name {
			return inventory.Versioned{Item: it}, true
		}
	}
	return inventory.Versioned{}, false
}

func (l *fakeLocator) CurrentByID(id string) (inventory.Versioned, bool) {
	for _, it := range l.items {
		if it.Entry.ID == id {
			return inventory.Versioned{Item: it}, true
		}
	}
	return inventory.Versioned{}, false
}

func (l *fakeLocator) List(keep func(inventory.Item) bool) ([]inventory.Versioned, uint64) {
	var out []inventory.Versioned
	for _, it := range l.items {
		if keep == nil || keep(it) {
			out = append(out, inventory.Versioned{Item: it})
		}
	}
	return out, 1
}

// viewAndLocator is a View that is also a Locator (as *fleetview.Live is).
type viewAndLocator struct {
	*inventory.Static
	*fakeLocator
}

func entryItem(node *inventory.Node, id, name, agent string) inventory.Item {
	at := metav1.NewTime(time.Now().Truncate(time.Second))
	return inventory.Item{Node: node, Entry: &inventory.Entry{ID: id, Name: name, ClaimRef: name, AgentAddr: agent,
		Template: key.Template, Phase: "Running", ClaimedAt: &at}}
}

// With a Locator, the fleet's lookups, Held and List find sandboxes there,
// never in the View's entries: an entry the View still lists but the
// Locator no longer holds is gone. A lookup asks the node the Locator
// names and returns that node's record (an entry the node does not hold
// is not found); List lists the Locator's entries.
func TestFleet_LookupsReadTheLocatorNotTheViewsEntries(t *testing.T) {
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 1, 0)
	ctx := context.Background()
	n0 := f.Nodes[0]
	// A claim on node-0 directly: no fleet indexed it.
	direct, err := n0.Client.Claim(ctx, nodeapi.ClaimRequest{Template: key.Template, Net: key.Net, Size: key.Size, ClaimRef: "ns/direct"})
	if err != nil {
		t.Fatal(err)
	}
	node0 := &inventory.Node{Name: n0.Name, Address: n0.Addr}
	loc := &fakeLocator{items: []inventory.Item{
		entryItem(node0, "sb_live", "ns/live", "10.9.9.9:1"),
		// The node's record, not this entry, is what a lookup returns.
		entryItem(node0, direct.ID, "ns/direct", "10.9.9.9:2"),
	}}
	// The View's entries are stale: they list a sandbox long gone.
	stale := n0.Inventory()
	stale.Entries = append(stale.Entries, inventory.EntryOf(&nodeapi.Sandbox{ID: "sb_stale", ClaimRef: "ns/stale", Node: n0.Name, Template: key.Template}))
	f.View.Set(stale, f.Nodes[1].Inventory())

	for _, c := range []struct {
		name string
		fl   *fleet.NodeFleet
	}{
		{"a View that is a Locator", fleet.New(fleet.Config{View: viewAndLocator{f.View, loc}, Secret: fleettest.Secret})},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, l := range []struct {
				op, key string
				wantID  string // "" means ErrNotFound
			}{
				{"ByRef", "ns/live", ""},
				{"ByID", "sb_live", ""},
				{"ByRef", "ns/stale", ""},
				{"ByID", "sb_stale", ""},
				{"ByRef", "ns/direct", direct.ID},
				{"ByID", direct.ID, direct.ID},
			} {
				var got nodeapi.Sandbox
				var err error
				if l.op == "ByRef" {
					got, err = c.fl.ByRef(ctx, l.key)
				} else {
					got, err = c.fl.ByID(ctx, l.key)
				}
				switch {
				case l.wantID == "" && !errors.Is(err, fleet.ErrNotFound):
					t.Errorf("%s(%s) = %+v, %v; want ErrNotFound (no node holds it)", l.op, l.key, got, err)
				case l.wantID != "" && (err != nil || got.ID != l.wantID || got.Node != n0.Name || got.NodeAddr != n0.Addr):
					t.Errorf("%s(%s) = %+v, %v; want %s on %s at %s", l.op, l.key, got, err, l.wantID, n0.Name, n0.Addr)
				}
				if l.wantID == direct.ID && err == nil && got.AgentAddr != direct.AgentAddr {
					t.Errorf("%s(%s) = %+v; want node-0's record (agent %s), not the Locator's entry", l.op, l.key, got, direct.AgentAddr)
				}
			}
			// Held verifies with the one node the Locator names.
			for _, h := range []struct {
				ref  string
				want bool
			}{{"ns/direct", true}, {"ns/live", false}, {"ns/stale", false}, {"ns/none", false}} {
				if s, ok := c.fl.Held(ctx, h.ref); ok != h.want || (ok && s.ID != direct.ID) {
					t.Errorf("Held(%s) = %+v %v, want %v", h.ref, s, ok, h.want)
				}
			}
			list, err := c.fl.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, s := range list {
				ids = append(ids, s.ID)
			}
			if !slices.Contains(ids, "sb_live") || !slices.Contains(ids, direct.ID) || slices.Contains(ids, "sb_stale") {
				t.Errorf("List ids %v, want the Locator's (sb_live, %s), not the View's sb_stale", ids, direct.ID)
			}
		})
	}
}

// Over a running fleetview.Live (the API server's wiring), a sandbox
// claimed on a node directly is found by name and id as soon as its
// stream delivers it, and gone as soon as it is released — no publish,
// no View rebuild in between.
func TestFleet_OverALiveViewFindsDirectClaimsAtOnce(t *testing.T) {
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 1, 1)
	live := f.StartLive(t)
	ctx := context.Background()
	fl := fleet.New(fleet.Config{View: live, Secret: fleettest.Secret})
	n1 := f.Nodes[1]
	s, err := n1.Client.Claim(ctx, nodeapi.ClaimRequest{Template: key.Template, Net: key.Net, Size: key.Size, ClaimRef: "ns/fresh"})
	if err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, time.Second, func() bool { _, ok := live.CurrentByID(s.ID); return ok }, "claim in the live view")
	for _, get := range []func() (nodeapi.Sandbox, error){
		func() (nodeapi.Sandbox, error) { return fl.ByRef(ctx, "ns/fresh") },
		func() (nodeapi.Sandbox, error) { return fl.ByID(ctx, s.ID) },
	} {
		if got, err := get(); err != nil || got.ID != s.ID || got.Node != n1.Name || got.NodeAddr != n1.Addr {
			t.Fatalf("lookup = %+v, %v; want %s on %s", got, err, s.ID, n1.Name)
		}
	}
	if v := live.View(); v.Len() != 0 || len(v.Nodes()) != 2 {
		t.Fatalf("the live View carries %d entries and %d nodes; want the nodes only", v.Len(), len(v.Nodes()))
	}
	if err := n1.Client.Release(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, time.Second, func() bool { _, ok := live.CurrentByID(s.ID); return !ok }, "release in the live view")
	if got, err := fl.ByID(ctx, s.ID); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("after release: ByID = %+v, %v; want ErrNotFound", got, err)
	}
}

// Over a live view, Pause, Resume and Release return once the view shows
// them: a list right after reads the caller's own write (e2b's
// Sandbox.list after betaPause), with no wait of the caller's own.
func TestFleet_OverALiveViewPauseResumeReleaseReadTheirWrites(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 1)
	live := f.StartLive(t)
	ctx := context.Background()
	fl := fleet.New(fleet.Config{View: live, Secret: fleettest.Secret})
	s, err := fl.Claim(ctx, nodeapi.ClaimFor(key, "ns/rw"))
	if err != nil {
		t.Fatal(err)
	}
	phase := func() string {
		v, ok := live.CurrentByID(s.ID)
		if !ok {
			return "gone"
		}
		return v.Entry.Phase
	}
	fleettest.Eventually(t, time.Second, func() bool { return phase() == "Running" }, "claim in the live view")
	for _, step := range []struct {
		name string
		do   func() error
		want string
	}{
		{"pause", func() error { return fl.Pause(ctx, s) }, "Paused"},
		{"resume", func() error { return fl.Resume(ctx, s) }, "Running"},
		{"pause without memory", func() error { return fl.PauseWithoutMemory(ctx, s) }, "Paused"},
		{"resume", func() error { return fl.Resume(ctx, s) }, "Running"},
		{"release", func() error { return fl.Release(ctx, s) }, "gone"},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := phase(); got != step.want {
			t.Fatalf("right after %s the live view shows %s, want %s", step.name, got, step.want)
		}
	}
}
