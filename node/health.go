package node

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/vmm"
)

// The warm-pool health sweep. A warm VM whose agent died after its boot
// would otherwise sit in its pool until a claim delivered it. Every
// Config.WarmCheckInterval the sweep copies the warm handles under the node
// mutex, probes each agent (GET http://<Addr>/health) without holding it,
// and evicts a VM that failed warmEvictStrikes sweeps in a row, or whose
// driver reports it not running, from its pool under the mutex again: only
// if it is still warm (a claim may have taken it meanwhile; then it is the
// claim's). A probe fails when the agent refuses, answers an error or
// answers nothing within warmProbeTimeout (a hung agent that accepts the
// connection); one that fails for the node's own lack of resources
// (EMFILE...) proves nothing. Warm VMs stay claimable while they are probed, so claims keep
// their O(1), I/O-free path. Evicted VMs are destroyed in the background and
// the refill loop replaces them.
const (
	// DefaultWarmCheckInterval is the sweep cadence when
	// Config.WarmCheckInterval is zero.
	DefaultWarmCheckInterval = 10 * time.Second
	// warmProbeTimeout bounds one agent probe (and one driver check): an
	// agent that answers nothing within it is hung.
	warmProbeTimeout = 2 * time.Second
	// warmProbeConcurrency bounds the probes in flight per sweep.
	warmProbeConcurrency = 8
	// warmEvictStrikes is how many failed probes in a row evict a VM.
	warmEvictStrikes = 2
)

// errAgentHung is a claimed sandbox's probe that timed out.
var errAgentHung = errors.New("the agent did not answer its health check in time")

// warmProbe is the outcome of probing one warm VM.
type warmProbe struct {
	ID string
	// OK is true when the agent answered /health with a 2xx.
	OK bool
	// Gone is true when the driver reports the VM not running.
	Gone bool
	// Hung is true when the agent did not answer within the probe's
	// timeout (it may have accepted the connection): a hung agent. For a
	// warm VM that is a failed probe (a strike); for a claimed sandbox,
	// whose restore would restart the user's processes, it proves nothing.
	Hung bool
	// Err is set when the probe proved nothing: the node ran out of a
	// resource (file descriptors, memory). Such a probe neither adds nor
	// clears a strike.
	Err error
}

// inconclusive reports the errors that say nothing about a VM's death:
// the node's own resource exhaustion (see nodeExhausted) and timeouts. A probe
// or driver call failing so is reported, and never taken for a dead VM.
func inconclusive(err error) bool { return nodeExhausted(err) || timedOut(err) }

// nodeExhausted reports the node's own resource exhaustion (EMFILE, ENFILE,
// ENOBUFS, ENOMEM, EAGAIN): it says nothing about any VM.
func nodeExhausted(err error) bool {
	if err == nil {
		return false
	}
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.EAGAIN} {
		if errors.Is(err, e) {
			return true
		}
	}
	// Drivers that flatten their cause into text still say so.
	msg := err.Error()
	return strings.Contains(msg, "too many open files") || strings.Contains(msg, "file table overflow")
}

