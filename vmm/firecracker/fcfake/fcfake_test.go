package fcfake

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
	method, path, body string
	status             int
	fault              string // substring of fault_message
}

func serve(t *testing.T) (*uds.Client, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "fcf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "api.sock")
	ln, err := net.Listen("unix", sock)
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
	c := uds.NewClient(sock)
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
		err := c.Do(context.Background(), s.method, s.path, in, nil)
		status := http.StatusNoContent
		var apiErr *uds.APIError
		if errors.As(err, &apiErr) {
			status = apiErr.Status
			var f struct {
				FaultMessage string `json:"fault_message"`
			}
			if json.Unmarshal([]byte(apiErr.Body), &f) != nil || f.FaultMessage == "" {
				t.Errorf("step %d: error body %q is not {\"fault_message\"}", i, apiErr.Body)
			}
			if s.fault != "" && !strings.Contains(f.FaultMessage, s.fault) {
				t.Errorf("step %d %s %s: fault %q, want it to contain %q", i, s.method, s.path, f.FaultMessage, s.fault)
			}
		} else if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if status != s.status {
			t.Fatalf("step %d %s %s %s: status %d, want %d (%v)", i, s.method, s.path, body, status, s.status, err)
		}
	}
}

const (
	boot   = `{"kernel_image_path":"$D/vmlinux","boot_args":"console=ttyS0 hearth.token=t"}`
	vsock  = `{"guest_cid":3,"uds_path":"$D/v.sock"}`
	start  = `{"action_type":"InstanceStart"}`
	pause  = `{"state":"Paused"}`
	resume = `{"state":"Resumed"}`
	snap   = `{"snapshot_type":"Full","snapshot_path":"$D/vmstate","mem_file_path":"$D/mem"}`
)

func TestFake_Strict(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
	}{
		{"unknown field is a 400", []step{
			{"PUT", "/machine-config", `{"vcpu_count":1,"mem_size_mib":128,"vcpus":2}`, 400, "unknown field"},
		}},
		{"missing required field is a 400", []step{
			{"PUT", "/machine-config", `{"vcpu_count":1}`, 400, "mem_size_mib"},
			{"PUT", "/vsock", `{"uds_path":"$D/v.sock"}`, 400, "guest_cid"},
			{"PUT", "/boot-source", `{"boot_args":"x"}`, 400, "kernel_image_path"},
		}},
		{"wrong types and enums are 400", []step{
			{"PUT", "/machine-config", `{"vcpu_count":"1","mem_size_mib":128}`, 400, ""},
			{"PUT", "/machine-config", `{"vcpu_count":33,"mem_size_mib":128}`, 400, "vCPU"},
			{"PUT", "/vsock", `{"guest_cid":2,"uds_path":"$D/v.sock"}`, 400, "CID"},
			{"PUT", "/actions", `{"action_type":"Start"}`, 400, "unknown variant"},
		}},
		{"drive id must match the path", []step{
			{"PUT", "/drives/a", `{"drive_id":"b","path_on_host":"$D/vmlinux","is_root_device":true,"is_read_only":true}`, 400, "does not match"},
		}},
		{"start needs a kernel; no pause before boot", []step{
			{"PUT", "/actions", start, 400, "kernel"},
			{"PATCH", "/vm", pause, 400, "before starting"},
			{"PUT", "/boot-source", `{"kernel_image_path":"$D/nope"}`, 400, "kernel"},
		}},
		{"snapshot only while paused; config frozen after start", []step{
			{"PUT", "/boot-source", boot, 204, ""},
			{"PUT", "/vsock", vsock, 204, ""},
			{"PUT", "/actions", start, 204, ""},
			{"PUT", "/actions", start, 400, "after starting"},
			{"PUT", "/machine-config", `{"vcpu_count":2,"mem_size_mib":256}`, 400, "after starting"},
			{"PUT", "/snapshot/create", snap, 400, "not paused"},
			{"PATCH", "/vm", pause, 204, ""},
			{"PATCH", "/vm", pause, 204, ""},
			{"PUT", "/snapshot/create", `{"snapshot_path":"$D/vmstate"}`, 400, "mem_file_path"},
			{"PUT", "/snapshot/create", snap, 204, ""},
			{"PATCH", "/vm", `{"state":"Running"}`, 400, "unknown variant"},
			{"PATCH", "/vm", resume, 204, ""},
		}},
		{"load refused after configuration", []step{
			{"PUT", "/boot-source", boot, 204, ""},
			{"PUT", "/snapshot/load", `{"snapshot_path":"$D/vmstate","mem_backend":{"backend_type":"File","backend_path":"$D/mem"}}`, 400, "not allowed"},
		}},
		{"load validates its body", []step{
			{"PUT", "/snapshot/load", `{"snapshot_path":"$D/vmstate","mem_backend":{"backend_type":"File","backend_path":"$D/mem"},"network_overrides":[{"iface_id":"eth0","host_dev_name":"t","guest_mac":"06:00:00:00:00:01"}]}`, 400, "unknown field"},
			{"PUT", "/snapshot/load", `{"snapshot_path":"$D/vmstate"}`, 400, "memory backend"},
		}},
		{"unknown route is a 400", []step{
			{"GET", "/nope", "", 400, "Invalid request"},
			{"DELETE", "/vm", "", 400, "Invalid request"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, dir := serve(t)
			run(t, c, dir, tc.steps)
		})
	}
}

func TestFake_SnapshotRoundTrip(t *testing.T) {
	c, dir := serve(t)
	run(t, c, dir, []step{
		{"PUT", "/machine-config", `{"vcpu_count":1,"mem_size_mib":64}`, 204, ""},
		{"PUT", "/boot-source", boot, 204, ""},
		{"PUT", "/vsock", vsock, 204, ""},
		{"PUT", "/actions", start, 204, ""},
		{"PATCH", "/vm", pause, 204, ""},
		{"PUT", "/snapshot/create", snap, 204, ""},
	})
	fi, err := os.Stat(filepath.Join(dir, "mem"))
	if err != nil || fi.Size() != 64<<20 {
		t.Fatalf("mem file: %v size %d", err, fi.Size())
	}
	// A second, fresh process loads it with a new vsock socket.
	c2, dir2 := serve(t)
	_ = dir2
	run(t, c2, dir, []step{
		{"PUT", "/snapshot/load", `{"snapshot_path":"$D/vmstate","mem_backend":{"backend_type":"File","backend_path":"$D/mem"},"resume_vm":true,"vsock_override":{"uds_path":"$D/v2.sock"}}`, 204, ""},
		{"PUT", "/boot-source", boot, 400, "after starting"},
	})
	conn, err := uds.DialVsock(context.Background(), filepath.Join(dir, "v2.sock"), 49983)
	if err != nil {
		t.Fatalf("vsock to restored guest: %v", err)
	}
	conn.Close()
}
