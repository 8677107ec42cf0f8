package agentapi

import (
	"fmt"
	"math"
	"net/url"
	"sort"
	"strconv"
	"time"
)

// Port is the guest port the agent serves on (TCP, or vsock for the
// Firecracker and Cloud Hypervisor guests): envd's port in e2b
// addressing.
const Port = 49983

// InterpreterPort is the code interpreter's port in e2b addressing: the
// agent answers a forward to it itself (package agent, interpreter.go)
// unless it runs with --no-interpreter.
const InterpreterPort = 49999

// Version is the envd version the agent serves, advertised to the e2b
// SDK: the newest of the SDK's feature gates (e2b@2.51.0 envd/versions.ts)
// that the agent serves — recursive watches (0.1.4), octet-stream uploads
// (0.5.7), X-Metadata file metadata (0.6.2), entries in watch events
// (0.6.3) and watches on network mounts (0.6.4: the agent refuses no
// mount).
const Version = "0.6.4"

// AccessTokenHeader carries the sandbox's access token, on every request
// to the agent but GET /health.
const AccessTokenHeader = "X-Access-Token"

// InternalHeaderPrefix starts every header Hearth's components set for
// each other (ForwardPortHeader, ForwardTokenHeader, SandboxIDHeader,
// PortClosedHeader): a proxy drops a client's before setting its own, and
// none reaches a guest app.
const InternalHeaderPrefix = "X-Hearth-"

// ForwardPortHeader asks the agent to forward the request to a port of the
// guest instead of serving it: the value is the port (1-65535) on the
// guest's loopback. It is how the e2b gateway reaches any port of a
// sandbox (E2b-Sandbox-Port) through the one address it knows, the
// agent's. A forwarded request needs the sandbox token like any other
// (GET /health included), or the forward-only credential
// (ForwardTokenHeader); no internal header and no token is passed on.
// HTTP, streaming and upgraded (WebSocket) connections are forwarded.
const ForwardPortHeader = "X-Hearth-Forward-Port"

// ForwardTokenHeader carries the forward-only credential (ForwardToken):
// what the e2b gateway sends, instead of the sandbox token, for a request
// it admitted to a guest port only.
const ForwardTokenHeader = "X-Hearth-Forward-Token"

// PortClosedHeader marks the agent's 502 for a forward to a guest port
// nothing listens on (the connection was refused), so that the gateway
// can answer as e2b does for a closed port; its value is the port.
const PortClosedHeader = "X-Hearth-Port-Closed"

// SandboxIDHeader carries, on every request the e2b gateway forwards, the
// id of the sandbox the request was addressed to (the gateway sets it and
// drops a client's). Processes the agent starts from then on get it as
// E2B_SANDBOX_ID, as on e2b; every process gets E2B_SANDBOX=true. The id
// is taken from requests, not fixed at boot, so a fork child or a clone
// of a snapshot names itself, not its source.
const SandboxIDHeader = "X-Hearth-Sandbox-Id"

// HealthPath is GET: 204 once the agent serves; no token needed.
const HealthPath = "/health"

// InitPath is POST InitRequest: environment variables added to every
// process the agent starts from then on (the node posts a claim's env
// there).
const InitPath = "/init"

// OpenPath is POST InitRequest, for the node alone (under
// InternalPathPrefix): it does what InitPath does and opens an agent
// started to hold (--hold, agent.Options.Hold), which until then answers
// only GET HealthPath and the paths under InternalPathPrefix and holds
// every other request — envd's, /files, InitPath itself, the code
// interpreter, every port forward — until it is opened (503 past a bound).
// The node opens a held VM's agent once its egress policy is enforced, so
// no request of the sandbox's runs before its filter is in. It is not
// InitPath because a client holding the sandbox token reaches InitPath
// through the e2b gateway; it cannot reach OpenPath. An agent that does
// not hold answers it as InitPath.
const OpenPath = InternalPathPrefix + "open"

// InternalPathPrefix starts the agent's paths that are for the node alone
// (IdentityPath): the e2b gateway answers 404 for them, so no client
// reaches them through its data plane or router, token or not.
const InternalPathPrefix = "/hearth/"

// IdentityPath is POST IdentityRequest: it replaces the agent's access
// token. Like every endpoint but /health it needs the current token, so
// only the holder of the old identity can hand out a new one. A VMM
// backend calls it right after cloning a VM from a checkpoint, whose
// memory still holds the checkpointed guest's token. An agent started with
// --token-file writes the new token there (atomically) before it takes
// effect, so an agent restarted from that file keeps it.
const IdentityPath = InternalPathPrefix + "identity"

// RuntimePrefix is where the agent serves agent-sandbox's runtime API
// (the python runtime's routes, docs/API.md#router), so that it cannot
// shadow envd's routes.
const RuntimePrefix = "/agent-sandbox"

// InitRequest is the body of POST /init.
type InitRequest struct {
	EnvVars map[string]string `json:"envVars"`
}

// IdentityRequest is the body of POST /hearth/identity: the new access
// token (non-empty).
type IdentityRequest struct {
	Token string `json:"token"`
}

