package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/internal/kubeevents"
	"github.com/hearthvm/hearth/internal/serve"
	"github.com/hearthvm/hearth/internal/tracing"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/vmm"
)

// Config configures a Node.
type Config struct {
	// Name is the node's name (NodeInventory metadata.name). Required.
	Name string
	// AdvertiseAddress is the host:port other components reach this node's
	// API at; it is published in the inventory and /v1/info.
	AdvertiseAddress string
	// NodeToken is this node's own bearer token,
	// nodeapi.NodeToken(fleetSecret, Name): what the fleet, the API
	// surfaces and the warm-pool driver send. It grants root.
	NodeToken string
	// RootToken is an operator's bearer token (sandbox-dev: the fleet
	// secret itself, <data-dir>/root-token); it grants root too. Optional:
	// the fleet never sends it. With neither token, authentication is
	// disabled: every caller is root (development only).
	RootToken string
	// DataDir holds the store, golden checkpoints and checkpoints. Required.
	// Two nodes must not share one.
	DataDir string
	// Driver boots the VMs. Required. Its root must be this node's alone.
	Driver vmm.Driver
	// Limits are the lease bounds; zero means DefaultLimits.
	Limits Limits
	// MaxBootConcurrency bounds concurrent boots and clones node-wide; default 4.
	MaxBootConcurrency int
	// InventoryInterval is the publish cadence; default 30s.
	InventoryInterval time.Duration
	// Publisher receives the inventory; nil disables publishing.
	Publisher inventory.Publisher
	// Events, when set, receives the sandboxes' lifecycle events but
	// Claimed as events.k8s.io/v1 Events regarding their Sandbox objects
	// (kubeevents.go); nil writes none. The caller owns it (its Shutdown).
	Events *kubeevents.Recorder
	// Logger defaults to klog.Background().
	Logger klog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
	// ReapInterval is the lease reaper's tick; default 1s.
	ReapInterval time.Duration
	// RefillInterval is the refill loop's tick (it also runs on every
	// change); default 1s.
	RefillInterval time.Duration
	// WarmCheckInterval is the cadence of the warm-pool health sweep, which
	// probes every warm VM's agent (GET /health) off the claim path and
	// evicts (destroys, then refills) a VM that fails two sweeps in a row or
	// whose driver reports it not running. The same sweep probes claimed,
	// non-paused sandboxes and restores (Driver.Restore, never destroys)
	// one that fails two sweeps in a row or whose VM is gone. Zero means
	// DefaultWarmCheckInterval (10s); a negative value disables the sweep.
	WarmCheckInterval time.Duration
	// Timeouts bound each API request (Handler applies them per request;
	// zero fields mean serve.DefaultTimeouts'). The server that serves
	// Handler sets the header and idle timeouts and the connection budget.
	Timeouts serve.Timeouts
	// Quota bounds the VMs and snapshot bytes beyond the warm pools; the
	// zero value means DefaultQuota.
	Quota Quota
	// StoreNoSync skips the fsync of the claim store's commits (development
	// and benchmarks only): a power loss may then lose acknowledged claims.
	StoreNoSync bool
	// TracerProvider, when set, traces the node (trace.go): a server span
	// per API request, continuing the fleet's trace, a span per driver
	// call and a client span per agent call of the claim path. Nil: off,
	// at no cost.
	TracerProvider trace.TracerProvider
}

// Node is one node daemon. Create it with New, serve Handler, call Run for
// the background loops and Close to shut down.
type Node struct {
	cfg     Config
	log     klog.Logger
	driver  vmm.Driver
	store   *store
	limits  Limits
	metrics *metrics
	now     func() time.Time

	rootHash tokenHash
	nodeHash tokenHash
	dirs     dirs

	mu       sync.Mutex // guards tab, quotaUse, inflight, closed, running
	tab      *table
	quotaUse quotaUse
	inflight int
	closed   bool
	running  bool

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
	ops    sync.WaitGroup // API operations in progress
	bg     sync.WaitGroup // boots, warm destroys, loops
	loops  sync.WaitGroup // Run's loops

	cpuRates cpuRates // the stats' CPU rate samples (cpurate.go)

	follows logFollows // the sandbox logs followed now (logfollow.go)

	refillCh chan struct{}
	hub      *hub // the change stream (watch.go), fed by tab
	closeOne sync.Once
	closeErr error

	probeClient *http.Client // the warm-pool health sweep's
	// probeTimeout bounds one health probe (warmProbeTimeout; tests
	// shorten it).
	probeTimeout time.Duration
	// agentHTTP is the claim path's client for agents: agentapi's, traced
	// when Config.TracerProvider is set.
	agentHTTP *http.Client
}

