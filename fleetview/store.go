package fleetview

import (
	"context"
	"errors"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
)

// Store is the live fleet view: every node's entries and pools, indexed
// by claim id and by name, with a revision per applied change and a
// bounded history of changes for watches to resume from. It does no I/O
// (Live feeds it); it is safe for concurrent use.
//
// Costs: applying one change (a PUT, DELETE or POOL of a node stream) is
// O(1) — a name-index write, a slice swap, one history slot. An entry
// costs 64 bytes plus its index slots (index.go): about 110 B per
// sandbox in all at 200 × 5,000 (BenchmarkStore_Fleet200x5k).
// A node joining, leaving or resyncing (a SNAPSHOT, or adopting its
// published object) costs that node's entries. Nothing is ever rebuilt
// for the whole fleet: every reader (List, Current, CurrentByID, Since)
// reads the Store itself, as of now.
//
// Names: entries are keyed by claim id; a name ("ns/name") held by several
// entries is spoken for by the first one that appeared, and only the
// speaker's changes are Changes. A claim id
// two nodes report (it should not happen) is found as the first one.
type Store struct {
	mu    sync.RWMutex
	nodes map[string]*nodeState
	names recIndex // every entry by name (index.go)
	ids   recIndex // every entry by claim id

	keys   []pool.Key // interned pool keys (rec.pk)
	keyIdx map[pool.Key]uint16

	seq     uint64        // changes applied; the revision is encode(seq)
	base    uint64        // seq at creation: no revision below it is ours
	tag     uint64        // this process's revision tag (low revTagBits)
	hist    []change      // hist[seq % len] is change seq
	notify  chan struct{} // closed and replaced when seq advances
	nodeGen uint64        // bumped on any pool, address or node-set change
	setGen  uint64        // bumped when a node joins or leaves
}

// change is one history slot: the recs are rendered when read (a rec's
// content never changes, so the render is the state of the change).
type change struct {
	rev    uint64
	typ    inventory.EventType
	r, old *rec
}

// revTagBits of every revision are a random per-process tag: a revision
// another process (a restarted or different replica) handed out is
// unknown here, never silently mistaken for one of ours.
const revTagBits = 12

// DefaultHistory is how many changes a watch may resume across.
const DefaultHistory = 1 << 16

// nodeState is one node as the view knows it.
type nodeState struct {
	name  string
	ident *inventory.Node // Name and Address; replaced when the address changes
	pools []inventory.Pool
	recs  []*rec // its entries, in no order (rec.pos)

	// The stream: live once a SNAPSHOT (or resumed event) was applied and
	// until StreamDown. epoch/rev are the node position of the entries
	// held, or empty when they came from the published object.
	live      bool
	epoch     string
	nodeRev   uint64
	lastEvent time.Time
	downSince time.Time

	published   *inventory.NodeInventory
	publishedAt time.Time
}

// NodeStatus is how the view knows one node.
type NodeStatus struct {
	Name string
	// Live is true while the node's change stream is applied; false means
	// the view holds the node's published NodeInventory (or what the
	// stream last said, until a newer publish).
	Live bool
	// Since is when the stream went down (zero while live).
	Since time.Time
	// Position is the stream position the entries held are at.
	Position nodeapi.WatchPosition
	Entries  int
}

// NewStore returns an empty Store keeping history changes (0 means
// DefaultHistory).
func NewStore(history int) *Store {
	if history <= 0 {
		history = DefaultHistory
	}
	now := uint64(time.Now().UnixMilli())
	return &Store{
		base:   now,
		nodes:  map[string]*nodeState{},
		names:  newRecIndex(false),
		ids:    newRecIndex(true),
		keyIdx: map[pool.Key]uint16{},
		tag:    rand.Uint64N(1 << revTagBits),
		// The sequence starts at the clock so that a restarted process
		// hands out revisions above its predecessor's.
		seq:    now,
		hist:   make([]change, history),
		notify: make(chan struct{}),
	}
}

func (s *Store) encode(seq uint64) uint64 { return seq<<revTagBits | s.tag }

// decode returns the sequence of a revision of this store.
func (s *Store) decode(rv uint64) (uint64, bool) {
	return rv >> revTagBits, rv&(1<<revTagBits-1) == s.tag
}

// Rev is the current revision.
func (s *Store) Rev() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.encode(s.seq)
}

// emit records a change at the next revision; call with s.mu held.
func (s *Store) emit(t inventory.EventType, r, old *rec) {
	s.seq++
	r.rev = s.encode(s.seq)
	s.hist[s.seq%uint64(len(s.hist))] = change{rev: r.rev, typ: t, r: r, old: old}
}

// publishChanges wakes the waiters if anything was emitted since before.
func (s *Store) publishChanges(before uint64) {
	if s.seq != before {
		close(s.notify)
		s.notify = make(chan struct{})
	}
}

