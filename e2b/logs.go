package e2b

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hearthvm/hearth/agentapi"
)

// e2b's sandbox logs (GET /sandboxes/{id}/logs?start=&limit=): the
// sandbox's log as its agent keeps it (package agent: processes started
// through the API, their stdout and stderr lines, the agent's errors —
// never their environment), bounded there to agentapi.MaxLogBytes, newest
// kept. start (unix milliseconds) keeps the entries at or after it, limit
// (default defaultLogsLimit) the first ones of those. Answered in e2b's
// shape, both forms: logs [{timestamp, line}] and logEntries [{timestamp,
// level, message, fields}] (fields: event, pid, and truncated for a line
// cut at agentapi.MaxLogLine). A paused sandbox is a 409 (its agent does
// not run); the log does not outlive the sandbox.
//
// e2b's v2 form (GET /v2/sandboxes/{id}/logs?cursor=&direction=&level=
// &limit=&search=) answers {logs: [logEntry]}: cursor (unix
// milliseconds) is where reading starts, forward (the default: the
// entries at or after it, oldest first; no cursor: from the oldest) or
// backward (at or before it, newest first; no cursor: from the newest);
// level the least level kept (debug, info, warn, error); search a
// case-sensitive substring of the message; limit as v1's.

// defaultLogsLimit is e2b's default limit.
const defaultLogsLimit = 1000

type sandboxLogJSON struct {
	Timestamp string `json:"timestamp"`
	Line      string `json:"line"`
}

type sandboxLogEntryJSON struct {
	Timestamp string            `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

type sandboxLogsJSON struct {
	Logs       []sandboxLogJSON      `json:"logs"`
	LogEntries []sandboxLogEntryJSON `json:"logEntries"`
}

// logsQuery decodes start and limit (none: limit=0); an error names the
// bad one.
func logsQuery(r *http.Request) (q agentapi.LogsQuery, none bool, err error) {
	q.Limit = defaultLogsLimit
	start, ok, err := nonNegativeParam(r.URL.Query(), "start", "a non-negative integer")
	if err != nil {
		return q, false, err
	}
	if ok {
		q.Since = time.UnixMilli(start)
	}
	limit, ok, err := nonNegativeParam(r.URL.Query(), "limit", "a non-negative integer")
	if err != nil {
		return q, false, err
	}
	if ok {
		q.Limit = int(min(limit, defaultLogsLimit*100))
	}
	return q, q.Limit == 0, nil
}

func (g *gateway) handleLogs(w http.ResponseWriter, r *http.Request) {
	q, none, err := logsQuery(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	s, ok := g.sandboxFor(w, r)
	if !ok {
		return
	}
	out := sandboxLogsJSON{Logs: []sandboxLogJSON{}, LogEntries: []sandboxLogEntryJSON{}}
	if none {
		// Still looked up: an unknown sandbox is a 404 whatever the limit.
		writeJSON(w, http.StatusOK, out)
		return
	}
	l, err := g.fleet.Logs(r.Context(), s, q)
	if err != nil {
		failSandbox(w, r, err)
		return
	}
	for _, e := range l.Entries {
		out.Logs = append(out.Logs, sandboxLogJSON{Timestamp: e.Time.UTC().Format(logTimeLayout), Line: e.Line()})
		out.LogEntries = append(out.LogEntries, logEntryJSON(e))
	}
	writeJSON(w, http.StatusOK, out)
}

// logEntryJSON is e as e2b's SandboxLogEntry.
func logEntryJSON(e agentapi.LogEntry) sandboxLogEntryJSON {
	fields := map[string]string{"event": e.Event}
	if e.Pid != 0 {
		fields["pid"] = strconv.Itoa(e.Pid)
	}
	if e.Truncated {
		fields["truncated"] = "true"
	}
	return sandboxLogEntryJSON{Timestamp: e.Time.UTC().Format(logTimeLayout), Level: e.Level, Message: e.Message, Fields: fields}
}

// logTimeLayout keeps a log entry's milliseconds (start is in them).
const logTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// logLevels orders e2b's levels (LogLevel) for v2's level filter.
var logLevels = map[string]int{"debug": 0, "info": 1, "warn": 2, "error": 3}

type sandboxLogsV2JSON struct {
	Logs []sandboxLogEntryJSON `json:"logs"`
}

func (g *gateway) handleLogsV2(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	limit := int64(defaultLogsLimit)
	var cursor int64 = -1
	for _, p := range []struct {
		name string
		to   *int64
	}{{"cursor", &cursor}, {"limit", &limit}} {
		n, ok, err := nonNegativeParam(v, p.name, "a non-negative integer")
		if err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
		if ok {
			*p.to = n
		}
	}
	backward := false
	switch d := v.Get("direction"); d {
	case "", "forward":
	case "backward":
		backward = true
	default:
		writeError(w, http.StatusBadRequest, "direction %q is not forward or backward", d)
		return
	}
	least := 0
	if lv := v.Get("level"); lv != "" {
		n, ok := logLevels[lv]
		if !ok {
			writeError(w, http.StatusBadRequest, "level %q is not debug, info, warn or error", lv)
			return
		}
		least = n
	}
	search := v.Get("search")
	s, ok := g.sandboxFor(w, r)
	if !ok {
		return
	}
	out := sandboxLogsV2JSON{Logs: []sandboxLogEntryJSON{}}
	if limit == 0 {
		writeJSON(w, http.StatusOK, out)
		return
	}
	// The whole log (at most agentapi.MaxLogBytes) is read and filtered
	// here: level and search are not the agent's.
	var q agentapi.LogsQuery
	if cursor >= 0 && !backward {
		q.Since = time.UnixMilli(cursor)
	}
	l, err := g.fleet.Logs(r.Context(), s, q)
	if err != nil {
		failSandbox(w, r, err)
		return
	}
	keep := func(e agentapi.LogEntry) bool {
		if backward && cursor >= 0 && e.Time.After(time.UnixMilli(cursor)) {
			return false
		}
		return logLevels[e.Level] >= least && strings.Contains(e.Message, search)
	}
	for i := range l.Entries {
		e := l.Entries[i]
		if backward {
			e = l.Entries[len(l.Entries)-1-i]
		}
		if !keep(e) {
			continue
		}
		out.Logs = append(out.Logs, logEntryJSON(e))
		if int64(len(out.Logs)) >= limit {
			break
		}
	}
	writeJSON(w, http.StatusOK, out)
}
