package fleet

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/sandbox"
)

// awaiter is a Locator that can wait for a claim's entry to reach a state
// (fleetview.Live's AwaitID).
type awaiter interface {
	AwaitID(ctx context.Context, id string, cond func(v inventory.Versioned, ok bool) bool) bool
}

// settleTimeout bounds how long a pause, resume or release waits for the
// Locator to show it (settle). A streaming view shows a change within a
// few milliseconds; a node whose stream is down is waited for no longer.
const settleTimeout = time.Second

// SetLabels replaces s's recorded labels, annotations and managed fields
// on its node (conditional on req.Version when set: a stale one is the
// node's 409) and re-indexes the answer.
func (f *NodeFleet) SetLabels(ctx context.Context, s nodeapi.Sandbox, req nodeapi.LabelsRequest) (nodeapi.Sandbox, error) {
	c, err := f.owner(s)
	if err != nil {
		return nodeapi.Sandbox{}, err
	}
	out, err := c.SetLabels(ctx, s.ID, req)
	if err != nil {
		return nodeapi.Sandbox{}, nodeErr(err)
	}
	out = located(out, s.Node, c.Addr)
	f.index.put(out)
	return out, nil
}

// owner returns the client of the node holding s.
func (f *NodeFleet) owner(s nodeapi.Sandbox) (*nodeapi.Client, error) {
	if s.ID == "" {
		return nil, fmt.Errorf("sandbox %q has no claim id; refusing to act by name", s.ClaimRef)
	}
	addr := s.NodeAddr
	if addr == "" {
		if n, ok := f.cfg.View.View().Node(s.Node); ok {
			addr = n.Address
		}
	}
	if addr == "" {
		return nil, fmt.Errorf("node %q of sandbox %s has no address", s.Node, s.ID)
	}
	if s.Node == "" {
		return nil, fmt.Errorf("sandbox %s names no node; its node's token is unknown", s.ID)
	}
	return f.client(s.Node, addr), nil
}

// Release destroys s on its node by claim id.
func (f *NodeFleet) Release(ctx context.Context, s nodeapi.Sandbox) error {
	c, err := f.owner(s)
	if err != nil {
		return err
	}
	err = nodeErr(c.Release(ctx, s.ID))
	if err == nil || errors.Is(err, ErrNotFound) {
		f.index.forget(s.ClaimRef, s.ID)
		f.settle(ctx, s.ID, func(_ inventory.Versioned, ok bool) bool { return !ok })
	}
	return err
}

// settle waits, at most settleTimeout, until the Locator shows what the
// node just did to claim id (cond), so that the caller's next list reads
// its own write: a paused sandbox listed as paused, a released one gone.
// A view that cannot wait (a test's static one) returns at once.
func (f *NodeFleet) settle(ctx context.Context, id string, cond func(v inventory.Versioned, ok bool) bool) {
	aw, ok := f.cfg.View.(awaiter)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	aw.AwaitID(ctx, id, cond)
}

// settlePhase is settle until id's entry is gone or paused (or not).
func (f *NodeFleet) settlePhase(ctx context.Context, id string, paused bool) {
	f.settle(ctx, id, func(v inventory.Versioned, ok bool) bool {
		return !ok || (v.Item.Entry.Phase == sandbox.PhasePaused) == paused
	})
}

// Pause pauses s.
func (f *NodeFleet) Pause(ctx context.Context, s nodeapi.Sandbox) error {
	c, err := f.owner(s)
	if err != nil {
		return err
	}
	if err := nodeErr(c.Pause(ctx, s.ID)); err != nil {
		return err
	}
	f.settlePhase(ctx, s.ID, true)
	return nil
}

// PauseWithoutMemory pauses s without its memory (nodeapi.PauseRequest):
// its VM is stopped, its file system kept.
func (f *NodeFleet) PauseWithoutMemory(ctx context.Context, s nodeapi.Sandbox) error {
	c, err := f.owner(s)
	if err != nil {
		return err
	}
	keep := false
	if err := nodeErr(c.PauseWith(ctx, s.ID, nodeapi.PauseRequest{Memory: &keep})); err != nil {
		return err
	}
	f.settlePhase(ctx, s.ID, true)
	return nil
}

// Resume resumes s.
func (f *NodeFleet) Resume(ctx context.Context, s nodeapi.Sandbox) error {
	c, err := f.owner(s)
	if err != nil {
		return err
	}
	if err := nodeErr(c.Resume(ctx, s.ID)); err != nil {
		return err
	}
	f.settlePhase(ctx, s.ID, false)
	return nil
}

