package node

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
)

// The change stream (GET /v1/watch, docs/API.md#node-api).
//
// The hub turns the claim table and pools into a sequence of events with a
// node-local revision. It does not hook every mutation: it is woken by the
// same notifications as the publisher (changed, kickRefill) and on a short
// tick, reads the node's state, and diffs it against the state of its last
// revision. A diff costs the node's entries (a few thousand at most) and
// bursts of changes coalesce into one diff that still yields one event
// per changed sandbox or pool. The events are kept in a bounded ring so a
// subscriber can resume; an older position gets a SNAPSHOT.

const (
	// watchRing is how many events a subscriber may fall behind and resume.
	watchRing = 4096
	// watchTick bounds how stale a change the hub was not told about gets
	// (warm counts moved by boots and evictions).
	watchTick = time.Second
	// watchKeepalive is the idle period after which a stream carries a
	// KEEPALIVE line.
	watchKeepalive = 5 * time.Second
)

// hub is the node's change log.
type hub struct {
	poke chan struct{}

	syncMu sync.Mutex        // one read-and-diff at a time
	buf    []nodeapi.Sandbox // the read, reused (guarded by syncMu)

	mu     sync.Mutex
	epoch  string
	rev    uint64
	ring   []nodeapi.WatchEvent // the last ≤ watchRing events, event r at ring[r%watchRing]
	sbs    map[string]*hubEntry // id → the state at rev
	gen    uint64               // apply calls, to find the gone
	pools  map[pool.Key]nodeapi.PoolInfo
	notify chan struct{} // closed and replaced when rev advances
}

type hubEntry struct {
	s   nodeapi.Sandbox
	gen uint64 // the last apply that saw it
}

func newHub() *hub {
	return &hub{
		poke:   make(chan struct{}, 1),
		epoch:  randHex(8),
		sbs:    map[string]*hubEntry{},
		pools:  map[pool.Key]nodeapi.PoolInfo{},
		notify: make(chan struct{}),
	}
}

// wake asks the hub to diff soon; it never blocks.
func (h *hub) wake() {
	if h == nil {
		return
	}
	select {
	case h.poke <- struct{}{}:
	default:
	}
}

// watchLoop diffs the node's state on every wake and tick until ctx ends.
func (n *Node) watchLoop(ctx context.Context) {
	tick := time.NewTicker(watchTick)
	defer tick.Stop()
	for {
		n.syncHub()
		select {
		case <-ctx.Done():
			return
		case <-n.hub.poke:
		case <-tick.C:
		}
	}
}

// syncHub reads the node's state and appends its differences to the hub.
func (n *Node) syncHub() {
	n.hub.syncMu.Lock()
	defer n.hub.syncMu.Unlock()
	n.mu.Lock()
	sbs := n.hub.buf[:0]
	for _, sb := range n.tab.byID {
		s := n.wire(sb.rec, false)
		// The stream carries what NodeInventory carries: no metadata,
		// spec or managed fields.
		s.Metadata, s.Spec, s.ManagedFields = nil, nil, nil
		sbs = append(sbs, s)
	}
	pools := make([]nodeapi.PoolInfo, 0, len(n.tab.pools))
	for _, p := range n.tab.pools {
		if p.target == 0 && len(p.warm) == 0 {
			continue
		}
		pools = append(pools, nodeapi.PoolInfo{Template: p.key.Template, Net: p.key.Net, Size: p.key.Size,
			Warm: int32(len(p.warm)), Target: p.target})
	}
	n.mu.Unlock()
	n.hub.apply(n.cfg.Name, sbs, pools)
	clear(sbs)
	n.hub.buf = sbs[:0]
}

// apply diffs a read of the node's state against the hub's and records
// one event per difference. It is the pure core of the stream; an
// unchanged sandbox costs one map lookup and a few comparisons.
func (h *hub) apply(node string, sbs []nodeapi.Sandbox, pools []nodeapi.PoolInfo) {
	h.mu.Lock()
	defer h.mu.Unlock()
	before := h.rev
	h.gen++
	for i := range sbs {
		s := &sbs[i]
		e := h.sbs[s.ID]
		if e != nil {
			e.gen = h.gen
			if samePublished(&e.s, s) {
				continue
			}
			e.s = *s
		} else {
			h.sbs[s.ID] = &hubEntry{s: *s, gen: h.gen}
		}
		c := *s
		h.append(nodeapi.WatchEvent{Type: nodeapi.WatchPut, Sandbox: &c})
	}
	if len(sbs) != len(h.sbs) {
		var gone []string
		for id, e := range h.sbs {
			if e.gen != h.gen {
				gone = append(gone, id)
			}
		}
		sort.Strings(gone)
		for _, id := range gone {
			s := h.sbs[id].s
			delete(h.sbs, id)
			h.append(nodeapi.WatchEvent{Type: nodeapi.WatchDelete, Sandbox: &s})
		}
	}
	pseen := make(map[pool.Key]struct{}, len(pools))
	for i := range pools {
		p := pools[i]
		k := pool.Key{Template: p.Template, Net: p.Net, Size: p.Size}
		pseen[k] = struct{}{}
		if old, ok := h.pools[k]; ok && old == p {
			continue
		}
		h.pools[k] = p
		h.append(nodeapi.WatchEvent{Type: nodeapi.WatchPool, Pool: &p})
	}
	for k, p := range h.pools {
		if _, ok := pseen[k]; !ok {
			delete(h.pools, k)
			p.Warm, p.Target, p.Refilling = 0, 0, 0
			h.append(nodeapi.WatchEvent{Type: nodeapi.WatchPool, Pool: &p})
		}
	}
	if h.rev != before {
		close(h.notify)
		h.notify = make(chan struct{})
	}
}

