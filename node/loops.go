package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/vmm"
)

// refillLoop reconciles the warm pools on every change and every tick.
func (n *Node) refillLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.RefillInterval)
	defer t.Stop()
	for {
		n.reconcile(ctx)
		select {
		case <-ctx.Done():
			return
		case <-n.refillCh:
		case <-t.C:
		}
	}
}

// reconcile starts the boots planBoots asks for, destroys surplus warm VMs
// and forgets drained pools.
func (n *Node) reconcile(ctx context.Context) {
	now := n.now()
	var (
		boots   []pool.Key
		destroy []vmm.Handle
		goldens []string
	)
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	pools := n.tab.sortedPools()
	views := make([]poolView, len(pools))
	for i, p := range pools {
		views[i] = viewOf(p, now)
	}
	boots = planBoots(views, n.cfg.MaxBootConcurrency-n.inflight)
	for _, k := range boots {
		n.tab.pools[k].booting++
		n.inflight++
	}
	for i, p := range pools {
		for s := surplus(views[i]); s > 0; s-- {
			h, _ := n.tab.take(p.key)
			destroy = append(destroy, h)
		}
		if drained(viewOf(p, now)) {
			n.tab.dropPool(p.key)
			if p.golden != "" {
				goldens = append(goldens, p.golden)
			}
		}
	}
	n.mu.Unlock()

	for _, k := range boots {
		k := k
		if !n.goBG(func() { n.bootOne(ctx, k) }) {
			n.bootDone(k, vmm.Handle{}, errors.New("node closing"))
		}
	}
	for _, h := range destroy {
		n.destroyAsync(h, "surplus warm VM")
	}
	for _, g := range goldens {
		_ = os.RemoveAll(g)
	}
}

func viewOf(p *poolState, now time.Time) poolView {
	return poolView{Key: p.key, Target: p.target, Warm: int32(len(p.warm)), Booting: p.booting,
		GoldenReady: p.golden != "", Blocked: now.Before(p.retryAt)}
}

func (n *Node) destroyAsync(h vmm.Handle, why string) {
	run := func(ctx context.Context) {
		if err := n.driver.Destroy(ctx, h); err != nil {
			n.log.Error(err, "Destroying VM", "vm", h.ID, "reason", why)
		}
	}
	if !n.goBG(func() { run(context.WithoutCancel(n.ctx)) }) {
		run(context.Background())
	}
}

// bootOne makes one warm VM for k: it builds the pool's golden checkpoint
// first if there is none, then clones from it.
func (n *Node) bootOne(ctx context.Context, k pool.Key) {
	start := time.Now()
	n.mu.Lock()
	golden := ""
	var pol *egress.Policy
	if p := n.tab.pools[k]; p != nil {
		golden, pol = p.golden, p.egress
	}
	n.mu.Unlock()
	if golden == "" {
		var err error
		if golden, err = n.buildGolden(ctx, k); err != nil {
			n.bootDone(k, vmm.Handle{}, err)
			return
		}
	}
	h, err := n.driver.Clone(ctx, golden, vmm.Spec{ID: "vm-" + randHex(8), Template: k.Template, Net: k.Net, Size: k.Size, Token: newToken(), Egress: pol, Hold: n.holds(k.Net)})
	if err == nil {
		n.metrics.bootSeconds.Observe(time.Since(start).Seconds())
		n.mu.Lock()
		changed := n.tab.pools[k] != nil && !samePolicy(n.tab.pools[k].egress, pol)
		n.mu.Unlock()
		if changed {
			// The pool's policy changed while it booted: never hand it out.
			n.destroyAsync(h, "the pool's egress policy changed")
			h, err = vmm.Handle{}, errors.New("the pool's egress policy changed during the boot")
		}
	}
	if errors.Is(err, vmm.ErrSnapshotInvalid) {
		n.mu.Lock()
		if p := n.tab.pools[k]; p != nil && p.golden == golden {
			p.golden = ""
		}
		n.mu.Unlock()
		_ = os.RemoveAll(golden)
	}
	n.bootDone(k, h, err)
}

// buildGolden boots the pool's golden VM, snapshots it to
// <data-dir>/golden/<keyhash> and destroys it.
func (n *Node) buildGolden(ctx context.Context, k pool.Key) (string, error) {
	dir := filepath.Join(n.dirs.golden, keyHash(k))
	_ = os.RemoveAll(dir)
	// Held (its clones' agents start from its memory held where the
	// driver clones memory), never opened.
	h, err := n.driver.Boot(ctx, vmm.Spec{ID: "golden-" + randHex(8), Template: k.Template, Net: k.Net, Size: k.Size, Token: newToken(), Hold: n.holds(k.Net)})
	if err != nil {
		return "", err
	}
	n.metrics.boots.Inc()
	err = n.driver.Snapshot(ctx, h, dir)
	if derr := n.driver.Destroy(context.WithoutCancel(ctx), h); derr != nil {
		n.log.Error(derr, "Destroying the golden VM", "vm", h.ID)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	n.mu.Lock()
	if p := n.tab.pools[k]; p != nil {
		p.golden = dir
	}
	n.mu.Unlock()
	n.log.V(2).Info("Golden checkpoint ready", "key", k.String(), "dir", dir)
	return dir, nil
}

// bootDone accounts for a finished boot: the VM joins the warm pool, or is
// destroyed when the pool no longer wants it or the node is closing.
func (n *Node) bootDone(k pool.Key, h vmm.Handle, err error) {
	n.mu.Lock()
	n.inflight--
	p := n.tab.pools[k]
	keep := false
	if p != nil {
		p.booting--
		n.tab.bootDone(p, err, n.now())
		if err == nil {
			if !n.closed && int32(len(p.warm)) < p.target {
				n.tab.addWarm(p, h)
				keep = true
			}
		}
	}
	n.mu.Unlock()
	if err != nil {
		n.metrics.bootFailures.Inc()
		if !errors.Is(err, context.Canceled) {
			n.log.Error(err, "Warm VM boot failed", "key", k.String())
		}
	} else {
		n.metrics.boots.Inc()
		if !keep {
			n.destroyAsync(h, "not wanted after boot")
		}
	}
	n.kickRefill()
}

func keyHash(k pool.Key) string {
	s := sha256.Sum256([]byte(k.Template + "\x00" + k.Net + "\x00" + k.Size))
	return hex.EncodeToString(s[:8])
}

// reapLoop destroys sandboxes whose lease has expired.
func (n *Node) reapLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.mu.Lock()
		ids := n.tab.expired(n.now())
		n.mu.Unlock()
		for _, id := range ids {
			if ctx.Err() != nil {
				return
			}
			if n.pauseAtTimeout(ctx, id) {
				continue
			}
			if n.remove(ctx, id, true) == nil {
				n.metrics.reaped.Inc()
				n.log.V(1).Info("Lease expired; sandbox destroyed", "id", id)
			}
		}
	}
}

// publishLoop publishes the inventory every InventoryInterval (changes
// reach the API servers through the change stream, GET /v1/watch; the
// object is membership and the fallback). A failed publish is logged and
// retried at the next tick.
func (n *Node) publishLoop(ctx context.Context) {
	if n.cfg.Publisher == nil {
		<-ctx.Done()
		return
	}
	tick := time.NewTicker(n.cfg.InventoryInterval)
	defer tick.Stop()
	publish := func() {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := n.cfg.Publisher.Publish(pctx, n.Inventory()); err != nil {
			n.metrics.publishFailures.Inc()
			n.log.Error(err, "Publishing the node inventory failed; retrying later")
		}
	}
	publish()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			publish()
		}
	}
}
