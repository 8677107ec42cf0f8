package fleet

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
)

// View is the live fleet view the fleet routes and locates by: its nodes
// (names, addresses and warm pools: routing, inventory.Viewer) and where
// each sandbox is as of its last applied change (Locator). *fleetview.Live
// is the one production uses (sandbox-apiserver, sandbox-e2b, sandbox-dev)
// and the API server's lists and watches read: one source of truth for
// routing, lookups, lists and watches alike.
type View interface {
	inventory.Viewer
	Locator
}

// Config configures New.
type Config struct {
	// View is the live fleet view (*fleetview.Live). Required: New panics
	// without one.
	View View
	// Secret is the fleet secret. It is never sent: each node is sent its
	// own token, nodeapi.NodeToken(Secret, node name), keyed by the name
	// the view (NodeInventory metadata.name) gives the node, so an address
	// a node publishes can only ever receive that node's token. Empty
	// sends no token (nodes without auth, development only).
	Secret string
	// HTTP is the client for node calls; nil uses nodeapi.DefaultHTTPClient.
	HTTP *http.Client
	// Seed seeds the routing randomness; 0 picks a random seed.
	Seed uint64
	// IndexSize bounds the claim-time index (refs and ids); default 65536.
	// The index holds the records of claims, forks and lookups made
	// through this fleet: it is what makes a claim visible before its node
	// publishes, on both API surfaces.
	IndexSize int
	// Concurrency bounds the fan-out of live lookups; default 16.
	Concurrency int
}

// NodeFleet implements Fleet over a view of NodeInventory and the nodes'
// HTTP API. Claims are routed by power of two choices over advertised warm
// capacity (see Route). Lookups consult, in order: the claim-time index and
// that node live, the live view (Locator) and the one node it names, then
// every node live — never
// waiting for a publish; they return the holding node's record. Verbs go to the owning node by claim id; a node's 404 is
// ErrNotFound, its other errors keep their status (see HTTPStatus).
type NodeFleet struct {
	cfg   Config
	index *claimIndex

	mu      sync.Mutex
	rnd     *rand.Rand
	clients map[clientKey]*nodeapi.Client
	// addrs is the address each node was last reached at: a change is
	// logged (a node's published address is its own claim, see client).
	addrs map[string]string
	// doubts are the names whose last claim through this fleet has an
	// unknown outcome (ErrOutcomeUnknown), by ref: the node it was sent to
	// is asked before the name is claimed again (resolveDoubt).
	doubts map[string]doubt
}

type clientKey struct{ node, addr string }

var _ Fleet = (*NodeFleet)(nil)

// New returns a NodeFleet.
func New(cfg Config) *NodeFleet {
	if cfg.IndexSize <= 0 {
		cfg.IndexSize = 1 << 16
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	if cfg.View == nil {
		panic("fleet.New: Config.View (the live fleet view, *fleetview.Live) is required")
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	return &NodeFleet{
		cfg:     cfg,
		index:   newClaimIndex(cfg.IndexSize),
		rnd:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		clients: map[clientKey]*nodeapi.Client{},
		addrs:   map[string]string{},
		doubts:  map[string]doubt{},
	}
}

// client returns the client for node at addr, carrying that node's own
// token. The address is the node's published claim: whatever listens
// there receives only the named node's token, which opens no other node.
// A node seen at a new address is logged.
func (f *NodeFleet) client(node, addr string) *nodeapi.Client {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := clientKey{node, addr}
	c, ok := f.clients[k]
	if !ok {
		if old, seen := f.addrs[node]; seen && old != addr {
			klog.InfoS("Node address changed; it gets only its own token at the new address", "node", node, "old", old, "new", addr)
		}
		f.addrs[node] = addr
		c = &nodeapi.Client{Addr: addr, Token: nodeapi.NodeToken(f.cfg.Secret, node), HTTP: f.cfg.HTTP}
		if len(f.clients) >= maxClients {
			clear(f.clients) // bounded: addresses come from published objects
		}
		f.clients[k] = c
	}
	return c
}

// maxClients bounds the client cache.
const maxClients = 4096

// lockedRand serializes a shared *rand.Rand for Route.
type lockedSource struct {
	f *NodeFleet
}

func (s lockedSource) Uint64() uint64 {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	return s.f.rnd.Uint64()
}

// located sets where s lives, once for every record the fleet returns:
// Node (when the node did not say) and NodeAddr (the address the fleet
// reached the node at).
func located(s nodeapi.Sandbox, nodeName, addr string) nodeapi.Sandbox {
	if s.Node == "" {
		s.Node = nodeName
	}
	if addr != "" {
		s.NodeAddr = addr
	}
	return s
}

// eachNode runs fn for every routable node, concurrently (bounded).
func (f *NodeFleet) eachNode(ctx context.Context, fn func(context.Context, inventory.Node)) {
	var g errgroup.Group
	g.SetLimit(f.cfg.Concurrency)
	for _, n := range f.cfg.View.View().Nodes() {
		if n.Address == "" {
			continue
		}
		g.Go(func() error {
			fn(ctx, n)
			return nil
		})
	}
	_ = g.Wait()
}
