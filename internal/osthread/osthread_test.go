package osthread

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// childEnv makes the test binary the child below instead of the tests.
const childEnv = "HEARTH_OSTHREAD_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		child(mode)
		return
	}
	os.Exit(m.Run())
}

// blocked is how many goroutines the child puts in a blocking system call
// at once: past the threads a Go process starts by itself (8 were seen),
// below what Reserve keeps.
const blocked = 24

// child reserves threads (mode "reserve") or not ("none"), closes its
// task budget (RLIMIT_NPROC: its uid's tasks are its threads) at the
// threads it has, then puts blocked goroutines in a blocking system call
// at once and says "survived".
func child(mode string) {
	if mode == "reserve" {
		Reserve(blocked + 8)
	}
	n, err := threads()
	if err == nil {
		err = unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: uint64(n), Max: uint64(n)})
	}
	if err != nil {
		fmt.Println("child:", err)
		os.Exit(2)
	}
	fmt.Printf("%s: %d threads, and no more may start\n", mode, n)
	var wg sync.WaitGroup
	for range blocked {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts := syscall.Timespec{Nsec: int64(300 * time.Millisecond)}
			_ = syscall.Nanosleep(&ts, nil)
		}()
	}
	wg.Wait()
	fmt.Println("survived")
}

// runChild runs the test binary as child mode under an unprivileged uid
// of its own (no account: the child's tasks are the uid's only ones), as
// in a VM whose pids.max a fork storm filled. It returns the child's
// output and error.
func runChild(t *testing.T, mode string) (string, error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the child runs as a uid of its own")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir() // and its parent: 0700, the child's uid must reach the copy
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "child")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	const uid = 3_999_917
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, "GOMAXPROCS=2")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	t.Logf("%s", strings.SplitN(string(out), "\n", 2)[0])
	return string(out), err
}

// threads is this process's thread count.
func threads() (int, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("no Threads: line in /proc/self/status")
}

// TestReserve_ThreadsOutliveAFullTaskBudget: a process that reserved its
// threads runs many goroutines in blocking system calls at once after its
// task budget is full; one that did not is killed by the Go runtime the
// moment it needs one thread more — the failure Reserve exists for (if
// this half ever passes, the runtime changed and the test proves nothing).
func TestReserve_ThreadsOutliveAFullTaskBudget(t *testing.T) {
	out, err := runChild(t, "reserve")
	if err != nil || !strings.Contains(out, "survived") {
		t.Fatalf("with Reserve: %v\n%s", err, out)
	}
	out, err = runChild(t, "none")
	if err == nil || strings.Contains(out, "survived") || !strings.Contains(out, "newosproc") {
		t.Fatalf("without Reserve the child lived (%v): the test cannot tell Reserve works\n%.2000s", err, out)
	}
}
