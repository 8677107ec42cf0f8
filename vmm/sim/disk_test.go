package sim_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hearthvm/hearth/internal/testagent"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/sim"
)

func newSizedDriver(t testing.TB, root string, disk int64) *sim.Driver {
	t.Helper()
	d, err := sim.New(sim.Options{Root: root, AgentCommand: []string{testagent.Path(t)}, BootTimeout: 20 * time.Second, DiskBytes: disk})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// allocated is the bytes the files under p take on the host's disk (every
// inode once, mounts under p not entered), as du -x counts them.
func allocated(t testing.TB, p string) int64 {
	t.Helper()
	var top syscall.Stat_t
	if err := syscall.Lstat(p, &top); err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	var n int64
	err := filepath.Walk(p, func(_ string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		if st.Dev != top.Dev {
			if info.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !seen[st.Ino] {
			seen[st.Ino] = true
			n += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A sandbox's disk has the driver's size: the guest's df shows it, writing
// past it is ENOSPC in the guest, and the host's disk holds no more than
// the image (not what the guest tried to write). Stats read its file system.
func TestDisk_GuestWritesPastItsSizeGetENOSPCNotTheHost(t *testing.T) {
	ctx := context.Background()
	const size = 64 << 20
	d := newSizedDriver(t, t.TempDir(), size)
	h := boot(t, d, vmm.Spec{ID: "vm", Net: "none"})
	r := run(t, h, "df -k / | tail -1")
	f := strings.Fields(r.stdout)
	if len(f) < 2 {
		t.Fatalf("df: %v", r)
	}
	if kb, _ := strconv.ParseInt(f[1], 10, 64); kb <= 0 || kb > size>>10 {
		t.Fatalf("the guest's / is %d KiB, want at most the disk's %d KiB: %v", kb, size>>10, r)
	}
	r = run(t, h, "dd if=/dev/urandom of=/fill bs=1M count=100 2>&1; echo exit=$?")
	if !strings.Contains(r.stdout, "No space left") || strings.Contains(r.stdout, "exit=0") {
		t.Fatalf("writing 100 MiB on a 64 MiB disk: %v", r)
	}
	if n := allocated(t, h.Dir); n > size+8<<20 {
		t.Fatalf("the VM takes %d bytes of the host's disk, its disk is %d", n, size)
	}
	st, err := d.Stats(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	if st.DiskTotalBytes <= 0 || st.DiskTotalBytes > size || st.DiskUsedBytes < 40<<20 {
		t.Fatalf("stats: disk %d of %d bytes used", st.DiskUsedBytes, st.DiskTotalBytes)
	}
	if r := run(t, h, "rm /fill && echo ok > /after && cat /after"); r.stdout != "ok\n" {
		t.Fatalf("the disk after freeing it: %v", r)
	}
}

// A snapshot takes what the guest's file system holds, not what its files
// claim: a 1 GiB sparse file with 8 names, a 10 TiB sparse file and 32 MiB
// of zeros take a few MiB on the host; a clone sees them all as they were.
func TestSnapshot_SparseFilesAndHardLinksStaySmall(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, t.TempDir())
	h := boot(t, d, vmm.Spec{ID: "vm", Net: "none"})
	script := `truncate -s 1G /big && for i in 1 2 3 4 5 6 7; do ln /big /big.$i; done &&
		truncate -s 10995116277760 /huge && dd if=/dev/zero of=/zeros bs=1M count=32 2>/dev/null && echo data > /small && echo ok`
	if r := run(t, h, script); r.stdout != "ok\n" {
		t.Fatalf("setup: %v", r)
	}
	ck := filepath.Join(t.TempDir(), "ck")
	if err := d.Snapshot(ctx, h, ck); err != nil {
		t.Fatal(err)
	}
	if n := allocated(t, ck); n > 16<<20 {
		t.Fatalf("the snapshot takes %d bytes of the host's disk", n)
	}
	c, err := d.Clone(ctx, ck, vmm.Spec{ID: "clone", Token: "c"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Destroy(ctx, c) })
	if n := allocated(t, c.Dir); n > 32<<20 {
		t.Fatalf("the clone takes %d bytes of the host's disk", n)
	}
	if r := run(t, c, "stat -c '%h %s' /big.7 /huge /zeros; cat /small"); r.stdout != "8 1073741824\n1 10995116277760\n1 33554432\ndata\n" {
		t.Fatalf("the clone's files: %v", r)
	}
}

// A bound on the snapshot's bytes (the node's remaining budget) stops the
// copy once passed: the snapshot fails with ErrSnapshotTooLarge and leaves
// nothing; within the bound it succeeds.
func TestSnapshot_LimitStopsTheCopy(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, t.TempDir())
	h := boot(t, d, vmm.Spec{ID: "vm", Net: "none"})
	if r := run(t, h, "dd if=/dev/urandom of=/data bs=1M count=24 2>/dev/null && echo ok"); r.stdout != "ok\n" {
		t.Fatalf("setup: %v", r)
	}
	parent := t.TempDir()
	ck := filepath.Join(parent, "ck")
	err := d.Snapshot(vmm.WithSnapshotLimit(ctx, 8<<20), h, ck)
	if !errors.Is(err, vmm.ErrSnapshotTooLarge) {
		t.Fatalf("snapshot of 24 MiB within 8 MiB: %v", err)
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 0 {
		t.Fatalf("a stopped snapshot left %v", ents)
	}
	mustHealthy(t, h)
	if frozen(t, h) {
		t.Fatal("a stopped snapshot left the VM frozen")
	}
	if err := d.Snapshot(vmm.WithSnapshotLimit(ctx, 64<<20), h, ck); err != nil {
		t.Fatal(err)
	}
	if n := allocated(t, ck); n > 64<<20 || n < 24<<20 {
		t.Fatalf("the snapshot takes %d bytes", n)
	}
}

// loopsUnder lists the loop devices whose backing file is under root.
func loopsUnder(t testing.TB, root string) []string {
	t.Helper()
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), root+"/") {
			out = append(out, f+": "+strings.TrimSpace(string(b)))
		}
	}
	return out
}

// mountsUnder lists the mount points under root in this mount namespace.
func mountsUnder(t testing.TB, root string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], root+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// Every way a VM ends — Destroy, Stop, a failed start, a restart through
// Restore, a re-adoption by a second driver (a node crash), a clone and a
// snapshot — leaves no loop device and no mount behind.
func TestDisk_NoLeakedLoopDevicesOrMounts(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := newDriver(t, root)
	a := boot(t, d, vmm.Spec{ID: "a", Net: "none"})
	if got := loopsUnder(t, root); len(got) != 1 {
		t.Fatalf("one VM, loop devices %v", got)
	}
	ck := filepath.Join(t.TempDir(), "ck")
	if err := d.Snapshot(ctx, a, ck); err != nil {
		t.Fatal(err)
	}
	c, err := d.Clone(ctx, ck, vmm.Spec{ID: "c"})
	if err != nil {
		t.Fatal(err)
	}
	// A node crash: a second driver re-adopts a, then restarts it.
	d2 := newDriver(t, root)
	if a, err = d2.Restore(ctx, a); err != nil {
		t.Fatal(err)
	}
	if a, err = d2.Stop(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got := mountsUnder(t, a.Dir); len(got) != 0 {
		t.Fatalf("a stopped VM keeps mounts %v", got)
	}
	if a, err = d2.Restore(ctx, a); err != nil {
		t.Fatal(err)
	}
	mustHealthy(t, a)
	// A start that fails after the disk is mounted.
	bad, err := sim.New(sim.Options{Root: root, AgentCommand: []string{busybox(t), "false"}, BootTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Boot(ctx, vmm.Spec{ID: "bad"}); err == nil {
		t.Fatal("a boot whose agent exits succeeded")
	}
	if _, err := bad.Clone(ctx, ck, vmm.Spec{ID: "bad2"}); err == nil {
		t.Fatal("a clone whose agent exits succeeded")
	}
	for _, h := range []vmm.Handle{a, c} {
		if err := d2.Destroy(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	// Unmounting frees a loop device as soon as its file system is gone.
	deadline := time.Now().Add(10 * time.Second)
	for {
		loops, mounts := loopsUnder(t, root), mountsUnder(t, root)
		if len(loops) == 0 && len(mounts) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left behind: loop devices %v, mounts %v", loops, mounts)
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), ".") {
				t.Fatalf("left in the root: %v", e.Name())
			}
		}
	}
}

// A checkpoint of an earlier sim (version 2: a copied upper/ directory) is
// refused with a clear error, and a VM directory of an earlier sim (an
// upper/ directory, no disk image) is not restored.
func TestDisk_EarlierFormatsAreRefused(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := newDriver(t, root)
	ck := t.TempDir()
	if err := os.Mkdir(filepath.Join(ck, "upper"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ck, "manifest.json"), []byte(`{"backend":"sim","version":2}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := d.Clone(ctx, ck, vmm.Spec{ID: "c"})
	if !errors.Is(err, vmm.ErrSnapshotInvalid) || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("clone of a version 2 checkpoint: %v", err)
	}
	dir := filepath.Join(root, "old")
	if err := os.MkdirAll(filepath.Join(dir, "upper"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vm.json"), []byte(`{"id":"old"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Restore(ctx, vmm.Handle{ID: "old", Dir: dir}); !errors.Is(err, vmm.ErrNotRunning) {
		t.Fatalf("restore of an earlier sim's VM: %v", err)
	}
}

// A node restarted in a new mount namespace (a container's) no longer sees
// the host mount of a running VM's disk: Stats still reads the disk, and a
// snapshot still flushes what the guest wrote before copying the image.
func TestDisk_SnapshotFlushesWithoutTheHostMount(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, t.TempDir())
	h := boot(t, d, vmm.Spec{ID: "vm", Net: "none"})
	if r := run(t, h, "echo written > /home/user/f && echo ok"); r.stdout != "ok\n" {
		t.Fatalf("write: %v", r)
	}
	if err := syscall.Unmount(filepath.Join(h.Dir, "upperfs"), syscall.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	st, err := d.Stats(ctx, h)
	if err != nil || st.DiskTotalBytes <= 0 {
		t.Fatalf("stats without the host mount: %+v %v", st, err)
	}
	ck := filepath.Join(t.TempDir(), "ck")
	if err := d.Snapshot(ctx, h, ck); err != nil {
		t.Fatal(err)
	}
	c, err := d.Clone(ctx, ck, vmm.Spec{ID: "clone"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Destroy(ctx, c) })
	if r := run(t, c, "cat /home/user/f"); r.stdout != "written\n" {
		t.Fatalf("the clone's file: %v", r)
	}
}
