package claim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/node"
	"github.com/hearthvm/hearth/sandbox"
)

// FleetConfig configures NewFleet.
type FleetConfig struct {
	// View supplies the published fleet view (nodes, pools, entries). Required.
	View inventory.Viewer
	// Token is the node/fleet root token sent to every node.
	Token string
	// HTTP is the client for node calls; nil uses node.DefaultHTTPClient.
	HTTP *http.Client
	// Seed seeds the routing randomness; 0 picks a random seed.
	Seed uint64
	// IndexSize bounds the claim-time index (refs and ids); default 65536.
	IndexSize int
	// Concurrency bounds the fan-out of live lookups; default 16.
	Concurrency int
}

// NodeFleet implements Fleet over a view of NodeInventory and the nodes'
// HTTP API. Claims are routed by power of two choices over advertised warm
// capacity (see Route). Lookups consult, in order: the claim-time index and
// that node live, the view, then every node live — never waiting for a
// publish. Verbs go to the owning node by claim id; node errors keep their
// HTTP status (node.StatusOf).
type NodeFleet struct {
	cfg   FleetConfig
	index *claimIndex

	mu      sync.Mutex
	rnd     *rand.Rand
	clients map[string]*node.Client
}

var _ Fleet = (*NodeFleet)(nil)

// NewFleet returns a NodeFleet.
func NewFleet(cfg FleetConfig) *NodeFleet {
	if cfg.IndexSize <= 0 {
		cfg.IndexSize = 1 << 16
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	return &NodeFleet{
		cfg:     cfg,
		index:   newClaimIndex(cfg.IndexSize),
		rnd:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		clients: map[string]*node.Client{},
	}
}

func (f *NodeFleet) client(addr string) *node.Client {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.clients[addr]
	if !ok {
		c = &node.Client{Addr: addr, Token: f.cfg.Token, HTTP: f.cfg.HTTP}
		f.clients[addr] = c
	}
	return c
}

// lockedRand serializes a shared *rand.Rand for Route.
type lockedSource struct {
	f *NodeFleet
}

func (s lockedSource) Uint64() uint64 {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	return s.f.rnd.Uint64()
}

// Claim routes the request to a warm node (see Route) and records the
// delivery in the claim-time index.
func (f *NodeFleet) Claim(ctx context.Context, req Request) (Delivery, error) {
	cands := Candidates(f.cfg.View.View(), req.Key)
	r := rand.New(lockedSource{f})
	d, err := Route(ctx, req.Key, cands, r, func(ctx context.Context, c Candidate) (node.ClaimResult, error) {
		return f.client(c.Addr).Claim(ctx, node.ClaimRequest{
			Template: req.Key.Template, Net: req.Key.Net, Size: req.Key.Size,
			TTLSeconds: req.TTLSeconds, ClaimRef: req.Ref, Env: req.Env, Metadata: req.Metadata,
		})
	})
	if err != nil {
		return Delivery{}, err
	}
	if d.ClaimRef == "" {
		d.ClaimRef = req.Ref
	}
	if d.Template == "" {
		d.Template = req.Key.Template
	}
	f.index.put(d.ClaimRef, d.ID, d.Node, d.NodeAddr)
	return d, nil
}

// ByRef finds the sandbox recorded under "<ns>/<name>".
func (f *NodeFleet) ByRef(ctx context.Context, ref string) (Located, error) {
	return f.lookup(ctx, ref, true)
}

// ByID finds a sandbox by claim id.
func (f *NodeFleet) ByID(ctx context.Context, id string) (Located, error) {
	return f.lookup(ctx, id, false)
}

// LiveByRef asks the nodes (the indexed one first, then every node of the
// view) for ref, ignoring the published entries. It answers ErrNotFound
// only when no reachable node holds ref.
func (f *NodeFleet) LiveByRef(ctx context.Context, ref string) (Located, error) {
	if loc, ok := f.askIndexed(ctx, ref, true); ok {
		return loc, nil
	}
	return f.askAll(ctx, ref, true)
}

// LiveByID is LiveByRef for a claim id.
func (f *NodeFleet) LiveByID(ctx context.Context, id string) (Located, error) {
	if loc, ok := f.askIndexed(ctx, id, false); ok {
		return loc, nil
	}
	return f.askAll(ctx, id, false)
}

func (f *NodeFleet) lookup(ctx context.Context, key string, byRef bool) (Located, error) {
	if key == "" {
		return Located{}, ErrNotFound
	}
	if loc, ok := f.askIndexed(ctx, key, byRef); ok {
		return loc, nil
	}
	v := f.cfg.View.View()
	var it inventory.Item
	var ok bool
	if byRef {
		it, ok = v.ByName(key)
	} else {
		it, ok = v.ByID(key)
	}
	if ok && it.Entry.ID != "" {
		return locatedOf(it), nil
	}
	return f.askAll(ctx, key, byRef)
}

// askIndexed asks the node the claim-time index names for key.
func (f *NodeFleet) askIndexed(ctx context.Context, key string, byRef bool) (Located, bool) {
	nodeName, addr, ok := f.index.get(key, byRef)
	if !ok {
		return Located{}, false
	}
	loc, err := f.ask(ctx, nodeName, addr, key, byRef)
	return loc, err == nil
}

// ask asks one node live for key; ErrNotFound when it does not hold it.
func (f *NodeFleet) ask(ctx context.Context, nodeName, addr, key string, byRef bool) (Located, error) {
	c := f.client(addr)
	var sb node.Sandbox
	if byRef {
		sbs, err := c.GetByRef(ctx, key)
		if err != nil {
			if node.StatusOf(err) == http.StatusNotFound {
				return Located{}, ErrNotFound
			}
			return Located{}, err
		}
		found := false
		for _, s := range sbs {
			if s.ClaimRef == key {
				// pick the newest claim under the name
				if !found || s.ClaimedAt.After(sb.ClaimedAt) {
					sb, found = s, true
				}
			}
		}
		if !found {
			return Located{}, ErrNotFound
		}
	} else {
		s, err := c.Get(ctx, key)
		if err != nil {
			if node.StatusOf(err) == http.StatusNotFound {
				return Located{}, ErrNotFound
			}
			return Located{}, err
		}
		sb = s
	}
	if sb.Node != "" {
		nodeName = sb.Node
	}
	return Located{Sandbox: sb, Node: nodeName, NodeAddr: addr}, nil
}

// askAll asks every routable node of the view for key concurrently (bounded);
// the first holder wins.
func (f *NodeFleet) askAll(ctx context.Context, key string, byRef bool) (Located, error) {
	nodes := f.cfg.View.View().Nodes()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, f.cfg.Concurrency)
	found := make(chan Located, 1)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		silent []string // nodes that did not answer
	)
	for i := range nodes {
		n := nodes[i]
		if n.Address == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			loc, err := f.ask(ctx, n.Name, n.Address, key, byRef)
			switch {
			case err == nil:
				select {
				case found <- loc:
					cancel()
				default:
				}
			case !errors.Is(err, ErrNotFound) && ctx.Err() == nil:
				mu.Lock()
				silent = append(silent, n.Name)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	select {
	case loc := <-found:
		f.index.put(loc.ClaimRef, loc.ID, loc.Node, loc.NodeAddr)
		return loc, nil
	default:
	}
	if err := ctx.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return Located{}, err
	}
	if len(silent) > 0 {
		sort.Strings(silent)
		return Located{}, fmt.Errorf("%w; %w: %v", ErrNotFound, ErrIncomplete, silent)
	}
	return Located{}, ErrNotFound
}

