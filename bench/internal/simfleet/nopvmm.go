// Package simfleet runs a fleet of real node daemons (node.New, their real
// HTTP handlers on loopback listeners) inside one process, for benchmarks.
// Nodes use either a real vmm backend (sim: each warm VM is a process) or
// NopDriver, a vmm.Driver whose VMs are map entries, so a fleet of a
// million sandboxes fits in one process. Everything above the driver — the
// claim table, the bbolt store, the HTTP API, the inventory — is the real
// code. It owns only the temporary directories and listeners it creates.
package simfleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/hearthvm/hearth/vmm"
)

// NopDriver is a vmm.Driver without processes: a VM is a map entry, a
// checkpoint is a directory holding one marker file. It is not a backend:
// it exists so the node's own costs (claim table, store, HTTP) can be
// measured without booting anything. Boots and clones are counted.
type NopDriver struct {
	mu  sync.Mutex
	vms map[string]vmm.Handle

	Boots, Clones, Destroys atomic.Int64
}

// NewNopDriver returns an empty NopDriver.
func NewNopDriver() *NopDriver { return &NopDriver{vms: map[string]vmm.Handle{}} }

var _ vmm.Driver = (*NopDriver)(nil)

// Name is "nop".
func (d *NopDriver) Name() string { return "nop" }

// Live is the number of VMs the driver holds.
func (d *NopDriver) Live() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.vms)
}

func (d *NopDriver) add(spec vmm.Spec) vmm.Handle {
	h := vmm.Handle{ID: spec.ID, Backend: "nop", PID: 1, Addr: "127.0.0.1:1", Token: spec.Token}
	d.mu.Lock()
	d.vms[spec.ID] = h
	d.mu.Unlock()
	return h
}

// Boot records a VM.
func (d *NopDriver) Boot(_ context.Context, spec vmm.Spec) (vmm.Handle, error) {
	d.Boots.Add(1)
	return d.add(spec), nil
}

func (d *NopDriver) paused(h vmm.Handle, p bool) (vmm.Handle, error) {
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
func (d *NopDriver) Pause(_ context.Context, h vmm.Handle) (vmm.Handle, error) {
	return d.paused(h, true)
}

// Resume marks the VM running.
func (d *NopDriver) Resume(_ context.Context, h vmm.Handle) (vmm.Handle, error) {
	return d.paused(h, false)
}

const marker = "nop-checkpoint"

// Snapshot writes a marker file into dir.
func (d *NopDriver) Snapshot(_ context.Context, h vmm.Handle, dir string) error {
	d.mu.Lock()
	_, ok := d.vms[h.ID]
	d.mu.Unlock()
	if !ok {
		return vmm.ErrNotRunning
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, marker), []byte(h.ID), 0o600)
}

// Clone records a VM if dir holds a checkpoint.
func (d *NopDriver) Clone(_ context.Context, dir string, spec vmm.Spec) (vmm.Handle, error) {
	if _, err := os.Stat(filepath.Join(dir, marker)); err != nil {
		return vmm.Handle{}, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
	}
	d.Clones.Add(1)
	return d.add(spec), nil
}

// Stop keeps the VM (nothing to persist).
func (d *NopDriver) Stop(_ context.Context, h vmm.Handle) (vmm.Handle, error) { return h, nil }

// Restore re-adds the VM.
func (d *NopDriver) Restore(_ context.Context, h vmm.Handle) (vmm.Handle, error) {
	d.mu.Lock()
	d.vms[h.ID] = h
	d.mu.Unlock()
	return h, nil
}

// Destroy forgets the VM.
func (d *NopDriver) Destroy(_ context.Context, h vmm.Handle) error {
	d.Destroys.Add(1)
	d.mu.Lock()
	delete(d.vms, h.ID)
	d.mu.Unlock()
	return nil
}

// Stats reports nominal figures.
func (d *NopDriver) Stats(_ context.Context, h vmm.Handle) (vmm.Stats, error) {
	d.mu.Lock()
	_, ok := d.vms[h.ID]
	d.mu.Unlock()
	if !ok {
		return vmm.Stats{}, vmm.ErrNotRunning
	}
	return vmm.Stats{CPUCount: 1, MemTotalBytes: 512 << 20}, nil
}

// List returns every VM.
func (d *NopDriver) List(context.Context) ([]vmm.Handle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]vmm.Handle, 0, len(d.vms))
	for _, h := range d.vms {
		out = append(out, h)
	}
	return out, nil
}
