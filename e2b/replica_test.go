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

// replicaTemplate is the template of the replica tests' warm pools.
const replicaTemplate = "ghcr.io/x/e2b:1"

// startReplicas starts n nodes with warm VMs of replicaTemplate and returns
// them with a function that starts a gateway replica over them: its own
// live view and fleet (an empty claim-time index), nothing shared.
func startReplicas(t *testing.T, n int, warm ...int32) (*fleettest.Fleet, func() *gw) {
	k, err := pool.KeyForE2B(replicaTemplate, false)
	require.NoError(t, err)
	f := fleettest.Start(t, n)
	f.SetWarm(t, nodeapi.PoolSpec{Template: k.Template, Net: k.Net, Size: k.Size}, warm...)
	return f, func() *gw {
		live := f.StartLive(t)
		h, err := New(Config{Fleet: fleet.New(fleet.Config{View: live, Secret: fleettest.Secret}), APIKeys: []string{apiKey}})
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return &gw{t: t, url: srv.URL}
	}
}

// checkMetadataFilter checks, on a new replica, that the list holds total
// sandboxes once the view has them, that ?metadata=bar=x lists exactly
// want (each carrying bar: x) and ?metadata=bar=y none.
func checkMetadataFilter(t *testing.T, replica func() *gw, when string, total int, want ...string) {
	t.Helper()
	g := replica()
	// The view has the sandboxes once their nodes' streams delivered them.
	require.Eventually(t, func() bool {
		var all []json.RawMessage
		resp, _ := g.call("GET", "/v2/sandboxes", nil, &all)
		return resp.StatusCode == http.StatusOK && len(all) == total
	}, 5*time.Second, 10*time.Millisecond, "%s: the sandboxes are never listed", when)
	listed := func(filter string) []string {
		var items []struct {
			SandboxID string            `json:"sandboxID"`
			Metadata  map[string]string `json:"metadata"`
		}
		resp, b := g.call("GET", "/v2/sandboxes?metadata="+filter, nil, &items)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		var ids []string
		for _, it := range items {
			require.Equal(t, "x", it.Metadata["bar"], "%s: a listed sandbox carries its metadata: %s", when, b)
			ids = append(ids, it.SandboxID)
		}
		slices.Sort(ids)
		return ids
	}
	slices.Sort(want)
	require.Equal(t, want, listed("bar%3Dx"), "%s: ?metadata=bar=x", when)
	require.Empty(t, listed("bar%3Dy"), "%s: ?metadata=bar=y", when)
}

// A sandbox created with metadata through one gateway is found by the list's
// metadata filter on another gateway replica (its own live view and fleet:
// an empty claim-time index), and again after its node restarted — over
// real nodes and the real fleet, not the fake fleet's full records. The
// metadata reaches every replica on the node's change stream; it used to
// be filled in only from the creating replica's claim-time index.
func TestList_MetadataFilterOnAnotherReplicaAndAfterANodeRestart(t *testing.T) {
	f, replica := startReplicas(t, 2, 1, 1)
	s := replica().create(map[string]any{"templateID": replicaTemplate, "metadata": map[string]string{"bar": "x"}})
	checkMetadataFilter(t, replica, "another replica", 1, s.SandboxID)
	f.Restart(t, 0)
	f.Restart(t, 1)
	checkMetadataFilter(t, replica, "after the node restarted", 1, s.SandboxID)
}

// A sandbox created from a snapshot (templateID "sn_…", the snapshot-claim
// path) with metadata, and its fork child, are found by the list's
// metadata filter on another gateway replica and after their node
// restarted, like any create's: the snapshot claim carries the metadata to
// the node, which records it (a fork child inherits its parent's) and
// streams it. Both used to be kept only in the creating replica's
// claim-time index (nodeapi.SnapshotClaimRequest had no metadata; a node's
// fork child none).
func TestList_SnapshotCreateAndForkMetadataOnAnotherReplicaAndAfterANodeRestart(t *testing.T) {
	f, replica := startReplicas(t, 1, 1)
	first := replica()
	src := first.create(map[string]any{"templateID": replicaTemplate})
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
	checkMetadataFilter(t, func() *gw { return first }, "the creating replica", 3, clone.SandboxID, kids[0].Sandbox.SandboxID)
	checkMetadataFilter(t, replica, "another replica", 3, clone.SandboxID, kids[0].Sandbox.SandboxID)
	f.Restart(t, 0)
	checkMetadataFilter(t, replica, "after the node restarted", 3, clone.SandboxID, kids[0].Sandbox.SandboxID)
}
