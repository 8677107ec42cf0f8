package node

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/hearthvm/hearth/nodeapi"
)

// CPU rate: GET /v1/sandboxes/{id}/stats answers, beside the CPU time a
// sandbox's VM used since it started (nodeapi.Stats.CPUSeconds), the CPU
// it used per second in cores (CPURateCores), averaged over the window
// since an earlier measurement of the same VM — the newest one at least
// cpuRateMinWindow old, if it is at most cpuRateMaxWindow old. The node
// keeps, per sandbox measured in the last minute, the last two
// measurements at least cpuRateMinWindow apart, in memory only: a claim
// costs nothing; a request without a usable earlier one (the first, or one
// after a minute) answers no rate, and the same request a second later
// does (kubectl sandbox top asks again). Any caller's measurement counts
// (the e2b API's too).

const (
	cpuRateMinWindow = time.Second
	cpuRateMaxWindow = time.Minute
)

// cpuSample is one measurement of a sandbox's CPU time: VM names the
// process measured (its counter restarts with a new one).
type cpuSample struct {
	VM         string
	CPUSeconds float64
	At         time.Time
}

// planCPURate is the rate of cur against the samples kept before it
// (oldest first), free of I/O: ok is false without a sample of the same VM
// at least cpuRateMinWindow and at most cpuRateMaxWindow before cur, of
// no more CPU time. next is what to keep: the usable samples and cur when
// it is at least cpuRateMinWindow after the newest of them, at most two.
func planCPURate(prev []cpuSample, cur cpuSample) (cores float64, window time.Duration, ok bool, next []cpuSample) {
	for _, p := range prev {
		age := cur.At.Sub(p.At)
		if p.VM != cur.VM || p.CPUSeconds > cur.CPUSeconds || age < 0 || age > cpuRateMaxWindow {
			continue
		}
		next = append(next, p)
	}
	for i := len(next) - 1; i >= 0; i-- {
		if w := cur.At.Sub(next[i].At); w >= cpuRateMinWindow {
			cores, window, ok = (cur.CPUSeconds-next[i].CPUSeconds)/w.Seconds(), w, true
			break
		}
	}
	if len(next) == 0 || cur.At.Sub(next[len(next)-1].At) >= cpuRateMinWindow {
		next = append(next, cur)
	}
	if len(next) > 2 {
		next = next[len(next)-2:]
	}
	return cores, window, ok, next
}

// cpuRates holds the samples of the sandboxes measured lately; the zero
// value is ready.
type cpuRates struct {
	mu      sync.Mutex
	samples map[string][]cpuSample
	pruned  time.Time
}

// rate records cur for sandbox id and returns its rate (planCPURate).
// Sandboxes whose newest sample is older than cpuRateMaxWindow are
// forgotten, at most once a cpuRateMaxWindow.
func (c *cpuRates) rate(id string, cur cpuSample) (float64, time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.samples == nil {
		c.samples = map[string][]cpuSample{}
	}
	if cur.At.Sub(c.pruned) > cpuRateMaxWindow {
		for k, s := range c.samples {
			if cur.At.Sub(s[len(s)-1].At) > cpuRateMaxWindow {
				delete(c.samples, k)
			}
		}
		c.pruned = cur.At
	}
	cores, window, ok, next := planCPURate(c.samples[id], cur)
	c.samples[id] = next
	return cores, window, ok
}

// statsWithRate is stats with the CPU rate of a running sandbox whose CPU
// time is measured.
func (n *Node) statsWithRate(ctx context.Context, id string) (nodeapi.Stats, error) {
	s, err := n.stats(ctx, id)
	if err != nil || s.Paused || s.CPUSeconds <= 0 {
		return s, err
	}
	sb := n.lookup(id)
	if sb == nil {
		return s, nil
	}
	n.mu.Lock()
	vm := sb.rec.Handle.ID + "/" + strconv.Itoa(sb.rec.Handle.PID)
	n.mu.Unlock()
	at := s.MeasuredAt
	if at.IsZero() {
		at = n.now()
	}
	if cores, window, ok := n.cpuRates.rate(id, cpuSample{VM: vm, CPUSeconds: s.CPUSeconds, At: at}); ok {
		s.CPURateCores, s.CPURateWindowSeconds = &cores, window.Seconds()
	}
	return s, nil
}
