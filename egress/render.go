package egress

import (
	"fmt"
	"net/netip"
	"strings"
)

// Table is the nftables table (family inet) a node's egress filter lives
// in, one per sandbox network namespace (or per VM path).
const Table = "hearth_egress"

// RenderOptions places the filter.
type RenderOptions struct {
	// Hook is the base chain's hook: "output" where the guest's packets are
	// locally generated (a sim sandbox's network namespace), "forward"
	// where they are routed (a VM's tap).
	Hook string
	// Resolver, when valid, is the node's resolver for the sandbox: DNS to
	// it (UDP and TCP port 53) is always allowed, before any rule.
	Resolver netip.Addr
}

// DomainSet names the address set of domain rule i (family "v4" or "v6"),
// which the node's resolver fills, each element with its answer's TTL.
func DomainSet(i int, family string) string { return fmt.Sprintf("d%d_%s", i, family) }

// Render returns an nft script (for `nft -f`, applied as one transaction)
// that replaces Table with the filter p means: the first matching rule
// decides, Otherwise ends the chain; a deny rejects (the guest's call
// fails at once rather than waiting for a timeout: see the deny chain). A nil policy renders
// a table that accepts everything. Loopback is always allowed.
func Render(p *Policy, o RenderOptions) string {
	hook := o.Hook
	if hook == "" {
		hook = "output"
	}
	var b strings.Builder
	// add-then-delete makes the replace atomic and valid whether or not
	// the table exists yet.
	fmt.Fprintf(&b, "add table inet %s\ndelete table inet %s\ntable inet %s {\n", Table, Table, Table)
	if p != nil {
		for i, r := range p.Rules {
			if r.Domain == "" {
				continue
			}
			fmt.Fprintf(&b, "\tset %s { type ipv4_addr; flags timeout; }\n", DomainSet(i, "v4"))
			fmt.Fprintf(&b, "\tset %s { type ipv6_addr; flags timeout; }\n", DomainSet(i, "v6"))
		}
	}
	// A deny refuses fast: a TCP reset (connect fails with ECONNREFUSED),
	// else ICMP admin-prohibited (a local sender's call fails with EPERM).
	b.WriteString("\tchain deny {\n\t\tmeta l4proto tcp reject with tcp reset\n\t\treject with icmpx type admin-prohibited\n\t}\n")
	fmt.Fprintf(&b, "\tchain egress {\n\t\ttype filter hook %s priority filter; policy accept;\n", hook)
	if hook == "output" {
		b.WriteString("\t\toifname \"lo\" accept\n")
	}
	if o.Resolver.IsValid() {
		fam := family(o.Resolver)
		fmt.Fprintf(&b, "\t\t%s daddr %s udp dport 53 accept\n\t\t%s daddr %s tcp dport 53 accept\n", fam, o.Resolver, fam, o.Resolver)
	}
	if p == nil {
		b.WriteString("\t\taccept\n\t}\n}\n")
		return b.String()
	}
	for i, r := range p.Rules {
		for _, dst := range destinations(i, r) {
			for _, l4 := range l4Matches(r.Ports) {
				b.WriteString("\t\t")
				b.WriteString(strings.TrimSpace(dst + " " + l4))
				b.WriteString(" " + verdict(r.Action) + "\n")
			}
		}
	}
	fmt.Fprintf(&b, "\t\t%s\n\t}\n}\n", verdict(p.Otherwise))
	return b.String()
}

func verdict(a Action) string {
	if a == Allow {
		return "accept"
	}
	return "jump deny"
}

func family(a netip.Addr) string {
	if a.Unmap().Is4() {
		return "ip"
	}
	return "ip6"
}

// destinations is a rule's destination matches, one per line it needs: a
// CIDR's family, with its excepts; a domain's two sets; or any ("").
func destinations(i int, r Rule) []string {
	switch {
	case r.Domain != "":
		return []string{"ip daddr @" + DomainSet(i, "v4"), "ip6 daddr @" + DomainSet(i, "v6")}
	case r.CIDR != "":
		p, err := Prefix(r.CIDR)
		if err != nil {
			return nil // Validate refuses it; never render a rule wider than asked
		}
		fam := family(p.Addr())
		m := fmt.Sprintf("%s daddr %s", fam, p)
		if p.Bits() == 0 {
			m = "meta nfproto " + map[string]string{"ip": "ipv4", "ip6": "ipv6"}[fam]
		}
		var ex []string
		for _, e := range r.Except {
			if q, err := Prefix(e); err == nil {
				ex = append(ex, q.String())
			}
		}
		if len(ex) > 0 {
			m += fmt.Sprintf(" %s daddr != { %s }", fam, strings.Join(ex, ", "))
		}
		return []string{m}
	}
	return []string{""}
}

// l4Matches is a rule's port matches, one per line (any: "").
func l4Matches(ports []Port) []string {
	if len(ports) == 0 {
		return []string{""}
	}
	out := make([]string, 0, len(ports))
	for _, pt := range ports {
		m := "meta l4proto " + strings.ToLower(pt.Proto())
		switch {
		case pt.Port == 0:
		case pt.Last() == pt.Port:
			m += fmt.Sprintf(" th dport %d", pt.Port)
		default:
			m += fmt.Sprintf(" th dport %d-%d", pt.Port, pt.Last())
		}
		out = append(out, m)
	}
	return out
}
