// Package egress is a sandbox's outbound network policy: the one model
// both front doors translate into (e2b's allowInternetAccess and
// network.allowOut / denyOut, a SandboxTemplate's spec.networkPolicy.egress
// with its networkPolicyManagement), validated in one place and rendered
// into the kernel packet filter a node owns (nftables), outside the guest.
//
// # The model
//
// A Policy is an ordered list of rules and a verdict for traffic no rule
// matches (Otherwise). The first rule that matches a packet decides it:
//
//   - a rule's destination is a CIDR (a bare IP is its /32 or /128), with
//     Except CIDRs inside it that the rule does not match; or a domain name,
//     exact ("example.com") or a wildcard for every name below one
//     ("*.example.com", not the apex itself); or nothing: every destination;
//   - a rule's Ports narrow it to protocols and port ranges (empty: every
//     protocol and port);
//   - a domain rule matches the addresses the node's resolver answered for a
//     name the rule matches, for as long as the answer's TTL (the resolver
//     pins them into the filter): the guest never decides what a name means.
//
// A nil *Policy filters nothing (the egress lane as it always was).
//
// # The two surfaces
//
//   - e2b (FromE2B): allowOut entries become allow rules and come first
//     (e2b's rule: an allow beats a deny), denyOut entries deny rules after
//     them; domains only in allowOut (400 otherwise); allowInternetAccess:
//     false makes Otherwise deny (e2b: "equivalent to denyOut 0.0.0.0/0").
//     e2b's ALL_TRAFFIC, 0.0.0.0/0, means every destination here, IPv6
//     included: a deny of "all traffic" that left IPv6 open would be a hole.
//   - Kubernetes (FromNetworkPolicy): a SandboxTemplate's egress rules are a
//     union of allows (a NetworkPolicy's meaning), so each peer becomes an
//     allow rule and Otherwise is deny; an empty list denies everything;
//     networkPolicy omitted under Managed (the default) is agent-sandbox's
//     secure default (Default: the public internet only, no RFC 1918,
//     link-local, IPv6 ULA or link-local); Unmanaged filters nothing. Pod and
//     namespace selectors and named ports select nothing a microVM can
//     reach and are refused (422), never silently dropped.
//
// # The filter
//
// Package egress/nft enforces a Policy in the kernel (nftables, over
// netlink), from the host side; this package is the model only, light
// enough for the wire packages that carry a Policy.
//
// # Bounds
//
// At most MaxRules rules after translation; every CIDR, port, protocol
// and domain label is checked (Validate), and errors name the field, so a
// surface answers 400 (e2b) or 422 (Kubernetes) before any node is asked.
// Nothing is half-applied: a policy is valid as a whole or refused.
package egress
