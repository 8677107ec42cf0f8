package seccomp

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_X86_64

// deniedSyscalls fail with EPERM inside a VM: kernel interfaces a sandboxed
// workload does not need and that are frequent sources of kernel exploits
// (keyrings are not namespaced; bpf, perf, userfaultfd and io_uring widen
// the attack surface; module, kexec, swap and I/O-port calls need host
// privilege anyway).
var deniedSyscalls = []uintptr{
	unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY, unix.SYS_KEYCTL,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
	unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_SWAPON, unix.SYS_SWAPOFF,
	unix.SYS_ACCT, unix.SYS_QUOTACTL, unix.SYS_LOOKUP_DCOOKIE, unix.SYS_USELIB,
	unix.SYS_PERSONALITY, unix.SYS_FANOTIFY_INIT,
}

// clone3 passes its flags in memory seccomp cannot read: it fails with
// ENOSYS so that libc falls back to clone, whose flags are checked.
var enosysSyscalls = []uintptr{unix.SYS_CLONE3}

// newUserNSSyscalls are checked for CLONE_NEWUSER in their first argument.
var newUserNSSyscalls = []uintptr{unix.SYS_CLONE, unix.SYS_UNSHARE}

// x32Bit marks the x32 ABI's syscall numbers, refused wholesale.
const x32Bit = 0x40000000
