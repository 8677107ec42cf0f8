package node

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/vmm/vmmtest"
)

// The caller's trace: what a traceparent header names.
const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
	traceparent = "00-" + callerTrace + "-" + callerSpan + "-01"
)

// tracedNode is a node traced into an in-memory exporter whose VMs'
// agent is agent (it answers /init and records the traceparent it got).
func tracedNode(t *testing.T) (*testNode, *tracetest.InMemoryExporter, *fakeAgent) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	t.Cleanup(func() { _ = tp.Shutdown(bg) })
	agent := &fakeAgent{}
	srv := httptest.NewServer(agent)
	t.Cleanup(srv.Close)
	drv := vmmtest.New(vmmtest.Options{Name: "fake", Addr: srv.Listener.Addr().String()})
	tn := startNode(t, drv, func(c *Config) { c.TracerProvider = tp })
	if _, err := tn.root.PutPools(bg, pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 2)
	return tn, exp, agent
}

type fakeAgent struct {
	mu     sync.Mutex
	parent []string // the traceparent of each /init
}

func (a *fakeAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.parent = append(a.parent, r.Header.Get("traceparent"))
	a.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func tracedDo(t *testing.T, method, url, token, body string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, bytes.NewBufferString(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func spanNamed(t *testing.T, exp *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %q, want 1; spans: %v", len(found), name, names(exp.GetSpans()))
	}
	return found[0]
}

func names(ss tracetest.SpanStubs) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Name
	}
	return out
}

func childOf(t *testing.T, child, parent tracetest.SpanStub) {
	t.Helper()
	if child.SpanContext.TraceID() != parent.SpanContext.TraceID() || child.Parent.SpanID() != parent.SpanContext.SpanID() {
		t.Errorf("%q (trace %s, parent %s) is not a child of %q (trace %s, span %s)", child.Name, child.SpanContext.TraceID(), child.Parent.SpanID(),
			parent.Name, parent.SpanContext.TraceID(), parent.SpanContext.SpanID())
	}
}

// A root caller's (the fleet's) trace is continued: the node's server span
// is its child, the driver and agent calls the server span's children, and
// the agent is sent the agent call's span as its parent.
func TestTrace_RootCallerTraceIsContinuedToDriverAndAgent(t *testing.T) {
	tn, exp, agent := tracedNode(t)
	if code := tracedDo(t, "POST", tn.srv.URL+"/v1/claim", testRoot, `{"template":"img","claim_ref":"ns/a","env":{"A":"1"}}`); code != http.StatusOK {
		t.Fatalf("claim: %d", code)
	}
	claim := spanNamed(t, exp, "sandboxd POST /v1/claim")
	if claim.SpanKind != trace.SpanKindServer || claim.SpanContext.TraceID().String() != callerTrace ||
		claim.Parent.SpanID().String() != callerSpan || !claim.Parent.IsRemote() {
		t.Errorf("claim span %+v does not continue the caller's trace", claim.SpanContext)
	}
	init := spanNamed(t, exp, "agent POST")
	childOf(t, init, claim)
	agent.mu.Lock()
	got := agent.parent
	agent.mu.Unlock()
	if want := "00-" + callerTrace + "-" + init.SpanContext.SpanID().String() + "-01"; len(got) != 1 || got[0] != want {
		t.Errorf("agent got traceparent %q, want [%s]", got, want)
	}

	list, err := tn.root.List(bg)
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	if code := tracedDo(t, "POST", tn.srv.URL+"/v1/sandboxes/"+list[0].ID+"/pause", testRoot, ""); code/100 != 2 {
		t.Fatalf("pause: %d", code)
	}
	childOf(t, spanNamed(t, exp, "vmm.Pause"), spanNamed(t, exp, "sandboxd POST /v1/sandboxes/{id}/pause"))
	if code := tracedDo(t, "POST", tn.srv.URL+"/v1/sandboxes/"+list[0].ID+"/resume", testRoot, ""); code/100 != 2 {
		t.Fatalf("resume: %d", code)
	}
	childOf(t, spanNamed(t, exp, "vmm.Resume"), spanNamed(t, exp, "sandboxd POST /v1/sandboxes/{id}/resume"))
	if code := tracedDo(t, "POST", tn.srv.URL+"/v1/sandboxes/"+list[0].ID+"/fork", testRoot, `{"count":1}`); code/100 != 2 {
		t.Fatalf("fork: %d", code)
	}
	fork := spanNamed(t, exp, "sandboxd POST /v1/sandboxes/{id}/fork")
	childOf(t, spanNamed(t, exp, "vmm.Snapshot"), fork)
	childOf(t, spanNamed(t, exp, "vmm.Clone"), fork)
}

// The background rounds (the warm-pool driver's PUT /v1/pools, GET
// /v1/info) and the change stream make no trace of their own.
func TestTrace_BackgroundRoundsStartNoTrace(t *testing.T) {
	tn, exp, _ := tracedNode(t) // its PUT /v1/pools and GET /v1/info polls carried no traceparent
	if _, err := http.Get(tn.srv.URL + "/healthz"); err != nil {
		t.Fatal(err)
	}
	if spans := exp.GetSpans(); len(spans) != 0 {
		t.Errorf("spans %q, want none", names(spans))
	}
	if code := tracedDo(t, "GET", tn.srv.URL+"/v1/info", testRoot, ""); code != http.StatusOK {
		t.Fatalf("info: %d", code)
	}
	spanNamed(t, exp, "sandboxd GET /v1/info") // with a trace, it is traced
}

// Anyone but root — a sandbox's own token, or no token — starts a new
// trace, linked to the one it named: a tenant cannot put spans in the
// fleet's traces.
func TestTrace_NonRootCallerStartsANewLinkedTrace(t *testing.T) {
	tn, exp, _ := tracedNode(t)
	sb, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/a"})
	if err != nil {
		t.Fatal(err)
	}
	for _, token := range []string{sb.Token, "not-a-token"} {
		exp.Reset()
		tracedDo(t, "GET", tn.srv.URL+"/v1/sandboxes/"+sb.ID, token, "")
		s := spanNamed(t, exp, "sandboxd GET /v1/sandboxes/{id}")
		if s.SpanContext.TraceID().String() == callerTrace || s.Parent.IsValid() {
			t.Errorf("token %.6s…: the span continued the caller's trace", token)
		}
		if len(s.Links) != 1 || s.Links[0].SpanContext.TraceID().String() != callerTrace || s.Links[0].SpanContext.SpanID().String() != callerSpan {
			t.Errorf("token %.6s…: links %+v, want the caller's span", token, s.Links)
		}
	}
}
