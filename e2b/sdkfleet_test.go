package e2b

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleetview"
	"github.com/hearthvm/hearth/internal/testagent"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/node"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/sandbox"
	"github.com/hearthvm/hearth/vmm/sim"
)

func TestMain(m *testing.M) { testagent.Main(m) }

// sdkRootToken is the root token of newNodeView's node and the fleet
// secret its own token derives from.
const sdkRootToken = "sdk-root-token"

// newNodeView runs a real in-process node (sim driver: every sandbox is a
// sandbox-agent process) publishing into an in-memory view and returns a
// live fleet view over it (the node's change stream), what the SDK
// acceptance test's fleet.NodeFleet runs over; a second fleet.New over it
// is a restarted gateway's fleet (empty index).
func newNodeView(t testing.TB) fleet.View { return newNodeViewUplink(t, "") }

// newNodeViewUplink is newNodeView whose node, when uplink names a network
// namespace (internal/testnet's Net.UplinkPath), also keeps a warm pool of
// sdkTemplate's egress lane, its traffic leaving from uplink.
func newNodeViewUplink(t testing.TB, uplink string) fleet.View {
	const rootToken = sdkRootToken
	simRoot := t.TempDir()
	driver, err := sim.New(sim.Options{Root: simRoot, AgentCommand: []string{testagent.Path(t)}, UplinkNetns: uplink})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	view := inventory.NewStatic()
	n, err := node.New(node.Config{
		Name: "sdk-node", AdvertiseAddress: ln.Addr().String(), RootToken: rootToken, NodeToken: nodeapi.NodeToken(rootToken, "sdk-node"),
		DataDir: t.TempDir(), Driver: driver,
		InventoryInterval: 100 * time.Millisecond,
		RefillInterval:    100 * time.Millisecond, ReapInterval: 100 * time.Millisecond,
		Publisher: inventory.PublisherFunc(func(_ context.Context, inv *inventory.NodeInventory) error {
			view.Set(inv)
			return nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
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

	nc := nodeapi.NewClient(ln.Addr().String(), rootToken)
	pools := []nodeapi.PoolSpec{{Template: sdkTemplate, Warm: 3}}
	if uplink != "" {
		pools = append(pools, nodeapi.PoolSpec{Template: sdkTemplate, Net: sandbox.NetEgress, Warm: 2})
	}
	if _, err := nc.PutPools(ctx, pools); err != nil {
		t.Fatal(err)
	}
	live := fleetview.New(view, fleetview.Config{Secret: rootToken})
	lctx, lcancel := context.WithCancel(context.Background())
	liveDone := make(chan struct{})
	go func() { defer close(liveDone); live.Run(lctx) }()
	t.Cleanup(func() { lcancel(); <-liveDone })
	// Poll (with a deadline) until the view advertises warm capacity.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if warm(live.View(), sandbox.NetNone) >= 2 && (uplink == "" || warm(live.View(), sandbox.NetEgress) >= 1) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node advertised no warm capacity for %s within 60s", sdkTemplate)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return live
}

func warm(v *inventory.View, net string) int32 {
	var n int32
	for _, nd := range v.Nodes() {
		for _, p := range nd.Pools {
			if p.Template == sdkTemplate && (p.Net == net || p.Net == "" && net == sandbox.NetNone) {
				n += p.Warm
			}
		}
	}
	return n
}

// TestRealNode drives the gateway over a real node and the real fleet:
// claim-time env reaches the guest through the node's /init, a paused or
// killed sandbox answers 502 on the data plane, connect resumes it.
func TestRealNode(t *testing.T) {
	if testing.Short() {
		t.Skip("boots sandbox-agent processes")
	}
	view := newNodeView(t)
	h, err := New(Config{Fleet: fleet.New(fleet.Config{View: view, Secret: sdkRootToken}), APIKeys: []string{apiKey}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	g := &gw{t: t, url: srv.URL}

	s := g.create(map[string]any{"templateID": sdkTemplate, "envVars": map[string]string{"GREETING": "from-claim"}, "metadata": map[string]string{"m": "1"}})
	require.Regexp(t, `^[a-z0-9-]+$`, s.SandboxID)
	require.NotNil(t, s.EnvdAccessToken)
	tok := *s.EnvdAccessToken

	var list []listedJSON
	g.call("GET", "/v2/sandboxes?metadata="+url.QueryEscape("m=1"), nil, &list)
	require.Len(t, list, 1)
	require.Equal(t, s.SandboxID, list[0].SandboxID)

	status, out, exit := g.run(s.SandboxID, tok, "echo $GREETING; exit 2")
	require.Equal(t, 200, status)
	require.Equal(t, "from-claim\n", out)
	require.Equal(t, "2", exit)

	var d detailJSON
	g.call("GET", "/sandboxes/"+s.SandboxID, nil, &d)
	require.Equal(t, sdkTemplate, d.TemplateID)
	require.Equal(t, map[string]string{"m": "1"}, d.Metadata)

	resp, _ := g.call("POST", "/sandboxes/"+s.SandboxID+"/pause", map[string]any{}, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	resp, _ = g.call("POST", "/sandboxes/"+s.SandboxID+"/pause", map[string]any{}, nil)
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	status, _, _ = g.run(s.SandboxID, tok, "true")
	require.Equal(t, http.StatusBadGateway, status)
	resp, _ = g.call("POST", "/v2/sandboxes/"+s.SandboxID+"/connect", map[string]any{"timeout": 60}, nil)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	status, out, exit = g.run(s.SandboxID, tok, "echo awake")
	require.Equal(t, 200, status)
	require.Equal(t, "awake\n", out, exit)

	// Sandbox.create(<snapshot id>): a clone on the node holding it, in the namespace.
	var snap snapshotJSON
	resp, _ = g.call("POST", "/sandboxes/"+s.SandboxID+"/snapshots", map[string]any{"name": "golden"}, &snap)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	var snaps []snapshotJSON
	g.call("GET", "/snapshots", nil, &snaps)
	require.Equal(t, []snapshotJSON{snap}, snaps)
	clone := g.create(map[string]any{"templateID": snap.SnapshotID})
	require.NotNil(t, clone.EnvdAccessToken)
	require.NotEqual(t, s.SandboxID, clone.SandboxID)
	var d2 detailJSON
	resp, _ = g.call("GET", "/sandboxes/"+clone.SandboxID, nil, &d2)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the clone is in the gateway's namespace")
	status, out, exit = g.run(clone.SandboxID, *clone.EnvdAccessToken, "echo clone-up")
	require.Equal(t, 200, status)
	require.Equal(t, "clone-up\n", out, exit)
	resp, _ = g.call("DELETE", "/sandboxes/"+clone.SandboxID, nil, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	resp, _ = g.call("DELETE", "/templates/"+snap.SnapshotID, nil, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)

	// A restarted gateway (new fleet, empty index, nothing cached) connects
	// with the sandbox's token from a live lookup.
	h2, err := New(Config{Fleet: fleet.New(fleet.Config{View: view, Secret: sdkRootToken}), APIKeys: []string{apiKey}})
	require.NoError(t, err)
	srv2 := httptest.NewServer(h2)
	defer srv2.Close()
	g2 := &gw{t: t, url: srv2.URL}
	var c sandboxJSON
	resp, _ = g2.call("POST", "/v2/sandboxes/"+s.SandboxID+"/connect", map[string]any{}, &c)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotNil(t, c.EnvdAccessToken)
	require.Equal(t, tok, *c.EnvdAccessToken)
	status, out, _ = g2.run(s.SandboxID, tok, "echo via-restarted")
	require.Equal(t, 200, status)
	require.Equal(t, "via-restarted\n", out)

	resp, _ = g.call("DELETE", "/sandboxes/"+s.SandboxID, nil, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	status, _, _ = g.run(s.SandboxID, tok, "true")
	require.Equal(t, http.StatusBadGateway, status)
	resp, _ = g.call("DELETE", "/sandboxes/"+s.SandboxID, nil, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}
