package egress

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
)

func ptr[T any](v T) *T { return &v }

func TestFromE2B(t *testing.T) {
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name    string
		in      E2B
		wantErr string
		nilPol  bool
		checks  map[string]Action // "dst name" → verdict for TCP 443
	}{
		{name: "nothing restricts", in: E2B{AllowInternetAccess: ptr(true)}, nilPol: true},
		{name: "no internet", in: E2B{AllowInternetAccess: ptr(false)}, checks: map[string]Action{"203.0.113.1": Deny, "2001:db8::1": Deny}},
		{name: "deny all but allow-list (allow beats deny)", in: E2B{DenyOut: []string{AllTraffic}, AllowOut: []string{"203.0.113.7", "198.18.0.0/15"}},
			checks: map[string]Action{"203.0.113.7": Allow, "198.18.3.4": Allow, "203.0.113.8": Deny, "2001:db8::1": Deny}},
		{name: "a specific deny", in: E2B{DenyOut: []string{"203.0.113.0/24"}}, checks: map[string]Action{"203.0.113.9": Deny, "198.51.100.1": Allow}},
		{name: "domains and wildcards", in: E2B{DenyOut: []string{AllTraffic}, AllowOut: []string{"allowed.test", "*.wild.test"}},
			checks: map[string]Action{"198.18.0.1 allowed.test": Allow, "198.18.0.2 x.wild.test": Allow, "198.18.0.3 denied.test": Deny, "198.18.0.1": Deny}},
		{name: "names are case-insensitive", in: E2B{DenyOut: []string{AllTraffic}, AllowOut: []string{"Allowed.TEST."}},
			checks: map[string]Action{"198.18.0.1 allowed.test": Allow}},
		{name: "a domain in denyOut", in: E2B{DenyOut: []string{"denied.test"}}, wantErr: "network.denyOut[0]"},
		{name: "an invalid CIDR", in: E2B{AllowOut: []string{"10.0.0.0/40"}}, wantErr: "network.allowOut[0]"},
		{name: "a bad IPv4", in: E2B{AllowOut: []string{"ok.test", "300.1.1.1"}}, wantErr: "network.allowOut[1]"},
		{name: "an empty domain label", in: E2B{AllowOut: []string{"a..test"}}, wantErr: "network.allowOut[0]"},
		{name: "more than 1000 rules", in: E2B{AllowOut: strings.Split(strings.Repeat("203.0.113.1,", 1001), ",")[:1001]}, wantErr: "network: Too many"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, errs := FromE2B(tc.in)
			if tc.wantErr != "" {
				if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.wantErr) {
					t.Fatalf("errors %v, want one naming %s", errs, tc.wantErr)
				}
				if p != nil {
					t.Fatal("a refused request returned a policy (half-applied)")
				}
				return
			}
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if (p == nil) != tc.nilPol {
				t.Fatalf("policy %+v, want nil=%v", p, tc.nilPol)
			}
			if errs := p.Validate(nil); len(errs) > 0 {
				t.Fatalf("translated policy invalid: %v", errs)
			}
			for k, want := range tc.checks {
				dst, name, _ := strings.Cut(k, " ")
				var names []string
				if name != "" {
					names = []string{name}
				}
				if got := p.Decide(a(dst), TCP, 443, names); got != want {
					t.Errorf("%s: %s, want %s", k, got, want)
				}
			}
		})
	}
}

