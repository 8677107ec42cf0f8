// Package vmmtest is an in-memory vmm.Driver for tests and benchmarks: no
// processes. A VM is a record in a map and a checkpoint is a directory
// holding one marker file, so everything above the driver (the node's claim
// table, store, HTTP API) can run for real without booting anything.
//
// Optional knobs cover what tests need: Clone can be held until released
// (HoldClones, ReleaseClones) or made to fail (FailClones), and boots,
// clones and destroys are counted. Every VM reports the same agent address
// (Options.Addr); nothing listens there.
//
// It depends only on package vmm and the standard library, so any package's
// tests (including the node's own) can import it.
package vmmtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hearthvm/hearth/vmm"
)

// Defaults of Options.
const (
	DefaultName = "vmmtest"
	DefaultAddr = "127.0.0.1:9"
)

// Marker is the file a checkpoint directory holds.
const Marker = "vmmtest-checkpoint"

// ErrInjected is the error of a clone failed by FailClones.
var ErrInjected = errors.New("vmmtest: injected clone failure")

// Options configure New. The zero value is usable.
type Options struct {
	// Name is the driver's Name and every handle's Backend (default
	// DefaultName).
	Name string
	// Addr is every handle's agent address (default DefaultAddr).
	Addr string
}

// Driver is the in-memory vmm.Driver. Its methods are safe for concurrent
// use.
type Driver struct {
	name, addr string

	mu   sync.Mutex
	vms  map[string]vmm.Handle
	hold chan struct{} // non-nil while clones are held

	failClones atomic.Int64

	// Boots, Clones and Destroys count successful boots, successful clones
	// and destroys of VMs the driver held.
	Boots, Clones, Destroys atomic.Int64
}

var _ vmm.Driver = (*Driver)(nil)

// New returns an empty Driver.
func New(opts Options) *Driver {
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if opts.Addr == "" {
		opts.Addr = DefaultAddr
	}
	return &Driver{name: opts.Name, addr: opts.Addr, vms: map[string]vmm.Handle{}}
}

// HoldClones makes Clone block until ReleaseClones (or its ctx ends).
func (d *Driver) HoldClones() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hold == nil {
		d.hold = make(chan struct{})
	}
}

// ReleaseClones lets held and future clones through, until the next
// HoldClones.
func (d *Driver) ReleaseClones() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hold != nil {
		close(d.hold)
		d.hold = nil
	}
}

// FailClones makes the next n clones fail with ErrInjected (n ≤ 0: none).
func (d *Driver) FailClones(n int) { d.failClones.Store(int64(n)) }

// Len is the number of VMs the driver holds.
func (d *Driver) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.vms)
}

// Name is Options.Name.
func (d *Driver) Name() string { return d.name }

func (d *Driver) add(spec vmm.Spec) vmm.Handle {
	h := vmm.Handle{ID: spec.ID, Backend: d.name, PID: 1, Addr: d.addr, Token: spec.Token, Hold: spec.Hold}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.vms[spec.ID] = h
	return h
}

func (d *Driver) get(id string) (vmm.Handle, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.vms[id]
	return h, ok
}

// Boot records a VM.
func (d *Driver) Boot(_ context.Context, spec vmm.Spec) (vmm.Handle, error) {
	d.Boots.Add(1)
	return d.add(spec), nil
}

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

// Snapshot creates dir, which must not exist, holding the marker file.
func (d *Driver) Snapshot(_ context.Context, h vmm.Handle, dir string) error {
	if _, ok := d.get(h.ID); !ok {
		return vmm.ErrNotRunning
	}
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s exists", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, Marker), []byte(h.ID), 0o600)
}

// Clone records a VM if dir holds a checkpoint, after waiting while clones
// are held and unless a failure was injected.
func (d *Driver) Clone(ctx context.Context, dir string, spec vmm.Spec) (vmm.Handle, error) {
	d.mu.Lock()
	hold := d.hold
	d.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return vmm.Handle{}, ctx.Err()
		}
	}
	if _, err := os.Stat(filepath.Join(dir, Marker)); err != nil {
		return vmm.Handle{}, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
	}
	for {
		n := d.failClones.Load()
		if n <= 0 {
			break
		}
		if d.failClones.CompareAndSwap(n, n-1) {
			return vmm.Handle{}, ErrInjected
		}
	}
	d.Clones.Add(1)
	return d.add(spec), nil
}

// Stop keeps the VM's record and clears the handle's PID.
func (d *Driver) Stop(_ context.Context, h vmm.Handle) (vmm.Handle, error) {
	h.PID = 0
	return h, nil
}

// Restore re-attaches a VM the driver still holds; others are not running.
func (d *Driver) Restore(_ context.Context, h vmm.Handle) (vmm.Handle, error) {
	if _, ok := d.get(h.ID); !ok {
		return h, vmm.ErrNotRunning
	}
	h.PID = 1
	return h, nil
}

// Destroy forgets the VM; a VM already gone is no error.
func (d *Driver) Destroy(_ context.Context, h vmm.Handle) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.vms[h.ID]; ok {
		d.Destroys.Add(1)
	}
	delete(d.vms, h.ID)
	return nil
}

// Stats reports fixed figures: 1 CPU, 1 GiB total, 1 MiB used (measured
// unless paused).
func (d *Driver) Stats(_ context.Context, h vmm.Handle) (vmm.Stats, error) {
	v, ok := d.get(h.ID)
	if !ok {
		return vmm.Stats{}, vmm.ErrNotRunning
	}
	return vmm.Stats{CPUCount: 1, MemTotalBytes: 1 << 30, MemUsedBytes: 1 << 20, MemUsedMeasured: !v.Paused, MeasuredAt: time.Now()}, nil
}

// List returns every VM the driver holds.
func (d *Driver) List(context.Context) ([]vmm.Handle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]vmm.Handle, 0, len(d.vms))
	for _, h := range d.vms {
		out = append(out, h)
	}
	return out, nil
}
