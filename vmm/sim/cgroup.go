package sim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

const cgroupRoot = "/sys/fs/cgroup"

// v1Controllers are the cgroup v1 hierarchies a VM joins.
var v1Controllers = []string{"freezer", "memory", "cpu", "cpuacct", "pids"}

// cgroupV2 reports whether /sys/fs/cgroup is the unified (v2) hierarchy.
func cgroupV2() bool {
	_, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers"))
	return err == nil
}

// vmCgroup is one VM's cgroup: its path relative to each hierarchy's root
// (e.g. "hearth-sim/3f2a9c1b-vm-1") in v1's freezer, memory, cpu, cpuacct
// and pids hierarchies, or in the v2 unified hierarchy.
type vmCgroup struct {
	rel string
	v2  bool
	// root is the mount point of the hierarchies (cgroupRoot; tests point a
	// v2 cgroup at a hybrid system's /sys/fs/cgroup/unified).
	root string
}

func newCgroup(rel string) vmCgroup { return vmCgroup{rel: rel, v2: cgroupV2(), root: cgroupRoot} }

// dirs returns the cgroup's directories (one per distinct v1 hierarchy).
func (c vmCgroup) dirs() []string {
	if c.v2 {
		return []string{filepath.Join(c.root, c.rel)}
	}
	var out []string
	seen := map[string]bool{}
	for _, ctl := range v1Controllers {
		base, err := filepath.EvalSymlinks(filepath.Join(c.root, ctl))
		if err != nil || seen[base] {
			continue
		}
		seen[base] = true
		out = append(out, filepath.Join(base, c.rel))
	}
	return out
}

// ctl returns the directory of the hierarchy holding controller name.
func (c vmCgroup) ctl(name string) string {
	if c.v2 {
		return filepath.Join(c.root, c.rel)
	}
	return filepath.Join(c.root, name, c.rel)
}

// create makes the cgroup and sets the size class's limits: memory, CPU
// quota (cpus × 100ms per 100ms) and a pids limit.
func (c vmCgroup) create(cpus int, mem int64, pids int) error {
	if c.v2 {
		// Enable the controllers down the path (best effort: the root
		// may already delegate them).
		parts := strings.Split(c.rel, "/")
		p := c.root
		for _, part := range parts {
			_ = os.WriteFile(filepath.Join(p, "cgroup.subtree_control"), []byte("+cpu +memory +pids"), 0)
			p = filepath.Join(p, part)
			if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("sim: cgroup %s: %w", p, err)
			}
		}
		dir := c.ctl("")
		writes := map[string]string{
			"memory.max":      strconv.FormatInt(mem, 10),
			"memory.swap.max": "0",
			"cpu.max":         fmt.Sprintf("%d 100000", cpus*100000),
			"pids.max":        strconv.Itoa(pids),
		}
		for f, v := range writes {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0); err != nil && f != "memory.swap.max" {
				return fmt.Errorf("sim: cgroup %s: %w", f, err)
			}
		}
		return nil
	}
	for _, d := range c.dirs() {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("sim: cgroup %s: %w", d, err)
		}
	}
	writes := []struct{ ctl, file, val string }{
		{"memory", "memory.limit_in_bytes", strconv.FormatInt(mem, 10)},
		{"cpu", "cpu.cfs_period_us", "100000"},
		{"cpu", "cpu.cfs_quota_us", strconv.Itoa(cpus * 100000)},
		{"pids", "pids.max", strconv.Itoa(pids)},
	}
	for _, w := range writes {
		if err := os.WriteFile(filepath.Join(c.ctl(w.ctl), w.file), []byte(w.val), 0); err != nil {
			return fmt.Errorf("sim: cgroup %s/%s: %w", w.ctl, w.file, err)
		}
	}
	return nil
}

// add moves pid into the cgroup (every hierarchy).
func (c vmCgroup) add(pid int) error {
	for _, d := range c.dirs() {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("sim: joining cgroup %s: %w", d, err)
		}
	}
	return nil
}

