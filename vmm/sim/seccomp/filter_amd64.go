package seccomp

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_X86_64

// deniedSyscalls fail with EPERM inside a VM: kernel interfaces a sandboxed
// workload does not need and that are frequent sources of kernel exploits.
// They are the calls Docker's default profile refuses a container without
// CAP_SYS_ADMIN, CAP_SYSLOG, CAP_SYS_NICE and the like, which the guest
// does not have (see Capabilities).
var deniedSyscalls = []uintptr{
	// Keyrings are not namespaced; bpf, perf, userfaultfd and io_uring
	// widen the attack surface.
	unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY, unix.SYS_KEYCTL,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	// Module, kexec, swap, I/O-port and accounting calls need host
	// privilege anyway.
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
	unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_SWAPON, unix.SYS_SWAPOFF,
	unix.SYS_ACCT, unix.SYS_QUOTACTL, unix.SYS_QUOTACTL_FD, unix.SYS_LOOKUP_DCOOKIE, unix.SYS_USELIB,
	unix.SYS_PERSONALITY, unix.SYS_FANOTIFY_INIT, unix.SYS_REBOOT, unix.SYS_VHANGUP,
	// Namespaces (with unshare and clone below): a guest joins or makes
	// none, so no mount, netlink or other namespaced kernel code is ever
	// run with a capability of the guest's.
	unix.SYS_SETNS, unix.SYS_SETHOSTNAME, unix.SYS_SETDOMAINNAME,
	// Mounts, old and new API.
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT,
	unix.SYS_OPEN_TREE, unix.SYS_OPEN_TREE_ATTR, unix.SYS_MOVE_MOUNT, unix.SYS_MOUNT_SETATTR,
	unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK,
	// The kernel log, and NUMA memory policies (CAP_SYSLOG and
	// CAP_SYS_NICE in Docker's profile).
	unix.SYS_SYSLOG,
	unix.SYS_MBIND, unix.SYS_GET_MEMPOLICY, unix.SYS_SET_MEMPOLICY, unix.SYS_SET_MEMPOLICY_HOME_NODE,
}

// clone3 passes its flags in memory seccomp cannot read: it fails with
// ENOSYS so that libc falls back to clone, whose flags are checked.
var enosysSyscalls = []uintptr{unix.SYS_CLONE3}

// cloneNamespaces are the flags that make a new namespace of any kind
// (CLONE_NEWTIME only for unshare: in clone's first argument that bit is
// part of the exit signal).
const cloneNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// argSyscalls fail with EPERM when their first argument has one of the
// flags (clone and unshare making a namespace) or is the value (a vsock
// socket).
var argSyscalls = []flagCheck{
	{nr: unix.SYS_CLONE, flags: cloneNamespaces},
	{nr: unix.SYS_UNSHARE, flags: cloneNamespaces | unix.CLONE_NEWTIME},
	{nr: unix.SYS_SOCKET, flags: unix.AF_VSOCK, equal: true},
}

// x32Bit marks the x32 ABI's syscall numbers, refused wholesale.
const x32Bit = 0x40000000
