package fleet_test

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/nodeapi"
)

// A sandbox created through one replica is read in full — spec, managed
// fields, labels, annotations, metadata — by a lookup on another replica
// (a new live view and fleet: an empty claim-time index), and again after
// its node restarted; a list on any such replica carries its metadata, so
// e2b's metadata filter finds it. The view only names the node: the node's
// record is the truth.
func TestFleet_AnotherReplicaAndARestartedNodeKeepWhatCreateStored(t *testing.T) {
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 1, 1)
	ctx := context.Background()
	obj := nodeapi.Object{
		Labels:        map[string]string{"team": "a"},
		Annotations:   map[string]string{"note": "kept"},
		Spec:          json.RawMessage(`{"podTemplate":{"spec":{"containers":[{"name":"main","image":"x"}]}}}`),
		ManagedFields: json.RawMessage(`[{"manager":"me","operation":"Apply"}]`),
	}
	md := map[string]string{"bar": "x"}
	created, err := fleet.New(fleet.Config{View: f.StartLive(t), Secret: fleettest.Secret}).
		Claim(ctx, nodeapi.ClaimRequest{Template: key.Template, Net: key.Net, Size: key.Size, ClaimRef: "ns/kept", Metadata: md, Object: obj})
	if err != nil {
		t.Fatal(err)
	}

	check := func(when string) {
		t.Helper()
		live := f.StartLive(t) // another replica
		fl := fleet.New(fleet.Config{View: live, Secret: fleettest.Secret})
		fleettest.Eventually(t, 5*time.Second, func() bool { _, ok := live.CurrentByID(created.ID); return ok }, "%s: the claim never reached the view", when)
		// List first: a lookup indexes the node's record on this replica.
		list, err := fl.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(list, func(s nodeapi.Sandbox) bool { return s.ID == created.ID })
		if i < 0 || !maps.Equal(list[i].Metadata, md) || !maps.Equal(list[i].Labels, obj.Labels) || list[i].Net != key.Net || list[i].Size != key.Size {
			t.Errorf("%s: List = %+v; want %s with metadata %v, labels %v, net %s and size %s", when, list, created.ID, md, obj.Labels, key.Net, key.Size)
		}
		for _, l := range []struct {
			op  string
			get func() (nodeapi.Sandbox, error)
		}{
			{"ByRef", func() (nodeapi.Sandbox, error) { return fl.ByRef(ctx, "ns/kept") }},
			{"ByID", func() (nodeapi.Sandbox, error) { return fl.ByID(ctx, created.ID) }},
		} {
			got, err := l.get()
			if err != nil {
				t.Fatalf("%s: %s: %v", when, l.op, err)
			}
			if got.ID != created.ID || got.Node != created.Node || got.Net != key.Net || got.Size != key.Size ||
				!maps.Equal(got.Labels, obj.Labels) || !maps.Equal(got.Annotations, obj.Annotations) ||
				string(got.Spec) != string(obj.Spec) || string(got.ManagedFields) != string(obj.ManagedFields) ||
				!maps.Equal(got.Metadata, md) {
				t.Errorf("%s: %s = %+v\nwant what the create stored: %+v, metadata %v", when, l.op, got, obj, md)
			}
		}
	}
	check("another replica")
	for i, n := range f.Nodes {
		if n.Name == created.Node {
			f.Restart(t, i)
		}
	}
	check("after the node restarted")
}
