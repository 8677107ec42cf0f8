package e2b

import (
	"context"
	"net/http"
	"time"
)

// e2b's own lease bounds, when neither Config nor any node gives one: a
// create's default timeout and the largest (24 hours).
const (
	e2bDefaultTimeoutSeconds = 300
	e2bMaxTimeoutSeconds     = 24 * 60 * 60
)

// leaseBoundsTTL is how long the nodes' lease bounds are kept before they
// are asked again.
const leaseBoundsTTL = time.Minute

// leaseBounds are the default and the largest timeout a create, fork,
// connect or setTimeout may ask: Config's where set, else the nodes'
// (Fleet.LeaseBounds, the strictest node's, asked at most once per
// leaseBoundsTTL), else e2b's; the default never exceeds the largest.
func (g *gateway) leaseBounds(ctx context.Context) (def, max int64) {
	def, max = g.cfg.DefaultTimeoutSeconds, g.cfg.MaxTimeoutSeconds
	if def <= 0 || max <= 0 {
		nd, nm := g.nodeLeaseBounds(ctx)
		if def <= 0 {
			def = nd
		}
		if max <= 0 {
			max = nm
		}
	}
	if max <= 0 {
		max = e2bMaxTimeoutSeconds
	}
	if def <= 0 {
		def = e2bDefaultTimeoutSeconds
	}
	return min(def, max), max
}

// nodeLeaseBounds is Fleet.LeaseBounds, kept for leaseBoundsTTL.
func (g *gateway) nodeLeaseBounds(ctx context.Context) (def, max int64) {
	g.leaseMu.Lock()
	fresh := !g.leaseAt.IsZero() && time.Since(g.leaseAt) < leaseBoundsTTL
	def, max = g.leaseDef, g.leaseMax
	g.leaseMu.Unlock()
	if fresh {
		return def, max
	}
	def, max, _ = g.fleet.LeaseBounds(ctx)
	g.leaseMu.Lock()
	g.leaseDef, g.leaseMax, g.leaseAt = def, max, time.Now()
	g.leaseMu.Unlock()
	return def, max
}

// leaseSeconds is the lease a create or fork asks for: timeout when it is
// positive, else the default (leaseBounds); ok is false for a negative
// timeout.
func (g *gateway) leaseSeconds(ctx context.Context, timeout *int64) (ttl int64, ok bool) {
	if timeout == nil || *timeout == 0 {
		def, _ := g.leaseBounds(ctx)
		return def, true
	}
	return *timeout, *timeout > 0
}

// tooLong answers 400 when an asked timeout exceeds the largest
// (leaseBounds; like e2b, rather than the node clamping it silently) and
// reports whether it did.
func (g *gateway) tooLong(w http.ResponseWriter, r *http.Request, timeout *int64) bool {
	if timeout == nil {
		return false
	}
	if _, max := g.leaseBounds(r.Context()); *timeout > max {
		writeError(w, http.StatusBadRequest, "timeout cannot be greater than %d seconds (the nodes' longest lease), got %d", max, *timeout)
		return true
	}
	return false
}
