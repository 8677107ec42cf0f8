package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/nodeapi"
	sandboxkeys "github.com/hearthvm/hearth/sandbox"
	"github.com/hearthvm/hearth/vmm"
)

// A claim's egress policy is one nf_tables commit away from enforced, and
// a commit's tail is milliseconds long; a claim does not wait for it. The
// VMs of a lane where the driver enforces policies (the egress lane of a
// vmm.EgressChecker) boot held (vmm.Spec.Hold): their agent answers the
// node at once and holds every request of the sandbox until the node
// opens it (agentapi.OpenPath). A claim of such a VM checks its policy
// (CheckEgress: what would be refused is refused, 409, before the
// answer), records the claim, answers, and enforces the policy and opens
// the agent after — holding sb.mu until then, so a pause, fork, snapshot
// or release of the sandbox waits for it. No request of the sandbox runs
// before its filter is in. A failure removes the sandbox as a failed
// claim would. Every start of a held VM (a Restore, a resume of a pause
// without memory, a clone) enforces the policy and opens the agent again,
// synchronously; a node that died in between finds the record at its next
// start and does the same, or removes the sandbox.

// openTimeout bounds the enforcement and the opening of a claimed VM.
const openTimeout = 30 * time.Second

// holds reports whether VMs of the lane net boot held (vmm.Spec.Hold).
func (n *Node) holds(net string) bool {
	if net != sandboxkeys.NetEgress {
		return false
	}
	_, enforces := n.driver.(vmm.EgressEnforcer)
	_, checks := n.driver.(vmm.EgressChecker)
	return enforces && checks
}

// checkEgress refuses, as enforceEgress would, a claim policy the driver
// cannot enforce, without installing it.
func (n *Node) checkEgress(r record) error {
	ec, ok := n.driver.(vmm.EgressChecker)
	if r.Egress == nil || !ok {
		return nil
	}
	if err := ec.CheckEgress(r.Egress); err != nil {
		if errors.Is(err, vmm.ErrUnsupported) {
			return errorf(http.StatusConflict, "node %s's backend (%s) cannot enforce this egress policy: %v", n.cfg.Name, n.driver.Name(), err)
		}
		return errorf(http.StatusBadRequest, "egress policy: %v", err)
	}
	return nil
}

// openAgent gives h's agent env: through agentapi.OpenPath for a held VM,
// which opens it, else through /init when there is any.
func (n *Node) openAgent(ctx context.Context, h vmm.Handle, env map[string]string) error {
	if !h.Hold {
		if len(env) == 0 {
			return nil
		}
		return n.initAgent(ctx, h, env)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := (&agentapi.Client{Addr: h.Addr, Token: h.Token, HTTP: n.agentHTTP}).Open(ctx, env)
	if agentapi.StatusOf(err) == http.StatusNotFound {
		// Never served as held when it may not hold: an older agent
		// would have served the sandbox before its policy was in.
		return fmt.Errorf("opening the sandbox agent: it has no %s (an agent older than --hold: rebuild the guest image): %w", agentapi.OpenPath, err)
	}
	if err != nil {
		return fmt.Errorf("opening the sandbox agent: %w", err)
	}
	return nil
}

// enforceAndOpen enforces r's egress policy on its VM, then gives its
// agent r.Env, opening it when held: never before the policy is in.
func (n *Node) enforceAndOpen(ctx context.Context, r record) error {
	if err := n.enforceEgress(ctx, r); err != nil {
		return err
	}
	if err := n.openAgent(ctx, r.Handle, r.Env); err != nil {
		return fmt.Errorf("applying env to the sandbox agent: %w", err)
	}
	return nil
}

// openClaimed finishes the claim of a held VM after its answer: the
// policy enforced, the agent opened. The caller handed it sb.mu, which it
// unlocks. On failure the sandbox is removed as a failed claim is; when
// the node is closing it is left as recorded, for the next start to open
// (recover).
func (n *Node) openClaimed(sb *sandbox, rec record) {
	defer sb.mu.Unlock()
	ctx, cancel := context.WithTimeout(n.ctx, openTimeout)
	defer cancel()
	err := n.enforceAndOpen(ctx, rec)
	switch {
	case err == nil:
		n.metrics.opens.WithLabelValues("ok").Inc()
		return
	case n.ctx.Err() != nil:
		n.log.Info("Node closing before a claimed sandbox was opened; its next start opens it", "id", rec.ID, "vm", rec.Handle.ID)
		return
	}
	n.metrics.opens.WithLabelValues("failed").Inc()
	n.log.Error(err, "Opening a claimed sandbox failed after its claim was answered; removing it", "id", rec.ID, "vm", rec.Handle.ID, "claimRef", rec.ClaimRef)
	n.mu.Lock()
	n.tab.remove(rec.ID)
	n.mu.Unlock()
	sb.gone = true
	if err := n.store.deleteSandbox(rec.ID); err != nil {
		n.log.Error(err, "Cannot delete the record of a sandbox that failed to open", "id", rec.ID)
	}
	n.destroyAsync(rec.Handle, "opening the claim failed")
}

// restopped stops sb's VM again after a restart from its disk whose
// policy or opening failed, and records it paused without memory (a later
// resume boots it again); cause is the error answered. A VM that cannot
// be stopped is left running held — closed to the sandbox — and said so.
func (n *Node) restopped(ctx context.Context, sb *sandbox, cause error) error {
	n.mu.Lock()
	h := sb.rec.Handle
	n.mu.Unlock()
	ctx = context.WithoutCancel(ctx)
	err := n.driverCall(ctx, "Stop", h, func(ctx context.Context) (err error) { h, err = n.stopWithoutMemory(ctx, h); return err })
	if err == nil {
		ev := n.event(nodeapi.EventWarning, nodeapi.ReasonPaused, "paused again without memory: "+cause.Error())
		var rec record
		if rec, err = n.update(sb, func(r *record) { r.Handle, r.Paused, r.Stopped = h, true, true; r.record(ev) }); err == nil {
			n.kubeEvent(&rec, ev)
		}
	}
	if err != nil {
		return fmt.Errorf("%w; stopping it again: %v", cause, err)
	}
	return fmt.Errorf("%w (it stays paused)", cause)
}
