package qemu

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

func TestOOMSince(t *testing.T) {
	for _, tc := range []struct {
		kills, base, want uint64
	}{
		{0, 0, 0},
		{3, 0, 3},
		{5, 5, 0}, // a clone, as it starts: its checkpoint's kills are not its own
		{7, 5, 2},
		{1, 5, 1}, // below the base: the guest booted anew, every kill is new
	} {
		if got := oomSince(tc.kills, tc.base); got != tc.want {
			t.Errorf("oomSince(%d, %d) = %d, want %d", tc.kills, tc.base, got, tc.want)
		}
	}
}

// hogMemory runs a process in h's guest that doubles a string until the
// guest's OOM killer kills it.
func hogMemory(t *testing.T, h vmm.Handle) {
	t.Helper()
	out, code, err := run(h.Addr, h.Token, `awk 'BEGIN { s = "x"; while (1) s = s s }'; echo "awk ended: $?"`)
	t.Logf("memory hog in %s: %q exit %d %v", h.ID, out, code, err)
}

// waitOOMKills polls h's count until it is at least want (bounded).
func waitOOMKills(t *testing.T, d *Driver, h vmm.Handle, want uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := d.OOMKills(context.Background(), h)
		if err == nil && n >= want {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: OOM kills %d (%v), want >= %d", h.ID, n, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// OOMKills counts the kills of the guest's own OOM killer since the VM's
// processes started: 0 on a new boot, the processes a memory hog lost
// past its size class's memory, 0 for a clone whose checkpoint had
// counted some, and 0 again after Shutdown and a Restore that boots it
// anew.
// A paused VM cannot tell.
func TestOOMKills_CountsTheGuestsKillsSinceItsProcessesStarted(t *testing.T) {
	d := guestDriver(t, AccelTCG)
	// A small guest, so that the hog reaches its limit within seconds.
	d.o.Config.Sizes = map[string]Size{"small": {VCPUs: 1, MemoryMiB: 128}}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h, err := d.Boot(ctx, vmm.Spec{ID: "hog", Template: "img", Net: "none", Size: "small", Token: "tok-hog"})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, d, h)
	if n, err := d.OOMKills(ctx, h); err != nil || n != 0 {
		t.Fatalf("a new boot: OOM kills %d, %v; want 0", n, err)
	}
	hogMemory(t, h)
	kills := waitOOMKills(t, d, h, 1)

	snap := filepath.Join(t.TempDir(), "ckpt")
	if err := d.Snapshot(ctx, h, snap); err != nil {
		t.Fatal(err)
	}
	var man manifest
	if err := uds.ReadJSON(filepath.Join(snap, "snapshot.json"), &man); err != nil || man.OOMKills == nil || *man.OOMKills != kills {
		t.Fatalf("checkpoint's OOM kills = %v (%v), want %d", man.OOMKills, err, kills)
	}
	c, err := d.Clone(ctx, snap, vmm.Spec{ID: "hog-clone", Token: "tok-clone"})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, d, c)
	if n, err := d.OOMKills(ctx, c); err != nil || n != 0 {
		t.Fatalf("a clone of a checkpoint with %d kills: OOM kills %d, %v; want 0", kills, n, err)
	}
	if n, err := d.OOMKills(ctx, h); err != nil || n != kills {
		t.Fatalf("the source after its checkpoint: OOM kills %d, %v; want %d", n, err, kills)
	}

	if h, err = d.Pause(ctx, h); err != nil {
		t.Fatal(err)
	}
	if _, err := d.OOMKills(ctx, h); err == nil {
		t.Fatal("a paused VM answered an OOM kill count")
	}
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}

	// The clone boots anew: its kernel counts from 0, and so does the
	// driver, the checkpoint's count forgotten.
	if c, err = d.Shutdown(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := d.OOMKills(ctx, c); err == nil {
		t.Fatal("a shut-down VM answered an OOM kill count")
	}
	if c, err = d.Restore(ctx, c); err != nil {
		t.Fatal(err)
	}
	if n, err := d.OOMKills(ctx, c); err != nil || n != 0 {
		t.Fatalf("after Shutdown and a Restore that boots anew: OOM kills %d, %v; want 0", n, err)
	}
	if rec, err := d.load(c); err != nil || rec.OOMBase != 0 {
		t.Fatalf("after a new boot the clone's baseline is %d (%v), want 0", rec.OOMBase, err)
	}
	if err := d.Destroy(ctx, c); err != nil {
		t.Fatal(err)
	}
}
