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

	"github.com/hearthvm/hearth/claim"
	"github.com/hearthvm/hearth/internal/testagent"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/node"
	"github.com/hearthvm/hearth/vmm/sim"
)

func TestMain(m *testing.M) { testagent.Main(m) }

// newNodeFleet returns the fleet the SDK acceptance test runs against: a real
// in-process node (sim driver: every sandbox is a sandbox-agent process)
// publishing into an in-memory view, and the real claim.NodeFleet over it.
func newNodeFleet(t testing.TB) claim.Fleet {
	const rootToken = "sdk-root-token"
	simRoot := t.TempDir()
	driver, err := sim.New(sim.Options{Root: simRoot, AgentCommand: []string{testagent.Path(t)}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	view := inventory.NewStatic()
	n, err := node.New(node.Config{
		Name: "sdk-node", AdvertiseAddress: ln.Addr().String(), RootToken: rootToken,
		DataDir: t.TempDir(), Driver: driver,
		InventoryInterval: time.Second, InventoryDebounce: 20 * time.Millisecond,
		RefillInterval: 100 * time.Millisecond,
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

	nc := node.NewClient(ln.Addr().String(), rootToken)
	if _, err := nc.PutPools(ctx, []node.PoolSpec{{Template: sdkTemplate, Warm: 3}}); err != nil {
		t.Fatal(err)
	}
	// Poll (with a deadline) until the view advertises warm capacity.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if warm(view.View()) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node advertised no warm capacity for %s within 60s", sdkTemplate)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return WithPools(claim.NewFleet(claim.FleetConfig{View: view, Token: rootToken}), view)
}

func warm(v *inventory.View) int32 {
	var n int32
	for _, nd := range v.Nodes() {
		for _, p := range nd.Pools {
			if p.Template == sdkTemplate {
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
	fleet := newNodeFleet(t)
	h, err := New(Config{Fleet: fleet, APIKeys: []string{apiKey}})
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

	resp, _ = g.call("DELETE", "/sandboxes/"+s.SandboxID, nil, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	status, _, _ = g.run(s.SandboxID, tok, "true")
	require.Equal(t, http.StatusBadGateway, status)
	resp, _ = g.call("DELETE", "/sandboxes/"+s.SandboxID, nil, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}
