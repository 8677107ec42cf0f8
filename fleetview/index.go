package fleetview

import (
	"hash/maphash"
	"maps"
	"net/netip"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/sandbox"
)

// rec is one entry in compact form: 64 bytes (its name and claim id share
// one string), plus one slot in each index and one in its node's slice. The inventory.Entry a reader gets is
// rendered from it (entry). Its content never changes once indexed: a
// changed entry is a new rec. rev (the revision of its last change) and
// pos are guarded by Store.mu.
type rec struct {
	// key is the name followed by the claim id (split is where the id
	// starts): one string header and one allocation instead of two.
	key string
	// meta holds what most entries lack: the user's labels and
	// annotations, the claim's metadata, and an agent address that is not
	// IPv4 host:port.
	meta *recMeta
	rev  uint64
	node *nodeState
	// ip4 and port are the agent address when flagAddr4 is set.
	ip4 uint32
	// deadline and claimedAt are seconds since timeBase; 0 means unset.
	// A deadline is whole seconds; the claim time's milliseconds are in
	// flags (claimedMs).
	deadline, claimedAt uint32
	pos                 uint32 // index in node.recs
	port                uint16
	pk                  uint16 // index into Store.keys: the pool key
	split               uint16 // len(name) (a name is at most 63+1+253 bytes)
	// flags holds the flag bits (flag*) below msShift and the claim
	// time's millisecond (0–999) from msShift up.
	flags uint16
}

func (r *rec) name() string { return r.key[:r.split] }
func (r *rec) id() string   { return r.key[r.split:] }

// recMeta is the rare part of a rec (shared, never modified).
type recMeta struct {
	labels, annotations map[string]string
	// metadata is the claim's (inventory.Entry.Metadata), fixed at claim.
	metadata  map[string]string
	agentAddr string // when not packed in ip4/port
}

// timeBase is the zero of rec's times: 2020-01-01 UTC (they fit until 2156).
var timeBase = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).Unix()

const (
	flagPaused uint16 = 1 << iota
	// flagRef: the claim ref is the name (else the entry has none).
	flagRef
	// flagAddr4: the agent address is ip4:port.
	flagAddr4
	// flagE2B: the sandbox is e2b's (inventory.Entry.E2B).
	flagE2B

	// msShift is where the claim time's millisecond starts in flags.
	msShift = 6
)

func (r *rec) claimedMs() uint16 { return r.flags >> msShift }

// packAddr returns addr as IPv4 and port when it renders back exactly.
func packAddr(addr string) (ip uint32, port uint16, ok bool) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() || ap.String() != addr {
		return 0, 0, false
	}
	b := ap.Addr().As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]), ap.Port(), true
}

func (r *rec) agentAddr() string {
	if r.flags&flagAddr4 != 0 {
		ip := netip.AddrFrom4([4]byte{byte(r.ip4 >> 24), byte(r.ip4 >> 16), byte(r.ip4 >> 8), byte(r.ip4)})
		return netip.AddrPortFrom(ip, r.port).String()
	}
	if r.meta != nil {
		return r.meta.agentAddr
	}
	return ""
}

var hashSeed = maphash.MakeSeed()

func hashOf(s string) uint64 { return maphash.String(hashSeed, s) }

// msOf is the millisecond of t's second, as rec keeps a claim time's.
func msOf(t *metav1.Time) uint16 {
	if t == nil || t.IsZero() {
		return 0
	}
	return uint16(t.Nanosecond() / int(time.Millisecond))
}

// secsOf is t as rec keeps it; a time outside rec's range is clamped.
func secsOf(t *metav1.Time) uint32 {
	if t == nil || t.IsZero() {
		return 0
	}
	d := t.Unix() - timeBase
	switch {
	case d < 1:
		return 1
	case d > 1<<32-1:
		return 1<<32 - 1
	}
	return uint32(d)
}

