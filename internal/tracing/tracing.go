// Package tracing is the project's one way to OpenTelemetry traces: the
// --tracing-endpoint and --tracing-sampling-rate-per-million flags every
// server binary registers, the TracerProvider they make (OTLP over gRPC,
// through k8s.io/component-base/tracing, as kube-apiserver's), and the
// three places a span starts: an HTTP server's handler (Handler), an HTTP
// client's transport (Client) and a call inside a component (Start).
//
// Propagation is W3C trace context (traceparent, tracestate) and baggage,
// passed to every handler and transport here; nothing sets the otel
// globals.
//
// Off is free: with no endpoint there is no TracerProvider (nil), and
// Handler and Client return what they were given, unwrapped; Start on a
// context whose span records nothing (no trace, or one not sampled) starts
// nothing and allocates nothing.
package tracing

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	componenttracing "k8s.io/component-base/tracing"
	tracingapi "k8s.io/component-base/tracing/api/v1"
)

// Module prefixes the instrumentation scope of every tracer of the project
// (Start's scope argument).
const Module = "github.com/hearthvm/hearth/"

// A TracerProvider records and exports spans and is shut down (flushed)
// once: component-base's, which k8s.io/apiserver's Config takes.
type TracerProvider = componenttracing.TracerProvider

// Options are the tracing flags of one binary.
type Options struct {
	// Endpoint is the OTLP gRPC collector, host:port (plain gRPC, no TLS,
	// as kube-apiserver's tracing configuration). Empty: tracing is off.
	Endpoint string
	// SamplingRatePerMillion is how many of a million traces this binary
	// starts are recorded; a trace continued from a caller that recorded
	// it is recorded whatever the rate (parent-based sampling).
	SamplingRatePerMillion int32
}

// NewOptions returns the defaults: off; when an endpoint is set, every
// trace sampled.
func NewOptions() *Options { return &Options{SamplingRatePerMillion: 1_000_000} }

const (
	endpointHelp = "OTLP gRPC collector (host:port, plain gRPC) to export OpenTelemetry traces to; empty: tracing off, at no cost. Exporter settings beyond the address (headers, timeouts) are the OTEL_EXPORTER_OTLP_* environment variables, never flags"
	rateHelp     = "with --tracing-endpoint, how many of a million traces this process starts are recorded (0-1000000); a trace continued from a caller that recorded it is always recorded"
)

// AddFlags registers --tracing-endpoint and
// --tracing-sampling-rate-per-million.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Endpoint, "tracing-endpoint", o.Endpoint, endpointHelp)
	fs.Int32Var(&o.SamplingRatePerMillion, "tracing-sampling-rate-per-million", o.SamplingRatePerMillion, rateHelp)
}

// AddGoFlags is AddFlags on a standard library flag set (sandboxd's).
func (o *Options) AddGoFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Endpoint, "tracing-endpoint", o.Endpoint, endpointHelp)
	fs.Func("tracing-sampling-rate-per-million", fmt.Sprintf("%s (default %d)", rateHelp, o.SamplingRatePerMillion), func(s string) error {
		var v int32
		if _, err := fmt.Sscan(s, &v); err != nil {
			return fmt.Errorf("not an integer: %q", s)
		}
		o.SamplingRatePerMillion = v
		return nil
	})
}

// config is o as component-base's tracing configuration.
func (o *Options) config() *tracingapi.TracingConfiguration {
	ep, rate := o.Endpoint, o.SamplingRatePerMillion
	return &tracingapi.TracingConfiguration{Endpoint: &ep, SamplingRatePerMillion: &rate}
}

// Validate reports a malformed endpoint or a rate outside 0-1000000.
func (o *Options) Validate() error {
	if o.SamplingRatePerMillion < 0 || o.SamplingRatePerMillion > 1_000_000 {
		return fmt.Errorf("--tracing-sampling-rate-per-million %d is outside 0-1000000", o.SamplingRatePerMillion)
	}
	if o.Endpoint == "" {
		return nil
	}
	if errs := tracingapi.ValidateTracingConfiguration(o.config(), nil, nil); len(errs) > 0 {
		return fmt.Errorf("--tracing-endpoint: %w", errs.ToAggregate())
	}
	return nil
}

