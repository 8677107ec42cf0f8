package devserver_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	componenttracing "k8s.io/component-base/tracing"

	"github.com/hearthvm/hearth/devserver"
)

// sandbox-dev traces its API server, fleet and nodes into one provider: a
// client-go Create of the default pool's template, with env, is one trace
// down to the sim driver's VM and the real agent's /init, and a pause
// down to the sim driver.
func TestDevServer_OneTraceFromClientGoToTheSimDriverAndAgent(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	d := start(t, t.TempDir(), func(o *devserver.Options) { o.Nodes = 1; o.TracerProvider = tp })
	defer d.stop(t)
	rc, err := clientcmd.BuildConfigFromFlags("", d.ready.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rc.Wrap(componenttracing.WrapperFor(tp))
	sandboxes := dynamic.NewForConfigOrDie(rc).Resource(schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}).Namespace("default")
	sb := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "metadata": map[string]any{"name": "traced"},
		"spec": map[string]any{"podTemplate": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{
			"name": "main", "image": "ghcr.io/cocoonstack/sandbox/rt:24.04",
			"resources": map[string]any{"requests": map[string]any{"cpu": "500m", "memory": "512Mi"}},
			"env":       []any{map[string]any{"name": "A", "value": "1"}}}}}}},
	}}
	// The default pool warms up after ready: retry the claim until a VM is warm.
	var tid trace.TraceID
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, root := tp.Tracer("test").Start(context.Background(), "kubectl create")
		_, err := sandboxes.Create(ctx, sb, metav1.CreateOptions{})
		root.End()
		if err == nil {
			tid = root.SpanContext().TraceID()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	ctx, root := tp.Tracer("test").Start(context.Background(), "kubectl pause")
	pause := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "SandboxPauseOptions", "metadata": map[string]any{"name": "traced"}}}
	_, err = sandboxes.Create(ctx, pause, metav1.CreateOptions{}, "pause")
	root.End()
	if err != nil {
		t.Fatalf("pause: %v", err)
	}
	ptid := root.SpanContext().TraceID()

	spans := exp.GetSpans()
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
	}
	// reaches reports whether s descends from a span named root.
	reaches := func(s tracetest.SpanStub, root string) bool {
		for s.Parent.IsValid() {
			p, ok := byID[s.Parent.SpanID()]
			if !ok {
				return false
			}
			if p.Name == root {
				return true
			}
			s = p
		}
		return false
	}
	find := func(tid trace.TraceID, name, root string, attr ...attribute.KeyValue) {
		t.Helper()
		for _, s := range spans {
			if s.Name != name || s.SpanContext.TraceID() != tid || !reaches(s, root) {
				continue
			}
			for _, a := range attr {
				found := false
				for _, b := range s.Attributes {
					found = found || b == a
				}
				if !found {
					t.Errorf("%s lacks %v: %v", name, a, s.Attributes)
				}
			}
			return
		}
		t.Errorf("no span %q under %q in trace %s", name, root, tid)
	}
	find(tid, "agent POST", "sandboxd POST /v1/claim")
	find(tid, "sandboxd POST /v1/claim", "kubectl create")
	find(ptid, "vmm.Pause", "kubectl pause", attribute.String("vmm.backend", "sim"))
}
