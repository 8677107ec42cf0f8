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
// empty.
func Diff(old, new *View, keep func(Item) bool) []Event {
	var out []Event
	for i := 0; i < new.Len(); i++ {
		it := new.At(i)
		name := it.Entry.Name
		first, ok := new.first(name, keep)
		if !ok || first.Entry != it.Entry {
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
	for i := 0; i < old.Len(); i++ {
		it := old.At(i)
		name := it.Entry.Name
		first, ok := old.first(name, keep)
		if !ok || first.Entry != it.Entry {
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
