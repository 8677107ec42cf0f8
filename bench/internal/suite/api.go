package suite

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/bench/internal/simfleet"
	"github.com/hearthvm/hearth/bench/internal/stats"
	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleetview"
	"github.com/hearthvm/hearth/server"
)

// apiSystem is the aggregated API server (standalone: anonymous,
// always-allow, self-signed, as sandbox-dev serves it) over a simulated
// fleet, in process.
type apiSystem struct {
	Fleet  *simfleet.Fleet
	Router *fleet.NodeFleet
	Live   *fleetview.Live
	REST   *rest.Config
	Client *sandboxClient
	stop   func()
	// dials counts the connections the client opened to the API server.
	dials atomic.Int64
}

// startAPI starts nodes nodes (NopDriver unless opts.Driver says otherwise)
// and the aggregated API server over them.
func startAPI(ctx context.Context, opts simfleet.Options) (*apiSystem, error) {
	f, err := simfleet.Start(opts)
	if err != nil {
		return nil, err
	}
	sys := &apiSystem{Fleet: f, stop: f.Close}
	fail := func(err error) (*apiSystem, error) { sys.Close(); return nil, err }
	o := server.NewStandaloneOptions()
	addr, err := o.ListenOn("127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	// As sandbox-apiserver serves: a live fleet view (the nodes' change
	// streams over the published membership) that the fleet and the API
	// server both read.
	live := fleetview.New(f.View, fleetview.Config{Secret: simfleet.Token})
	lctx, lcancel := context.WithCancel(context.Background())
	liveDone := make(chan struct{})
	go func() { defer close(liveDone); live.Run(lctx) }()
	stopNodes := func() { lcancel(); <-liveDone; f.Close() }
	sys.stop = stopNodes
	if err := live.WaitForSync(ctx); err != nil {
		return fail(err)
	}
	sys.Live = live
	o.Live = live
	sys.Router = fleet.New(fleet.Config{View: live, Secret: simfleet.Token})
	o.Fleet = sys.Router
	if err := o.Complete(); err != nil {
		return fail(err)
	}
	if err := o.Validate(); err != nil {
		return fail(err)
	}
	cfg, err := o.Config()
	if err != nil {
		return fail(err)
	}
	srv, err := cfg.Complete().New()
	if err != nil {
		return fail(err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(sctx) }()
	sys.stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
		stopNodes()
	}
	url := "https://" + addr
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	tlsc := rest.TLSClientConfig{Insecure: true}
	if os.Getenv("HEARTHBENCH_HTTP1") != "" {
		tlsc.NextProtos = []string{"http/1.1"}
	}
	sys.REST = &rest.Config{Host: url, BearerToken: "bench", TLSClientConfig: tlsc,
		QPS: -1, Burst: 0, Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			sys.dials.Add(1)
			return dialer.DialContext(ctx, network, addr)
		}}
	if sys.Client, err = newSandboxClient(sys.REST); err != nil {
		return fail(err)
	}
	hc, err := rest.HTTPClientFor(sys.REST)
	if err != nil {
		return fail(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := hc.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fail(fmt.Errorf("aggregated API server not ready at %s", url))
		}
		time.Sleep(20 * time.Millisecond) // polling for readiness, with a deadline
	}
	return sys, nil
}

func (s *apiSystem) Close() {
	if s != nil && s.stop != nil {
		s.stop()
	}
}

// newSandbox is a Sandbox whose pool key is Key.
func newSandbox(name string) *sandboxv1beta1.Sandbox { return newSandboxOf(name, Key.Template) }

// newSandboxOf is a small Sandbox of image.
func newSandboxOf(name, image string) *sandboxv1beta1.Sandbox {
	return &sandboxv1beta1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: sandboxv1beta1.SandboxSpec{SandboxBlueprint: sandboxv1beta1.SandboxBlueprint{PodTemplate: sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: image, Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
			}}},
		}}}},
	}
}

