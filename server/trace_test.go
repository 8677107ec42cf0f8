package server_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	componenttracing "k8s.io/component-base/tracing"

	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/internal/serve"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/node"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/server"
	"github.com/hearthvm/hearth/vmm/vmmtest"
)

const traceImage = "ghcr.io/x/traced:1"

// tracedSystem is the API server, its fleet, the e2b gateway and one node
// (in-memory VMs whose agent answers /init), all traced into exp.
type tracedSystem struct {
	api, e2b string
	exp      *tracetest.InMemoryExporter
	tp       *sdktrace.TracerProvider
}

// startTraced runs it. Bearer "admin" is system:masters, "tenant" an
// ordinary user.
func startTraced(t *testing.T) *tracedSystem {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	s := startSystem(t, tp, 3)
	s.exp = exp
	return s
}

// startSystem runs the system traced by tp (nil: tracing off) with warm
// VMs in the pool of traceImage.
func startSystem(t testing.TB, tp *sdktrace.TracerProvider, warm int32) *tracedSystem {
	t.Helper()
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(agent.Close)

	// One node, traced, as fleettest runs one.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	drv := vmmtest.New(vmmtest.Options{Name: "test", Addr: agent.Listener.Addr().String()})
	ncfg := node.Config{Name: "node-0", AdvertiseAddress: ln.Addr().String(), RootToken: fleettest.Token,
		NodeToken: nodeapi.NodeToken(fleettest.Secret, "node-0"), DataDir: t.TempDir(), Driver: drv,
		RefillInterval: 20 * time.Millisecond, WarmCheckInterval: -1, MaxBootConcurrency: 16}
	if tp != nil {
		ncfg.TracerProvider = tp
	}
	nd, err := node.New(ncfg)
	if err != nil {
		t.Fatal(err)
	}
	nctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- node.Serve(nctx, nd, ln, node.ServeOptions{Serve: serve.Options{Budget: serve.NewBudget(serve.Limits{})}, CloseTimeout: 30 * time.Second})
	}()
	t.Cleanup(func() { stop(); <-served })
	f := &fleettest.Fleet{View: &inventory.Static{}, Nodes: []*fleettest.Node{{Node: nd, Name: "node-0", Addr: ln.Addr().String(), Driver: drv,
		Client: nodeapi.NewClient(ln.Addr().String(), fleettest.Token)}}}
	f.SetWarm(t, nodeapi.PoolSpec{Template: traceImage, Net: "none", Size: "small"}, warm)

	o := server.NewStandaloneOptions()
	addr, err := o.ListenOn("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.Live = f.StartLive(t)
	o.SandboxdToken = fleettest.Secret
	if tp != nil {
		o.TracerProvider = tp
	}
	o.Authenticator = authenticator.RequestFunc(func(r *http.Request) (*authenticator.Response, bool, error) {
		switch r.Header.Get("Authorization") {
		case "Bearer admin":
			return &authenticator.Response{User: &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}}, true, nil
		case "Bearer tenant":
			return &authenticator.Response{User: &user.DefaultInfo{Name: "tenant", Groups: []string{user.AllAuthenticated}}}, true, nil
		}
		return nil, false, nil
	})
	o.Authorizer = authorizerfactory.NewAlwaysAllowAuthorizer()
	o.EnableE2B, o.E2B.AllowAnonymous, o.E2B.BindAddress = true, true, "127.0.0.1:0"
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := cfg.Complete().New()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	s := &tracedSystem{api: "https://" + addr, e2b: "http://" + srv.E2BAddr().String(), tp: tp}
	fleettest.Eventually(t, 30*time.Second, func() bool {
		req, _ := http.NewRequest(http.MethodGet, s.api+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer admin")
		resp, err := insecure.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "the API server never became ready")
	return s
}

// chain is the names of span and its ancestors, nearest first, as far as
// the exporter holds them.
func chain(spans tracetest.SpanStubs, s tracetest.SpanStub) []string {
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, x := range spans {
		byID[x.SpanContext.SpanID()] = x
	}
	out := []string{s.Name}
	for s.Parent.IsValid() {
		p, ok := byID[s.Parent.SpanID()]
		if !ok || p.SpanContext.TraceID() != s.SpanContext.TraceID() {
			break
		}
		out = append(out, p.Name)
		s = p
	}
	return out
}

// wantChain finds the one span named name in trace tid and checks that
// want are among its ancestors, nearest first (the API server's own spans
// — authorization, audit, Create — may come between).
func (s *tracedSystem) wantChain(t *testing.T, tid trace.TraceID, name string, want ...string) {
	t.Helper()
	spans := s.exp.GetSpans()
	var found []tracetest.SpanStub
	for _, x := range spans {
		if x.Name == name && x.SpanContext.TraceID() == tid {
			found = append(found, x)
		}
	}
	if len(found) != 1 {
		var all []string
		for _, x := range spans {
			all = append(all, x.Name)
		}
		t.Fatalf("%d spans %q in trace %s, want 1; all spans: %q", len(found), name, tid, all)
	}
	got := chain(spans, found[0])
	rest := got[1:]
	for _, w := range want {
		i := slices.Index(rest, w)
		if i < 0 {
			t.Errorf("span %q's ancestry %q lacks %q (in order) of %q", name, got, w, want)
			return
		}
		rest = rest[i+1:]
	}
}

var sandboxesGVR = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}

