package image

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// builtinOrSkip returns the built-in image from the shared cache, skipping
// when hack/setup.d/15-guest-image.sh has not built the current recipe.
func builtinOrSkip(t *testing.T) Rootfs {
	t.Helper()
	s := &Store{Root: DefaultRoot()}
	r, ok := s.Lookup(BuiltinDigest())
	if !ok {
		t.Skipf("built-in image %s not built in %s: run hack/setup.d/15-guest-image.sh", BuiltinDigest()[:20], s.Root)
	}
	return r
}

func TestBuiltin_HasPythonGitSudoAndUser1000(t *testing.T) {
	r := builtinOrSkip(t)
	if !strings.Contains(r.OSRelease, "bookworm") {
		t.Errorf("OSRelease = %q", r.OSRelease)
	}
	for _, p := range []string{"usr/bin/python3", "usr/bin/pip3", "usr/bin/git", "usr/bin/sudo", "usr/bin/curl",
		"usr/bin/ps", "usr/sbin/ip", "bin/bash"} {
		if _, err := os.Stat(filepath.Join(r.Dir, p)); err != nil {
			t.Errorf("missing %s: %v", p, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(r.Dir, "usr/bin/sudo")); err == nil && fi.Mode()&os.ModeSetuid == 0 {
		t.Errorf("sudo is not setuid: %v", fi.Mode())
	}
	passwd := readFile(t, filepath.Join(r.Dir, "etc/passwd"))
	if !strings.Contains(passwd, "\nuser:x:1000:1000::/home/user:/bin/bash\n") {
		t.Errorf("no user 1000 in etc/passwd:\n%s", passwd)
	}
	if fi, err := os.Stat(filepath.Join(r.Dir, "home/user")); err != nil {
		t.Errorf("home/user: %v", err)
	} else if st := fi.Sys().(*syscall.Stat_t); os.Geteuid() == 0 && st.Uid != 1000 {
		t.Errorf("home/user owned by %d, want 1000", st.Uid)
	}
	sudoers := filepath.Join(r.Dir, "etc/sudoers.d/user")
	if got := readFile(t, sudoers); got != "user ALL=(ALL:ALL) NOPASSWD: ALL\n" {
		t.Errorf("sudoers.d/user = %q", got)
	}
	if fi, _ := os.Stat(sudoers); fi == nil || fi.Mode().Perm() != 0o440 {
		t.Errorf("sudoers.d/user mode %v, want 0440", fi.Mode())
	}
	// The sim backend's hostname, resolved by the image's own /etc/hosts
	// (sudo looks it up).
	if got := strings.TrimSpace(readFile(t, filepath.Join(r.Dir, "etc/hostname"))); got != "sandbox" {
		t.Errorf("hostname = %q", got)
	}
	if hosts := readFile(t, filepath.Join(r.Dir, "etc/hosts")); !strings.Contains(hosts, "localhost") || !strings.Contains(hosts, "127.0.1.1\tsandbox\n") {
		t.Errorf("etc/hosts:\n%s", hosts)
	}
}

// Running the image's own binaries needs chroot, so root.
func TestBuiltin_RunsPythonAndSudoAsUser(t *testing.T) {
	r := builtinOrSkip(t)
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	out, err := exec.Command("chroot", "--userspec=1000:1000", r.Dir, "/usr/bin/python3", "-c",
		"import os, venv, pip; print(os.getuid())").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "1000" {
		t.Errorf("python3 as user: %v: %s", err, out)
	}
	out, err = exec.Command("chroot", "--userspec=1000:1000", r.Dir, "/usr/bin/sudo", "-n", "id", "-u").Output()
	if err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Errorf("sudo -n as user: %v: %s", err, out)
	}
	out, err = exec.Command("chroot", r.Dir, "/usr/bin/git", "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "git version") {
		t.Errorf("git: %v: %s", err, out)
	}
}
