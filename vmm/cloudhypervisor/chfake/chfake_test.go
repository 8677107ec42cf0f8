package chfake

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hearthvm/hearth/vmm/internal/restvm/restvmtest"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

type step struct {
	method, op, body string
	status           int
	msg              string // substring of the joined error messages
}

func serve(t *testing.T) (*uds.Client, string) {
	return restvmtest.Serve(t, "chf", func(home string) restvmtest.Server { return NewServer(home) })
}

// proto: a successful GET is a 200; errors are a JSON array of messages
// (or empty).
var proto = restvmtest.Protocol{PathPrefix: "/api/v1/", GetOK: http.StatusOK, ErrMsg: func(body string) (string, error) {
	var msgs []string
	if body != "" && json.Unmarshal([]byte(body), &msgs) != nil {
		return "", errors.New("not a JSON array")
	}
	return strings.Join(msgs, ": "), nil
}}

func run(t *testing.T, c *uds.Client, dir string, steps []step) {
	t.Helper()
	ss := make([]restvmtest.Step, len(steps))
	for i, s := range steps {
		ss[i] = restvmtest.Step{Method: s.method, Path: s.op, Body: s.body, Status: s.status, Msg: s.msg}
	}
	restvmtest.Run(t, c, dir, proto, ss)
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
