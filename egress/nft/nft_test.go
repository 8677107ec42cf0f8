package nft

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hearthvm/hearth/egress"
)

// testNet is two network namespaces joined by a veth pair: "sbx", where
// the rendered filter is loaded and probes are sent (a sim sandbox's side),
// and "world", which owns every probe address and listens on every probe
// port, so an allowed egress.TCP connect completes and a denied one is reset by
// the filter. Nothing leaves the machine: the addresses exist only there.
type testNet struct {
	sbx, world string
}

var probeAddrs = []string{"203.0.113.7", "203.0.113.8", "203.0.113.200", "240.0.0.1", "198.18.1.1", "198.18.5.1", "198.51.100.9", "10.1.2.3", "169.254.169.254",
	"2001:db8::5", "2001:db8:1::9", "fd00::1"}

var probePorts = []int32{80, 443, 1500}

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
}

func startTestNet(t testing.TB) *testNet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, nftables)")
	}
	for _, bin := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s", bin)
		}
	}
	n := &testNet{sbx: fmt.Sprintf("hearth-egress-%d-sbx", os.Getpid()), world: fmt.Sprintf("hearth-egress-%d-world", os.Getpid())}
	run(t, "ip", "netns", "add", n.sbx)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", n.sbx).Run() })
	run(t, "ip", "netns", "add", n.world)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", n.world).Run() })
	in := func(ns string, args ...string) { run(t, append([]string{"ip", "netns", "exec", ns}, args...)...) }
	in(n.sbx, "ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1", "netns", n.world)
	in(n.sbx, "ip", "link", "set", "lo", "up")
	in(n.sbx, "ip", "link", "set", "v0", "up")
	in(n.sbx, "ip", "addr", "add", "192.0.2.1/24", "dev", "v0")
	in(n.sbx, "ip", "-6", "addr", "add", "2001:db8:ffff::1/64", "dev", "v0", "nodad")
	in(n.sbx, "ip", "route", "add", "default", "via", "192.0.2.2")
	in(n.sbx, "ip", "-6", "route", "add", "default", "via", "2001:db8:ffff::2")
	in(n.world, "ip", "link", "set", "lo", "up")
	in(n.world, "ip", "link", "set", "v1", "up")
	in(n.world, "ip", "addr", "add", "192.0.2.2/24", "dev", "v1")
	in(n.world, "ip", "-6", "addr", "add", "2001:db8:ffff::2/64", "dev", "v1", "nodad")
	for _, a := range probeAddrs {
		if strings.Contains(a, ":") {
			in(n.world, "ip", "-6", "addr", "add", a+"/128", "dev", "lo", "nodad")
		} else {
			in(n.world, "ip", "addr", "add", a+"/32", "dev", "lo")
		}
	}
	for _, port := range probePorts {
		ln := inNetns(t, n.world, func() (net.Listener, error) { return net.Listen("tcp", fmt.Sprintf("[::]:%d", port)) })
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	return n
}

// inNetns runs f on a thread in network namespace ns (sockets it opens stay
// there); the thread is discarded afterwards.
func inNetns[T any](t testing.TB, ns string, f func() (T, error)) T {
	t.Helper()
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
		}
		if err != nil {
			ch <- result{err: err}
			return
		}
		v, err := f()
		ch <- result{v, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("in %s: %v", ns, r.err)
	}
	return r.v
}