// ErrIncomplete accompanies ErrNotFound when some nodes did not answer a
// live lookup: the sandbox may still exist on one of them.
var ErrIncomplete = errors.New("some nodes did not answer")

// locatedOf converts a published entry.
func locatedOf(it inventory.Item) Located {
	e := it.Entry
	sb := node.Sandbox{ID: e.ID, Template: e.Template, ClaimRef: e.ClaimRef, Addr: e.Addr,
		Hibernated: e.Phase == sandbox.PhaseHibernated, Node: it.Node.Name}
	if e.Deadline != nil {
		sb.Deadline = e.Deadline.Time
	}
	if e.ClaimedAt != nil {
		sb.ClaimedAt = e.ClaimedAt.Time
	}
	return Located{Sandbox: sb, Node: it.Node.Name, NodeAddr: it.Node.Address}
}

// List returns every sandbox the view knows, in view order.
func (f *NodeFleet) List(_ context.Context) ([]Located, error) {
	v := f.cfg.View.View()
	out := make([]Located, 0, v.Len())
	for i := 0; i < v.Len(); i++ {
		out = append(out, locatedOf(v.At(i)))
	}
	return out, nil
}

// owner returns the client of the node holding s.
func (f *NodeFleet) owner(s Located) (*node.Client, error) {
	if s.ID == "" {
		return nil, fmt.Errorf("sandbox %q has no claim id; refusing to act by name", s.ClaimRef)
	}
	addr := s.NodeAddr
	if addr == "" {
		if n, ok := f.cfg.View.View().Node(s.Node); ok {
			addr = n.Address
		}
	}
	if addr == "" {
		return nil, fmt.Errorf("node %q of sandbox %s has no address", s.Node, s.ID)
	}
	return f.client(addr), nil
}

