// Package fleettest runs real in-process node daemons (node.New) on
// loopback for tests of the fleet, the router and the API surfaces. The
// nodes boot "VMs" through vmmtest.Driver, an in-memory vmm.Driver without
// processes: everything above the driver (claim table, pools, leases, the
// HTTP API) is the real node. View is a Static viewer of the nodes'
// published inventories that the test refreshes with Publish, as an
// inventory publish would: membership for StartLive, the live fleet view
// over the nodes' change streams that production runs, and that fleets
// (NewFleet) and API servers read.
package fleettest

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleetview"
	"github.com/hearthvm/hearth/internal/serve"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/node"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/vmm/vmmtest"
)

// Token is the operator root token every test node accepts (the fleet
// never sends it).
const Token = "fleettest-root-token"

// Secret is the fleet secret: a fleet built with it sends each test node
// its own token, nodeapi.NodeToken(Secret, name), which that node accepts.
const Secret = "fleettest-fleet-secret"

// Node is one running node daemon.
type Node struct {
	*node.Node
	Name, Addr string
	Driver     *vmmtest.Driver
	// Client speaks to the node with the root token.
	Client *nodeapi.Client

	dir  string
	stop func()
}

// Fleet is a set of running nodes and the Static view of their inventories.
type Fleet struct {
	Nodes []*Node
	View  *inventory.Static
}

// Start runs n nodes named node-0… on loopback; they stop at test cleanup.
func Start(t testing.TB, n int) *Fleet {
	t.Helper()
	return StartWith(t, n, vmmtest.Options{})
}

// StartWith is Start with the nodes' in-memory VMs built from opts: its
// Addr, say, names an agent every VM's handle points at, for a test that
// needs the agent to answer (Start's VMs name an address nothing serves).
func StartWith(t testing.TB, n int, opts vmmtest.Options) *Fleet {
	t.Helper()
	f := &Fleet{View: &inventory.Static{}}
	for i := 0; i < n; i++ {
		f.Nodes = append(f.Nodes, startNode(t, fmt.Sprintf("node-%d", i), opts))
	}
	f.Publish()
	return f
}

func startNode(t testing.TB, name string, opts vmmtest.Options) *Node {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if opts.Name == "" {
		opts.Name = "test"
	}
	return runNode(t, ln, name, t.TempDir(), vmmtest.New(opts))
}

func runNode(t testing.TB, ln net.Listener, name, dir string, drv *vmmtest.Driver) *Node {
	t.Helper()
	addr := ln.Addr().String()
	nd, err := node.New(node.Config{
		Name: name, AdvertiseAddress: addr, RootToken: Token, NodeToken: nodeapi.NodeToken(Secret, name), DataDir: dir, Driver: drv,
		MaxBootConcurrency: 4, ReapInterval: 50 * time.Millisecond, RefillInterval: 20 * time.Millisecond,
		// In-memory VMs have no agent to probe.
		WarmCheckInterval: -1,
	})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	// Served as sandboxd serves it, but from a budget of its own: a test
	// that tunes the process's (serve.Shared) does not count these.
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- node.Serve(ctx, nd, ln, node.ServeOptions{Serve: serve.Options{Budget: serve.NewBudget(serve.Limits{})}, CloseTimeout: 30 * time.Second})
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-served; err != nil {
				t.Errorf("closing %s: %v", name, err)
			}
		})
	}
	t.Cleanup(stop)
	return &Node{Node: nd, Name: name, Addr: addr, Driver: drv, Client: nodeapi.NewClient(addr, Token), dir: dir, stop: stop}
}

// Restart stops node i as a clean shutdown does (claimed VMs stopped, not
// destroyed) and starts it again on the same name, address, data dir and
// driver, so it re-adopts its claimed sandboxes; then publishes.
func (f *Fleet) Restart(t testing.TB, i int) {
	t.Helper()
	old := f.Nodes[i]
	old.stop()
	var ln net.Listener
	Eventually(t, 10*time.Second, func() bool {
		var err error
		ln, err = net.Listen("tcp", old.Addr)
		return err == nil
	}, "cannot listen on %s again", old.Addr)
	f.Nodes[i] = runNode(t, ln, old.Name, old.dir, old.Driver)
	f.Publish()
}