// node returns the named node, creating it.
func (s *Store) node(name string) *nodeState {
	n := s.nodes[name]
	if n == nil {
		n = &nodeState{name: name, ident: &inventory.Node{Name: name}}
		s.nodes[name] = n
		s.nodeGen++
		s.setGen++
	}
	return n
}

// put adds or replaces the entry of e.ID on n; call with s.mu held. What
// is fixed at claim and e does not say (the metadata, which only the
// stream carries) is kept from the store's entry of the claim (withFixed).
func (s *Store) put(n *nodeState, e *inventory.Entry) {
	old := s.names.find(e.Name, n, e.ID)
	if old != nil {
		e = s.withFixed(old, e)
		if s.holds(old, e) {
			return
		}
	}
	r := s.newRec(n, e)
	if old == nil {
		addTo(n, r)
		first := s.names.first(r.name()) == nil
		s.names.add(r)
		s.ids.add(r)
		if first {
			s.emit(inventory.Added, r, nil)
		}
		return
	}
	replaceIn(n, old, r)
	spoke := s.names.first(r.name()) == old
	s.names.swap(old, r)
	s.ids.swap(old, r)
	if spoke {
		s.emit(inventory.Modified, r, old)
	}
}

// remove drops r; call with s.mu held.
func (s *Store) remove(r *rec) {
	n := r.node
	dropFrom(n, r)
	spoke := s.names.first(r.name()) == r
	s.names.del(r)
	s.ids.del(r)
	if !spoke {
		return
	}
	if next := s.names.first(r.name()); next != nil {
		s.emit(inventory.Modified, next, r)
	} else {
		s.emit(inventory.Deleted, r, nil)
	}
}

// replace makes entries n's whole set: O(n's entries + len(entries)),
// and only the differences are Changes.
func (s *Store) replace(n *nodeState, entries []inventory.Entry) {
	keep := make(map[string]string, len(entries)) // id → name
	for i := range entries {
		keep[entries[i].ID] = entries[i].Name
	}
	for _, r := range append([]*rec(nil), n.recs...) {
		if name, ok := keep[r.id()]; !ok || name != r.name() {
			s.remove(r)
		}
	}
	if cap(n.recs) < len(entries) {
		// Size the node's slice to the set once, not by doubling.
		n.recs = append(make([]*rec, 0, len(entries)), n.recs...)
	}
	for i := range entries {
		if entries[i].ID != "" {
			s.put(n, &entries[i])
		}
	}
}

func (s *Store) setPools(n *nodeState, ps []inventory.Pool) {
	n.pools = ps
	s.nodeGen++
}

// setAddress replaces n's identity when its address changed (items
// carry it; the synthesized objects do not, so it is no Change).
func (s *Store) setAddress(n *nodeState, addr string) {
	if n.ident.Address == addr {
		return
	}
	n.ident = &inventory.Node{Name: n.name, Address: addr}
	s.nodeGen++
}

// SetPublished records a node's published NodeInventory (membership,
// address, and the fallback content). A node not live on its stream takes
// the published entries and pools at once. It reports whether the node
// is new or its address changed.
func (s *Store) SetPublished(inv *inventory.NodeInventory, now time.Time) (moved bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	before := s.seq
	name := inv.Node
	if name == "" {
		name = inv.Name
	}
	_, known := s.nodes[name]
	n := s.node(name)
	n.published, n.publishedAt = inv, now
	moved = !known || n.ident.Address != inv.Address
	s.setAddress(n, inv.Address)
	if !n.live {
		s.adopt(n)
	}
	s.publishChanges(before)
	return moved
}

// adopt makes n's content its published object; call with s.mu held.
func (s *Store) adopt(n *nodeState) {
	if n.published == nil {
		return
	}
	n.epoch, n.nodeRev = "", 0
	s.replace(n, n.published.Entries)
	s.setPools(n, n.published.Pools)
}

// RemoveNode drops a node that left the fleet (its NodeInventory is gone):
// a Deleted per entry it spoke for.
func (s *Store) RemoveNode(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[name]
	if n == nil {
		return
	}
	before := s.seq
	for len(n.recs) > 0 {
		s.remove(n.recs[len(n.recs)-1])
	}
	delete(s.nodes, name)
	s.nodeGen++
	s.setGen++
	s.publishChanges(before)
}

// ErrResync is returned by Apply when an event does not follow the
// position the view holds (another epoch, a revision gap): the caller
// must reopen the stream from the zero position (a SNAPSHOT).
var ErrResync = errors.New("fleetview: node stream out of sequence; resync")

