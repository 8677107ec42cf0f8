package tracing

import (
	"context"
	"flag"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"
	componenttracing "k8s.io/component-base/tracing"
)

func TestOptions_Validate(t *testing.T) {
	for _, tc := range []struct {
		endpoint string
		rate     int32
		err      string
	}{
		{"", 1_000_000, ""},
		{"otel-collector:4317", 0, ""},
		{"127.0.0.1:4317", 500, ""},
		{"collector:4317", -1, "outside 0-1000000"},
		{"collector:4317", 1_000_001, "outside 0-1000000"},
		{"", -1, "outside 0-1000000"},
		{"%zz:4317", 1, "--tracing-endpoint"},
	} {
		o := &Options{Endpoint: tc.endpoint, SamplingRatePerMillion: tc.rate}
		err := o.Validate()
		if (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Validate(%q, %d) = %v, want %q", tc.endpoint, tc.rate, err, tc.err)
		}
	}
}

// Both flag sets register the same names with the same defaults.
func TestOptions_FlagsOnBothFlagSets(t *testing.T) {
	po, go_ := NewOptions(), NewOptions()
	pfs := pflag.NewFlagSet("p", pflag.ContinueOnError)
	po.AddFlags(pfs)
	gfs := flag.NewFlagSet("g", flag.ContinueOnError)
	go_.AddGoFlags(gfs)
	args := []string{"--tracing-endpoint=collector:4317", "--tracing-sampling-rate-per-million=250"}
	if err := pfs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := gfs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if *po != *go_ || po.Endpoint != "collector:4317" || po.SamplingRatePerMillion != 250 {
		t.Errorf("pflag %+v, flag %+v", po, go_)
	}
	if err := gfs.Parse([]string{"--tracing-sampling-rate-per-million=x"}); err == nil {
		t.Error("a non-integer rate was accepted")
	}
}

func TestProvider_OffWithoutAnEndpoint(t *testing.T) {
	tp, err := NewOptions().Provider(context.Background(), "x")
	if err != nil || tp != nil {
		t.Fatalf("Provider() = %v, %v; want nil, nil", tp, err)
	}
	tp, err = (&Options{Endpoint: "127.0.0.1:1", SamplingRatePerMillion: 1}).Provider(context.Background(), "x")
	if err != nil || tp == nil || Off(tp) {
		t.Fatalf("Provider(endpoint) = %v, %v; want a recording provider", tp, err)
	}
	Shutdown(context.Background(), tp)
}

func TestOff(t *testing.T) {
	if !Off(nil) || !Off(noop.NewTracerProvider()) || !Off(componenttracing.NewNoopTracerProvider()) {
		t.Error("a no-op provider is not Off")
	}
	if Off(sdktrace.NewTracerProvider()) {
		t.Error("the SDK's provider is Off")
	}
}

// Off, Handler and Client hand back what they were given, and Start
// allocates nothing.
func TestOff_WrapsNothingAndStartIsFree(t *testing.T) {
	var hh http.Handler = http.NewServeMux() // comparable, unlike a HandlerFunc
	if Handler(hh, nil, "x", nil) != hh || Handler(hh, noop.NewTracerProvider(), "x", nil) != hh {
		t.Error("Handler wrapped h with tracing off")
	}
	hc := &http.Client{}
	if Client(hc, nil, "x") != hc {
		t.Error("Client wrapped hc with tracing off")
	}
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		c, span := Start(ctx, Module+"x", "op")
		End(span, nil)
		_ = c
	}); n != 0 {
		t.Errorf("Start with tracing off: %v allocations, want 0", n)
	}
}

func TestSpanName_KeepsCallerBytesOut(t *testing.T) {
	for _, tc := range []struct {
		method, pattern, want string
	}{
		{"POST", "POST /v1/claim", "sandboxd POST /v1/claim"},
		{"GET", "/healthz", "sandboxd GET /healthz"},
		{"GET", "", "sandboxd GET"},
		{"", "", "sandboxd GET"},
		{"X-EVIL\nname", "", "sandboxd _OTHER"},
	} {
		r := &http.Request{Method: tc.method, Pattern: tc.pattern}
		if got := SpanName("sandboxd", r); got != tc.want {
			t.Errorf("SpanName(%q, %q) = %q, want %q", tc.method, tc.pattern, got, tc.want)
		}
	}
}

// Start makes a child of a recording span, from its provider.
func TestStart_ChildOfTheContextsSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	ctx, parent := tp.Tracer("t").Start(context.Background(), "parent")
	_, child := Start(ctx, Module+"x", "child")
	End(child, context.Canceled)
	parent.End()
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[0].Name != "child" || spans[0].Parent.SpanID() != parent.SpanContext().SpanID() || spans[0].Status.Description != "context canceled" {
		t.Errorf("spans %+v", spans)
	}
}

// A traced handler's ResponseWriter still reaches the connection: the
// deadlines (internal/serve) and hijacking of the handlers below it work.
func TestHandler_KeepsResponseControllerWorking(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
	errs := make(chan error, 3)
	h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		errs <- rc.SetReadDeadline(time.Now().Add(time.Minute))
		errs <- rc.SetWriteDeadline(time.Now().Add(time.Minute))
		conn, _, err := rc.Hijack()
		errs <- err
		if err == nil {
			_, _ = conn.Write([]byte("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n"))
			conn.Close()
		}
	}), tp, "x", nil)
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, what := range []string{"SetReadDeadline", "SetWriteDeadline", "Hijack"} {
		if err := <-errs; err != nil {
			t.Errorf("%s through the traced handler: %v", what, err)
		}
	}
}
