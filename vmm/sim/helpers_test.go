package sim_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hearthvm/hearth/internal/testagent"
	"github.com/hearthvm/hearth/vmm"
)

func busybox(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("no busybox")
	}
	return p
}

// cgroupDir returns the VM's cgroup directory that holds the freezer.
func cgroupDir(h vmm.Handle) string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return filepath.Join("/sys/fs/cgroup", h.Meta["cgroup"])
	}
	return filepath.Join("/sys/fs/cgroup/freezer", h.Meta["cgroup"])
}

func cgroupProcs(t testing.TB, h vmm.Handle) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cgroupDir(h), "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func frozen(t testing.TB, h vmm.Handle) bool {
	t.Helper()
	dir := cgroupDir(h)
	if b, err := os.ReadFile(filepath.Join(dir, "freezer.state")); err == nil {
		return strings.TrimSpace(string(b)) == "FROZEN"
	}
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	return strings.Contains(string(b), "frozen 1")
}

// result is one process run inside a VM through its agent.
type result struct {
	exit           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.exit, r.stdout, r.stderr)
}

// run runs `sh -c script` as root in the VM (testagent.Run).
func run(t testing.TB, h vmm.Handle, script string) result {
	t.Helper()
	return runAs(t, h, "root", script)
}

// runAs is run as user; "" names none, so the agent's default applies.
func runAs(t testing.TB, h vmm.Handle, user, script string) result {
	t.Helper()
	r := testagent.Run(t, h.Addr, h.Token, user, script)
	return result{exit: r.Exit, stdout: r.Stdout, stderr: r.Stderr}
}

// runStatus returns the HTTP status of a process.Process/List call.
func runStatus(t testing.TB, h vmm.Handle) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+h.Addr+"/process.Process/List", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Access-Token", h.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