// Position is where the node's stream should resume: the position of the
// entries held, or zero (a SNAPSHOT) when they came from elsewhere.
func (s *Store) Position(node string) nodeapi.WatchPosition {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if n := s.nodes[node]; n != nil {
		return nodeapi.WatchPosition{Epoch: n.epoch, Rev: n.nodeRev}
	}
	return nodeapi.WatchPosition{}
}

// Apply applies one event of node's change stream. A SNAPSHOT replaces
// the node's entries and pools (only the differences are Changes, so a
// resync after a node restart neither repeats nor loses a sandbox); a PUT,
// DELETE or POOL must follow the held position by exactly one revision,
// else ErrResync. A node unknown to the view (no published object yet) is
// ignored.
func (s *Store) Apply(node string, ev nodeapi.WatchEvent, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[node]
	if n == nil {
		return nil
	}
	before := s.seq
	defer s.publishChanges(before)
	if ev.Type == nodeapi.WatchSnapshot {
		if ev.Snapshot == nil {
			return ErrResync
		}
		es := make([]inventory.Entry, len(ev.Snapshot.Sandboxes))
		for i := range ev.Snapshot.Sandboxes {
			sb := &ev.Snapshot.Sandboxes[i]
			sb.Node = node
			es[i] = inventory.EntryOf(sb)
		}
		s.replace(n, es)
		s.setPools(n, poolsOf(ev.Snapshot.Pools))
		n.epoch, n.nodeRev, n.live, n.lastEvent, n.downSince = ev.Epoch, ev.Rev, true, now, time.Time{}
		return nil
	}
	if n.epoch == "" || ev.Epoch != n.epoch {
		return ErrResync
	}
	if ev.Type == nodeapi.WatchKeepalive {
		if ev.Rev != n.nodeRev {
			return ErrResync
		}
		n.live, n.lastEvent, n.downSince = true, now, time.Time{}
		return nil
	}
	if ev.Rev != n.nodeRev+1 {
		return ErrResync
	}
	switch ev.Type {
	case nodeapi.WatchPut:
		if ev.Sandbox == nil {
			return ErrResync
		}
		ev.Sandbox.Node = node
		e := inventory.EntryOf(ev.Sandbox)
		s.put(n, &e)
	case nodeapi.WatchDelete:
		if ev.Sandbox == nil {
			return ErrResync
		}
		if r := s.names.find(inventory.NameOf(ev.Sandbox), n, ev.Sandbox.ID); r != nil {
			s.remove(r)
		}
	case nodeapi.WatchPool:
		if ev.Pool == nil {
			return ErrResync
		}
		s.setPools(n, withPool(n.pools, *ev.Pool))
	}
	n.nodeRev, n.live, n.lastEvent, n.downSince = ev.Rev, true, now, time.Time{}
	return nil
}

// StreamDown notes that node's stream is down: the view falls back to the
// node's published NodeInventory when it is newer than the stream's last
// event (else it keeps what the stream said, and takes the next publish).
func (s *Store) StreamDown(node string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[node]
	if n == nil || !n.live && !n.downSince.IsZero() {
		return
	}
	before := s.seq
	n.live = false
	n.downSince = now
	if n.published != nil && n.publishedAt.After(n.lastEvent) {
		s.adopt(n)
	}
	s.publishChanges(before)
}

func poolsOf(ps []nodeapi.PoolInfo) []inventory.Pool {
	out := make([]inventory.Pool, 0, len(ps))
	for _, p := range ps {
		if p.Warm == 0 && p.Target == 0 {
			continue
		}
		out = append(out, inventory.Pool{Template: p.Template, Net: p.Net, Size: p.Size, Warm: p.Warm, Target: p.Target})
	}
	return out
}

// withPool returns ps with p's row replaced (or added, or dropped when
// p is empty); ps itself is not modified (Views share it).
func withPool(ps []inventory.Pool, p nodeapi.PoolInfo) []inventory.Pool {
	out := make([]inventory.Pool, 0, len(ps)+1)
	found := false
	for _, q := range ps {
		if q.Template == p.Template && q.Net == p.Net && q.Size == p.Size {
			found = true
			if p.Warm == 0 && p.Target == 0 {
				continue
			}
			q.Warm, q.Target = p.Warm, p.Target
		}
		out = append(out, q)
	}
	if !found && (p.Warm != 0 || p.Target != 0) {
		out = append(out, inventory.Pool{Template: p.Template, Net: p.Net, Size: p.Size, Warm: p.Warm, Target: p.Target})
	}
	return out
}

// List returns the entries keep accepts (each name once, by its speaker)
// with the revision of their last change, and the revision the list is at.
func (s *Store) List(keep func(inventory.Item) bool) ([]inventory.Versioned, uint64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]inventory.Versioned, 0, s.names.len())
	s.names.firsts(func(r *rec) {
		it := s.item(r)
		if keep == nil || keep(it) {
			out = append(out, inventory.Versioned{Item: it, Rev: r.rev})
		}
	})
	return out, s.encode(s.seq)
}

