package qemu

import (
	"encoding/base64"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/hearthvm/hearth/agentapi"
)

// maxSocketPath is the longest unix socket path Linux accepts (sun_path
// holds 108 bytes including the NUL).
const maxSocketPath = 107

// Accelerators.
const (
	AccelKVM = "kvm"
	AccelTCG = "tcg"
)

// Machine is everything that shapes a QEMU microvm command line. The
// machine-model part (Accel, VCPUs, MemoryMiB, Kernel, Initrd, Cmdline, and
// whether there is a Disk) must be identical between a snapshot's source and
// every VM started from it; the rest (sockets, port, memory file and mode,
// disk path, identity, network backend, incoming) is per process.
type Machine struct {
	Accel     string `json:"accel"`
	VCPUs     int    `json:"vcpus"`
	MemoryMiB int    `json:"memory_mib"`
	Kernel    string `json:"kernel"`
	Initrd    string `json:"initrd"`
	Cmdline   string `json:"cmdline"`
	// Disk is the VM's root disk: its own qcow2 overlay over the
	// template's read-only base image. Empty: no disk (the guest stays in
	// its initramfs).
	Disk string `json:"disk,omitempty"`

	QMPSocket  string `json:"-"`
	ConsoleLog string `json:"-"`
	HostPort   int    `json:"-"`
	// Restrict isolates the guest from the host and the outside (slirp
	// restrict=on); the host-forwarded agent port still works.
	Restrict bool `json:"-"`
	// NetFD, when set, backs the NIC with a connected stream socket QEMU
	// inherits as fd 3 (the other end is passt's, see passt.go) instead of
	// QEMU's own slirp; the host port is then passt's to forward.
	NetFD bool `json:"-"`
	// Identity is a file QEMU hands the guest as fw_cfg
	// opt/hearth/identity (token, hostname, environment): the token never
	// appears on QEMU's argv or the guest's kernel command line.
	Identity string `json:"-"`
	// MemPath backs guest RAM with a file; empty means anonymous RAM.
	MemPath string `json:"-"`
	// MemShared maps MemPath shared (share=on: writes reach the file, so a
	// snapshot can skip RAM); false maps it private (copy-on-write clone).
	MemShared bool `json:"-"`
	// Incoming, when set, starts QEMU waiting for a migration stream from
	// this URI (e.g. "exec:cat 'state'").
	Incoming string `json:"-"`
}

// Validate reports a machine QEMU cannot start.
func (m Machine) Validate() error {
	switch {
	case m.Accel != AccelKVM && m.Accel != AccelTCG:
		return fmt.Errorf("qemu: accel %q: want kvm or tcg", m.Accel)
	case m.VCPUs < 1:
		return fmt.Errorf("qemu: vcpus %d: want >= 1", m.VCPUs)
	case m.MemoryMiB < 64:
		return fmt.Errorf("qemu: memory %d MiB: want >= 64", m.MemoryMiB)
	case m.Kernel == "" || m.Initrd == "":
		return fmt.Errorf("qemu: kernel and initrd are required")
	case m.QMPSocket == "":
		return fmt.Errorf("qemu: qmp socket is required")
	case len(m.QMPSocket) > maxSocketPath:
		return fmt.Errorf("qemu: qmp socket path %q is longer than %d bytes: use a shorter root", m.QMPSocket, maxSocketPath)
	case m.HostPort <= 0 || m.HostPort > 65535:
		return fmt.Errorf("qemu: host port %d out of range", m.HostPort)
	case strings.ContainsAny(m.QMPSocket+m.ConsoleLog+m.MemPath+m.Disk+m.Identity, ","):
		return fmt.Errorf("qemu: paths must not contain commas")
	}
	return nil
}

