package tracing

import (
	"context"
	"net"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// receiver is an in-process OTLP/gRPC trace collector.
type receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu       sync.Mutex
	services []string
	spans    []string
}

func (r *receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				r.services = append(r.services, a.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, s.GetName())
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// --tracing-endpoint's provider exports over OTLP/gRPC to the collector
// named, as the binary's service; Shutdown flushes what is batched.
func TestProvider_ExportsOverOTLPToTheEndpoint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv := &receiver{}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, rcv)
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()

	o := NewOptions()
	o.Endpoint = ln.Addr().String()
	tp, err := o.Provider(context.Background(), "sandboxd")
	if err != nil || tp == nil {
		t.Fatalf("Provider: %v, %v", tp, err)
	}
	_, span := tp.Tracer(Module+"test").Start(context.Background(), "claim")
	span.End()
	Shutdown(context.Background(), tp)
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.spans) != 1 || rcv.spans[0] != "claim" || len(rcv.services) == 0 || rcv.services[0] != "sandboxd" {
		t.Errorf("the collector got spans %q of services %q; want [claim] of sandboxd", rcv.spans, rcv.services)
	}
}
