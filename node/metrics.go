package node

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the node's Prometheus metrics, in a private registry (so
// several nodes can live in one process).
type metrics struct {
	reg             *prometheus.Registry
	claims          *prometheus.CounterVec
	claimSeconds    prometheus.Histogram
	boots           prometheus.Counter
	bootFailures    prometheus.Counter
	bootSeconds     prometheus.Histogram
	reaped          prometheus.Counter
	publishFailures prometheus.Counter
	warmEvictions   prometheus.Counter
	probeErrors     prometheus.Counter
	restores        *prometheus.CounterVec
	// opens counts the held sandboxes opened after their claim was
	// answered (open.go), by result.
	opens *prometheus.CounterVec
	// watchDrift counts the events the change stream's consistency check
	// appended: changes some mutation failed to publish (zero unless a bug).
	watchDrift        prometheus.Counter
	watchCheckSeconds prometheus.Histogram
	// requests counts every request the node's API answered, by route
	// pattern ("" for one no route matched) and status code: what a
	// caller's traffic costs the node (the attack suite counts node calls
	// with it).
	requests *prometheus.CounterVec
	// quotaRefusals counts the 429s of Quota, by bound (quotarefusals.go).
	quotaRefusals *prometheus.CounterVec
}

var (
	poolLabels = []string{"template", "net", "size"}
	descWarm   = prometheus.NewDesc("hearth_node_pool_warm", "Warm microVMs ready to be claimed, per pool.", poolLabels, nil)
	descTarget = prometheus.NewDesc("hearth_node_pool_target", "Warm target, per pool.", poolLabels, nil)
	descRefill = prometheus.NewDesc("hearth_node_pool_refilling", "Boots in flight, per pool.", poolLabels, nil)
	descClaims = prometheus.NewDesc("hearth_node_sandboxes", "Claimed sandboxes, by phase.", []string{"phase"}, nil)
)

func newMetrics(n *Node) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hearth_node_claims_total", Help: "Claims by result (delivered, no_capacity, invalid, error).",
		}, []string{"result"}),
		claimSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "hearth_node_claim_duration_seconds", Help: "Time to answer a claim.",
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16),
		}),
		boots:        prometheus.NewCounter(prometheus.CounterOpts{Name: "hearth_node_boots_total", Help: "Boots and clones that produced a VM (golden boots included)."}),
		bootFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "hearth_node_boot_failures_total", Help: "Warm VM boots that failed."}),
		bootSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "hearth_node_boot_duration_seconds", Help: "Time to make one warm VM.",
			Buckets: prometheus.ExponentialBuckets(1e-3, 2, 15),
		}),
		reaped:          prometheus.NewCounter(prometheus.CounterOpts{Name: "hearth_node_leases_reaped_total", Help: "Sandboxes destroyed at their lease deadline."}),
		publishFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "hearth_node_inventory_publish_failures_total", Help: "Failed inventory publishes."}),
		warmEvictions: prometheus.NewCounter(prometheus.CounterOpts{Name: "hearth_node_warm_evictions_total",
			Help: "Warm VMs the health sweep evicted (agent unhealthy twice in a row, or VM gone)."}),
		probeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "hearth_node_health_probe_errors_total",
			Help: "Health probes that proved nothing (the node's resource exhaustion, timeouts); never counted against a VM."}),
		restores: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hearth_node_sandbox_restores_total",
			Help: "Claimed sandboxes whose agent died that the health sweep restored (Driver.Restore), by result (ok, failed)."},
			[]string{"result"}),
	}
	m.watchDrift = prometheus.NewCounter(prometheus.CounterOpts{Name: "hearth_node_watch_drift_total",
		Help: "Change stream events the periodic consistency check appended: changes a mutation failed to publish (zero unless there is a bug)."})
	m.watchCheckSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "hearth_node_watch_check_duration_seconds",
		Help:    "Time of one consistency check of the change stream (the whole claim table against the stream, once a minute).",
		Buckets: prometheus.ExponentialBuckets(1e-4, 2, 14)})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hearth_node_http_requests_total",
		Help: "Requests the node's API answered, by route pattern and status code."}, []string{"route", "code"})
	m.quotaRefusals = newQuotaRefusals()
	m.opens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hearth_node_claim_opens_total",
		Help: "Claimed sandboxes of a held lane whose egress policy the node enforced and whose agent it opened after answering the claim, by result (ok; failed: the sandbox was removed)."},
		[]string{"result"})
	for _, l := range []string{"ok", "failed"} {
		m.restores.WithLabelValues(l)
		m.opens.WithLabelValues(l)
	}
	for _, l := range []string{"delivered", "no_capacity", "invalid", "error"} {
		m.claims.WithLabelValues(l)
	}
	m.reg.MustRegister(m.claims, m.claimSeconds, m.boots, m.bootFailures, m.bootSeconds, m.reaped, m.publishFailures, m.warmEvictions, m.probeErrors, m.restores, m.requests,
		m.opens, m.watchDrift, m.watchCheckSeconds, m.quotaRefusals,
		tableCollector{n}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// tableCollector reads the pool and claim gauges from the table at scrape
// time, so a drained pool's series disappear with it.
type tableCollector struct{ n *Node }

func (c tableCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descWarm
	ch <- descTarget
	ch <- descRefill
	ch <- descClaims
}

func (c tableCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	n.mu.Lock()
	defer n.mu.Unlock()
	for k, p := range n.tab.pools {
		ch <- prometheus.MustNewConstMetric(descWarm, prometheus.GaugeValue, float64(len(p.warm)), k.Template, k.Net, k.Size)
		ch <- prometheus.MustNewConstMetric(descTarget, prometheus.GaugeValue, float64(p.target), k.Template, k.Net, k.Size)
		ch <- prometheus.MustNewConstMetric(descRefill, prometheus.GaugeValue, float64(p.booting), k.Template, k.Net, k.Size)
	}
	var running, paused int
	for _, sb := range n.tab.byID {
		if sb.rec.Paused {
			paused++
		} else {
			running++
		}
	}
	ch <- prometheus.MustNewConstMetric(descClaims, prometheus.GaugeValue, float64(running), "running")
	ch <- prometheus.MustNewConstMetric(descClaims, prometheus.GaugeValue, float64(paused), "paused")
}
