package sim_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

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

// run runs `sh -c script` as root in the VM (named the way the e2b SDK
// names a user: Authorization: Basic) via the agent's process.Process/Start
// (Connect, JSON codec) and waits for it to end.
func run(t testing.TB, h vmm.Handle, script string) result {
	t.Helper()
	return runAs(t, h, "root", script)
}

// runAs is run as user; "" names none, so the agent's default applies.
func runAs(t testing.TB, h vmm.Handle, user, script string) result {
	t.Helper()
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", script}}})
	body := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	body = append(body, msg...)
	req, _ := http.NewRequest(http.MethodPost, "http://"+h.Addr+"/process.Process/Start", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("X-Access-Token", h.Token)
	if user != "" {
		req.SetBasicAuth(user, "")
	}
	c := &http.Client{Timeout: 60 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("run %q: %v", script, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("run %q: HTTP %d: %s", script, resp.StatusCode, b)
	}
	res := result{exit: -1}
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(resp.Body, hdr[:]); err != nil {
			t.Fatalf("run %q: stream ended: %v", script, err)
		}
		payload := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(resp.Body, payload); err != nil {
			t.Fatal(err)
		}
		if hdr[0]&2 != 0 { // end of stream
			return res
		}
		var f struct {
			Event struct {
				Data *struct {
					Stdout []byte `json:"stdout"`
					Stderr []byte `json:"stderr"`
				} `json:"data"`
				End *struct {
					ExitCode int    `json:"exitCode"`
					Status   string `json:"status"`
				} `json:"end"`
			} `json:"event"`
		}
		if err := json.Unmarshal(payload, &f); err != nil {
			t.Fatalf("frame %s: %v", payload, err)
		}
		if d := f.Event.Data; d != nil {
			res.stdout += string(d.Stdout)
			res.stderr += string(d.Stderr)
		}
		if e := f.Event.End; e != nil {
			res.exit = e.ExitCode
		}
	}
}

func (r result) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.exit, r.stdout, r.stderr)
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
