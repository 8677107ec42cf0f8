package node

import (
	"time"

	"github.com/hearthvm/hearth/nodeapi"
)

// A sandbox's lifecycle events (nodeapi.Sandbox.Events) live in its
// record, so they are persisted by the write that records the change
// they describe (a pause's, a resume's: no write of their own) and survive
// a restart; a warm claim's Claimed is rendered from the record's
// ClaimedAt (events), so the claim path writes, allocates and encodes
// nothing more. They are rendered only for lookups (by id, by claim ref),
// never on the change stream or in lists.

// appendEvent returns evs with e recorded: a repeat of the newest event
// (same type, reason and message) counts on it, else e is appended and
// the oldest dropped past limit. evs is never modified (a record's copies
// are read under either lock): the result is a new slice.
func appendEvent(evs []nodeapi.Event, e nodeapi.Event, limit int) []nodeapi.Event {
	if e.Count <= 0 {
		e.Count = 1
	}
	if e.LastTime.IsZero() {
		e.LastTime = e.FirstTime
	}
	if n := len(evs); n > 0 {
		if last := evs[n-1]; last.Type == e.Type && last.Reason == e.Reason && last.Message == e.Message {
			out := make([]nodeapi.Event, n)
			copy(out, evs)
			out[n-1].Count += e.Count
			out[n-1].LastTime = e.LastTime
			return out
		}
	}
	drop := max(len(evs)+1-limit, 0)
	out := make([]nodeapi.Event, 0, len(evs)-drop+1)
	out = append(out, evs[drop:]...)
	return append(out, e)
}

// event is a new event of the node's clock (millisecond precision, as
// ClaimedAt).
func (n *Node) event(typ, reason, msg string) nodeapi.Event {
	t := n.now().UTC().Truncate(time.Millisecond)
	return nodeapi.Event{Type: typ, Reason: reason, Message: msg, FirstTime: t, LastTime: t, Count: 1}
}

// record adds e to r's events; call from a record mutation.
func (r *record) record(e nodeapi.Event) {
	r.Events = appendEvent(r.Events, e, nodeapi.MaxSandboxEvents)
}

// note records e on sb without another change (its Version stays): for
// events that have no write of their own (a fork's parent, a snapshot's
// source, a failed restore). Call holding sb.mu.
func (n *Node) note(sb *sandbox, e nodeapi.Event) {
	n.mu.Lock()
	rec := n.tab.update(sb, func(r *record) { r.record(e) })
	gone := n.tab.byID[rec.ID] != sb
	n.mu.Unlock()
	if gone {
		return
	}
	if err := n.store.putSandboxes(rec); err != nil {
		n.log.Error(err, "Cannot persist a sandbox event", "id", rec.ID, "reason", e.Reason)
	}
	n.kubeEvent(&rec, e)
}

// claimedWarm is the message of a warm claim's Claimed event.
const claimedWarm = "claimed a warm microVM"

// events renders r's events for a lookup. A warm claim records none (its
// write stays what it was): its Claimed event is rendered from ClaimedAt,
// first, unless the ring has since filled (it would have been dropped). A
// fork child and a snapshot claim record theirs, naming their source.
func events(r *record) []nodeapi.Event {
	warm := r.Snapshot == "" && r.Depth == 0
	if !warm || len(r.Events) >= nodeapi.MaxSandboxEvents || (len(r.Events) > 0 && r.Events[0].Reason == nodeapi.ReasonClaimed) {
		return r.Events
	}
	t := r.ClaimedAt.UTC()
	out := make([]nodeapi.Event, 0, len(r.Events)+1)
	out = append(out, nodeapi.Event{Type: nodeapi.EventNormal, Reason: nodeapi.ReasonClaimed, Message: claimedWarm, FirstTime: t, LastTime: t, Count: 1})
	return append(out, r.Events...)
}

// nameOf names r in an event's message: its claim ref, else its claim id.
func nameOf(r record) string {
	if r.ClaimRef != "" {
		return r.ClaimRef
	}
	return r.ID
}
