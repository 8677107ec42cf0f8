package fleet_test

import (
	"context"
	"errors"
	"testing"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/nodeapi"
)

// TestFleet_ClaimSnapshotGoesToTheHoldingNodeUnderTheRef: the clone is
// claimed on the node that holds the snapshot, recorded under the asked
// ref (so lookups by name and namespace scoping see it), and found at once.
func TestFleet_ClaimSnapshotGoesToTheHoldingNodeUnderTheRef(t *testing.T) {
	ctx := context.Background()
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 0, 2)
	fl := newFleet(t, f, 3)
	src, err := fl.Claim(ctx, nodeapi.ClaimFor(key, "team-a/src"))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := fl.Snapshot(ctx, src, "golden")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Node != "node-1" || snap.Namespace != "team-a" {
		t.Fatalf("snapshot = %+v; want on node-1, namespace team-a", snap)
	}
	snaps, err := fl.Snapshots(ctx)
	if err != nil || len(snaps) != 1 || snaps[0].Namespace != "team-a" {
		t.Fatalf("Snapshots = %+v, %v; want the one, with its namespace", snaps, err)
	}

	s, err := fl.ClaimSnapshot(ctx, snap, nodeapi.ClaimRequest{ClaimRef: "team-a/clone", TTLSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	if s.Node != "node-1" || s.ClaimRef != "team-a/clone" || s.Token == "" || s.Template != key.Template {
		t.Fatalf("clone = %+v; want on node-1 under team-a/clone with its token", s)
	}
	got, err := fl.LiveByID(ctx, s.ID)
	if err != nil || got.ClaimRef != "team-a/clone" {
		t.Fatalf("LiveByID = %+v, %v; want the clone under its ref", got, err)
	}
	if _, err := fl.ByRef(ctx, "team-a/clone"); err != nil {
		t.Fatalf("ByRef: %v", err)
	}

	gone := snap
	gone.ID = "sn_missing"
	if _, err := fl.ClaimSnapshot(ctx, gone, nodeapi.ClaimRequest{ClaimRef: "team-a/x"}); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("a snapshot the node does not hold: %v; want ErrNotFound", err)
	}
	nowhere := snap
	nowhere.Node = "node-9"
	if _, err := fl.ClaimSnapshot(ctx, nowhere, nodeapi.ClaimRequest{ClaimRef: "team-a/x"}); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("a snapshot on an unknown node: %v; want ErrNotFound", err)
	}
	if _, err := fl.ClaimSnapshot(ctx, snap, nodeapi.ClaimRequest{ClaimRef: "no-slash"}); fleet.HTTPStatus(err) != 400 {
		t.Fatalf("a malformed ref: %v; want a 400", err)
	}
}