type dirs struct {
	data, golden, snapshots, tmp string
}

// New opens the node's store under cfg.DataDir, re-adopts every recorded
// sandbox through the driver (Restore), and destroys every VM under the
// driver's root that the claim table does not own. The returned Node serves
// its Handler at once; warm pools fill once Run is called.
func New(cfg Config) (*Node, error) {
	if cfg.Name == "" {
		return nil, errors.New("node: Config.Name is required")
	}
	if cfg.DataDir == "" {
		return nil, errors.New("node: Config.DataDir is required")
	}
	if cfg.Driver == nil {
		return nil, errors.New("node: Config.Driver is required")
	}
	if cfg.Limits == (Limits{}) {
		cfg.Limits = DefaultLimits
	}
	if cfg.Limits.Default <= 0 {
		cfg.Limits.Default = DefaultLimits.Default
	}
	if cfg.Limits.Max > 0 && cfg.Limits.Max < cfg.Limits.Default {
		return nil, fmt.Errorf("node: max lease %v is shorter than the default lease %v", cfg.Limits.Max, cfg.Limits.Default)
	}
	if cfg.MaxBootConcurrency <= 0 {
		cfg.MaxBootConcurrency = 4
	}
	if cfg.Quota == (Quota{}) {
		cfg.Quota = DefaultQuota
	}
	if cfg.InventoryInterval <= 0 {
		cfg.InventoryInterval = 30 * time.Second
	}
	if cfg.ReapInterval <= 0 {
		cfg.ReapInterval = time.Second
	}
	if cfg.RefillInterval <= 0 {
		cfg.RefillInterval = time.Second
	}
	if cfg.WarmCheckInterval == 0 {
		cfg.WarmCheckInterval = DefaultWarmCheckInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log.GetSink() == nil {
		log = klog.Background()
	}
	log = log.WithValues("node", cfg.Name)
	if cfg.RootToken == "" && cfg.NodeToken == "" {
		log.Info("WARNING: no node or root token configured; authentication is disabled (development only)")
	}
	data, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	d := dirs{data: data, golden: filepath.Join(data, "golden"), snapshots: filepath.Join(data, "snapshots"), tmp: filepath.Join(data, "tmp")}
	// Goldens are rebuilt per run (the agent may have changed); tmp holds
	// only the scratch snapshots of forks in progress.
	for _, p := range []string{d.golden, d.tmp} {
		if err := os.RemoveAll(p); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	for _, p := range []string{d.data, d.golden, d.snapshots, d.tmp} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	st, err := openStore(filepath.Join(data, "node.db"), cfg.StoreNoSync)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{
		cfg:      cfg,
		log:      log,
		driver:   cfg.Driver,
		store:    st,
		limits:   cfg.Limits,
		now:      cfg.Now,
		dirs:     d,
		tab:      newTable(),
		quotaUse: quotaUse{tree: map[string]int{}},
		ctx:      ctx,
		cancel:   cancel,
		refillCh: make(chan struct{}, 1),
		hub:      newHub(),

		probeClient:  newProbeClient(),
		probeTimeout: warmProbeTimeout,
		agentHTTP:    tracing.Client(agentapi.DefaultHTTPClient, cfg.TracerProvider, "agent"),
	}
	// Every change of the table is published on the change stream.
	n.tab.hub, n.tab.node, n.tab.addr = n.hub, cfg.Name, cfg.AdvertiseAddress
	if cfg.RootToken != "" {
		n.rootHash = hashToken(cfg.RootToken)
	}
	if cfg.NodeToken != "" {
		n.nodeHash = hashToken(cfg.NodeToken)
	}
	n.metrics = newMetrics(n)
	if err := n.recover(ctx); err != nil {
		cancel()
		st.close()
		return nil, fmt.Errorf("node: recovering state from %s: %w", data, err)
	}
	return n, nil
}

// recover loads the store into the table, re-adopts claimed VMs and
// destroys the VMs nobody owns.
func (n *Node) recover(ctx context.Context) error {
	targets, err := n.store.pools()
	if err != nil {
		return err
	}
	for _, t := range targets {
		n.tab.setTarget(pool.Key{Template: t.Template, Net: t.Net, Size: t.Size}, t.Warm)
	}

	cks, err := n.store.snapshots()
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, c := range cks {
		if _, err := os.Stat(c.Dir); err != nil {
			n.log.Info("Dropping snapshot whose files are gone", "snapshot", c.Snapshot.ID, "dir", c.Dir)
			_ = n.store.deleteSnapshot(c.Snapshot.ID)
			continue
		}
		known[filepath.Base(c.Dir)] = true
		if c.Snapshot.Bytes == 0 { // recorded before sizes were kept
			c.Snapshot.Bytes, _ = dirBytes(c.Dir)
		}
		n.tab.snapshots[c.Snapshot.ID] = &snapshot{rec: c}
	}
	if ents, err := os.ReadDir(n.dirs.snapshots); err == nil {
		for _, e := range ents {
			if !known[e.Name()] {
				_ = os.RemoveAll(filepath.Join(n.dirs.snapshots, e.Name()))
			}
		}
	}

	recs, err := n.store.sandboxes()
	if err != nil {
		return err
	}
	var g errgroup.Group
	g.SetLimit(8)
	for _, r := range recs {
		g.Go(func() error {
			if r.Stopped { // paused without memory: it stays stopped until resumed
				n.mu.Lock()
				n.tab.insert(&sandbox{rec: r})
				n.mu.Unlock()
				return nil
			}
			h, err := n.driver.Restore(ctx, r.Handle)
			switch {
			case vmGone(err):
				// Its state is gone: nothing to restore, ever.
				n.log.Error(err, "Claimed sandbox has no VM left; dropping it", "id", r.ID, "claimRef", r.ClaimRef)
				_ = n.driver.Destroy(ctx, r.Handle)
				_ = n.store.deleteSandbox(r.ID)
				return nil
			case err != nil:
				// Keep it (listed, releasable, reaped at its deadline) so
				// the next start can try again: its state is still on disk.
				n.log.Error(err, "Cannot restart a claimed sandbox; keeping it for a later restore", "id", r.ID, "claimRef", r.ClaimRef)
				ev := n.event(nodeapi.EventWarning, nodeapi.ReasonRestoreFailed, "the node restarted; restoring the sandbox failed, kept for a later restore")
				r.record(ev)
				if err := n.store.putSandboxes(r); err != nil {
					n.log.Error(err, "Cannot persist a sandbox event", "id", r.ID)
				}
				n.kubeEvent(&r, ev)
			default:
				r.Handle = h
				ev := n.event(nodeapi.EventNormal, nodeapi.ReasonRestored, "the node restarted; the sandbox was restored")
				r.record(ev)
				if err := n.store.putSandboxes(r); err != nil {
					n.log.Error(err, "Cannot persist a restored sandbox", "id", r.ID)
				}
				n.kubeEvent(&r, ev)
				// A re-adopted VM's filter is kept but its resolver is
				// new; a restarted one is a new boot: either way the
				// driver is told the policy again. Then its agent gets
				// its env (a restarted one has none; a re-adopted one
				// keeps it, again is harmless) and a held one is opened:
				// restarted, or claimed just before the node died.
				if err := n.enforceAndOpen(ctx, r); err != nil {
					if r.Handle.Hold {
						// Never a sandbox that serves without its policy:
						// removed as a claim whose opening failed is.
						n.log.Error(err, "Cannot enforce a restored sandbox's egress policy or open its agent; removing it", "id", r.ID, "claimRef", r.ClaimRef)
						n.metrics.opens.WithLabelValues("failed").Inc()
						_ = n.driver.Destroy(ctx, r.Handle)
						_ = n.store.deleteSandbox(r.ID)
						return nil
					}
					n.log.Error(err, "Cannot enforce a restored sandbox's egress policy or apply its env", "id", r.ID)
				}
			}
			n.mu.Lock()
			n.tab.insert(&sandbox{rec: r})
			n.mu.Unlock()
			return nil
		})
	}
	_ = g.Wait() // each restore logs its own failure

	owned := n.tab.vmIDs()
	live, err := n.driver.List(ctx)
	if err != nil {
		return fmt.Errorf("listing the driver's VMs: %w", err)
	}
	orphans := 0
	for _, h := range live {
		if !owned[h.ID] {
			orphans++
			if err := n.driver.Destroy(ctx, h); err != nil {
				n.log.Error(err, "Cannot destroy an orphaned VM", "vm", h.ID)
			}
		}
	}
	if s, ok := n.driver.(staler); ok {
		stale, err := s.Stale(ctx)
		if err != nil {
			return fmt.Errorf("listing the driver's stale VMs: %w", err)
		}
		for _, h := range stale {
			if !owned[h.ID] {
				orphans++
				if err := n.driver.Destroy(ctx, h); err != nil {
					n.log.Error(err, "Cannot remove a stale VM", "vm", h.ID)
				}
			}
		}
	}
	n.log.Info("Node state recovered", "sandboxes", len(n.tab.byID), "dropped", len(recs)-len(n.tab.byID),
		"snapshots", len(n.tab.snapshots), "pools", len(n.tab.pools), "orphansDestroyed", orphans)
	return nil
}

// staler is implemented by drivers that can list VM directories without a
// live process (vmm/sim does), so a restarted node removes the ones it does
// not own.
type staler interface {
	Stale(ctx context.Context) ([]vmm.Handle, error)
}

// Run runs the refill loop, the lease reaper, the inventory publisher and
// the warm-pool health sweep until ctx ends or Close is called. It returns
// nil then. The VMs stay as they are: call Close to shut them down.
func (n *Node) Run(ctx context.Context) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return errors.New("node: closed")
	}
	if n.running {
		n.mu.Unlock()
		return errors.New("node: already running")
	}
	n.running = true
	n.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(n.ctx, cancel)
	defer stop()

	n.loops.Add(4)
	go func() { defer n.loops.Done(); n.watchLoop(ctx) }()
	go func() { defer n.loops.Done(); n.refillLoop(ctx) }()
	go func() { defer n.loops.Done(); n.reapLoop(ctx) }()
	go func() { defer n.loops.Done(); n.publishLoop(ctx) }()
	if n.cfg.WarmCheckInterval > 0 {
		n.loops.Add(2)
		go func() { defer n.loops.Done(); n.warmCheckLoop(ctx) }()
		go func() { defer n.loops.Done(); n.oomLoop(ctx) }()
	}
	n.log.Info("Node running", "address", n.cfg.AdvertiseAddress, "vmm", n.driver.Name(), "dataDir", n.dirs.data)
	<-ctx.Done()
	n.loops.Wait()
	n.mu.Lock()
	n.running = false
	n.mu.Unlock()
	return nil
}