// newRec compacts e for node n; call with s.mu held.
func (s *Store) newRec(n *nodeState, e *inventory.Entry) *rec {
	name := e.Name
	if len(name) > 1<<16-1 {
		// Names are checked at the API (ns/name ≤ 317 bytes); a node's
		// stream is not, and a longer one is cut rather than misindexed.
		name = name[:1<<16-1]
	}
	r := &rec{key: name + e.ID, split: uint16(len(name)), deadline: secsOf(e.Deadline), claimedAt: secsOf(e.ClaimedAt),
		node: n, pk: s.poolKey(pool.Key{Template: e.Template, Net: e.Net, Size: e.Size}), flags: msOf(e.ClaimedAt) << msShift}
	if e.Phase == sandbox.PhasePaused {
		r.flags |= flagPaused
	}
	if e.ClaimRef != "" {
		r.flags |= flagRef
	}
	if e.E2B {
		r.flags |= flagE2B
	}
	addr := ""
	if ip, port, ok := packAddr(e.AgentAddr); ok {
		r.ip4, r.port = ip, port
		r.flags |= flagAddr4
	} else {
		addr = e.AgentAddr
	}
	if len(e.Labels) > 0 || len(e.Annotations) > 0 || len(e.Metadata) > 0 || addr != "" {
		r.meta = &recMeta{labels: e.Labels, annotations: e.Annotations, metadata: e.Metadata, agentAddr: addr}
	}
	return r
}

// metadataOf is r's claim metadata (nil for none).
func (r *rec) metadataOf() map[string]string {
	if r.meta == nil {
		return nil
	}
	return r.meta.metadata
}

// holds reports whether r's content is e's (e with withFixed applied). A
// claim time in whole seconds (a published NodeInventory's: metav1.Time's
// JSON has no fraction) holds r's with milliseconds in that second, so a
// node's stream falling back to its published object changes none of its
// entries.
func (s *Store) holds(r *rec, e *inventory.Entry) bool {
	paused := e.Phase == sandbox.PhasePaused
	var labels, annotations map[string]string
	if r.meta != nil {
		labels, annotations = r.meta.labels, r.meta.annotations
	}
	return r.name() == e.Name && r.id() == e.ID && r.agentAddr() == e.AgentAddr &&
		r.deadline == secsOf(e.Deadline) && r.claimedAt == secsOf(e.ClaimedAt) &&
		(r.claimedMs() == msOf(e.ClaimedAt) || msOf(e.ClaimedAt) == 0) &&
		(r.flags&flagPaused != 0) == paused && (r.flags&flagRef != 0) == (e.ClaimRef != "") && (r.flags&flagE2B != 0) == e.E2B &&
		s.keys[r.pk] == pool.Key{Template: e.Template, Net: e.Net, Size: e.Size} &&
		maps.Equal(labels, e.Labels) && maps.Equal(annotations, e.Annotations) && maps.Equal(r.metadataOf(), e.Metadata)
}

// withFixed returns e with what is fixed at claim and e does not say — the
// metadata (a published entry carries none), the pool key's net and size
// (a NodeInventory of an older schema prunes them) — taken from r, the
// store's entry of the same claim; e itself is never written (a published
// object's entries are shared).
func (s *Store) withFixed(r *rec, e *inventory.Entry) *inventory.Entry {
	md := len(e.Metadata) == 0 && len(r.metadataOf()) > 0
	key := e.Net == "" && e.Size == "" && s.keys[r.pk].Template == e.Template
	if !md && !key {
		return e
	}
	c := *e
	if md {
		c.Metadata = r.metadataOf()
	}
	if key {
		c.Net, c.Size = s.keys[r.pk].Net, s.keys[r.pk].Size
	}
	return &c
}

// poolKey interns a pool key; call with s.mu held. Past 65,535 distinct
// keys, the last slot is reused for the rest (their entries then render
// that key: a fleet has a handful).
func (s *Store) poolKey(k pool.Key) uint16 {
	if i, ok := s.keyIdx[k]; ok {
		return i
	}
	if len(s.keys) == 1<<16-1 {
		s.keys[len(s.keys)-1] = k
		return uint16(len(s.keys) - 1)
	}
	i := uint16(len(s.keys))
	s.keys = append(s.keys, k)
	s.keyIdx[k] = i
	return i
}

