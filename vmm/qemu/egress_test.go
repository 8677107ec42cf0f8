package qemu

import (
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/vmm"
)

func TestPickUID_LowestFreeInTheRange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		used   map[int]string
		want   int
		wantOK bool
	}{
		{"none used", nil, 100, true},
		{"first used", map[int]string{100: "a"}, 101, true},
		{"a hole", map[int]string{100: "a", 102: "c"}, 101, true},
		{"outside the range does not count", map[int]string{99: "x", 103: "y"}, 100, true},
		{"all used", map[int]string{100: "a", 101: "b", 102: "c"}, 0, false},
	} {
		got, ok := pickUID(tc.used, 100, 3)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("%s: pickUID = %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.wantOK)
		}
	}
}

// TestCheckPolicy_DomainRulesNeedTheRedirect: a domain rule is enforced
// only when the guests' DNS reaches the node's resolver (a host
// nameserver, the firewall on); otherwise it is vmm.ErrUnsupported, not
// dropped.
func TestCheckPolicy_DomainRulesNeedTheRedirect(t *testing.T) {
	cidr := &egress.Policy{Otherwise: egress.Deny, Rules: []egress.Rule{{Action: egress.Allow, CIDR: "203.0.113.7"}}}
	dom := &egress.Policy{Otherwise: egress.Deny, Rules: []egress.Rule{{Action: egress.Allow, CIDR: "203.0.113.7"}, {Action: egress.Allow, Domain: "example.com"}}}
	ns := netip.MustParseAddr("192.0.2.53")
	for _, tc := range []struct {
		name     string
		dns      netip.Addr
		firewall string
		p        *egress.Policy
		unsup    bool
	}{
		{"no policy", netip.Addr{}, "off", nil, false},
		{"CIDRs without a redirect", netip.Addr{}, "off", cidr, false},
		{"domains redirected", ns, "nft", dom, false},
		{"domains without a host nameserver", netip.Addr{}, "nft", dom, true},
		{"domains with the firewall off", ns, "off", dom, true},
	} {
		d := &Driver{o: Options{EgressFirewall: tc.firewall}, hostDNS: tc.dns}
		err := d.checkPolicy(tc.p)
		if got := errors.Is(err, vmm.ErrUnsupported); got != tc.unsup || (err != nil && !tc.unsup) {
			t.Errorf("%s: %v, want unsupported %v", tc.name, err, tc.unsup)
		}
		if tc.unsup && !strings.Contains(err.Error(), "rule 1") {
			t.Errorf("%s: %v does not name rule 1", tc.name, err)
		}
	}
	if err := (&Driver{}).checkPolicy(&egress.Policy{Otherwise: "maybe"}); err == nil || errors.Is(err, vmm.ErrUnsupported) {
		t.Errorf("an invalid policy: %v", err)
	}
}

func TestResolverAddr_OneLoopbackAddressPerUID(t *testing.T) {
	seen := map[netip.Addr]int{}
	for u := DefaultEgressUID; u < DefaultEgressUID+DefaultEgressUIDs; u++ {
		a := resolverAddr(u)
		if !a.IsLoopback() {
			t.Fatalf("resolverAddr(%d) = %s, not loopback", u, a)
		}
		if o, ok := seen[a]; ok {
			t.Fatalf("resolverAddr(%d) = resolverAddr(%d) = %s", u, o, a)
		}
		seen[a] = u
	}
	if DefaultEgressUID+DefaultEgressUIDs > 65534 {
		t.Errorf("the default uid range reaches nobody (65534)")
	}
}

