package chfake

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hearthvm/hearth/vmm/internal/uds"
)

type step struct {
	method, op, body string
	status           int
	msg              string // substring of the joined error messages
}

func serve(t *testing.T) (*uds.Client, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "chf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, "api.sock"))
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(filepath.Join(dir, "home"))
	srv := &http.Server{Handler: s}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close(); s.Close() })
	if err := os.WriteFile(filepath.Join(dir, "vmlinux"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := uds.NewClient(filepath.Join(dir, "api.sock"))
	t.Cleanup(c.Close)
	return c, dir
}

func run(t *testing.T, c *uds.Client, dir string, steps []step) {
	t.Helper()
	for i, s := range steps {
		body := strings.ReplaceAll(s.body, "$D", dir)
		var in any
		if body != "" {
			in = json.RawMessage(body)
		}
		err := c.Do(context.Background(), s.method, "/api/v1/"+s.op, in, nil)
		status := http.StatusNoContent
		if s.method == "GET" && err == nil {
			status = http.StatusOK
		}
		var apiErr *uds.APIError
		if errors.As(err, &apiErr) {
			status = apiErr.Status
			var msgs []string
			if apiErr.Body != "" && json.Unmarshal([]byte(apiErr.Body), &msgs) != nil {
				t.Errorf("step %d: error body %q is not a JSON array", i, apiErr.Body)
			}
			if s.msg != "" && !strings.Contains(strings.Join(msgs, ": "), s.msg) {
				t.Errorf("step %d %s: messages %q, want %q", i, s.op, msgs, s.msg)
			}
		} else if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if status != s.status {
			t.Fatalf("step %d %s %s: status %d, want %d (%v)", i, s.method, s.op, status, s.status, err)
		}
	}
}

const create = `{"cpus":{"boot_vcpus":1,"max_vcpus":1},"memory":{"size":67108864},"payload":{"kernel":"$D/vmlinux","cmdline":"hearth.token=t"},"vsock":{"cid":3,"socket":"$D/v.sock"}}`

func TestFake_Strict(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
	}{
		{"boot, pause, info before create", []step{
			{"PUT", "vm.boot", "", 404, "not created"},
			{"PUT", "vm.pause", "", 404, "not created"},
			{"GET", "vm.info", "", 404, ""},
			{"GET", "vmm.ping", "", 200, ""},
		}},
		{"bad bodies are 400", []step{
			{"PUT", "vm.create", `{"payload":{"kernel":"$D/vmlinux"},"cpus":{"boot_vcpus":1}}`, 400, "max_vcpus"},
			{"PUT", "vm.create", `{"cpus":{"boot_vcpus":1,"max_vcpus":1}}`, 400, "payload"},
			{"PUT", "vm.create", `{"payload":{"kernel":"$D/vmlinux"},"vcpus":2}`, 400, "unknown field"},
			{"PUT", "vm.create", `{"payload":{"kernel":"$D/vmlinux"},"memory":{"size":"1G"}}`, 400, ""},
			{"PUT", "vm.restore", `{"prefault":true}`, 400, "source_url"},
			{"PUT", "vm.restore", `{"source_url":"file:///x","memory_restore_mode":"Mmap"}`, 400, "unknown variant"},
		}},
		{"invalid config is a 500", []step{
			{"PUT", "vm.create", `{"payload":{"kernel":"$D/vmlinux"},"cpus":{"boot_vcpus":2,"max_vcpus":1}}`, 500, "boot_vcpus"},
			{"PUT", "vm.create", `{"payload":{"kernel":"$D/vmlinux"},"vsock":{"cid":2,"socket":"$D/v.sock"}}`, 500, "cid"},
		}},
		{"state machine", []step{
			{"PUT", "vm.create", create, 204, ""},
			{"PUT", "vm.create", create, 500, "already created"},
			{"PUT", "vm.pause", "", 500, "InvalidStateTransition"},
			{"PUT", "vm.boot", "", 204, ""},
			{"PUT", "vm.boot", "", 500, "already running"},
			{"PUT", "vm.snapshot", `{"destination_url":"file://$D"}`, 500, "not paused"},
			{"PUT", "vm.resume", "", 500, "InvalidStateTransition"},
			{"PUT", "vm.pause", "", 204, ""},
			{"PUT", "vm.pause", "", 500, "InvalidStateTransition"},
			{"PUT", "vm.snapshot", `{"destination_url":"/relative"}`, 500, "invalid URL"},
			{"PUT", "vm.snapshot", `{"destination_url":"file://$D/missing"}`, 500, "not a directory"},
			{"PUT", "vm.snapshot", `{"destination_url":"file://$D"}`, 204, ""},
			{"PUT", "vm.restore", `{"source_url":"file://$D"}`, 500, "already created"},
			{"PUT", "vm.resume", "", 204, ""},
			{"PUT", "vm.shutdown", "", 204, ""},
		}},
		{"routes and methods", []step{
			{"PUT", "vm.nope", "", 404, "Not Found"},
			{"GET", "vm.boot", "", 400, ""},
			{"PUT", "vm.info", "", 400, ""},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, dir := serve(t)
			run(t, c, dir, tc.steps)
		})
	}
}

func TestFake_SnapshotRestore(t *testing.T) {
	c, dir := serve(t)
	run(t, c, dir, []step{
		{"PUT", "vm.create", create, 204, ""},
		{"PUT", "vm.boot", "", 204, ""},
		{"PUT", "vm.pause", "", 204, ""},
		{"PUT", "vm.snapshot", `{"destination_url":"file://$D"}`, 204, ""},
	})
	fi, err := os.Stat(filepath.Join(dir, "memory-ranges"))
	if err != nil || fi.Size() != 64<<20 {
		t.Fatalf("memory-ranges: %v", err)
	}
	// Point the restored VM at a fresh vsock socket, as the driver does.
	cfg, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	cfg = []byte(strings.ReplaceAll(string(cfg), "v.sock", "v2.sock"))
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	c2, _ := serve(t)
	run(t, c2, dir, []step{
		{"PUT", "vm.restore", `{"source_url":"file://$D","memory_restore_mode":"CopyOnWrite"}`, 204, ""},
		{"PUT", "vm.resume", "", 204, ""},
	})
	conn, err := uds.DialVsock(context.Background(), filepath.Join(dir, "v2.sock"), 49983)
	if err != nil {
		t.Fatalf("vsock to restored guest: %v", err)
	}
	conn.Close()
}