// filter opens the sandbox side's filter.
func (n *testNet) filter(t testing.TB) *Filter {
	fd, err := unix.Open("/run/netns/"+n.sbx, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	f, err := Open(fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// probe asks the kernel what the sandbox side's filter does to one packet.
func (n *testNet) probe(t *testing.T, proto, dst string, port int32) egress.Action {
	t.Helper()
	addr := net.JoinHostPort(dst, fmt.Sprint(port))
	return inNetns(t, n.sbx, func() (egress.Action, error) {
		switch proto {
		case egress.UDP:
			c, err := net.Dial("udp", addr)
			if err != nil {
				return "", err
			}
			defer c.Close()
			if _, err := c.Write([]byte("x")); errors.Is(err, syscall.EPERM) {
				return egress.Deny, nil
			} else if err != nil {
				return "", err
			}
			return egress.Allow, nil
		default:
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if errors.Is(err, syscall.ECONNREFUSED) {
				return egress.Deny, nil
			} else if err != nil {
				return "", err
			}
			c.Close()
			return egress.Allow, nil
		}
	})
}

// TestApply_KernelAgreesWithDecide loads each policy into a real
// network namespace and checks that the kernel's verdict on every probe
// (address × protocol × port, domain sets filled as the node's resolver
// fills them) is the one Decide gives.
func TestApply_KernelAgreesWithDecide(t *testing.T) {
	n := startTestNet(t)
	e2b, errs := egress.FromE2B(egress.E2B{DenyOut: []string{egress.AllTraffic}, AllowOut: []string{"203.0.113.7", "allowed.test", "*.wild.test"}})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	// resolved is what the resolver answered: the domain sets' elements.
	resolved := map[string][]string{"198.18.1.1": {"allowed.test"}, "2001:db8:1::9": {"a.wild.test"}, "198.51.100.9": {"denied.test"}}
	for _, tc := range []struct {
		name string
		p    *egress.Policy
	}{
		{"none", nil},
		{"agent-sandbox default", egress.Default()},
		{"e2b allow-list with domains", e2b},
		{"e2b specific deny", &egress.Policy{Otherwise: egress.Allow, Rules: []egress.Rule{{Action: egress.Deny, CIDR: "203.0.113.0/24"}, {Action: egress.Deny, CIDR: "fd00::/8"}}}},
		{"ordered with ports and except", &egress.Policy{Otherwise: egress.Deny, Rules: []egress.Rule{
			{Action: egress.Allow, CIDR: "203.0.113.7"},
			{Action: egress.Deny, CIDR: "203.0.113.0/24"},
			{Action: egress.Allow, CIDR: "198.18.0.0/15", Except: []string{"198.18.5.0/24"}, Ports: []egress.Port{{Protocol: egress.UDP, Port: 1000, EndPort: 2000}, {Port: 443}}},
			{Action: egress.Allow, Domain: "*.wild.test", Ports: []egress.Port{{Port: 80}}},
			{Action: egress.Allow, CIDR: "2001:db8::/48", Ports: []egress.Port{{Protocol: egress.TCP}}},
		}}},
		{"runs merged into sets", &egress.Policy{Otherwise: egress.Deny, Rules: []egress.Rule{
			{Action: egress.Deny, CIDR: "203.0.113.8"},
			{Action: egress.Allow, CIDR: "203.0.113.0/25"},
			{Action: egress.Allow, CIDR: "203.0.113.64/26"}, // inside the one before
			{Action: egress.Allow, CIDR: "198.18.0.0/16"},
			{Action: egress.Allow, CIDR: "198.19.0.0/16"}, // adjacent
			{Action: egress.Allow, CIDR: "240.0.0.0/4"},   // ends at the last address
			{Action: egress.Allow, CIDR: "2001:db8::5"},
			{Action: egress.Deny, Domain: "denied.test"},
			{Action: egress.Deny, Domain: "*.wild.test"},
			{Action: egress.Allow, CIDR: "0.0.0.0/0", Ports: []egress.Port{{Protocol: egress.UDP}}},
			{Action: egress.Allow, CIDR: "10.0.0.0/8", Ports: []egress.Port{{Protocol: egress.UDP}}},
			{Action: egress.Allow, Domain: "allowed.test"},
		}}},
		{"allow all but a deny run", &egress.Policy{Otherwise: egress.Allow, Rules: []egress.Rule{
			{Action: egress.Deny, CIDR: "::/0"},
			{Action: egress.Deny, CIDR: "10.0.0.0/8"},
			{Action: egress.Deny, CIDR: "169.254.169.254"},
		}}},
	} {
		for _, pool := range []*egress.Policy{nil, egress.Default(), poolDomains} {
			name := tc.name
			if pool != nil {
				name += fmt.Sprintf(" under a pool policy of %d rules", len(pool.Rules))
			}
			t.Run(name, func(t *testing.T) {
				ns := n.filter(t)
				if err := ns.Prepare(Options{Pool: pool}); err != nil {
					t.Fatal(err)
				}
				if err := ns.Apply(tc.p); err != nil {
					t.Fatal(err)
				}
				for dst, names := range resolved {
					for _, name := range names {
						for _, set := range SetsFor(pool, tc.p, name) {
							if err := ns.Pin(set, []netip.Addr{netip.MustParseAddr(dst)}, time.Hour); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
				for _, dst := range probeAddrs {
					for _, proto := range []string{egress.TCP, egress.UDP} {
						for _, port := range probePorts {
							want := tc.p.Decide(netip.MustParseAddr(dst), proto, port, resolved[dst])
							if pool.Decide(netip.MustParseAddr(dst), proto, port, resolved[dst]) == egress.Deny {
								want = egress.Deny // both must allow
							}
							if got := n.probe(t, proto, dst, port); got != want {
								t.Errorf("%s %s/%d: kernel %s, Decide %s", dst, proto, port, got, want)
							}
						}
					}
				}
			})
		}
	}
}

// poolDomains is a pool policy with domain rules of its own (a template
// that denies a wildcard and a private range).
var poolDomains = &egress.Policy{Otherwise: egress.Allow, Rules: []egress.Rule{
	{Action: egress.Deny, Domain: "*.wild.test"},
	{Action: egress.Deny, CIDR: "10.0.0.0/8"},
}}

// ownerProbeEnv asks the test binary, run again as a child, to probe one
// TCP address from a network namespace as a uid (TestOwnerProbeHelper).
const ownerProbeEnv = "HEARTH_NFT_OWNER_PROBE"

// TestOwnerProbeHelper is not a test: run as the child of
// TestOpenOwner_FiltersOnlyItsUid, it enters the namespace, becomes the
// uid (every thread: Go's Setuid) and prints "allow" or "deny" for a TCP
// connect.
func TestOwnerProbeHelper(t *testing.T) {
	arg := os.Getenv(ownerProbeEnv)
	if arg == "" {
		t.Skip("a helper of TestOpenOwner_FiltersOnlyItsUid")
	}
	var ns, addr string
	var uid int
	if _, err := fmt.Sscan(arg, &ns, &uid, &addr); err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setuid(uid); err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		fmt.Println("verdict=deny")
	case err != nil:
		t.Fatal(err)
	default:
		c.Close()
		fmt.Println("verdict=allow")
	}
}

// TestOpenOwner_FiltersOnlyItsUid: owner filters of two uids in one
// namespace (qemu's host-side filters, one per VM's passt) each hold only
// the packets their uid's sockets send — a policy that denies all but one
// address denies the others to its uid alone; the other uid has its own
// policy; a third uid (root, this test) is not filtered; Delete lifts it.
func TestOpenOwner_FiltersOnlyItsUid(t *testing.T) {
	n := startTestNet(t)
	nsfd, err := unix.Open("/run/netns/"+n.sbx, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(nsfd)
	const a, b = 64990, 64991
	only := func(addr string) *egress.Policy {
		return &egress.Policy{Otherwise: egress.Deny, Rules: []egress.Rule{{Action: egress.Allow, CIDR: addr}}}
	}
	for uid, p := range map[uint32]*egress.Policy{a: only("203.0.113.7"), b: only("203.0.113.8")} {
		f, err := OpenOwner(nsfd, uid)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		if err := f.Prepare(Options{}); err != nil {
			t.Fatal(err)
		}
		if err := f.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	probeAs := func(uid int, addr string) egress.Action {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestOwnerProbeHelper$", "-test.v")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %s", ownerProbeEnv, n.sbx, uid, addr))
		out, err := cmd.CombinedOutput()
		switch {
		case strings.Contains(string(out), "verdict=allow"):
			return egress.Allow
		case strings.Contains(string(out), "verdict=deny"):
			return egress.Deny
		}
		t.Fatalf("probe as %d of %s: %v\n%s", uid, addr, err, out)
		return ""
	}
	for _, c := range []struct {
		uid  int
		addr string
		want egress.Action
	}{
		{a, "203.0.113.7:80", egress.Allow},
		{a, "203.0.113.8:80", egress.Deny},
		{a, "[2001:db8::5]:80", egress.Deny},
		{b, "203.0.113.8:80", egress.Allow},
		{b, "203.0.113.7:443", egress.Deny},
	} {
		if got := probeAs(c.uid, c.addr); got != c.want {
			t.Errorf("uid %d to %s: %s, want %s", c.uid, c.addr, got, c.want)
		}
	}
	if got := n.probe(t, egress.TCP, "203.0.113.200", 80); got != egress.Allow {
		t.Errorf("root to 203.0.113.200: %s, want allow (no owner filter of its uid)", got)
	}
	// A new Filter of a (a restarted node) takes its chains over: Prepare
	// replaces them (the new policy holds, nothing of the old), Pin finds
	// its domain sets, b's filter is untouched.
	f, err := OpenOwner(nsfd, a)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Prepare(Options{Pool: &egress.Policy{Otherwise: egress.Allow, Rules: []egress.Rule{{Action: egress.Deny, CIDR: "203.0.113.200"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := f.Apply(&egress.Policy{Otherwise: egress.Deny, Rules: []egress.Rule{{Action: egress.Allow, Domain: "allowed.test"}}}); err != nil {
		t.Fatal(err)
	}
	for _, set := range SetsFor(nil, &egress.Policy{Rules: []egress.Rule{{Action: egress.Allow, Domain: "allowed.test"}}}, "allowed.test") {
		g, err := OpenOwner(nsfd, a) // a third process: finds the sets
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Pin(set, []netip.Addr{netip.MustParseAddr("203.0.113.8")}, time.Hour); err != nil {
			t.Fatal(err)
		}
		g.Close()
	}
	for _, c := range []struct {
		uid  int
		addr string
		want egress.Action
	}{
		{a, "203.0.113.7:80", egress.Deny},
		{a, "203.0.113.8:80", egress.Allow},
		{b, "203.0.113.8:80", egress.Allow},
		{b, "203.0.113.7:80", egress.Deny},
	} {
		if got := probeAs(c.uid, c.addr); got != c.want {
			t.Errorf("after a's new Prepare: uid %d to %s: %s, want %s", c.uid, c.addr, got, c.want)
		}
	}
	if err := f.Delete(); err != nil {
		t.Fatal(err)
	}
	if got := probeAs(a, "203.0.113.7:80"); got != egress.Allow {
		t.Errorf("uid %d after Delete: %s, want allow", a, got)
	}
	if got := probeAs(b, "203.0.113.7:80"); got != egress.Deny {
		t.Errorf("uid %d after a's Delete: %s, want deny", b, got)
	}
}
