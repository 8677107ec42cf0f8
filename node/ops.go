package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
	sandboxkeys "github.com/hearthvm/hearth/sandbox"
	"github.com/hearthvm/hearth/vmm"
)

// apiError is an operation failure with its HTTP status.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return &apiError{status: status, msg: fmt.Sprintf(format, args...)}
}

func statusOf(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.status
	}
	return http.StatusInternalServerError
}

var (
	errNotFound = errorf(http.StatusNotFound, "sandbox not found")
	errClosing  = errorf(http.StatusServiceUnavailable, "node is shutting down")
)

// MaxForkCount is the largest fork fan-out: nodeapi.MaxForkCount, the one
// place it lives.
const MaxForkCount = nodeapi.MaxForkCount

func (n *Node) lookup(id string) *sandbox {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.tab.byID[id]
}

// wire renders a record as the one sandbox record of the node API. The
// token is included for the claim that delivered it and root lookups by id.
func (n *Node) wire(r record, withToken bool) nodeapi.Sandbox {
	return wireRecord(&r, n.cfg.Name, n.cfg.AdvertiseAddress, withToken)
}

// newSandboxID returns an unused claim id; call with n.mu held.
func (n *Node) newSandboxID() string {
	for {
		id := "sb_" + randHex(8)
		if _, taken := n.tab.byID[id]; !taken {
			return id
		}
	}
}

// claim transfers one warm VM of in.key to a new sandbox. It never boots:
// with no warm VM it fails with 429.
func (n *Node) claim(ctx context.Context, in claimInput) (nodeapi.Sandbox, error) {
	start := time.Now()
	res, err := n.claimWarm(ctx, in)
	n.metrics.claimSeconds.Observe(time.Since(start).Seconds())
	switch {
	case err == nil:
		n.metrics.claims.WithLabelValues("delivered").Inc()
	case statusOf(err) == http.StatusTooManyRequests:
		n.metrics.claims.WithLabelValues("no_capacity").Inc()
	default:
		n.metrics.claims.WithLabelValues("error").Inc()
	}
	return res, err
}

func (n *Node) claimWarm(ctx context.Context, in claimInput) (nodeapi.Sandbox, error) {
	now := n.now().UTC()
	sb := &sandbox{}
	sb.mu.Lock()
	handed := false // sb.mu went to openClaimed
	defer func() {
		if !handed {
			sb.mu.Unlock()
		}
	}()
	n.mu.Lock()
	// The name check and the claim are one step under the table's lock: of
	// two claims of one ref, exactly one is delivered.
	if held := n.tab.holder(in.ref); in.ref != "" && held != nil {
		n.mu.Unlock()
		return nodeapi.Sandbox{}, errRefHeld(in.ref, held.rec.ID)
	}
	h, ok := n.tab.take(in.key)
	if !ok {
		n.mu.Unlock()
		return nodeapi.Sandbox{}, errorf(http.StatusTooManyRequests, "no warm sandbox on node %s for pool (%s)", n.cfg.Name, in.key)
	}
	sb.rec = record{ID: n.newSandboxID(), Key: in.key, Handle: h, ClaimRef: in.ref,
		Deadline: n.limits.Deadline(now, in.ttl), ClaimedAt: now.Truncate(time.Millisecond), Metadata: in.metadata,
		Version: 1, Object: in.object, Lifecycle: in.life, Env: in.env, Egress: in.egress, PoolEgress: n.tab.pools[in.key].egress}
	n.tab.insert(sb)
	rec := sb.rec
	n.mu.Unlock()
	n.kickRefill()

	undo := func(cause error) (nodeapi.Sandbox, error) {
		n.mu.Lock()
		n.tab.remove(rec.ID)
		n.mu.Unlock()
		sb.gone = true
		_ = n.store.deleteSandbox(rec.ID)
		n.destroyAsync(h, "claim failed")
		return nodeapi.Sandbox{}, cause
	}
	if h.Hold {
		// A held VM serves no request of the sandbox before the node
		// opens it: answer once the policy is known enforceable, then
		// enforce it and open the agent holding sb.mu (open.go).
		if err := n.checkEgress(rec); err != nil {
			return undo(err)
		}
	}
	if err := n.store.putSandboxes(rec); err != nil {
		return undo(fmt.Errorf("recording the claim: %w", err))
	}
	if h.Hold && n.goBG(func() { n.openClaimed(sb, rec) }) {
		handed = true
		return n.wire(rec, true), nil
	}
	if err := n.enforceAndOpen(ctx, rec); err != nil {
		return undo(err)
	}
	return n.wire(rec, true), nil
}

