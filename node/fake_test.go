package node

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/hearthvm/hearth/vmm"
)

// fakeDriver is a vmm.Driver without processes: VMs are map entries and
// checkpoints are directories with a marker file. It tests the claim table
// and the node's bookkeeping, not a backend.
type fakeDriver struct {
	mu  sync.Mutex
	vms map[string]vmm.Handle
	// While gated, Clone blocks until release is closed (or ctx ends).
	gated     atomic.Bool
	release   chan struct{}
	failClone atomic.Int32 // the next n clones fail
	clones    atomic.Int64
	boots     atomic.Int64
	destroys  atomic.Int64
}

func newFakeDriver() *fakeDriver {
	return &fakeDriver{vms: map[string]vmm.Handle{}, release: make(chan struct{})}
}

func (f *fakeDriver) Name() string { return "fake" }

func (f *fakeDriver) add(spec vmm.Spec) vmm.Handle {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := vmm.Handle{ID: spec.ID, Backend: "fake", PID: 1, Addr: "127.0.0.1:9", Token: spec.Token}
	f.vms[spec.ID] = h
	return h
}

func (f *fakeDriver) Boot(ctx context.Context, spec vmm.Spec) (vmm.Handle, error) {
	f.boots.Add(1)
	return f.add(spec), nil
}

func (f *fakeDriver) live(h vmm.Handle) (vmm.Handle, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.vms[h.ID]
	return v, ok
}

func (f *fakeDriver) setPaused(h vmm.Handle, p bool) (vmm.Handle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.vms[h.ID]
	if !ok {
		return h, vmm.ErrNotRunning
	}
	v.Paused = p
	f.vms[h.ID] = v
	return v, nil
}

func (f *fakeDriver) Pause(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	return f.setPaused(h, true)
}

func (f *fakeDriver) Resume(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	return f.setPaused(h, false)
}

func (f *fakeDriver) Snapshot(ctx context.Context, h vmm.Handle, dir string) error {
	if _, ok := f.live(h); !ok {
		return vmm.ErrNotRunning
	}
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s exists", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "fake-checkpoint"), []byte(h.ID), 0o600)
}

func (f *fakeDriver) Clone(ctx context.Context, dir string, spec vmm.Spec) (vmm.Handle, error) {
	if f.gated.Load() {
		select {
		case <-f.release:
		case <-ctx.Done():
			return vmm.Handle{}, ctx.Err()
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "fake-checkpoint")); err != nil {
		return vmm.Handle{}, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
	}
	for {
		n := f.failClone.Load()
		if n <= 0 {
			break
		}
		if f.failClone.CompareAndSwap(n, n-1) {
			return vmm.Handle{}, fmt.Errorf("injected clone failure")
		}
	}
	f.clones.Add(1)
	return f.add(spec), nil
}

func (f *fakeDriver) Stop(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	h.PID = 0
	return h, nil
}

func (f *fakeDriver) Restore(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	if _, ok := f.live(h); !ok {
		return h, vmm.ErrNotRunning
	}
	h.PID = 1
	return h, nil
}

func (f *fakeDriver) Destroy(ctx context.Context, h vmm.Handle) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.vms[h.ID]; ok {
		f.destroys.Add(1)
	}
	delete(f.vms, h.ID)
	return nil
}

func (f *fakeDriver) Stats(ctx context.Context, h vmm.Handle) (vmm.Stats, error) {
	v, ok := f.live(h)
	if !ok {
		return vmm.Stats{}, vmm.ErrNotRunning
	}
	return vmm.Stats{CPUCount: 1, MemTotalBytes: 1 << 30, MemUsedBytes: 1 << 20, MemUsedMeasured: !v.Paused, MeasuredAt: time.Now()}, nil
}

func (f *fakeDriver) List(ctx context.Context) ([]vmm.Handle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]vmm.Handle, 0, len(f.vms))
	for _, h := range f.vms {
		out = append(out, h)
	}
	return out, nil
}

func (f *fakeDriver) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.vms)
}

const testRoot = "root-token"

// testNode runs a node over drv with its HTTP API on a test server.
type testNode struct {
	*Node
	srv     *httptest.Server
	root    *Client
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
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tn := &testNode{Node: n, srv: httptest.NewServer(n.Handler()), done: make(chan struct{})}
	tn.root = NewClient(tn.srv.URL, testRoot)
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
	if tn.crashed {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tn.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// waitWarm polls /v1/info until the pool holds want warm VMs.
func (tn *testNode) waitWarm(t testing.TB, template string, want int32) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		info, err := tn.root.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range info.Pools {
			if p.Template == template && p.Warm == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %s never reached warm %d: %+v", template, want, info.Pools)
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
