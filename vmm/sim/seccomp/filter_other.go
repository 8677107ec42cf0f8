//go:build !amd64

package seccomp

// Only amd64 has a syscall filter so far; elsewhere VMs run without one
// (the capability bound applies everywhere).
const auditArch = 0

var (
	deniedSyscalls []uintptr
	enosysSyscalls []uintptr
	argSyscalls    []flagCheck
)

const x32Bit = 0
