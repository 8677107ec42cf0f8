package server_test

import (
	"context"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	componenttracing "k8s.io/component-base/tracing"
)

// BenchmarkCreate_Tracing is a client-go Create (a claim through the API
// server, its fleet and a node over loopback) with tracing off (no
// provider: nothing wrapped) and on (every trace sampled, batched into an
// in-memory exporter: the SDK's whole cost but the network).
func BenchmarkCreate_Tracing(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("tracing=%v", on), func(b *testing.B) {
			var tp *sdktrace.TracerProvider
			if on {
				tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewInMemoryExporter()), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			}
			s := startSystem(b, tp, int32(b.N+1))
			rc := &rest.Config{Host: s.api, BearerToken: "admin", TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: -1}
			if on {
				rc.Wrap(componenttracing.WrapperFor(tp))
			}
			sandboxes := dynamic.NewForConfigOrDie(rc).Resource(sandboxesGVR).Namespace("default")
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				sb := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "metadata": map[string]any{"name": fmt.Sprintf("b-%d", i)},
					"spec": map[string]any{"podTemplate": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{
						"name": "main", "image": traceImage}}}}},
				}}
				if _, err := sandboxes.Create(ctx, sb, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
