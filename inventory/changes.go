package inventory

import "errors"

// Change is one applied change of a live fleet view (package fleetview):
// an entry name became, changed or stopped being visible. Item is the
// entry after the change (for Deleted, as it was). Rev is the revision
// the change was applied at: the resourceVersion of the change, opaque to
// clients, increasing within one process.
type Change struct {
	Rev  uint64
	Type EventType
	Item Item
	// Old is the entry before a Modified change (a selector it no longer
	// matches makes the change a DELETED for that watch).
	Old Item
}

// Versioned is an item with the revision of its last change.
type Versioned struct {
	Item
	Rev uint64
}

// ErrExpired is returned for a revision a live view no longer (or never)
// knew: the caller must list again (HTTP 410 Gone).
var ErrExpired = errors.New("inventory: revision too old or unknown; list again")

// WithNodes returns a View like v whose nodes have the address and pools
// nodes returns for them (a node for which ok is false keeps its own). It
// shares v's entries and indexes, and the items it resolves carry the new
// address: the cost is the node count, so a live view can refresh warm
// counts and addresses on every read.
func (v *View) WithNodes(nodes func(node string) (addr string, pools []Pool, ok bool)) *View {
	if v == nil {
		v = NewView(nil)
	}
	c := *v
	c.nodes = make([]Node, len(v.nodes))
	copy(c.nodes, v.nodes)
	for i := range c.nodes {
		if addr, ps, ok := nodes(c.nodes[i].Name); ok {
			c.nodes[i].Address, c.nodes[i].Pools = addr, ps
		}
	}
	return &c
}