// procs returns the pids in the cgroup (from the freezer hierarchy on v1).
func (c vmCgroup) procs() []int {
	f, err := os.Open(filepath.Join(c.ctl("freezer"), "cgroup.procs"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if pid, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// contains reports whether pid is a member of the cgroup, read from
// /proc/<pid>/cgroup (the pid-reuse guard).
func (c vmCgroup) contains(pid int) bool {
	in, _ := c.containsErr(pid)
	return in
}

// containsErr is contains failing when /proc cannot be read (EMFILE...)
// rather than answering "not a member".
func (c vmCgroup) containsErr(pid int) (bool, error) {
	if pid <= 0 || c.rel == "" {
		return false, nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		if gone(err) {
			return false, nil
		}
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if c.v2 && parts[0] != "0" {
			continue
		}
		if !c.v2 && !hasController(parts[1], "freezer") {
			continue
		}
		return parts[2] == "/"+c.rel, nil
	}
	return false, nil
}

func hasController(list, name string) bool {
	for _, n := range strings.Split(list, ",") {
		if n == name {
			return true
		}
	}
	return false
}

// freeze freezes (or thaws) every task of the cgroup and waits until the
// kernel reports the new state.
func (c vmCgroup) freeze(on bool) error {
	var file, val, stateFile, want string
	if c.v2 {
		file, stateFile = "cgroup.freeze", "cgroup.events"
		val, want = "0", "frozen 0"
		if on {
			val, want = "1", "frozen 1"
		}
	} else {
		file, stateFile = "freezer.state", "freezer.state"
		val, want = "THAWED", "THAWED"
		if on {
			val, want = "FROZEN", "FROZEN"
		}
	}
	dir := c.ctl("freezer")
	if err := os.WriteFile(filepath.Join(dir, file), []byte(val), 0); err != nil {
		return fmt.Errorf("sim: %s %s: %w", dir, file, err)
	}
	return poll(5*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, stateFile))
		return strings.Contains(string(b), want)
	})
}

// kill SIGKILLs every process of the cgroup and waits until it is empty:
// cgroup.kill on v2 when the kernel has it, else freeze, SIGKILL each task,
// thaw (a frozen cgroup cannot fork, so no task escapes the sweep).
func (c vmCgroup) kill() error {
	if _, err := os.Stat(c.ctl("freezer")); err != nil {
		return nil // no cgroup: nothing runs in it
	}
	if c.v2 {
		if err := os.WriteFile(filepath.Join(c.ctl(""), "cgroup.kill"), []byte("1"), 0); err == nil {
			return poll(10*time.Second, func() bool { return len(c.procs()) == 0 })
		}
	}
	return poll(10*time.Second, func() bool {
		if len(c.procs()) == 0 {
			return true
		}
		_ = c.freeze(true)
		for _, pid := range c.procs() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = c.freeze(false)
		return poll(time.Second, func() bool { return len(c.procs()) == 0 }) == nil
	})
}

// remove deletes the (empty) cgroup directories.
func (c vmCgroup) remove() error {
	var errs []error
	for _, d := range c.dirs() {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// memoryUsage returns the cgroup's charged memory in bytes.
func (c vmCgroup) memoryUsage() int64 {
	f := "memory.usage_in_bytes"
	if c.v2 {
		f = "memory.current"
	}
	b, _ := os.ReadFile(filepath.Join(c.ctl("memory"), f))
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// cpuSeconds returns the cgroup's consumed CPU time.
func (c vmCgroup) cpuSeconds() float64 {
	if c.v2 {
		b, _ := os.ReadFile(filepath.Join(c.ctl("cpu"), "cpu.stat"))
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return float64(n) / 1e6
			}
		}
		return 0
	}
	b, _ := os.ReadFile(filepath.Join(c.ctl("cpuacct"), "cpuacct.usage"))
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return float64(n) / 1e9
}

// pollBackoff is poll's wait between calls: 1 ms doubling to 32 ms, then
// 32 ms.
var pollBackoff = wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 5}

// poll calls cond until it holds or timeout passes, backing off between
// calls (pollBackoff); cond gets one last call once timeout has passed.
func poll(timeout time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := pollBackoff.DelayFunc().Until(ctx, true, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil && !cond() {
		return errors.New("sim: timed out")
	}
	return nil
}