// entry renders r (one allocation); call with s.mu held.
func (s *Store) entry(r *rec) *inventory.Entry {
	x := &struct {
		e      inventory.Entry
		dl, ca metav1.Time
	}{}
	x.e = s.entryInto(r, &x.dl, &x.ca)
	return &x.e
}

// entryInto renders r with its times stored in dl and ca; call with s.mu held.
func (s *Store) entryInto(r *rec, dl, ca *metav1.Time) inventory.Entry {
	k := s.keys[r.pk]
	e := inventory.Entry{Name: r.name(), ID: r.id(), Phase: sandbox.PhaseRunning, Template: k.Template, Net: k.Net, Size: k.Size, AgentAddr: r.agentAddr()}
	if r.meta != nil {
		e.Labels, e.Annotations, e.Metadata = r.meta.labels, r.meta.annotations, r.meta.metadata
	}
	if r.flags&flagPaused != 0 {
		e.Phase = sandbox.PhasePaused
	}
	if r.flags&flagRef != 0 {
		e.ClaimRef = r.name()
	}
	e.E2B = r.flags&flagE2B != 0
	if r.deadline != 0 {
		*dl = metav1.NewTime(time.Unix(timeBase+int64(r.deadline), 0).UTC())
		e.Deadline = dl
	}
	if r.claimedAt != 0 {
		*ca = metav1.NewTime(time.Unix(timeBase+int64(r.claimedAt), int64(r.claimedMs())*int64(time.Millisecond)).UTC())
		e.ClaimedAt = ca
	}
	return e
}

// item renders r as an inventory.Item; call with s.mu held.
func (s *Store) item(r *rec) inventory.Item {
	e := s.entry(r)
	return inventory.Item{Node: r.node.ident, Entry: e, Hash: inventory.Hash(r.node.name, e)}
}

// recIndex finds entries by one key, their name or their claim id. It is
// an open-addressing table of rec pointers with linear probing, split by
// the top bits of the key's hash into shards that grow on their own (a
// growth rehashes one shard, 1/64 of the index, never the whole fleet).
//
// A slot is one 8-byte pointer and the key is the entry's own string,
// hashed, never copied: at a load between 3/8 and 3/4 an entry costs
// 11–21 bytes per index, where a Go map slot (16 bytes and a control
// byte, at the swiss tables' load) measured 24–38.
//
// Entries of one key (duplicate names, or a claim id two nodes report)
// sit in arrival order along their probe run: an insert takes the first
// empty slot after its home, a delete shifts the run back (never past an
// entry of the same home), and a growth re-inserts each run from its
// start. The first entry of a key to arrive is its speaker (first).
type recIndex struct {
	byID   bool // keyed by claim id, else by name
	n      int
	shards [1 << indexShardBits]indexShard
}

const indexShardBits = 6

type indexShard struct {
	slots []*rec // len is 0 or a power of two; nil is empty
	n     int
}

func newRecIndex(byID bool) recIndex { return recIndex{byID: byID} }

func (x *recIndex) key(r *rec) string {
	if x.byID {
		return r.id()
	}
	return r.name()
}

func (x *recIndex) len() int { return x.n }

func (x *recIndex) shard(h uint64) *indexShard { return &x.shards[h>>(64-indexShardBits)] }

// run calls fn for every entry in the probe run of hash h, in order,
// until fn returns true; it returns that slot's index, or -1.
func (sh *indexShard) run(h uint64, fn func(*rec) bool) int {
	if len(sh.slots) == 0 {
		return -1
	}
	m := len(sh.slots) - 1
	for i := int(h) & m; sh.slots[i] != nil; i = (i + 1) & m {
		if fn(sh.slots[i]) {
			return i
		}
	}
	return -1
}

