package serve

import "container/list"

// ledger is a Budget's accounting of its open connections: how many the
// whole budget and each source hold, which are still pending (have not
// yet sent a full request: headers and whole body), oldest first, per
// source and overall, and which have sent one (settled), least recently
// looked at first. It does no I/O and reads no clock; the Budget calls it
// under its lock and closes the connections it names.
type ledger struct {
	open    int
	pending list.List // of *entry, oldest first
	settled list.List // of *entry, least recently looked at first
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
	done     *list.Element // in ledger.settled once settled
	dropped  bool
}

// caps are a ledger's bounds; a negative one is no bound.
type caps struct {
	total, perSource int
}

// idleScan bounds how many settled connections one admission looks at for
// an idle one (those it passes over go to the back): a budget full of
// connections serving requests costs each newcomer this much, not a scan
// of the whole budget.
const idleScan = 64

// admit accounts a new connection from source. A source at its cap frees a
// place by giving up its oldest pending connection; a full budget, by
// giving up the oldest pending connection of any source, or when none is
// pending, a settled connection that idle reports idle (no request in
// flight: a keep-alive connection between requests, which its client
// reopens at need), so that sources enough to fill the budget with
// connections that each carried a request cannot keep every newcomer out.
// That connection (victim, already dropped from the ledger) is the
// caller's to close. A connection serving a request is never the victim:
// when nothing can make room, ok is false and the newcomer is refused (not
// accounted). A nil idle reports none idle.
func (l *ledger) admit(source string, c caps, idle func(*entry) bool) (e, victim *entry, ok bool) {
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
		if victim == nil && idle != nil {
			victim = l.idlest(idle)
		}
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

// hold accounts a connection the process dialled to source (a key no
// accepted connection's source can be): admitted as admit admits one —
// the budget's cap may give up a pending or idle accepted connection,
// the source's cap gives up none — but never pending, never settled, so
// never a victim itself.
func (l *ledger) hold(source string, c caps, idle func(*entry) bool) (e, victim *entry, ok bool) {
	e, victim, ok = l.admit(source, c, idle)
	if ok {
		l.pending.Remove(e.all)
		l.sources[source].pending.Remove(e.own)
		e.all, e.own = nil, nil
	}
	return e, victim, ok
}

func oldest(q *list.List) *entry {
	if f := q.Front(); f != nil {
		return f.Value.(*entry)
	}
	return nil
}

// idlest returns the first of the least recently looked at settled
// connections (at most idleScan of them) that idle reports idle, moving
// those it passes over to the back; nil when none is.
func (l *ledger) idlest(idle func(*entry) bool) *entry {
	for i := 0; i < idleScan && l.settled.Len() > 0; i++ {
		f := l.settled.Front()
		e := f.Value.(*entry)
		if idle(e) {
			return e
		}
		l.settled.MoveToBack(f)
	}
	return nil
}

// complete records that e has sent a full request: it is no longer
// pending, so a victim only when idle at a full budget.
func (l *ledger) complete(e *entry) {
	if e.dropped || e.all == nil {
		return
	}
	l.pending.Remove(e.all)
	l.sources[e.source].pending.Remove(e.own)
	e.all, e.own = nil, nil
	e.done = l.settled.PushBack(e)
}

// drop forgets e (closed, or given up as a victim); a second drop is a
// no-op.
func (l *ledger) drop(e *entry) {
	if e.dropped {
		return
	}
	l.complete(e)
	if e.done != nil {
		l.settled.Remove(e.done)
		e.done = nil
	}
	e.dropped = true
	t := l.sources[e.source]
	t.open--
	l.open--
	if t.open == 0 {
		delete(l.sources, e.source)
	}
}
