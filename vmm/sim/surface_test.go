package sim_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hearthvm/hearth/internal/testagent"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/sim"
	"github.com/hearthvm/hearth/vmm/sim/seccomp"
)

// The guest's root makes no namespace of any kind, mounts nothing (not
// even in a namespace of its own) and creates no network device: the
// kernel's mount and netlink code never runs with a capability of the
// guest's. What it needs still works: chown, changing ids, ICMP echo
// sockets for ping.
func TestConfinement_NoNamespacesMountsOrLinks(t *testing.T) {
	d := newDriver(t, t.TempDir())
	h := boot(t, d, vmm.Spec{ID: "vm", Net: "none"})
	for _, probe := range []string{
		"unshare -n true", "unshare -m true", "unshare -U true", "unshare -r true",
		"unshare -p -f true", "unshare -i true", "unshare -u true", "unshare -C true",
		"mount -t tmpfs t /tmp",
		"unshare -m sh -c 'mount -t tmpfs t /tmp'",
		"unshare -n sh -c 'ip link add v0 type veth peer name v1'",
		"unshare -n sh -c 'ip link add br0 type bridge'",
		"ip link add d0 type dummy",
		"nsenter -t 1 -m true",
		"hostname other",
	} {
		r := run(t, h, probe+" 2>&1 && echo ALLOWED")
		if strings.Contains(r.stdout, "ALLOWED") {
			t.Errorf("the guest's root ran %q: %v", probe, r)
		}
	}
	if r := run(t, h, "hostname"); r.stdout != "sandbox\n" {
		t.Errorf("hostname after the probes: %v", r)
	}
	r := run(t, h, `touch /tmp/f && chown 1000:1000 /tmp/f && stat -c %u /tmp/f && su -s /bin/sh user -c "id -u"`)
	if r.stdout != "1000\n1000\n" {
		t.Errorf("chown, setuid: %v", r)
	}
	// ping's ICMP echo sockets, for every group (read from the host: the
	// guest sees the host's gids as unmapped).
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(h.PID), "-n", "cat", "/proc/sys/net/ipv4/ping_group_range").Output()
	if err != nil || strings.Join(strings.Fields(string(out)), " ") != "0 2147483647" {
		t.Errorf("ping_group_range in the VM's namespace: %q %v", out, err)
	}
}

// Every guest process's capability sets are within Docker's default set,
// root's and a set-uid program's alike, and the driver sees the same on
// the agent.
func TestConfinement_CapabilitiesBounded(t *testing.T) {
	d := newDriver(t, t.TempDir())
	h := boot(t, d, vmm.Spec{ID: "vm", Net: "none"})
	want := fmt.Sprintf("%016x", seccomp.Capabilities)
	r := run(t, h, "grep -E '^Cap(Bnd|Eff|Prm|Inh|Amb)' /proc/self/status")
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "CapBnd", "CapEff", "CapPrm":
			if v != want {
				t.Errorf("guest root %s = %s, want %s", k, v, want)
			}
		default:
			if v != "0000000000000000" {
				t.Errorf("guest root %s = %s, want none", k, v)
			}
		}
	}
	if r.exit != 0 || strings.Count(r.stdout, "\n") != 5 {
		t.Fatalf("probe: %v", r)
	}
	var agents int
	for _, pid := range cgroupProcs(t, h) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if pid == h.PID || !strings.Contains(string(b), "Name:\tsandbox-agent\n") {
			continue
		}
		agents++
		if err := seccomp.CheckStatus(b); err != nil {
			t.Errorf("the agent (pid %d): %v", pid, err)
		}
	}
	if agents != 1 {
		t.Fatalf("%d agents in the VM's cgroup", agents)
	}
}

