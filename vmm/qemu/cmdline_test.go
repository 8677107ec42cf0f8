package qemu

import (
	"encoding/base64"
	"slices"
	"strings"
	"testing"
)

func baseMachine() Machine {
	return Machine{
		Accel: AccelTCG, VCPUs: 1, MemoryMiB: 256,
		Kernel: "/g/vmlinuz", Initrd: "/g/initrd", Cmdline: "console=ttyS0",
		QMPSocket: "/r/vm/qmp.sock", ConsoleLog: "/r/vm/console.log", HostPort: 40000,
	}
}

// flag returns the value following name in args ("" if absent); with
// several occurrences it returns them joined by "|".
func flagValues(args []string, name string) string {
	var vs []string
	for i := 0; i+1 < len(args); i++ {
		if args[i] == name {
			vs = append(vs, args[i+1])
		}
	}
	return strings.Join(vs, "|")
}

func TestMachineArgs(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Machine)
		flag string
		want string
	}{
		{"tcg accel", nil, "-accel", "tcg"},
		{"tcg cpu", nil, "-cpu", "max"},
		{"kvm accel", func(m *Machine) { m.Accel = AccelKVM }, "-accel", "kvm"},
		{"kvm cpu drops arch-capabilities", func(m *Machine) { m.Accel = AccelKVM }, "-cpu", "host,-arch-capabilities"},
		{"machine uses named ram", nil, "-machine", "microvm,x-option-roms=off,rtc=on,memory-backend=ram0"},
		{"anonymous ram", nil, "-object", "memory-backend-ram,id=ram0,size=256M"},
		{"shared file ram", func(m *Machine) { m.MemPath, m.MemShared = "/r/vm/mem", true }, "-object",
			"memory-backend-file,id=ram0,size=256M,mem-path=/r/vm/mem,share=on"},
		{"cow file ram", func(m *Machine) { m.MemPath = "/c/mem" }, "-object",
			"memory-backend-file,id=ram0,size=256M,mem-path=/c/mem,share=off"},
		{"smp", func(m *Machine) { m.VCPUs = 2 }, "-smp", "2"},
		{"memory", nil, "-m", "256M"},
		{"kernel", nil, "-kernel", "/g/vmlinuz"},
		{"initrd", nil, "-initrd", "/g/initrd"},
		{"append", nil, "-append", "console=ttyS0"},
		{"serial to file", nil, "-serial", "file:/r/vm/console.log"},
		{"serial null", func(m *Machine) { m.ConsoleLog = "" }, "-serial", "null"},
		{"netdev open lane", nil, "-netdev", "user,id=net0,restrict=off,hostfwd=tcp:127.0.0.1:40000-:49983"},
		{"netdev restricted lane", func(m *Machine) { m.Restrict = true }, "-netdev", "user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:40000-:49983"},
		{"netdev passt stream on fd 3 (and an unused restricted slirp for the migration sections)", func(m *Machine) { m.NetFD = true }, "-netdev",
			"stream,id=net0,server=off,addr.type=fd,addr.str=3|user,id=unused0,restrict=on"},
		{"devices", nil, "-device", "virtio-net-device,netdev=net0|virtio-rng-device"},
		{"disk after the other devices", func(m *Machine) { m.Disk = "/r/vm/disk.qcow2" }, "-device",
			"virtio-net-device,netdev=net0|virtio-rng-device|virtio-blk-device,drive=disk0"},
		{"disk drive", func(m *Machine) { m.Disk = "/r/vm/disk.qcow2" }, "-drive", "id=disk0,if=none,format=qcow2,discard=unmap,file=/r/vm/disk.qcow2"},
		{"no disk", nil, "-drive", ""},
		{"identity by fw_cfg", func(m *Machine) { m.Identity = "/r/vm/identity" }, "-fw_cfg", "name=opt/hearth/identity,file=/r/vm/identity"},
		{"no identity", nil, "-fw_cfg", ""},
		{"qmp", nil, "-qmp", "unix:/r/vm/qmp.sock,server=on,wait=off"},
		{"no incoming on boot", nil, "-incoming", ""},
		{"incoming", func(m *Machine) { m.Incoming = "defer" }, "-incoming", "defer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := baseMachine()
			if tt.mod != nil {
				tt.mod(&m)
			}
			args := m.Args()
			if got := flagValues(args, tt.flag); got != tt.want {
				t.Fatalf("%s = %q, want %q\nargs: %q", tt.flag, got, tt.want, args)
			}
			if !slices.Contains(args, "-nodefaults") {
				t.Fatalf("missing -nodefaults: %q", args)
			}
		})
	}
}

func TestMachineValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Machine)
		ok   bool
	}{
		{"ok", func(*Machine) {}, true},
		{"bad accel", func(m *Machine) { m.Accel = "hvf" }, false},
		{"no vcpus", func(m *Machine) { m.VCPUs = 0 }, false},
		{"tiny memory", func(m *Machine) { m.MemoryMiB = 16 }, false},
		{"no kernel", func(m *Machine) { m.Kernel = "" }, false},
		{"no qmp", func(m *Machine) { m.QMPSocket = "" }, false},
		{"port 0", func(m *Machine) { m.HostPort = 0 }, false},
		{"port too big", func(m *Machine) { m.HostPort = 70000 }, false},
		{"comma in path", func(m *Machine) { m.MemPath = "/a,b/mem" }, false},
		{"comma in disk path", func(m *Machine) { m.Disk = "/a,b/disk" }, false},
		{"socket path too long", func(m *Machine) { m.QMPSocket = "/" + strings.Repeat("x", 107) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := baseMachine()
			tt.mod(&m)
			if err := m.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestIdentityEncode(t *testing.T) {
	env := base64.StdEncoding.EncodeToString([]byte("A=1,B=x y"))
	tests := []struct {
		name string
		id   Identity
		want string
	}{
		{"all", Identity{Token: "tok", Hostname: "h", Env: map[string]string{"B": "x y", "A": "1"}},
			"token=tok\nhostname=h\nenv=" + env + "\n"},
		{"token only", Identity{Token: "t"}, "token=t\n"},
		{"held", Identity{Token: "t", Hold: true}, "token=t\nhold=1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(tt.id.Encode()); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestValidToken(t *testing.T) {
	for tok, want := range map[string]bool{
		"sb_abc-123.XYZ": true, "": true, "a b": false, "a\"b": false, "a'b": false, `a\b`: false, "a\nb": false, "é": false,
	} {
		if got := validToken(tok); got != want {
			t.Errorf("validToken(%q) = %v, want %v", tok, got, want)
		}
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/a/b":    "'/a/b'",
		"/a b/c":  "'/a b/c'",
		"/it's/x": `'/it'\''s/x'`,
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %q, want %q", in, got, want)
		}
	}
}
