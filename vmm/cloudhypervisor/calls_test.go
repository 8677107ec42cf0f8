package cloudhypervisor

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

func TestCreateConfig(t *testing.T) {
	o := Options{Kernel: "/k/vmlinux", Cmdline: "console=ttyS0", GuestCID: 3, TapName: func(id string) string { return "tap-" + id }}
	p := vmPaths("/r/vm1")
	tests := []struct {
		name string
		o    func(Options) Options
		spec vmm.Spec
		sz   Size
		want string
	}{{
		name: "none lane",
		spec: vmm.Spec{ID: "vm1", Net: "none", Token: "tok"},
		sz:   Size{VCPUs: 1, MemoryMiB: 512},
		want: `{"cpus":{"boot_vcpus":1,"max_vcpus":1},"memory":{"size":536870912},"payload":{"kernel":"/k/vmlinux","cmdline":"console=ttyS0 hearth.id=vm1 hearth.token=tok"},"rng":{"src":"/dev/urandom"},"serial":{"mode":"File","file":"/r/vm1/serial.log"},"console":{"mode":"Off"},"vsock":{"cid":3,"socket":"/r/vm1/vsock.sock","id":"vsock0"}}`,
	}, {
		name: "egress lane, initramfs, read-only rootfs",
		o:    func(o Options) Options { o.Initramfs, o.Rootfs = "/k/initrd", "/k/root.img"; return o },
		spec: vmm.Spec{ID: "vm1", Net: "egress"},
		sz:   Size{VCPUs: 2, MemoryMiB: 2048},
		want: `{"cpus":{"boot_vcpus":2,"max_vcpus":2},"memory":{"size":2147483648},"payload":{"kernel":"/k/vmlinux","initramfs":"/k/initrd","cmdline":"console=ttyS0 hearth.id=vm1"},"disks":[{"path":"/k/root.img","readonly":true,"id":"rootfs"}],"net":[{"tap":"tap-vm1","mac":"` + uds.MAC("vm1") + `","id":"net0"}],"rng":{"src":"/dev/urandom"},"serial":{"mode":"File","file":"/r/vm1/serial.log"},"console":{"mode":"Off"},"vsock":{"cid":3,"socket":"/r/vm1/vsock.sock","id":"vsock0"}}`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			oo := o
			if tc.o != nil {
				oo = tc.o(o)
			}
			b, _ := json.Marshal(CreateConfig(oo, tc.spec, tc.sz, p))
			if d := cmp.Diff(tc.want, string(b)); d != "" {
				t.Errorf("vm.create body (-want +got):\n%s", d)
			}
		})
	}
}

func TestPatchConfig(t *testing.T) {
	p := vmPaths("/r/c1")
	tests := []struct {
		name, in, tap, want string
		wantErr             bool
	}{
		{"vsock and serial move, unknown fields survive",
			`{"vsock":{"cid":3,"socket":"/r/src/vsock.sock"},"serial":{"mode":"File","file":"/r/src/serial.log"},"iommu":false}`, "",
			`{"iommu":false,"serial":{"file":"/r/c1/serial.log","mode":"File"},"vsock":{"cid":3,"socket":"/r/c1/vsock.sock"}}`, false},
		{"tap replaced, MAC kept",
			`{"net":[{"tap":"old","mac":"06:00:00:00:00:01","id":"net0"}]}`, "new",
			`{"net":[{"id":"net0","mac":"06:00:00:00:00:01","tap":"new"}]}`, false},
		{"not JSON", `{`, "", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PatchConfig([]byte(tc.in), p, tc.tap)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			if err == nil && string(got) != tc.want {
				t.Errorf("got %s\nwant %s", got, tc.want)
			}
		})
	}
}
