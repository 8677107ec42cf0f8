package egress

import (
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Action is a rule's verdict.
type Action string

const (
	Allow Action = "allow"
	Deny  Action = "deny"
)

// Protocols as Kubernetes spells them (a Port's Protocol).
const (
	TCP  = "TCP"
	UDP  = "UDP"
	SCTP = "SCTP"
)

// MaxRules bounds a policy's rules after translation from either surface.
const MaxRules = 1000

// Policy is an ordered allow/deny list (see the package doc). It is fixed
// at claim time, recorded with the sandbox and inherited by its forks.
type Policy struct {
	// Rules are evaluated in order; the first that matches decides.
	Rules []Rule `json:"rules,omitempty"`
	// Otherwise is the verdict for traffic no rule matches.
	Otherwise Action `json:"otherwise"`
}

// Rule is one entry of a Policy. CIDR and Domain are exclusive; with
// neither, the rule matches every destination.
type Rule struct {
	Action Action `json:"action"`
	// CIDR is an IPv4 or IPv6 prefix; a bare IP is its /32 or /128.
	CIDR string `json:"cidr,omitempty"`
	// Except are prefixes inside CIDR the rule does not match.
	Except []string `json:"except,omitempty"`
	// Domain is a name ("example.com") or a wildcard for every name below
	// one ("*.example.com").
	Domain string `json:"domain,omitempty"`
	// Ports narrows the rule; empty: every protocol and port.
	Ports []Port `json:"ports,omitempty"`
}

// Port is a protocol and an inclusive port range. Port 0 is every port of
// Protocol; EndPort 0 is Port alone.
type Port struct {
	Protocol string `json:"protocol,omitempty"` // TCP (the default), UDP or SCTP
	Port     int32  `json:"port,omitempty"`
	EndPort  int32  `json:"endPort,omitempty"`
}

// Proto returns p's protocol, TCP when unset.
func (p Port) Proto() string {
	if p.Protocol == "" {
		return TCP
	}
	return p.Protocol
}

// Last is the last port of p's range (0 for every port).
func (p Port) Last() int32 {
	if p.EndPort == 0 {
		return p.Port
	}
	return p.EndPort
}

// Prefix parses a CIDR or a bare IP (its single-address prefix), masked.
func Prefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if p.Addr().Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("a zone is not allowed")
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("a zone is not allowed")
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

// Validate checks p as a whole: every rule's action, CIDR (and that each
// Except lies inside it), domain, protocol and port range, and MaxRules.
// Errors name the field under path (nil: "rules[i]...").
func (p *Policy) Validate(path *field.Path) field.ErrorList {
	if p == nil {
		return nil
	}
	var errs field.ErrorList
	if p.Otherwise != Allow && p.Otherwise != Deny {
		errs = append(errs, field.NotSupported(path.Child("otherwise"), p.Otherwise, []Action{Allow, Deny}))
	}
	if len(p.Rules) > MaxRules {
		errs = append(errs, field.TooMany(path.Child("rules"), len(p.Rules), MaxRules))
		return errs
	}
	for i := range p.Rules {
		errs = append(errs, p.Rules[i].validate(path.Child("rules").Index(i))...)
	}
	return errs
}

func (r *Rule) validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r.Action != Allow && r.Action != Deny {
		errs = append(errs, field.NotSupported(path.Child("action"), r.Action, []Action{Allow, Deny}))
	}
	switch {
	case r.CIDR != "" && r.Domain != "":
		errs = append(errs, field.Invalid(path.Child("domain"), r.Domain, "a rule names a cidr or a domain, not both"))
	case r.Domain != "":
		errs = append(errs, ValidateDomain(path.Child("domain"), r.Domain)...)
		if len(r.Except) > 0 {
			errs = append(errs, field.Forbidden(path.Child("except"), "except applies to a cidr"))
		}
	case r.CIDR != "":
		errs = append(errs, validateBlock(path, r.CIDR, r.Except)...)
	case len(r.Except) > 0:
		errs = append(errs, field.Required(path.Child("cidr"), "except needs a cidr"))
	}
	for i, pt := range r.Ports {
		errs = append(errs, pt.validate(path.Child("ports").Index(i))...)
	}
	return errs
}

