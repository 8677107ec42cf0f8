package fleetview

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
)

// Published is the durable, low-rate source of the fleet: the
// NodeInventory objects the nodes publish (membership, addresses, a
// coarse snapshot). *inventory.Source and *inventory.Static are ones.
type Published interface {
	View() *inventory.View
}

// Informer runs a Published source; *inventory.Source is one.
type Informer interface {
	Run(ctx context.Context)
	WaitForSync(ctx context.Context) error
}

// Config configures a Live view.
type Config struct {
	// Secret is the fleet secret. It is never sent: each node's stream
	// carries that node's own token, nodeapi.NodeToken(Secret, node name).
	Secret string
	// HTTP is the client for the streams; nil uses nodeapi.DefaultHTTPClient's
	// transport (Watch never applies a client's overall timeout).
	HTTP *http.Client
	// Idle is how long a stream may carry nothing, not even a keepalive,
	// before it is given up; default nodeapi.DefaultWatchIdle.
	Idle time.Duration
	// Retry is the first reconnect delay after a stream fails (doubling,
	// jittered, up to 30s); default 500ms.
	Retry time.Duration
	// History is how many changes a watch may resume across; default
	// DefaultHistory.
	History int
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Live is the fleet view every API server replica keeps: membership and a
// fallback from the published NodeInventory objects, content from each
// node's change stream (GET /v1/watch). It implements inventory.Viewer
// for the nodes — names, addresses and warm pools, fresh on every call
// (the router's input); its Views carry no entries — and serves the
// sandboxes themselves from the one Store, as of now: the fleet's lookups
// (Current, CurrentByID, List) and the list/watch source of the sandboxes
// storage (List, Since, Rev: a revision per applied change, see Store).
// Nothing is rebuilt for the whole fleet, so no reader lags.
//
// A node whose stream is down is served from its last published object
// once that is newer than the stream's last word, and Nodes reports it
// (Live false, Since); Degraded counts them.
type Live struct {
	cfg   Config
	pub   Published
	inf   Informer // nil when pub is not run by Live
	store *Store

	cur     atomic.Pointer[viewCache]
	started atomic.Bool
	runCtx  atomic.Pointer[context.Context]

	mu      sync.Mutex
	seen    map[string]*inventory.NodeInventory // published objects applied
	streams map[string]*follower
}

// viewCache is the nodes' View at a node generation of the store: base
// is built when the node set changes, v is base with the addresses and
// pools of nodeGen.
type viewCache struct {
	base    *inventory.View
	setGen  uint64
	v       *inventory.View
	nodeGen uint64
}

type follower struct {
	addr   string
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a Live view over pub. If pub is also an Informer (an
// *inventory.Source), Live runs it.
func New(pub Published, cfg Config) *Live {
	if cfg.Idle <= 0 {
		cfg.Idle = nodeapi.DefaultWatchIdle
	}
	if cfg.Retry <= 0 {
		cfg.Retry = 500 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	l := &Live{cfg: cfg, pub: pub, store: NewStore(cfg.History),
		seen: map[string]*inventory.NodeInventory{}, streams: map[string]*follower{}}
	l.inf, _ = pub.(Informer)
	registerMetrics()
	v := inventory.NewView(nil)
	l.cur.Store(&viewCache{base: v, v: v})
	return l
}

// Store is the live store (for tests and benchmarks).
func (l *Live) Store() *Store { return l.store }

// View returns the fleet's nodes as an inventory.View: names, addresses
// and warm pools as of now (when a pool or an address changed since the
// last call, a copy of the node list with them, O(nodes); when a node
// joined or left, a new View of the nodes). It carries no entries: the
// sandboxes are read from the store (Current, CurrentByID, List), never
// from a copy of it.
func (l *Live) View() *inventory.View {
	ng := l.store.nodeGeneration()
	c := l.cur.Load()
	if c.nodeGen == ng {
		return c.v
	}
	infos, ng, sg := l.store.nodeInfos()
	base, bsg := c.base, c.setGen
	if bsg != sg {
		var invs []*inventory.NodeInventory
		invs, bsg = l.store.nodeInventories()
		base = inventory.NewView(invs)
	}
	n := &viewCache{base: base, setGen: bsg, nodeGen: ng}
	n.v = base.WithNodes(func(name string) (string, []inventory.Pool, bool) {
		ni, ok := infos[name]
		return ni.addr, ni.pools, ok
	})
	l.cur.CompareAndSwap(c, n)
	return n.v
}

// List, Since and Rev are the sandboxes storage's list and watch source
// (see Store).
func (l *Live) List(keep func(inventory.Item) bool) ([]inventory.Versioned, uint64) {
	return l.store.List(keep)
}

// Since returns the changes after rv; see Store.Since.
func (l *Live) Since(rv uint64, max int) ([]inventory.Change, uint64, <-chan struct{}, error) {
	return l.store.Since(rv, max)
}

// Rev is the current revision.
func (l *Live) Rev() uint64 { return l.store.Rev() }

// Current returns the entry that speaks for name; see Store.Current.
func (l *Live) Current(name string) (inventory.Versioned, bool) { return l.store.Current(name) }

// CurrentByID returns the entry of a claim id; see Store.CurrentByID.
func (l *Live) CurrentByID(id string) (inventory.Versioned, bool) { return l.store.CurrentByID(id) }

// AwaitID waits for cond on claim id's entry; see Store.AwaitID.
func (l *Live) AwaitID(ctx context.Context, id string, cond func(v inventory.Versioned, ok bool) bool) bool {
	return l.store.AwaitID(ctx, id, cond)
}

// Streaming reports whether node's change stream is applied; see
// Store.Streaming.
func (l *Live) Streaming(node string) bool { return l.store.Streaming(node) }

// Nodes reports every node's stream state.
func (l *Live) Nodes() []NodeStatus { return l.store.Nodes() }

// Degraded is the number of nodes served from their published object
// because their stream is down.
func (l *Live) Degraded() int {
	n := 0
	for _, s := range l.store.Nodes() {
		if !s.Live {
			n++
		}
	}
	return n
}

// WaitForSync waits for the published source to sync (when Live runs
// it), applies its membership and gives the streams up to two seconds to
// deliver their SNAPSHOT, so a replica turns ready with live content.
func (l *Live) WaitForSync(ctx context.Context) error {
	if l.inf != nil {
		if err := l.inf.WaitForSync(ctx); err != nil {
			return err
		}
	}
	for !l.started.Load() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	l.membership()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && l.Degraded() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// Run follows membership and runs one stream per node until ctx ends.
func (l *Live) Run(ctx context.Context) {
	var wg sync.WaitGroup
	if l.inf != nil {
		wg.Add(1)
		go func() { defer wg.Done(); l.inf.Run(ctx) }()
	}
	l.runCtx.Store(&ctx)
	l.started.Store(true)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		l.membership()
		select {
		case <-ctx.Done():
			l.mu.Lock()
			for name, f := range l.streams {
				f.cancel()
				<-f.done
				delete(l.streams, name)
			}
			l.mu.Unlock()
			wg.Wait()
			return
		case <-tick.C:
		}
	}
}

// membership applies the published objects that changed since the last
// call and starts, restarts or stops the node streams accordingly. It
// costs the node count, plus the entries of the nodes that changed.
func (l *Live) membership() {
	ctxp := l.runCtx.Load()
	if ctxp == nil {
		return
	}
	ctx := *ctxp
	v := l.pub.View()
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	present := make(map[string]bool, len(v.Nodes()))
	for _, n := range v.Nodes() {
		inv := n.Inventory()
		present[n.Name] = true
		if l.seen[n.Name] != inv {
			l.seen[n.Name] = inv
			l.store.SetPublished(inv, now)
		}
		f := l.streams[n.Name]
		if f != nil && f.addr != n.Address {
			f.cancel()
			<-f.done
			delete(l.streams, n.Name)
			f = nil
		}
		if f == nil && n.Address != "" {
			fctx, cancel := context.WithCancel(ctx)
			f = &follower{addr: n.Address, cancel: cancel, done: make(chan struct{})}
			l.streams[n.Name] = f
			go func(name, addr string) {
				defer close(f.done)
				l.follow(fctx, name, addr)
			}(n.Name, n.Address)
		}
	}
	for name := range l.seen {
		if present[name] {
			continue
		}
		if f := l.streams[name]; f != nil {
			f.cancel()
			<-f.done
			delete(l.streams, name)
		}
		delete(l.seen, name)
		l.store.RemoveNode(name)
	}
	nodesKnown.Set(float64(len(l.seen)))
	streamsDown.Set(float64(l.Degraded()))
}

// follow keeps one node's stream applied until ctx ends: it resumes from
// the position the store holds, resyncs (SNAPSHOT) when the node says the
// stream is out of sequence, and marks the node down while it reconnects.
func (l *Live) follow(ctx context.Context, name, addr string) {
	c := &nodeapi.Client{Addr: addr, Token: nodeapi.NodeToken(l.cfg.Secret, name), HTTP: l.cfg.HTTP}
	delay := l.cfg.Retry
	for ctx.Err() == nil {
		applied := false
		err := c.Watch(ctx, l.store.Position(name), l.cfg.Idle, func(ev nodeapi.WatchEvent) error {
			if err := l.store.Apply(name, ev, l.cfg.Now()); err != nil {
				return err
			}
			applied = true
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		resyncs.Inc()
		if errors.Is(err, ErrResync) && applied {
			// Out of sequence after some progress: reopen with a
			// SNAPSHOT at once. Without progress, back off below (a node
			// that keeps answering out of sequence is not spun on).
			l.store.forgetPosition(name)
			continue
		}
		if errors.Is(err, ErrResync) {
			l.store.forgetPosition(name)
		}
		l.store.StreamDown(name, l.cfg.Now())
		if applied {
			delay = l.cfg.Retry
		}
		klog.V(2).InfoS("Node change stream down; serving the published inventory for it", "node", name, "err", err, "retryIn", delay)
		wait := delay/2 + time.Duration(rand.Int64N(int64(delay)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if delay *= 2; delay > 30*time.Second {
			delay = 30 * time.Second
		}
	}
}
