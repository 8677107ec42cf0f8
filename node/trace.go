package node

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"

	"github.com/hearthvm/hearth/internal/tracing"
	"github.com/hearthvm/hearth/vmm"
)

// scope is the node's instrumentation scope.
const scope = tracing.Module + "node"

// traced is h under a server span per request when Config.TracerProvider
// is set (package internal/tracing), h itself when not. A root caller's
// trace (the fleet's: its traceparent header) is continued; any other
// caller's — a sandbox's own token, or none — starts a new trace linked
// to it, so no tenant places spans in the fleet's traces or decides what
// is sampled.
//
// The change stream (one request for as long as a fleet follows the
// node), /healthz and /metrics are not traced, nor the warm-pool driver's
// and publishers' rounds (/v1/pools, /v1/info) unless they carry a trace:
// each would be a trace of its own every few seconds.
func (n *Node) traced(h http.Handler) http.Handler {
	if tracing.Off(n.cfg.TracerProvider) {
		return h
	}
	t := tracing.Handler(h, n.cfg.TracerProvider, "sandboxd", func(r *http.Request) bool {
		p, ok := n.authenticate(r)
		return !ok || !p.root
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/watch", "/healthz", "/metrics":
			h.ServeHTTP(w, r)
		case "/v1/pools", "/v1/info":
			if r.Header.Get("traceparent") == "" {
				h.ServeHTTP(w, r)
				return
			}
			t.ServeHTTP(w, r)
		default:
			t.ServeHTTP(w, r)
		}
	})
}

// driverCall runs f, one call of the driver on h, in a span "vmm.<op>"
// under ctx's: free when ctx's span records nothing (tracing off).
func (n *Node) driverCall(ctx context.Context, op string, h vmm.Handle, f func(ctx context.Context) error) error {
	ctx, span := tracing.Start(ctx, scope, "vmm."+op, attribute.String("vmm.backend", n.driver.Name()), attribute.String("vmm.id", h.ID))
	err := f(ctx)
	tracing.End(span, err)
	return err
}