// first returns the first entry keyed key.
func (x *recIndex) first(key string) *rec {
	h := hashOf(key)
	sh := x.shard(h)
	if i := sh.run(h, func(r *rec) bool { return x.key(r) == key }); i >= 0 {
		return sh.slots[i]
	}
	return nil
}

// find returns node n's entry of claim id id keyed key.
func (x *recIndex) find(key string, n *nodeState, id string) *rec {
	h := hashOf(key)
	sh := x.shard(h)
	if i := sh.run(h, func(r *rec) bool { return r.node == n && r.id() == id && x.key(r) == key }); i >= 0 {
		return sh.slots[i]
	}
	return nil
}

// slot returns the index of r's slot, or -1.
func (x *recIndex) slot(r *rec) (*indexShard, int) {
	h := hashOf(x.key(r))
	sh := x.shard(h)
	return sh, sh.run(h, func(s *rec) bool { return s == r })
}

func (x *recIndex) add(r *rec) {
	h := hashOf(x.key(r))
	sh := x.shard(h)
	if (sh.n+1)*4 > len(sh.slots)*3 {
		x.grow(sh)
	}
	sh.put(h, r)
	sh.n++
	x.n++
}

// put places r in the first empty slot of its run.
func (sh *indexShard) put(h uint64, r *rec) {
	m := len(sh.slots) - 1
	i := int(h) & m
	for sh.slots[i] != nil {
		i = (i + 1) & m
	}
	sh.slots[i] = r
}

// grow doubles sh, re-inserting every run from its start (a run that
// wraps around the end is walked from the empty slot before it), so that
// entries of one key keep their order.
func (x *recIndex) grow(sh *indexShard) {
	old := sh.slots
	sh.slots = make([]*rec, max(8, 2*len(old)))
	start := 0
	for start < len(old) && old[start] != nil {
		start++
	}
	for k := range old {
		if r := old[(start+1+k)%len(old)]; r != nil {
			sh.put(hashOf(x.key(r)), r)
		}
	}
}

func (x *recIndex) del(r *rec) {
	sh, i := x.slot(r)
	if i < 0 {
		return
	}
	// Backward-shift deletion: an entry after the hole moves into it
	// unless its home lies (cyclically) after the hole.
	m := len(sh.slots) - 1
	for j := (i + 1) & m; sh.slots[j] != nil; j = (j + 1) & m {
		k := int(hashOf(x.key(sh.slots[j]))) & m
		if (i < j && (k <= i || k > j)) || (j < i && k <= i && k > j) {
			sh.slots[i] = sh.slots[j]
			i = j
		}
	}
	sh.slots[i] = nil
	sh.n--
	x.n--
}

// swap puts r where old was (same key).
func (x *recIndex) swap(old, r *rec) {
	if sh, i := x.slot(old); i >= 0 {
		sh.slots[i] = r
	}
}

// firsts calls fn for the first entry of every key.
func (x *recIndex) firsts(fn func(*rec)) {
	for s := range x.shards {
		sh := &x.shards[s]
		for i, r := range sh.slots {
			if r == nil {
				continue
			}
			key := x.key(r)
			if sh.run(hashOf(key), func(p *rec) bool { return x.key(p) == key }) == i {
				fn(r)
			}
		}
	}
}

// addTo appends r to n's entries.
func addTo(n *nodeState, r *rec) {
	r.pos = uint32(len(n.recs))
	n.recs = append(n.recs, r)
}

// dropFrom removes r from n's entries (the last one takes its place).
func dropFrom(n *nodeState, r *rec) {
	last := n.recs[len(n.recs)-1]
	n.recs[r.pos] = last
	last.pos = r.pos
	n.recs[len(n.recs)-1] = nil
	n.recs = n.recs[:len(n.recs)-1]
}

// replaceIn puts r where old was in n's entries.
func replaceIn(n *nodeState, old, r *rec) {
	r.pos = old.pos
	n.recs[r.pos] = r
}
