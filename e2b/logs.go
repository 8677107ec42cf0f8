package e2b

import (
	"fmt"
	"net/http"
	"strconv"
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
	for _, p := range []struct {
		name string
		set  func(int64)
	}{
		{"start", func(n int64) { q.Since = time.UnixMilli(n) }},
		{"limit", func(n int64) { q.Limit = int(min(n, defaultLogsLimit*100)) }},
	} {
		v := r.URL.Query().Get(p.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return q, false, fmt.Errorf("%s %q is not a non-negative integer", p.name, v)
		}
		p.set(n)
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
		ts := e.Time.UTC().Format(logTimeLayout)
		out.Logs = append(out.Logs, sandboxLogJSON{Timestamp: ts, Line: e.Line()})
		fields := map[string]string{"event": e.Event}
		if e.Pid != 0 {
			fields["pid"] = strconv.Itoa(e.Pid)
		}
		if e.Truncated {
			fields["truncated"] = "true"
		}
		out.LogEntries = append(out.LogEntries, sandboxLogEntryJSON{Timestamp: ts, Level: e.Level, Message: e.Message, Fields: fields})
	}
	writeJSON(w, http.StatusOK, out)
}

// logTimeLayout keeps a log entry's milliseconds (start is in them).
const logTimeLayout = "2006-01-02T15:04:05.000Z07:00"
