package node

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/internal/testagent"
	"github.com/hearthvm/hearth/internal/testnet"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/vmmtest"
)

// reaches reports whether an HTTP GET of target from inside s answers.
func reaches(t *testing.T, s nodeapi.Sandbox, token, target string) bool {
	t.Helper()
	r := testagent.Run(t, s.AgentAddr, token, "root", "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 "+target+" 80 2>&1; true")
	return strings.Contains(r.Stdout, "hello from")
}

// TestNode_Sim_EgressPolicyHoldsAcrossForkRestartAndReboot: a claim's
// egress policy is enforced from the claim on, by the claimed sandbox, its
// fork children, the same sandbox after the node crashed and restarted
// (re-adopted: a new resolver), and after a pause without memory (a new
// boot: a new filter); a node whose driver cannot enforce a policy refuses
// it on a networked lane (409) rather than dropping it.
func TestNode_Sim_EgressPolicyHoldsAcrossForkRestartAndReboot(t *testing.T) {
	net := testnet.Start(t,
		testnet.Host{Addr: "198.18.0.10", Names: []string{"allowed.test"}},
		testnet.Host{Addr: "198.18.0.20", Names: []string{"denied.test"}},
		testnet.Host{Addr: "198.18.0.30", Names: []string{"late.test"}},
	)
	base := t.TempDir()
	root := filepath.Join(base, "vms")
	driver := func() *gatedDriver {
		return &gatedDriver{Driver: newSimOn(t, root, net.UplinkPath), release: make(chan struct{})}
	}
	cfg := Config{Name: "n1", DataDir: filepath.Join(base, "data"), RootToken: testRoot, Driver: driver(),
		ReapInterval: 50 * time.Millisecond, RefillInterval: 50 * time.Millisecond}
	a := runNode(t, cfg)
	if _, err := a.root.PutPools(bg, []nodeapi.PoolSpec{{Template: "img", Net: "egress", Warm: 2}}); err != nil {
		t.Fatal(err)
	}
	a.waitWarm(t, "img", 2)
	open, err := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Net: "egress"})
	if err != nil {
		t.Fatal(err)
	}
	if !reaches(t, open, open.Token, "denied.test") {
		t.Fatal("without a policy denied.test is unreachable: the test network is broken")
	}
	p, errs := egress.FromE2B(egress.E2B{DenyOut: []string{egress.AllTraffic}, AllowOut: []string{"allowed.test", "late.test"}})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	a.waitWarm(t, "img", 2)
	sb, err := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Net: "egress", ClaimRef: "ns/filtered", TTLSeconds: 3600, Egress: p})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Egress == nil || len(sb.Egress.Rules) != len(p.Rules) {
		t.Fatalf("the record lacks its policy: %+v", sb.Egress)
	}
	check := func(what string, s nodeapi.Sandbox, token string) {
		t.Helper()
		if !reaches(t, s, token, "allowed.test") {
			t.Errorf("%s: allowed.test unreachable", what)
		}
		if reaches(t, s, token, "denied.test") || reaches(t, s, token, "198.18.0.20") {
			t.Errorf("%s: denied.test reachable", what)
		}
	}
	check("claimed", sb, sb.Token)
	kids, err := a.root.Fork(bg, sb.ID, nodeapi.ForkRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if kids[0].Egress == nil {
		t.Fatal("a fork child's record lacks its parent's policy")
	}
	check("fork child", kids[0], kids[0].Token)

	a.crash()
	// The crashed process's sockets close with it (its forwarders and
	// resolvers); its VMs run on.
	_ = cfg.Driver.(*gatedDriver).Close()
	cfg.Driver = driver() // a fresh driver, as in a new process
	b := runNode(t, cfg)
	g, err := b.root.Get(bg, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	check("re-adopted after a crash", g, sb.Token)
	// A name first resolved now is pinned only by a resolver that knows
	// the policy again (what was pinned before the crash still is).
	if !reaches(t, g, sb.Token, "late.test") {
		t.Error("re-adopted after a crash: the resolver does not pin for the policy")
	}

	if err := b.root.PauseWith(bg, sb.ID, nodeapi.PauseRequest{Memory: new(bool)}); err != nil {
		t.Fatal(err)
	}
	if err := b.root.Resume(bg, sb.ID); err != nil {
		t.Fatal(err)
	}
	g, err = b.root.Get(bg, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	check("rebooted after a pause without memory", g, sb.Token)
}

// A driver without vmm.EgressEnforcer cannot hold a networked sandbox to a
// policy: the claim is refused (409) and the warm VM not spent.
func TestClaim_EgressPolicyOnADriverThatCannotEnforceIt(t *testing.T) {
	tn := startNode(t, newFakeDriver(), nil)
	if _, err := tn.root.PutPools(bg, []nodeapi.PoolSpec{{Template: "img", Net: "egress", Warm: 1}, {Template: "img", Warm: 1}}); err != nil {
		t.Fatal(err)
	}
	tn.waitWarmLane(t, "img", "egress", 1) // a claim finding no warm VM is a 503, not the 409 under test
	tn.waitWarmLane(t, "img", "none", 1)
	p := egress.Default()
	_, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Net: "egress", Egress: p})
	if nodeapi.StatusOf(err) != http.StatusConflict {
		t.Fatalf("claim with a policy on an unenforcing driver: %v, want 409", err)
	}
	if _, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Net: "none", Egress: p}); err != nil {
		t.Fatalf("the none lane has no network to filter: %v", err)
	}
	bad := &egress.Policy{Otherwise: egress.Deny, Rules: []egress.Rule{{Action: egress.Allow, CIDR: "10.0.0.0/33"}}}
	if _, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Egress: bad}); nodeapi.StatusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "egress.rules[0].cidr") {
		t.Fatalf("an invalid policy: %v, want a 400 naming egress.rules[0].cidr", err)
	}
}