// Current returns the entry that speaks for name and the revision of its
// last change.
func (s *Store) Current(name string) (inventory.Versioned, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r := s.names.first(name)
	if r == nil {
		return inventory.Versioned{}, false
	}
	return inventory.Versioned{Item: s.item(r), Rev: r.rev}, true
}

// CurrentByID returns the entry of claim id id and the revision of its
// last change (0 for an entry that never spoke for its name).
func (s *Store) CurrentByID(id string) (inventory.Versioned, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.currentByID(id)
}

// currentByID is CurrentByID; call with s.mu held.
func (s *Store) currentByID(id string) (inventory.Versioned, bool) {
	r := s.ids.first(id)
	if r == nil {
		return inventory.Versioned{}, false
	}
	return inventory.Versioned{Item: s.item(r), Rev: r.rev}, true
}

// AwaitID waits until cond holds for the entry of claim id (ok false: the
// store holds none) or ctx ends, and reports whether it held. It wakes on
// every change the store applies; it never polls.
func (s *Store) AwaitID(ctx context.Context, id string, cond func(v inventory.Versioned, ok bool) bool) bool {
	for {
		s.mu.RLock()
		v, ok := s.currentByID(id)
		next := s.notify
		s.mu.RUnlock()
		if cond(v, ok) {
			return true
		}
		select {
		case <-next:
		case <-ctx.Done():
			return false
		}
	}
}

// Since returns the changes after revision rv (at most max; 0 means all),
// the revision they end at, and a channel closed at the next change. A
// revision this store does not know — another process's, in the future,
// or older than the history — is inventory.ErrExpired.
func (s *Store) Since(rv uint64, max int) ([]inventory.Change, uint64, <-chan struct{}, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	seq, ours := s.decode(rv)
	oldest := s.base // the oldest resumable position
	if s.seq-s.base > uint64(len(s.hist)) {
		oldest = s.seq - uint64(len(s.hist))
	}
	if !ours || seq > s.seq || seq < oldest {
		return nil, 0, nil, inventory.ErrExpired
	}
	n := s.seq - seq
	if max > 0 && n > uint64(max) {
		n = uint64(max)
	}
	out := make([]inventory.Change, 0, n)
	for q := seq + 1; q <= seq+n; q++ {
		c := &s.hist[q%uint64(len(s.hist))]
		ch := inventory.Change{Rev: c.rev, Type: c.typ, Item: s.item(c.r)}
		if c.old != nil {
			ch.Old = s.item(c.old)
		}
		out = append(out, ch)
	}
	return out, s.encode(seq + n), s.notify, nil
}

// Streaming reports whether node's change stream is applied: what the
// store holds for it follows the node within the stream's latency (else
// it holds the node's published object, or the stream's last word).
func (s *Store) Streaming(node string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := s.nodes[node]
	return n != nil && n.live
}

// Nodes reports every node's stream state, by name.
func (s *Store) Nodes() []NodeStatus {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]NodeStatus, 0, len(s.nodes))
	for _, n := range s.nodes {
		out = append(out, NodeStatus{Name: n.name, Live: n.live, Since: n.downSince,
			Position: nodeapi.WatchPosition{Epoch: n.epoch, Rev: n.nodeRev}, Entries: len(n.recs)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// nodeGeneration changes whenever a node's pools or address, or the
// node set, do.
func (s *Store) nodeGeneration() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.nodeGen
}

// nodeInfo is a node's current address and pools.
type nodeInfo struct {
	addr  string
	pools []inventory.Pool // shared: never modified
}

// nodeInfos returns every node's current address and pools, and the node
// and node-set generations they are at.
func (s *Store) nodeInfos() (map[string]nodeInfo, uint64, uint64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]nodeInfo, len(s.nodes))
	for name, n := range s.nodes {
		out[name] = nodeInfo{addr: n.ident.Address, pools: n.pools}
	}
	return out, s.nodeGen, s.setGen
}

// nodeInventories returns every node as a NodeInventory of its name,
// address and pools (no entries), by name, and the node-set generation
// they are at.
func (s *Store) nodeInventories() ([]*inventory.NodeInventory, uint64) {
	s.mu.RLock()
	out := make([]*inventory.NodeInventory, 0, len(s.nodes))
	for _, n := range s.nodes {
		inv := &inventory.NodeInventory{Node: n.name, Address: n.ident.Address, Pools: n.pools}
		inv.Name = n.name
		out = append(out, inv)
	}
	gen := s.setGen
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, gen
}

// forgetPosition makes the node's next stream open with a SNAPSHOT.
func (s *Store) forgetPosition(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.nodes[node]; n != nil {
		n.epoch, n.nodeRev = "", 0
	}
}