func TestFromTemplate(t *testing.T) {
	a := netip.MustParseAddr
	tcp := ptr(corev1.ProtocolTCP)
	for _, tc := range []struct {
		name    string
		spec    extv1beta1.SandboxTemplateSpec
		wantErr string
		nilPol  bool
		checks  map[string]Action // "dst port" → verdict over TCP
	}{
		{name: "unmanaged filters nothing", spec: extv1beta1.SandboxTemplateSpec{NetworkPolicyManagement: extv1beta1.NetworkPolicyManagementUnmanaged}, nilPol: true},
		{name: "managed default", spec: extv1beta1.SandboxTemplateSpec{},
			checks: map[string]Action{"169.254.169.254 80": Deny, "10.0.0.1 443": Deny, "203.0.113.1 443": Allow}},
		{name: "empty egress denies everything", spec: extv1beta1.SandboxTemplateSpec{NetworkPolicy: &extv1beta1.NetworkPolicySpec{}},
			checks: map[string]Action{"203.0.113.1 443": Deny}},
		{name: "ipBlock with except and ports", spec: extv1beta1.SandboxTemplateSpec{NetworkPolicy: &extv1beta1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{
			To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "198.18.0.0/15", Except: []string{"198.18.9.0/24"}}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: tcp, Port: ptr(intstr.FromInt32(443))}, {Port: ptr(intstr.FromInt32(8000)), EndPort: ptr(int32(8080))}},
		}}}}, checks: map[string]Action{"198.18.1.1 443": Allow, "198.18.1.1 8080": Allow, "198.18.1.1 80": Deny, "198.18.9.1 443": Deny, "203.0.113.1 443": Deny}},
		{name: "ports only", spec: extv1beta1.SandboxTemplateSpec{NetworkPolicy: &extv1beta1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{
			Ports: []networkingv1.NetworkPolicyPort{{Port: ptr(intstr.FromInt32(443))}},
		}}}}, checks: map[string]Action{"203.0.113.1 443": Allow, "203.0.113.1 80": Deny}},
		{name: "pod selector refused", spec: extv1beta1.SandboxTemplateSpec{NetworkPolicy: &extv1beta1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{
			To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "198.18.0.0/15"}}, {PodSelector: &metav1.LabelSelector{}}},
		}}}}, wantErr: "spec.networkPolicy.egress[0].to[1]"},
		{name: "named port refused", spec: extv1beta1.SandboxTemplateSpec{NetworkPolicy: &extv1beta1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{
			Ports: []networkingv1.NetworkPolicyPort{{Port: ptr(intstr.FromString("https"))}},
		}}}}, wantErr: "spec.networkPolicy.egress[0].ports[0].port"},
		{name: "port out of range", spec: extv1beta1.SandboxTemplateSpec{NetworkPolicy: &extv1beta1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{
			Ports: []networkingv1.NetworkPolicyPort{{Port: ptr(intstr.FromInt32(0)), EndPort: ptr(int32(70000))}},
		}}}}, wantErr: "spec.networkPolicy.egress[0].ports[0]"},
		{name: "invalid CIDR", spec: extv1beta1.SandboxTemplateSpec{NetworkPolicy: &extv1beta1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{
			To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "198.18.0.0/99"}}},
		}}}}, wantErr: "spec.networkPolicy.egress[0].to[0].ipBlock.cidr"},
		{name: "unknown management", spec: extv1beta1.SandboxTemplateSpec{NetworkPolicyManagement: "Sometimes"}, wantErr: "spec.networkPolicyManagement"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, errs := FromTemplate(&tc.spec)
			if tc.wantErr != "" {
				if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.wantErr) {
					t.Fatalf("errors %v, want one naming %s", errs, tc.wantErr)
				}
				if p != nil {
					t.Fatal("a refused template returned a policy")
				}
				return
			}
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if (p == nil) != tc.nilPol {
				t.Fatalf("policy %+v, want nil=%v", p, tc.nilPol)
			}
			for k, want := range tc.checks {
				dst, port, _ := strings.Cut(k, " ")
				var n int32
				for _, c := range port {
					n = n*10 + int32(c-'0')
				}
				if got := p.Decide(a(dst), TCP, n, nil); got != want {
					t.Errorf("%s: %s, want %s", k, got, want)
				}
			}
		})
	}
}

// A huge or wholly invalid list costs one short error, not one per entry.
func TestFromE2B_BoundedErrors(t *testing.T) {
	_, errs := FromE2B(E2B{AllowOut: make([]string, 5000)})
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "Too many") {
		t.Fatalf("5000 entries: %d errors: %v", len(errs), errs.ToAggregate())
	}
	_, errs = FromE2B(E2B{AllowOut: make([]string, 900)})
	if len(errs) != maxErrors {
		t.Fatalf("900 empty entries: %d errors, want %d", len(errs), maxErrors)
	}
}
