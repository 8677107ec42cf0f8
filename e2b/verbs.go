package e2b

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/nodeapi"
)

// live asks the node whether s is paused (the view may be stale).
func (g *gateway) live(ctx context.Context, s nodeapi.Sandbox) (bool, error) {
	st, err := g.fleet.Stats(ctx, s)
	if err != nil {
		return false, err
	}
	return st.Paused, nil
}

// failSandbox maps err about the request's sandbox {id} to an e2b error answer.
func failSandbox(w http.ResponseWriter, r *http.Request, err error) {
	fail(w, err, "sandbox "+strconv.Quote(r.PathValue("id")))
}

// sandboxFor resolves the request's {id}; on failure it writes the error
// answer and returns false.
func (g *gateway) sandboxFor(w http.ResponseWriter, r *http.Request) (nodeapi.Sandbox, bool) {
	s, err := g.lookup(r.Context(), r.PathValue("id"))
	if err != nil {
		failSandbox(w, r, err)
		return nodeapi.Sandbox{}, false
	}
	return s, true
}

// pausedFor asks s's node whether it is paused; on failure it writes the
// error answer and returns ok false.
func (g *gateway) pausedFor(w http.ResponseWriter, r *http.Request, s nodeapi.Sandbox) (paused, ok bool) {
	paused, err := g.live(r.Context(), s)
	if err != nil {
		failSandbox(w, r, err)
		return false, false
	}
	return paused, true
}

func (g *gateway) handleGet(w http.ResponseWriter, r *http.Request) {
	s, ok := g.sandboxFor(w, r)
	if !ok {
		return
	}
	if p, err := g.live(r.Context(), s); err == nil {
		s.Paused = p
	}
	d := detailJSON{
		listedJSON: g.listedOf(s), Domain: g.domain(),
		Lifecycle: lifecycle{OnTimeout: nodeapi.OnTimeoutKill, AutoResume: s.AutoResume},
	}
	d.AllowInternetAccess, d.Network = networkOf(s)
	if s.OnTimeout == nodeapi.OnTimeoutPause {
		d.Lifecycle.OnTimeout = nodeapi.OnTimeoutPause
	}
	if s.Token != "" {
		t := s.Token
		d.EnvdAccessToken = &t
	}
	writeJSON(w, http.StatusOK, d)
}

// handleUpdateNetwork answers the SDK's updateNetwork (PUT
// /sandboxes/{id}/network) with 409: a sandbox's egress policy is fixed at
// claim time (docs/API.md#egress-policy). The sandbox is looked up first,
// so an unknown one is the 404 the SDK maps to SandboxNotFoundError.
func (g *gateway) handleUpdateNetwork(w http.ResponseWriter, r *http.Request) {
	if _, ok := g.sandboxFor(w, r); !ok {
		return
	}
	writeError(w, http.StatusConflict, "the egress policy is fixed at claim time: create a sandbox with the network it needs")
}

