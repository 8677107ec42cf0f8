package egress

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestValidate_NamesTheField(t *testing.T) {
	tooMany := &Policy{Otherwise: Deny}
	for i := 0; i <= MaxRules; i++ {
		tooMany.Rules = append(tooMany.Rules, Rule{Action: Allow, CIDR: "203.0.113.1"})
	}
	for _, tc := range []struct {
		name string
		p    *Policy
		want string // a substring of the first error; "" = valid
	}{
		{"nil filters nothing", nil, ""},
		{"default", Default(), ""},
		{"bare ip and v6", &Policy{Otherwise: Allow, Rules: []Rule{{Action: Deny, CIDR: "203.0.113.7"}, {Action: Deny, CIDR: "2001:db8::/32"}}}, ""},
		{"invalid cidr", &Policy{Otherwise: Deny, Rules: []Rule{{Action: Allow, CIDR: "203.0.113.0/33"}}}, "rules[0].cidr"},
		{"zone", &Policy{Otherwise: Deny, Rules: []Rule{{Action: Allow, CIDR: "fe80::1%eth0"}}}, "rules[0].cidr"},
		{"except outside", &Policy{Otherwise: Deny, Rules: []Rule{{Action: Allow, CIDR: "10.0.0.0/8", Except: []string{"192.168.0.0/16"}}}}, "rules[0].except[0]"},
		{"except other family", &Policy{Otherwise: Deny, Rules: []Rule{{Action: Allow, CIDR: "0.0.0.0/0", Except: []string{"fc00::/7"}}}}, "rules[0].except[0]"},
		{"except without cidr", &Policy{Otherwise: Deny, Rules: []Rule{{Action: Allow, Except: []string{"10.0.0.0/8"}}}}, "rules[0].cidr"},
		{"port out of range", &Policy{Otherwise: Deny, Rules: []Rule{{Action: Allow, Ports: []Port{{Port: 70000}}}}}, "rules[0].ports[0].port"},
		{"endPort below port", &Policy{Otherwise: Deny, Rules: []Rule{{Action: Allow, Ports: []Port{{Port: 80, EndPort: 79}}}}}, "rules[0].ports[0].endPort"},
		{"endPort without port", &Policy{Otherwise: Deny, Rules: []Rule{{Action: Allow, Ports: []Port{{EndPort: 79}}}}}, "rules[0].ports[0].port"},
		{"protocol", &Policy{Otherwise: Deny, Rules: []Rule{{Action: Allow, Ports: []Port{{Protocol: "ICMP"}}}}}, "rules[0].ports[0].protocol"},
		{"empty domain label", &Policy{Otherwise: Deny, Rules: []Rule{{Action: Allow, Domain: "a..example.com"}}}, "rules[0].domain"},
		{"wildcard mid-name", &Policy{Otherwise: Deny, Rules: []Rule{{Action: Allow, Domain: "a.*.example.com"}}}, "rules[0].domain"},
		{"wildcard of a TLD", &Policy{Otherwise: Deny, Rules: []Rule{{Action: Allow, Domain: "*.com"}}}, "rules[0].domain"},
		{"domain and cidr", &Policy{Otherwise: Deny, Rules: []Rule{{Action: Allow, Domain: "example.com", CIDR: "203.0.113.0/24"}}}, "rules[0].domain"},
		{"action", &Policy{Otherwise: Deny, Rules: []Rule{{Action: "maybe"}}}, "rules[0].action"},
		{"otherwise", &Policy{}, "otherwise"},
		{"too many rules", tooMany, "rules: Too many"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.p.Validate(nil)
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatalf("refused: %v", errs)
				}
				return
			}
			if len(errs) == 0 || !strings.Contains(errs[0].Error(), tc.want) {
				t.Fatalf("errors %v, want one naming %q", errs, tc.want)
			}
		})
	}
}

func TestMatchesName(t *testing.T) {
	for _, tc := range []struct {
		rule, name string
		want       bool
	}{
		{"allowed.test", "allowed.test", true},
		{"allowed.test", "ALLOWED.test.", true},
		{"allowed.test", "x.allowed.test", false},
		{"*.wild.test", "a.wild.test", true},
		{"*.wild.test", "a.b.wild.test", true},
		{"*.wild.test", "wild.test", false},
		{"*.wild.test", "evilwild.test", false},
	} {
		if got := MatchesName(tc.rule, tc.name); got != tc.want {
			t.Errorf("MatchesName(%q, %q) = %v", tc.rule, tc.name, got)
		}
	}
}

func TestDecide_FirstMatchWins(t *testing.T) {
	p := &Policy{
		Rules: []Rule{
			{Action: Allow, CIDR: "203.0.113.7"},
			{Action: Deny, CIDR: "203.0.113.0/24"},
			{Action: Allow, Domain: "*.wild.test", Ports: []Port{{Port: 443}}},
			{Action: Allow, CIDR: "198.18.0.0/15", Except: []string{"198.18.5.0/24"}, Ports: []Port{{Protocol: UDP, Port: 1000, EndPort: 2000}}},
		},
		Otherwise: Deny,
	}
	a := netip.MustParseAddr
	for _, tc := range []struct {
		dst   string
		proto string
		port  int32
		names []string
		want  Action
	}{
		{"203.0.113.7", TCP, 80, nil, Allow},
		{"203.0.113.8", TCP, 80, nil, Deny},
		{"198.51.100.1", TCP, 443, []string{"a.wild.test"}, Allow},
		{"198.51.100.1", TCP, 80, []string{"a.wild.test"}, Deny},
		{"198.51.100.1", TCP, 443, []string{"wild.test"}, Deny},
		{"198.51.100.1", TCP, 443, nil, Deny},
		{"198.18.1.1", UDP, 1500, nil, Allow},
		{"198.18.1.1", UDP, 2001, nil, Deny},
		{"198.18.1.1", TCP, 1500, nil, Deny},
		{"198.18.5.1", UDP, 1500, nil, Deny},
		{"::ffff:203.0.113.7", TCP, 1, nil, Allow},
	} {
		if got := p.Decide(a(tc.dst), tc.proto, tc.port, tc.names); got != tc.want {
			t.Errorf("Decide(%s %s/%d %v) = %s, want %s", tc.dst, tc.proto, tc.port, tc.names, got, tc.want)
		}
	}
	if (*Policy)(nil).Decide(a("10.0.0.1"), TCP, 1, nil) != Allow {
		t.Error("a nil policy must allow")
	}
}

func TestDefault_BlocksPrivateAndMetadata(t *testing.T) {
	p := Default()
	for dst, want := range map[string]Action{
		"169.254.169.254": Deny, "10.1.2.3": Deny, "172.16.0.1": Deny, "192.168.1.1": Deny,
		"fd00::1": Deny, "fe80::1": Deny, "203.0.113.1": Allow, "2001:db8::1": Allow,
	} {
		if got := p.Decide(netip.MustParseAddr(dst), TCP, 443, nil); got != want {
			t.Errorf("%s: %s, want %s", dst, got, want)
		}
	}
}

func ExamplePolicy_Validate() {
	p := &Policy{Otherwise: Deny, Rules: []Rule{{Action: Allow, CIDR: "10.0.0.0/33"}}}
	fmt.Println(p.Validate(field.NewPath("egress")).ToAggregate())
	// Output: egress.rules[0].cidr: Invalid value: "10.0.0.0/33": must be an IP address or a CIDR (e.g. 203.0.113.0/24, 2001:db8::/32)
}
