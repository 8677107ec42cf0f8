package agent

import (
	"encoding/json"
	"net/http"
	"os"
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

// saveOpened writes Options.OpenedFile: the env /init and the opening
// gave so far. It is written after /init and before the gate opens, so a
// file that exists means the node has given the agent its env — on a held
// agent, that it opened it (/init is held until then).
func (a *agent) saveOpened() {
	if a.o.OpenedFile == "" {
		return
	}
	a.mu.Lock() // one writer at a time: the file is the env as of the last call
	b, err := json.Marshal(a.initEnv)
	if err == nil {
		tmp := a.o.OpenedFile + ".tmp"
		if err = os.WriteFile(tmp, b, 0o600); err == nil {
			err = os.Rename(tmp, a.o.OpenedFile)
		}
	}
	a.mu.Unlock()
	if err != nil {
		a.log.add(agentapi.LogError, 0, "recording the opening: "+err.Error(), false)
	}
}

// restoreOpened starts an agent open, with the env recorded, when
// Options.OpenedFile says the node opened an earlier agent of this boot.
func (a *agent) restoreOpened() {
	if a.o.OpenedFile == "" {
		return
	}
	b, err := os.ReadFile(a.o.OpenedFile)
	if err != nil {
		return
	}
	env := map[string]string{}
	if err := json.Unmarshal(b, &env); err != nil {
		a.log.add(agentapi.LogError, 0, "reading the recorded opening: "+err.Error(), false)
		return
	}
	for k, v := range env {
		a.initEnv[k] = v
	}
	a.gate.open()
}
