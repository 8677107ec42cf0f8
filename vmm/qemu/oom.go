package qemu

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/vmm"
)

var _ vmm.OOMCounter = (*Driver)(nil)

// oomTimeout bounds one question to a guest's agent about its OOM kills
// (a guest that does not answer within it is asked again at the node's
// next sweep).
const oomTimeout = 2 * time.Second

// OOMKills implements vmm.OOMCounter from the guest kernel's oom_kill
// counter (/proc/vmstat), which the guest's agent answers
// (agentapi.OOMKillsPath): the processes the guest's OOM killer killed
// because the guest ran out of its memory (the size class's). The kernel
// counts from its boot, so the count restarts from 0 when a Restore boots
// the VM again (after Shutdown) and goes on across Stop and a Restore of
// its memory. A clone's guest kernel comes with the count its checkpoint
// held: the driver keeps that count as the clone's baseline
// (record.OOMBase) and answers the kills since, so a clone starts from 0.
// A paused or stopped VM cannot answer (an error).
func (d *Driver) OOMKills(ctx context.Context, h vmm.Handle) (uint64, error) {
	rec, err := d.load(h)
	if err != nil {
		return 0, err
	}
	if rec.Shutdown || !pidAlive(rec.Handle.PID, filepath.Join(rec.Handle.Dir, "qmp.sock")) {
		return 0, fmt.Errorf("qemu: vm %q: %w", h.ID, vmm.ErrNotRunning)
	}
	if rec.Handle.Paused {
		return 0, fmt.Errorf("qemu: vm %q is paused: its guest cannot count", h.ID)
	}
	n, err := d.guestOOMKills(ctx, rec.Handle.Addr, rec.Handle.Token)
	if err != nil {
		return 0, fmt.Errorf("qemu: vm %q: %w", h.ID, err)
	}
	return oomSince(n, rec.OOMBase), nil
}

// guestOOMKills asks the agent at addr for its kernel's OOM kill count.
func (d *Driver) guestOOMKills(ctx context.Context, addr, token string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, oomTimeout)
	defer cancel()
	c := &agentapi.Client{Addr: addr, Token: token, HTTP: d.httpc}
	return c.OOMKills(ctx)
}

// oomSince is the count of a guest kernel whose counter read kills, since
// it read base (a clone's checkpoint's count). A counter below its base
// started again (the guest booted anew): all of it is new.
func oomSince(kills, base uint64) uint64 {
	if kills < base {
		return kills
	}
	return kills - base
}

// snapshotOOMKills is the count a checkpoint of a running VM records
// (manifest.OOMKills) for its clones' baselines, read just before the VM
// is stopped (a kill between the two counts as the clones'); nil when it
// cannot be read (an agent without the route) within oomTimeout.
func (d *Driver) snapshotOOMKills(ctx context.Context, rec record) *uint64 {
	n, err := d.guestOOMKills(ctx, rec.Handle.Addr, rec.Handle.Token)
	if err != nil {
		d.o.Logf("qemu: vm %s: its OOM kill count for a checkpoint: %v (clones read theirs as they start)", rec.Handle.ID, err)
		return nil
	}
	return &n
}

// cloneOOMBase is the baseline of a clone of man whose agent answers at
// addr with token: the count its checkpoint recorded, or (a checkpoint of
// a paused VM records none) the count the clone's kernel reads as it
// starts. 0 when neither is known.
func (d *Driver) cloneOOMBase(ctx context.Context, man manifest, addr, token string) uint64 {
	if man.OOMKills != nil {
		return *man.OOMKills
	}
	n, err := d.guestOOMKills(ctx, addr, token)
	if err != nil {
		d.o.Logf("qemu: a clone's OOM kill count at its start: %v (counting from 0)", err)
		return 0
	}
	return n
}
