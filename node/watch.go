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
// The hub is the node's change log: the state the stream publishes (every
// claimed sandbox as a NodeInventory entry carries it, every pool's row)
// at a node-local revision, and a bounded ring of the events that led
// there, so a subscriber can resume; an older position gets a SNAPSHOT.
//
// It is event-driven. The table (table.go) is the one place where records
// enter, change and leave the claim table and where pools change, and each
// of its mutations hands the hub the new state of the one sandbox or pool
// it touched, under the node's lock, so events follow the order of the
// changes. The hub appends an event when what it publishes of that
// sandbox or pool differs (one record compared, one map write), so a
// change costs O(1) whatever the node holds. Nothing on the claim path
// reads the whole table. Once a minute (watchCheckInterval), off the claim
// path, a consistency check diffs the whole table against the hub,
// repairs what differs (appending the events that were missed) and counts
// it (hearth_node_watch_drift_total): zero unless a mutation bypassed the
// table.

const (
	// watchRing is how many events a subscriber may fall behind and resume.
	watchRing = 4096
	// watchCheckInterval is the period of the stream's consistency check.
	watchCheckInterval = time.Minute
	// watchKeepalive is the idle period after which a stream carries a
	// KEEPALIVE line.
	watchKeepalive = 5 * time.Second
)

// hub is the node's change log. Writers (the table, the consistency
// check) call it with the node's lock held; readers (the streams) take
// only h.mu. A nil hub ignores every change.
type hub struct {
	mu    sync.Mutex
	epoch string
	rev   uint64
	ring  []nodeapi.WatchEvent // the last ≤ watchRing events, event r at ring[r%watchRing]
	// sbs is each sandbox as published at rev. Its values are never
	// mutated (a change replaces them), so events share them.
	sbs   map[string]*nodeapi.Sandbox
	pools map[pool.Key]nodeapi.PoolInfo
	// notify is closed at the next event; nil while nobody waits.
	notify chan struct{}
	// stops holds, per sandbox somebody waits on (stopped), the channel
	// closed when it is published paused or leaves: a waiter wakes for
	// its own sandbox's stop, not for every change.
	stops map[string]chan struct{}
}

func newHub() *hub {
	return &hub{
		epoch: randHex(8),
		sbs:   map[string]*nodeapi.Sandbox{},
		pools: map[pool.Key]nodeapi.PoolInfo{},
	}
}

// streamed is a record as the stream publishes it: what NodeInventory
// carries (labels, annotations, e2b visibility) and the claim's metadata,
// so that every replica's list filters see it; no token, spec or managed
// fields (a read of one sandbox asks this node for those: its record is
// the truth). The metadata is fixed at claim, and the record's map is
// shared, never copied.
func streamed(r *record, node, addr string) *nodeapi.Sandbox {
	s := wireRecord(r, node, addr, false)
	s.Spec, s.ManagedFields = nil, nil
	return &s
}

// put records that sandbox s.ID appeared or changed to s (which the hub
// keeps: the caller must not change it) and appends a PUT when what is
// published of it differs. It reports whether it appended one.
func (h *hub) put(s *nodeapi.Sandbox) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.putLocked(s) {
		return false
	}
	h.wakeLocked()
	return true
}

func (h *hub) putLocked(s *nodeapi.Sandbox) bool {
	if old := h.sbs[s.ID]; old != nil && samePublished(old, s) {
		return false
	}
	h.sbs[s.ID] = s
	h.append(nodeapi.WatchEvent{Type: nodeapi.WatchPut, Sandbox: s})
	if s.Paused {
		h.stopLocked(s.ID)
	}
	return true
}

// del records that sandbox id left and appends a DELETE when the hub
// published it. It reports whether it appended one.
func (h *hub) del(id string) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.delLocked(id) {
		return false
	}
	h.wakeLocked()
	return true
}

func (h *hub) delLocked(id string) bool {
	h.stopLocked(id)
	s := h.sbs[id]
	if s == nil {
		return false
	}
	delete(h.sbs, id)
	h.append(nodeapi.WatchEvent{Type: nodeapi.WatchDelete, Sandbox: s})
	return true
}

// setPool records a pool's row (Warm and Target 0: the pool is not
// listed; Refilling is not published) and appends a POOL when it differs from the published one. It
// reports whether it appended one.
func (h *hub) setPool(p nodeapi.PoolInfo) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.setPoolLocked(p) {
		return false
	}
	h.wakeLocked()
	return true
}

func (h *hub) setPoolLocked(p nodeapi.PoolInfo) bool {
	p.Refilling = 0 // not published (boots would churn the stream)
	k := pool.Key{Template: p.Template, Net: p.Net, Size: p.Size}
	old, ok := h.pools[k]
	if p.Warm == 0 && p.Target == 0 {
		if !ok {
			return false
		}
		delete(h.pools, k)
		h.append(nodeapi.WatchEvent{Type: nodeapi.WatchPool, Pool: &p})
		return true
	}
	if ok && old == p {
		return false
	}
	h.pools[k] = p
	h.append(nodeapi.WatchEvent{Type: nodeapi.WatchPool, Pool: &p})
	return true
}