// TestAllocUID_PersistsPerVMAndIsReleasedByDestroy: each VM of the egress
// lane gets a uid of its own; it is kept in the run directory, so a new
// driver on the same Root (a node restart) neither gives it to another VM
// nor changes it; Destroy gives it back; the range has an end.
func TestAllocUID_PersistsPerVMAndIsReleasedByDestroy(t *testing.T) {
	root := t.TempDir()
	newDriver := func() *Driver {
		d, err := New(Options{Root: root, Config: &Config{}, EgressUID: 60000, EgressUIDs: 3, DNS: []string{"192.0.2.53"}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := newDriver()
	alloc := func(d *Driver, id string) (int, error) {
		dir := filepath.Join(root, id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		return d.allocUID(id, dir)
	}
	a, err := alloc(d, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := alloc(d, "b")
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatalf("two VMs share uid %d", a)
	}
	if again, _ := alloc(d, "a"); again != a {
		t.Errorf("a's uid changed on its restart: %d, then %d", a, again)
	}
	d2 := newDriver() // a node restart
	if again, _ := alloc(d2, "b"); again != b {
		t.Errorf("b's uid changed across drivers: %d, then %d", b, again)
	}
	c, err := alloc(d2, "c")
	if err != nil || c == a || c == b {
		t.Fatalf("c got %d (%v); a has %d, b %d", c, err, a, b)
	}
	if _, err := alloc(d2, "d"); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a fourth VM of a range of three: %v", err)
	}
	if err := d2.Destroy(t.Context(), vmm.Handle{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	if got, err := alloc(d2, "d"); err != nil || got != b {
		t.Errorf("after b's Destroy, d got %d (%v), want b's %d", got, err, b)
	}
}

// TestFirewallRules_LoadIntoTheKernel: nft accepts the script (in a
// namespace of its own), twice (it replaces itself).
func TestFirewallRules_LoadIntoTheKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nft")
	}
	ns := "hq-fw-" + filepath.Base(t.TempDir())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	for range 2 { // the second replaces the first
		cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(firewallRules(DefaultEgressUID, DefaultEgressUIDs, netip.MustParseAddr("192.0.2.53")))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nft: %v: %s", err, out)
		}
	}

}

// TestAllocUID_OutOfRangeIsGivenUp: a VM whose recorded uid lies outside
// the driver's range (the operator moved it) gets a uid of the range:
// the firewall covers only the range.
func TestAllocUID_OutOfRangeIsGivenUp(t *testing.T) {
	root := t.TempDir()
	d, err := New(Options{Root: root, Config: &Config{}, EgressUID: 60000, EgressUIDs: 2, DNS: []string{"192.0.2.53"}})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "old")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, uidFile), []byte("50000"), 0o600); err != nil {
		t.Fatal(err)
	}
	u, err := d.allocUID("old", dir)
	if err != nil || u != 60000 {
		t.Fatalf("allocUID = %d, %v; want 60000", u, err)
	}
	if readUID(dir) != 60000 {
		t.Errorf("the run directory still records %d", readUID(dir))
	}
}

// TestSetEgress_NoneLaneAcceptsAnyPolicy: a VM of the lane "none" has no
// network; SetEgress accepts any valid policy for it (domain rules too,
// which this driver could not enforce on the egress lane) and does
// nothing, as vmm.EgressEnforcer says.
func TestSetEgress_NoneLaneAcceptsAnyPolicy(t *testing.T) {
	root := t.TempDir()
	d, err := New(Options{Root: root, Config: &Config{}, EgressFirewall: "off", DNS: []string{"192.0.2.53"}})
	if err != nil {
		t.Fatal(err)
	}
	h := vmm.Handle{ID: "quiet", Dir: filepath.Join(root, "quiet")}
	if err := os.MkdirAll(h.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeRecord(record{Handle: h, Spec: vmm.Spec{ID: h.ID, Net: "none"}}); err != nil {
		t.Fatal(err)
	}
	dom := &egress.Policy{Otherwise: egress.Deny, Rules: []egress.Rule{{Action: egress.Allow, Domain: "example.com"}}}
	if err := d.SetEgress(t.Context(), h, dom); err != nil {
		t.Errorf("none lane: %v", err)
	}
	if err := d.SetEgress(t.Context(), h, &egress.Policy{Otherwise: "maybe"}); err == nil {
		t.Error("an invalid policy is accepted")
	}
	h.ID = "absent"
	if err := d.SetEgress(t.Context(), h, nil); !errors.Is(err, vmm.ErrNotRunning) {
		t.Errorf("no such VM: %v, want vmm.ErrNotRunning", err)
	}
}