// errRefHeld is the 409 of a claim whose claim ref a live sandbox holds.
func errRefHeld(ref, id string) error {
	return errorf(http.StatusConflict, "claim_ref %s is held by sandbox %s", ref, id)
}

// initAgent posts env to the agent's /init. An agent without /init (404) is
// tolerated.
func (n *Node) initAgent(ctx context.Context, h vmm.Handle, env map[string]string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := (&agentapi.Client{Addr: h.Addr, Token: h.Token, HTTP: n.agentHTTP}).Init(ctx, env)
	if agentapi.StatusOf(err) == http.StatusNotFound {
		n.log.V(2).Info("Agent has no /init; env not applied", "vm", h.ID)
		return nil
	}
	return err
}

// remove destroys sandbox id (release, or the reaper when onlyExpired).
func (n *Node) remove(ctx context.Context, id string, onlyExpired bool) error {
	sb := n.lookup(id)
	if sb == nil {
		return errNotFound
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.gone {
		return errNotFound
	}
	n.mu.Lock()
	if onlyExpired && sb.rec.Deadline.After(n.now()) {
		n.mu.Unlock()
		return errorf(http.StatusConflict, "lease was renewed")
	}
	h := sb.rec.Handle
	n.mu.Unlock()
	// Forget first, then destroy: a crash in between leaves an orphan that
	// the next start destroys, never a record without a VM. A record that
	// cannot be deleted (the store failed) fails the release and keeps the
	// sandbox, for a retry: answered, it would come back at the next
	// start. sb.mu, held, keeps every other change of it out meanwhile.
	if err := n.store.deleteSandbox(id); err != nil {
		return fmt.Errorf("recording the release: %w", err)
	}
	n.mu.Lock()
	n.tab.remove(id)
	n.mu.Unlock()
	sb.gone = true
	if err := n.driver.Destroy(context.WithoutCancel(ctx), h); err != nil {
		n.log.Error(err, "Destroying a released sandbox", "id", id, "vm", h.ID)
	}
	n.releaseSnapshots(id)
	return nil
}

// withSandbox runs f holding sb.mu, failing with 404 when it is gone.
func (n *Node) withSandbox(id string, f func(sb *sandbox) error) error {
	sb := n.lookup(id)
	if sb == nil {
		return errNotFound
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.gone {
		return errNotFound
	}
	return f(sb)
}

// update applies mut to sb's record under the table lock, counts the
// change (Version), publishes it on the change stream and persists it.
func (n *Node) update(sb *sandbox, mut func(r *record)) (record, error) {
	n.mu.Lock()
	rec := n.tab.update(sb, func(r *record) { mut(r); r.Version++ })
	n.mu.Unlock()
	return rec, n.store.putSandboxes(rec)
}

// setPaused pauses (with memory) or resumes sandbox id; idempotent.
func (n *Node) setPaused(ctx context.Context, id string, pause bool) error {
	return n.pause(ctx, id, pause, true)
}

// pause pauses sandbox id — keeping memory, or stopped (see
// nodeapi.PauseRequest) — or resumes it; idempotent.
func (n *Node) pause(ctx context.Context, id string, pause, keepMemory bool) error {
	return n.withSandbox(id, func(sb *sandbox) error {
		n.mu.Lock()
		cur, stopped, h := sb.rec.Paused, sb.rec.Stopped, sb.rec.Handle
		n.mu.Unlock()
		if cur == pause {
			return nil
		}
		var err error
		switch {
		case pause && keepMemory:
			err = n.driverCall(ctx, "Pause", h, func(ctx context.Context) (err error) { h, err = n.driver.Pause(ctx, h); return err })
		case pause:
			err = n.driverCall(ctx, "Stop", h, func(ctx context.Context) (err error) { h, err = n.stopWithoutMemory(ctx, h); return err })
		case stopped:
			err = n.driverCall(ctx, "Restore", h, func(ctx context.Context) (err error) { h, err = n.driver.Restore(ctx, h); return err })
		default:
			err = n.driverCall(ctx, "Resume", h, func(ctx context.Context) (err error) { h, err = n.driver.Resume(ctx, h); return err })
		}
		if err != nil {
			return err
		}
		ev := n.event(nodeapi.EventNormal, nodeapi.ReasonResumed, "resumed")
		switch {
		case pause && keepMemory:
			ev = n.event(nodeapi.EventNormal, nodeapi.ReasonPaused, "paused, memory kept")
		case pause:
			ev = n.event(nodeapi.EventNormal, nodeapi.ReasonPaused, "paused without memory (stopped, disk kept)")
		case stopped:
			ev.Message = "resumed: restarted from its disk"
		}
		rec, err := n.update(sb, func(r *record) {
			r.Handle, r.Paused, r.Stopped = h, pause, pause && !keepMemory
			n.resumeLease(r)
			r.record(ev)
		})
		if err != nil {
			return err
		}
		n.kubeEvent(&rec, ev)
		if stopped && !pause {
			// A VM restored from its files is a new boot: its filter and
			// resolver are new, and its agent has no env yet (held, it
			// serves the sandbox only once opened after the policy).
			if err := n.enforceAndOpen(ctx, rec); err != nil {
				// Neither served without its policy nor left held for
				// good: stopped again, it stays paused for a retry.
				return n.restopped(ctx, sb, fmt.Errorf("resuming without memory: %w", err))
			}
		}
		return nil
	})
}

// stopWithoutMemory ends h keeping only its disk, so that Restore boots it
// again: the driver's Shutdown (vmm.Shutdowner) where it has one, whose
// Stop would keep the memory; else its Stop.
func (n *Node) stopWithoutMemory(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	if sd, ok := n.driver.(vmm.Shutdowner); ok {
		return sd.Shutdown(ctx, h)
	}
	return n.driver.Stop(ctx, h)
}

func (n *Node) renew(id string, ttl int64) (time.Time, error) {
	var dl time.Time
	err := n.withSandbox(id, func(sb *sandbox) error {
		dl = n.limits.Deadline(n.now(), ttl)
		_, err := n.update(sb, func(r *record) { r.Deadline = dl })
		return err
	})
	return dl, err
}

// setLabels replaces sandbox id's recorded labels, annotations and managed
// fields; a non-zero req.Version must be the record's current one (409).
func (n *Node) setLabels(id string, req nodeapi.LabelsRequest) (nodeapi.Sandbox, error) {
	var out nodeapi.Sandbox
	err := n.withSandbox(id, func(sb *sandbox) error {
		n.mu.Lock()
		cur := sb.rec.Version
		n.mu.Unlock()
		if req.Version != 0 && req.Version != cur {
			return errorf(http.StatusConflict, "sandbox %s is at version %d, not %d", id, cur, req.Version)
		}
		rec, err := n.update(sb, func(r *record) {
			r.Object.Labels, r.Object.Annotations, r.Object.ManagedFields = req.Labels, req.Annotations, req.ManagedFields
		})
		if err != nil {
			return err
		}
		out = n.wire(rec, false)
		return nil
	})
	return out, err
}

func (n *Node) stats(ctx context.Context, id string) (nodeapi.Stats, error) {
	var out nodeapi.Stats
	err := n.withSandbox(id, func(sb *sandbox) error {
		n.mu.Lock()
		h, paused, stopped := sb.rec.Handle, sb.rec.Paused, sb.rec.Stopped
		n.mu.Unlock()
		if stopped {
			out = nodeapi.Stats{ID: id, Paused: true, MeasuredAt: n.now().UTC()} // no VM to measure
			return nil
		}
		s, err := n.driver.Stats(ctx, h)
		if err != nil {
			return err
		}
		out = nodeapi.Stats{ID: id, CPUCount: s.CPUCount, MemTotalBytes: s.MemTotalBytes, MemUsedBytes: s.MemUsedBytes,
			MemUsedMeasured: s.MemUsedMeasured, RSSBytes: s.RSSBytes, PrivateBytes: s.PrivateBytes, SharedBytes: s.SharedBytes,
			CPUSeconds: s.CPUSeconds, DiskTotalBytes: s.DiskTotalBytes, DiskUsedBytes: s.DiskUsedBytes,
			MeasuredAt: s.MeasuredAt, Paused: paused}
		return nil
	})
	return out, err
}

// namespaceOf returns the namespace part of a claim ref ("default" without one).
func namespaceOf(ref string) string {
	if ns, _, ok := strings.Cut(ref, "/"); ok && ns != "" {
		return ns
	}
	return "default"
}

// fork snapshots sandbox id into a scratch directory and clones count
// children from it, all or nothing.
func (n *Node) fork(ctx context.Context, id string, count int, ttl int64) ([]nodeapi.Sandbox, error) {
	scratch := filepath.Join(n.dirs.tmp, "fork-"+randHex(8))
	defer os.RemoveAll(scratch)
	var parent record
	var child lineage
	release := func() {} // the quota reservation, held until the children are recorded
	defer func() { release() }()
	err := n.withSandbox(id, func(sb *sandbox) error {
		n.mu.Lock()
		parent = sb.rec
		n.mu.Unlock()
		if parent.Paused {
			return errorf(http.StatusConflict, "sandbox %s is paused; resume it before forking", id)
		}
		c, rel, err := n.reserveFork(parent, count)
		if err != nil {
			return err
		}
		child, release = c, rel
		return n.driverCall(ctx, "Snapshot", parent.Handle, func(ctx context.Context) error { return n.driver.Snapshot(ctx, parent.Handle, scratch) })
	})
	if err != nil {
		return nil, err
	}
	// A fork child's ports are as open as its parent's: a private
	// sandbox's children are private, an e2b create's public ones public;
	// and it is e2b's when its parent is.
	life := nodeapi.Lifecycle{PrivateTraffic: parent.Lifecycle.PrivateTraffic, PublicTraffic: parent.Lifecycle.PublicTraffic, E2B: parent.Lifecycle.E2B}
	first := n.event(nodeapi.EventNormal, nodeapi.ReasonClaimed, "forked from "+nameOf(parent))
	recs, err := n.cloneN(ctx, scratch, parent.Key, count, ttl, n.forkRefs(parent), "", childObject(parent.Object), parent.Metadata, child, life, parent.Egress, parent.PoolEgress, first)
	if err != nil {
		return nil, err
	}
	out := make([]nodeapi.Sandbox, len(recs))
	names := make([]string, len(recs))
	for i, r := range recs {
		out[i] = n.wire(r, true)
		names[i] = nameOf(r)
	}
	_ = n.withSandbox(id, func(sb *sandbox) error {
		n.note(sb, n.event(nodeapi.EventNormal, nodeapi.ReasonForked, "forked into "+strings.Join(names, ", ")))
		return nil
	})
	return out, nil
}

// forkRefs names a fork's children "<ns>/<parent>-fork-<n>": the first n
// from 1 whose name no sandbox of this node holds (call with n.mu held).
// A parent without a claim ref is named by its claim id made DNS-safe.
func (n *Node) forkRefs(parent record) func(string) string {
	ns, base := namespaceOf(parent.ClaimRef), ""
	if _, name, ok := strings.Cut(parent.ClaimRef, "/"); ok {
		base = name
	} else {
		base = nodeapi.DNSName(parent.ID)
	}
	next := 1
	return func(string) string {
		for ; ; next++ {
			if ref := ns + "/" + forkName(base, next); n.tab.holder(ref) == nil {
				next++
				return ref
			}
		}
	}
}

// forkName is the name of a fork's nth child of parent: "<parent>-fork-<n>",
// the parent part cut so the whole stays a DNS-1123 subdomain (at most 253
// characters, ending alphanumeric).
func forkName(parent string, n int) string {
	suffix := fmt.Sprintf("-fork-%d", n)
	if max := 253 - len(suffix); len(parent) > max {
		parent = strings.TrimRight(parent[:max], "-.")
	}
	return parent + suffix
}

// childObject is what a clone inherits of its parent's object: labels,
// annotations and spec; its managed fields start empty.
func childObject(o nodeapi.Object) nodeapi.Object {
	o.ManagedFields = nil
	return o
}

// cloneN clones count new sandboxes from the VM snapshot in dir, records
// them and returns their records; on any failure it destroys what it made.
// refOf names each new sandbox (called with n.mu held, after every earlier
// child is inserted); nil leaves them unnamed. lin places them in a fork
// tree; each is recorded with meta (its metadata), life and its first
// event (first) from the start.
func (n *Node) cloneN(ctx context.Context, dir string, k pool.Key, count int, ttl int64, refOf func(id string) string, fromSnapshot string, obj nodeapi.Object, meta map[string]string, lin lineage, life nodeapi.Lifecycle, pol, poolPol *egress.Policy, first nodeapi.Event) ([]record, error) {
	handles := make([]vmm.Handle, count)
	errs := make([]error, count)
	// Every clone runs to its end, even after another failed: what one
	// made is destroyed below, so no error cancels the rest.
	var g errgroup.Group
	g.SetLimit(4)
	for i := range count {
		g.Go(func() error {
			// ClaimEgress: a clone of a running VM's checkpoint (qemu)
			// resumes the guest as it was — its agent open, its processes
			// running — so no hold covers the time before the SetEgress
			// below; the driver installs the sandbox's policy first.
			spec := vmm.Spec{ID: "vm-" + randHex(8), Template: k.Template, Net: k.Net, Size: k.Size, Token: newToken(), Egress: poolPol, ClaimEgress: pol, Hold: n.holds(k.Net)}
			errs[i] = n.driverCall(ctx, "Clone", vmm.Handle{ID: spec.ID}, func(ctx context.Context) (err error) { handles[i], err = n.driver.Clone(ctx, dir, spec); return err })
			return nil
		})
	}
	_ = g.Wait()
	if err := errors.Join(errs...); err != nil {
		for i, h := range handles {
			if errs[i] == nil {
				n.destroyAsync(h, "clone batch failed")
			}
		}
		return nil, fmt.Errorf("cloning: %w", err)
	}
	now := n.now().UTC()
	recs := make([]record, count)
	n.mu.Lock()
	for i, h := range handles {
		id := n.newSandboxID()
		r := record{ID: id, Key: k, Handle: h, Deadline: n.limits.Deadline(now, ttl), ClaimedAt: now.Truncate(time.Millisecond),
			Snapshot: fromSnapshot, Version: 1, Object: obj, Metadata: meta, Tree: lin.tree, Depth: lin.depth, Lifecycle: life, Egress: pol, PoolEgress: poolPol,
			Events: []nodeapi.Event{first}}
		if refOf != nil {
			r.ClaimRef = refOf(id)
		}
		if held := n.tab.holder(r.ClaimRef); r.ClaimRef != "" && held != nil {
			// Only a named snapshot claim can get here: undo this batch.
			for _, done := range recs[:i] {
				n.tab.remove(done.ID)
			}
			n.mu.Unlock()
			for _, h := range handles {
				n.destroyAsync(h, "claim ref held")
			}
			return nil, errRefHeld(r.ClaimRef, held.rec.ID)
		}
		recs[i] = r
		n.tab.insert(&sandbox{rec: r})
	}
	n.mu.Unlock()
	// undo forgets the batch (its records too, once stored) and destroys
	// its VMs.
	undo := func(stored bool, why string) {
		n.mu.Lock()
		for _, r := range recs {
			if sb := n.tab.remove(r.ID); sb != nil {
				sb.gone = true
			}
		}
		n.mu.Unlock()
		for _, r := range recs {
			if stored {
				_ = n.store.deleteSandbox(r.ID)
			}
		}
		for _, h := range handles {
			n.destroyAsync(h, why)
		}
	}
	if err := n.store.putSandboxes(recs...); err != nil {
		undo(false, "recording clones failed")
		return nil, fmt.Errorf("recording clones: %w", err)
	}
	// Each clone is a new VM: its filter holds nothing of the policy yet;
	// a held one's agent (a clone that boots: sim) is opened after it.
	var eg errgroup.Group
	eg.SetLimit(4)
	for _, r := range recs {
		eg.Go(func() error { return n.enforceAndOpen(ctx, r) })
	}
	if err := eg.Wait(); err != nil {
		undo(true, "egress policy not enforced")
		return nil, err
	}
	return recs, nil
}

// enforceEgress makes r's VM enforce r.Egress through the driver (after a
// claim, a clone, a restore). Without a claim policy there is nothing to
// add — the pool's is the driver's from the VM's boot — so a claim
// without one makes no driver call. A VM of the lane "none" has no network
// to filter; a driver that cannot enforce a policy on a networked VM fails
// the operation (409), as does one that cannot enforce a rule of it
// (vmm.ErrUnsupported): a policy is never silently dropped.
func (n *Node) enforceEgress(ctx context.Context, r record) error {
	if r.Egress == nil {
		return nil
	}
	ee, ok := n.driver.(vmm.EgressEnforcer)
	switch {
	case ok:
		err := n.driverCall(ctx, "SetEgress", r.Handle, func(ctx context.Context) error { return ee.SetEgress(ctx, r.Handle, r.Egress) })
		if errors.Is(err, vmm.ErrUnsupported) { // a rule this backend cannot enforce (qemu's domain rules without a host nameserver)
			return errorf(http.StatusConflict, "node %s's backend (%s) cannot enforce this egress policy: %v", n.cfg.Name, n.driver.Name(), err)
		}
		if err != nil {
			return fmt.Errorf("enforcing the egress policy: %w", err)
		}
		return nil
	case r.Key.Net == sandboxkeys.NetNone:
		return nil
	}
	return errorf(http.StatusConflict, "node %s's backend (%s) cannot enforce an egress policy on the %s lane", n.cfg.Name, n.driver.Name(), r.Key.Net)
}

// snapshot snapshots sandbox id into a named snapshot; the source keeps
// running. A snapshot not kept is removed with its sandbox. The node's
// snapshot bytes stay within Quota.MaxSnapshotBytes (429).
func (n *Node) snapshot(ctx context.Context, id, name string, kept bool) (nodeapi.Snapshot, error) {
	var sr snapRecord
	err := n.withSandbox(id, func(sb *sandbox) error {
		n.mu.Lock()
		src := sb.rec
		n.mu.Unlock()
		if src.Stopped {
			return errorf(http.StatusConflict, "sandbox %s is paused without memory; resume it first", id)
		}
		snapID := "sn_" + randHex(8)
		sr = snapRecord{
			Snapshot: nodeapi.Snapshot{ID: snapID, Name: name, SandboxID: id, Key: src.Key,
				CreatedAt: n.now().UTC(), Node: n.cfg.Name, Namespace: namespaceOf(src.ClaimRef), Kept: kept,
				E2B: src.Lifecycle.E2B},
			Dir:        filepath.Join(n.dirs.snapshots, snapID),
			Egress:     src.Egress,
			PoolEgress: src.PoolEgress,
		}
		n.mu.Lock()
		used := n.snapshotBytes()
		n.mu.Unlock()
		if err := n.cfg.Quota.checkSnapshotBytes(used, 1); err != nil {
			return n.counted(err)
		}
		// The driver stops copying past the budget left (a concurrent
		// snapshot may use the same budget: the check below settles it).
		bounded := vmm.WithSnapshotLimit(ctx, n.cfg.Quota.MaxSnapshotBytes-used)
		if err := n.driverCall(bounded, "Snapshot", src.Handle, func(ctx context.Context) error { return n.driver.Snapshot(ctx, src.Handle, sr.Dir) }); err != nil {
			_ = os.RemoveAll(sr.Dir)
			if errors.Is(err, vmm.ErrSnapshotTooLarge) {
				return n.counted(n.cfg.Quota.snapshotTooLarge(used))
			}
			return err
		}
		var err error
		if sr.Snapshot.Bytes, err = dirBytes(sr.Dir); err != nil {
			_ = os.RemoveAll(sr.Dir)
			return err
		}
		// Check and add under one lock, so concurrent snapshots cannot
		// together pass the bound.
		sn := &snapshot{rec: sr}
		n.mu.Lock()
		if err = n.cfg.Quota.checkSnapshotBytes(n.snapshotBytes(), sr.Snapshot.Bytes); err == nil {
			n.tab.snapshots[snapID] = sn
		}
		n.mu.Unlock()
		if err != nil {
			_ = os.RemoveAll(sr.Dir)
			return n.counted(err)
		}
		if err := n.store.putSnapshot(sr); err != nil {
			n.mu.Lock()
			delete(n.tab.snapshots, snapID)
			n.mu.Unlock()
			_ = os.RemoveAll(sr.Dir)
			return err
		}
		msg := "snapshot " + snapID + " taken"
		if name != "" {
			msg += " (" + name + ")"
		}
		n.note(sb, n.event(nodeapi.EventNormal, nodeapi.ReasonSnapshotTaken, msg))
		return nil
	})
	return sr.Snapshot, err
}

// snapshotList lists the snapshots, newest first.
func (n *Node) snapshotList() []nodeapi.Snapshot {
	n.mu.Lock()
	out := make([]nodeapi.Snapshot, 0, len(n.tab.snapshots))
	for _, c := range n.tab.snapshots {
		out = append(out, c.rec.Snapshot)
	}
	n.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].ID > out[j].ID
	})
	return out
}

