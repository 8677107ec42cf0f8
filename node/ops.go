package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hearthvm/hearth/pool"
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

// MaxForkCount is the largest fork fan-out.
const MaxForkCount = 16

func (n *Node) lookup(id string) *sandbox {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.tab.byID[id]
}

// row renders a sandbox for lookups; call with n.mu held.
func (n *Node) row(sb *sandbox, withToken bool) Sandbox {
	r := sb.rec
	s := Sandbox{
		ID: r.ID, Template: r.Key.Template, Net: r.Key.Net, Size: r.Key.Size, ClaimRef: r.ClaimRef,
		Addr: r.Handle.Addr, Deadline: r.Deadline, ClaimedAt: r.ClaimedAt, Hibernated: r.Hibernated,
		Metadata: r.Metadata, Node: n.cfg.Name,
	}
	if withToken {
		s.Token = r.Handle.Token
	}
	return s
}

func (n *Node) result(r record) ClaimResult {
	return ClaimResult{ID: r.ID, Token: r.Handle.Token, Deadline: r.Deadline, OwnerAddr: r.Handle.Addr,
		ClaimedAt: r.ClaimedAt, Node: n.cfg.Name, ClaimRef: r.ClaimRef, Template: r.Key.Template}
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
func (n *Node) claim(ctx context.Context, in claimInput) (ClaimResult, error) {
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

func (n *Node) claimWarm(ctx context.Context, in claimInput) (ClaimResult, error) {
	now := n.now().UTC()
	sb := &sandbox{}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	n.mu.Lock()
	h, ok := n.tab.take(in.key)
	if !ok {
		n.mu.Unlock()
		return ClaimResult{}, errorf(http.StatusTooManyRequests, "no warm sandbox on node %s for pool (%s)", n.cfg.Name, in.key)
	}
	sb.rec = record{ID: n.newSandboxID(), Key: in.key, Handle: h, ClaimRef: in.ref,
		Deadline: n.limits.Deadline(now, in.ttl), ClaimedAt: now.Truncate(time.Second), Metadata: in.metadata}
	n.tab.insert(sb)
	rec := sb.rec
	n.mu.Unlock()
	n.kickRefill()

	undo := func(cause error) (ClaimResult, error) {
		n.mu.Lock()
		n.tab.remove(rec.ID)
		n.mu.Unlock()
		sb.gone = true
		_ = n.store.deleteSandbox(rec.ID)
		n.destroyAsync(h, "claim failed")
		return ClaimResult{}, cause
	}
	if err := n.store.putSandboxes(rec); err != nil {
		return undo(fmt.Errorf("recording the claim: %w", err))
	}
	if len(in.env) > 0 {
		if err := n.initAgent(ctx, h, in.env); err != nil {
			return undo(fmt.Errorf("applying env to the sandbox agent: %w", err))
		}
	}
	n.changed()
	return n.result(rec), nil
}

// initAgent posts env to the agent's /init. An agent without /init (404) is
// tolerated.
func (n *Node) initAgent(ctx context.Context, h vmm.Handle, env map[string]string) error {
	body, _ := json.Marshal(map[string]any{"envVars": env})
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+h.Addr+"/init", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Access-Token", h.Token)
	resp, err := agentHTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch {
	case resp.StatusCode/100 == 2:
		return nil
	case resp.StatusCode == http.StatusNotFound:
		n.log.V(2).Info("Agent has no /init; env not applied", "vm", h.ID)
		return nil
	}
	return fmt.Errorf("agent /init answered %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
}

var agentHTTP = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2, IdleConnTimeout: 30 * time.Second}}

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
	n.tab.remove(id)
	h := sb.rec.Handle
	n.mu.Unlock()
	sb.gone = true
	// Forget first, then destroy: a crash in between leaves an orphan that
	// the next start destroys, never a record without a VM.
	if err := n.store.deleteSandbox(id); err != nil {
		n.log.Error(err, "Deleting a sandbox record", "id", id)
	}
	if err := n.driver.Destroy(context.WithoutCancel(ctx), h); err != nil {
		n.log.Error(err, "Destroying a released sandbox", "id", id, "vm", h.ID)
	}
	n.changed()
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

// update applies mut to sb's record under the table lock and persists it.
func (n *Node) update(sb *sandbox, mut func(r *record)) (record, error) {
	n.mu.Lock()
	mut(&sb.rec)
	rec := sb.rec
	n.mu.Unlock()
	return rec, n.store.putSandboxes(rec)
}

func (n *Node) setHibernated(ctx context.Context, id string, hibernate bool) error {
	return n.withSandbox(id, func(sb *sandbox) error {
		n.mu.Lock()
		cur, h := sb.rec.Hibernated, sb.rec.Handle
		n.mu.Unlock()
		if cur == hibernate {
			return nil
		}
		var err error
		if hibernate {
			h, err = n.driver.Pause(ctx, h)
		} else {
			h, err = n.driver.Resume(ctx, h)
		}
		if err != nil {
			return err
		}
		if _, err := n.update(sb, func(r *record) { r.Handle, r.Hibernated = h, hibernate }); err != nil {
			return err
		}
		n.changed()
		return nil
	})
}

func (n *Node) renew(id string, ttl int64) (time.Time, error) {
	var dl time.Time
	err := n.withSandbox(id, func(sb *sandbox) error {
		dl = n.limits.Deadline(n.now(), ttl)
		_, err := n.update(sb, func(r *record) { r.Deadline = dl })
		n.changed()
		return err
	})
	return dl, err
}

func (n *Node) stats(ctx context.Context, id string) (Stats, error) {
	var out Stats
	err := n.withSandbox(id, func(sb *sandbox) error {
		n.mu.Lock()
		h, hib := sb.rec.Handle, sb.rec.Hibernated
		n.mu.Unlock()
		s, err := n.driver.Stats(ctx, h)
		if err != nil {
			return err
		}
		out = Stats{ID: id, Stats: s, Hibernated: hib}
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

// fork snapshots sandbox id into a scratch checkpoint and clones count
// children from it, all or nothing.
func (n *Node) fork(ctx context.Context, id string, count int, ttl int64) ([]ClaimResult, error) {
	scratch := filepath.Join(n.dirs.tmp, "fork-"+randHex(8))
	defer os.RemoveAll(scratch)
	var parent record
	err := n.withSandbox(id, func(sb *sandbox) error {
		n.mu.Lock()
		parent = sb.rec
		n.mu.Unlock()
		if parent.Hibernated {
			return errorf(http.StatusConflict, "sandbox %s is hibernated; wake it before forking", id)
		}
		return n.driver.Snapshot(ctx, parent.Handle, scratch)
	})
	if err != nil {
		return nil, err
	}
	ns := namespaceOf(parent.ClaimRef)
	recs, err := n.cloneN(ctx, scratch, parent.Key, count, ttl, func(childID string) string { return ns + "/" + childID }, "")
	if err != nil {
		return nil, err
	}
	out := make([]ClaimResult, len(recs))
	for i, r := range recs {
		out[i] = n.result(r)
	}
	return out, nil
}

// cloneN clones count new sandboxes from the checkpoint in dir, records
// them and returns their records; on any failure it destroys what it made.
func (n *Node) cloneN(ctx context.Context, dir string, k pool.Key, count int, ttl int64, refOf func(id string) string, fromCk string) ([]record, error) {
	handles := make([]vmm.Handle, count)
	errs := make([]error, count)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := 0; i < count; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			handles[i], errs[i] = n.driver.Clone(ctx, dir, vmm.Spec{ID: "vm-" + randHex(8), Template: k.Template, Net: k.Net, Size: k.Size, Token: newToken()})
		}(i)
	}
	wg.Wait()
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
		r := record{ID: id, Key: k, Handle: h, Deadline: n.limits.Deadline(now, ttl), ClaimedAt: now.Truncate(time.Second), Checkpoint: fromCk}
		if refOf != nil {
			r.ClaimRef = refOf(id)
		}
		recs[i] = r
		n.tab.insert(&sandbox{rec: r})
	}
	n.mu.Unlock()
	if err := n.store.putSandboxes(recs...); err != nil {
		n.mu.Lock()
		for _, r := range recs {
			if sb := n.tab.remove(r.ID); sb != nil {
				sb.gone = true
			}
		}
		n.mu.Unlock()
		for _, h := range handles {
			n.destroyAsync(h, "recording clones failed")
		}
		return nil, fmt.Errorf("recording clones: %w", err)
	}
	n.changed()
	return recs, nil
}

// checkpoint snapshots sandbox id into a named checkpoint; the source keeps running.
func (n *Node) checkpoint(ctx context.Context, id, name string) (Checkpoint, error) {
	var ck ckRecord
	err := n.withSandbox(id, func(sb *sandbox) error {
		n.mu.Lock()
		src := sb.rec
		n.mu.Unlock()
		ckID := "ck_" + randHex(8)
		ck = ckRecord{
			Checkpoint: Checkpoint{ID: ckID, Name: name, SandboxID: id,
				Key:       Key{Template: src.Key.Template, Net: src.Key.Net, Size: src.Key.Size},
				CreatedAt: n.now().UTC(), Node: n.cfg.Name},
			Dir: filepath.Join(n.dirs.checkpoints, ckID),
		}
		if err := n.driver.Snapshot(ctx, src.Handle, ck.Dir); err != nil {
			return err
		}
		if err := n.store.putCheckpoint(ck); err != nil {
			_ = os.RemoveAll(ck.Dir)
			return err
		}
		n.mu.Lock()
		n.tab.checkpoints[ckID] = &checkpoint{rec: ck}
		n.mu.Unlock()
		return nil
	})
	return ck.Checkpoint, err
}

// checkpoints lists the checkpoints, newest first.
func (n *Node) checkpointList() []Checkpoint {
	n.mu.Lock()
	out := make([]Checkpoint, 0, len(n.tab.checkpoints))
	for _, c := range n.tab.checkpoints {
		out = append(out, c.rec.Checkpoint)
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

func (n *Node) deleteCheckpoint(id string) error {
	n.mu.Lock()
	c := n.tab.checkpoints[id]
	n.mu.Unlock()
	if c == nil {
		return errorf(http.StatusNotFound, "checkpoint not found")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return errorf(http.StatusNotFound, "checkpoint not found")
	}
	c.gone = true
	n.mu.Lock()
	delete(n.tab.checkpoints, id)
	n.mu.Unlock()
	if err := n.store.deleteCheckpoint(id); err != nil {
		return err
	}
	return os.RemoveAll(c.rec.Dir)
}

// branch claims a new sandbox cloned from checkpoint id; it has no claim ref.
func (n *Node) branch(ctx context.Context, id string, ttl int64) (ClaimResult, error) {
	n.mu.Lock()
	c := n.tab.checkpoints[id]
	n.mu.Unlock()
	if c == nil {
		return ClaimResult{}, errorf(http.StatusNotFound, "checkpoint not found")
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.gone {
		return ClaimResult{}, errorf(http.StatusNotFound, "checkpoint not found")
	}
	k := pool.Key{Template: c.rec.Checkpoint.Key.Template, Net: c.rec.Checkpoint.Key.Net, Size: c.rec.Checkpoint.Key.Size}
	recs, err := n.cloneN(ctx, c.rec.Dir, k, 1, ttl, nil, id)
	if err != nil {
		return ClaimResult{}, err
	}
	return n.result(recs[0]), nil
}

// setPools replaces the warm targets; pools left out drain.
func (n *Node) setPools(ts []poolTarget) (Info, error) {
	n.mu.Lock()
	want := make(map[pool.Key]int32, len(ts))
	for _, t := range ts {
		want[pool.Key{Template: t.Template, Net: t.Net, Size: t.Size}] = t.Warm
	}
	for k, p := range n.tab.pools {
		if _, ok := want[k]; !ok {
			p.target = 0
		}
	}
	for k, w := range want {
		n.tab.pool(k, true).target = w
	}
	n.mu.Unlock()
	if err := n.store.putPools(ts); err != nil {
		return Info{}, err
	}
	n.kickRefill()
	return n.info(), nil
}

// info is the body of GET /v1/info.
func (n *Node) info() Info {
	accel := ""
	if a, ok := n.driver.(interface{ Accel() string }); ok {
		accel = a.Accel()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	out := Info{Node: n.cfg.Name, Address: n.cfg.AdvertiseAddress, VMM: n.driver.Name(), Accel: accel, Pools: []PoolInfo{}}
	for _, p := range n.tab.sortedPools() {
		out.Pools = append(out.Pools, PoolInfo{Template: p.key.Template, Net: p.key.Net, Size: p.key.Size,
			Warm: int32(len(p.warm)), Target: p.target, Refilling: p.booting})
	}
	for _, sb := range n.tab.byID {
		out.Claimed++
		if sb.rec.Hibernated {
			out.Hibernated++
		}
	}
	return out
}
