package egress

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
)

// maxErrors bounds the errors one translation reports (the first ones).
const maxErrors = 10

// AllTraffic is e2b's ALL_TRAFFIC. In a Hearth policy it means every
// destination, IPv6 included (see the package doc).
const AllTraffic = "0.0.0.0/0"

// E2B is the egress part of an e2b create (and of its network update), as
// the e2b SDK sends it: allow_internet_access and network.{allowOut,denyOut}.
type E2B struct {
	AllowInternetAccess *bool
	AllowOut, DenyOut   []string
}

// FromE2B translates an e2b request (package doc): allowOut first, then
// denyOut, Otherwise deny when allow_internet_access is false. Nothing
// restricting (no lists, internet access not refused) is a nil policy.
// Errors name e2b's fields (network.allowOut[i], ...): a 400.
func FromE2B(in E2B) (*Policy, field.ErrorList) {
	refused := in.AllowInternetAccess != nil && !*in.AllowInternetAccess
	if !refused && len(in.AllowOut) == 0 && len(in.DenyOut) == 0 {
		return nil, nil
	}
	if n := len(in.AllowOut) + len(in.DenyOut); n > MaxRules {
		// Before any entry is read: a huge list costs one short error.
		return nil, field.ErrorList{field.TooMany(field.NewPath("network"), n, MaxRules)}
	}
	p := &Policy{Otherwise: Allow}
	if refused {
		p.Otherwise = Deny
	}
	var errs field.ErrorList
	add := func(path *field.Path, a Action, entries []string, domains bool) {
		for i, e := range entries {
			if len(errs) >= maxErrors {
				return
			}
			at := path.Index(i)
			switch {
			case e == AllTraffic:
				p.Rules = append(p.Rules, Rule{Action: a, CIDR: AllTraffic}, Rule{Action: a, CIDR: "::/0"})
			case isAddress(e):
				if _, err := Prefix(e); err != nil {
					errs = append(errs, field.Invalid(at, e, "must be an IP address or a CIDR"))
					continue
				}
				p.Rules = append(p.Rules, Rule{Action: a, CIDR: e})
			case !domains:
				errs = append(errs, field.Invalid(at, e, "must be an IP address or a CIDR: domains are allowed only in allowOut"))
			default:
				e = strings.ToLower(strings.TrimSuffix(e, "."))
				if es := ValidateDomain(at, e); len(es) > 0 {
					errs = append(errs, es...)
					continue
				}
				p.Rules = append(p.Rules, Rule{Action: a, Domain: e})
			}
		}
	}
	net := field.NewPath("network")
	add(net.Child("allowOut"), Allow, in.AllowOut, true)
	add(net.Child("denyOut"), Deny, in.DenyOut, false)
	if len(p.Rules) > MaxRules {
		errs = append(errs, field.TooMany(net, len(p.Rules), MaxRules))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return p, nil
}

// isAddress reports whether an e2b list entry is meant as an IP or CIDR
// (it has a '/' or ':', or is all digits and dots), so a malformed one is
// refused as such, not taken for a domain.
func isAddress(s string) bool {
	if s == "" {
		return true
	}
	for _, c := range s {
		switch {
		case c == '/' || c == ':':
			return true
		case c != '.' && (c < '0' || c > '9'):
			return false
		}
	}
	return true
}

// Default is agent-sandbox's secure default for a Managed template with no
// networkPolicy: the public internet only — no RFC 1918, link-local (the
// metadata server 169.254.169.254 among them), IPv6 unique-local or
// link-local addresses.
func Default() *Policy {
	return &Policy{
		Rules: []Rule{
			{Action: Allow, CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"}},
			{Action: Allow, CIDR: "::/0", Except: []string{"fc00::/7", "fe80::/10"}},
		},
		Otherwise: Deny,
	}
}

// FromTemplate is the policy of every sandbox claimed from a
// SandboxTemplate's pools (package doc): Unmanaged filters nothing (nil);
// Managed (or unset) without networkPolicy is Default; with it, each egress
// peer is an allow rule and anything else is denied. Pod and namespace
// selectors and named ports are refused (a 422 naming the field).
func FromTemplate(spec *extv1beta1.SandboxTemplateSpec) (*Policy, field.ErrorList) {
	root := field.NewPath("spec")
	switch spec.NetworkPolicyManagement {
	case extv1beta1.NetworkPolicyManagementUnmanaged:
		return nil, nil
	case "", extv1beta1.NetworkPolicyManagementManaged:
	default:
		return nil, field.ErrorList{field.NotSupported(root.Child("networkPolicyManagement"), spec.NetworkPolicyManagement,
			[]extv1beta1.NetworkPolicyManagement{extv1beta1.NetworkPolicyManagementManaged, extv1beta1.NetworkPolicyManagementUnmanaged})}
	}
	if spec.NetworkPolicy == nil {
		return Default(), nil
	}
	p := &Policy{Otherwise: Deny}
	var errs field.ErrorList
	egress := root.Child("networkPolicy", "egress")
	n := 0
	for _, er := range spec.NetworkPolicy.Egress {
		n += max(len(er.To), 1) * max(len(er.Ports), 1)
	}
	if n > MaxRules*4 { // past any policy that could translate: refuse before reading it
		return nil, field.ErrorList{field.TooMany(egress, n, MaxRules)}
	}
	for i, er := range spec.NetworkPolicy.Egress {
		at := egress.Index(i)
		var ports []Port
		for j, np := range er.Ports {
			pt := Port{EndPort: derefInt32(np.EndPort)}
			if np.Protocol != nil {
				pt.Protocol = string(*np.Protocol)
			}
			if np.Port != nil {
				if np.Port.Type == intstr.String {
					errs = append(errs, field.Invalid(at.Child("ports").Index(j).Child("port"), np.Port.StrVal, "named ports select nothing on a microVM: use a number"))
					continue
				}
				pt.Port = np.Port.IntVal
			}
			errs = append(errs, pt.validate(at.Child("ports").Index(j))...)
			ports = append(ports, pt)
		}
		if len(er.To) == 0 {
			p.Rules = append(p.Rules, Rule{Action: Allow, Ports: ports})
			continue
		}
		for j, peer := range er.To {
			pat := at.Child("to").Index(j)
			switch {
			case peer.PodSelector != nil || peer.NamespaceSelector != nil:
				errs = append(errs, field.Forbidden(pat, "podSelector and namespaceSelector select Pods, which a sandbox's network cannot reach: use ipBlock"))
			case peer.IPBlock == nil:
				errs = append(errs, field.Required(pat.Child("ipBlock"), ""))
			default:
				errs = append(errs, validateBlock(pat.Child("ipBlock"), peer.IPBlock.CIDR, peer.IPBlock.Except)...)
				p.Rules = append(p.Rules, Rule{Action: Allow, CIDR: peer.IPBlock.CIDR, Except: peer.IPBlock.Except, Ports: ports})
			}
		}
	}
	if len(p.Rules) > MaxRules {
		errs = append(errs, field.TooMany(egress, len(p.Rules), MaxRules))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return p, nil
}

func derefInt32(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}
