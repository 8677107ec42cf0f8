package sim_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hearthvm/hearth/internal/testagent"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/sim"
)

func boot(t *testing.T, d *sim.Driver, spec vmm.Spec) vmm.Handle {
	t.Helper()
	h, err := d.Boot(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Destroy(context.Background(), h) })
	return h
}

func hostUID(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return -1
}

// Inside a VM nothing of the host shows: no host processes, no driver
// directory, no agent binary path; the guest's root is an unprivileged
// host uid; the token is in no process's argv or environment, and its
// file is readable by the guest's root only.
func TestConfinement_NoHostVisible(t *testing.T) {
	root := t.TempDir()
	d := newDriver(t, root)
	h := boot(t, d, vmm.Spec{ID: "vm", Net: "none", Token: "secret-token-1234"})

	r := run(t, h, `ls /proc | grep -c '^[0-9]'; id -u; hostname; for p in `+root+` `+h.Dir+` /work /tmp/`+filepath.Base(root)+`; do test -e $p && echo SEEN $p; done; stat -c '%a %u' /.hearth /.hearth/token`)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.exit != 0 || len(lines) != 5 {
		t.Fatalf("probe: %v", r)
	}
	if n, _ := strconv.Atoi(lines[0]); n == 0 || n > 8 {
		t.Fatalf("the VM sees %d processes in /proc: not its own pid namespace", n)
	}
	if lines[1] != "0" || lines[2] != "sandbox" {
		t.Fatalf("id/hostname: %q %q", lines[1], lines[2])
	}
	if lines[3] != "700 0" || lines[4] != "600 0" {
		t.Fatalf("token dir/file modes: %q %q (%v)", lines[3], lines[4], r)
	}
	if strings.Contains(r.stdout, "SEEN") {
		t.Fatalf("host paths visible: %v", r)
	}
	// No host path in what the guest can read about itself: mounts (overlay
	// layers, the agent), pid 1's command line, the environment.
	r = run(t, h, `cat /proc/self/mountinfo; tr '\0' ' ' </proc/1/cmdline; echo; env`)
	agentBin := testagent.Path(t)
	for _, host := range []string{root, h.Dir, filepath.Dir(agentBin), "/tmp/", "/work/"} {
		if strings.Contains(r.stdout, host) {
			t.Fatalf("the guest sees host path %s:\n%s", host, r.stdout)
		}
	}
	// No descriptor of the host (the driver's inheritance) reaches a guest
	// process: ls has stdio and its own directory fd only.
	if r := run(t, h, `ls /proc/self/fd | tr '\n' ' '`); r.stdout != "0 1 2 3 " {
		t.Fatalf("guest process fds: %v", r)
	}
	// The syscall filter: no nested user namespaces, no keyrings.
	if r := run(t, h, `unshare -U true && echo UNSHARED; unshare -r true && echo UNSHARED; echo done`); strings.Contains(r.stdout, "UNSHARED") || !strings.Contains(r.stdout, "done") {
		t.Fatalf("a guest created a user namespace: %v", r)
	}
	// (No other namespace either: TestConfinement_NoNamespacesMountsOrLinks.)
	// busybox's setpriv cannot change ids: su does.
	if r := run(t, h, `su -s /bin/sh user -c 'id -u; cat /.hearth/token'`); r.exit == 0 || r.stdout != "1000\n" {
		t.Fatalf("uid 1000 read the token: %v", r)
	}
	procs := cgroupProcs(t, h)
	for _, pid := range procs {
		for _, f := range []string{"cmdline", "environ"} {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
			if strings.Contains(string(b), "secret-token") {
				t.Fatalf("token in /proc/%d/%s", pid, f)
			}
		}
		if pid != h.PID {
			if uid := hostUID(pid); uid < sim.DefaultUIDBase {
				t.Fatalf("VM process %d runs as host uid %d", pid, uid)
			}
		}
	}
	if uid := hostUID(h.PID); uid != sim.DefaultUIDBase+sim.UIDRange {
		t.Fatalf("init runs as host uid %d after setup, want %d", uid, sim.DefaultUIDBase+sim.UIDRange)
	}
}

