package sim

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// guest starts a `sleep` in a new cgroup <parent>/<rootKey(root)>-<id>,
// its output going to log (when not empty, else /dev/null), like a VM's
// init writing to <root>/<id>/agent.log.
func guest(t *testing.T, parent, root, id, log string) (vmCgroup, *exec.Cmd) {
	t.Helper()
	cg := newCgroup(parent + "/" + rootKey(root) + "-" + id)
	for _, d := range cg.dirs() {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Skip("cannot create a cgroup:", err)
		}
	}
	cmd := exec.Command("sleep", "1000")
	if log != "" {
		if err := os.MkdirAll(filepath.Dir(log), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(log)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cg.kill(); _ = cg.remove() })
	if err := cg.add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	return cg, cmd
}

// alive reports whether pid runs (a reaped or zombie process does not).
func alive(pid int) bool {
	st := procState(pid)
	return st != 0 && st != 'Z' && st != 'X'
}

// A driver's start removes the guests of roots deleted while their driver
// was dead — found through the host registry or, for guests started before
// it, through their log file — and never touches a guest whose root exists,
// whose driver lives (even with its root deleted), or whose root is unknown.
func TestNew_SweepsOrphanGuests(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	registryDir = t.TempDir()
	parent := "hearth-sim-test-" + randHex(4)
	t.Cleanup(func() {
		for _, d := range newCgroup(parent).dirs() {
			_ = os.Remove(d)
		}
	})
	tmp := t.TempDir()
	opts := func(root string) Options {
		return Options{Root: root, AgentCommand: []string{"/bin/true"}, CgroupParent: parent}
	}

	// 1: unregistered (started before the registry), root deleted.
	deadOld := filepath.Join(tmp, "dead-old")
	orphan1, cmd1 := guest(t, parent, deadOld, "vm-1", filepath.Join(deadOld, "vm-1", logFile))
	// 2: registered by a driver that is gone, root deleted.
	deadReg := filepath.Join(tmp, "dead-registered")
	orphan2, cmd2 := guest(t, parent, deadReg, "vm-2", "")
	if err := os.MkdirAll(filepath.Join(registryDir, parent), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(registryDir, parent, rootKey(deadReg)), []byte(deadReg+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// 3: a live driver whose root was deleted under it.
	liveRoot := filepath.Join(tmp, "live")
	if _, err := New(opts(liveRoot)); err != nil {
		t.Fatal(err)
	}
	_, cmd3 := guest(t, parent, liveRoot, "vm-3", filepath.Join(liveRoot, "vm-3", logFile))
	// 4: unregistered, root exists.
	kept := filepath.Join(tmp, "kept")
	_, cmd4 := guest(t, parent, kept, "vm-4", filepath.Join(kept, "vm-4", logFile))
	// 5: unregistered, root unknown (no log file open).
	_, cmd5 := guest(t, parent, filepath.Join(tmp, "unknown"), "vm-5", "")

	for _, dir := range []string{deadOld, deadReg, liveRoot} {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}

	d, err := New(opts(filepath.Join(tmp, "sweeper")))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*exec.Cmd{cmd1, cmd2} {
		if err := poll(10*time.Second, func() bool { return !alive(c.Process.Pid) }); err != nil {
			t.Fatalf("orphan pid %d still runs", c.Process.Pid)
		}
	}
	for _, cg := range []vmCgroup{orphan1, orphan2} {
		for _, dir := range cg.dirs() {
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("orphan cgroup %s left: %v", dir, err)
			}
		}
	}
	for i, c := range []*exec.Cmd{cmd3, cmd4, cmd5} {
		if !alive(c.Process.Pid) {
			t.Fatalf("guest %d (pid %d) was killed", i+3, c.Process.Pid)
		}
	}
	// A second sweep finds nothing more to do.
	if removed, err := d.SweepOrphans(); err != nil || len(removed) != 0 {
		t.Fatalf("second sweep: removed %v, %v", removed, err)
	}
}

// owns fails, rather than answering "not running", when /proc cannot be
// read for lack of descriptors: a VM is never taken for gone (and
// destroyed, or started twice) because the node ran out of them.
func TestOwns_FDExhaustionIsAnError(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	parent := "hearth-sim-test-" + randHex(4)
	t.Cleanup(func() {
		for _, d := range newCgroup(parent).dirs() {
			_ = os.Remove(d)
		}
	})
	cg, cmd := guest(t, parent, t.TempDir(), "vm-1", "")
	d := &Driver{cgParent: parent}
	r := record{ID: "vm-1", PID: cmd.Process.Pid, Cgroup: cg.rel}
	if owned, err := d.owns(r); !owned || err != nil {
		t.Fatalf("owns = %v, %v; want true", owned, err)
	}

	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	low := lim
	low.Cur = 256
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	for {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		fds = append(fds, fd)
	}
	owned, err := d.owns(r)
	for _, fd := range fds {
		unix.Close(fd)
	}
	fds = nil
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if owned || !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("owns out of descriptors = %v, %v; want EMFILE", owned, err)
	}
}
