package fcfake

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/vmm/internal/restvm/restvmtest"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

type step struct {
	method, path, body string
	status             int
	fault              string // substring of fault_message
}

func serve(t *testing.T) (*uds.Client, string) {
	return restvmtest.Serve(t, "fcf", func(home string) restvmtest.Server { return NewServer(home) })
}

// proto: errors are {"fault_message": "..."}, never empty.
var proto = restvmtest.Protocol{ErrMsg: func(body string) (string, error) {
	var f struct {
		FaultMessage string `json:"fault_message"`
	}
	if json.Unmarshal([]byte(body), &f) != nil || f.FaultMessage == "" {
		return f.FaultMessage, errors.New(`not {"fault_message"}`)
	}
	return f.FaultMessage, nil
}}

func run(t *testing.T, c *uds.Client, dir string, steps []step) {
	t.Helper()
	ss := make([]restvmtest.Step, len(steps))
	for i, s := range steps {
		ss[i] = restvmtest.Step{Method: s.method, Path: s.path, Body: s.body, Status: s.status, Msg: s.fault}
	}
	restvmtest.Run(t, c, dir, proto, ss)
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
	conn, err := uds.DialVsock(context.Background(), filepath.Join(dir, "v2.sock"), agentapi.Port)
	if err != nil {
		t.Fatalf("vsock to restored guest: %v", err)
	}
	conn.Close()
}