// A guest that turns its mount points (/proc, /dev, /.hearth, and the
// egress lane's /etc/resolv.conf) into links to host paths — absolute,
// relative ("../.."), through /proc/self/root or /proc/1/root — or into a
// hard link or a file (its writable layer persists across restarts) gets
// fresh directories: the host's init neither creates, mounts on, writes
// nor chowns anything outside the root, and the guest comes up.
func TestConfinement_SymlinkedMountPoints(t *testing.T) {
	ctx := context.Background()
	host := t.TempDir()
	bait := filepath.Join(host, "bait")
	if err := os.MkdirAll(bait, 0o755); err != nil {
		t.Fatal(err)
	}
	baitFile := filepath.Join(host, "bait.conf")
	if err := os.WriteFile(baitFile, []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, dirTarget, fileTarget string }{
		{"absolute", bait, baitFile},
		{"relative", "../../../../../../../../../../.." + bait, "../../../../../../../../../../.." + baitFile},
		{"proc self root", "/proc/self/root" + bait, "/proc/self/root" + baitFile},
		{"proc 1 root", "/proc/1/root" + bait, "/proc/1/root" + baitFile},
		{"hard link", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriver(t, t.TempDir())
			h := boot(t, d, vmm.Spec{ID: "vm", Net: "egress"})
			// Replace the mount points on the writable layer from the host
			// side, as a guest could have done on a previous run.
			up := filepath.Join(h.Dir, "upperfs", "upper")
			if err := os.MkdirAll(filepath.Join(up, "etc"), 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.dirTarget == "" {
				if err := os.WriteFile(filepath.Join(up, "file"), []byte("guest\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for _, top := range []string{"proc", "dev", ".hearth", "etc/resolv.conf"} {
				p := filepath.Join(up, top)
				_ = os.RemoveAll(p)
				var err error
				switch {
				case tc.dirTarget == "":
					err = os.Link(filepath.Join(up, "file"), p)
				case top == "etc/resolv.conf":
					err = os.Symlink(tc.fileTarget, p)
				default:
					err = os.Symlink(tc.dirTarget, p)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			h, err := d.Stop(ctx, h)
			if err != nil {
				t.Fatal(err)
			}
			if h, err = d.Restore(ctx, h); err != nil {
				t.Fatal(err)
			}
			if r := run(t, h, "test -d /proc/self && test -c /dev/null && test -d /.hearth && echo ok"); r.stdout != "ok\n" {
				t.Fatalf("after restart: %v", r)
			}
			if ents, _ := os.ReadDir(bait); len(ents) != 0 {
				t.Fatalf("the init created %v in the host's %s", ents, bait)
			}
			if b, _ := os.ReadFile(baitFile); string(b) != "host\n" {
				t.Fatalf("the host's %s now holds %q", baitFile, b)
			}
			b, _ := os.ReadFile("/proc/self/mountinfo")
			if strings.Contains(string(b), host) {
				t.Fatalf("something is mounted under the host's %s", host)
			}
			if tc.dirTarget == "" {
				if b, _ := os.ReadFile(filepath.Join(up, "file")); string(b) != "guest\n" {
					t.Fatalf("a hard link at a mount point was written through: %q", b)
				}
			}
		})
	}
}

// Two VMs writing the same absolute path each see only their own file.
func TestConfinement_SeparateFilesystems(t *testing.T) {
	d := newDriver(t, t.TempDir())
	a := boot(t, d, vmm.Spec{ID: "a", Net: "none"})
	b := boot(t, d, vmm.Spec{ID: "b", Net: "none"})
	for _, h := range []vmm.Handle{a, b} {
		if r := run(t, h, "echo "+h.ID+" > /etc/shared.txt && mkdir -p /root/x && echo "+h.ID+" > /root/x/f"); r.exit != 0 {
			t.Fatalf("%s write: %v", h.ID, r)
		}
	}
	for _, h := range []vmm.Handle{a, b} {
		if r := run(t, h, "cat /etc/shared.txt /root/x/f"); r.stdout != h.ID+"\n"+h.ID+"\n" {
			t.Fatalf("%s reads %q", h.ID, r.stdout)
		}
	}
}

// The network lanes: from inside, nothing of the host (its loopback through
// slirp's gateway, its own addresses) nor 169.254.169.254 is reachable;
// with net none only loopback exists.
func TestConfinement_Network(t *testing.T) {
	ln, err := net.Listen("tcp", "0.0.0.0:0") // every host address, loopback included
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	targets := []string{"127.0.0.1", "10.0.2.2", "169.254.169.254"}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			targets = append(targets, ipn.IP.String())
		}
	}
	d := newDriver(t, t.TempDir())
	for _, lane := range []string{"none", "egress"} {
		t.Run(lane, func(t *testing.T) {
			h := boot(t, d, vmm.Spec{ID: "net-" + lane, Net: lane})
			links := run(t, h, "ip -o link | cut -d: -f2")
			names := strings.Fields(links.stdout)
			if lane == "none" && (len(names) != 1 || names[0] != "lo") {
				t.Fatalf("net none has links %v", names)
			}
			if lane == "egress" && !strings.Contains(links.stdout, "tap0") {
				t.Fatalf("net egress lacks tap0: %v", links)
			}
			if lane == "egress" {
				if r := run(t, h, "cat /etc/resolv.conf; echo x > /etc/resolv.conf && echo WROTE"); r.stdout != "nameserver 10.0.2.100\n" {
					t.Fatalf("egress resolv.conf: %v", r)
				}
			}
			for _, ip := range targets {
				r := run(t, h, "nc -w 2 "+ip+" "+port+" </dev/null && echo CONNECTED")
				if strings.Contains(r.stdout, "CONNECTED") {
					t.Errorf("%s: connected to %s:%s", lane, ip, port)
				}
			}
			// The guest's root cannot lift the blocks.
			if r := run(t, h, "ip route del unreachable 169.254.0.0/16 2>&1 || ip link set lo down 2>&1; echo done"); !strings.Contains(r.stdout, "done") {
				t.Fatalf("probe: %v", r)
			}
			if r := run(t, h, "nc -w 2 169.254.169.254 80 </dev/null && echo CONNECTED"); strings.Contains(r.stdout, "CONNECTED") {
				t.Errorf("%s: the guest removed its route block", lane)
			}
			if n := accepted.Load(); n != 0 {
				t.Fatalf("the host listener accepted %d connections from %s", n, lane)
			}
		})
	}
}

// Pause freezes every process of the VM, Destroy kills every one (no
// survivor reparented to the host), and the size class sets the limits.
func TestConfinement_CgroupFreezeKillLimits(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, t.TempDir())
	h := boot(t, d, vmm.Spec{ID: "vm", Net: "egress", Size: "medium"})
	if r := run(t, h, "setsid sleep 1000 </dev/null >/dev/null 2>&1 & sleep 1000 </dev/null >/dev/null 2>&1 & echo ok"); r.exit != 0 {
		t.Fatalf("spawn: %v", r)
	}
	procs := cgroupProcs(t, h)
	if len(procs) < 5 { // init, agent, slirp4netns, 2 sleeps
		t.Fatalf("cgroup procs %v", procs)
	}
	if _, err := d.Pause(ctx, h); err != nil {
		t.Fatal(err)
	}
	if !frozen(t, h) {
		t.Fatal("not frozen")
	}
	if h, err := d.Resume(ctx, h); err != nil || frozen(t, h) {
		t.Fatalf("resume: %v", err)
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil { // v1
		cg := h.Meta["cgroup"]
		for file, want := range map[string]string{
			"memory/" + cg + "/memory.limit_in_bytes": strconv.Itoa(8 << 30),
			"cpu/" + cg + "/cpu.cfs_quota_us":         "400000",
		} {
			b, _ := os.ReadFile("/sys/fs/cgroup/" + file)
			if strings.TrimSpace(string(b)) != want {
				t.Errorf("%s = %q, want %s", file, b, want)
			}
		}
	} else {
		b, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup", h.Meta["cgroup"], "memory.max"))
		if strings.TrimSpace(string(b)) != strconv.Itoa(8<<30) {
			t.Errorf("memory.max = %q", b)
		}
	}
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if alive(p) {
			t.Fatalf("process %d survived Destroy", p)
		}
	}
	if _, err := os.Stat(cgroupDir(h)); !os.IsNotExist(err) {
		t.Fatalf("cgroup left: %v", err)
	}
}

// After a node crash (the driver dropped without cleanup) a new driver on
// the same root lists every VM, re-adopts or destroys them, and Destroy
// leaves no process in their cgroups.
func TestConfinement_CrashAdoption(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d1 := newDriver(t, root)
	var hs []vmm.Handle
	for i := 0; i < 2; i++ {
		h, err := d1.Boot(ctx, vmm.Spec{ID: fmt.Sprintf("vm%d", i), Net: []string{"none", "egress"}[i]})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	d2 := newDriver(t, root)
	live, err := d2.List(ctx)
	if err != nil || len(live) != 2 {
		t.Fatalf("List = %+v %v", live, err)
	}
	r, err := d2.Restore(ctx, hs[0])
	if err != nil {
		t.Fatal(err)
	}
	if r.PID != hs[0].PID {
		t.Fatalf("Restore restarted a live VM")
	}
	mustHealthy(t, r)
	if out := run(t, r, "echo hi"); out.stdout != "hi\n" {
		t.Fatalf("adopted VM: %v", out)
	}
	for _, h := range live {
		procs := cgroupProcs(t, h)
		if err := d2.Destroy(ctx, h); err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			if alive(p) {
				t.Fatalf("process %d of %s survived", p, h.ID)
			}
		}
		if left := cgroupProcs(t, h); len(left) != 0 {
			t.Fatalf("cgroup of %s holds %v", h.ID, left)
		}
		if _, err := os.Stat(cgroupDir(h)); !os.IsNotExist(err) {
			t.Fatalf("cgroup of %s left: %v", h.ID, err)
		}
	}
}

// A clone never accepts the checkpointed VM's token, and Dial reaches any
// guest port.
func TestClone_FreshTokenAndDial(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, t.TempDir())
	g := boot(t, d, vmm.Spec{ID: "golden", Net: "none", Token: "golden-token"})
	ck := filepath.Join(t.TempDir(), "ck")
	if err := d.Snapshot(ctx, g, ck); err != nil {
		t.Fatal(err)
	}
	c, err := d.Clone(ctx, ck, vmm.Spec{ID: "c1", Token: "clone-token"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, c)
	old := c
	old.Token = "golden-token"
	if r := runStatus(t, old); r != 401 {
		t.Fatalf("golden token on the clone: HTTP %d", r)
	}
	if r := run(t, c, "echo ok"); r.stdout != "ok\n" {
		t.Fatalf("clone token: %v", r)
	}
	if r := run(t, c, "(echo hello-from-guest | nc -l -p 8080 &) ; sleep 0.2; echo started"); r.exit != 0 {
		t.Fatalf("listener: %v", r)
	}
	var conn net.Conn
	for i := 0; i < 50; i++ {
		if conn, err = d.Dial(ctx, c, 8080); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer conn.Close()
	buf := make([]byte, 64)
	n, _ := conn.Read(buf)
	if got := string(buf[:n]); got != "hello-from-guest\n" {
		t.Fatalf("Dial read %q", got)
	}
}

// A re-key through the agent (only a tenant can do that in sim) lasts
// until the VM restarts: the host's token is the truth, and a restarted VM
// answers the token the node gave it again. Nothing is read back from the
// guest.
func TestRekey_HostTokenWinsAfterRestart(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, t.TempDir())
	h := boot(t, d, vmm.Spec{ID: "vm", Net: "none", Token: "first"})
	req, _ := http.NewRequest(http.MethodPost, "http://"+h.Addr+"/hearth/identity", strings.NewReader(`{"token":"second"}`))
	req.Header.Set("X-Access-Token", "first")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("identity: HTTP %d", resp.StatusCode)
	}
	if h, err = d.Stop(ctx, h); err != nil {
		t.Fatal(err)
	}
	if h, err = d.Restore(ctx, h); err != nil {
		t.Fatal(err)
	}
	if h.Token != "first" {
		t.Fatalf("token after restart %q, want the host's %q", h.Token, "first")
	}
	if r := run(t, h, "echo ok"); r.stdout != "ok\n" {
		t.Fatalf("host token after restart: %v", r)
	}
	rekeyed := h
	rekeyed.Token = "second"
	if code := runStatus(t, rekeyed); code != http.StatusUnauthorized {
		t.Fatalf("the guest's own token after restart: HTTP %d", code)
	}
	if r := run(t, h, "/bin/bash -l -c 'echo $0 ok'"); r.exit != 0 || !strings.HasSuffix(r.stdout, "ok\n") {
		t.Fatalf("/bin/bash -l -c: %v", r)
	}
}

