// Package seccomp confines the sim backend's guests (vmm/sim): a syscall
// filter (Filter) and a capability bound (Capabilities), together no more
// kernel surface than Docker's default seccomp profile and capability set
// give a container. It has no dependencies beyond x/sys, so the static
// agent binary links it: cmd/sandbox-agent applies both at start when the
// sim init asks for it (EnvVar), before serving anything, and the driver
// refuses a VM whose agent does not run under them.
package seccomp

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// EnvVar set to "1" in the agent's environment asks it to Install the
// filter and BoundCapabilities (and drop the variable) before it starts.
const EnvVar = "HEARTH_SIM_SECCOMP"

// Supported reports whether this architecture has a filter.
func Supported() bool { return auditArch != 0 }

// flagCheck refuses a syscall whose first argument has any of flags (or,
// with equal, is flags).
type flagCheck struct {
	nr    uintptr
	flags uint32
	equal bool
}

// Filter returns the classic BPF program every VM process runs
// under (nil where the architecture has none): wrong architecture → kill;
// x32 numbers, deniedSyscalls (mounts, setns, keyrings, bpf...),
// clone/unshare making a namespace of any kind (a nested user namespace
// would open most of the kernel to the guest's root; the others need
// capabilities the guest does not have, refused here as well) and
// socket(AF_VSOCK) (vsock belongs to no network namespace: the host's and
// its hypervisor's vsock services would answer the guest; Docker refuses it
// too) → EPERM; clone3 → ENOSYS; everything else allowed.
func Filter() []unix.SockFilter {
	if auditArch == 0 {
		return nil
	}
	const (
		offNr   = 0
		offArch = 4
		offArg0 = 16 // low 32 bits of args[0] (little endian)
	)
	retErrno := func(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jump := func(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
	}
	var p []unix.SockFilter
	p = append(p,
		stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArch),
		jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, auditArch, 1, 0),
		stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_KILL_PROCESS),
		stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offNr),
	)
	if x32Bit != 0 {
		p = append(p,
			jump(unix.BPF_JMP|unix.BPF_JGE|unix.BPF_K, x32Bit, 0, 1),
			stmt(unix.BPF_RET|unix.BPF_K, retErrno(unix.EPERM)),
		)
	}
	for _, nr := range deniedSyscalls {
		p = append(p,
			jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, uint32(nr), 0, 1),
			stmt(unix.BPF_RET|unix.BPF_K, retErrno(unix.EPERM)),
		)
	}
	for _, nr := range enosysSyscalls {
		p = append(p,
			jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, uint32(nr), 0, 1),
			stmt(unix.BPF_RET|unix.BPF_K, retErrno(unix.ENOSYS)),
		)
	}
	for _, c := range argSyscalls {
		// if nr matches: load arg0; if it has one of the flags (is the
		// value) → EPERM, else allow; otherwise fall through (the
		// accumulator still holds nr).
		test := uint16(unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K)
		if c.equal {
			test = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		}
		p = append(p,
			jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, uint32(c.nr), 0, 4),
			stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArg0),
			jump(test, c.flags, 0, 1),
			stmt(unix.BPF_RET|unix.BPF_K, retErrno(unix.EPERM)),
			stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW),
		)
	}
	return append(p, stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW))
}

// Install applies Filter to every thread of the calling
// process (inherited by its children and across exec). The caller must
// hold CAP_SYS_ADMIN in its user namespace or have set no_new_privs.
func Install() error {
	f := Filter()
	if f == nil {
		return nil
	}
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	return nil
}

// InstallIfAsked, when EnvVar is "1", removes EnvVar from the environment
// (so the guest's processes do not inherit it), installs the filter and
// then bounds the capabilities (in that order: without no_new_privs,
// which would break sudo, installing a filter takes CAP_SYS_ADMIN).
func InstallIfAsked() error {
	if os.Getenv(EnvVar) != "1" {
		return nil
	}
	if err := os.Unsetenv(EnvVar); err != nil {
		return err
	}
	if err := Install(); err != nil {
		return err
	}
	return BoundCapabilities()
}