const apiPath = "/apis/agents.x-k8s.io/v1beta1/namespaces/{:namespace}/sandboxes"

// One trace runs from a client-go caller through the API server, the
// fleet's call to the node and the node to its driver and the agent, for a
// claim, pause, resume, fork and snapshot: client-go's traced transport
// starts it, the API server continues it (a system:masters caller), and
// each hop's traceparent header carries it on.
func TestTrace_OneTraceFromClientGoToDriverAndAgent(t *testing.T) {
	s := startTraced(t)
	rc := &rest.Config{Host: s.api, BearerToken: "admin", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	rc.Wrap(componenttracing.WrapperFor(s.tp))
	dyn := dynamic.NewForConfigOrDie(rc)
	sandboxes := dyn.Resource(sandboxesGVR).Namespace("default")

	do := func(verb string, f func(ctx context.Context) error) trace.TraceID {
		t.Helper()
		ctx, span := s.tp.Tracer("test").Start(context.Background(), "kubectl "+verb)
		err := f(ctx)
		span.End()
		if err != nil {
			t.Fatalf("%s: %v", verb, err)
		}
		return span.SpanContext().TraceID()
	}
	sb := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "metadata": map[string]any{"name": "traced"},
		"spec": map[string]any{"podTemplate": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{
			"name": "main", "image": traceImage, "env": []any{map[string]any{"name": "A", "value": "1"}}}}}}},
	}}
	tid := do("create", func(ctx context.Context) error {
		_, err := sandboxes.Create(ctx, sb, metav1.CreateOptions{})
		return err
	})
	client := []string{"HTTP POST", "kubectl create"}
	api := append([]string{"POST " + apiPath}, client...)
	s.wantChain(t, tid, "agent POST", append([]string{"sandboxd POST /v1/claim", "sandboxd POST"}, api...)...)

	verb := func(name, kind, body string) trace.TraceID {
		return do(name, func(ctx context.Context) error {
			obj := &unstructured.Unstructured{}
			if err := obj.UnmarshalJSON([]byte(fmt.Sprintf(`{"apiVersion":"agents.x-k8s.io/v1beta1","kind":%q,"metadata":{"name":"traced"}%s}`, kind, body))); err != nil {
				return err
			}
			_, err := sandboxes.Create(ctx, obj, metav1.CreateOptions{}, name)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			return err
		})
	}
	for _, tc := range []struct {
		verb, kind, body string
		driver           []string
	}{
		{"pause", "SandboxPauseOptions", "", []string{"vmm.Pause"}},
		{"resume", "SandboxResumeOptions", "", []string{"vmm.Resume"}},
		{"fork", "SandboxForkOptions", `,"count":1`, []string{"vmm.Snapshot", "vmm.Clone"}},
		{"snapshot", "SandboxSnapshotOptions", `,"name":"s1"`, []string{"vmm.Snapshot"}},
	} {
		tid := verb(tc.verb, tc.kind, tc.body)
		api := []string{"POST " + apiPath + "/{:name}/" + tc.verb, "HTTP POST", "kubectl " + tc.verb}
		for _, d := range tc.driver {
			s.wantChain(t, tid, d, append([]string{"sandboxd POST /v1/sandboxes/{id}/" + tc.verb, "sandboxd POST"}, api...)...)
		}
	}
}

