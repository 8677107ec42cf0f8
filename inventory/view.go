package inventory

import (
	"hash/maphash"
	"maps"
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
// a small fixed number of bytes per entry (three int32s and a hash in a
// slot, plus one integer-keyed slot in each of two maps); resolving one
// sandbox allocates nothing. A View is safe for concurrent readers.
//
// The indexes are keyed by a 64-bit hash of the name or id (cheaper to
// build than string keys, and nothing for the GC to scan); lookups compare
// the actual strings, so a hash collision costs a longer chain, never a
// wrong answer.
type View struct {
	nodes []Node
	slots []slot
	// byName: hash of a name → first slot with that hash; the others chain
	// via slot.next in slot order (equal names, or rarely colliding ones).
	byName map[uint64]int32
	// byID: hash of a claim id → first slot holding it. When two ids share
	// a hash (or an id repeats), byIDSlow replaces it.
	byID     map[uint64]int32
	byIDSlow map[string]int32
	sum      uint64 // content hash of the whole view
	dups     bool   // some name hash is held by more than one entry
}

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

type slot struct {
	hash  uint64 // content hash of the entry (resourceVersion)
	node  int32  // index into View.nodes
	entry int32  // index into that node's Entries
	next  int32  // next slot with the same name, or -1
}

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
// A nil v is NewView.
func (v *View) Next(invs []*NodeInventory) *View { return build(invs, v) }

// segment is where one node's entries sit in a View's slots.
type segment struct {
	off  int32  // index of the node's first slot
	n    int32  // number of entries
	node string // the node's name in that View
}

// segments maps each node's inventory object to its segment.
func (v *View) segments() map[*NodeInventory]segment {
	out := make(map[*NodeInventory]segment, len(v.nodes))
	off := int32(0)
	for i := range v.nodes {
		out[v.nodes[i].inv] = segment{off: off, n: int32(len(v.nodes[i].inv.Entries)), node: v.nodes[i].Name}
		off += int32(len(v.nodes[i].inv.Entries))
	}
	return out
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
	if prev != nil && v.patch(prev, n) {
		v.sum = v.contentSum()
		return v
	}
	v.slots = make([]slot, 0, n)
	v.byName = make(map[uint64]int32, n)
	v.byID = make(map[uint64]int32, n)
	var reuse map[*NodeInventory]segment
	if prev != nil && len(prev.slots) > 0 {
		reuse = prev.segments()
	}
	for ni := range v.nodes {
		nd := &v.nodes[ni]
		seg, same := reuse[nd.inv]
		// A reused object hashes the same (its node name is hashed too).
		same = same && seg.node == nd.Name && int(seg.n) == len(nd.inv.Entries)
		for ei := range nd.inv.Entries {
			var h uint64
			if same {
				h = prev.slots[seg.off+int32(ei)].hash
			} else {
				h = Hash(nd.Name, &nd.inv.Entries[ei])
			}
			v.slots = append(v.slots, slot{hash: h, node: int32(ni), entry: int32(ei), next: -1})
		}
	}
	// Index backwards so that the first slot of a name or id is the one
	// left in the map: one map write per key, no lookups.
	ids := 0
	for si := int32(len(v.slots)) - 1; si >= 0; si-- {
		e := v.entry(si)
		v.byName[indexKey(e.Name)] = si
		if e.ID != "" {
			v.byID[indexKey(e.ID)] = si
			ids++
		}
	}
	// Names sharing a hash (duplicates; collisions are rarer still) are
	// chained in slot order.
	if len(v.byName) < len(v.slots) {
		v.dups = true
		tails := map[uint64]int32{}
		for si := range v.slots {
			k := indexKey(v.entry(int32(si)).Name)
			if tail, ok := tails[k]; ok {
				v.slots[tail].next = int32(si)
			}
			tails[k] = int32(si)
		}
	}
	if len(v.byID) < ids {
		v.byID = nil
		v.byIDSlow = make(map[string]int32, ids)
		for si := int32(len(v.slots)) - 1; si >= 0; si-- {
			if e := v.entry(si); e.ID != "" {
				v.byIDSlow[e.ID] = si
			}
		}
	}
	v.sum = v.contentSum()
	return v
}

// contentSum hashes the nodes and every slot's content hash (see Sum).
func (v *View) contentSum() uint64 {
	h := uint64(fnvOffset)
	for i := range v.nodes {
		h = fnvString(h, v.nodes[i].Name)
		h = fnvString(h, v.nodes[i].Address)
	}
	for i := range v.slots {
		for b := 0; b < 8; b++ {
			h ^= uint64(byte(v.slots[i].hash >> (8 * b)))
			h *= fnvPrime
		}
	}
	return h
}

// patch is Next's fast path for the common tick: the same nodes in the same
// order with the same entry counts, and only a few of them republished (a
// new object). The slots and both indexes of prev are then copied and only
// the republished nodes' entries are re-hashed and re-indexed, instead of
// re-inserting every entry into fresh maps. It applies only when prev has
// no duplicate name or id hashes and the result has none either (every key
// maps to exactly one slot, no chains); otherwise it returns false, leaving
// v.slots and the indexes unset, and build takes the general path.
func (v *View) patch(prev *View, n int) bool {
	if prev.dups || prev.byIDSlow != nil || len(prev.slots) == 0 || len(prev.slots) != n ||
		len(prev.nodes) != len(v.nodes) || len(prev.byName) != len(prev.slots) {
		return false
	}
	changed := 0
	for i := range v.nodes {
		nd, pn := &v.nodes[i], &prev.nodes[i]
		if nd.Name != pn.Name || len(nd.inv.Entries) != len(pn.inv.Entries) {
			return false
		}
		if nd.inv != pn.inv {
			changed += len(nd.inv.Entries)
		}
	}
	// Re-indexing a changed entry costs a delete and an insert on top of
	// the copies; past a fraction of the view a fresh build is cheaper.
	if changed > n/4 {
		return false
	}
	slots := make([]slot, n)
	copy(slots, prev.slots)
	byName := maps.Clone(prev.byName)
	byID := maps.Clone(prev.byID)
	if byID == nil {
		byID = make(map[uint64]int32)
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
	off := int32(0)
	for ni := range v.nodes {
		nd := &v.nodes[ni]
		if nd.inv != prev.nodes[ni].inv {
			for ei := range nd.inv.Entries {
				e := &nd.inv.Entries[ei]
				si := off + int32(ei)
				slots[si] = slot{hash: Hash(nd.Name, e), node: int32(ni), entry: int32(ei), next: -1}
				k := indexKey(e.Name)
				if _, taken := byName[k]; taken {
					return false // a duplicate (or colliding) name
				}
				byName[k] = si
				if e.ID != "" {
					k = indexKey(e.ID)
					if _, taken := byID[k]; taken {
						return false // a repeated (or colliding) id
					}
					byID[k] = si
				}
			}
		}
		off += int32(len(nd.inv.Entries))
	}
	v.slots, v.byName, v.byID = slots, byName, byID
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

func (v *View) entry(si int32) *Entry {
	s := &v.slots[si]
	return &v.nodes[s.node].inv.Entries[s.entry]
}

func (v *View) item(si int32) Item {
	s := &v.slots[si]
	nd := &v.nodes[s.node]
	return Item{Node: nd, Entry: &nd.inv.Entries[s.entry], Hash: s.hash}
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
	if v == nil {
		return 0
	}
	return len(v.slots)
}

// At returns the i-th entry (0 ≤ i < Len), in node-name then entry order.
func (v *View) At(i int) Item { return v.item(int32(i)) }

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
	si, ok := v.byName[indexKey(name)]
	for ok && si >= 0 {
		if v.entry(si).Name == name && !fn(v.item(si)) {
			return
		}
		si = v.slots[si].next
	}
}

// ByID resolves the entry holding claim id.
func (v *View) ByID(id string) (Item, bool) {
	if v == nil || id == "" {
		return Item{}, false
	}
	var si int32
	var ok bool
	if v.byIDSlow != nil {
		si, ok = v.byIDSlow[id]
	} else {
		si, ok = v.byID[indexKey(id)]
		ok = ok && v.entry(si).ID == id
	}
	if !ok {
		return Item{}, false
	}
	return v.item(si), true
}

// Hash is the content hash of an entry published by node: FNV-64a over the
// node name and every entry field, separated so that field boundaries count.
// It is the entry's resourceVersion: equal content, equal hash.
func Hash(node string, e *Entry) uint64 {
	h := uint64(fnvOffset)
	h = fnvString(h, node)
	h = fnvString(h, e.Name)
	h = fnvString(h, e.ID)
	h = fnvString(h, e.Phase)
	h = fnvString(h, e.Template)
	h = fnvString(h, e.ClaimRef)
	h = fnvString(h, e.Addr)
	h = fnvTime(h, e.Deadline)
	h = fnvTime(h, e.ClaimedAt)
	return h
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
