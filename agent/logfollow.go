package agent

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/internal/serve"
)

// Following the sandbox log (GET agentapi.LogsPath?follow=true, see
// agentapi.ParseFollow): the selected entries, then each entry as it is
// added, as newline-delimited JSON. A follower reads from a cursor, the
// position of an entry counted from the agent's start (the oldest held
// entry's is the count of dropped ones), and when it has read everything
// it waits on the ring's notify channel, closed by the next addition: no
// polling, no goroutine of its own, nothing buffered per follower beyond
// one batch. A follower that falls behind the bound loses what was
// dropped and is told so by an entry of the agent's own. At most
// agentapi.MaxLogFollowers at once (429 beyond); all end when the agent's
// server shuts down (close).

// logFollowWrite bounds each write of a followed log: a reader that stops
// reading is dropped after it, not held forever.
const logFollowWrite = 30 * time.Second

// logFollowBatch bounds the entries a follower copies under the ring's
// lock at once.
const logFollowBatch = 256

// wakeLocked wakes the waiting followers; call with l.mu held.
func (l *logRing) wakeLocked() {
	if l.notify != nil {
		close(l.notify)
		l.notify = nil
	}
}

// close ends every follow, now and later (the agent stops).
func (l *logRing) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.wakeLocked()
}

// admit counts in one more follower; false past agentapi.MaxLogFollowers.
func (l *logRing) admit() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.followers >= agentapi.MaxLogFollowers {
		return false
	}
	l.followers++
	return true
}

func (l *logRing) leave() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.followers--
}

// since returns up to logFollowBatch entries from cursor on and the cursor
// past them; lost counts the entries the bound dropped before they were
// read. With nothing to read, wait is closed at the next addition. closed
// reports the log closed: the follow ends.
func (l *logRing) since(cursor int64) (out []agentapi.LogEntry, next, lost int64, wait <-chan struct{}, closed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, cursor, 0, nil, true
	}
	if cursor < l.dropped {
		lost, cursor = l.dropped-cursor, l.dropped
	}
	end := l.dropped + int64(l.n)
	if cursor >= end {
		if l.notify == nil {
			l.notify = make(chan struct{})
		}
		return nil, cursor, lost, l.notify, false
	}
	k := int(min(end-cursor, logFollowBatch))
	out = make([]agentapi.LogEntry, k)
	first := l.head + int(cursor-l.dropped)
	for i := range k {
		out[i] = l.entries[(first+i)%len(l.entries)].wire()
	}
	return out, cursor + int64(k), lost, nil, false
}

// serveFollow streams the log: the entries q selects (its Since and Tail;
// ParseFollow refused a Limit), then every later one, until the request
// ends, a write fails or the log closes.
func (l *logRing) serveFollow(w http.ResponseWriter, r *http.Request, q agentapi.LogsQuery) {
	if !l.admit() {
		writeRESTError(w, http.StatusTooManyRequests, fmt.Sprintf("the sandbox log has %d followers already", agentapi.MaxLogFollowers))
		return
	}
	defer l.leave()
	serve.Unbound(w) // the node's call: it lasts as long as it follows
	rc := http.NewResponseController(w)
	first, cursor := l.snapshotAt(agentapi.LogsQuery{Since: q.Since, Tail: q.Tail})
	w.Header().Set("Content-Type", agentapi.LogContentTypeStream)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	write := func(es []agentapi.LogEntry) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(logFollowWrite))
		for i := range es {
			if enc.Encode(&es[i]) != nil {
				return false
			}
		}
		return rc.Flush() == nil
	}
	if !write(first.Entries) {
		return
	}
	for {
		es, next, lost, wait, closed := l.since(cursor)
		if closed {
			return
		}
		cursor = next
		if lost > 0 {
			es = append([]agentapi.LogEntry{{Time: l.now().UTC(), Level: agentapi.LogLevelError, Event: agentapi.LogError,
				Message: fmt.Sprintf("%d entries dropped: this follower fell behind the log's bound", lost)}}, es...)
		}
		if len(es) > 0 {
			if !write(es) {
				return
			}
			continue
		}
		select {
		case <-r.Context().Done():
			return
		case <-wait:
		}
	}
}