// LogsPath is GET: the agent's sandbox log (Logs), oldest entry first —
// for the node alone (under InternalPathPrefix), which serves it to both
// API surfaces (docs/API.md#sandbox-logs). Query (LogsQuery): since=<unix
// milliseconds> keeps the entries at or after it, tail=<n> the newest n of
// those, limit=<n> the first n of what remains; a value that is not a
// non-negative integer is a 400.
const LogsPath = InternalPathPrefix + "logs"

// The events a log entry records (LogEntry.Event).
const (
	// LogStart: a process started through the API; Message is its
	// command line (never its environment).
	LogStart = "start"
	// LogExit: such a process ended; Message is its status ("exit status
	// 1", "signal: killed").
	LogExit = "exit"
	// LogStdout and LogStderr: one line the process wrote (without its
	// newline); a terminal's output (a pty process) is not recorded.
	LogStdout = "stdout"
	LogStderr = "stderr"
	// LogError: an error of the agent's own (a process that could not
	// start, a deadline that killed one).
	LogError = "error"
)

// The levels of log entries (LogEntry.Level), e2b's words.
const (
	LogLevelInfo  = "info"
	LogLevelError = "error"
)

// MaxLogLine is the longest message a log entry keeps, in bytes: a longer
// line is cut there (LogEntry.Truncated).
const MaxLogLine = 4 << 10

// MaxLogBytes bounds an agent's log: entries' messages plus
// LogEntryOverhead each. The oldest entries go first (Logs.Dropped
// counts them).
const MaxLogBytes = 1 << 20

// LogEntryOverhead is what one entry counts toward MaxLogBytes besides
// its message.
const LogEntryOverhead = 64

// LogEntry is one entry of a sandbox's log.
type LogEntry struct {
	Time time.Time `json:"time"`
	// Level is LogLevelError for LogError entries, else LogLevelInfo.
	Level string `json:"level"`
	// Event is LogStart, LogExit, LogStdout, LogStderr or LogError.
	Event string `json:"event"`
	// Pid is the process's, for process events.
	Pid int `json:"pid,omitempty"`
	// Message is at most MaxLogLine bytes.
	Message string `json:"message"`
	// Truncated marks a line cut at MaxLogLine.
	Truncated bool `json:"truncated,omitempty"`
}

// Logs is the body of GET LogsPath.
type Logs struct {
	// Entries are oldest first.
	Entries []LogEntry `json:"entries"`
	// Dropped counts the entries the bound (MaxLogBytes) has dropped
	// since the agent started.
	Dropped int64 `json:"dropped,omitempty"`
}

// LogsQuery selects entries of a log (LogsPath's query).
type LogsQuery struct {
	// Since keeps the entries at or after it (zero: all).
	Since time.Time
	// Tail keeps the newest Tail of those (0: all).
	Tail int
	// Limit keeps the first Limit of what remains (0: all).
	Limit int
}

// Values is q as LogsPath's query.
func (q LogsQuery) Values() url.Values {
	v := url.Values{}
	if !q.Since.IsZero() {
		v.Set("since", strconv.FormatInt(q.Since.UnixMilli(), 10))
	}
	if q.Tail > 0 {
		v.Set("tail", strconv.Itoa(q.Tail))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// ParseLogsQuery reads LogsPath's query; an error names the bad parameter.
func ParseLogsQuery(v url.Values) (LogsQuery, error) {
	var q LogsQuery
	for _, p := range []struct {
		name string
		set  func(int64)
	}{
		{"since", func(n int64) { q.Since = time.UnixMilli(n) }},
		{"tail", func(n int64) { q.Tail = int(min(n, math.MaxInt32)) }},
		{"limit", func(n int64) { q.Limit = int(min(n, math.MaxInt32)) }},
	} {
		s := v.Get(p.name)
		if s == "" {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return LogsQuery{}, fmt.Errorf("%s must be a non-negative integer, got %q", p.name, s)
		}
		p.set(n)
	}
	return q, nil
}

// Select returns the entries of l that q keeps (l is oldest first).
func (q LogsQuery) Select(l []LogEntry) []LogEntry {
	if !q.Since.IsZero() {
		i := sort.Search(len(l), func(i int) bool { return !l[i].Time.Before(q.Since) })
		l = l[i:]
	}
	if q.Tail > 0 && len(l) > q.Tail {
		l = l[len(l)-q.Tail:]
	}
	if q.Limit > 0 && len(l) > q.Limit {
		l = l[:q.Limit]
	}
	return l
}

// Line renders e as one line of text, what both API surfaces show: a
// process's output as it was written, the agent's own entries marked
// ("[start pid 12] /bin/sh -c …", "[exit pid 12] exit status 0",
// "[error] starting …").
func (e LogEntry) Line() string {
	switch e.Event {
	case LogStdout, LogStderr:
		return e.Message
	}
	if e.Pid != 0 {
		return "[" + e.Event + " pid " + strconv.Itoa(e.Pid) + "] " + e.Message
	}
	return "[" + e.Event + "] " + e.Message
}
