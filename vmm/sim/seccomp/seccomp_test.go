package seccomp

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// In a child process confined by InstallIfAsked: nested namespaces of every
// kind, setns, every mount call, keyrings and bpf fail with EPERM, clone3
// with ENOSYS; ordinary calls work; the capability sets are Capabilities.
func TestInstallIfAsked_RefusesNamespacesMountsAndBoundsCapabilities(t *testing.T) {
	if os.Getenv("SECCOMP_TEST_CHILD") == "1" {
		child(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (capabilities to drop)")
	}
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_GETPID, 0, 0, 0); e == unix.ENOTSUP {
		// The agent is built without cgo; a test binary with it (-race)
		// cannot change every thread's credentials.
		t.Skip("this test binary links cgo (-race): BoundCapabilities needs a binary without it, as the agent is")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestInstallIfAsked_RefusesNamespacesMountsAndBoundsCapabilities$", "-test.v")
	cmd.Env = append(os.Environ(), "SECCOMP_TEST_CHILD=1", EnvVar+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestInstallIfAsked_RefusesNamespacesMountsAndBoundsCapabilities") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func child(t *testing.T) {
	if err := InstallIfAsked(); err != nil {
		t.Fatal(err)
	}
	if os.Getenv(EnvVar) != "" {
		t.Fatal("InstallIfAsked left the variable for the guest's processes")
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckStatus(status); err != nil {
		t.Fatalf("after InstallIfAsked: %v\n%s", err, status)
	}
	if !strings.Contains(string(status), fmt.Sprintf("CapBnd:\t%016x\n", Capabilities)) {
		t.Errorf("bounding set is not Capabilities:\n%s", status)
	}
	if !Supported() {
		return
	}
	errno := func(trap uintptr, a ...uintptr) error {
		for len(a) < 6 {
			a = append(a, 0)
		}
		_, _, e := unix.RawSyscall6(trap, a[0], a[1], a[2], a[3], a[4], a[5])
		if e == 0 {
			return nil
		}
		return e
	}
	str := func(s string) uintptr { p, _ := unix.BytePtrFromString(s); return uintptr(unsafe.Pointer(p)) }
	cases := map[string]struct {
		err  error
		want error
	}{
		// Each would make a namespace if let through (or fail with EINVAL:
		// CLONE_NEWNS with CLONE_FS, CLONE_NEWPID with CLONE_THREAD, so
		// that a filter that lets clone through forks no test process).
		"clone(NEWNS|FS)":        {errno(unix.SYS_CLONE, unix.CLONE_NEWNS|unix.CLONE_FS), unix.EPERM},
		"clone(NEWPID|THREAD)":   {errno(unix.SYS_CLONE, unix.CLONE_NEWPID|unix.CLONE_THREAD|unix.CLONE_SIGHAND|unix.CLONE_VM), unix.EPERM},
		"clone3":                 {errno(unix.SYS_CLONE3), unix.ENOSYS},
		"setns":                  {errno(unix.SYS_SETNS, ^uintptr(0), 0), unix.EPERM},
		"mount":                  {errno(unix.SYS_MOUNT, str("none"), str("/nonexistent"), str("tmpfs"), 0, 0), unix.EPERM},
		"umount2":                {errno(unix.SYS_UMOUNT2, str("/nonexistent"), 0), unix.EPERM},
		"pivot_root":             {errno(unix.SYS_PIVOT_ROOT, str("/nonexistent"), str("/nonexistent")), unix.EPERM},
		"open_tree":              {errno(unix.SYS_OPEN_TREE, ^uintptr(0), str("/"), 0), unix.EPERM},
		"move_mount":             {errno(unix.SYS_MOVE_MOUNT, ^uintptr(0), str(""), ^uintptr(0), str(""), 0), unix.EPERM},
		"fsopen":                 {errno(unix.SYS_FSOPEN, str("tmpfs"), 0), unix.EPERM},
		"fsconfig":               {errno(unix.SYS_FSCONFIG, ^uintptr(0), 0, 0, 0, 0), unix.EPERM},
		"fsmount":                {errno(unix.SYS_FSMOUNT, ^uintptr(0), 0, 0), unix.EPERM},
		"fspick":                 {errno(unix.SYS_FSPICK, ^uintptr(0), str("/"), 0), unix.EPERM},
		"mount_setattr":          {errno(unix.SYS_MOUNT_SETATTR, ^uintptr(0), str(""), 0, 0, 0), unix.EPERM},
		"sethostname":            {errno(unix.SYS_SETHOSTNAME, str("x"), 1), unix.EPERM},
		"syslog":                 {errno(unix.SYS_SYSLOG, 10, 0, 0), unix.EPERM},
		"keyctl":                 {errno(unix.SYS_KEYCTL, 0), unix.EPERM},
		"bpf":                    {errno(unix.SYS_BPF, 0), unix.EPERM},
		"io_uring_setup":         {errno(unix.SYS_IO_URING_SETUP, 1, 0), unix.EPERM},
		"unshare(FS)":            {errno(unix.SYS_UNSHARE, unix.CLONE_FS), nil},
		"unshare(FILES|SYSVSEM)": {errno(unix.SYS_UNSHARE, unix.CLONE_FILES|unix.CLONE_SYSVSEM), nil},
		"getpid":                 {errno(unix.SYS_GETPID), nil},
		// vsock is no network namespace's: the host's (or its
		// hypervisor's) vsock services would answer the guest.
		"socket(AF_VSOCK)": {errno(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0), unix.EPERM},
		"socket(AF_INET)":  {errno(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, 0), nil},
		"socket(AF_UNIX)":  {errno(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0), nil},
	}
	for _, flag := range []uintptr{unix.CLONE_NEWUSER, unix.CLONE_NEWNS, unix.CLONE_NEWNET, unix.CLONE_NEWPID,
		unix.CLONE_NEWUTS, unix.CLONE_NEWIPC, unix.CLONE_NEWCGROUP, unix.CLONE_NEWTIME} {
		cases[fmt.Sprintf("unshare(%#x)", flag)] = struct{ err, want error }{errno(unix.SYS_UNSHARE, flag), unix.EPERM}
	}
	for name, c := range cases {
		if !errors.Is(c.err, c.want) && !(c.want == nil && c.err == nil) {
			t.Errorf("%s: %v, want %v", name, c.err, c.want)
		}
	}
}

// CheckStatus accepts a confined process only: filter on, every capability
// set within Capabilities.
func TestCheckStatus(t *testing.T) {
	confined := fmt.Sprintf("Name:\tsandbox-agent\nCapInh:\t0000000000000000\nCapPrm:\t%016x\nCapEff:\t%016x\nCapBnd:\t%016x\nCapAmb:\t0000000000000000\nNoNewPrivs:\t0\nSeccomp:\t2\n",
		Capabilities, Capabilities, Capabilities)
	full := "000001ffffffffff"
	for name, c := range map[string]struct {
		status string
		ok     bool
	}{
		"confined":              {confined, true},
		"fewer capabilities":    {strings.ReplaceAll(confined, fmt.Sprintf("%016x", Capabilities), "0000000000000000"), true},
		"full bounding set":     {strings.Replace(confined, fmt.Sprintf("CapBnd:\t%016x", Capabilities), "CapBnd:\t"+full, 1), false},
		"full permitted set":    {strings.Replace(confined, fmt.Sprintf("CapPrm:\t%016x", Capabilities), "CapPrm:\t"+full, 1), false},
		"CAP_SYS_ADMIN ambient": {strings.Replace(confined, "CapAmb:\t0000000000000000", "CapAmb:\t0000000000200000", 1), false},
		"no bounding set line":  {strings.Replace(confined, "CapBnd", "Other", 1), false},
		"garbage":               {strings.Replace(confined, fmt.Sprintf("CapBnd:\t%016x", Capabilities), "CapBnd:\tzz", 1), false},
		"no filter":             {strings.Replace(confined, "Seccomp:\t2", "Seccomp:\t0", 1), !Supported()},
		"empty":                 {"", false},
	} {
		if err := CheckStatus([]byte(c.status)); (err == nil) != c.ok {
			t.Errorf("%s: CheckStatus = %v, want ok %v", name, err, c.ok)
		}
	}
	if Capabilities != 0xa80425fb {
		t.Errorf("Capabilities = %#x, want Docker's default set 0xa80425fb", Capabilities)
	}
}