// timedOut reports a deadline that passed.
func timedOut(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// vmGone reports whether err says the VM is known gone: the driver says
// vmm.ErrNotRunning and nothing in the error is inconclusive.
func vmGone(err error) bool { return errors.Is(err, vmm.ErrNotRunning) && !inconclusive(err) }

// planEvictions is the sweep's decision, free of I/O and locking. probes are
// this sweep's results; warm is the set of VM ids warm right now; strikes
// counts the failed probes in a row of earlier sweeps. A VM is evicted when
// it is still warm and its driver reports it gone or it has now failed
// warmEvictStrikes times in a row. It returns the ids to evict (in probe
// order) and the strikes to carry into the next sweep: only for VMs still
// warm, failing and not evicted, so claimed and destroyed VMs are forgotten.
func planEvictions(probes []warmProbe, warm map[string]bool, strikes map[string]int) (evict []string, next map[string]int) {
	next = map[string]int{}
	for _, p := range probes {
		if !warm[p.ID] || p.OK {
			continue
		}
		if p.Err != nil && !p.Gone {
			if s := strikes[p.ID]; s > 0 {
				next[p.ID] = s // no evidence either way
			}
			continue
		}
		s := strikes[p.ID] + 1
		if p.Gone || s >= warmEvictStrikes {
			evict = append(evict, p.ID)
			continue
		}
		next[p.ID] = s
	}
	return evict, next
}

// warmCheckLoop runs the sweep (warm VMs, then claimed sandboxes) every
// WarmCheckInterval until ctx ends.
func (n *Node) warmCheckLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.WarmCheckInterval)
	defer t.Stop()
	strikes := map[string]int{}
	claimed := map[string]claimHealth{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		strikes = n.sweepWarm(ctx, strikes)
		claimed = n.sweepClaimed(ctx, claimed)
	}
}

// oomLoop reads the claimed sandboxes' OOM kills (oom.go) every
// WarmCheckInterval until ctx ends: a loop of its own, since the count is
// the guest's answer and a guest that takes its time to give it must not
// delay the health sweep of every other sandbox on the node.
func (n *Node) oomLoop(ctx context.Context) {
	if _, ok := n.driver.(vmm.OOMCounter); !ok {
		return
	}
	t := time.NewTicker(n.cfg.WarmCheckInterval)
	defer t.Stop()
	var oom oomCounts
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		oom = n.sweepOOM(ctx, oom)
	}
}

// sweepWarm probes every warm VM once and evicts the ones planEvictions
// picks. It returns the strikes for the next sweep.
func (n *Node) sweepWarm(ctx context.Context, strikes map[string]int) map[string]int {
	n.mu.Lock()
	var hs []vmm.Handle
	for _, p := range n.tab.pools {
		hs = append(hs, p.warm...)
	}
	n.mu.Unlock()
	if len(hs) == 0 {
		return map[string]int{}
	}

	probes := make([]warmProbe, len(hs))
	var g errgroup.Group
	g.SetLimit(warmProbeConcurrency)
	for i, h := range hs {
		g.Go(func() error {
			probes[i] = n.probeWarm(ctx, h)
			return nil
		})
	}
	_ = g.Wait() // probes record their own errors
	if ctx.Err() != nil {
		// Probes cut short by shutdown prove nothing.
		return strikes
	}

	var victims []warmVM
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return strikes
	}
	warm := map[string]bool{}
	for _, p := range n.tab.pools {
		for _, h := range p.warm {
			warm[h.ID] = true
		}
	}
	evict, next := planEvictions(probes, warm, strikes)
	if len(evict) > 0 {
		gone := make(map[string]bool, len(evict))
		for _, id := range evict {
			gone[id] = true
		}
		victims = n.tab.evict(gone)
	}
	n.mu.Unlock()
	n.reportInconclusive("warm", probes)

	if len(victims) == 0 {
		return next
	}
	reasons := make(map[string]bool, len(probes))
	for _, p := range probes {
		reasons[p.ID] = p.Gone
	}
	sort.Slice(victims, func(i, j int) bool { return victims[i].h.ID < victims[j].h.ID })
	for _, v := range victims {
		why := "agent failed (or did not answer) its health check twice in a row"
		if reasons[v.h.ID] {
			why = "the driver reports the VM not running"
		}
		n.metrics.warmEvictions.Inc()
		n.log.Info("Evicting an unhealthy warm VM", "vm", v.h.ID, "key", v.key.String(), "reason", why)
		n.destroyAsync(v.h, "unhealthy warm VM")
	}
	n.kickRefill()
	return next
}

