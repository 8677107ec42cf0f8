package node

import (
	"context"
	"net/http"
	"time"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/inventory"
)

// agentLogsTimeout bounds the node's call for a sandbox's log.
const agentLogsTimeout = 5 * time.Second

// logs reads sandbox id's log from its agent (agentapi.LogsPath): the
// entries q selects. The agent keeps the log (package agent); the node
// keeps none. A paused sandbox is a 409 (its agent does not run), an agent
// that does not answer a 502.
func (n *Node) logs(ctx context.Context, id string, q agentapi.LogsQuery) (agentapi.Logs, error) {
	c, _, err := n.logAgent(id)
	if err != nil {
		return agentapi.Logs{}, err
	}
	// Asked outside the sandbox's lock: a slow agent holds no pause or
	// release back.
	ctx, cancel := context.WithTimeout(ctx, agentLogsTimeout)
	defer cancel()
	l, err := c.Logs(ctx, q)
	if err != nil {
		return agentapi.Logs{}, errorf(http.StatusBadGateway, "sandbox %s: its agent did not give its log: %v", id, err)
	}
	if l.Entries == nil {
		l.Entries = []agentapi.LogEntry{}
	}
	return l, nil
}

// logAgent is the client of sandbox id's agent, for its log, and the
// namespace of its claim ref ("default" without one): a paused sandbox is
// a 409 (its agent does not run).
func (n *Node) logAgent(id string) (c agentapi.Client, namespace string, err error) {
	err = n.withSandbox(id, func(sb *sandbox) error {
		n.mu.Lock()
		h, paused, ref := sb.rec.Handle, sb.rec.Paused, sb.rec.ClaimRef
		n.mu.Unlock()
		if paused {
			return errorf(http.StatusConflict, "sandbox %s is paused: its log is kept by its agent, which does not run until it is resumed", id)
		}
		c = agentapi.Client{Addr: h.Addr, Token: h.Token}
		namespace, _ = inventory.SplitName(ref)
		return nil
	})
	return c, namespace, err
}

// handleLogs serves GET /v1/sandboxes/{id}/logs (nodeapi.Client.Logs);
// follow=true streams it (logfollow.go, nodeapi.Client.FollowLogs).
func (n *Node) handleLogs(w http.ResponseWriter, r *http.Request, _ principal, id string) {
	q, err := agentapi.ParseLogsQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	follow, err := agentapi.ParseFollow(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if follow {
		n.followLogs(w, r, id, q)
		return
	}
	l, err := n.logs(r.Context(), id, q)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, l)
}
