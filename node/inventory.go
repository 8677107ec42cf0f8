package node

import (
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hearthvm/hearth/inventory"
)

// Inventory returns the node's NodeInventory as it would be published now:
// pools sorted by key, entries (inventory.EntryOf) sorted by name, without
// the claims' metadata (inventory.Entry.Metadata: the change stream
// carries it, the published object stays within the API server's size
// limit).
func (n *Node) Inventory() *inventory.NodeInventory {
	n.mu.Lock()
	defer n.mu.Unlock()
	inv := &inventory.NodeInventory{
		TypeMeta: metav1.TypeMeta{APIVersion: inventory.SchemeGroupVersion.String(), Kind: "NodeInventory"},
		Node:     n.cfg.Name,
		Address:  n.cfg.AdvertiseAddress,
	}
	inv.Name = n.cfg.Name
	for _, p := range n.tab.sortedPools() {
		if p.target == 0 && len(p.warm) == 0 {
			continue
		}
		inv.Pools = append(inv.Pools, inventory.Pool{Template: p.key.Template, Net: p.key.Net, Size: p.key.Size,
			Warm: int32(len(p.warm)), Target: p.target})
	}
	for _, sb := range n.tab.byID {
		s := n.wire(sb.rec, false)
		s.Metadata = nil
		inv.Entries = append(inv.Entries, inventory.EntryOf(&s))
	}
	sort.Slice(inv.Entries, func(i, j int) bool {
		if inv.Entries[i].Name != inv.Entries[j].Name {
			return inv.Entries[i].Name < inv.Entries[j].Name
		}
		return inv.Entries[i].ID < inv.Entries[j].ID
	})
	return inv
}