// APIClaims measures client-go Create → 201 through the aggregated API
// server (over 4 in-process NopDriver nodes) at each concurrency level,
// and read-after-create: a Get by name right after each Create.
func APIClaims(ctx context.Context, cfg Config) error {
	cfg.defaults()
	sys, err := startAPI(ctx, simfleet.Options{Nodes: 4, MaxBootConcurrency: 64})
	if err != nil {
		return err
	}
	defer sys.Close()
	f := sys.Fleet
	sbs := sys.Client.Namespace("bench")
	t := stats.Table{
		Title:  "Claim latency through the Kubernetes API (client-go Create → 201; 4 in-process NopDriver nodes; store fsync on)",
		Header: []string{"c", "VMs held/node", "creates", "p50 ms", "p95 ms", "p99 ms", "creates/s", "CPU µs/create", "alloc KB/create", "errors"},
	}
	for _, c := range cfg.Concurrency {
		perNode := int32(cfg.Claims/len(f.Nodes) + 64)
		if err := f.SetWarm(ctx, Key, perNode); err != nil {
			return err
		}
		if _, err := f.WaitWarm(ctx, Key, int(perNode)*len(f.Nodes), 5*time.Millisecond); err != nil {
			return err
		}
		if err := f.PublishNow(ctx); err != nil {
			return err
		}
		held, err := heldPerNode(ctx, f, false)
		if err != nil {
			return err
		}
		l := run(ctx, cfg.Claims, c, func(ctx context.Context, i int) error {
			_, err := sbs.Create(ctx, newSandbox(fmt.Sprintf("c%d-%d", c, i)), metav1.CreateOptions{})
			return err
		})
		cfg.logf("API create c=%d: %d ok, %d errors (%v); %d connections so far", c, l.ok, l.errs, l.first, sys.dials.Load())
		if l.errs > 0 {
			return fmt.Errorf("%d of %d claims failed at c=%d: %w", l.errs, l.errs+l.ok, c, l.first)
		}
		t.Add(c, held, l.ok, stats.Ms(l.lat.P50), stats.Ms(l.lat.P95), stats.Ms(l.lat.P99), fmt.Sprintf("%.0f", l.rate()),
			perClaimMicros(l), perClaimKB(l), l.errs)
	}
	t.Note("Client, aggregated API server (TLS, authn/authz off as in sandbox-dev), router and nodes share this process and its 2 cores. Nodes use the NopDriver: a warm VM is a map entry, so this is the control path's cost; each node fsyncs a claim's record before answering, as in production. VMs held/node: warm plus claimed when the row starts (earlier rows' creates stay claimed). The API server reads the nodes' published inventories here; no change stream subscriber is attached.")
	t.Note("Anchor: warm claim through the Kubernetes API p50 33 ms / p95 39 ms at c=1 (SandboxClaim on real microVMs); e2b start ~150 ms.")
	if err := t.Print(cfg.Out); err != nil {
		return err
	}

	// Read-after-create: Get by name immediately after Create, before any
	// inventory publish (the nodes publish every 30 s; none happens here).
	n := cfg.Claims / 4
	if err := f.SetWarm(ctx, Key, int32(n/len(f.Nodes)+64)); err != nil {
		return err
	}
	if _, err := f.WaitWarm(ctx, Key, n, 5*time.Millisecond); err != nil {
		return err
	}
	if err := f.PublishNow(ctx); err != nil {
		return err
	}
	rt := stats.Table{
		Title:  "Read-after-create (Get by name right after Create 201, no publish in between)",
		Header: []string{"reader", "pairs", "found", "success %", "Get p50 ms", "Get p95 ms", "Get p99 ms"},
	}
	readers := []struct {
		name   string
		router *fleet.NodeFleet
	}{
		{"same apiserver (claim-time index)", nil},
		{"another replica (empty index: asks the node the live view names)", fleet.New(fleet.Config{View: sys.Live, Secret: simfleet.Token})},
	}
	for ri, r := range readers {
		var gets []time.Duration
		found := 0
		for i := 0; i < n/2; i++ {
			name := fmt.Sprintf("rac%d-%d", ri, i)
			if _, err := sbs.Create(ctx, newSandbox(name), metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create %s: %w", name, err)
			}
			t0 := time.Now()
			var err error
			if r.router == nil {
				_, err = sbs.Get(ctx, name, metav1.GetOptions{})
			} else {
				_, err = r.router.ByRef(ctx, "bench/"+name)
			}
			gets = append(gets, time.Since(t0))
			if err == nil {
				found++
			}
		}
		l := stats.Summarize(gets)
		rt.Add(r.name, n/2, found, fmt.Sprintf("%.1f", 100*float64(found)/float64(n/2)), stats.Ms(l.P50), stats.Ms(l.P95), stats.Ms(l.P99))
	}
	rt.Note("The second reader is a fleet.NodeFleet with its own empty claim-time index over the same published view, i.e. what a second apiserver replica does for the Get.")
	rt.Note("Anchor: read-after-create p50 29 s (a read that waits for the ~30 s inventory publish).")
	return rt.Print(cfg.Out)
}

// sandboxClient is a typed client-go REST client for agents.x-k8s.io/v1beta1
// sandboxes (the generated clientset of agent-sandbox drags in
// controller-runtime through its v1alpha1 conversion code).
type sandboxClient struct{ rc *rest.RESTClient }

func newSandboxClient(cfg *rest.Config) (*sandboxClient, error) {
	scheme := runtime.NewScheme()
	if err := sandboxv1beta1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	metav1.AddToGroupVersion(scheme, sandboxv1beta1.GroupVersion)
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &sandboxv1beta1.GroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	c.ContentType = runtime.ContentTypeJSON
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return &sandboxClient{rc: rc}, nil
}

// sandboxes is the client of one namespace.
type sandboxes struct {
	rc *rest.RESTClient
	ns string
}

func (c *sandboxClient) Namespace(ns string) sandboxes { return sandboxes{rc: c.rc, ns: ns} }

func (s sandboxes) Create(ctx context.Context, sb *sandboxv1beta1.Sandbox, _ metav1.CreateOptions) (*sandboxv1beta1.Sandbox, error) {
	out := &sandboxv1beta1.Sandbox{}
	err := s.rc.Post().Namespace(s.ns).Resource("sandboxes").Body(sb).Do(ctx).Into(out)
	return out, err
}

func (s sandboxes) Get(ctx context.Context, name string, _ metav1.GetOptions) (*sandboxv1beta1.Sandbox, error) {
	out := &sandboxv1beta1.Sandbox{}
	err := s.rc.Get().Namespace(s.ns).Resource("sandboxes").Name(name).Do(ctx).Into(out)
	return out, err
}

func (s sandboxes) Delete(ctx context.Context, name string) error {
	return s.rc.Delete().Namespace(s.ns).Resource("sandboxes").Name(name).Do(ctx).Error()
}
