package qemu

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestPasstArgs_OutboundOnlyAndTheAgentPort(t *testing.T) {
	a := passtArgs(64872, 40001)
	for _, want := range [][]string{
		{"--runas", "64872:64872"},
		{"--fd", "3"},
		{"--no-map-gw"},
		{"--address", "10.0.2.15"},
		{"--gateway", "10.0.2.2"},
		{"--dns-forward", "10.0.2.3"},
		{"--tcp-ports", "127.0.0.1/40001:49983"},
		{"--udp-ports", "none"},
	} {
		i := slices.Index(a, want[0])
		if i < 0 || (len(want) == 2 && (i+1 >= len(a) || a[i+1] != want[1])) {
			t.Errorf("passt args %q lack %q", a, want)
		}
	}
	if !strings.Contains(strings.Join(a, " "), passtMarker(40001)) {
		t.Errorf("passt args %q lack the marker pidAlive looks for", a)
	}
}

func TestFirewallRules_RejectNewConnectionsToTheNodeAndLinkLocal(t *testing.T) {
	for _, dns := range []netip.Addr{{}, netip.MustParseAddr("10.255.255.53")} {
		r := firewallRules(64872, 512, dns)
		want := []string{
			"table inet hearth_qemu\ndelete table inet hearth_qemu\n", // idempotent replace, one transaction
			"type filter hook output priority 0; policy accept;",
			"meta skuid 64872-65383 ct state new fib daddr type local reject",
			"meta skuid 64872-65383 ct state new ip daddr 169.254.0.0/16 reject",
			"meta skuid 64872-65383 ct state new ip6 daddr fe80::/10 reject",
		}
		redirect := []string{
			// each uid's queries to the host's nameserver go to its own resolver
			"meta skuid 64872-65383 ip daddr 10.255.255.53 meta l4proto { tcp, udp } th dport 53 dnat ip to meta skuid map @resolver_of",
			"64872 : 127.78.253.104, 64873 : 127.78.253.105,",
			// which it alone reaches, before the node's addresses are rejected
			"accept\n\t\tmeta skuid 64872-65383 ct state new fib daddr type local reject",
			"meta l4proto { tcp, udp } th dport 53 meta skuid . ip daddr @resolvers accept",
			"64872 . 127.78.253.104, 64873 . 127.78.253.105,",
		}
		for _, w := range want {
			if !strings.Contains(r, w) {
				t.Errorf("dns %v: rules lack %q:\n%.2000s", dns, w, r)
			}
		}
		for _, w := range redirect {
			if strings.Contains(r, w) != dns.IsValid() {
				t.Errorf("dns %v: rules hold %q: %v", dns, w, strings.Contains(r, w))
			}
		}
	}
}
