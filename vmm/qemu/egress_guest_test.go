package qemu

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/internal/testnet"
	"github.com/hearthvm/hearth/vmm"
)

// TestEgress_GuestReachesOnlyWhatItsPolicyAllows: a guest on the egress
// lane claimed under "deny everything but one address and one name"
// reaches that address and, once its resolver answered the name, the
// name's address, and not another address of the same network nor the
// port its pool's policy denies. The same
// holds after a stop and Restore before anyone calls SetEgress again (the
// policy is installed before the guest runs). Under a policy of names
// alone its resolver refuses any other name (the test network's DNS
// server is never asked for it). The "internet" is internal/testnet,
// routed from the host for its addresses alone.
func TestEgress_GuestReachesOnlyWhatItsPolicyAllows(t *testing.T) {
	d := diskDriver(t)
	const allowed, named, other = "198.18.7.1", "198.18.7.3", "198.18.7.2"
	n := testnet.Start(t, testnet.Host{Addr: allowed}, testnet.Host{Addr: other, Names: []string{"other.test"}}, testnet.Host{Addr: named, Names: []string{"named.test"}})
	n.RouteFromHost(t)
	if !d.dnsRedirected() {
		t.Skip("no nameserver in the host's /etc/resolv.conf for passt to forward to")
	}
	d.o.DNS = []string{testnet.DNSAddr + ":53"}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	// The pool's policy (installed at boot) denies the allowed address's
	// port 443: a packet leaves only if both policies allow it.
	pool := &egress.Policy{Otherwise: egress.Allow, Rules: []egress.Rule{{Action: egress.Deny, CIDR: allowed, Ports: []egress.Port{{Port: 443}}}}}
	h, err := d.Boot(ctx, vmm.Spec{ID: "policed", Net: "egress", Size: "small", Token: "tok-policed", Egress: pool})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, d, h)
	p := &egress.Policy{Otherwise: egress.Deny, Rules: []egress.Rule{
		{Action: egress.Allow, CIDR: allowed},
		{Action: egress.Allow, Domain: "named.test"},
	}}
	if err := d.SetEgress(ctx, h, p); err != nil {
		t.Fatal(err)
	}
	check := func(when string, h vmm.Handle) {
		t.Helper()
		out, _, err := run(h.Addr, h.Token, "nslookup other.test 2>&1; echo; nslookup named.test 2>&1; true")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, named) {
			t.Errorf("%s: the guest's resolver did not answer named.test:\n%s", when, out)
		}
		got := probes(t, h, []string{allowed + ":80", allowed + ":443", named + ":80", other + ":80", other + ":443"})
		for tg, want := range map[string]string{allowed + ":80": "open", allowed + ":443": "closed", named + ":80": "open", other + ":80": "closed", other + ":443": "closed"} {
			if got[tg] != want {
				t.Errorf("%s: %s is %s, want %s", when, tg, got[tg], want)
			}
		}
		if hits := n.Hits(other); hits != 0 {
			t.Errorf("%s: %s answered %d requests", when, other, hits)
		}
	}
	check("claimed", h)
	if h, err = d.Stop(ctx, h); err != nil {
		t.Fatal(err)
	}
	if h, err = d.Restore(ctx, h); err != nil {
		t.Fatal(err)
	}
	check("restored", h)

	// Names alone: no other name is answered, or even asked upstream.
	asked := n.Asked("other.test")
	if err := d.SetEgress(ctx, h, &egress.Policy{Otherwise: egress.Deny, Rules: []egress.Rule{{Action: egress.Allow, Domain: "named.test"}}}); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(h.Addr, h.Token, "nslookup other.test 2>&1; echo; nslookup named.test 2>&1; true")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, other) || !strings.Contains(out, named) {
		t.Errorf("names only: the guest's resolver answered other.test or not named.test:\n%s", out)
	}
	if n.Asked("other.test") != asked {
		t.Errorf("names only: the test network's DNS server was asked for other.test")
	}
	got := probes(t, h, []string{allowed + ":80", named + ":80"})
	if got[allowed+":80"] != "closed" || got[named+":80"] != "open" {
		t.Errorf("names only: %v, want %s closed and %s open", got, allowed, named)
	}

	// A clone of the running guest's checkpoint (a fork's child) resumes
	// running: its claim policy (Spec.ClaimEgress) holds, with its pool's,
	// before its guest does, with no SetEgress.
	snap := filepath.Join(t.TempDir(), "ckpt")
	if err := d.Snapshot(ctx, h, snap); err != nil {
		t.Fatal(err)
	}
	c, err := d.Clone(ctx, snap, vmm.Spec{ID: "policed-clone", Net: "egress", Token: "tok-clone", Egress: pool, ClaimEgress: p})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, d, c)
	check("cloned", c)
}
