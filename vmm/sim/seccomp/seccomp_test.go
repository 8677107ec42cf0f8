package seccomp

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// In a child process under the filter: nested user namespaces, keyrings
// and bpf fail with EPERM, clone3 with ENOSYS; other namespaces and
// ordinary calls work.
func TestFilter_DeniesAndAllows(t *testing.T) {
	if !Supported() {
		t.Skip("no filter on this architecture")
	}
	if os.Getenv("SECCOMP_TEST_CHILD") == "1" {
		child(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFilter_DeniesAndAllows$", "-test.v")
	cmd.Env = append(os.Environ(), "SECCOMP_TEST_CHILD=1", EnvVar+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestFilter_DeniesAndAllows") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func child(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := InstallIfAsked(); err != nil {
		t.Fatal(err)
	}
	if os.Getenv(EnvVar) != "" {
		t.Fatal("InstallIfAsked left the variable for the guest's processes")
	}
	errno := func(trap uintptr, a ...uintptr) error {
		for len(a) < 3 {
			a = append(a, 0)
		}
		_, _, e := unix.RawSyscall(trap, a[0], a[1], a[2])
		if e == 0 {
			return nil
		}
		return e
	}
	for name, c := range map[string]struct {
		err  error
		want error
	}{
		"unshare(NEWUSER)": {errno(unix.SYS_UNSHARE, unix.CLONE_NEWUSER), unix.EPERM},
		"clone3":           {errno(unix.SYS_CLONE3), unix.ENOSYS},
		"keyctl":           {errno(unix.SYS_KEYCTL, 0), unix.EPERM},
		"bpf":              {errno(unix.SYS_BPF, 0), unix.EPERM},
		"io_uring_setup":   {errno(unix.SYS_IO_URING_SETUP, 1, 0), unix.EPERM},
		"getpid":           {errno(unix.SYS_GETPID), nil},
	} {
		if !errors.Is(c.err, c.want) && !(c.want == nil && c.err == nil) {
			t.Errorf("%s: %v, want %v", name, c.err, c.want)
		}
	}
	if os.Getpid() <= 0 {
		t.Fatal("getpid")
	}
}
