//go:build !amd64

package seccomp

// Only amd64 has a syscall filter so far; elsewhere VMs run without one.
const auditArch = 0

var (
	deniedSyscalls    []uintptr
	enosysSyscalls    []uintptr
	newUserNSSyscalls []uintptr
)

const x32Bit = 0
