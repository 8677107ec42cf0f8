package node

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/internal/serve"
)

// Following a sandbox log: GET /v1/sandboxes/{id}/logs?follow=true
// (nodeapi.Client.FollowLogs) streams the agent's followed log
// (agentapi.LogsPath?follow=true) to the caller as newline-delimited
// agentapi.LogEntry lines, each flushed as it comes, decoded and encoded
// again (what a guest sends is checked, one bounded line at a time). The
// stream lifts the server's write timeout (serve.Unbound) once the
// sandbox route has authenticated the caller, and bounds each write
// instead (logFollowWrite). It ends when the caller goes away, the agent
// ends it, the node closes, or the sandbox is paused or released — the
// node learns both from its own change stream (hub), so a follower never
// waits on a frozen VM. At most maxLogFollowsPerSandbox follows of one
// sandbox, maxLogFollowsPerNamespace of one namespace's sandboxes (a
// reader of one namespace cannot take every follow of the node) and
// maxLogFollows on the node at once: one more is a 429.

const (
	// maxLogFollows bounds the follows one node serves at once.
	maxLogFollows = 256
	// maxLogFollowsPerSandbox bounds one sandbox's; below the agent's own
	// bound (agentapi.MaxLogFollowers), so that a follow just ended and
	// not yet counted out by the agent does not refuse the next.
	maxLogFollowsPerSandbox = agentapi.MaxLogFollowers / 2
	// maxLogFollowsPerNamespace bounds the follows of the sandboxes of
	// one namespace (their claim refs') on one node.
	maxLogFollowsPerNamespace = maxLogFollows / 4
	// logFollowWrite bounds each write of a followed log.
	logFollowWrite = 30 * time.Second
)

// logFollows counts the follows served now; the zero value is ready.
type logFollows struct {
	mu    sync.Mutex
	total int
	by    map[string]int // by sandbox id
	byNS  map[string]int // by namespace
}

// admit counts in a follow of sandbox id of namespace ns, or refuses it
// (429).
func (f *logFollows) admit(id, ns string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.total >= maxLogFollows:
		return errorf(http.StatusTooManyRequests, "this node follows %d sandbox logs already, its bound: retry later", maxLogFollows)
	case f.byNS[ns] >= maxLogFollowsPerNamespace:
		return errorf(http.StatusTooManyRequests, "this node follows %d logs of namespace %s's sandboxes already, its bound: retry later", maxLogFollowsPerNamespace, ns)
	case f.by[id] >= maxLogFollowsPerSandbox:
		return errorf(http.StatusTooManyRequests, "sandbox %s's log has %d followers already, its bound: retry later", id, maxLogFollowsPerSandbox)
	}
	if f.by == nil {
		f.by, f.byNS = map[string]int{}, map[string]int{}
	}
	f.total++
	f.by[id]++
	f.byNS[ns]++
	return nil
}

func (f *logFollows) leave(id, ns string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.total--
	if f.by[id]--; f.by[id] <= 0 {
		delete(f.by, id)
	}
	if f.byNS[ns]--; f.byNS[ns] <= 0 {
		delete(f.byNS, ns)
	}
}

// logRunning reports whether sandbox id is in the table and not paused.
func (n *Node) logRunning(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	sb := n.tab.byID[id]
	return sb != nil && !sb.rec.Paused
}

// endFollowWhenStopped calls stop once sandbox id is paused or released,
// or the node closes; it returns when ctx ends. It waits on the hub's
// channel for that sandbox's stop (hub.stopped), so a change to another
// sandbox wakes no follow; it never polls.
func (n *Node) endFollowWhenStopped(ctx context.Context, id string, stop context.CancelFunc) {
	n.hub.mu.Lock()
	stopped := n.hub.stopped(id)
	n.hub.mu.Unlock()
	if !n.logRunning(id) {
		stop()
		return
	}
	select {
	case <-ctx.Done():
	case <-n.ctx.Done():
		stop()
	case <-stopped:
		stop()
	}
}

// followLogs serves GET /v1/sandboxes/{id}/logs?follow=true.
func (n *Node) followLogs(w http.ResponseWriter, r *http.Request, id string, q agentapi.LogsQuery) {
	c, ns, err := n.logAgent(id)
	if err != nil {
		writeErr(w, err)
		return
	}
	if err := n.follows.admit(id, ns); err != nil {
		writeErr(w, err)
		return
	}
	defer n.follows.leave(id, ns)
	ctx, stop := context.WithCancel(r.Context())
	defer stop()
	go n.endFollowWhenStopped(ctx, id, stop)
	st, err := c.FollowLogs(ctx, q)
	if err != nil {
		var he *agentapi.HTTPError
		switch {
		case errors.As(err, &he) && he.Status == http.StatusTooManyRequests:
			writeError(w, http.StatusTooManyRequests, "sandbox "+id+": "+he.Message)
		case r.Context().Err() == nil && ctx.Err() != nil:
			writeErr(w, errorf(http.StatusConflict, "sandbox %s was paused or released while its log was asked for", id))
		default:
			writeErr(w, errorf(http.StatusBadGateway, "sandbox %s: its agent did not follow its log: %v", id, err))
		}
		return
	}
	defer st.Close()
	serve.Unbound(w) // authenticated (sandboxRoute): it lasts as long as it follows
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", agentapi.LogContentTypeStream)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_ = rc.SetWriteDeadline(time.Now().Add(logFollowWrite))
	if rc.Flush() != nil {
		return
	}
	enc := json.NewEncoder(w)
	for {
		e, err := st.Next()
		if err != nil {
			return
		}
		_ = rc.SetWriteDeadline(time.Now().Add(logFollowWrite))
		if enc.Encode(&e) != nil || rc.Flush() != nil {
			return
		}
	}
}