var errSnapshotNotFound = errorf(http.StatusNotFound, "snapshot not found")

func (n *Node) deleteSnapshot(id string) error {
	n.mu.Lock()
	c := n.tab.snapshots[id]
	n.mu.Unlock()
	if c == nil {
		return errSnapshotNotFound
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return errSnapshotNotFound
	}
	c.gone = true
	n.mu.Lock()
	delete(n.tab.snapshots, id)
	n.mu.Unlock()
	if err := n.store.deleteSnapshot(id); err != nil {
		return err
	}
	return os.RemoveAll(c.rec.Dir)
}

// claimSnapshot claims a new sandbox cloned from snapshot id, named
// req.ClaimRef (unique like a claim's; 409 when held) or unnamed, recorded
// with req.Metadata and req.Lifecycle — its e2b visibility the snapshot's
// (req.E2B is ignored).
func (n *Node) claimSnapshot(ctx context.Context, id string, req nodeapi.SnapshotClaimRequest) (nodeapi.Sandbox, error) {
	ttl, ref, life := req.TTLSeconds, req.ClaimRef, req.Lifecycle
	n.mu.Lock()
	c := n.tab.snapshots[id]
	n.mu.Unlock()
	if c == nil {
		return nodeapi.Sandbox{}, errSnapshotNotFound
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.gone {
		return nodeapi.Sandbox{}, errSnapshotNotFound
	}
	release, err := n.reserveExtra(1)
	if err != nil {
		return nodeapi.Sandbox{}, err
	}
	defer release()
	if ref != "" {
		n.mu.Lock()
		held := n.tab.holder(ref)
		n.mu.Unlock()
		if held != nil {
			return nodeapi.Sandbox{}, errRefHeld(ref, held.rec.ID)
		}
	}
	var refOf func(string) string
	if ref != "" {
		refOf = func(string) string { return ref }
	}
	life.E2B = c.rec.Snapshot.E2B
	first := n.event(nodeapi.EventNormal, nodeapi.ReasonClaimed, "cloned from snapshot "+id)
	recs, err := n.cloneN(ctx, c.rec.Dir, c.rec.Snapshot.Key, 1, ttl, refOf, id, nodeapi.Object{}, req.Metadata, lineage{}, life, c.rec.Egress, c.rec.PoolEgress, first)
	if err != nil {
		return nodeapi.Sandbox{}, err
	}
	return n.wire(recs[0], true), nil
}

// setPools replaces the warm targets; pools left out drain.
func (n *Node) setPools(ts []poolTarget) (nodeapi.Info, error) {
	n.mu.Lock()
	want := make(map[pool.Key]poolTarget, len(ts))
	for _, t := range ts {
		want[pool.Key{Template: t.Template, Net: t.Net, Size: t.Size}] = t
	}
	var stale []vmm.Handle
	for k, p := range n.tab.pools {
		if _, ok := want[k]; !ok {
			n.tab.setTarget(k, 0)
			continue
		}
		if !samePolicy(p.egress, want[k].Egress) {
			// Its warm VMs hold the old policy: replace them (the loop
			// below sets the new one and publishes the pool's row).
			stale = append(stale, p.warm...)
			p.warm = nil
		}
	}
	for k, t := range want {
		n.tab.setTarget(k, t.Warm)
		n.tab.pools[k].egress = t.Egress
	}
	n.mu.Unlock()
	for _, h := range stale {
		n.destroyAsync(h, "the pool's egress policy changed")
	}
	if err := n.store.putPools(ts); err != nil {
		return nodeapi.Info{}, err
	}
	n.kickRefill()
	return n.info(), nil
}

// info is the body of GET /v1/info.
func (n *Node) info() nodeapi.Info {
	accel := ""
	if a, ok := n.driver.(interface{ Accel() string }); ok {
		accel = a.Accel()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	out := nodeapi.Info{Node: n.cfg.Name, NodeAddr: n.cfg.AdvertiseAddress, VMM: n.driver.Name(), Accel: accel, Pools: []nodeapi.PoolInfo{},
		LeaseDefaultSeconds: int64(n.limits.Default / time.Second), LeaseMaxSeconds: int64(n.limits.Max / time.Second)}
	for _, p := range n.tab.sortedPools() {
		row := p.row()
		row.Refilling = p.booting
		out.Pools = append(out.Pools, row)
	}
	for _, sb := range n.tab.byID {
		out.Claimed++
		if sb.rec.Paused {
			out.Paused++
		}
	}
	return out
}