// probeWarm checks one warm VM's agent and, when it does not answer, asks
// the driver whether the VM still runs. An agent that does not answer
// within n.probeTimeout is Hung, unless the node itself is out of a
// resource (then the probe proves nothing).
func (n *Node) probeWarm(ctx context.Context, h vmm.Handle) warmProbe {
	pr := warmProbe{ID: h.ID}
	pctx, cancel := context.WithTimeout(ctx, n.probeTimeout)
	err := (&agentapi.Client{Addr: h.Addr, HTTP: n.probeClient}).Health(pctx)
	pr.OK = err == nil
	if agentapi.StatusOf(err) != 0 {
		err = nil // an answer, if not 2xx: neither hung nor out of a resource
	}
	cancel()
	if pr.OK || ctx.Err() != nil {
		return pr
	}
	switch {
	case nodeExhausted(err):
		pr.Err = err
	case timedOut(err):
		pr.Hung = true
	}
	sctx, cancel := context.WithTimeout(ctx, n.probeTimeout)
	defer cancel()
	_, err = n.driver.Stats(sctx, h)
	switch {
	case vmGone(err):
		pr.Gone, pr.Hung = true, false
	case nodeExhausted(err):
		// The node is out of a resource: a timeout may be its own.
		pr.Hung = false
		if pr.Err == nil {
			pr.Err = err
		}
	case timedOut(err) && pr.Err == nil && !pr.Hung:
		pr.Err = err
	}
	return pr
}

// reportInconclusive logs the probes of one sweep that proved nothing, as
// one error, and counts them.
func (n *Node) reportInconclusive(what string, probes []warmProbe) {
	var first error
	count := 0
	for _, p := range probes {
		if p.Err != nil && !p.Gone {
			if first == nil {
				first = p.Err
			}
			count++
		}
	}
	if count == 0 {
		return
	}
	n.metrics.probeErrors.Add(float64(count))
	n.log.Error(first, "Health probes failed on this node's side (resource exhaustion or timeout); no VM was judged by them",
		"sandboxes", what, "probes", count)
}

// newProbeClient returns the HTTP client of the health sweep: no proxy, no
// redirects, no idle connections kept to VMs that may be claimed next.
func newProbeClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// The claimed-sandbox half of the sweep. A claimed sandbox whose agent (or
// VM process) died while the node runs would otherwise stay listed as
// running with an address that answers nothing. Every sweep also probes the
// claimed, non-paused sandboxes (a paused VM does not answer, so
// paused ones are never probed) the same way; one that fails
// warmEvictStrikes sweeps in a row, or whose driver reports it not running,
// is brought back with Driver.Restore (which restarts it from its run
// directory, keeping its files) while holding the sandbox's lifecycle lock
// but not the node mutex. Its new handle (PID, Addr) is then recorded under
// the node mutex, only if the claim still holds the handle that was probed,
// and persisted. A failed restore never destroys the sandbox: it stays
// listed, releasable and reaped at its deadline, and is retried on a later
// sweep after a bounded, doubling backoff.
const (
	// restoreBackoffMin is the wait after a first failed restore.
	restoreBackoffMin = 5 * time.Second
	// restoreBackoffMax bounds the wait between restore attempts.
	restoreBackoffMax = 5 * time.Minute
	// restoreTimeout bounds one Driver.Restore.
	restoreTimeout = 2 * time.Minute
)

// claimProbe is the outcome of probing one claimed sandbox.
type claimProbe struct {
	// ID is the sandbox (claim) id.
	ID string
	// Handle is the VM handle that was probed.
	Handle vmm.Handle
	// OK is true when the agent answered /health with a 2xx.
	OK bool
	// Gone is true when the driver reports the VM not running.
	Gone bool
	// Err is set when the probe proved nothing (see warmProbe.Err).
	Err error
}

// claimHealth is what the sweep remembers about one unhealthy claimed
// sandbox between sweeps.
type claimHealth struct {
	// Strikes counts the failed probes in a row.
	Strikes int
	// Failures counts the failed restores in a row.
	Failures int
	// RetryAt is when a restore may be tried again after a failure.
	RetryAt time.Time
}

