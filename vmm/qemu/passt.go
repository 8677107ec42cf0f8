package qemu

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hearthvm/hearth/agentapi"
)

// The "egress" lane: the guest's NIC is a stream socket to its own passt
// process (user-mode networking by the passt project: outbound TCP/UDP are
// re-made as host sockets; no packet handling here). passt runs as a uid
// of the VM's own from Options.EgressUID on (egress.go) with --no-map-gw,
// so the guest's gateway address is not the host's loopback, and the
// driver's nftables table rejects new connections those uids make to any
// address of the node itself (fib daddr type local: loopback and every
// interface address, current or future) and to link-local 169.254.0.0/16
// (cloud metadata) and fe80::/10 — but for each uid its own VM's resolver.
//
// Guest addressing is the same as on the "none" lane's slirp: 10.0.2.15/24,
// gateway 10.0.2.2, DNS 10.0.2.3 (forwarded by passt to the host's
// nameserver, which the firewall rewrites to the VM's own resolver), so a
// checkpoint taken on one lane clones onto either.

// DefaultEgressUID is the first uid passt runs as when Options.EgressUID is
// 0. The range must not be shared with anything else: the firewall and the
// egress filters match on it.
const DefaultEgressUID = 64872

// FirewallTable is the nftables table (family inet) the driver owns.
const FirewallTable = "hearth_qemu"

// passtArgs is passt's command line for a VM whose agent port the host
// reaches at 127.0.0.1:hostPort. The tap side is inherited as fd 3.
func passtArgs(uid, hostPort int) []string {
	return []string{
		"--foreground", "--quiet", "--ipv4-only",
		"--runas", fmt.Sprintf("%d:%d", uid, uid),
		"--fd", "3",
		"--no-map-gw",
		"--address", "10.0.2.15", "--netmask", "24", "--gateway", "10.0.2.2",
		"--dns-forward", "10.0.2.3",
		"--tcp-ports", fmt.Sprintf("127.0.0.1/%d:%d", hostPort, agentapi.Port),
		"--udp-ports", "none",
	}
}

// firewallRules is the nft script that (re)creates FirewallTable for the
// uids [uid, uid+n): packets of new connections from them to the node's
// own addresses or link-local ranges are rejected. Replies on connections
// the node opened (the agent port forward) are not new, so they pass.
// With a valid dns (hostDNS: where passt forwards the guest's queries),
// each uid's DNS to it, UDP and TCP port 53, is rewritten (DNAT) to its
// VM's resolver (resolverAddr), which that uid alone may reach.
func firewallRules(uid, n int, dns netip.Addr) string {
	t := "inet " + FirewallTable
	r := fmt.Sprintf("%d-%d", uid, uid+n-1)
	var redirect string
	if dns.IsValid() {
		pairs := make([]string, 0, n)
		nat := make([]string, 0, n)
		for u := uid; u < uid+n; u++ {
			pairs = append(pairs, fmt.Sprintf("%d . %s", u, resolverAddr(u)))
			nat = append(nat, fmt.Sprintf("%d : %s", u, resolverAddr(u)))
		}
		redirect = fmt.Sprintf(`	set resolvers {
		type uid . ipv4_addr
		elements = { %[1]s }
	}
	map resolver_of {
		type uid : ipv4_addr
		elements = { %[2]s }
	}
	chain dns {
		type nat hook output priority -100; policy accept;
		meta skuid %[3]s ip daddr %[4]s meta l4proto { tcp, udp } th dport 53 dnat ip to meta skuid map @resolver_of
	}
`, strings.Join(pairs, ", "), strings.Join(nat, ", "), r, dns)
	}
	accept := ""
	if dns.IsValid() {
		accept = "\t\tmeta l4proto { tcp, udp } th dport 53 meta skuid . ip daddr @resolvers accept\n"
	}
	return fmt.Sprintf(`table %[1]s
delete table %[1]s
table %[1]s {
%[3]s	chain output {
		type filter hook output priority 0; policy accept;
%[4]s		meta skuid %[2]s ct state new fib daddr type local reject
		meta skuid %[2]s ct state new ip daddr 169.254.0.0/16 reject
		meta skuid %[2]s ct state new ip6 daddr fe80::/10 reject
		meta skuid %[2]s ct state new ip6 daddr ::1 reject
	}
}
`, t, r, redirect, accept)
}

// ensureFirewall (re)installs firewallRules before every egress launch, so
// a table flushed or deleted behind the driver's back comes back before
// the next guest gets a network. nft applies the script as one
// transaction: VMs already running are never unfiltered. One EgressUID per
// host: drivers with different uids would replace each other's table.
func (d *Driver) ensureFirewall(ctx context.Context) error {
	if d.o.EgressFirewall == "off" {
		return nil
	}
	d.fwMu.Lock()
	defer d.fwMu.Unlock()
	cmd := exec.CommandContext(ctx, d.o.Nft, "-f", "-")
	cmd.Stdin = strings.NewReader(firewallRules(d.o.EgressUID, d.o.EgressUIDs, d.hostDNS))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("qemu: egress firewall (nft): %v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// startPasst starts dir's passt forwarding 127.0.0.1:hostPort, connected to
// the returned socket end, which QEMU must inherit as fd 3. The caller
// closes it once QEMU started.
func (d *Driver) startPasst(dir string, uid, hostPort int) (pid int, qemuEnd *os.File, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, nil, fmt.Errorf("qemu: socketpair: %w", err)
	}
	passtEnd := os.NewFile(uintptr(fds[0]), "passt")
	qemuEnd = os.NewFile(uintptr(fds[1]), "qemu-net")
	defer passtEnd.Close()
	logf, err := os.OpenFile(filepath.Join(dir, "passt.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		qemuEnd.Close()
		return 0, nil, err
	}
	defer logf.Close()
	cmd := exec.Command(d.o.Passt, passtArgs(uid, hostPort)...)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{passtEnd}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		qemuEnd.Close()
		return 0, nil, fmt.Errorf("qemu: start passt: %w", err)
	}
	go func() { _ = cmd.Wait() }() // reap
	pid = cmd.Process.Pid
	if err := os.WriteFile(filepath.Join(dir, "passt.pid"), []byte(fmt.Sprintf("%d %d", pid, hostPort)), 0o600); err != nil {
		_ = cmd.Process.Kill()
		qemuEnd.Close()
		return 0, nil, err
	}
	return pid, qemuEnd, nil
}

// passtMarker is what identifies dir's passt in /proc/PID/cmdline.
func passtMarker(hostPort int) string {
	return fmt.Sprintf("127.0.0.1/%d:%d", hostPort, agentapi.Port)
}

// killPasst ends dir's passt, if any (it also exits by itself once QEMU's
// end of the socket closes).
func (d *Driver) killPasst(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "passt.pid"))
	if err != nil {
		return
	}
	f := strings.Fields(string(b))
	if len(f) == 2 {
		pid, _ := strconv.Atoi(f[0])
		port, _ := strconv.Atoi(f[1])
		if pidAlive(pid, passtMarker(port)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	_ = os.Remove(filepath.Join(dir, "passt.pid"))
}

// passtAlive reports whether dir's passt runs.
func passtAlive(dir string) bool { return passtPID(dir) > 0 }

// passtPID is the pid of dir's running passt, or 0.
func passtPID(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "passt.pid"))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	pid, _ := strconv.Atoi(f[0])
	port, _ := strconv.Atoi(f[1])
	if !pidAlive(pid, passtMarker(port)) {
		return 0
	}
	return pid
}
