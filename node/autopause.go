package node

import (
	"context"
	"net/http"

	"github.com/hearthvm/hearth/nodeapi"
)

// Pause at timeout (nodeapi.OnTimeoutPause): when such a sandbox's lease
// ends the reaper pauses it instead of destroying it — memory and file
// system kept, the claim and its record kept, paused — and passes over it
// while it stays paused past its deadline. A resume of a sandbox whose
// lease has ended grants it a new default lease, so the reaper does not
// pause it again at once. The record carries the lifecycle, so all of
// this survives a node restart.

// pausedAtTimeout reports whether the record is a pause-at-timeout sandbox
// that is paused: its ended lease is not the reaper's business.
func (r *record) pausedAtTimeout() bool {
	return r.Paused && r.Lifecycle.OnTimeout == nodeapi.OnTimeoutPause
}

// resumeLease gives a record being resumed past its deadline a new
// default lease; call with the record locked for update.
func (n *Node) resumeLease(r *record) {
	if !r.Paused && !r.Deadline.After(n.now()) {
		r.Deadline = n.limits.Deadline(n.now(), 0)
	}
}

// pauseAtTimeout handles an expired lease of a pause-at-timeout sandbox:
// it pauses the sandbox (unless the lease was renewed meanwhile) and
// reports true; for any other sandbox it does nothing and reports false.
func (n *Node) pauseAtTimeout(ctx context.Context, id string) bool {
	sb := n.lookup(id)
	if sb == nil {
		return false
	}
	n.mu.Lock()
	life := sb.rec.Lifecycle
	n.mu.Unlock()
	if life.OnTimeout != nodeapi.OnTimeoutPause {
		return false
	}
	err := n.withSandbox(id, func(sb *sandbox) error {
		n.mu.Lock()
		paused, h, renewed := sb.rec.Paused, sb.rec.Handle, sb.rec.Deadline.After(n.now())
		n.mu.Unlock()
		if paused || renewed {
			return nil
		}
		var err error
		if life.PauseWithoutMemory {
			h, err = n.stopWithoutMemory(ctx, h)
		} else {
			h, err = n.driver.Pause(ctx, h)
		}
		if err != nil {
			return err
		}
		ev := n.event(nodeapi.EventNormal, nodeapi.ReasonLeaseExpired, "lease expired; paused (on_timeout pause)")
		if life.PauseWithoutMemory {
			ev.Message = "lease expired; paused without memory (on_timeout pause)"
		}
		rec, err := n.update(sb, func(r *record) {
			r.Handle, r.Paused, r.Stopped = h, true, life.PauseWithoutMemory
			r.record(ev)
		})
		if err != nil {
			return err
		}
		n.kubeEvent(&rec, ev)
		return nil
	})
	switch {
	case err == nil:
		n.log.V(1).Info("Lease expired; sandbox paused (on_timeout pause)", "id", id)
	case statusOf(err) != http.StatusNotFound:
		n.log.Error(err, "Pausing a sandbox at its timeout", "id", id)
	}
	return true
}
