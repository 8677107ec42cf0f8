package agent

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hearthvm/hearth/agentapi"
)

// The sandbox log: a bounded record, in the agent's memory, of the
// processes started through the API (envd's process.Process/Start and
// the runtime API's POST /execute; start with the command line, exit
// with the status), each line they write to stdout or stderr, and the
// agent's own errors (a process that could not start, one killed by its
// deadline). It never records a process's environment — neither the
// request's envs nor /init's envVars nor Options.Env — and never a
// terminal's output (a pty echoes what is typed). What a process prints is
// recorded as printed: a process that prints its own environment puts it
// in the log.
//
// Bound: agentapi.MaxLogBytes (each entry's message plus
// agentapi.LogEntryOverhead), newest kept; a line longer than
// agentapi.MaxLogLine is cut there. The log lives as long as the agent
// (a restarted agent starts an empty one). GET agentapi.LogsPath serves
// it, for the node alone; with follow=true it streams it, entry by entry
// as they are written (logfollow.go).

// logRing is the sandbox log: entries oldest first in a ring.
type logRing struct {
	mu      sync.Mutex
	max     int // bound in bytes (agentapi.MaxLogBytes)
	entries []logEntry
	head    int // index of the oldest entry
	n       int // entries held
	bytes   int
	dropped int64
	now     func() time.Time
	// notify is closed when entries are added (or the log closes); nil
	// while no follower waits (logfollow.go).
	notify chan struct{}
	// closed: the agent stops; followers end.
	closed bool
	// followers counts the follows served now (agentapi.MaxLogFollowers).
	followers int
}

func newLogRing(max int) *logRing {
	return &logRing{max: max, now: time.Now}
}

// logEntry is an entry as the ring holds it: 32 bytes and one pointer
// (the message), so that a flood of short lines costs little to keep and
// to collect; snapshot makes agentapi.LogEntry of it.
type logEntry struct {
	unixNano  int64
	msg       string
	pid       int32
	event     logEvent
	truncated bool
}

// logEvent is an agentapi.Log* event, as a byte.
type logEvent uint8

// logEvents are the events by logEvent.
var logEvents = [...]string{agentapi.LogStart, agentapi.LogExit, agentapi.LogStdout, agentapi.LogStderr, agentapi.LogError}

func eventOf(name string) logEvent {
	for i, e := range logEvents {
		if e == name {
			return logEvent(i)
		}
	}
	return logEvent(len(logEvents) - 1) // an error: no caller passes another name
}

// wire is e as the API serves it.
func (e *logEntry) wire() agentapi.LogEntry {
	event := logEvents[e.event]
	level := agentapi.LogLevelInfo
	if event == agentapi.LogError {
		level = agentapi.LogLevelError
	}
	return agentapi.LogEntry{Time: time.Unix(0, e.unixNano).UTC(), Level: level, Event: event, Pid: int(e.pid), Message: e.msg, Truncated: e.truncated}
}

// entrySize is what e counts toward the bound.
func entrySize(e *logEntry) int {
	return len(e.msg) + agentapi.LogEntryOverhead
}

// logLine is one message to add, and whether it was cut already.
type logLine struct {
	msg       string
	truncated bool
}

// add appends an entry (the message cut at agentapi.MaxLogLine) and drops
// the oldest ones beyond the bound.
func (l *logRing) add(event string, pid int, msg string, truncated bool) {
	l.addLines(event, pid, []logLine{{msg, truncated}})
}

// addLines is add for several lines of one event, under one lock and one
// reading of the clock.
func (l *logRing) addLines(event string, pid int, lines []logLine) {
	ev := eventOf(event)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now().UnixNano()
	if n := l.n; n > 0 {
		// Entries stay in time order even if the clock steps back.
		now = max(now, l.entries[(l.head+n-1)%len(l.entries)].unixNano)
	}
	for _, ln := range lines {
		msg, truncated := ln.msg, ln.truncated
		if len(msg) > agentapi.MaxLogLine {
			msg, truncated = cutUTF8(msg, agentapi.MaxLogLine), true
		}
		l.push(logEntry{unixNano: now, msg: msg, pid: int32(pid), event: ev, truncated: truncated})
	}
	l.wakeLocked()
}