// Release destroys s on its node by claim id.
func (f *NodeFleet) Release(ctx context.Context, s Located) error {
	c, err := f.owner(s)
	if err != nil {
		return err
	}
	if err := c.Release(ctx, s.ID); err != nil {
		return err
	}
	f.index.forget(s.ClaimRef, s.ID)
	return nil
}

// Hibernate pauses s.
func (f *NodeFleet) Hibernate(ctx context.Context, s Located) error {
	c, err := f.owner(s)
	if err != nil {
		return err
	}
	return c.Hibernate(ctx, s.ID)
}

// Wake resumes s.
func (f *NodeFleet) Wake(ctx context.Context, s Located) error {
	c, err := f.owner(s)
	if err != nil {
		return err
	}
	return c.Wake(ctx, s.ID)
}

// Fork clones s count times on its node; children are indexed at once.
func (f *NodeFleet) Fork(ctx context.Context, s Located, count int, ttlSeconds int64) ([]Delivery, error) {
	c, err := f.owner(s)
	if err != nil {
		return nil, err
	}
	kids, err := c.Fork(ctx, s.ID, node.ForkRequest{Count: count, TTLSeconds: ttlSeconds})
	if err != nil {
		return nil, err
	}
	out := make([]Delivery, len(kids))
	for i, k := range kids {
		if k.Node == "" {
			k.Node = s.Node
		}
		out[i] = Delivery{ClaimResult: k, Node: k.Node, NodeAddr: c.Addr}
		f.index.put(k.ClaimRef, k.ID, k.Node, c.Addr)
	}
	return out, nil
}

// Checkpoint snapshots s on its node.
func (f *NodeFleet) Checkpoint(ctx context.Context, s Located, name string) (node.Checkpoint, error) {
	c, err := f.owner(s)
	if err != nil {
		return node.Checkpoint{}, err
	}
	ck, err := c.Checkpoint(ctx, s.ID, name)
	if err == nil && ck.Node == "" {
		ck.Node = s.Node
	}
	return ck, err
}

