package qemu

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/image"
	"github.com/hearthvm/hearth/vmm"
)

// diskDriver is guestDriver that skips unless the VMs get a root disk.
func diskDriver(t *testing.T) *Driver {
	t.Helper()
	d := guestDriver(t, AccelTCG)
	g, _, err := d.o.Config.Resolve("img", "small")
	if err != nil {
		t.Fatal(err)
	}
	if base, err := d.baseDisk("img", g); err != nil || base == "" {
		t.Skip("no root disk: run hack/setup.d/20-qemu-guest.sh (builds hack/guest/out/busybox.ext4)")
	}
	return d
}

// listen accepts and at once closes connections on addr:0 until the test
// ends, and returns the port.
func listen(t *testing.T, addr string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// nodeAddr is a non-loopback IPv4 address of this host, or "".
func nodeAddr() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return ""
}

// guestSelf is the guest's own agent port, which every probe run must
// find open (it proves the probe itself works).
var guestSelf = "127.0.0.1:" + strconv.Itoa(agentapi.Port)

// probes runs TCP connects from inside the guest (busybox nc: -e true
// exits 0 right after a connect) and returns target → "open"/"closed".
func probes(t *testing.T, h vmm.Handle, targets []string) map[string]string {
	t.Helper()
	var script strings.Builder
	for _, tg := range append([]string{guestSelf}, targets...) {
		host, port, _ := net.SplitHostPort(tg)
		script.WriteString("if timeout 8 nc -w 4 " + host + " " + port + " -e /bin/true </dev/null >/dev/null 2>&1; then echo '" + tg + " open'; else echo '" + tg + " closed'; fi\n")
	}
	out, code, err := run(h.Addr, h.Token, script.String())
	if err != nil || code != 0 {
		t.Fatalf("probes: %q exit %d: %v", out, code, err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if tg, st, ok := strings.Cut(line, " "); ok {
			got[tg] = st
		}
	}
	t.Logf("from %s (net=%s): %v", h.ID, h.Meta["net"], got)
	if got[guestSelf] != "open" {
		t.Fatalf("probe cannot even reach the guest's own agent: %v", got)
	}
	return got
}

// reachable reports whether the host itself can connect to addr.
func reachable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// TestNet_NoneConnectsNowhere: on the "none" lane the guest reaches
// nothing — not the host's loopback through the slirp gateway, not the
// node's own address, not link-local metadata, not the internet — while
// the node still reaches the agent.
func TestNet_NoneConnectsNowhere(t *testing.T) {
	d := diskDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	lo := listen(t, "127.0.0.1")
	targets := []string{"10.0.2.2:" + strconv.Itoa(lo), "169.254.169.254:80", "deb.debian.org:80", "10.0.2.3:53"}
	if a := nodeAddr(); a != "" {
		targets = append(targets, net.JoinHostPort(a, strconv.Itoa(listen(t, a))))
	}
	h, err := d.Boot(ctx, vmm.Spec{ID: "none", Net: "none", Size: "small", Token: "tok-none"})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, d, h)
	for tg, st := range probes(t, h, targets) {
		if tg != guestSelf && st != "closed" {
			t.Errorf("net=none guest connects to %s", tg)
		}
	}

	// The lane is the clone's, not the checkpoint's: a clone of this VM
	// on "egress" gets passt (and the firewall), one on "none" stays shut.
	snap := filepath.Join(t.TempDir(), "ckpt")
	if err := d.Snapshot(ctx, h, snap); err != nil {
		t.Fatal(err)
	}
	for _, lane := range []string{"egress", "none"} {
		c, err := d.Clone(ctx, snap, vmm.Spec{ID: "clone-" + lane, Net: lane, Token: "tok-" + lane})
		if err != nil {
			t.Fatal(err)
		}
		destroyOnCleanup(t, d, c)
		got := probes(t, c, targets)
		for _, tg := range targets {
			want := "closed"
			if lane == "egress" && tg == "10.0.2.3:53" {
				continue // DNS, forwarded by passt to the node's resolver
			}
			if lane == "egress" && tg == "deb.debian.org:80" && reachable(tg) {
				want = "open"
			}
			if got[tg] != want {
				t.Errorf("%s clone of a none VM: %s is %s, want %s", lane, tg, got[tg], want)
			}
		}
	}
}