// A guest's root that makes its token file a link to a host path (absolute,
// relative, through /proc/1/root) never gets the host to read that file:
// not on Stop, Restore (re-attach or restart), Pause or Resume; the handle
// keeps the node's token.
func TestToken_GuestSymlinkNeverReadByHost(t *testing.T) {
	ctx := context.Background()
	secret := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(secret, []byte("HOST-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{secret, "../../../../../../../../.." + secret, "/proc/1/root" + secret} {
		t.Run(strings.ReplaceAll(target, "/", "_"), func(t *testing.T) {
			d := newDriver(t, t.TempDir())
			h := boot(t, d, vmm.Spec{ID: "vm", Net: "none", Token: "tok"})
			if r := run(t, h, "ln -sf '"+target+"' /.hearth/token && echo ok"); r.stdout != "ok\n" {
				t.Fatalf("ln: %v", r)
			}
			check := func(when string, h vmm.Handle) {
				t.Helper()
				if h.Token != "tok" {
					t.Fatalf("%s: handle token %q (the host file is %q)", when, h.Token, "HOST-SECRET")
				}
			}
			var err error
			if h, err = d.Pause(ctx, h); err != nil {
				t.Fatal(err)
			}
			check("pause", h)
			if h, err = d.Resume(ctx, h); err != nil {
				t.Fatal(err)
			}
			check("resume", h)
			if h, err = d.Restore(ctx, h); err != nil { // re-attach
				t.Fatal(err)
			}
			check("re-attach", h)
			if h, err = d.Stop(ctx, h); err != nil {
				t.Fatal(err)
			}
			check("stop", h)
			if h, err = d.Restore(ctx, h); err != nil {
				t.Fatal(err)
			}
			check("restart", h)
		})
	}
}

// A VM left by the earlier, unconfined sim (an agent process group whose
// command line names <dir>/addr) is killed by Restore and Destroy: an
// upgraded node leaves no orphan.
func TestLegacyAgentIsKilled(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := newDriver(t, root)
	for _, op := range []string{"restore", "destroy"} {
		dir := filepath.Join(root, "old-"+op)
		if err := os.MkdirAll(filepath.Join(dir, "home"), 0o700); err != nil {
			t.Fatal(err)
		}
		// "; :" keeps the shell itself running (a lone command is exec'd
		// in place, and the command line naming <dir>/addr would go).
		cmd := exec.Command("/bin/sh", "-c", "sleep 1000; :", "agent", "--addr-file", filepath.Join(dir, "addr"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go cmd.Wait()
		rec := fmt.Sprintf(`{"id":"old-%s","pid":%d,"addr":"127.0.0.1:1"}`, op, cmd.Process.Pid)
		if err := os.WriteFile(filepath.Join(dir, "vm.json"), []byte(rec), 0o600); err != nil {
			t.Fatal(err)
		}
		// Start can return before /proc shows the new command line (it
		// reads empty for a moment): wait until it names <dir>/addr, as a
		// long-running legacy agent's does.
		addrArg := []byte(filepath.Join(dir, "addr") + "\x00")
		for i := 0; ; i++ {
			cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid))
			if bytes.Contains(cl, addrArg) {
				break
			}
			if i > 500 {
				t.Fatalf("the legacy agent's command line never showed: %q", cl)
			}
			time.Sleep(10 * time.Millisecond)
		}
		h := vmm.Handle{ID: "old-" + op, Dir: dir, PID: cmd.Process.Pid}
		if op == "restore" {
			if _, err := d.Restore(ctx, h); err == nil {
				t.Fatal("restored a legacy VM")
			}
		} else if err := d.Destroy(ctx, h); err != nil {
			t.Fatal(err)
		}
		for i := 0; alive(cmd.Process.Pid); i++ {
			if i > 200 {
				t.Fatalf("%s left the legacy agent running", op)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
