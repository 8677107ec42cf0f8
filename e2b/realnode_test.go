package e2b

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/node"
	"github.com/hearthvm/hearth/nodeapi"
)

// TestFork_PastTheTreesLimitIs429OnARealNode: through the real fleet and a
// real node (in-memory VMs), a fork past the node's --max-fork-children is
// e2b's 429 naming the flag, and a count past nodeapi.MaxForkCount a 400
// before the node is asked; a fork within both is delivered.
func TestFork_PastTheTreesLimitIs429OnARealNode(t *testing.T) {
	nodes := fleettest.Start(t, 1)
	nodes.SetWarm(t, nodeapi.PoolSpec{Template: "rt"}, 2)
	h, err := New(Config{Fleet: nodes.NewFleet(t, fleet.Config{}), APIKeys: []string{apiKey}})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	g := &gw{t: t, url: srv.URL}

	s := g.create(map[string]any{"templateID": "rt"})
	limit := node.DefaultQuota.MaxTreeChildren
	resp, b := g.call("POST", "/sandboxes/"+s.SandboxID+"/fork", map[string]any{"count": limit + 1}, nil)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, string(b))
	require.Contains(t, string(b), "--max-fork-children")

	resp, b = g.call("POST", "/sandboxes/"+s.SandboxID+"/fork", map[string]any{"count": nodeapi.MaxForkCount + 1}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(b))
	require.Contains(t, string(b), fmt.Sprintf("[1, %d]", nodeapi.MaxForkCount))

	var forked []struct{ Sandbox sandboxJSON }
	resp, b = g.call("POST", "/sandboxes/"+s.SandboxID+"/fork", map[string]any{"count": limit}, &forked)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Len(t, forked, limit)
}
