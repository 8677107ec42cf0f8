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
// processes started through the API (start with the command line, exit
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
// it, for the node alone.

// logRing is the sandbox log: entries oldest first in a ring.
type logRing struct {
	mu      sync.Mutex
	max     int // bound in bytes (agentapi.MaxLogBytes)
	entries []agentapi.LogEntry
	head    int // index of the oldest entry
	n       int // entries held
	bytes   int
	dropped int64
	now     func() time.Time
}

func newLogRing(max int) *logRing {
	return &logRing{max: max, now: time.Now}
}

// entrySize is what e counts toward the bound.
func entrySize(e *agentapi.LogEntry) int {
	return len(e.Message) + agentapi.LogEntryOverhead
}

// add appends an entry (the message cut at agentapi.MaxLogLine) and drops
// the oldest ones beyond the bound.
func (l *logRing) add(event string, pid int, msg string, truncated bool) {
	if len(msg) > agentapi.MaxLogLine {
		msg, truncated = cutUTF8(msg, agentapi.MaxLogLine), true
	}
	level := agentapi.LogLevelInfo
	if event == agentapi.LogError {
		level = agentapi.LogLevelError
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e := agentapi.LogEntry{Time: l.now().UTC(), Level: level, Event: event, Pid: pid, Message: msg, Truncated: truncated}
	if n := l.n; n > 0 {
		// Entries stay in time order even if the clock steps back.
		if last := l.entries[(l.head+n-1)%len(l.entries)].Time; e.Time.Before(last) {
			e.Time = last
		}
	}
	size := entrySize(&e)
	for l.n > 0 && l.bytes+size > l.max {
		old := &l.entries[l.head]
		l.bytes -= entrySize(old)
		*old = agentapi.LogEntry{}
		l.head = (l.head + 1) % len(l.entries)
		l.n--
		l.dropped++
	}
	if l.n == len(l.entries) {
		// Grow: unroll the ring into a larger slice.
		grown := make([]agentapi.LogEntry, max(16, 2*len(l.entries)))
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
	l.mu.Lock()
	all := make([]agentapi.LogEntry, l.n)
	for i := range l.n {
		all[i] = l.entries[(l.head+i)%len(l.entries)]
	}
	dropped := l.dropped
	l.mu.Unlock()
	return agentapi.Logs{Entries: q.Select(all), Dropped: dropped}
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
		w.emit()
		b = b[i+1:]
	}
}

// flush records a last line that had no newline.
func (w *logLines) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pending) > 0 || w.cut {
		w.emit()
	}
}

func (w *logLines) emit() {
	w.log.add(w.event, w.pid, string(w.pending), w.cut)
	w.pending, w.cut = w.pending[:0], false
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

// handleLogs serves GET agentapi.LogsPath.
func (a *agent) handleLogs(w http.ResponseWriter, r *http.Request) {
	q, err := agentapi.ParseLogsQuery(r.URL.Query())
	if err != nil {
		writeRESTError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSONBody(w, a.log.snapshot(q))
}
