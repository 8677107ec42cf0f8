package agent

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hearthvm/hearth/agentapi"
)

// holdTimeout bounds how long a held request waits for the node to open
// the agent before it is answered 503.
const holdTimeout = 30 * time.Second

// gate holds the sandbox's requests until the node opens the agent
// (Options.Hold, agentapi.OpenPath): the node answers a claim before the
// sandbox's egress policy is in its filter, and opens the agent once it
// is, so no request of the sandbox runs before.
type gate struct {
	opened chan struct{}
	once   sync.Once
	// timeout is holdTimeout (tests shorten it).
	timeout time.Duration
	// waiting counts the requests held now.
	waiting atomic.Int32
}

// newGate returns a gate that is open unless hold.
func newGate(hold bool) *gate {
	g := &gate{opened: make(chan struct{}), timeout: holdTimeout}
	if !hold {
		g.open()
	}
	return g
}

// open lets every held and later request through; idempotent.
func (g *gate) open() { g.once.Do(func() { close(g.opened) }) }

// nodePath reports the requests the node itself makes, which a held agent
// answers at once: GET /health and its internal paths (agentapi.OpenPath,
// the re-key, the log). A forwarded request is the sandbox's, whatever
// its path.
func nodePath(r *http.Request, fwd bool) bool {
	if fwd {
		return false
	}
	return r.Method == http.MethodGet && r.URL.Path == agentapi.HealthPath ||
		strings.HasPrefix(r.URL.Path, agentapi.InternalPathPrefix)
}

// pass waits until the gate is open for a request that is not the
// node's, at most g.timeout or until the request ends. It reports
// whether the request may go on; when not, it has answered 503.
func (g *gate) pass(w http.ResponseWriter, r *http.Request, fwd bool) bool {
	select {
	case <-g.opened:
		return true
	default:
	}
	if nodePath(r, fwd) {
		return true
	}
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	t := time.NewTimer(g.timeout)
	defer t.Stop()
	select {
	case <-g.opened:
		return true
	case <-r.Context().Done():
	case <-t.C:
	}
	const msg = "the sandbox is not open yet: the node has not applied its egress policy; retry"
	if !fwd && (strings.HasPrefix(r.URL.Path, "/process.") || strings.HasPrefix(r.URL.Path, "/filesystem.")) {
		writeUnaryError(w, errorf(codeUnavailable, msg))
	} else {
		writeRESTError(w, http.StatusServiceUnavailable, msg)
	}
	return false
}

// handleOpen is POST agentapi.OpenPath: /init's env, then the gate opens.
func (a *agent) handleOpen(w http.ResponseWriter, r *http.Request) {
	if !a.applyInit(w, r) {
		return
	}
	a.gate.open()
	w.WriteHeader(http.StatusNoContent)
}