// Enabled reports whether an endpoint is set.
func (o *Options) Enabled() bool { return o != nil && o.Endpoint != "" }

// Provider returns the TracerProvider exporting to the endpoint, its
// spans' resource naming service (the binary) and attrs (a node's name,
// say); nil, and no error, when tracing is off. The caller shuts it down
// (which flushes) when the process stops. The exporter connects lazily: an
// unreachable collector costs dropped spans, never a failed start.
func (o *Options) Provider(ctx context.Context, service string, attrs ...attribute.KeyValue) (TracerProvider, error) {
	if !o.Enabled() {
		return nil, nil
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	res := []resource.Option{resource.WithAttributes(append([]attribute.KeyValue{semconv.ServiceNameKey.String(service)}, attrs...)...)}
	return componenttracing.NewProvider(ctx, o.config(), nil, res)
}

// Shutdown flushes and stops tp (nil: nothing), waiting at most 5 s for
// the collector even once ctx has ended: a process's last spans are sent
// as it stops.
func Shutdown(ctx context.Context, tp TracerProvider) {
	if tp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = tp.Shutdown(ctx)
}

// Off reports whether tp records nothing: nil, or a no-op provider (the
// otel one, or component-base's, which k8s.io/apiserver defaults to).
func Off(tp trace.TracerProvider) bool {
	if tp == nil {
		return true
	}
	_, noopTracer := tp.Tracer(Module).(noop.Tracer)
	return noopTracer
}

// Handler returns h tracing every request under a server span named by
// SpanName (operation, the method and the route pattern). The span continues the
// caller's trace from its traceparent header unless public reports r as
// from an untrusted caller (nil: every caller is trusted): then it starts
// a new trace, linked to the caller's. Off (tp nil or no-op), h itself.
func Handler(h http.Handler, tp trace.TracerProvider, operation string, public func(*http.Request) bool) http.Handler {
	if Off(tp) {
		return h
	}
	opts := []otelhttp.Option{
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(componenttracing.Propagators()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return SpanName(operation, r) }),
	}
	if public != nil {
		opts = append(opts, otelhttp.WithPublicEndpointFn(public))
	}
	return otelhttp.NewHandler(h, operation, opts...)
}

// Client returns hc sending every request under a client span, with the
// trace context in its headers. Off (tp nil or no-op), hc itself.
func Client(hc *http.Client, tp trace.TracerProvider, operation string) *http.Client {
	if Off(tp) {
		return hc
	}
	out := *hc
	out.Transport = otelhttp.NewTransport(hc.Transport,
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(componenttracing.Propagators()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return SpanName(operation, r) }),
	)
	return &out
}

// SpanName names an HTTP span "<operation> <method> <pattern>": the route
// pattern the server's ServeMux matched (so never an id, nor anything else
// a caller chose but its method, and that only from the standard ones);
// a client span, or a request no pattern matched, has none.
func SpanName(operation string, r *http.Request) string {
	m := r.Method
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
	case "":
		m = http.MethodGet
	default:
		m = "_OTHER"
	}
	name := operation + " " + m
	if r.Pattern != "" {
		// A pattern may carry its method ("POST /v1/claim"); keep its path.
		p := r.Pattern
		if i := strings.IndexByte(p, ' '); i >= 0 {
			p = p[i+1:]
		}
		name += " " + p
	}
	return name
}

// Start starts a span named name, a child of ctx's span, from the same
// provider, with scope as its instrumentation scope (Module + a package).
// When ctx's span records nothing, it returns ctx and a span that does
// nothing: a call inside a component costs nothing while tracing is off.
func Start(ctx context.Context, scope, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, noopSpan
	}
	return parent.TracerProvider().Tracer(scope).Start(ctx, name, trace.WithAttributes(attrs...))
}

var noopSpan = trace.SpanFromContext(context.Background())

// End ends span, recording err (when not nil) as its error status.
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