// apply is the consistency check: it diffs a whole read of the node's
// state (sbs as streamed publishes them; pools as setPool takes them,
// listed or not) against the hub's, records it and appends one event per
// difference: the events a mutation failed to hand over. It returns how
// many it appended (zero when every mutation went through the table).
func (h *hub) apply(sbs []*nodeapi.Sandbox, pools []nodeapi.PoolInfo) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	before := h.rev
	seen := make(map[string]struct{}, len(sbs))
	for _, s := range sbs {
		seen[s.ID] = struct{}{}
		h.putLocked(s)
	}
	if len(seen) != len(h.sbs) {
		var gone []string
		for id := range h.sbs {
			if _, ok := seen[id]; !ok {
				gone = append(gone, id)
			}
		}
		sort.Strings(gone)
		for _, id := range gone {
			h.delLocked(id)
		}
	}
	pseen := make(map[pool.Key]struct{}, len(pools))
	for _, p := range pools {
		pseen[pool.Key{Template: p.Template, Net: p.Net, Size: p.Size}] = struct{}{}
		h.setPoolLocked(p)
	}
	var pgone []pool.Key
	for k := range h.pools {
		if _, ok := pseen[k]; !ok {
			pgone = append(pgone, k)
		}
	}
	sort.Slice(pgone, func(i, j int) bool { return keyLess(pgone[i], pgone[j]) })
	for _, k := range pgone {
		h.setPoolLocked(nodeapi.PoolInfo{Template: k.Template, Net: k.Net, Size: k.Size})
	}
	if h.rev != before {
		h.wakeLocked()
	}
	return int(h.rev - before)
}

// samePublished reports whether a and b publish the same entry
// (inventory.EntryOf: the deadline in whole seconds, the claim time in
// milliseconds, labels, annotations, e2b visibility and metadata) on
// the same pool key. The record's maps are replaced, never mutated, on a
// change (PUT /v1/sandboxes/{id}/labels), so comparing them is sound.
func samePublished(a, b *nodeapi.Sandbox) bool {
	return a.ClaimRef == b.ClaimRef && a.Paused == b.Paused && a.AgentAddr == b.AgentAddr &&
		a.Template == b.Template && a.Net == b.Net && a.Size == b.Size &&
		a.Deadline.Unix() == b.Deadline.Unix() && a.ClaimedAt.UnixMilli() == b.ClaimedAt.UnixMilli() &&
		a.Deadline.IsZero() == b.Deadline.IsZero() && a.ClaimedAt.IsZero() == b.ClaimedAt.IsZero() &&
		maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Annotations, b.Annotations) && a.E2B == b.E2B &&
		maps.Equal(a.Metadata, b.Metadata)
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

// wakeLocked wakes the streams waiting for the next event; call with h.mu
// held after appending.
func (h *hub) wakeLocked() {
	if h.notify != nil {
		close(h.notify)
		h.notify = nil
	}
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
	for _, s := range h.sbs {
		st.Sandboxes = append(st.Sandboxes, *s)
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
	next := h.changed()
	if pos.Epoch != h.epoch || pos.Rev > h.rev || pos.Rev+1 < h.oldest() {
		return []nodeapi.WatchEvent{h.snapshot(node, addr)}, h.rev, next
	}
	if pos.Rev == h.rev {
		return nil, h.rev, next
	}
	out := make([]nodeapi.WatchEvent, 0, h.rev-pos.Rev)
	for r := pos.Rev + 1; r <= h.rev; r++ {
		out = append(out, h.ring[r%watchRing])
	}
	return out, h.rev, next
}

// stopped returns the channel closed when sandbox id is next published
// paused or leaves the hub; call with h.mu held. The caller checks the
// sandbox's state after taking it (a stop before that closed no channel
// of its). The channel lasts until that stop: one per followed running
// sandbox, whatever its waiters.
func (h *hub) stopped(id string) <-chan struct{} {
	ch := h.stops[id]
	if ch == nil {
		if h.stops == nil {
			h.stops = map[string]chan struct{}{}
		}
		ch = make(chan struct{})
		h.stops[id] = ch
	}
	return ch
}

// stopLocked wakes sandbox id's stopped waiters; call with h.mu held.
func (h *hub) stopLocked(id string) {
	if ch := h.stops[id]; ch != nil {
		close(ch)
		delete(h.stops, id)
	}
}

// changed returns the channel closed at the next change; call with h.mu
// held.
func (h *hub) changed() <-chan struct{} {
	if h.notify == nil {
		h.notify = make(chan struct{})
	}
	return h.notify
}

// watchLoop runs the stream's consistency check every watchCheckInterval
// until ctx ends.
func (n *Node) watchLoop(ctx context.Context) {
	tick := time.NewTicker(watchCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			n.checkHub()
		}
	}
}

// checkHub is the stream's consistency check: it diffs the whole claim
// table and pools against the hub (under the node's lock, so no change
// falls between the read and the diff), appends the events some mutation
// failed to hand over, counts them (hearth_node_watch_drift_total) and
// returns their number. O(sandboxes held); never on the claim path.
func (n *Node) checkHub() int {
	start := time.Now()
	n.mu.Lock()
	sbs := make([]*nodeapi.Sandbox, 0, len(n.tab.byID))
	for _, sb := range n.tab.byID {
		sbs = append(sbs, streamed(&sb.rec, n.cfg.Name, n.cfg.AdvertiseAddress))
	}
	pools := make([]nodeapi.PoolInfo, 0, len(n.tab.pools))
	for _, p := range n.tab.pools {
		pools = append(pools, p.row())
	}
	drift := n.hub.apply(sbs, pools)
	n.mu.Unlock()
	n.metrics.watchCheckSeconds.Observe(time.Since(start).Seconds())
	if drift > 0 {
		n.metrics.watchDrift.Add(float64(drift))
		n.log.Error(nil, "The change stream missed changes; the consistency check repaired them", "events", drift)
	}
	return drift
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