// Close shuts the node down in order: the loops stop, in-flight operations
// and boots finish (or are canceled), warm VMs are destroyed, and claimed
// VMs are stopped (not destroyed) so the next New on the same DataDir
// restores them. The Handler answers 503 afterwards. Close is idempotent.
func (n *Node) Close(ctx context.Context) error {
	n.closeOne.Do(func() { n.closeErr = n.close(ctx) })
	return n.closeErr
}

func (n *Node) close(ctx context.Context) error {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.cancel()
	n.loops.Wait()
	if !waitCtx(ctx, &n.ops) {
		n.log.Info("Close: API operations still running at the deadline")
	}
	if !waitCtx(ctx, &n.bg) {
		n.log.Info("Close: boots still running at the deadline")
	}
	// Use a fresh context for the driver calls: the node's is canceled.
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()

	n.mu.Lock()
	warm := n.tab.drainWarm()
	claimed := n.tab.all()
	n.mu.Unlock()

	var g errgroup.Group
	g.SetLimit(8)
	for _, h := range warm {
		g.Go(func() error {
			if err := n.driver.Destroy(dctx, h); err != nil {
				n.log.Error(err, "Close: destroying a warm VM", "vm", h.ID)
			}
			return nil
		})
	}
	for _, sb := range claimed {
		g.Go(func() error {
			sb.mu.Lock()
			defer sb.mu.Unlock()
			if sb.gone || sb.rec.Stopped {
				return nil
			}
			h, err := n.driver.Stop(dctx, sb.rec.Handle)
			if err != nil {
				n.log.Error(err, "Close: stopping a claimed VM", "id", sb.rec.ID)
				return nil
			}
			n.mu.Lock()
			rec := n.tab.update(sb, func(r *record) { r.Handle = h })
			n.mu.Unlock()
			if err := n.store.putSandboxes(rec); err != nil {
				n.log.Error(err, "Close: persisting a stopped sandbox", "id", rec.ID)
			}
			return nil
		})
	}
	_ = g.Wait() // each destroy and stop logs its own failure
	_ = os.RemoveAll(n.dirs.golden)
	n.log.Info("Node closed", "warmDestroyed", len(warm), "claimedStopped", len(claimed))
	return n.store.close()
}

func waitCtx(ctx context.Context, wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// enter registers an API operation; it fails once the node is closing.
func (n *Node) enter() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.ops.Add(1)
	return true
}

func (n *Node) leave() { n.ops.Done() }

// goBG runs f in the background, tracked for Close. It returns false (and
// does not run f) once the node is closing.
func (n *Node) goBG(f func()) bool {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return false
	}
	n.bg.Add(1)
	n.mu.Unlock()
	go func() { defer n.bg.Done(); f() }()
	return true
}

// kickRefill wakes the refill loop.
func (n *Node) kickRefill() {
	select {
	case n.refillCh <- struct{}{}:
	default:
	}
}

func randHex(nbytes int) string {
	b := make([]byte, nbytes)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

func newToken() string { return randHex(24) }