// sameVM reports whether a and b name the same running VM instance.
func sameVM(a, b vmm.Handle) bool {
	return a.ID == b.ID && a.PID == b.PID && a.Addr == b.Addr && a.Dir == b.Dir && a.Paused == b.Paused
}

// planRestores is the claimed half of the sweep's decision, free of I/O and
// locking. probes are this sweep's results; live maps the ids of the
// sandboxes claimed and not paused right now to their current handles;
// state is what earlier sweeps left. A probe is ignored (and its state
// dropped) unless its sandbox is still live with the very handle probed (a
// release, pause or resume may have raced). A healthy probe clears the
// state. A failing one adds a strike; the sandbox is picked for restore
// when its driver reports it gone or it has now failed warmEvictStrikes
// times in a row, unless an earlier restore failed and its backoff
// (RetryAt) has not passed at now. It returns the ids to restore (in probe
// order) and the state to carry into the next sweep, which holds every
// failing sandbox, restored ones included (the sweep then applies
// restoreFailed or drops it).
func planRestores(probes []claimProbe, live map[string]vmm.Handle, state map[string]claimHealth, now time.Time) (restore []string, next map[string]claimHealth) {
	next = map[string]claimHealth{}
	for _, p := range probes {
		h, ok := live[p.ID]
		if !ok || !sameVM(h, p.Handle) || p.OK {
			continue
		}
		if p.Err != nil && !p.Gone {
			if s, ok := state[p.ID]; ok {
				next[p.ID] = s // no evidence either way
			}
			continue
		}
		s := state[p.ID]
		s.Strikes++
		next[p.ID] = s
		if s.Failures > 0 && now.Before(s.RetryAt) {
			continue
		}
		if p.Gone || s.Strikes >= warmEvictStrikes {
			restore = append(restore, p.ID)
		}
	}
	return restore, next
}

// restoreBackoff is the wait after failures (>= 1) failed restores in a
// row: restoreBackoffMin, doubling, at most restoreBackoffMax.
func restoreBackoff(failures int) time.Duration {
	d := restoreBackoffMin
	for i := 1; i < failures && d < restoreBackoffMax; i++ {
		d *= 2
	}
	return min(d, restoreBackoffMax)
}

// restoreFailed returns s after one more failed restore at now.
func restoreFailed(s claimHealth, now time.Time) claimHealth {
	s.Failures++
	s.RetryAt = now.Add(restoreBackoff(s.Failures))
	return s
}

// sweepClaimed probes every claimed, non-paused sandbox once and
// restores the ones planRestores picks. It returns the state for the next
// sweep.
func (n *Node) sweepClaimed(ctx context.Context, state map[string]claimHealth) map[string]claimHealth {
	type target struct {
		id string
		h  vmm.Handle
	}
	n.mu.Lock()
	var ts []target
	for id, sb := range n.tab.byID {
		if !sb.rec.Paused && !sb.rec.Handle.Paused {
			ts = append(ts, target{id: id, h: sb.rec.Handle})
		}
	}
	n.mu.Unlock()
	if len(ts) == 0 {
		return map[string]claimHealth{}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].id < ts[j].id })

	probes := make([]claimProbe, len(ts))
	var g errgroup.Group
	g.SetLimit(warmProbeConcurrency)
	for i, t := range ts {
		g.Go(func() error {
			pr := n.probeWarm(ctx, t.h)
			if pr.Hung && pr.Err == nil {
				// A busy sandbox's agent may be slow; restoring it would
				// restart the user's processes on a guess.
				pr.Err = errAgentHung
			}
			probes[i] = claimProbe{ID: t.id, Handle: t.h, OK: pr.OK, Gone: pr.Gone, Err: pr.Err}
			return nil
		})
	}
	_ = g.Wait() // probes record their own errors
	if ctx.Err() != nil {
		return state
	}
	wps := make([]warmProbe, len(probes))
	for i, p := range probes {
		wps[i] = warmProbe{ID: p.ID, Gone: p.Gone, Err: p.Err}
	}
	n.reportInconclusive("claimed", wps)

	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return state
	}
	live := make(map[string]vmm.Handle, len(n.tab.byID))
	for id, sb := range n.tab.byID {
		if !sb.rec.Paused && !sb.rec.Handle.Paused {
			live[id] = sb.rec.Handle
		}
	}
	n.mu.Unlock()
	restore, next := planRestores(probes, live, state, n.now())
	if len(restore) == 0 {
		return next
	}

	byID := make(map[string]claimProbe, len(probes))
	for _, p := range probes {
		byID[p.ID] = p
	}
	ok := make([]bool, len(restore))
	var rg errgroup.Group
	rg.SetLimit(warmProbeConcurrency)
	for i, id := range restore {
		p := byID[id]
		rg.Go(func() error {
			ok[i] = n.restoreClaimed(ctx, p)
			return nil
		})
	}
	_ = rg.Wait()
	now := n.now()
	for i, id := range restore {
		if ok[i] {
			delete(next, id)
		} else {
			next[id] = restoreFailed(next[id], now)
		}
	}
	return next
}