func (g *gateway) handleKill(w http.ResponseWriter, r *http.Request) {
	s, ok := g.sandboxFor(w, r)
	if !ok {
		return
	}
	g.forget(s)
	if err := g.fleet.Release(r.Context(), s); err != nil {
		failSandbox(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type timeoutRequest struct {
	Timeout *int64 `json:"timeout"`
}

// timeoutFor is the prologue of POST /sandboxes/{id}/timeout and
// /connect: it decodes the body's timeout (seconds; required when
// required), answers 400 for a negative (or a missing required) one,
// refuses one past the nodes' longest lease (tooLong), then resolves {id}
// for the request's API key (sandboxFor). When it returns ok false it has
// written the answer.
func (g *gateway) timeoutFor(w http.ResponseWriter, r *http.Request, required bool) (timeout *int64, s nodeapi.Sandbox, ok bool) {
	var req timeoutRequest
	if !decodeBody(w, r, &req) {
		return nil, s, false
	}
	switch {
	case required && (req.Timeout == nil || *req.Timeout < 0):
		writeError(w, http.StatusBadRequest, "timeout (seconds, >= 0) is required")
		return nil, s, false
	case req.Timeout != nil && *req.Timeout < 0:
		writeError(w, http.StatusBadRequest, "timeout must be >= 0")
		return nil, s, false
	}
	if g.tooLong(w, r, req.Timeout) {
		return nil, s, false
	}
	if s, ok = g.sandboxFor(w, r); !ok {
		return nil, s, false
	}
	return req.Timeout, s, true
}

func (g *gateway) handleTimeout(w http.ResponseWriter, r *http.Request) {
	timeout, s, ok := g.timeoutFor(w, r, true)
	if !ok {
		return
	}
	if _, err := g.fleet.Renew(r.Context(), s, *timeout); err != nil {
		failSandbox(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (g *gateway) handleRefresh(w http.ResponseWriter, r *http.Request) {
	if _, ok := g.sandboxFor(w, r); !ok {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (g *gateway) handlePause(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Memory *bool `json:"memory"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	s, ok := g.sandboxFor(w, r)
	if !ok {
		return
	}
	paused, ok := g.pausedFor(w, r, s)
	if !ok {
		return
	}
	if paused {
		writeError(w, http.StatusConflict, "sandbox %q is already paused", r.PathValue("id"))
		return
	}
	// {"memory": false} (the SDK's keepMemory: false) keeps only the file
	// system: the VM stops, and a resume restarts it from its disk.
	g.dropRoute(s.ID)
	pause := g.fleet.Pause
	if req.Memory != nil && !*req.Memory {
		pause = g.fleet.PauseWithoutMemory
	}
	if err := pause(r.Context(), s); err != nil {
		failSandbox(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (g *gateway) handleConnect(w http.ResponseWriter, r *http.Request) {
	timeout, s, ok := g.timeoutFor(w, r, false)
	if !ok {
		return
	}
	paused, ok := g.pausedFor(w, r, s)
	if !ok {
		return
	}
	status := http.StatusOK
	if paused {
		if err := g.fleet.Resume(r.Context(), s); err != nil {
			failSandbox(w, r, err)
			return
		}
		g.dropRoute(s.ID)
		status = http.StatusCreated
	}
	// A connect timeout only extends the lease.
	if timeout != nil && *timeout > 0 && g.now().Add(time.Duration(*timeout)*time.Second).After(s.Deadline) {
		if _, err := g.fleet.Renew(r.Context(), s, *timeout); err != nil {
			failSandbox(w, r, err)
			return
		}
	}
	writeJSON(w, status, g.sandboxOf(s))
}

func (g *gateway) handleFork(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Timeout *int64 `json:"timeout"`
		Count   *int   `json:"count"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	count := 1
	if req.Count != nil {
		count = *req.Count
	}
	// More than a node forks in one call is a 400 naming the bound, before
	// any node call, not the node's refusal.
	if count < 1 || count > nodeapi.MaxForkCount {
		writeError(w, http.StatusBadRequest, "count must be in [1, %d] (a node forks at most %d children in one call), got %d", nodeapi.MaxForkCount, nodeapi.MaxForkCount, count)
		return
	}
	ttl, ok := g.leaseSeconds(r.Context(), req.Timeout)
	if !ok {
		writeError(w, http.StatusBadRequest, "timeout must be >= 0")
		return
	}
	if g.tooLong(w, r, req.Timeout) {
		return
	}
	s, ok := g.sandboxFor(w, r)
	if !ok {
		return
	}
	if paused, ok := g.pausedFor(w, r, s); !ok {
		return
	} else if paused {
		writeError(w, http.StatusConflict, "sandbox %q is paused and cannot be forked; connect (resume) it first", r.PathValue("id"))
		return
	}
	// As a create's: detached, and released if the client is gone.
	children, err := fleet.Detached(r.Context(), g.fleet, func(ctx context.Context) ([]nodeapi.Sandbox, error) {
		return g.fleet.Fork(ctx, s, count, ttl)
	})
	if errors.Is(err, fleet.ErrAbandoned) {
		return
	}
	if err != nil {
		failSandbox(w, r, err)
		return
	}
	out := make([]map[string]any, 0, len(children))
	for _, c := range children {
		out = append(out, map[string]any{"sandbox": g.sandboxOf(c)})
	}
	writeJSON(w, http.StatusOK, out)
}