// Fork clones s count times on its node; children are indexed at once.
// The node gives each child s's labels, annotations, spec and metadata.
func (f *NodeFleet) Fork(ctx context.Context, s nodeapi.Sandbox, count int, ttlSeconds int64) ([]nodeapi.Sandbox, error) {
	c, err := f.owner(s)
	if err != nil {
		return nil, err
	}
	kids, err := c.Fork(ctx, s.ID, nodeapi.ForkRequest{Count: count, TTLSeconds: ttlSeconds})
	if err != nil {
		return nil, nodeErr(err)
	}
	for i := range kids {
		kids[i] = located(kids[i], s.Node, c.Addr)
		f.index.put(kids[i])
	}
	return kids, nil
}

// Snapshot snapshots s on its node.
func (f *NodeFleet) Snapshot(ctx context.Context, s nodeapi.Sandbox, name string) (nodeapi.Snapshot, error) {
	c, err := f.owner(s)
	if err != nil {
		return nodeapi.Snapshot{}, err
	}
	snap, err := c.Snapshot(ctx, s.ID, name)
	if err == nil && snap.Node == "" {
		snap.Node = s.Node
	}
	return snap, nodeErr(err)
}

// Snapshots lists every reachable node's snapshots, newest first.
func (f *NodeFleet) Snapshots(ctx context.Context) ([]nodeapi.Snapshot, error) {
	var mu sync.Mutex
	out := []nodeapi.Snapshot{}
	f.eachNode(ctx, func(ctx context.Context, n inventory.Node) {
		snaps, err := f.client(n.Name, n.Address).Snapshots(ctx)
		if err != nil {
			return
		}
		mu.Lock()
		for _, snap := range snaps {
			if snap.Node == "" {
				snap.Node = n.Name
			}
			out = append(out, snap)
		}
		mu.Unlock()
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	return out, ctx.Err()
}

// DeleteSnapshot deletes id on every node holding it; ErrNotFound if none did.
func (f *NodeFleet) DeleteSnapshot(ctx context.Context, id string) error {
	var mu sync.Mutex
	deleted := false
	var firstErr error
	f.eachNode(ctx, func(ctx context.Context, n inventory.Node) {
		err := nodeErr(f.client(n.Name, n.Address).DeleteSnapshot(ctx, id))
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			deleted = true
		case errors.Is(err, ErrNotFound):
		case firstErr == nil:
			firstErr = err
		}
	})
	switch {
	case deleted:
		return nil
	case firstErr != nil:
		return firstErr
	}
	return ErrNotFound
}

// Renew sets s's lease to ttlSeconds from now (clamped by its node) and
// returns the lease's new deadline.
func (f *NodeFleet) Renew(ctx context.Context, s nodeapi.Sandbox, ttlSeconds int64) (time.Time, error) {
	c, err := f.owner(s)
	if err != nil {
		return time.Time{}, err
	}
	dl, err := c.Renew(ctx, s.ID, ttlSeconds)
	if err != nil {
		return time.Time{}, nodeErr(err)
	}
	f.index.renewed(s.ID, dl)
	return dl, nil
}

// Stats measures s.
func (f *NodeFleet) Stats(ctx context.Context, s nodeapi.Sandbox) (nodeapi.Stats, error) {
	c, err := f.owner(s)
	if err != nil {
		return nodeapi.Stats{}, err
	}
	st, err := c.Stats(ctx, s.ID)
	return st, nodeErr(err)
}

// Logs reads s's log: the entries q selects, from its agent through its
// node (409 paused, 502 when the agent does not answer).
func (f *NodeFleet) Logs(ctx context.Context, s nodeapi.Sandbox, q agentapi.LogsQuery) (agentapi.Logs, error) {
	c, err := f.owner(s)
	if err != nil {
		return agentapi.Logs{}, err
	}
	l, err := c.Logs(ctx, s.ID, q)
	return l, nodeErr(err)
}

// FollowLogs follows s's log through its node (nodeapi.Client.FollowLogs):
// the entries q selects, then each as it is written, until ctx ends or the
// node ends the stream (s paused or released). 409 paused, 429 past the
// node's bound on follows, 502 when the agent does not answer.
func (f *NodeFleet) FollowLogs(ctx context.Context, s nodeapi.Sandbox, q agentapi.LogsQuery) (*agentapi.LogStream, error) {
	c, err := f.owner(s)
	if err != nil {
		return nil, err
	}
	st, err := c.FollowLogs(ctx, s.ID, q)
	return st, nodeErr(err)
}