func validateBlock(path *field.Path, cidr string, except []string) field.ErrorList {
	var errs field.ErrorList
	outer, err := Prefix(cidr)
	if err != nil {
		return append(errs, field.Invalid(path.Child("cidr"), cidr, "must be an IP address or a CIDR (e.g. 203.0.113.0/24, 2001:db8::/32)"))
	}
	for i, e := range except {
		inner, err := Prefix(e)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(path.Child("except").Index(i), e, "must be a CIDR"))
		case inner.Addr().Is4() != outer.Addr().Is4() || inner.Bits() < outer.Bits() || !outer.Contains(inner.Addr()):
			errs = append(errs, field.Invalid(path.Child("except").Index(i), e, fmt.Sprintf("must lie inside %s", outer)))
		}
	}
	return errs
}

func (p Port) validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch p.Protocol {
	case "", TCP, UDP, SCTP:
	default:
		errs = append(errs, field.NotSupported(path.Child("protocol"), p.Protocol, []string{TCP, UDP, SCTP}))
	}
	if p.Port != 0 {
		for _, msg := range validation.IsValidPortNum(int(p.Port)) {
			errs = append(errs, field.Invalid(path.Child("port"), p.Port, msg))
		}
	} else if p.EndPort != 0 {
		errs = append(errs, field.Required(path.Child("port"), "endPort needs a port"))
	}
	if p.EndPort != 0 {
		for _, msg := range validation.IsValidPortNum(int(p.EndPort)) {
			errs = append(errs, field.Invalid(path.Child("endPort"), p.EndPort, msg))
		}
		if p.EndPort < p.Port {
			errs = append(errs, field.Invalid(path.Child("endPort"), p.EndPort, "must be at least port"))
		}
	}
	return errs
}

// ValidateDomain checks a domain rule's name: a DNS subdomain (RFC 1123,
// lower case, labels of 1–63 characters, at most 253 in all), or "*."
// before one. IP literals are not domains.
func ValidateDomain(path *field.Path, d string) field.ErrorList {
	var msgs []string
	if strings.HasPrefix(d, "*.") {
		msgs = validation.IsWildcardDNS1123Subdomain(d)
	} else {
		msgs = validation.IsDNS1123Subdomain(d)
	}
	if len(msgs) == 0 {
		if _, err := netip.ParseAddr(d); err == nil {
			msgs = []string{"an IP address is a cidr, not a domain"}
		} else if !strings.Contains(strings.TrimPrefix(d, "*."), ".") && strings.HasPrefix(d, "*.") {
			msgs = []string{"a wildcard must name a domain with at least two labels (*.example.com)"}
		}
	}
	var errs field.ErrorList
	for _, m := range msgs {
		errs = append(errs, field.Invalid(path, d, m))
	}
	return errs
}

// MatchesName reports whether domain rule d ("example.com" or
// "*.example.com") matches name, case-insensitively, a trailing dot ignored.
func MatchesName(d, name string) bool {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if rest, ok := strings.CutPrefix(d, "*."); ok {
		return strings.HasSuffix(name, "."+rest)
	}
	return name == d
}

// Decide is the policy's meaning for one packet: its destination address,
// protocol (TCP, UDP, SCTP; "" for others such as ICMP), destination port,
// and the names the node's resolver answered dst for (domain rules match
// only through them). The packet filter Render builds decides the same;
// its tests check the two agree. A nil policy allows everything.
func (p *Policy) Decide(dst netip.Addr, proto string, port int32, names []string) Action {
	if p == nil {
		return Allow
	}
	dst = dst.Unmap()
	for i := range p.Rules {
		if p.Rules[i].matches(dst, proto, port, names) {
			return p.Rules[i].Action
		}
	}
	return p.Otherwise
}

func (r *Rule) matches(dst netip.Addr, proto string, port int32, names []string) bool {
	switch {
	case r.Domain != "":
		hit := false
		for _, n := range names {
			if MatchesName(r.Domain, n) {
				hit = true
				break
			}
		}
		if !hit {
			return false
		}
	case r.CIDR != "":
		outer, err := Prefix(r.CIDR)
		if err != nil || !outer.Contains(dst) {
			return false
		}
		for _, e := range r.Except {
			if in, err := Prefix(e); err == nil && in.Contains(dst) {
				return false
			}
		}
	}
	if len(r.Ports) == 0 {
		return true
	}
	for _, pt := range r.Ports {
		if pt.Proto() != proto {
			continue
		}
		if pt.Port == 0 || port >= pt.Port && port <= pt.Last() {
			return true
		}
	}
	return false
}

// Domains returns the distinct domain rules of p, in order: the names the
// node's resolver pins into the filter.
func (p *Policy) Domains() []string {
	if p == nil {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, r := range p.Rules {
		if r.Domain != "" && !seen[r.Domain] {
			seen[r.Domain] = true
			out = append(out, r.Domain)
		}
	}
	return out
}
