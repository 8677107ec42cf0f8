// Package fleettest runs real in-process node daemons (node.New) on
// loopback for tests of the fleet, the router and the API surfaces. The
// nodes boot "VMs" through Driver, an in-memory vmm.Driver without
// processes: everything above the driver (claim table, pools, leases, the
// HTTP API) is the real node. The fleet view is a Static viewer that the
// test refreshes with Publish, as an inventory publish would.
package fleettest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/node"
	"github.com/hearthvm/hearth/vmm"
)

// Token is the root token every test node accepts.
const Token = "fleettest-root-token"

// Driver is an in-memory vmm.Driver: VMs are map entries, checkpoints are
// directories holding a marker file.
type Driver struct {
	mu  sync.Mutex
	vms map[string]vmm.Handle
}

// NewDriver returns an empty Driver.
func NewDriver() *Driver { return &Driver{vms: map[string]vmm.Handle{}} }

var _ vmm.Driver = (*Driver)(nil)

// Name is "test".
func (d *Driver) Name() string { return "test" }

func (d *Driver) add(spec vmm.Spec) vmm.Handle {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := vmm.Handle{ID: spec.ID, Backend: "test", PID: 1, Addr: "127.0.0.1:9", Token: spec.Token}
	d.vms[spec.ID] = h
	return h
}

func (d *Driver) get(id string) (vmm.Handle, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.vms[id]
	return h, ok
}

// Boot adds a VM.
func (d *Driver) Boot(_ context.Context, spec vmm.Spec) (vmm.Handle, error) { return d.add(spec), nil }

func (d *Driver) setPaused(h vmm.Handle, p bool) (vmm.Handle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.vms[h.ID]
	if !ok {
		return h, vmm.ErrNotRunning
	}
	v.Paused = p
	d.vms[h.ID] = v
	return v, nil
}

// Pause marks the VM paused.
func (d *Driver) Pause(_ context.Context, h vmm.Handle) (vmm.Handle, error) {
	return d.setPaused(h, true)
}

// Resume marks the VM running.
func (d *Driver) Resume(_ context.Context, h vmm.Handle) (vmm.Handle, error) {
	return d.setPaused(h, false)
}

// Snapshot writes a marker into dir.
func (d *Driver) Snapshot(_ context.Context, h vmm.Handle, dir string) error {
	if _, ok := d.get(h.ID); !ok {
		return vmm.ErrNotRunning
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "checkpoint"), []byte(h.ID), 0o600)
}

// Clone adds a VM if dir holds a checkpoint.
func (d *Driver) Clone(_ context.Context, dir string, spec vmm.Spec) (vmm.Handle, error) {
	if _, err := os.Stat(filepath.Join(dir, "checkpoint")); err != nil {
		return vmm.Handle{}, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
	}
	return d.add(spec), nil
}

// Stop is a no-op that clears the PID.
func (d *Driver) Stop(_ context.Context, h vmm.Handle) (vmm.Handle, error) { h.PID = 0; return h, nil }

// Restore re-attaches a VM still in the map.
func (d *Driver) Restore(_ context.Context, h vmm.Handle) (vmm.Handle, error) {
	if _, ok := d.get(h.ID); !ok {
		return h, vmm.ErrNotRunning
	}
	h.PID = 1
	return h, nil
}

// Destroy removes the VM.
func (d *Driver) Destroy(_ context.Context, h vmm.Handle) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.vms, h.ID)
	return nil
}

// Stats reports fixed figures.
func (d *Driver) Stats(_ context.Context, h vmm.Handle) (vmm.Stats, error) {
	v, ok := d.get(h.ID)
	if !ok {
		return vmm.Stats{}, vmm.ErrNotRunning
	}
	return vmm.Stats{CPUCount: 1, MemTotalBytes: 1 << 30, MemUsedBytes: 1 << 20, MemUsedMeasured: !v.Paused, MeasuredAt: time.Now()}, nil
}