// restoreClaimed restores the sandbox of p whose agent is dead. It holds
// the sandbox's lifecycle lock (so a release waits for it and then destroys
// the restored VM) but calls the driver outside the node mutex, and records
// the new handle only if the claim still holds the probed one. It reports
// whether the sandbox ended restored (or no longer needs it).
func (n *Node) restoreClaimed(ctx context.Context, p claimProbe) bool {
	sb := n.lookup(p.ID)
	if sb == nil {
		return true
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.gone {
		return true
	}
	current := func() bool {
		return n.tab.byID[p.ID] == sb && !sb.rec.Paused && sameVM(sb.rec.Handle, p.Handle)
	}
	n.mu.Lock()
	still := current()
	n.mu.Unlock()
	if !still {
		return true // released, paused or resumed meanwhile: not what was probed
	}
	why := "agent failed its health check twice in a row"
	if p.Gone {
		why = "the driver reports the VM not running"
	}
	rctx, cancel := context.WithTimeout(ctx, restoreTimeout)
	h, err := n.driver.Restore(rctx, p.Handle)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return false // shutting down: the next start restores it
		}
		n.metrics.restores.WithLabelValues("failed").Inc()
		n.note(sb, n.event(nodeapi.EventWarning, nodeapi.ReasonRestoreFailed, "its agent died ("+why+"); restoring it failed, retrying"))
		n.log.Error(err, "Cannot restore a claimed sandbox whose agent died; keeping it for a later sweep",
			"id", p.ID, "vm", p.Handle.ID, "reason", why)
		return false
	}
	n.mu.Lock()
	if !current() {
		// Cannot happen while sb.mu is held; never overwrite a newer handle.
		n.mu.Unlock()
		n.log.Info("Claimed sandbox changed during its restore; leaving it", "id", p.ID, "vm", p.Handle.ID)
		return true
	}
	ev := n.event(nodeapi.EventWarning, nodeapi.ReasonRestored, "its agent died ("+why+"); restored from its files")
	rec := n.tab.update(sb, func(r *record) { r.Handle = h; r.record(ev) })
	n.mu.Unlock()
	if err := n.store.putSandboxes(rec); err != nil {
		n.log.Error(err, "Cannot persist a restored sandbox", "id", p.ID)
	}
	n.kubeEvent(&rec, ev)
	// A held agent (vmm.Handle.Hold) is opened only once the policy is
	// in: if either fails it stays closed to the sandbox's requests.
	if err := n.enforceAndOpen(ctx, rec); err != nil {
		n.log.Error(err, "Cannot enforce a restored sandbox's egress policy or apply its env", "id", p.ID)
	}
	n.metrics.restores.WithLabelValues("ok").Inc()
	n.log.Info("Restored a claimed sandbox whose agent died", "id", p.ID, "vm", h.ID, "reason", why,
		"pid", h.PID, "addr", h.Addr, "claimRef", rec.ClaimRef)
	return true
}
