package sim_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hearthvm/hearth/vmm"
)

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// bootID reads the guest's /proc/sys/kernel/random/boot_id.
func bootID(t *testing.T, h vmm.Handle) string {
	t.Helper()
	r := run(t, h, "cat /proc/sys/kernel/random/boot_id")
	id := strings.TrimSpace(r.stdout)
	if r.exit != 0 || !uuidRE.MatchString(id) {
		t.Fatalf("boot_id: %v", r)
	}
	return id
}

// A VM's boot id is its boot's, not the host kernel's: Pause/Resume (a
// pause with memory) and a Restore that re-attaches keep it; Stop then
// Restore (a pause without memory), the Restore of a VM whose init died
// and a clone are new boots with new ids. What the guest wrote to its disk
// is kept across them.
func TestBootID_NewAtEachStartKeptWhileTheVMRuns(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := newDriver(t, root)
	h := boot(t, d, vmm.Spec{ID: "vm", Token: "tok"})
	first := bootID(t, h)
	host, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	if first == strings.TrimSpace(string(host)) {
		t.Fatalf("the guest reads the host's boot id %s", first)
	}
	if r := run(t, h, "echo kept > /kept.txt"); r.exit != 0 {
		t.Fatalf("write: %v", r)
	}

	if h, err = d.Pause(ctx, h); err != nil {
		t.Fatal(err)
	}
	if h, err = d.Resume(ctx, h); err != nil {
		t.Fatal(err)
	}
	if got := bootID(t, h); got != first {
		t.Fatalf("pause with memory: boot id %s, was %s", got, first)
	}
	if h, err = newDriver(t, root).Restore(ctx, h); err != nil { // re-attach
		t.Fatal(err)
	}
	if got := bootID(t, h); got != first {
		t.Fatalf("a re-attaching Restore: boot id %s, was %s", got, first)
	}

	if h, err = d.Stop(ctx, h); err != nil {
		t.Fatal(err)
	}
	if h, err = d.Restore(ctx, h); err != nil {
		t.Fatal(err)
	}
	second := bootID(t, h)
	if second == first {
		t.Fatalf("Stop+Restore (a pause without memory) kept boot id %s", first)
	}
	if r := run(t, h, "cat /kept.txt"); r.stdout != "kept\n" {
		t.Fatalf("Stop+Restore lost the disk: %v", r)
	}

	// The init dies (the VM crashed): Restore boots it again.
	if err := syscall.Kill(h.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(h.PID) {
		if time.Now().After(deadline) {
			t.Fatalf("init %d outlived SIGKILL", h.PID)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if h, err = d.Restore(ctx, h); err != nil {
		t.Fatal(err)
	}
	if third := bootID(t, h); third == second || third == first {
		t.Fatalf("the Restore of a dead VM kept boot id %s", third)
	}

	snap := filepath.Join(t.TempDir(), "snap")
	if err := d.Snapshot(ctx, h, snap); err != nil {
		t.Fatal(err)
	}
	c, err := d.Clone(ctx, snap, vmm.Spec{ID: "clone", Token: "tok-c"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Destroy(ctx, c) })
	if got := bootID(t, c); got == bootID(t, h) {
		t.Fatalf("a clone has its source's boot id %s", got)
	}
}

// The guest's root cannot change its boot id: the file is bound read-only
// and owned by an id it does not map.
func TestBootID_GuestCannotChangeIt(t *testing.T) {
	d := newDriver(t, t.TempDir())
	h := boot(t, d, vmm.Spec{ID: "vm"})
	id := bootID(t, h)
	run(t, h, `echo 00000000-0000-4000-8000-000000000000 > /proc/sys/kernel/random/boot_id
echo 00000000-0000-4000-8000-000000000000 > /.hearth/boot_id
chmod 666 /.hearth/boot_id
rm -f /.hearth/boot_id; echo 00000000-0000-4000-8000-000000000000 > /.hearth/boot_id
umount /proc/sys/kernel/random/boot_id`)
	if got := bootID(t, h); got != id {
		t.Fatalf("the guest changed its boot id from %s to %s", id, got)
	}
}