// Checkpoints lists every reachable node's checkpoints, newest first.
func (f *NodeFleet) Checkpoints(ctx context.Context) ([]node.Checkpoint, error) {
	var mu sync.Mutex
	out := []node.Checkpoint{}
	f.eachNode(ctx, func(ctx context.Context, n inventory.Node) {
		cks, err := f.client(n.Address).Checkpoints(ctx)
		if err != nil {
			return
		}
		mu.Lock()
		for _, ck := range cks {
			if ck.Node == "" {
				ck.Node = n.Name
			}
			out = append(out, ck)
		}
		mu.Unlock()
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	return out, ctx.Err()
}

// DeleteCheckpoint deletes id on every node holding it; ErrNotFound if none did.
func (f *NodeFleet) DeleteCheckpoint(ctx context.Context, id string) error {
	var mu sync.Mutex
	deleted := false
	var firstErr error
	f.eachNode(ctx, func(ctx context.Context, n inventory.Node) {
		err := f.client(n.Address).DeleteCheckpoint(ctx, id)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			deleted = true
		case node.StatusOf(err) == http.StatusNotFound:
		case firstErr == nil:
			firstErr = err
		}
	})
	switch {
	case deleted:
		return nil
	case firstErr != nil:
		return firstErr
	}
	return ErrNotFound
}

// eachNode runs fn for every routable node, concurrently (bounded).
func (f *NodeFleet) eachNode(ctx context.Context, fn func(context.Context, inventory.Node)) {
	sem := make(chan struct{}, f.cfg.Concurrency)
	var wg sync.WaitGroup
	for _, n := range f.cfg.View.View().Nodes() {
		if n.Address == "" {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(ctx, n)
		}()
	}
	wg.Wait()
}

// Renew sets s's lease to ttlSeconds from now (clamped by its node).
func (f *NodeFleet) Renew(ctx context.Context, s Located, ttlSeconds int64) (time.Time, error) {
	c, err := f.owner(s)
	if err != nil {
		return time.Time{}, err
	}
	return c.Renew(ctx, s.ID, ttlSeconds)
}

// Stats measures s.
func (f *NodeFleet) Stats(ctx context.Context, s Located) (node.Stats, error) {
	c, err := f.owner(s)
	if err != nil {
		return node.Stats{}, err
	}
	return c.Stats(ctx, s.ID)
}

// claimIndex is the bounded claim-time index: ref → node and id → node.
// Every put appends to a ring of at most max records; when the ring is full
// the oldest record is evicted unless its key was put again since (each
// key's latest put is its only live ring record), so the maps never hold
// more than max keys.
type claimIndex struct {
	mu    sync.Mutex
	max   int
	seq   uint64
	byRef map[string]indexed
	byID  map[string]indexed
	ring  []indexKey
	head  int // oldest ring record once the ring is full
}

type indexed struct {
	node, addr, id string
	seq            uint64
}

type indexKey struct {
	key   string
	byRef bool
	seq   uint64
}

func newClaimIndex(max int) *claimIndex {
	return &claimIndex{max: max, byRef: map[string]indexed{}, byID: map[string]indexed{}}
}

func (x *claimIndex) put(ref, id, nodeName, addr string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if ref != "" {
		x.add(ref, true, indexed{node: nodeName, addr: addr, id: id})
	}
	if id != "" {
		x.add(id, false, indexed{node: nodeName, addr: addr, id: id})
	}
}

func (x *claimIndex) m(byRef bool) map[string]indexed {
	if byRef {
		return x.byRef
	}
	return x.byID
}

func (x *claimIndex) add(key string, byRef bool, rec indexed) {
	x.seq++
	rec.seq = x.seq
	k := indexKey{key: key, byRef: byRef, seq: x.seq}
	if len(x.ring) < x.max {
		x.ring = append(x.ring, k)
	} else {
		old := x.ring[x.head]
		if m := x.m(old.byRef); m[old.key].seq == old.seq {
			delete(m, old.key)
		}
		x.ring[x.head] = k
		x.head = (x.head + 1) % x.max
	}
	x.m(byRef)[key] = rec
}

func (x *claimIndex) get(key string, byRef bool) (nodeName, addr string, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	rec, ok := x.m(byRef)[key]
	return rec.node, rec.addr, ok
}

// len is the number of indexed keys.
func (x *claimIndex) len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.byRef) + len(x.byID)
}

// forget drops the records of a released claim (their ring records age out).
func (x *claimIndex) forget(ref, id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if rec, ok := x.byRef[ref]; ok && rec.id == id {
		delete(x.byRef, ref)
	}
	delete(x.byID, id)
}
