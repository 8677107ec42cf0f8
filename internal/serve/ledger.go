package serve

import "container/list"

// ledger is a Budget's accounting of its open connections: how many the
// whole budget and each source hold, and which are still pending (have not
// yet sent a full request: headers and whole body), oldest first, per
// source and overall. It does no I/O and reads no clock; the Budget calls
// it under its lock and closes the connections it names.
type ledger struct {
	open    int
	pending list.List // of *entry, oldest first
	sources map[string]*tally
}

// tally is one source's share of a ledger.
type tally struct {
	open    int
	pending list.List // of *entry, oldest first
}

// entry is one open connection in a ledger. conn is the Budget's
// connection (nil in the ledger's own tests).
type entry struct {
	source   string
	conn     *conn
	all, own *list.Element // in ledger.pending and tally.pending while pending
	dropped  bool
}

// caps are a ledger's bounds; a negative one is no bound.
type caps struct {
	total, perSource int
}

// admit accounts a new connection from source. A source at its cap frees a
// place by giving up its oldest pending connection; a full budget, by
// giving up the oldest pending connection of any source. That connection
// (victim, already dropped from the ledger) is the caller's to close. A
// connection that has sent a full request is never the victim: when no
// pending connection can make room, ok is false and the newcomer is
// refused (not accounted).
func (l *ledger) admit(source string, c caps) (e, victim *entry, ok bool) {
	if l.sources == nil {
		l.sources = map[string]*tally{}
	}
	t := l.sources[source]
	if t == nil {
		t = &tally{}
	}
	switch {
	case c.perSource >= 0 && t.open >= c.perSource:
		victim = oldest(&t.pending)
	case c.total >= 0 && l.open >= c.total:
		victim = oldest(&l.pending)
	}
	if victim == nil && (c.perSource >= 0 && t.open >= c.perSource || c.total >= 0 && l.open >= c.total) {
		return nil, nil, false
	}
	if victim != nil {
		l.drop(victim)
	}
	l.sources[source] = t // drop may have removed it
	e = &entry{source: source}
	e.all = l.pending.PushBack(e)
	e.own = t.pending.PushBack(e)
	t.open++
	l.open++
	return e, victim, true
}

func oldest(q *list.List) *entry {
	if f := q.Front(); f != nil {
		return f.Value.(*entry)
	}
	return nil
}

// complete records that e has sent a full request: it is no longer
// pending, so never a victim.
func (l *ledger) complete(e *entry) {
	if e.dropped || e.all == nil {
		return
	}
	l.pending.Remove(e.all)
	l.sources[e.source].pending.Remove(e.own)
	e.all, e.own = nil, nil
}

// drop forgets e (closed, or given up as a victim); a second drop is a
// no-op.
func (l *ledger) drop(e *entry) {
	if e.dropped {
		return
	}
	l.complete(e)
	e.dropped = true
	t := l.sources[e.source]
	t.open--
	l.open--
	if t.open == 0 {
		delete(l.sources, e.source)
	}
}
