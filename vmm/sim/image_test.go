package sim_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hearthvm/hearth/image"
	"github.com/hearthvm/hearth/internal/testagent"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/sim"
)

// builtinDebian returns a driver running the built-in Debian image
// (package image), skipping the test unless it is already in the image
// cache.
func builtinDebian(t *testing.T) *sim.Driver {
	t.Helper()
	if testing.Short() {
		t.Skip("copies a Debian root filesystem")
	}
	r, ok := (&image.Store{Root: image.DefaultRoot()}).Lookup(image.BuiltinDigest())
	if !ok {
		t.Skip("the built-in image is not cached (sandbox-image build)")
	}
	rootfs := r.Dir
	d, err := sim.New(sim.Options{Root: t.TempDir(), AgentCommand: []string{testagent.Path(t)}, BootTimeout: 60 * time.Second,
		Rootfs: func(context.Context, string) (string, error) { return rootfs, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The built-in Debian image, when it is already in the image cache: the guest sees its files owned as the image says, `user`
// (uid 1000) owns /home/user, python3 runs, and sudo works from user to
// the guest's root, which is no host root.
func TestImage_BuiltinDebian(t *testing.T) {
	h := boot(t, builtinDebian(t), vmm.Spec{ID: "deb", Template: image.BuiltinRef, Net: "none"})
	r := run(t, h, `stat -c '%U %a' /home/user /etc/shadow; python3 -c 'print(6*7)'; su user -c 'id -u; sudo -n id -u'; cat /proc/self/uid_map`)
	want := []string{"user 755", "root 640", "42", "1000", "0"}
	got := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.exit != 0 || len(got) < len(want) {
		t.Fatalf("probe: %v", r)
	}
	for i, w := range want {
		if strings.TrimSpace(got[i]) != w {
			t.Errorf("line %d = %q, want %q (%v)", i, got[i], w, r)
		}
	}
	if m := strings.Fields(got[len(got)-1]); len(m) != 3 || m[1] != "1879048192" {
		t.Errorf("uid_map %q", got[len(got)-1])
	}
	// A request that names no user runs as the image's "user" in its home,
	// as e2b's base template does.
	if r := runAs(t, h, "", "id -un; pwd"); r.exit != 0 || strings.Fields(r.stdout)[0] != "user" || !strings.Contains(r.stdout, "/home/user") {
		t.Errorf("default user: %v", r)
	}
}

// Under the guests' confinement (Docker's capability set, no namespaces,
// no mounts) what sandboxes are used for keeps working on the built-in
// Debian image: sudo (silent: the hostname resolves), apt-get with its _apt
// sandbox (setgroups, setresuid), pip, a python3 HTTP server, ping's ICMP
// echo socket as `user`.
func TestImage_BuiltinDebianWorksConfined(t *testing.T) {
	h := boot(t, builtinDebian(t), vmm.Spec{ID: "deb", Template: image.BuiltinRef, Net: "none"})
	if r := runAs(t, h, "user", "sudo -n true"); r.exit != 0 || r.stderr != "" {
		t.Errorf("sudo -n true: %v", r)
	}
	if r := run(t, h, "getent hosts $(hostname)"); r.exit != 0 || !strings.Contains(r.stdout, "sandbox") {
		t.Errorf("the hostname does not resolve: %v", r)
	}
	if r := run(t, h, "apt-get --version >/dev/null && apt-get check -q >/dev/null && echo ok"); r.stdout != "ok\n" {
		t.Errorf("apt-get: %v", r)
	}
	// Offline, apt-get update still starts its download methods as _apt:
	// they fail to resolve names, never to drop privileges.
	r := run(t, h, "timeout 60 apt-get -o Acquire::Retries=0 update 2>&1")
	for _, bad := range []string{"Operation not permitted", "setgroups", "seteuid", "setegid", "setresuid", "setresgid", "sandbox"} {
		if strings.Contains(r.stdout, bad) {
			t.Errorf("apt-get update (%q): %v", bad, r)
		}
	}
	if r := runAs(t, h, "user", "pip --version"); r.exit != 0 || !strings.HasPrefix(r.stdout, "pip ") {
		t.Errorf("pip: %v", r)
	}
	const fetch = `import socket, struct, time, urllib.request
for _ in range(100):
    try:
        print(urllib.request.urlopen("http://127.0.0.1:8000/").status)
        break
    except OSError:
        time.sleep(0.05)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
s.sendto(struct.pack("!BBHHH", 8, 0, 0, 0, 1) + b"hearth", ("127.0.0.1", 0))
s.settimeout(5)
print("echo reply", s.recvfrom(64)[0][0])
`
	script := "cd /tmp && (python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &) && python3 -c '" + fetch + "'; pkill -f http.server"
	if r := runAs(t, h, "user", script); r.stdout != "200\necho reply 0\n" {
		t.Errorf("http.server and ping: %v", r)
	}
}
