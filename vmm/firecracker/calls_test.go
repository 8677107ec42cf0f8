package firecracker

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

func render(t *testing.T, calls []Call) []string {
	t.Helper()
	var out []string
	for _, c := range calls {
		b, err := json.Marshal(c.Body)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c.Method+" "+c.Path+" "+string(b))
	}
	return out
}

func TestBootCalls(t *testing.T) {
	o := Options{Kernel: "/k/vmlinux", BootArgs: "console=ttyS0", GuestCID: 3, TapName: func(id string) string { return "tap-" + id }}
	p := vmPaths("/r/vm1")
	tests := []struct {
		name string
		o    func(Options) Options
		spec vmm.Spec
		sz   Size
		want []string
	}{{
		name: "none lane, kernel only",
		spec: vmm.Spec{ID: "vm1", Net: "none", Token: "tok"},
		sz:   Size{VCPUs: 1, MemoryMiB: 512},
		want: []string{
			`PUT /machine-config {"vcpu_count":1,"mem_size_mib":512}`,
			`PUT /boot-source {"kernel_image_path":"/k/vmlinux","boot_args":"console=ttyS0 hearth.id=vm1 hearth.token=tok"}`,
			`PUT /vsock {"guest_cid":3,"uds_path":"/r/vm1/vsock.sock"}`,
			`PUT /actions {"action_type":"InstanceStart"}`,
		},
	}, {
		name: "egress lane with initrd and read-only rootfs",
		o:    func(o Options) Options { o.Initrd, o.Rootfs = "/k/initrd", "/k/rootfs.ext4"; return o },
		spec: vmm.Spec{ID: "vm1", Net: "egress"},
		sz:   Size{VCPUs: 4, MemoryMiB: 8192},
		want: []string{
			`PUT /machine-config {"vcpu_count":4,"mem_size_mib":8192}`,
			`PUT /boot-source {"kernel_image_path":"/k/vmlinux","boot_args":"console=ttyS0 hearth.id=vm1","initrd_path":"/k/initrd"}`,
			`PUT /drives/rootfs {"drive_id":"rootfs","path_on_host":"/k/rootfs.ext4","is_root_device":true,"is_read_only":true}`,
			`PUT /network-interfaces/eth0 {"iface_id":"eth0","host_dev_name":"tap-vm1","guest_mac":"` + macOf("vm1") + `"}`,
			`PUT /vsock {"guest_cid":3,"uds_path":"/r/vm1/vsock.sock"}`,
			`PUT /actions {"action_type":"InstanceStart"}`,
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			oo := o
			if tc.o != nil {
				oo = tc.o(o)
			}
			if d := cmp.Diff(tc.want, render(t, BootCalls(oo, tc.spec, tc.sz, p))); d != "" {
				t.Errorf("calls (-want +got):\n%s", d)
			}
		})
	}
}

func TestLoadCall(t *testing.T) {
	o := Options{TapName: func(id string) string { return "tap-" + id }}
	p := vmPaths("/r/c1")
	tests := []struct {
		name, net string
		resume    bool
		want      string
	}{
		{"none lane resumed", "none", true, `PUT /snapshot/load {"snapshot_path":"/s/vmstate","mem_backend":{"backend_type":"File","backend_path":"/s/mem"},"resume_vm":true,"vsock_override":{"uds_path":"/r/c1/vsock.sock"}}`},
		{"egress lane left paused", "egress", false, `PUT /snapshot/load {"snapshot_path":"/s/vmstate","mem_backend":{"backend_type":"File","backend_path":"/s/mem"},"network_overrides":[{"iface_id":"eth0","host_dev_name":"tap-c1"}],"vsock_override":{"uds_path":"/r/c1/vsock.sock"}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := render(t, []Call{LoadCall(o, "c1", tc.net, "/s/vmstate", "/s/mem", p, tc.resume)})
			if d := cmp.Diff([]string{tc.want}, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func macOf(id string) string { return uds.MAC(id) }
