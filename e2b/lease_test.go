package e2b

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/node"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/vmm/vmmtest"
)

// TestLease_BoundsAreTheNodes: a create's default timeout and the largest
// any call may ask are the nodes' lease bounds (Fleet.LeaseBounds), not
// constants of the gateway's, asked once a minute, not per call.
func TestLease_BoundsAreTheNodes(t *testing.T) {
	g := startGateway(t)
	g.f.mu.Lock()
	g.f.leaseDef, g.f.leaseMax = 60, 600
	g.f.mu.Unlock()
	s := g.create(map[string]any{"templateID": "rt"})
	require.Equal(t, int64(60), g.f.claims[len(g.f.claims)-1].TTLSeconds, "the nodes' default lease")
	for _, c := range []struct{ path, body string }{
		{"/v2/sandboxes", `{"templateID":"rt","timeout":601}`},
		{"/sandboxes/" + s.SandboxID + "/timeout", `{"timeout":601}`},
		{"/v2/sandboxes/" + s.SandboxID + "/connect", `{"timeout":601}`},
		{"/sandboxes/" + s.SandboxID + "/fork", `{"timeout":601}`},
	} {
		status, b := g.raw("POST", c.path, strings.NewReader(c.body), map[string]string{"X-API-KEY": apiKey})
		requireJSONError(t, http.StatusBadRequest, status, b)
		require.Contains(t, string(b), "greater than 600 seconds", c.path)
	}
	g.create(map[string]any{"templateID": "rt", "timeout": 600})
	g.f.mu.Lock()
	defer g.f.mu.Unlock()
	require.Equal(t, 1, g.f.leaseAsks, "asked once, kept a minute")
}

// TestLease_BoundsComeFromARealNode: through the real fleet, a node's
// --default-lease and --max-lease (nodeapi.Info) are e2b's default and
// largest timeout.
func TestLease_BoundsComeFromARealNode(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	const secret = "lease-secret"
	view := inventory.NewStatic()
	n, err := node.New(node.Config{
		Name: "lease-node", AdvertiseAddress: ln.Addr().String(), RootToken: "lease-root", NodeToken: nodeapi.NodeToken(secret, "lease-node"),
		DataDir: t.TempDir(), Driver: vmmtest.New(vmmtest.Options{}), WarmCheckInterval: -1,
		RefillInterval: 20 * time.Millisecond, ReapInterval: 50 * time.Millisecond,
		Limits: node.Limits{Default: 90 * time.Second, Max: 900 * time.Second},
	})
	require.NoError(t, err)
	srv := &http.Server{Handler: n.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() { defer close(runDone); _ = n.Run(ctx) }()
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		_ = n.Close(cctx)
		cancel()
		<-runDone
		_ = srv.Close()
	})
	_, err = nodeapi.NewClient(ln.Addr().String(), "lease-root").PutPools(ctx, []nodeapi.PoolSpec{{Template: "rt", Warm: 1}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		view.Set(n.Inventory())
		nd, ok := view.View().Node("lease-node")
		return ok && len(nd.Pools) == 1 && nd.Pools[0].Warm == 1
	}, 30*time.Second, 20*time.Millisecond)

	h, err := New(Config{Fleet: fleet.New(fleet.Config{View: fleettest.StaticView{Static: view}, Secret: secret}), APIKeys: []string{apiKey}})
	require.NoError(t, err)
	gsrv := httptest.NewServer(h)
	t.Cleanup(gsrv.Close)
	g := &gw{t: t, url: gsrv.URL}
	status, b := g.raw("POST", "/v2/sandboxes", strings.NewReader(`{"templateID":"rt","timeout":901}`), map[string]string{"X-API-KEY": apiKey})
	requireJSONError(t, http.StatusBadRequest, status, b)
	require.Contains(t, string(b), "greater than 900 seconds")
	before := time.Now()
	s := g.create(map[string]any{"templateID": "rt"})
	var got struct {
		EndAt string `json:"endAt"`
	}
	resp, b := g.call("GET", "/sandboxes/"+s.SandboxID, nil, &got)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	end, err := time.Parse(time.RFC3339, got.EndAt)
	require.NoError(t, err)
	require.WithinDuration(t, before.Add(90*time.Second), end, 5*time.Second, "the node's default lease")
}