// List returns every VM.
func (d *Driver) List(context.Context) ([]vmm.Handle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]vmm.Handle, 0, len(d.vms))
	for _, h := range d.vms {
		out = append(out, h)
	}
	return out, nil
}

// Len is the number of live VMs (warm and claimed).
func (d *Driver) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.vms)
}

// Node is one running node daemon.
type Node struct {
	*node.Node
	Name, Addr string
	Driver     *Driver
	// Client speaks to the node with the root token.
	Client *node.Client
}

// Fleet is a set of running nodes and the Static view of their inventories.
type Fleet struct {
	Nodes []*Node
	View  *inventory.Static
}

// Start runs n nodes named node-0… on loopback; they stop at test cleanup.
func Start(t testing.TB, n int) *Fleet {
	t.Helper()
	f := &Fleet{View: &inventory.Static{}}
	for i := 0; i < n; i++ {
		f.Nodes = append(f.Nodes, startNode(t, fmt.Sprintf("node-%d", i)))
	}
	f.Publish()
	return f
}

func startNode(t testing.TB, name string) *Node {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	drv := NewDriver()
	addr := ln.Addr().String()
	nd, err := node.New(node.Config{
		Name: name, AdvertiseAddress: addr, RootToken: Token, DataDir: t.TempDir(), Driver: drv,
		MaxBootConcurrency: 4, ReapInterval: 50 * time.Millisecond, RefillInterval: 20 * time.Millisecond,
	})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	srv := &http.Server{Handler: nd.Handler()}
	go func() { _ = srv.Serve(ln) }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = nd.Run(ctx) }()
	t.Cleanup(func() {
		_ = srv.Close()
		cancel()
		<-done
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		if err := nd.Close(cctx); err != nil {
			t.Errorf("closing %s: %v", name, err)
		}
	})
	return &Node{Node: nd, Name: name, Addr: addr, Driver: drv, Client: node.NewClient(addr, Token)}
}

// Publish refreshes the view from every node's current inventory.
func (f *Fleet) Publish() {
	invs := make([]*inventory.NodeInventory, len(f.Nodes))
	for i, n := range f.Nodes {
		invs[i] = n.Inventory()
	}
	f.View.Set(invs...)
}

// SetWarm sets warm targets for one pool, warm[i] on node i, waits until
// every node holds them, and publishes.
func (f *Fleet) SetWarm(t testing.TB, spec node.PoolSpec, warm ...int32) {
	t.Helper()
	ctx := context.Background()
	for i, n := range f.Nodes {
		s := spec
		if i < len(warm) {
			s.Warm = warm[i]
		} else {
			s.Warm = 0
		}
		if _, err := n.Client.PutPools(ctx, []node.PoolSpec{s}); err != nil {
			t.Fatalf("PUT pools on %s: %v", n.Name, err)
		}
	}
	for i, n := range f.Nodes {
		want := int32(0)
		if i < len(warm) {
			want = warm[i]
		}
		WaitWarm(t, n, spec.Template, want)
	}
	f.Publish()
}

// WaitWarm polls n until its pool for template holds want warm VMs.
func WaitWarm(t testing.TB, n *Node, template string, want int32) {
	t.Helper()
	Eventually(t, 60*time.Second, func() bool {
		info, err := n.Client.Info(context.Background())
		if err != nil {
			return false
		}
		for _, p := range info.Pools {
			if p.Template == template {
				return p.Warm == want
			}
		}
		return want == 0
	}, "pool %s on %s never reached warm %d", template, n.Name, want)
}

// Warm returns n's warm count for template.
func Warm(t testing.TB, n *Node, template string) int32 {
	t.Helper()
	info, err := n.Client.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range info.Pools {
		if p.Template == template {
			return p.Warm
		}
	}
	return 0
}

// Eventually polls cond every 10ms until it holds or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf(format, args...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
