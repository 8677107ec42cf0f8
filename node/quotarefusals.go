package node

import (
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// The bounds of Quota, as hearth_node_quota_refusals_total names them
// (label "limit"): one per flag.
const (
	limitForkDepth     = "fork_depth"     // --max-fork-depth
	limitForkChildren  = "fork_children"  // --max-fork-children
	limitExtraVMs      = "extra_vms"      // --max-extra-vms
	limitSnapshotBytes = "snapshot_bytes" // --max-snapshot-bytes
)

var quotaLimits = []string{limitForkDepth, limitForkChildren, limitExtraVMs, limitSnapshotBytes}

// quotaRefusal is a request refused by a bound of Quota: a 429 (its
// apiError) naming the bound it reached.
type quotaRefusal struct {
	limit string
	err   error
}

func (e *quotaRefusal) Error() string { return e.err.Error() }
func (e *quotaRefusal) Unwrap() error { return e.err }

// refuse is the 429 of a request over limit.
func refuse(limit, format string, args ...any) error {
	return &quotaRefusal{limit: limit, err: errorf(http.StatusTooManyRequests, format, args...)}
}

func newQuotaRefusals() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hearth_node_quota_refusals_total",
		Help: "Requests refused with 429 by a bound of the node's quota, by limit (fork_depth, fork_children, extra_vms, snapshot_bytes)."},
		[]string{"limit"})
	for _, l := range quotaLimits {
		c.WithLabelValues(l)
	}
	return c
}

// counted counts err in hearth_node_quota_refusals_total when it is a
// quota refusal, and returns it.
func (n *Node) counted(err error) error {
	var qr *quotaRefusal
	if errors.As(err, &qr) {
		n.metrics.quotaRefusals.WithLabelValues(qr.limit).Inc()
	}
	return err
}