// push appends e, dropping the oldest entries beyond the bound (l.mu held).
func (l *logRing) push(e logEntry) {
	size := entrySize(&e)
	for l.n > 0 && l.bytes+size > l.max {
		old := &l.entries[l.head]
		l.bytes -= entrySize(old)
		*old = logEntry{}
		l.head = (l.head + 1) % len(l.entries)
		l.n--
		l.dropped++
	}
	if l.n == len(l.entries) {
		// Grow: unroll the ring into a larger slice.
		grown := make([]logEntry, max(16, 2*len(l.entries)))
		for i := range l.n {
			grown[i] = l.entries[(l.head+i)%len(l.entries)]
		}
		l.entries, l.head = grown, 0
	}
	l.entries[(l.head+l.n)%len(l.entries)] = e
	l.n++
	l.bytes += size
}

// snapshot returns the entries q selects, oldest first, and the count of
// dropped entries.
func (l *logRing) snapshot(q agentapi.LogsQuery) agentapi.Logs {
	logs, _ := l.snapshotAt(q)
	return logs
}

// snapshotAt is snapshot and the cursor just past its newest entry (what
// a follower reads on from, logfollow.go).
func (l *logRing) snapshotAt(q agentapi.LogsQuery) (agentapi.Logs, int64) {
	l.mu.Lock()
	held := make([]logEntry, l.n)
	for i := range l.n {
		held[i] = l.entries[(l.head+i)%len(l.entries)]
	}
	dropped := l.dropped
	l.mu.Unlock()
	all := make([]agentapi.LogEntry, len(held))
	for i := range held {
		all[i] = held[i].wire()
	}
	return agentapi.Logs{Entries: q.Select(all), Dropped: dropped}, dropped + int64(len(held))
}

// cutUTF8 cuts s to at most n bytes without splitting a rune.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// logLines splits one output stream of a process into log entries, line
// by line: a partial line waits for its newline (or the process's end,
// flush), and only the first agentapi.MaxLogLine bytes of a line are kept.
type logLines struct {
	log     *logRing
	event   string
	pid     int
	mu      sync.Mutex
	pending []byte
	// cut: the pending line passed the bound; the rest of it is skipped.
	cut bool
}

func (w *logLines) write(b []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := make([]logLine, 0, max(1, min(bytes.Count(b, []byte{'\n'}), 256)))
	defer func() {
		if len(lines) > 0 {
			w.log.addLines(w.event, w.pid, lines)
		}
	}()
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		chunk := b
		if i >= 0 {
			chunk = b[:i]
		}
		if room := agentapi.MaxLogLine - len(w.pending); len(chunk) > room {
			chunk, w.cut = chunk[:max(room, 0)], true
		}
		w.pending = append(w.pending, chunk...)
		if i < 0 {
			return
		}
		lines = append(lines, logLine{string(w.pending), w.cut})
		w.pending, w.cut = w.pending[:0], false
		if len(lines) == cap(lines) {
			w.log.addLines(w.event, w.pid, lines)
			lines = lines[:0]
		}
		b = b[i+1:]
	}
}

// Write is write as an io.Writer (a process's stdout or stderr).
func (w *logLines) Write(b []byte) (int, error) {
	w.write(b)
	return len(b), nil
}

// flush records a last line that had no newline.
func (w *logLines) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pending) > 0 || w.cut {
		w.log.add(w.event, w.pid, string(w.pending), w.cut)
		w.pending, w.cut = w.pending[:0], false
	}
}

// commandLine renders a process's command for the log: its words, quoted
// where a word is empty or holds a space, a quote or a control character.
func commandLine(cmd string, args []string) string {
	words := append([]string{cmd}, args...)
	var b strings.Builder
	for i, w := range words {
		if i > 0 {
			b.WriteByte(' ')
		}
		if w == "" || strings.ContainsFunc(w, func(r rune) bool { return r <= ' ' || r == '"' || r == '\'' || r == '\\' || r == 0x7f }) {
			w = strconv.Quote(w)
		}
		b.WriteString(w)
		if b.Len() > agentapi.MaxLogLine {
			break
		}
	}
	return b.String()
}

// handleLogs serves GET agentapi.LogsPath; follow=true streams it
// (logfollow.go).
func (a *agent) handleLogs(w http.ResponseWriter, r *http.Request) {
	q, err := agentapi.ParseLogsQuery(r.URL.Query())
	if err != nil {
		writeRESTError(w, http.StatusBadRequest, err.Error())
		return
	}
	follow, err := agentapi.ParseFollow(r.URL.Query())
	if err != nil {
		writeRESTError(w, http.StatusBadRequest, err.Error())
		return
	}
	if follow {
		a.log.serveFollow(w, r, q)
		return
	}
	writeJSONBody(w, a.log.snapshot(q))
}
