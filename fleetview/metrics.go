package fleetview

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Metrics on the API server's /metrics (the legacy registry).
var (
	streamsDown = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "hearth", Subsystem: "fleetview", Name: "nodes_stream_down",
		Help:           "Nodes whose change stream is down: the view serves their published NodeInventory (or the stream's last word until a newer publish).",
		StabilityLevel: metrics.ALPHA,
	})
	nodesKnown = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "hearth", Subsystem: "fleetview", Name: "nodes",
		Help:           "Nodes the live fleet view knows (from their NodeInventory).",
		StabilityLevel: metrics.ALPHA,
	})
	resyncs = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "hearth", Subsystem: "fleetview", Name: "stream_reconnects_total",
		Help:           "Node change streams reopened (after an error, or to resync with a SNAPSHOT).",
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(streamsDown, nodesKnown, resyncs) })
}