// TestNet_EgressIsOutboundOnly: on the "egress" lane (passt) the guest
// cannot reach the host's loopback (via its gateway 10.0.2.2), the node's
// own address, or 169.254.169.254, but reaches the outside when the host
// can; the same holds for a clone of it (its own passt).
func TestNet_EgressIsOutboundOnly(t *testing.T) {
	d := diskDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	lo := listen(t, "127.0.0.1")
	blocked := []string{"10.0.2.2:" + strconv.Itoa(lo), "169.254.169.254:80"}
	if a := nodeAddr(); a != "" {
		blocked = append(blocked, net.JoinHostPort(a, strconv.Itoa(listen(t, a))))
	}
	outside := "deb.debian.org:80"
	h, err := d.Boot(ctx, vmm.Spec{ID: "egress", Net: "egress", Size: "small", Token: "tok-egress"})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, d, h)
	if h.Meta["net"] != "passt" {
		t.Fatalf("egress VM net = %q, want passt", h.Meta["net"])
	}
	check := func(h vmm.Handle) {
		got := probes(t, h, append(blocked, outside))
		for _, tg := range blocked {
			if got[tg] != "closed" {
				t.Errorf("%s: egress guest connects to %s", h.ID, tg)
			}
		}
		if reachable(outside) && got[outside] != "open" {
			t.Errorf("%s: egress guest cannot reach %s, which the host reaches", h.ID, outside)
		}
	}
	check(h)
	snap := filepath.Join(t.TempDir(), "ckpt")
	if err := d.Snapshot(ctx, h, snap); err != nil {
		t.Fatal(err)
	}
	c, err := d.Clone(ctx, snap, vmm.Spec{ID: "egress-clone", Net: "egress", Token: "tok-egress-clone"})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, d, c)
	check(c)
	if err := d.Destroy(ctx, c); err != nil {
		t.Fatal(err)
	}
	if passtAlive(c.Dir) {
		t.Fatal("the clone's passt survives Destroy")
	}
	// And onto the "none" lane: nothing connects.
	n, err := d.Clone(ctx, snap, vmm.Spec{ID: "none-clone", Net: "none", Token: "tok-none-clone"})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, d, n)
	for tg, st := range probes(t, n, append(blocked, outside)) {
		if tg != guestSelf && st != "closed" {
			t.Errorf("none clone of an egress VM connects to %s", tg)
		}
	}
}

