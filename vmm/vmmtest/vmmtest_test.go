package vmmtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hearthvm/hearth/vmm"
)

func spec(id string) vmm.Spec { return vmm.Spec{ID: id} }

// Moved from bench/internal/simfleet (TestNopDriver_CloneNeedsCheckpoint).
func TestDriver_CloneNeedsCheckpoint(t *testing.T) {
	d := New(Options{})
	ctx := context.Background()
	if _, err := d.Clone(ctx, t.TempDir(), spec("x")); err == nil {
		t.Fatal("clone from an empty dir succeeded")
	}
	h, _ := d.Boot(ctx, spec("g"))
	dir := t.TempDir() + "/ck"
	if err := d.Snapshot(ctx, h, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Clone(ctx, dir, spec("c")); err != nil {
		t.Fatal(err)
	}
	if d.Len() != 2 {
		t.Errorf("live = %d, want 2", d.Len())
	}
}

func TestDriver_Knobs(t *testing.T) {
	d := New(Options{Name: "n", Addr: "127.0.0.1:7"})
	ctx := context.Background()
	h, _ := d.Boot(ctx, spec("g"))
	if d.Name() != "n" || h.Backend != "n" || h.Addr != "127.0.0.1:7" || h.PID != 1 {
		t.Fatalf("handle %+v of driver %s", h, d.Name())
	}
	dir := t.TempDir() + "/ck"
	if err := d.Snapshot(ctx, h, dir); err != nil {
		t.Fatal(err)
	}
	if err := d.Snapshot(ctx, h, dir); err == nil {
		t.Fatal("snapshot into an existing dir succeeded")
	}

	d.FailClones(1)
	if _, err := d.Clone(ctx, dir, spec("f")); !errors.Is(err, ErrInjected) {
		t.Fatalf("injected failure: %v", err)
	}
	if _, err := d.Clone(ctx, dir, spec("c1")); err != nil {
		t.Fatal(err)
	}

	d.HoldClones()
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := d.Clone(short, dir, spec("h0")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("held clone: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := d.Clone(ctx, dir, spec("h1")); done <- err }()
	d.ReleaseClones()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	d.ReleaseClones() // idempotent

	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Restore(ctx, h); !errors.Is(err, vmm.ErrNotRunning) {
		t.Fatalf("restore of a destroyed VM: %v", err)
	}
	if b, c, x, n := d.Boots.Load(), d.Clones.Load(), d.Destroys.Load(), d.Len(); b != 1 || c != 2 || x != 1 || n != 2 {
		t.Fatalf("boots %d clones %d destroys %d len %d, want 1 2 1 2", b, c, x, n)
	}
}