// Args returns the qemu-system-x86_64 arguments for m (without argv[0]).
func (m Machine) Args() []string {
	machine := "microvm,x-option-roms=off,rtc=on"
	a := []string{"-nodefaults", "-no-user-config", "-display", "none"}
	switch m.Accel {
	case AccelKVM:
		// -cpu host aborts on PVM hosts over MSR 0x10a; drop that feature.
		a = append(a, "-accel", "kvm", "-cpu", "host,-arch-capabilities")
	default:
		a = append(a, "-accel", "tcg", "-cpu", "max")
	}
	a = append(a, "-smp", strconv.Itoa(m.VCPUs), "-m", strconv.Itoa(m.MemoryMiB)+"M")
	// RAM is always the backend "ram0", so migration streams match between
	// file-backed and anonymous VMs.
	if m.MemPath != "" {
		share := "off"
		if m.MemShared {
			share = "on"
		}
		a = append(a, "-object", fmt.Sprintf("memory-backend-file,id=ram0,size=%dM,mem-path=%s,share=%s", m.MemoryMiB, m.MemPath, share))
	} else {
		a = append(a, "-object", fmt.Sprintf("memory-backend-ram,id=ram0,size=%dM", m.MemoryMiB))
	}
	machine += ",memory-backend=ram0"
	a = append(a, "-machine", machine)
	a = append(a, "-kernel", m.Kernel, "-initrd", m.Initrd, "-append", m.Cmdline)
	serial := "null"
	if m.ConsoleLog != "" {
		serial = "file:" + m.ConsoleLog
	}
	a = append(a, "-serial", serial)
	if m.NetFD {
		// QEMU's slirp saves state in the migration stream (section
		// "slirp"), which a VM without slirp refuses to load. An unused,
		// fully restricted slirp keeps the sections identical, so a
		// checkpoint of either lane clones onto the other.
		a = append(a,
			"-netdev", "stream,id=net0,server=off,addr.type=fd,addr.str=3",
			"-netdev", "user,id=unused0,restrict=on",
		)
	} else {
		restrict := "off"
		if m.Restrict {
			restrict = "on"
		}
		a = append(a, "-netdev", fmt.Sprintf("user,id=net0,restrict=%s,hostfwd=tcp:127.0.0.1:%d-:%d", restrict, m.HostPort, agentapi.Port))
	}
	// Device order fixes the virtio-mmio slots, which migration matches.
	a = append(a,
		"-device", "virtio-net-device,netdev=net0",
		"-device", "virtio-rng-device",
	)
	if m.Disk != "" {
		a = append(a,
			"-drive", "id=disk0,if=none,format=qcow2,discard=unmap,file="+m.Disk,
			"-device", "virtio-blk-device,drive=disk0",
		)
	}
	if m.Identity != "" {
		a = append(a, "-fw_cfg", "name="+IdentityFwCfg+",file="+m.Identity)
	}
	a = append(a, "-qmp", "unix:"+m.QMPSocket+",server=on,wait=off")
	if m.Incoming != "" {
		a = append(a, "-incoming", m.Incoming)
	}
	return a
}

// IdentityFwCfg is the fw_cfg file through which the guest's stage 1 reads
// its identity (hack/guest/init).
const IdentityFwCfg = "opt/hearth/identity"

// Identity is what a guest learns about itself at boot, out of band (fw_cfg).
type Identity struct {
	Token    string
	Hostname string
	Env      map[string]string
	// Hold starts the agent holding requests until the node opens it
	// (vmm.Spec.Hold).
	Hold bool
}

// Encode renders id as the KEY=VALUE lines hack/guest/stage2 reads: token=,
// hostname=, env= (base64 of comma-separated K=V pairs, sorted) and
// hold=1.
func (id Identity) Encode() []byte {
	var b strings.Builder
	b.WriteString("token=" + id.Token + "\n")
	if id.Hostname != "" {
		b.WriteString("hostname=" + id.Hostname + "\n")
	}
	if len(id.Env) > 0 {
		keys := make([]string, 0, len(id.Env))
		for k := range id.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		kv := make([]string, 0, len(keys))
		for _, k := range keys {
			kv = append(kv, k+"="+id.Env[k])
		}
		b.WriteString("env=" + base64.StdEncoding.EncodeToString([]byte(strings.Join(kv, ","))) + "\n")
	}
	if id.Hold {
		b.WriteString("hold=1\n")
	}
	return []byte(b.String())
}

// validToken reports whether t is a plain token: printable ASCII without
// spaces, quotes or backslashes (it travels as one identity line).
func validToken(t string) bool {
	for _, c := range t {
		if c <= ' ' || c == '"' || c == '\'' || c == '\\' || c > '~' {
			return false
		}
	}
	return true
}

// shellQuote quotes p for QEMU's exec: migration URIs (run by /bin/sh).
func shellQuote(p string) string { return "'" + strings.ReplaceAll(p, "'", `'\''`) + "'" }
