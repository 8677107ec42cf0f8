package seccomp

import (
	"bufio"
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Capabilities is the capability set of a guest: Docker's default for a
// container. The agent's bounding, permitted and effective sets are cut to
// it (BoundCapabilities), so every process of the guest, its root and
// set-uid programs included, has at most these in the guest's user
// namespace. The guest's root can own and chown files, change ids (sudo,
// apt's _apt sandbox), make device nodes its namespace lets it, bind low
// ports and use raw sockets (ping); without CAP_SYS_ADMIN, CAP_NET_ADMIN
// and the rest it makes no namespace, mounts nothing and configures no
// network device (which Filter refuses as well).
const Capabilities uint64 = 1<<unix.CAP_CHOWN | 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_FSETID |
	1<<unix.CAP_FOWNER | 1<<unix.CAP_MKNOD | 1<<unix.CAP_NET_RAW | 1<<unix.CAP_SETGID |
	1<<unix.CAP_SETUID | 1<<unix.CAP_SETFCAP | 1<<unix.CAP_SETPCAP | 1<<unix.CAP_NET_BIND_SERVICE |
	1<<unix.CAP_SYS_CHROOT | 1<<unix.CAP_KILL | 1<<unix.CAP_AUDIT_WRITE

// BoundCapabilities limits every thread of the calling process to
// Capabilities: the rest leave the bounding set, the ambient and
// inheritable sets are emptied and the permitted and effective sets cut,
// so no program executed afterwards (set-uid root or with file
// capabilities) regains them. It needs CAP_SETPCAP (root of the agent's
// fresh user namespace has it) and a binary without cgo, whose runtime
// can change every thread's credentials (syscall.AllThreadsSyscall).
func BoundCapabilities() error {
	for c := uintptr(0); c < 64; c++ {
		if Capabilities&(1<<c) != 0 {
			continue
		}
		_, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0)
		if e == unix.EINVAL {
			break // past the kernel's last capability
		}
		if e != 0 {
			return fmt.Errorf("capabilities: dropping %d from the bounding set: %w", c, e)
		}
	}
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); e != 0 && e != unix.EINVAL {
		return fmt.Errorf("capabilities: clearing the ambient set: %w", e)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capabilities: %w", err)
	}
	for i := range data {
		keep := uint32(Capabilities >> (32 * i))
		data[i].Permitted &= keep
		data[i].Effective = data[i].Permitted
		data[i].Inheritable = 0
	}
	hdr.Pid = 0 // each thread itself
	_, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	runtime.KeepAlive(&hdr)
	runtime.KeepAlive(&data)
	if e != 0 {
		return fmt.Errorf("capabilities: capset: %w", e)
	}
	return nil
}

// CheckStatus reads a /proc/<pid>/status and fails unless the process runs
// confined: under the syscall filter ("Seccomp: 2", where the architecture
// has one) and with every capability set (CapBnd, CapPrm, CapEff, CapInh,
// CapAmb) within Capabilities. The sim driver refuses a VM whose agent
// fails it.
func CheckStatus(status []byte) error {
	fields := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	if Supported() && fields["Seccomp"] != "2" {
		return fmt.Errorf("runs without the syscall filter (Seccomp: %q)", fields["Seccomp"])
	}
	for _, set := range []string{"CapBnd", "CapPrm", "CapEff", "CapInh", "CapAmb"} {
		v, ok := fields[set]
		if !ok {
			return fmt.Errorf("no %s in its status", set)
		}
		caps, err := strconv.ParseUint(v, 16, 64)
		if err != nil {
			return fmt.Errorf("%s %q: %w", set, v, err)
		}
		if extra := caps &^ Capabilities; extra != 0 {
			return fmt.Errorf("%s %s holds capabilities past the guest's set (%#x)", set, v, extra)
		}
	}
	return nil
}
