package node

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hearthvm/hearth/internal/tracing"
	"github.com/hearthvm/hearth/nodeapi"
)

// BenchmarkClaim_HTTPTracing is BenchmarkClaim_HTTP (store fsync off) with tracing off (no
// provider: the handler is not wrapped) and on (the node's server span
// and its caller's client span, every trace sampled, batched into an
// in-memory exporter).
func BenchmarkClaim_HTTPTracing(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("tracing=%v", on), func(b *testing.B) {
			nd := benchNodeSync(b, b.N, true) // no fsync: the CPU of the path, not the disk's latency
			hc := nodeapi.DefaultHTTPClient
			if on {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewInMemoryExporter()), sdktrace.WithSampler(sdktrace.AlwaysSample()))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				nd.cfg.TracerProvider = tp
				hc = tracing.Client(hc, tp, "sandboxd")
			}
			srv := httptest.NewServer(nd.Handler())
			defer srv.Close()
			c := &nodeapi.Client{Addr: srv.URL, Token: testRoot, HTTP: hc}
			ctx := context.Background()
			ins := benchClaims(b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Claim(ctx, nodeapi.ClaimRequest{Template: "img", ClaimRef: ins[i].ref}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