// A guest process holds at most 65536 descriptors (soft limit 1024, as in
// Docker), and the guest's root cannot raise the hard limit.
func TestConfinement_FileDescriptorsBounded(t *testing.T) {
	d := newDriver(t, t.TempDir())
	h := boot(t, d, vmm.Spec{ID: "vm", Net: "none"})
	r := run(t, h, "ulimit -Sn; ulimit -Hn; ulimit -Hn 70000 2>&1 && echo RAISED")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) < 2 || lines[0] != "1024" || strings.Contains(r.stdout, "RAISED") {
		t.Fatalf("limits: %v", r)
	}
	if hard, err := strconv.Atoi(lines[1]); err != nil || hard > 65536 || hard < 1024 {
		t.Fatalf("hard limit %q", lines[1])
	}
	// Opening 70000 descriptors (up to the hard limit first) fails: the
	// shell dies on the first exec it cannot do.
	r = run(t, h, `ulimit -n $(ulimit -Hn); i=3; while [ $i -lt 70003 ]; do eval "exec $i</dev/null"; i=$((i+1)); done; echo OPENED`)
	if strings.Contains(r.stdout, "OPENED") {
		t.Fatalf("a guest process opened 70000 files: %v", r.exit)
	}
}

// The VM's processes are bounded by its pids cgroup (4096, any hierarchy):
// a fork bomb stops at pids.max and the agent keeps serving.
func TestConfinement_ForkBombBoundedByPidsMax(t *testing.T) {
	d := newDriver(t, t.TempDir())
	h := boot(t, d, vmm.Spec{ID: "vm", Net: "none"})
	dir := filepath.Join("/sys/fs/cgroup", h.Meta["cgroup"])
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		dir = filepath.Join("/sys/fs/cgroup/pids", h.Meta["cgroup"])
	}
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	if got := read("pids.max"); got != "4096" {
		t.Fatalf("pids.max = %s", got)
	}
	procs := strings.Fields(read("cgroup.procs"))
	if len(procs) < 2 { // the init and the agent at least
		t.Fatalf("the VM's pids cgroup holds %v", procs)
	}
	// The same bound, made small so the test forks little.
	const max = 64
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(max)), 0); err != nil {
		t.Fatal(err)
	}
	r := run(t, h, `i=0; while [ $i -lt 500 ]; do sleep 600 & i=$((i+1)); done; echo SPAWNED $i`)
	if strings.Contains(r.stdout, "SPAWNED 500") {
		t.Fatalf("500 processes under pids.max %d: %v", max, r)
	}
	if n, _ := strconv.Atoi(read("pids.current")); n > max || n < max-8 {
		t.Fatalf("pids.current = %d under pids.max %d", n, max)
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte("4096"), 0); err != nil {
		t.Fatal(err)
	}
	if r := run(t, h, "killall sleep; echo ok"); !strings.Contains(r.stdout, "ok") {
		t.Fatalf("after the bomb: %v", r)
	}
}

// No host path shows in what the guest can read about its mounts, even
// with the id-shifted template copies outside the driver's root (sandboxd's
// lower_cache): the overlay's layers are named by descriptor.
func TestConfinement_MountsShowNoHostPath(t *testing.T) {
	root, lower := t.TempDir(), t.TempDir()
	d, err := sim.New(sim.Options{Root: root, LowerCache: lower, AgentCommand: []string{testagent.Path(t)}, BootTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h := boot(t, d, vmm.Spec{ID: "vm", Net: "egress"})
	r := run(t, h, "cat /proc/self/mountinfo /proc/mounts /proc/1/mountinfo /proc/1/mounts /proc/self/mountstats")
	if r.exit != 0 || !strings.Contains(r.stdout, " / ") {
		t.Fatalf("probe: %v", r)
	}
	for _, host := range []string{root, lower, h.Dir, filepath.Dir(root), "..", "/tmp", "/var/lib"} {
		if strings.Contains(r.stdout, host) {
			t.Fatalf("the guest sees %q in its mounts:\n%s", host, r.stdout)
		}
	}
}

// The hostname resolves through /etc/hosts (sudo and friends look it up),
// on an image whose /etc/hosts does not name it (the built-in busybox
// root, like most OCI images), and the guest's root can still add entries.
func TestConfinement_HostnameInEtcHosts(t *testing.T) {
	d := newDriver(t, t.TempDir())
	h := boot(t, d, vmm.Spec{ID: "vm", Net: "none"})
	r := run(t, h, `h=$(hostname); grep -v '^#' /etc/hosts | grep -qw "$h" && echo "resolves $h"; echo '10.9.8.7 db' >> /etc/hosts && grep -c 'db$' /etc/hosts`)
	if r.stdout != "resolves sandbox\n1\n" {
		t.Fatalf("hosts: %v", r)
	}
}