// partialEnforcer enforces no domain rule (as qemu without a host
// nameserver): its SetEgress answers vmm.ErrUnsupported for one.
type partialEnforcer struct{ *vmmtest.Driver }

func (partialEnforcer) SetEgress(_ context.Context, _ vmm.Handle, p *egress.Policy) error {
	for _, r := range p.Rules {
		if r.Domain != "" {
			return fmt.Errorf("%w: domain rules", vmm.ErrUnsupported)
		}
	}
	return nil
}

// A driver that enforces policies but not a rule of this one refuses the
// claim (409), naming why, rather than holding the sandbox to part of it;
// a policy it can enforce is claimed.
func TestClaim_EgressPolicyWithARuleTheDriverCannotEnforce(t *testing.T) {
	tn := startNode(t, partialEnforcer{newFakeDriver()}, nil)
	if _, err := tn.root.PutPools(bg, []nodeapi.PoolSpec{{Template: "img", Net: "egress", Warm: 2}}); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 2)
	dom := &egress.Policy{Otherwise: egress.Deny, Rules: []egress.Rule{{Action: egress.Allow, Domain: "example.com"}}}
	_, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Net: "egress", Egress: dom})
	if nodeapi.StatusOf(err) != http.StatusConflict || !strings.Contains(err.Error(), "domain rules") {
		t.Fatalf("claim with a domain rule the driver cannot enforce: %v, want a 409 naming it", err)
	}
	if _, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Net: "egress", Egress: egress.Default()}); err != nil {
		t.Fatalf("a policy the driver enforces: %v", err)
	}
}

// TestNode_Sim_PoolPolicyHoldsForEveryClaimOfThePool: a pool's policy (a
// SandboxTemplate's) is installed on its warm VMs as they boot: a claim
// without a policy of its own is held to it, a fork child too, and a
// change of the pool's policy replaces the warm VMs rather than handing
// out ones that hold the old.
func TestNode_Sim_PoolPolicyHoldsForEveryClaimOfThePool(t *testing.T) {
	net := testnet.Start(t,
		testnet.Host{Addr: "198.18.0.10", Names: []string{"allowed.test"}},
		testnet.Host{Addr: "198.18.0.20", Names: []string{"denied.test"}},
	)
	base := t.TempDir()
	root := filepath.Join(base, "vms")
	d := newSimOn(t, root, net.UplinkPath)
	tn := runNode(t, Config{Name: "n1", DataDir: filepath.Join(base, "data"), RootToken: testRoot, Driver: d,
		ReapInterval: 50 * time.Millisecond, RefillInterval: 50 * time.Millisecond})
	denyDenied := &egress.Policy{Otherwise: egress.Allow, Rules: []egress.Rule{{Action: egress.Deny, CIDR: "198.18.0.20"}}}
	if _, err := tn.root.PutPools(bg, []nodeapi.PoolSpec{{Template: "img", Net: "egress", Warm: 2, Egress: denyDenied}}); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 2)
	sb, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Net: "egress"})
	if err != nil {
		t.Fatal(err)
	}
	if !reaches(t, sb, sb.Token, "allowed.test") || reaches(t, sb, sb.Token, "denied.test") {
		t.Fatal("a claim of the pool is not held to the pool's policy")
	}
	kids, err := tn.root.Fork(bg, sb.ID, nodeapi.ForkRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if reaches(t, kids[0], kids[0].Token, "denied.test") {
		t.Error("a fork child is not held to its parent's pool policy")
	}
	// The template's policy changes: the pool's warm VMs are replaced.
	denyAllowed := &egress.Policy{Otherwise: egress.Allow, Rules: []egress.Rule{{Action: egress.Deny, CIDR: "198.18.0.10"}}}
	if _, err := tn.root.PutPools(bg, []nodeapi.PoolSpec{{Template: "img", Net: "egress", Warm: 2, Egress: denyAllowed}}); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 2)
	sb2, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Net: "egress"})
	if err != nil {
		t.Fatal(err)
	}
	if reaches(t, sb2, sb2.Token, "allowed.test") || !reaches(t, sb2, sb2.Token, "denied.test") {
		t.Error("after the pool's policy changed, a claim got a VM holding the old one")
	}
}
