package e2b

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
)

// A sandbox created from a snapshot (templateID "sn_…", the snapshot-claim
// path) with metadata, and its fork child, are found by the list's
// metadata filter on another gateway replica and after their node
// restarted, like any create's: the snapshot claim carries the metadata to
// the node, which records it (a fork child inherits its parent's) and
// streams it. Both used to be kept only in the creating replica's
// claim-time index (nodeapi.SnapshotClaimRequest had no metadata; a node's
// fork child none).
func TestList_SnapshotCreateAndForkMetadataOnAnotherReplicaAndAfterANodeRestart(t *testing.T) {
	const tpl = "ghcr.io/x/e2b:1"
	k, err := pool.KeyForE2B(tpl, false)
	require.NoError(t, err)
	f := fleettest.Start(t, 1)
	f.SetWarm(t, nodeapi.PoolSpec{Template: k.Template, Net: k.Net, Size: k.Size}, 1)
	gateway := func() *gw {
		live := f.StartLive(t)
		h, err := New(Config{Fleet: fleet.New(fleet.Config{View: live, Secret: fleettest.Secret}), APIKeys: []string{apiKey}})
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return &gw{t: t, url: srv.URL}
	}
	first := gateway()
	src := first.create(map[string]any{"templateID": tpl})
	var snap snapshotJSON
	resp, b := first.call("POST", "/sandboxes/"+src.SandboxID+"/snapshots", map[string]any{}, &snap)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(b))
	clone := first.create(map[string]any{"templateID": snap.SnapshotID, "metadata": map[string]string{"bar": "x"}})
	var kids []struct {
		Sandbox sandboxJSON `json:"sandbox"`
	}
	resp, b = first.call("POST", "/sandboxes/"+clone.SandboxID+"/fork", map[string]any{}, &kids)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Len(t, kids, 1)
	want := []string{clone.SandboxID, kids[0].Sandbox.SandboxID}
	slices.Sort(want)

	listed := func(g *gw, filter string) []string {
		t.Helper()
		var items []struct {
			SandboxID string            `json:"sandboxID"`
			Metadata  map[string]string `json:"metadata"`
		}
		resp, b := g.call("GET", "/v2/sandboxes?metadata="+filter, nil, &items)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		var ids []string
		for _, it := range items {
			require.Equal(t, "x", it.Metadata["bar"], "a listed sandbox carries its metadata: %s", b)
			ids = append(ids, it.SandboxID)
		}
		slices.Sort(ids)
		return ids
	}
	check := func(when string) {
		g := gateway()
		require.Eventually(t, func() bool {
			var all []json.RawMessage
			resp, _ := g.call("GET", "/v2/sandboxes", nil, &all)
			return resp.StatusCode == http.StatusOK && len(all) == 3
		}, 5*time.Second, 10*time.Millisecond, "%s: the sandboxes are never listed", when)
		require.Equal(t, want, listed(g, "bar%3Dx"), "%s: ?metadata=bar=x", when)
		require.Empty(t, listed(g, "bar%3Dy"), "%s: ?metadata=bar=y", when)
	}
	require.Equal(t, want, listed(first, "bar%3Dx"), "the creating replica")
	check("another replica")
	f.Restart(t, 0)
	check("after the node restarted")
}
