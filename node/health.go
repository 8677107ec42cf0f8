package node

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/vmm"
)

// The warm-pool health sweep. A warm VM whose agent died after its boot
// would otherwise sit in its pool until a claim delivered it. Every
// Config.WarmCheckInterval the sweep copies the warm handles under the node
// mutex, probes each agent (GET http://<Addr>/health) without holding it,
// and evicts a VM that failed warmEvictStrikes sweeps in a row, or whose
// driver reports it not running, from its pool under the mutex again: only
// if it is still warm (a claim may have taken it meanwhile; then it is the
// claim's). Warm VMs stay claimable while they are probed, so claims keep
// their O(1), I/O-free path. Evicted VMs are destroyed in the background and
// the refill loop replaces them.
const (
	// DefaultWarmCheckInterval is the sweep cadence when
	// Config.WarmCheckInterval is zero.
	DefaultWarmCheckInterval = 10 * time.Second
	// warmProbeTimeout bounds one agent probe (and one driver check).
	warmProbeTimeout = 2 * time.Second
	// warmProbeConcurrency bounds the probes in flight per sweep.
	warmProbeConcurrency = 8
	// warmEvictStrikes is how many failed probes in a row evict a VM.
	warmEvictStrikes = 2
)

// warmProbe is the outcome of probing one warm VM.
type warmProbe struct {
	ID string
	// OK is true when the agent answered /health with a 2xx.
	OK bool
	// Gone is true when the driver reports the VM not running.
	Gone bool
}

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
		s := strikes[p.ID] + 1
		if p.Gone || s >= warmEvictStrikes {
			evict = append(evict, p.ID)
			continue
		}
		next[p.ID] = s
	}
	return evict, next
}

// warmCheckLoop runs the sweep every WarmCheckInterval until ctx ends.
func (n *Node) warmCheckLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.WarmCheckInterval)
	defer t.Stop()
	strikes := map[string]int{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		strikes = n.sweepWarm(ctx, strikes)
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
	var wg sync.WaitGroup
	sem := make(chan struct{}, warmProbeConcurrency)
	for i, h := range hs {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int, h vmm.Handle) {
			defer func() { <-sem; wg.Done() }()
			probes[i] = n.probeWarm(ctx, h)
		}(i, h)
	}
	wg.Wait()
	if ctx.Err() != nil {
		// Probes cut short by shutdown prove nothing.
		return strikes
	}

	type victim struct {
		h   vmm.Handle
		key pool.Key
	}
	var victims []victim
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
		for _, p := range n.tab.sortedPools() {
			kept := p.warm[:0]
			for _, h := range p.warm {
				if gone[h.ID] {
					victims = append(victims, victim{h: h, key: p.key})
					continue
				}
				kept = append(kept, h)
			}
			for i := len(kept); i < len(p.warm); i++ {
				p.warm[i] = vmm.Handle{}
			}
			p.warm = kept
		}
	}
	n.mu.Unlock()

	if len(victims) == 0 {
		return next
	}
	reasons := make(map[string]bool, len(probes))
	for _, p := range probes {
		reasons[p.ID] = p.Gone
	}
	sort.Slice(victims, func(i, j int) bool { return victims[i].h.ID < victims[j].h.ID })
	for _, v := range victims {
		why := "agent failed its health check twice in a row"
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
// the driver whether the VM still runs.
func (n *Node) probeWarm(ctx context.Context, h vmm.Handle) warmProbe {
	pr := warmProbe{ID: h.ID}
	pctx, cancel := context.WithTimeout(ctx, warmProbeTimeout)
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, "http://"+h.Addr+"/health", nil)
	if err == nil {
		if resp, err := n.probeClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
			resp.Body.Close()
			pr.OK = resp.StatusCode >= 200 && resp.StatusCode < 300
		}
	}
	cancel()
	if pr.OK || ctx.Err() != nil {
		return pr
	}
	sctx, cancel := context.WithTimeout(ctx, warmProbeTimeout)
	defer cancel()
	if _, err := n.driver.Stats(sctx, h); errors.Is(err, vmm.ErrNotRunning) {
		pr.Gone = true
	}
	return pr
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
