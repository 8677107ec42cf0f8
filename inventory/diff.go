package inventory

// EventType is the kind of a change between two views.
type EventType string

// Event types, spelled like watch.EventType.
const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
)

// Event is one change between two views, keyed by entry name ("ns/name").
type Event struct {
	Type EventType
	Name string
	// Item is the entry after the change; for Deleted, the entry as it was.
	Item Item
	// Old is the entry before a Modified change.
	Old Item
}

// Diff returns the changes from old to new, keyed by entry name: a name
// absent from old is Added, one whose content hash changed is Modified, one
// absent from new is Deleted (carrying its old entry). When a name appears
// more than once, its first entry (in view order) speaks for it. keep, if
// non-nil, restricts both views: an entry it rejects counts as absent, so an
// entry leaving a selector is Deleted and one entering it is Added.
//
// Events come in view order: Added/Modified in new's order, then Deleted in
// old's order. Diff is pure and does not modify either view; nil views are
// empty. keep must depend only on the item's content (node name and
// entry), not on pointers.
//
// Cost: when no name is duplicated in either view, the entries of a node
// whose inventory object is the same in both views cannot change, so Diff
// skips them: a tick after one node republished costs that node's entries,
// not the fleet's.
func Diff(old, new *View, keep func(Item) bool) []Event {
	var out []Event
	skipNew, skipOld := unchanged(old, new)
	for ni, ei := range new.refs() {
		if skipNew != nil && skipNew[ni] {
			continue
		}
		it := new.item(mkref(ni, ei))
		name := it.Entry.Name
		first, ok := new.first(name, keep)
		if !ok || first.Entry != it.Entry || first.Node != it.Node {
			continue // not this name's speaker
		}
		prev, ok := old.first(name, keep)
		switch {
		case !ok:
			out = append(out, Event{Type: Added, Name: name, Item: it})
		case prev.Hash != it.Hash:
			out = append(out, Event{Type: Modified, Name: name, Item: it, Old: prev})
		}
	}
	for ni, ei := range old.refs() {
		if skipOld != nil && skipOld[ni] {
			continue
		}
		it := old.item(mkref(ni, ei))
		name := it.Entry.Name
		first, ok := old.first(name, keep)
		if !ok || first.Entry != it.Entry || first.Node != it.Node {
			continue
		}
		if _, ok := new.first(name, keep); !ok {
			out = append(out, Event{Type: Deleted, Name: name, Item: it})
		}
	}
	return out
}

// first returns the first entry named name that keep accepts.
func (v *View) first(name string, keep func(Item) bool) (Item, bool) {
	var found Item
	ok := false
	v.EachByName(name, func(it Item) bool {
		if keep == nil || keep(it) {
			found, ok = it, true
			return false
		}
		return true
	})
	return found, ok
}

// unchanged marks, by node index in each view, the nodes built from the
// same inventory object under the same name in both views. It returns nils
// when a skip would be unsafe: a view with a duplicated name (the speaker
// of a name could change without its own node changing) or a nil view.
func unchanged(old, new *View) (skipNew, skipOld []bool) {
	if old == nil || new == nil || old.dups || new.dups {
		return nil, nil
	}
	skipNew, skipOld = make([]bool, len(new.nodes)), make([]bool, len(old.nodes))
	any := false
	// Both node lists are sorted by name: merge them.
	for i, j := 0, 0; i < len(old.nodes) && j < len(new.nodes); {
		o, n := &old.nodes[i], &new.nodes[j]
		switch {
		case o.Name < n.Name:
			i++
		case o.Name > n.Name:
			j++
		default:
			if o.inv == n.inv {
				skipOld[i], skipNew[j] = true, true
				any = true
			}
			i++
			j++
		}
	}
	if !any {
		return nil, nil
	}
	return skipNew, skipOld
}

// refs yields (node index, entry index) for every entry of v in view
// order; a nil v yields nothing.
func (v *View) refs() func(yield func(int, int) bool) {
	return func(yield func(int, int) bool) {
		if v == nil {
			return
		}
		for ni := range v.nodes {
			for ei := range v.nodes[ni].inv.Entries {
				if !yield(ni, ei) {
					return
				}
			}
		}
	}
}