// Publish refreshes the view from every node's current inventory.
func (f *Fleet) Publish() {
	invs := make([]*inventory.NodeInventory, len(f.Nodes))
	for i, n := range f.Nodes {
		invs[i] = n.Inventory()
	}
	f.View.Set(invs...)
}

// SetWarm sets warm targets for one pool, warm[i] on node i, waits until
// every node holds them, and publishes.
func (f *Fleet) SetWarm(t testing.TB, spec nodeapi.PoolSpec, warm ...int32) {
	t.Helper()
	ctx := context.Background()
	for i, n := range f.Nodes {
		s := spec
		if i < len(warm) {
			s.Warm = warm[i]
		} else {
			s.Warm = 0
		}
		if _, err := n.Client.PutPools(ctx, []nodeapi.PoolSpec{s}); err != nil {
			t.Fatalf("PUT pools on %s: %v", n.Name, err)
		}
	}
	for i, n := range f.Nodes {
		want := int32(0)
		if i < len(warm) {
			want = warm[i]
		}
		WaitWarm(t, n, spec.Template, want)
	}
	f.Publish()
}

// WaitWarm polls n until its pool for template holds want warm VMs.
func WaitWarm(t testing.TB, n *Node, template string, want int32) {
	t.Helper()
	Eventually(t, 60*time.Second, func() bool {
		info, err := n.Client.Info(context.Background())
		if err != nil {
			return false
		}
		for _, p := range info.Pools {
			if p.Template == template {
				return p.Warm == want
			}
		}
		return want == 0
	}, "pool %s on %s never reached warm %d", template, n.Name, want)
}

// Warm returns n's warm count for template.
func Warm(t testing.TB, n *Node, template string) int32 {
	t.Helper()
	info, err := n.Client.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range info.Pools {
		if p.Template == template {
			return p.Warm
		}
	}
	return 0
}

// Eventually polls cond every 10ms until it holds or timeout passes, then
// fails the test with format and args: testify's require.Eventually, which
// runs cond on its own goroutine (cond must not call t.Fatal).
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	require.Eventuallyf(t, cond, timeout, 10*time.Millisecond, format, args...)
}

// NewFleet returns a fleet over a live view of f's nodes (StartLive), as
// the servers build one; cfg's View and Secret are set, the rest is kept.
func (f *Fleet) NewFleet(t testing.TB, cfg fleet.Config) *fleet.NodeFleet {
	t.Helper()
	cfg.View, cfg.Secret = f.StartLive(t), Secret
	return fleet.New(cfg)
}

// StaticView is a Static view whose entries a fleet locates sandboxes in
// (a fleet.View), for tests whose nodes are fakes that serve no change
// stream. Production, and the tests over real nodes, locate sandboxes in
// a *fleetview.Live (StartLive, NewFleet); this is no server's read model.
type StaticView struct{ *inventory.Static }

// Current returns the first entry of name in the static view.
func (v StaticView) Current(name string) (inventory.Versioned, bool) {
	it, ok := v.View().ByName(name)
	return inventory.Versioned{Item: it}, ok
}

// CurrentByID returns the entry of claim id id in the static view.
func (v StaticView) CurrentByID(id string) (inventory.Versioned, bool) {
	it, ok := v.View().ByID(id)
	return inventory.Versioned{Item: it}, ok
}

// List returns the static view's entries keep accepts (nil: every one).
func (v StaticView) List(keep func(inventory.Item) bool) ([]inventory.Versioned, uint64) {
	view := v.View()
	var out []inventory.Versioned
	for i := 0; i < view.Len(); i++ {
		if it := view.At(i); keep == nil || keep(it) {
			out = append(out, inventory.Versioned{Item: it})
		}
	}
	return out, 0
}

// StartLive runs a fleetview.Live over f's nodes (their published
// inventories and change streams) until the test ends, and waits for its
// first sync.
func (f *Fleet) StartLive(t testing.TB) *fleetview.Live {
	t.Helper()
	live := fleetview.New(f.View, fleetview.Config{Secret: Secret})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); live.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := live.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	return live
}
