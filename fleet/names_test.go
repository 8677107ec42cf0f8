package fleet_test

import (
	"context"
	"errors"
	"testing"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/nodeapi"
)

func TestFleet_HeldSeesIndexAndViewWithoutFanOut(t *testing.T) {
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 1, 1)
	ctx := context.Background()
	a, other := newStaticFleet(f, 1), newStaticFleet(f, 2)
	d, err := a.Claim(ctx, nodeapi.ClaimFor(key, "ns/web"))
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := a.Held(ctx, "ns/web"); !ok || s.ID != d.ID {
		t.Fatalf("claiming replica: Held = %+v %v", s, ok)
	}
	if _, ok := other.Held(ctx, "ns/web"); ok {
		t.Fatal("Held fanned out: an unpublished claim of another replica was found")
	}
	f.Publish()
	if s, ok := other.Held(ctx, "ns/web"); !ok || s.ID != d.ID {
		t.Fatalf("after publish: Held = %+v %v", s, ok)
	}
	// A released claim is no longer held, even while the view lists it.
	if err := a.Release(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, ok := other.Held(ctx, "ns/web"); ok {
		t.Fatal("a released name is still held")
	}
}

func TestFleet_ClaimOfAHeldNameIsTheNodes409(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 2)
	ctx := context.Background()
	if _, err := newFleet(t, f, 1).Claim(ctx, nodeapi.ClaimFor(key, "ns/web")); err != nil {
		t.Fatal(err)
	}
	_, err := newFleet(t, f, 2).Claim(ctx, nodeapi.ClaimFor(key, "ns/web"))
	if !errors.Is(err, nodeapi.ErrConflict) || fleet.HTTPStatus(err) != 409 {
		t.Fatalf("second claim = %v (status %d), want the node's 409", err, fleet.HTTPStatus(err))
	}
}

func TestFleet_AllByRefFindsEveryHolder(t *testing.T) {
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 1, 1)
	ctx := context.Background()
	for _, n := range f.Nodes {
		if _, err := n.Client.Claim(ctx, nodeapi.ClaimRequest{Template: key.Template, ClaimRef: "ns/twice"}); err != nil {
			t.Fatal(err)
		}
	}
	all, err := newFleet(t, f, 3).AllByRef(ctx, "ns/twice")
	if err != nil || len(all) != 2 || all[0].Node == all[1].Node || all[0].NodeAddr == "" {
		t.Fatalf("AllByRef = %+v, %v", all, err)
	}
	if _, err := newFleet(t, f, 3).AllByRef(ctx, "ns/none"); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("AllByRef(none) = %v", err)
	}
}