// TestIdentity_TokenNeverLeaks: the token is on no command line or
// environment (QEMU's, passt's, the guest kernel's), the identity file is
// gone once QEMU read it, a clone is re-keyed before Clone returns, and an
// agent restarted inside the clone keeps the clone's token.
func TestIdentity_TokenNeverLeaks(t *testing.T) {
	d := diskDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const golden = "tok-golden-5ecret"
	h, err := d.Boot(ctx, vmm.Spec{ID: "golden", Net: "egress", Size: "small", Token: golden, Env: map[string]string{"FOO": "bar"}})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, d, h)
	noToken := func(what, s, tok string) {
		t.Helper()
		if strings.Contains(s, tok) {
			t.Errorf("%s holds the token: %q", what, s)
		}
	}
	procFiles := func(pid int) string {
		a, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		return string(a) + string(b)
	}
	noToken("qemu argv/environ", procFiles(h.PID), golden)
	if b, err := os.ReadFile(filepath.Join(h.Dir, "passt.pid")); err == nil {
		pid, _ := strconv.Atoi(strings.Fields(string(b))[0])
		noToken("passt argv/environ", procFiles(pid), golden)
	}
	if _, err := os.Stat(filepath.Join(h.Dir, "identity")); !os.IsNotExist(err) {
		t.Errorf("identity file left on the host: %v", err)
	}
	out, code, err := run(h.Addr, h.Token, `cat /proc/cmdline; echo "FOO=$FOO"; hostname; ls /sys/firmware/qemu_fw_cfg 2>&1; ls /run/hearth 2>&1; true`)
	if err != nil || code != 0 {
		t.Fatalf("exec: %q %d %v", out, code, err)
	}
	noToken("guest /proc/cmdline", out, golden)
	if !strings.Contains(out, "FOO=bar") || !strings.Contains(out, "hearth-guest") {
		t.Errorf("identity env/hostname not applied: %q", out)
	}
	t.Logf("guest view: %s", strings.TrimSpace(out))

	snap := filepath.Join(t.TempDir(), "ckpt")
	if err := d.Snapshot(ctx, h, snap); err != nil {
		t.Fatal(err)
	}
	const tok = "tok-clone-5ecret"
	c, err := d.Clone(ctx, snap, vmm.Spec{ID: "clone", Net: "egress", Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, d, c)
	if got := authStatus(t, c.Addr, golden); got != http.StatusUnauthorized {
		t.Fatalf("clone accepts the golden token right after Clone: %d", got)
	}
	noToken("clone qemu argv/environ", procFiles(c.PID), tok)
	noToken("clone qemu argv/environ", procFiles(c.PID), golden)

	// Kill the agent (as root, through the SDK's user selection); the
	// guest's supervisor restarts it from the token file.
	_, _, _ = runAs(c.Addr, tok, "root", "kill -9 $PPID")
	deadline := time.Now().Add(60 * time.Second)
	for health(c.Addr) == nil && time.Now().Before(deadline) { // wait for it to go down
		if authStatus(t, c.Addr, tok) == http.StatusUnauthorized {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitHealthy(t, c.Addr)
	if got := authStatus(t, c.Addr, golden); got != http.StatusUnauthorized {
		t.Fatalf("restarted agent accepts the golden token: %d", got)
	}
	if got := authStatus(t, c.Addr, tok); got != http.StatusBadRequest {
		t.Fatalf("restarted agent rejects the clone's token: %d", got)
	}
	out, _, err = run(c.Addr, tok, "cat /proc/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	noToken("clone /proc/cmdline", out, golden)
	noToken("clone /proc/cmdline", out, tok)
}

// TestUser_ProcessesRunAsUserInHome: the agent runs as root, processes as
// the image's "user" in /home/user; the SDK may name root.
func TestUser_ProcessesRunAsUserInHome(t *testing.T) {
	d := diskDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h, err := d.Boot(ctx, vmm.Spec{ID: "user", Size: "small", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, d, h)
	out, code, err := run(h.Addr, h.Token, `id -u; pwd; echo $HOME; touch f && ls -n f | awk '{print $3}'`)
	if err != nil || code != 0 || strings.Fields(out)[0] != "1000" || !strings.Contains(out, "/home/user\n/home/user\n1000") {
		t.Fatalf("default process: %q %d %v; want uid 1000 in /home/user", out, code, err)
	}
	out, _, err = runAs(h.Addr, h.Token, "root", "id -u; pwd")
	if err != nil || strings.TrimSpace(out) != "0\n/root" {
		t.Fatalf("as root: %q %v", out, err)
	}
	// The disk is the VM's own: a write survives in it, and the base
	// image is untouched.
	if _, err := os.Stat(filepath.Join(h.Dir, "disk.qcow2")); err != nil {
		t.Fatalf("no per-VM overlay: %v", err)
	}
}

// debianDisk is the built-in Debian image as an ext4 base disk:
// HEARTH_QEMU_DEBIAN_DISK, else package image's built-in rootfs when
// hack/setup.d/15-guest-image.sh has built it into the image cache (never
// built here: that takes minutes).
func debianDisk(t *testing.T) string {
	if p := os.Getenv("HEARTH_QEMU_DEBIAN_DISK"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("HEARTH_QEMU_DEBIAN_DISK: %v", err)
		}
		return p
	}
	s := &image.Store{Root: image.DefaultRoot()}
	r, ok := s.Lookup(image.BuiltinDigest())
	if !ok {
		t.Skipf("no built-in Debian image in %s: run hack/setup.d/15-guest-image.sh, or set HEARTH_QEMU_DEBIAN_DISK to a Debian ext4 image", s.Root)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	disk, err := s.Ext4(ctx, r, 0)
	if err != nil {
		t.Fatalf("ext4 of the built-in image: %v", err)
	}
	return disk
}

// TestDebian_PythonThroughTheAgent boots the built-in Debian image and runs
// python3 and cat /etc/os-release as user, in the VM and in a clone, and
// logs boot, snapshot and clone times and the clones' memory.
func TestDebian_PythonThroughTheAgent(t *testing.T) {
	disk := debianDisk(t)
	d := guestDriver(t, AccelTCG)
	d.o.Disk = func(string) (string, error) { return disk, nil }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	h, err := d.Boot(ctx, vmm.Spec{ID: "deb", Net: "egress", Size: "small", Token: "tok-deb"})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, d, h)
	boot := time.Since(start)
	check := func(h vmm.Handle) {
		t.Helper()
		out, code, err := run(h.Addr, h.Token, "python3 -c 'print(6*7)'")
		if err != nil || code != 0 || strings.TrimSpace(out) != "42" {
			t.Fatalf("%s: python3: %q exit %d: %v", h.ID, out, code, err)
		}
		out, code, err = run(h.Addr, h.Token, "cat /etc/os-release; id -un; pwd; git --version")
		if err != nil || code != 0 || !strings.Contains(out, "bookworm") || !strings.Contains(out, "\nuser\n/home/user\n") || !strings.Contains(out, "git version") {
			t.Fatalf("%s: os-release/user: %q exit %d: %v", h.ID, out, code, err)
		}
	}
	check(h)
	start = time.Now()
	snap := filepath.Join(t.TempDir(), "ckpt")
	if err := d.Snapshot(ctx, h, snap); err != nil {
		t.Fatal(err)
	}
	snapshot := time.Since(start)
	var clones []vmm.Handle
	var cloneTimes []time.Duration
	for i := 0; i < 2; i++ {
		start = time.Now()
		c, err := d.Clone(ctx, snap, vmm.Spec{ID: "deb-clone-" + strconv.Itoa(i), Net: "egress", Token: "tok-deb-clone-" + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		cloneTimes = append(cloneTimes, time.Since(start))
		destroyOnCleanup(t, d, c)
		clones = append(clones, c)
	}
	for _, c := range clones {
		check(c)
	}
	t.Logf("debian under %s: cold boot %v, snapshot %v, clones %v", d.Accel(), boot.Round(time.Millisecond), snapshot.Round(time.Millisecond), cloneTimes)
	for _, c := range clones {
		st, err := d.Stats(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: rss %d MiB, private %d MiB, shared %d MiB, pss %d MiB", c.ID, st.RSSBytes>>20, st.PrivateBytes>>20, st.SharedBytes>>20, st.MemUsedBytes>>20)
	}
	if fi, err := os.Stat(filepath.Join(snap, "disk.qcow2")); err == nil {
		t.Logf("checkpoint disk overlay: %d KiB", fi.Size()>>10)
	}
}
