package node

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/vmmtest"
)

// newFakeDriver returns an in-memory driver without processes (VMs are
// records): it tests the claim table and the node's bookkeeping, not a
// backend.
func newFakeDriver() *vmmtest.Driver { return vmmtest.New(vmmtest.Options{Name: "fake"}) }

const testRoot = "root-token"

// testNode runs a node over drv with its HTTP API on a test server.
type testNode struct {
	*Node
	srv     *httptest.Server
	root    *nodeapi.Client
	cancel  context.CancelFunc
	done    chan struct{}
	crashed bool
}

func startNode(t testing.TB, drv vmm.Driver, mut func(*Config)) *testNode {
	t.Helper()
	cfg := Config{
		Name: "n1", DataDir: t.TempDir(), Driver: drv, RootToken: testRoot,
		MaxBootConcurrency: 4, ReapInterval: 50 * time.Millisecond, RefillInterval: 50 * time.Millisecond,
	}
	if mut != nil {
		mut(&cfg)
	}
	return runNode(t, cfg)
}

func runNode(t testing.TB, cfg Config) *testNode {
	t.Helper()
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = ktesting.NewLogger(t, ktesting.NewConfig())
	}
	if cfg.WarmCheckInterval == 0 {
		// The fake driver's agents never answer: tests opt in to the sweep.
		cfg.WarmCheckInterval = -1
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tn := &testNode{Node: n, srv: httptest.NewServer(n.Handler()), done: make(chan struct{})}
	tn.root = nodeapi.NewClient(tn.srv.URL, testRoot)
	ctx, cancel := context.WithCancel(context.Background())
	tn.cancel = cancel
	go func() { defer close(tn.done); _ = n.Run(ctx) }()
	t.Cleanup(func() { tn.shutdown(t) })
	return tn
}

func (tn *testNode) shutdown(t testing.TB) {
	tn.srv.Close()
	tn.cancel()
	<-tn.done
	// Every mutation of every test published its own event: the
	// consistency check finds nothing to repair.
	if d := tn.checkHub(); d != 0 {
		t.Errorf("the change stream missed %d changes (its consistency check repaired them)", d)
	}
	if tn.crashed {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tn.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// waitWarm polls /v1/info until a pool of template (of any lane) holds
// want warm VMs.
func (tn *testNode) waitWarm(t testing.TB, template string, want int32) {
	t.Helper()
	tn.waitWarmLane(t, template, "", want)
}

// waitWarmLane polls /v1/info until template's pool of the lane net (""
// any lane) holds want warm VMs.
func (tn *testNode) waitWarmLane(t testing.TB, template, net string, want int32) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		info, err := tn.root.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range info.Pools {
			if p.Template == template && (net == "" || p.Net == net) && p.Warm == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %s (lane %q) never reached warm %d: %+v", template, net, want, info.Pools)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// crash stops tn as a kill -9 would leave things: the loops and the store
// stop, the VMs are not touched.
func (tn *testNode) crash() {
	tn.crashed = true
	tn.srv.Close()
	tn.cancel()
	<-tn.done
	n := tn.Node
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.cancel()
	n.ops.Wait()
	n.bg.Wait()
	_ = n.store.close()
}
