// Package simfleet runs a fleet of real node daemons (node.New, their real
// HTTP handlers on loopback listeners) inside one process, for benchmarks.
// Nodes use either a real vmm backend (sim: each warm VM is a process) or
// vmmtest.Driver, an in-memory vmm.Driver whose VMs are records, so a fleet
// of a million sandboxes fits in one process. Everything above the driver —
// the claim table, the bbolt store, the HTTP API, the inventory — is the
// real code. It owns only the temporary directories and listeners it
// creates.
package simfleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/node"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/vmmtest"
)

// quiet is a logger with a sink that drops everything (a nil sink would
// make the node fall back to klog).
var quiet logr.Logger = funcr.New(func(string, string) {}, funcr.Options{})

// Token is the root token of every simulated node, and the fleet secret
// its nodes' own tokens derive from (as in sandbox-dev).
const Token = "bench-root-token"

// Options configure Start.
type Options struct {
	// Nodes is the number of nodes (default 1).
	Nodes int
	// Dir is the parent of every node's data directory; empty makes a
	// temporary one that Close removes.
	Dir string
	// Driver returns node i's driver, given its own driver root. Default:
	// NewNopDriver.
	Driver func(i int, root string) (vmm.Driver, error)
	// MaxBootConcurrency per node (default 4, the node's own default).
	MaxBootConcurrency int
	// InventoryInterval is the publish cadence (default 30 s, the node's).
	InventoryInterval time.Duration
	// Publisher, when set, receives every publish as well as the Fleet's
	// in-memory view.
	Publisher inventory.Publisher
	// Limits are the nodes' lease bounds (zero: node defaults).
	Limits node.Limits
}

// NewNopDriver returns the default driver: an in-memory vmmtest.Driver
// (named "nop") that boots nothing, so the node's own costs (claim table,
// store, HTTP) can be measured. It counts boots, clones and destroys.
func NewNopDriver() *vmmtest.Driver {
	return vmmtest.New(vmmtest.Options{Name: "nop", Addr: "127.0.0.1:1"})
}

// Node is one running node of a Fleet.
type Node struct {
	Name string
	// Addr is the node API's host:port.
	Addr   string
	Node   *node.Node
	Driver vmm.Driver
	Client *nodeapi.Client
	srv    *http.Server
}

// Fleet is N running nodes and the view of what they last published.
type Fleet struct {
	Nodes []*Node
	// View is the fleet view built from the nodes' last publishes.
	View *inventory.Static

	opts   Options
	dir    string
	tmp    bool
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	invs map[string]*inventory.NodeInventory
	// Publishes counts every publish (one per node per cadence or debounce).
	publishes int64
}

// Start starts opts.Nodes nodes, each served on its own loopback listener.
func Start(opts Options) (f *Fleet, err error) {
	if opts.Nodes <= 0 {
		opts.Nodes = 1
	}
	if opts.Driver == nil {
		opts.Driver = func(int, string) (vmm.Driver, error) { return NewNopDriver(), nil }
	}
	ctx, cancel := context.WithCancel(context.Background())
	f = &Fleet{View: inventory.NewStatic(), opts: opts, dir: opts.Dir, cancel: cancel, invs: map[string]*inventory.NodeInventory{}}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if f.dir == "" {
		if f.dir, err = os.MkdirTemp("", "hearth-bench-"); err != nil {
			return f, err
		}
		f.tmp = true
	}
	pub := inventory.PublisherFunc(f.publish)
	for i := 0; i < opts.Nodes; i++ {
		name := fmt.Sprintf("bench-node-%03d", i)
		base := filepath.Join(f.dir, name)
		drv, err := opts.Driver(i, filepath.Join(base, "vms"))
		if err != nil {
			return f, fmt.Errorf("simfleet: driver of %s: %w", name, err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return f, err
		}
		addr := l.Addr().String()
		n, err := node.New(node.Config{
			Name: name, AdvertiseAddress: addr, RootToken: Token, NodeToken: nodeapi.NodeToken(Token, name), DataDir: filepath.Join(base, "data"), Driver: drv,
			Limits: opts.Limits, MaxBootConcurrency: opts.MaxBootConcurrency, InventoryInterval: opts.InventoryInterval,
			Publisher: pub, Logger: quiet,
			RefillInterval: 200 * time.Millisecond,
			// In-memory VMs have no agent to probe.
			WarmCheckInterval: -1,
		})
		if err != nil {
			l.Close()
			return f, err
		}
		nd := &Node{Name: name, Addr: addr, Node: n, Driver: drv, Client: &nodeapi.Client{Addr: addr, Token: Token},
			srv: &http.Server{Handler: n.Handler(), ReadHeaderTimeout: 10 * time.Second}}
		f.Nodes = append(f.Nodes, nd)
		f.wg.Add(2)
		go func() { defer f.wg.Done(); _ = nd.srv.Serve(l) }()
		go func() { defer f.wg.Done(); _ = n.Run(ctx) }()
	}
	return f, nil
}

func (f *Fleet) publish(ctx context.Context, inv *inventory.NodeInventory) error {
	f.mu.Lock()
	f.invs[inv.Node] = inv
	f.publishes++
	all := make([]*inventory.NodeInventory, 0, len(f.invs))
	for _, v := range f.invs {
		all = append(all, v)
	}
	f.View.Set(all...)
	f.mu.Unlock()
	if f.opts.Publisher != nil {
		return f.opts.Publisher.Publish(ctx, inv)
	}
	return nil
}

// Publishes is the number of inventory publishes so far.
func (f *Fleet) Publishes() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.publishes
}

