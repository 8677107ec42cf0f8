package inventory

import (
	"hash/maphash"
	"maps"
	"slices"
	"sort"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// View is an immutable snapshot of the fleet assembled from NodeInventory
// objects: the nodes (name, address, pools) and every published entry, with
// an index by entry name ("ns/name"; duplicates allowed) and by claim id.
//
// A View never copies the NodeInventory objects it is built from and never
// mutates them: it holds them and reuses their strings. Holding a View costs
// a small fixed number of bytes per entry (a content hash, plus one
// integer-keyed slot in each of two maps); resolving one sandbox allocates
// nothing. A View is safe for concurrent readers.
//
// The indexes are keyed by a 64-bit hash of the name or id (cheaper to
// build than string keys, and nothing for the GC to scan); lookups compare
// the actual strings, so a hash collision costs a longer chain, never a
// wrong answer.
//
// Index values are refs, (node index, entry index) pairs, not positions in
// one global array: a node whose entry count changes leaves every other
// node's refs valid, so Next can patch the previous indexes whenever the
// node set and order are unchanged.
type View struct {
	nodes []Node
	// hashes[i] are the content hashes of nodes[i]'s entries, in entry
	// order. A node whose inventory object is reused from the previous view
	// shares that view's slice (it is never written after build).
	hashes [][]uint64
	// offs[i] is the position (in At order) of nodes[i]'s first entry;
	// offs[len(nodes)] is Len.
	offs []int32
	// byName: hash of a name → first entry with that hash; the others chain
	// via next in view order (equal names, or rarely colliding ones).
	byName map[uint64]ref
	// next chains the entries sharing a name hash (only when dups).
	next map[ref]ref
	// byID: hash of a claim id → the entry holding it. When two ids share
	// a hash (or an id repeats), byIDSlow replaces it.
	byID     map[uint64]ref
	byIDSlow map[string]ref
	sum      uint64 // content hash of the whole view
	dups     bool   // some name hash is held by more than one entry
}

// ref locates an entry: node index << 32 | entry index.
type ref uint64

func mkref(node, entry int) ref { return ref(uint64(node)<<32 | uint64(uint32(entry))) }
func (r ref) node() int         { return int(r >> 32) }
func (r ref) entry() int        { return int(uint32(r)) }

// keySeed seeds the index hashes; views of one process share it.
var keySeed = maphash.MakeSeed()

func indexKey(s string) uint64 { return maphash.String(keySeed, s) }

// Node is one node of a View.
type Node struct {
	// Name is the node's name (NodeInventory.Node, else metadata.name).
	Name string
	// Address is the node daemon's host:port; empty means not routable.
	Address string
	// Pools are the node's advertised warm pools.
	Pools []Pool

	inv *NodeInventory
}

// Inventory returns the NodeInventory the node was read from.
func (n *Node) Inventory() *NodeInventory { return n.inv }

// Item is one resolved entry: the entry and the node that published it.
// Both point into the View; treat them as read-only.
type Item struct {
	Node  *Node
	Entry *Entry
	// Hash is the entry's content hash (see Hash).
	Hash uint64
}

// ResourceVersion renders Hash as the decimal resourceVersion of the entry.
func (it Item) ResourceVersion() string { return strconv.FormatUint(it.Hash, 10) }

// NewView builds a View from inventories. Nodes are ordered by name (ties
// keep input order); nil inventories are skipped. The inventories must not
// be mutated while the View is in use.
func NewView(invs []*NodeInventory) *View { return build(invs, nil) }

// Next builds the View of invs like NewView, reusing v's per-entry content
// hashes for every inventory object v was also built from (the same
// pointer: inventories are never mutated while a View uses them), so a
// re-derive after one node republished hashes only that node's entries.
// When the nodes are the same (names, in the same order) it also patches
// v's indexes instead of rebuilding them: only the republished nodes'
// entries are re-indexed, whatever their new counts. A nil v is NewView.
func (v *View) Next(invs []*NodeInventory) *View { return build(invs, v) }

// hashesOf returns the content hashes of nd's entries: prev's slice when
// prev was built from the same object under the same name (the node name
// is hashed too), else freshly computed.
func hashesOf(nd *Node, reuse map[*NodeInventory]int, prev *View) []uint64 {
	if pi, ok := reuse[nd.inv]; ok && prev.nodes[pi].Name == nd.Name {
		return prev.hashes[pi]
	}
	hs := make([]uint64, len(nd.inv.Entries))
	for ei := range nd.inv.Entries {
		hs[ei] = Hash(nd.Name, &nd.inv.Entries[ei])
	}
	return hs
}

func build(invs []*NodeInventory, prev *View) *View {
	v := &View{}
	n := 0
	for _, inv := range invs {
		if inv != nil {
			v.nodes = append(v.nodes, Node{Name: nodeName(inv), Address: inv.Address, Pools: inv.Pools, inv: inv})
			n += len(inv.Entries)
		}
	}
	sort.SliceStable(v.nodes, func(i, j int) bool { return v.nodes[i].Name < v.nodes[j].Name })
	v.offs = make([]int32, len(v.nodes)+1)
	for i := range v.nodes {
		v.offs[i+1] = v.offs[i] + int32(len(v.nodes[i].inv.Entries))
	}
	if prev != nil && v.patch(prev, n) {
		v.sum = v.contentSum()
		return v
	}
	var reuse map[*NodeInventory]int
	if prev != nil && len(prev.nodes) > 0 {
		reuse = make(map[*NodeInventory]int, len(prev.nodes))
		for i := range prev.nodes {
			reuse[prev.nodes[i].inv] = i
		}
	}
	v.hashes = make([][]uint64, len(v.nodes))
	for ni := range v.nodes {
		v.hashes[ni] = hashesOf(&v.nodes[ni], reuse, prev)
	}
	v.byName = make(map[uint64]ref, n)
	v.byID = make(map[uint64]ref, n)
	// Index backwards so that the first entry of a name or id is the one
	// left in the map: one map write per key, no lookups.
	ids := 0
	for ni := len(v.nodes) - 1; ni >= 0; ni-- {
		es := v.nodes[ni].inv.Entries
		for ei := len(es) - 1; ei >= 0; ei-- {
			e := &es[ei]
			r := mkref(ni, ei)
			v.byName[indexKey(e.Name)] = r
			if e.ID != "" {
				v.byID[indexKey(e.ID)] = r
				ids++
			}
		}
	}
	// Names sharing a hash (duplicates; collisions are rarer still) are
	// chained in view order.
	if len(v.byName) < n {
		v.dups = true
		v.next = map[ref]ref{}
		tails := map[uint64]ref{}
		for ni := range v.nodes {
			es := v.nodes[ni].inv.Entries
			for ei := range es {
				k, r := indexKey(es[ei].Name), mkref(ni, ei)
				if tail, ok := tails[k]; ok {
					v.next[tail] = r
				}
				tails[k] = r
			}
		}
	}
	if len(v.byID) < ids {
		v.byID = nil
		v.byIDSlow = make(map[string]ref, ids)
		for ni := len(v.nodes) - 1; ni >= 0; ni-- {
			es := v.nodes[ni].inv.Entries
			for ei := len(es) - 1; ei >= 0; ei-- {
				if id := es[ei].ID; id != "" {
					v.byIDSlow[id] = mkref(ni, ei)
				}
			}
		}
	}
	v.sum = v.contentSum()
	return v
}

// contentSum hashes the nodes and every entry's content hash (see Sum).
func (v *View) contentSum() uint64 {
	h := uint64(fnvOffset)
	for i := range v.nodes {
		h = fnvString(h, v.nodes[i].Name)
		h = fnvString(h, v.nodes[i].Address)
	}
	for _, hs := range v.hashes {
		for _, eh := range hs {
			for b := 0; b < 8; b++ {
				h ^= uint64(byte(eh >> (8 * b)))
				h *= fnvPrime
			}
		}
	}
	return h
}

// patch is Next's fast path for the common tick: the same nodes (names) in
// the same order, and only a few of them republished (a new object, with
// any entry count). Both indexes of prev are then copied and only the
// republished nodes' entries are re-hashed and re-indexed, instead of
// re-inserting every entry into fresh maps: refs of the other nodes stay
// valid since a ref names a node and an entry within it. It applies only
// when prev has no duplicate name or id hashes and the result has none
// either (every key maps to exactly one entry, no chains); otherwise it
// returns false, leaving v.hashes and the indexes unset, and build takes
// the general path.
func (v *View) patch(prev *View, n int) bool {
	pn := prev.Len()
	if prev.dups || prev.byIDSlow != nil || pn == 0 ||
		len(prev.nodes) != len(v.nodes) || len(prev.byName) != pn {
		return false
	}
	changed, dropped := 0, 0
	for i := range v.nodes {
		nd, po := &v.nodes[i], &prev.nodes[i]
		if nd.Name != po.Name {
			return false
		}
		if nd.inv != po.inv {
			changed += len(nd.inv.Entries)
			dropped += len(po.inv.Entries)
		}
	}
	// Re-indexing a changed entry costs a delete and an insert on top of
	// the copies; past a fraction of the view a fresh build is cheaper.
	if changed > n/4 || dropped > pn/4 {
		return false
	}
	hashes := make([][]uint64, len(v.nodes))
	copy(hashes, prev.hashes)
	byName := maps.Clone(prev.byName)
	byID := maps.Clone(prev.byID)
	if byID == nil {
		byID = make(map[uint64]ref)
	}
	// Drop the republished nodes' old keys first: an entry may move
	// between two republished nodes.
	for i := range v.nodes {
		if old := prev.nodes[i].inv; v.nodes[i].inv != old {
			for ei := range old.Entries {
				e := &old.Entries[ei]
				delete(byName, indexKey(e.Name))
				if e.ID != "" {
					delete(byID, indexKey(e.ID))
				}
			}
		}
	}
	for ni := range v.nodes {
		nd := &v.nodes[ni]
		if nd.inv == prev.nodes[ni].inv {
			continue
		}
		hs := make([]uint64, len(nd.inv.Entries))
		for ei := range nd.inv.Entries {
			e := &nd.inv.Entries[ei]
			hs[ei] = Hash(nd.Name, e)
			r := mkref(ni, ei)
			k := indexKey(e.Name)
			if _, taken := byName[k]; taken {
				return false // a duplicate (or colliding) name
			}
			byName[k] = r
			if e.ID != "" {
				k = indexKey(e.ID)
				if _, taken := byID[k]; taken {
					return false // a repeated (or colliding) id
				}
				byID[k] = r
			}
		}
		hashes[ni] = hs
	}
	v.hashes, v.byName, v.byID = hashes, byName, byID
	return true
}

// Sum is a content hash of the whole view (nodes, addresses and entries).
// Equal content gives an equal Sum on every replica; it is never 0.
func (v *View) Sum() uint64 {
	if v == nil || v.sum == 0 {
		return 1
	}
	return v.sum
}

func nodeName(inv *NodeInventory) string {
	if inv.Node != "" {
		return inv.Node
	}
	return inv.Name
}

func (v *View) entry(r ref) *Entry {
	return &v.nodes[r.node()].inv.Entries[r.entry()]
}

func (v *View) item(r ref) Item {
	ni, ei := r.node(), r.entry()
	nd := &v.nodes[ni]
	return Item{Node: nd, Entry: &nd.inv.Entries[ei], Hash: v.hashes[ni][ei]}
}

// Nodes returns the nodes ordered by name. The slice is shared; do not modify it.
func (v *View) Nodes() []Node {
	if v == nil {
		return nil
	}
	return v.nodes
}

// Node returns the named node.
func (v *View) Node(name string) (*Node, bool) {
	if v == nil {
		return nil, false
	}
	i := sort.Search(len(v.nodes), func(i int) bool { return v.nodes[i].Name >= name })
	if i < len(v.nodes) && v.nodes[i].Name == name {
		return &v.nodes[i], true
	}
	return nil, false
}

// Len is the number of entries, duplicates included.
func (v *View) Len() int {
	if v == nil || len(v.offs) == 0 {
		return 0
	}
	return int(v.offs[len(v.offs)-1])
}

// At returns the i-th entry (0 ≤ i < Len), in node-name then entry order.
func (v *View) At(i int) Item {
	if i < 0 || i >= v.Len() {
		panic("inventory: View.At index out of range")
	}
	// The node holding position i: the last with offs[ni] ≤ i.
	lo, hi := 0, len(v.nodes)-1
	for lo < hi {
		mid := int(uint(lo+hi+1) >> 1)
		if int(v.offs[mid]) <= i {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return v.item(mkref(lo, i-int(v.offs[lo])))
}

// ByName resolves the first entry named name ("ns/name").
func (v *View) ByName(name string) (Item, bool) {
	var found Item
	ok := false
	v.EachByName(name, func(it Item) bool { found, ok = it, true; return false })
	return found, ok
}

// EachByName calls fn for every entry named name, in order, until fn returns false.
func (v *View) EachByName(name string, fn func(Item) bool) {
	if v == nil {
		return
	}
	r, ok := v.byName[indexKey(name)]
	for ok {
		if v.entry(r).Name == name && !fn(v.item(r)) {
			return
		}
		if v.next == nil {
			return
		}
		r, ok = v.next[r]
	}
}

// ByID resolves the entry holding claim id.
func (v *View) ByID(id string) (Item, bool) {
	if v == nil || id == "" {
		return Item{}, false
	}
	var r ref
	var ok bool
	if v.byIDSlow != nil {
		r, ok = v.byIDSlow[id]
	} else {
		r, ok = v.byID[indexKey(id)]
		ok = ok && v.entry(r).ID == id
	}
	if !ok {
		return Item{}, false
	}
	return v.item(r), true
}

// Hash is the content hash of an entry published by node: FNV-64a over the
// node name and every entry field but Net, Size and Metadata (fixed at
// claim; the metadata is not published), separated so that field
// boundaries count. It is the entry's resourceVersion: equal content,
// equal hash.
func Hash(node string, e *Entry) uint64 {
	h := uint64(fnvOffset)
	h = fnvString(h, node)
	h = fnvString(h, e.Name)
	h = fnvString(h, e.ID)
	h = fnvString(h, e.Phase)
	h = fnvString(h, e.Template)
	h = fnvString(h, e.ClaimRef)
	h = fnvString(h, e.AgentAddr)
	h = fnvTime(h, e.Deadline)
	h = fnvTime(h, e.ClaimedAt)
	h = fnvMap(h, e.Labels)
	h = fnvMap(h, e.Annotations)
	if e.E2B {
		// Only when set, so that every other entry hashes as before.
		h = fnvString(h, "e2b")
	}
	return h
}

// fnvMap hashes m in key order; nil and empty hash alike.
func fnvMap(h uint64, m map[string]string) uint64 {
	if len(m) == 0 {
		return fnvString(h, "")
	}
	var buf [8]string // a few labels hash without allocating
	keys := buf[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		h = fnvString(h, k)
		h = fnvString(h, m[k])
	}
	return fnvString(h, "")
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	h ^= 0xff // separator: not a valid UTF-8 byte, so "a"+"bc" ≠ "ab"+"c"
	h *= fnvPrime
	return h
}

// fnvTime hashes t's whole seconds: a claim time with milliseconds (a
// change stream's) hashes like its published form (metav1.Time's JSON
// drops the fraction).
func fnvTime(h uint64, t *metav1.Time) uint64 {
	var secs int64
	if !t.IsZero() {
		secs = t.Unix()
	}
	for i := 0; i < 8; i++ {
		h ^= uint64(byte(secs >> (8 * i)))
		h *= fnvPrime
	}
	h ^= 0xff
	h *= fnvPrime
	return h
}
