package qemu

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hearthvm/hearth/vmm"
)

// guestBootID reads the guest kernel's boot id.
func guestBootID(t *testing.T, h vmm.Handle) string {
	t.Helper()
	out, code, err := run(h.Addr, h.Token, "cat /proc/sys/kernel/random/boot_id")
	if err != nil || code != 0 || len(strings.TrimSpace(out)) != 36 {
		t.Fatalf("boot_id: %q %d %v", out, code, err)
	}
	return strings.TrimSpace(out)
}

// Shutdown then Restore (the node's pause without memory) boots the guest
// again: a new boot id, no process of the old boot, and the files it wrote
// just before — never synced by the tenant — on its disk. Pause/Resume and
// Stop/Restore keep the memory: the same boot.
func TestShutdown_RestoreIsANewBootKeepingTheDisk(t *testing.T) {
	d := diskDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	h, err := d.Boot(ctx, vmm.Spec{ID: "cold", Size: "small", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, d, h)
	first := guestBootID(t, h)
	if out, code, err := run(h.Addr, h.Token, `echo kept > ~/kept.txt; setsid sleep 600 </dev/null >/dev/null 2>&1 & echo started`); err != nil || code != 0 || out != "started\n" {
		t.Fatalf("write and background: %q %d %v", out, code, err)
	}
	if h, err = d.Pause(ctx, h); err != nil {
		t.Fatal(err)
	}
	if h, err = d.Resume(ctx, h); err != nil {
		t.Fatal(err)
	}
	if got := guestBootID(t, h); got != first {
		t.Fatalf("Pause/Resume: boot id %s, was %s", got, first)
	}

	if h, err = d.Shutdown(ctx, h); err != nil || h.PID != 0 {
		t.Fatalf("shutdown: %v pid %d", err, h.PID)
	}
	if hs, _ := d.List(ctx); len(hs) != 0 {
		t.Fatalf("a shut-down VM is listed: %v", hs)
	}
	if h, err = d.Shutdown(ctx, h); err != nil { // idempotent
		t.Fatalf("second shutdown: %v", err)
	}
	if h, err = d.Restore(ctx, h); err != nil {
		t.Fatalf("restore: %v", err)
	}
	second := guestBootID(t, h)
	if second == first {
		t.Fatalf("Shutdown+Restore kept boot id %s: the memory came back", first)
	}
	out, _, err := run(h.Addr, h.Token, `cat ~/kept.txt; pgrep -x sleep || echo no-sleep`)
	if err != nil || out != "kept\nno-sleep\n" {
		t.Fatalf("after the new boot: %q %v; want the file kept and no sleep", out, err)
	}
	again, err := d.Restore(ctx, h) // alive: re-attach, the same boot
	if err != nil || again.PID != h.PID {
		t.Fatalf("re-attach: %v pid %d vs %d", err, again.PID, h.PID)
	}

	// Stop keeps the memory (the node's orderly shutdown).
	if h, err = d.Stop(ctx, h); err != nil {
		t.Fatal(err)
	}
	if h, err = d.Restore(ctx, h); err != nil {
		t.Fatal(err)
	}
	if got := guestBootID(t, h); got != second {
		t.Fatalf("Stop/Restore: boot id %s, was %s", got, second)
	}
}
