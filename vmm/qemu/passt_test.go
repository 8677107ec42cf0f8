package qemu

import (
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
	r := firewallRules(64872, 512)
	for _, want := range []string{
		"table inet hearth_qemu\ndelete table inet hearth_qemu\n", // idempotent replace, one transaction
		"type filter hook output priority 0; policy accept;",
		"meta skuid 64872-65383 ct state new fib daddr type local reject",
		"meta skuid 64872-65383 ct state new ip daddr 169.254.0.0/16 reject",
		"meta skuid 64872-65383 ct state new ip6 daddr fe80::/10 reject",
	} {
		if !strings.Contains(r, want) {
			t.Errorf("rules lack %q:\n%s", want, r)
		}
	}
}
