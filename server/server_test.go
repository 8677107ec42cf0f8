package server_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/fleetview"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/server"
)

var insecure = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
}

func get(url string) (int, string) {
	resp, err := insecure.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// informer is an Informer that syncs when told and records whether the
// API server was already serving when it started.
type informer struct {
	healthz        string
	servingAtStart atomic.Int32 // the /healthz status seen by Run
	started        chan struct{}
	sync           chan struct{}
}

func (i *informer) Run(ctx context.Context) {
	code, _ := get(i.healthz)
	i.servingAtStart.Store(int32(code))
	close(i.started)
	<-ctx.Done()
}

func (i *informer) WaitForSync(ctx context.Context) error {
	select {
	case <-i.sync:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// controller runs until its context ends, then calls onStop.
type controller struct {
	err    error
	onStop func()
}

func (c controller) Run(ctx context.Context) error {
	if c.err != nil {
		return c.err
	}
	<-ctx.Done()
	if c.onStop != nil {
		c.onStop()
	}
	return ctx.Err()
}

// newConfig is a standalone server over a live view of no nodes, with e2b
// served anonymously on a free port.
func newConfig(t *testing.T) (*server.Config, string) {
	t.Helper()
	o := server.NewStandaloneOptions()
	addr, err := o.ListenOn("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A live view of no nodes, never run: nothing to follow.
	o.Live = fleetview.New(inventory.NewStatic(), fleetview.Config{Secret: fleettest.Secret})
	o.Fleet = fleet.New(fleet.Config{View: o.Live, Secret: fleettest.Secret})
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
	return cfg, "https://" + addr
}

func run(t *testing.T, srv *server.Server) (context.CancelFunc, chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("server did not stop")
		}
	})
	return cancel, done
}

func TestRun_InformerStartsOnceServingAndReadinessWaitsForSync(t *testing.T) {
	cfg, url := newConfig(t)
	// /healthz/ping: the API server answers. Not /healthz, which also
	// waits for every other post-start hook (generic ones such as the
	// storage object count tracker's), and those run beside this one.
	inf := &informer{healthz: url + "/healthz/ping", started: make(chan struct{}), sync: make(chan struct{})}
	cfg.Inventory = inf
	srv, err := cfg.Complete().New()
	if err != nil {
		t.Fatal(err)
	}
	run(t, srv)
	select {
	case <-inf.started:
	case <-time.After(60 * time.Second):
		t.Fatal("informer never started")
	}
	if code := inf.servingAtStart.Load(); code != http.StatusOK {
		t.Fatalf("informer started before the API server served: /healthz %d", code)
	}
	e2bHealth := "http://" + srv.E2BAddr().String() + "/health"
	list := url + "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes"

	// Not synced: not ready, sandboxes 429 (retryable), e2b 503; the
	// server itself is alive and discovery answers.
	if code, body := get(url + "/readyz?verbose"); code == http.StatusOK || !strings.Contains(body, "sandbox-view-synced failed") {
		t.Fatalf("readyz before sync: %d\n%s", code, body)
	}
	if code, body := get(list); code != http.StatusTooManyRequests {
		t.Fatalf("list before sync: %d %s", code, body)
	}
	if code, body := get(e2bHealth); code != http.StatusServiceUnavailable || !strings.Contains(body, `"code":503`) {
		t.Fatalf("e2b before sync: %d %s", code, body)
	}
	for _, path := range []string{"/livez", "/apis/agents.x-k8s.io/v1beta1"} {
		if code, body := get(url + path); code != http.StatusOK {
			t.Fatalf("%s before sync: %d %s", path, code, body)
		}
	}

	close(inf.sync)
	fleettest.Eventually(t, 30*time.Second, func() bool { code, _ := get(url + "/readyz"); return code == http.StatusOK }, "never ready after sync")
	if code, body := get(list); code != http.StatusOK {
		t.Fatalf("list after sync: %d %s", code, body)
	}
	if code, body := get(e2bHealth); code/100 != 2 {
		t.Fatalf("e2b after sync: %d %s", code, body)
	}
}

func TestRun_StaticViewIsReadyWithoutInformer(t *testing.T) {
	cfg, url := newConfig(t)
	srv, err := cfg.Complete().New()
	if err != nil {
		t.Fatal(err)
	}
	run(t, srv)
	fleettest.Eventually(t, 60*time.Second, func() bool { code, _ := get(url + "/readyz"); return code == http.StatusOK }, "never ready")
	if code, body := get(url + "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes"); code != http.StatusOK {
		t.Fatalf("list: %d %s", code, body)
	}
}

func TestRun_StopsComponentsBeforeTheAPIServer(t *testing.T) {
	cfg, url := newConfig(t)
	var seen atomic.Int32
	cfg.Controllers = map[string]server.Controller{"probe": controller{onStop: func() {
		code, _ := get(url + "/healthz")
		seen.Store(int32(code))
	}}}
	srv, err := cfg.Complete().New()
	if err != nil {
		t.Fatal(err)
	}
	cancel, done := run(t, srv)
	fleettest.Eventually(t, 60*time.Second, func() bool { code, _ := get(url + "/readyz"); return code == http.StatusOK }, "never ready")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		done <- nil
	case <-time.After(30 * time.Second):
		t.Fatal("server did not stop")
	}
	if code := seen.Load(); code != http.StatusOK {
		t.Fatalf("a stopping controller saw /healthz %d: the API server stopped first", code)
	}
}

func TestRun_ComponentFailureStopsTheServer(t *testing.T) {
	cfg, _ := newConfig(t)
	boom := errors.New("boom")
	cfg.Controllers = map[string]server.Controller{"failing": controller{err: boom}}
	srv, err := cfg.Complete().New()
	if err != nil {
		t.Fatal(err)
	}
	_, done := run(t, srv)
	select {
	case err := <-done:
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), "start-failing") {
			t.Fatalf("Run: %v, want the component's error", err)
		}
		done <- err
	case <-time.After(60 * time.Second):
		t.Fatal("server kept running after a component failed")
	}
}
