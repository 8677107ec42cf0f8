package fleet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/sandbox"
)

// Locator finds sandboxes in a live fleet view, as of its last applied
// change (*fleetview.Live is one: its store, fed by the nodes' change
// streams). It is what the fleet reads a sandbox's node from, so that a
// lookup never waits for an inventory.View to be rebuilt.
type Locator interface {
	// Current returns the entry that speaks for name ("<ns>/<name>").
	Current(name string) (inventory.Versioned, bool)
	// CurrentByID returns the entry of a claim id.
	CurrentByID(id string) (inventory.Versioned, bool)
	// List returns the entries keep accepts (nil: every one).
	List(keep func(inventory.Item) bool) ([]inventory.Versioned, uint64)
}

// awaiter is a Locator that can wait for a claim's entry to reach a state
// (fleetview.Live's AwaitID).
type awaiter interface {
	AwaitID(ctx context.Context, id string, cond func(v inventory.Versioned, ok bool) bool) bool
}

// settleTimeout bounds how long a pause, resume or release waits for the
// Locator to show it (settle). A streaming view shows a change within a
// few milliseconds; a node whose stream is down is waited for no longer.
const settleTimeout = time.Second

// Config configures New.
type Config struct {
	// View supplies the nodes (names, addresses, warm pools: routing) and,
	// without a Locator, the published entries lookups read. Required.
	View inventory.Viewer
	// Locator, when set, is where lookups, Held and List find sandboxes
	// instead of the View's entries. Left nil, New takes View when it is a
	// Locator (a *fleetview.Live): one source of truth for routing and
	// lookups alike.
	Locator Locator
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
// that node live, the view (the Locator when there is one, else the
// View's entries) and the one node it names, then every node live — never
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

// doubt is a claim of a name sent to a node that never answered.
type doubt struct {
	node, addr string
	until      time.Time // the lease it asked for has surely ended by then
}

// maxDoubts bounds the doubts kept; the one closest to expiry goes first.
const maxDoubts = 4096

// doubtLifetime is how long a doubt of a claim that asked for the node's
// default lease is kept: beyond any default lease (node.DefaultLimits).
const doubtLifetime = time.Hour

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
	if cfg.Locator == nil {
		cfg.Locator, _ = cfg.View.(Locator)
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

// Claim routes the request to a warm node (see Route), sets the record's
// defaults from the request and records it in the claim-time index.
//
// A claim of a name that reached a node without an answer coming back is
// ErrOutcomeUnknown, and the name is remembered as in doubt: the next claim
// of it first asks that node. If the node holds the name the claim is the
// node's 409 (the first claim landed); if it does not, the claim proceeds;
// if it does not answer, the claim is ErrClaimInDoubt (503) rather than a
// second microVM for one name on another node.
func (f *NodeFleet) Claim(ctx context.Context, req Request) (nodeapi.Sandbox, error) {
	key, err := req.Key.Normalize()
	if err != nil {
		return nodeapi.Sandbox{}, err
	}
	if err := f.resolveDoubt(ctx, req.Ref); err != nil {
		return nodeapi.Sandbox{}, err
	}
	cands := Candidates(f.cfg.View.View(), key)
	r := rand.New(lockedSource{f})
	var (
		last    Candidate // the node asked last, and what it answered
		lastErr error
	)
	s, err := Route(ctx, key, cands, r, func(ctx context.Context, c Candidate) (nodeapi.Sandbox, error) {
		s, err := f.client(c.Node, c.NodeAddr).Claim(ctx, nodeapi.ClaimRequest{
			Template: key.Template, Net: key.Net, Size: key.Size,
			TTLSeconds: req.TTLSeconds, ClaimRef: req.Ref, Env: req.Env, Metadata: req.Metadata, Object: req.Object,
			Lifecycle: req.Lifecycle,
		})
		last, lastErr = c, err
		return s, err
	})
	if err != nil {
		if err == lastErr && nodeapi.StatusOf(err) == 0 && !nodeapi.NotDelivered(err) {
			// Sent, and no answer: the node may hold the claim.
			if req.Ref != "" {
				f.addDoubt(req.Ref, last, req.TTLSeconds)
			}
			klog.InfoS("A claim got no answer from its node; its outcome is unknown", "ref", req.Ref, "node", last.Node, "err", err)
			return nodeapi.Sandbox{}, &ErrOutcomeUnknown{Ref: req.Ref, Node: last.Node, Err: err}
		}
		return nodeapi.Sandbox{}, err
	}
	if s.ClaimRef == "" {
		s.ClaimRef = req.Ref
	}
	if s.Template == "" {
		s.Template, s.Net, s.Size = key.Template, key.Net, key.Size
	}
	if s.Metadata == nil {
		s.Metadata = req.Metadata
	}
	f.index.put(s)
	return s, nil
}

// addDoubt remembers that ref's claim on c has an unknown outcome.
func (f *NodeFleet) addDoubt(ref string, c Candidate, ttlSeconds int64) {
	life := doubtLifetime
	if ttlSeconds > 0 {
		life = time.Duration(ttlSeconds)*time.Second + time.Minute
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.doubts[ref]; !ok && len(f.doubts) >= maxDoubts {
		var first string
		for r, d := range f.doubts {
			if first == "" || d.until.Before(f.doubts[first].until) {
				first = r
			}
		}
		delete(f.doubts, first)
	}
	f.doubts[ref] = doubt{node: c.Node, addr: c.NodeAddr, until: time.Now().Add(life)}
}

// resolveDoubt settles a doubt on ref before ref is claimed again: nil when
// there is none or the node it names does not hold ref, the node's 409
// when it does (the sandbox is indexed), ErrClaimInDoubt when the node
// does not answer.
func (f *NodeFleet) resolveDoubt(ctx context.Context, ref string) error {
	if ref == "" {
		return nil
	}
	f.mu.Lock()
	d, ok := f.doubts[ref]
	if ok && time.Now().After(d.until) {
		delete(f.doubts, ref)
		ok = false
	}
	f.mu.Unlock()
	if !ok {
		return nil
	}
	forget := func() {
		f.mu.Lock()
		if f.doubts[ref] == d {
			delete(f.doubts, ref)
		}
		f.mu.Unlock()
	}
	s, err := f.ask(ctx, d.node, d.addr, ref, true)
	switch {
	case err == nil:
		forget()
		f.index.put(s)
		return &nodeapi.HTTPError{Status: http.StatusConflict,
			Message: fmt.Sprintf("claim_ref %s is held by sandbox %s on node %s (an earlier claim whose answer was lost)", ref, s.ID, s.Node)}
	case errors.Is(err, ErrNotFound):
		forget()
		return nil
	}
	return &ErrClaimInDoubt{Ref: ref, Node: d.node, Err: err}
}

// ByRef finds the sandbox recorded under "<ns>/<name>".
func (f *NodeFleet) ByRef(ctx context.Context, ref string) (nodeapi.Sandbox, error) {
	return f.lookup(ctx, ref, true)
}

// ByID finds a sandbox by claim id.
func (f *NodeFleet) ByID(ctx context.Context, id string) (nodeapi.Sandbox, error) {
	return f.lookup(ctx, id, false)
}

// LiveByRef asks the nodes (the indexed one first, then every node of the
// view) for ref, ignoring the published entries. It answers ErrNotFound
// only when no reachable node holds ref.
func (f *NodeFleet) LiveByRef(ctx context.Context, ref string) (nodeapi.Sandbox, error) {
	if s, ok := f.askIndexed(ctx, ref, true); ok {
		return s, nil
	}
	return f.askAll(ctx, ref, true)
}

// LiveByID is LiveByRef for a claim id.
func (f *NodeFleet) LiveByID(ctx context.Context, id string) (nodeapi.Sandbox, error) {
	if s, ok := f.askIndexed(ctx, id, false); ok {
		return s, nil
	}
	return f.askAll(ctx, id, false)
}

// KnownByID asks the node that the claim-time index, else the view, names
// for sandbox id, and only that node: at most one node call, never a
// fan-out, so an unauthenticated caller naming random ids costs no node
// anything (the e2b gateway's public ports). ErrNotFound when neither
// knows id or that node no longer holds it.
func (f *NodeFleet) KnownByID(ctx context.Context, id string) (nodeapi.Sandbox, error) {
	return f.askKnown(ctx, id, false)
}

// KnownByRef is KnownByID for a claim ref: at most the one node the
// claim-time index, else the view, names; never a fan-out (the e2b
// gateway's router, for a caller with no Kubernetes grant).
func (f *NodeFleet) KnownByRef(ctx context.Context, ref string) (nodeapi.Sandbox, error) {
	if ref == "" {
		return nodeapi.Sandbox{}, ErrNotFound
	}
	return f.askKnown(ctx, ref, true)
}

// Held asks the node that the claim-time index, else the view, names for
// ref whether it still holds it: a name check that costs one node call,
// never a fan-out. A sandbox claimed through another replica and not yet
// published is not seen (see the package doc).
func (f *NodeFleet) Held(ctx context.Context, ref string) (nodeapi.Sandbox, bool) {
	if ref == "" {
		return nodeapi.Sandbox{}, false
	}
	s, err := f.askKnown(ctx, ref, true)
	return s, err == nil
}

// askKnown asks only the node that the claim-time index, else the view,
// names for key (a claim ref or a claim id); ErrNotFound when neither
// knows it.
func (f *NodeFleet) askKnown(ctx context.Context, key string, byRef bool) (nodeapi.Sandbox, error) {
	if s, ok := f.askIndexed(ctx, key, byRef); ok {
		return s, nil
	}
	it, ok := f.find(key, byRef)
	if !ok || it.Node.Address == "" {
		return nodeapi.Sandbox{}, ErrNotFound
	}
	s, err := f.ask(ctx, it.Node.Name, it.Node.Address, key, byRef)
	if err != nil {
		return nodeapi.Sandbox{}, err
	}
	f.index.put(s)
	return s, nil
}

// AllByRef asks every routable node for the sandboxes recorded under ref
// and returns all of them (a node refuses a second claim of one ref, but
// two nodes may each hold one: see the package doc). None is ErrNotFound,
// with ErrIncomplete when some node did not answer.
func (f *NodeFleet) AllByRef(ctx context.Context, ref string) ([]nodeapi.Sandbox, error) {
	var (
		mu     sync.Mutex
		out    []nodeapi.Sandbox
		silent []string
	)
	f.eachNode(ctx, func(ctx context.Context, n inventory.Node) {
		all, err := f.client(n.Name, n.Address).GetByRef(ctx, ref)
		mu.Lock()
		defer mu.Unlock()
		switch err := nodeErr(err); {
		case err == nil:
			for _, s := range all {
				if s.ClaimRef == ref {
					out = append(out, located(s, n.Name, n.Address))
				}
			}
		case !errors.Is(err, ErrNotFound):
			silent = append(silent, n.Name)
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].ClaimedAt.Before(out[j].ClaimedAt) })
	if len(out) == 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if len(silent) > 0 {
			sort.Strings(silent)
			return nil, fmt.Errorf("%w; %w: %v", ErrNotFound, ErrIncomplete, silent)
		}
		return nil, ErrNotFound
	}
	return out, nil
}

// SetLabels replaces s's recorded labels, annotations and managed fields
// on its node (conditional on req.Version when set: a stale one is the
// node's 409) and re-indexes the answer.
func (f *NodeFleet) SetLabels(ctx context.Context, s nodeapi.Sandbox, req nodeapi.LabelsRequest) (nodeapi.Sandbox, error) {
	c, err := f.owner(s)
	if err != nil {
		return nodeapi.Sandbox{}, err
	}
	out, err := c.SetLabels(ctx, s.ID, req)
	if err != nil {
		return nodeapi.Sandbox{}, nodeErr(err)
	}
	out = located(out, s.Node, c.Addr)
	f.index.put(out)
	return out, nil
}

// lookup returns the holding node's record of key (a claim ref or a claim
// id): the node the claim-time index, else the view, names is asked (one
// call); a key neither knows, or that node no longer holds, is asked of
// every node. The view says which node holds a sandbox; that node's record
// is the truth — spec, managed fields, metadata, version —, so a read on
// any replica, or after a restart, returns what the create stored. Only
// when the named node does not answer is the view's entry returned (what
// the stream or a publish last said of it: no spec, managed fields or
// version).
func (f *NodeFleet) lookup(ctx context.Context, key string, byRef bool) (nodeapi.Sandbox, error) {
	if key == "" {
		return nodeapi.Sandbox{}, ErrNotFound
	}
	if s, ok := f.askIndexed(ctx, key, byRef); ok {
		return s, nil
	}
	if it, ok := f.find(key, byRef); ok && it.Entry.ID != "" {
		if it.Node.Address == "" {
			return it.Sandbox(), nil
		}
		s, err := f.ask(ctx, it.Node.Name, it.Node.Address, key, byRef)
		switch {
		case err == nil:
			f.index.put(s)
			return s, nil
		case !errors.Is(err, ErrNotFound):
			if ctx.Err() != nil {
				return nodeapi.Sandbox{}, ctx.Err()
			}
			return it.Sandbox(), nil
		}
	}
	return f.askAll(ctx, key, byRef)
}

// find looks key (a name, or a claim id) up in the view: the Locator's
// store when there is one, else the View's entries.
func (f *NodeFleet) find(key string, byRef bool) (inventory.Item, bool) {
	if l := f.cfg.Locator; l != nil {
		var v inventory.Versioned
		var ok bool
		if byRef {
			v, ok = l.Current(key)
		} else {
			v, ok = l.CurrentByID(key)
		}
		return v.Item, ok
	}
	if byRef {
		return f.cfg.View.View().ByName(key)
	}
	return f.cfg.View.View().ByID(key)
}

// items returns every entry of the view (the Locator's, sorted by name
// then claim id, else the View's, in its order).
func (f *NodeFleet) items() []inventory.Item {
	if l := f.cfg.Locator; l != nil {
		vs, _ := l.List(nil)
		out := make([]inventory.Item, len(vs))
		for i := range vs {
			out[i] = vs[i].Item
		}
		sort.Slice(out, func(i, j int) bool {
			a, b := out[i].Entry, out[j].Entry
			if a.Name != b.Name {
				return a.Name < b.Name
			}
			return a.ID < b.ID
		})
		return out
	}
	v := f.cfg.View.View()
	out := make([]inventory.Item, v.Len())
	for i := range out {
		out[i] = v.At(i)
	}
	return out
}

// askIndexed asks the node the claim-time index names for key.
func (f *NodeFleet) askIndexed(ctx context.Context, key string, byRef bool) (nodeapi.Sandbox, bool) {
	rec, ok := f.index.get(key, byRef)
	if !ok {
		return nodeapi.Sandbox{}, false
	}
	s, err := f.ask(ctx, rec.Node, rec.NodeAddr, key, byRef)
	if errors.Is(err, ErrNotFound) && !byRef {
		f.index.forget(rec.ClaimRef, rec.ID)
	}
	return s, err == nil
}

// ask asks one node live for key; ErrNotFound when it does not hold it.
// By ref, the newest claim under the name wins.
func (f *NodeFleet) ask(ctx context.Context, nodeName, addr, key string, byRef bool) (nodeapi.Sandbox, error) {
	c := f.client(nodeName, addr)
	var s nodeapi.Sandbox
	if byRef {
		all, err := c.GetByRef(ctx, key)
		if err != nil {
			return nodeapi.Sandbox{}, nodeErr(err)
		}
		found := false
		for _, x := range all {
			if x.ClaimRef == key && (!found || x.ClaimedAt.After(s.ClaimedAt)) {
				s, found = x, true
			}
		}
		if !found {
			return nodeapi.Sandbox{}, ErrNotFound
		}
	} else {
		x, err := c.Get(ctx, key)
		if err != nil {
			return nodeapi.Sandbox{}, nodeErr(err)
		}
		s = x
	}
	return located(s, nodeName, addr), nil
}

// askAll asks every routable node of the view for key concurrently (bounded);
// the first holder wins and is indexed.
func (f *NodeFleet) askAll(ctx context.Context, key string, byRef bool) (nodeapi.Sandbox, error) {
	nodes := f.cfg.View.View().Nodes()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, f.cfg.Concurrency)
	found := make(chan nodeapi.Sandbox, 1)
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
			s, err := f.ask(ctx, n.Name, n.Address, key, byRef)
			switch {
			case err == nil:
				select {
				case found <- s:
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
	case s := <-found:
		f.index.put(s)
		return s, nil
	default:
	}
	if err := ctx.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return nodeapi.Sandbox{}, err
	}
	if len(silent) > 0 {
		sort.Strings(silent)
		return nodeapi.Sandbox{}, fmt.Errorf("%w; %w: %v", ErrNotFound, ErrIncomplete, silent)
	}
	return nodeapi.Sandbox{}, ErrNotFound
}

// ErrIncomplete accompanies ErrNotFound when some nodes did not answer a
// live lookup: the sandbox may still exist on one of them.
var ErrIncomplete = errors.New("some nodes did not answer")

// List returns every sandbox the view knows, in its order (by name with a
// Locator), then the
// indexed claims the view does not list yet, each verified live (one a
// node no longer holds is dropped from the index; one whose node does not
// answer is listed as indexed). Each record carries what the view's entry
// does — pool key, labels, annotations, e2b visibility and the claim's
// metadata, on every replica and after any restart (the nodes' streams
// carry them) —; the metadata of an entry the view read from a published
// object (and net and size, pruned by an older NodeInventory schema) is
// filled from the index. No record carries its token.
func (f *NodeFleet) List(ctx context.Context) ([]nodeapi.Sandbox, error) {
	items := f.items()
	out := make([]nodeapi.Sandbox, 0, len(items))
	seen := make(map[string]bool, len(items))
	for _, it := range items {
		s := it.Sandbox()
		if rec, ok := f.index.get(s.ID, false); ok {
			if s.Net == "" && s.Size == "" {
				s.Net, s.Size = rec.Net, rec.Size
			}
			if s.Metadata == nil {
				s.Metadata = rec.Metadata
			}
		}
		seen[s.ID] = true
		out = append(out, s)
	}
	pending := f.index.unlisted(seen)
	found := make([]*nodeapi.Sandbox, len(pending))
	sem := make(chan struct{}, f.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, rec := range pending {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			s, err := f.ask(ctx, rec.Node, rec.NodeAddr, rec.ID, false)
			switch {
			case err == nil:
				s.Token = "" // a list carries no tokens, like the node's
				found[i] = &s
			case errors.Is(err, ErrNotFound):
				f.index.forget(rec.ClaimRef, rec.ID)
			default:
				rec.Token = ""
				found[i] = &rec
			}
		}()
	}
	wg.Wait()
	for _, s := range found {
		if s != nil {
			out = append(out, *s)
		}
	}
	return out, ctx.Err()
}

// Pools returns every routable node's advertised warm pools, as published.
func (f *NodeFleet) Pools(context.Context) ([]nodeapi.PoolInfo, error) {
	var out []nodeapi.PoolInfo
	for _, n := range f.cfg.View.View().Nodes() {
		for _, p := range n.Pools {
			out = append(out, nodeapi.PoolInfo{Template: p.Template, Net: p.Net, Size: p.Size, Warm: p.Warm, Target: p.Target})
		}
	}
	return out, nil
}

// owner returns the client of the node holding s.
func (f *NodeFleet) owner(s nodeapi.Sandbox) (*nodeapi.Client, error) {
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
	if s.Node == "" {
		return nil, fmt.Errorf("sandbox %s names no node; its node's token is unknown", s.ID)
	}
	return f.client(s.Node, addr), nil
}

// Release destroys s on its node by claim id.
func (f *NodeFleet) Release(ctx context.Context, s nodeapi.Sandbox) error {
	c, err := f.owner(s)
	if err != nil {
		return err
	}
	err = nodeErr(c.Release(ctx, s.ID))
	if err == nil || errors.Is(err, ErrNotFound) {
		f.index.forget(s.ClaimRef, s.ID)
		f.settle(ctx, s.ID, func(_ inventory.Versioned, ok bool) bool { return !ok })
	}
	return err
}

// settle waits, at most settleTimeout, until the Locator shows what the
// node just did to claim id (cond), so that the caller's next list reads
// its own write: a paused sandbox listed as paused, a released one gone.
// Without an awaiting Locator it returns at once.
func (f *NodeFleet) settle(ctx context.Context, id string, cond func(v inventory.Versioned, ok bool) bool) {
	aw, ok := f.cfg.Locator.(awaiter)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	aw.AwaitID(ctx, id, cond)
}

// settlePhase is settle until id's entry is gone or paused (or not).
func (f *NodeFleet) settlePhase(ctx context.Context, id string, paused bool) {
	f.settle(ctx, id, func(v inventory.Versioned, ok bool) bool {
		return !ok || (v.Item.Entry.Phase == sandbox.PhasePaused) == paused
	})
}

// Pause pauses s.
func (f *NodeFleet) Pause(ctx context.Context, s nodeapi.Sandbox) error {
	c, err := f.owner(s)
	if err != nil {
		return err
	}
	if err := nodeErr(c.Pause(ctx, s.ID)); err != nil {
		return err
	}
	f.settlePhase(ctx, s.ID, true)
	return nil
}

// PauseWithoutMemory pauses s without its memory (nodeapi.PauseRequest):
// its VM is stopped, its file system kept.
func (f *NodeFleet) PauseWithoutMemory(ctx context.Context, s nodeapi.Sandbox) error {
	c, err := f.owner(s)
	if err != nil {
		return err
	}
	keep := false
	if err := nodeErr(c.PauseWith(ctx, s.ID, nodeapi.PauseRequest{Memory: &keep})); err != nil {
		return err
	}
	f.settlePhase(ctx, s.ID, true)
	return nil
}

// Resume resumes s.
func (f *NodeFleet) Resume(ctx context.Context, s nodeapi.Sandbox) error {
	c, err := f.owner(s)
	if err != nil {
		return err
	}
	if err := nodeErr(c.Resume(ctx, s.ID)); err != nil {
		return err
	}
	f.settlePhase(ctx, s.ID, false)
	return nil
}

// Fork clones s count times on its node; children are indexed at once.
func (f *NodeFleet) Fork(ctx context.Context, s nodeapi.Sandbox, count int, ttlSeconds int64) ([]nodeapi.Sandbox, error) {
	c, err := f.owner(s)
	if err != nil {
		return nil, err
	}
	kids, err := c.Fork(ctx, s.ID, nodeapi.ForkRequest{Count: count, TTLSeconds: ttlSeconds})
	if err != nil {
		return nil, nodeErr(err)
	}
	for i := range kids {
		kids[i] = located(kids[i], s.Node, c.Addr)
		if kids[i].Metadata == nil {
			kids[i].Metadata = s.Metadata
		}
		f.index.put(kids[i])
	}
	return kids, nil
}

// Snapshot snapshots s on its node.
func (f *NodeFleet) Snapshot(ctx context.Context, s nodeapi.Sandbox, name string) (nodeapi.Snapshot, error) {
	c, err := f.owner(s)
	if err != nil {
		return nodeapi.Snapshot{}, err
	}
	snap, err := c.Snapshot(ctx, s.ID, name)
	if err == nil && snap.Node == "" {
		snap.Node = s.Node
	}
	return snap, nodeErr(err)
}

// Snapshots lists every reachable node's snapshots, newest first.
func (f *NodeFleet) Snapshots(ctx context.Context) ([]nodeapi.Snapshot, error) {
	var mu sync.Mutex
	out := []nodeapi.Snapshot{}
	f.eachNode(ctx, func(ctx context.Context, n inventory.Node) {
		snaps, err := f.client(n.Name, n.Address).Snapshots(ctx)
		if err != nil {
			return
		}
		mu.Lock()
		for _, snap := range snaps {
			if snap.Node == "" {
				snap.Node = n.Name
			}
			out = append(out, snap)
		}
		mu.Unlock()
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	return out, ctx.Err()
}

// DeleteSnapshot deletes id on every node holding it; ErrNotFound if none did.
func (f *NodeFleet) DeleteSnapshot(ctx context.Context, id string) error {
	var mu sync.Mutex
	deleted := false
	var firstErr error
	f.eachNode(ctx, func(ctx context.Context, n inventory.Node) {
		err := nodeErr(f.client(n.Name, n.Address).DeleteSnapshot(ctx, id))
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			deleted = true
		case errors.Is(err, ErrNotFound):
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

// Renew sets s's lease to ttlSeconds from now (clamped by its node) and
// returns the lease's new deadline.
func (f *NodeFleet) Renew(ctx context.Context, s nodeapi.Sandbox, ttlSeconds int64) (time.Time, error) {
	c, err := f.owner(s)
	if err != nil {
		return time.Time{}, err
	}
	dl, err := c.Renew(ctx, s.ID, ttlSeconds)
	if err != nil {
		return time.Time{}, nodeErr(err)
	}
	f.index.renewed(s.ID, dl)
	return dl, nil
}

// Stats measures s.
func (f *NodeFleet) Stats(ctx context.Context, s nodeapi.Sandbox) (nodeapi.Stats, error) {
	c, err := f.owner(s)
	if err != nil {
		return nodeapi.Stats{}, err
	}
	st, err := c.Stats(ctx, s.ID)
	return st, nodeErr(err)
}
