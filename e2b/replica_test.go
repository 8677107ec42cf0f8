package e2b

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
)

// A sandbox created with metadata through one gateway is found by the list's
// metadata filter on another gateway replica (its own live view and fleet:
// an empty claim-time index), and again after its node restarted — over
// real nodes and the real fleet, not the fake fleet's full records. The
// metadata reaches every replica on the node's change stream; it used to
// be filled in only from the creating replica's claim-time index.
func TestList_MetadataFilterOnAnotherReplicaAndAfterANodeRestart(t *testing.T) {
	const tpl = "ghcr.io/x/e2b:1"
	k, err := pool.KeyForE2B(tpl, false)
	require.NoError(t, err)
	f := fleettest.Start(t, 2)
	f.SetWarm(t, nodeapi.PoolSpec{Template: k.Template, Net: k.Net, Size: k.Size}, 1, 1)
	gateway := func() *gw {
		live := f.StartLive(t)
		h, err := New(Config{Fleet: fleet.New(fleet.Config{View: live, Secret: fleettest.Secret}), APIKeys: []string{apiKey}})
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return &gw{t: t, url: srv.URL}
	}
	s := gateway().create(map[string]any{"templateID": tpl, "metadata": map[string]string{"bar": "x"}})

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
		return ids
	}
	check := func(when string) {
		g := gateway()
		// The view has the sandbox once its node's stream delivered it.
		require.Eventually(t, func() bool {
			var all []json.RawMessage
			resp, _ := g.call("GET", "/v2/sandboxes", nil, &all)
			return resp.StatusCode == http.StatusOK && len(all) == 1
		}, 5*time.Second, 10*time.Millisecond, "%s: the sandbox is never listed", when)
		require.Equal(t, []string{s.SandboxID}, listed(g, "bar%3Dx"), "%s: ?metadata=bar=x", when)
		require.Empty(t, listed(g, "bar%3Dy"), "%s: ?metadata=bar=y", when)
	}
	check("another replica")
	f.Restart(t, 0)
	f.Restart(t, 1)
	check("after the node restarted")
}