// PublishNow publishes every node's current inventory into the view (and
// the extra Publisher), as if their cadence had fired.
func (f *Fleet) PublishNow(ctx context.Context) error {
	var errs []error
	for _, n := range f.Nodes {
		errs = append(errs, f.publish(ctx, n.Node.Inventory()))
	}
	return errors.Join(errs...)
}

// SetWarm sets every node's warm target for key to perNode (PUT /v1/pools,
// the whole set).
func (f *Fleet) SetWarm(ctx context.Context, key pool.Key, perNode int32) error {
	for _, n := range f.Nodes {
		if _, err := n.Client.PutPools(ctx, []nodeapi.PoolSpec{{Template: key.Template, Net: key.Net, Size: key.Size, Warm: perNode}}); err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	return nil
}

// Warm is the warm count for key summed over the nodes (GET /v1/info).
func (f *Fleet) Warm(ctx context.Context, key pool.Key) (int, error) {
	total := 0
	for _, n := range f.Nodes {
		info, err := n.Client.Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", n.Name, err)
		}
		for _, p := range info.Pools {
			if p.Template == key.Template && p.Net == key.Net && p.Size == key.Size {
				total += int(p.Warm)
			}
		}
	}
	return total, nil
}

// Held is the VMs the fleet's nodes hold, warm (every pool) plus claimed,
// summed over the nodes (GET /v1/info).
func (f *Fleet) Held(ctx context.Context) (int, error) {
	total := 0
	for _, n := range f.Nodes {
		info, err := n.Client.Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", n.Name, err)
		}
		total += info.Claimed
		for _, p := range info.Pools {
			total += int(p.Warm)
		}
	}
	return total, nil
}

// WaitWarm polls until the fleet holds at least want warm VMs for key, or
// ctx ends. It returns the time the condition was first seen.
func (f *Fleet) WaitWarm(ctx context.Context, key pool.Key, want int, poll time.Duration) (time.Time, error) {
	for {
		got, err := f.Warm(ctx, key)
		if err == nil && got >= want {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("simfleet: %d of %d warm VMs: %w", got, want, ctx.Err())
		case <-time.After(poll):
		}
	}
}

// Close stops every node (destroying warm VMs, stopping claimed ones) and
// removes a temporary directory.
func (f *Fleet) Close() {
	if f == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, n := range f.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = n.srv.Shutdown(ctx)
			_ = n.Node.Close(ctx)
			if d, ok := n.Driver.(interface{ Close() error }); ok {
				_ = d.Close()
			}
		}()
	}
	wg.Wait()
	f.cancel()
	f.wg.Wait()
	if f.tmp {
		_ = os.RemoveAll(f.dir)
	}
}