// samePublished reports whether a and b publish the same entry
// (inventory.EntryOf: the deadline in whole seconds, the claim time in
// milliseconds, labels and annotations) on
// the same pool key. The record's maps are replaced, never mutated, on a
// change (PUT /v1/sandboxes/{id}/labels), so comparing them is sound.
func samePublished(a, b *nodeapi.Sandbox) bool {
	return a.ClaimRef == b.ClaimRef && a.Paused == b.Paused && a.AgentAddr == b.AgentAddr &&
		a.Template == b.Template && a.Net == b.Net && a.Size == b.Size &&
		a.Deadline.Unix() == b.Deadline.Unix() && a.ClaimedAt.UnixMilli() == b.ClaimedAt.UnixMilli() &&
		a.Deadline.IsZero() == b.Deadline.IsZero() && a.ClaimedAt.IsZero() == b.ClaimedAt.IsZero() &&
		maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Annotations, b.Annotations)
}

// append records one event at the next revision; call with h.mu held.
func (h *hub) append(ev nodeapi.WatchEvent) {
	h.rev++
	ev.Epoch, ev.Rev = h.epoch, h.rev
	if h.ring == nil {
		h.ring = make([]nodeapi.WatchEvent, watchRing)
	}
	h.ring[h.rev%watchRing] = ev
}

// oldest is the revision of the oldest event in the ring.
func (h *hub) oldest() uint64 {
	if h.rev < watchRing {
		return 1
	}
	return h.rev - watchRing + 1
}

// snapshot is the SNAPSHOT event of the hub's state; call with h.mu held.
func (h *hub) snapshot(node, addr string) nodeapi.WatchEvent {
	st := &nodeapi.WatchState{Node: node, NodeAddr: addr,
		Sandboxes: make([]nodeapi.Sandbox, 0, len(h.sbs)), Pools: make([]nodeapi.PoolInfo, 0, len(h.pools))}
	for _, e := range h.sbs {
		st.Sandboxes = append(st.Sandboxes, e.s)
	}
	sort.Slice(st.Sandboxes, func(i, j int) bool { return st.Sandboxes[i].ID < st.Sandboxes[j].ID })
	for _, p := range h.pools {
		st.Pools = append(st.Pools, p)
	}
	sort.Slice(st.Pools, func(i, j int) bool {
		a, b := st.Pools[i], st.Pools[j]
		return keyLess(pool.Key{Template: a.Template, Net: a.Net, Size: a.Size}, pool.Key{Template: b.Template, Net: b.Net, Size: b.Size})
	})
	return nodeapi.WatchEvent{Type: nodeapi.WatchSnapshot, Epoch: h.epoch, Rev: h.rev, Snapshot: st}
}

// since returns the events after pos, or a SNAPSHOT when pos is not in
// the ring (another epoch, evicted, or ahead of the node), and the channel
// closed at the next change; call with h.mu held.
func (h *hub) since(pos nodeapi.WatchPosition, node, addr string) ([]nodeapi.WatchEvent, uint64, <-chan struct{}) {
	if pos.Epoch != h.epoch || pos.Rev > h.rev || pos.Rev+1 < h.oldest() {
		return []nodeapi.WatchEvent{h.snapshot(node, addr)}, h.rev, h.notify
	}
	if pos.Rev == h.rev {
		return nil, h.rev, h.notify
	}
	out := make([]nodeapi.WatchEvent, 0, h.rev-pos.Rev)
	for r := pos.Rev + 1; r <= h.rev; r++ {
		out = append(out, h.ring[r%watchRing])
	}
	return out, h.rev, h.notify
}

// handleWatch serves GET /v1/watch?epoch=&since=: newline-delimited JSON
// events, a SNAPSHOT first unless the position is still in the ring, a
// KEEPALIVE after each idle watchKeepalive, until the client leaves or the
// node closes.
func (n *Node) handleWatch(w http.ResponseWriter, r *http.Request) {
	pos := nodeapi.WatchPosition{Epoch: r.URL.Query().Get("epoch")}
	if s := r.URL.Query().Get("since"); s != "" {
		rev, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, "since must be a revision (an unsigned integer)")
			return
		}
		pos.Rev = rev
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	write := func(ev nodeapi.WatchEvent) bool {
		// A per-write deadline: the stream outlives any server WriteTimeout,
		// a stuck reader does not hold the handler forever.
		_ = rc.SetWriteDeadline(time.Now().Add(4 * watchKeepalive))
		return enc.Encode(ev) == nil
	}
	flush := func() bool {
		_ = rc.SetWriteDeadline(time.Now().Add(4 * watchKeepalive))
		return rc.Flush() == nil
	}
	n.syncHub() // the stream starts from the node's current state
	idle := time.NewTimer(watchKeepalive)
	defer idle.Stop()
	for {
		n.hub.mu.Lock()
		evs, rev, next := n.hub.since(pos, n.cfg.Name, n.cfg.AdvertiseAddress)
		epoch := n.hub.epoch
		n.hub.mu.Unlock()
		for _, ev := range evs {
			if !write(ev) {
				return
			}
		}
		pos = nodeapi.WatchPosition{Epoch: epoch, Rev: rev}
		if len(evs) > 0 && !flush() {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-n.ctx.Done():
			return
		case <-next:
		case <-idle.C:
			if !write(nodeapi.WatchEvent{Type: nodeapi.WatchKeepalive, Epoch: epoch, Rev: rev}) || !flush() {
				return
			}
		}
		idle.Reset(watchKeepalive)
	}
}