// An incoming traceparent is continued: by the API server for a
// system:masters caller (an ordinary user's starts a new trace linked to
// it, as kube-apiserver does), and by the e2b gateway.
func TestTrace_IncomingTraceparentIsContinued(t *testing.T) {
	s := startTraced(t)
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	send := func(url, token string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("traceparent", "00-"+tid+"-"+sid+"-01")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := insecure.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", url, resp.StatusCode)
		}
	}
	server := func(name string) tracetest.SpanStub {
		t.Helper()
		for _, x := range s.exp.GetSpans() {
			if x.Name == name && x.SpanKind == trace.SpanKindServer {
				return x
			}
		}
		var all []string
		for _, x := range s.exp.GetSpans() {
			all = append(all, x.Name)
		}
		t.Fatalf("no server span %q: %q", name, all)
		return tracetest.SpanStub{}
	}
	continued := func(x tracetest.SpanStub) bool {
		return x.SpanContext.TraceID().String() == tid && x.Parent.SpanID().String() == sid && x.Parent.IsRemote()
	}

	send(s.api+"/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes", "admin")
	if x := server("GET " + apiPath); !continued(x) {
		t.Errorf("API server, system:masters: span %s (parent %s) does not continue %s-%s", x.SpanContext.TraceID(), x.Parent.SpanID(), tid, sid)
	}
	s.exp.Reset()
	send(s.api+"/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes", "tenant")
	if x := server("GET " + apiPath); continued(x) || len(x.Links) != 1 || x.Links[0].SpanContext.TraceID().String() != tid {
		t.Errorf("API server, ordinary user: span %s links %v; want a new trace linked to %s", x.SpanContext.TraceID(), x.Links, tid)
	}
	s.exp.Reset()
	send(s.e2b+"/v2/sandboxes", "")
	if x := server("e2b GET"); !continued(x) {
		t.Errorf("e2b gateway: span %s (parent %s) does not continue %s-%s", x.SpanContext.TraceID(), x.Parent.SpanID(), tid, sid)
	}
}

// --tracing-endpoint and --tracing-config-file are two ways to one
// provider: setting both is refused, as is a bad rate.
func TestOptions_TracingFlagsValidated(t *testing.T) {
	cfgFile := t.TempDir() + "/tracing.yaml"
	if err := os.WriteFile(cfgFile, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\nendpoint: localhost:4317\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"--tracing-endpoint=collector:4317"}, ""},
		{[]string{"--tracing-config-file=" + cfgFile}, ""},
		{[]string{"--tracing-endpoint=collector:4317", "--tracing-config-file=" + cfgFile}, "exclusive"},
		{[]string{"--tracing-endpoint=collector:4317", "--tracing-sampling-rate-per-million=2000000"}, "outside 0-1000000"},
	} {
		o := server.NewStandaloneOptions()
		fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		o.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
		err := o.Validate()
		if (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%v: Validate() = %v, want %q", tc.args, err, tc.err)
		}
	}
}
