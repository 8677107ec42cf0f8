package qemu

import (
	"encoding/base64"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// AgentPort is the guest TCP port the in-guest agent listens on.
const AgentPort = 49983

// maxSocketPath is the longest unix socket path Linux accepts (sun_path
// holds 108 bytes including the NUL).
const maxSocketPath = 107

// Accelerators.
const (
	AccelKVM = "kvm"
	AccelTCG = "tcg"
)

// Machine is everything that shapes a QEMU microvm command line. The
// machine-model part (Accel, VCPUs, MemoryMiB, Kernel, Initrd, Cmdline) must
// be identical between a snapshot's source and every VM started from it;
// the rest (sockets, port, memory file and mode, incoming) is per process.
type Machine struct {
	Accel     string `json:"accel"`
	VCPUs     int    `json:"vcpus"`
	MemoryMiB int    `json:"memory_mib"`
	Kernel    string `json:"kernel"`
	Initrd    string `json:"initrd"`
	Cmdline   string `json:"cmdline"`

	QMPSocket  string `json:"-"`
	ConsoleLog string `json:"-"`
	HostPort   int    `json:"-"`
	// Restrict isolates the guest from the host and the outside (slirp
	// restrict=on); the host-forwarded agent port still works.
	Restrict bool `json:"-"`
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
	case strings.ContainsAny(m.QMPSocket+m.ConsoleLog+m.MemPath, ","):
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
	restrict := "off"
	if m.Restrict {
		restrict = "on"
	}
	a = append(a,
		"-netdev", fmt.Sprintf("user,id=net0,restrict=%s,hostfwd=tcp:127.0.0.1:%d-:%d", restrict, m.HostPort, AgentPort),
		"-device", "virtio-net-device,netdev=net0",
		"-device", "virtio-rng-device",
		"-qmp", "unix:"+m.QMPSocket+",server=on,wait=off",
	)
	if m.Incoming != "" {
		a = append(a, "-incoming", m.Incoming)
	}
	return a
}

// GuestCmdline is the kernel command line for a cold boot: the guest's base
// line plus the agent token, hostname and environment /init reads.
func GuestCmdline(base, token, hostname string, env map[string]string) string {
	parts := []string{}
	if base = strings.TrimSpace(base); base != "" {
		parts = append(parts, base)
	}
	if token != "" {
		parts = append(parts, "hearth.token="+token)
	}
	if hostname != "" {
		parts = append(parts, "hearth.hostname="+hostname)
	}
	if len(env) > 0 {
		keys := make([]string, 0, len(env))
		for k := range env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		kv := make([]string, 0, len(keys))
		for _, k := range keys {
			kv = append(kv, k+"="+env[k])
		}
		parts = append(parts, "hearth.env="+base64.StdEncoding.EncodeToString([]byte(strings.Join(kv, ","))))
	}
	return strings.Join(parts, " ")
}

// validToken reports whether t can travel on the kernel command line
// (no spaces, quotes or control bytes).
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
