package egress

import (
	"strings"
	"testing"
)

// FuzzFromE2B: any allowOut/denyOut lists either translate into a policy
// that validates, or are refused with errors and no policy;
// never a panic, never half a policy.
func FuzzFromE2B(f *testing.F) {
	f.Add("203.0.113.7,allowed.test,*.wild.test", "0.0.0.0/0", false)
	f.Add("", "10.0.0.0/8", true)
	f.Add("2001:db8::/32", "::/0", true)
	f.Fuzz(func(t *testing.T, allow, deny string, internet bool) {
		in := E2B{AllowInternetAccess: &internet}
		if allow != "" {
			in.AllowOut = strings.Split(allow, ",")
		}
		if deny != "" {
			in.DenyOut = strings.Split(deny, ",")
		}
		p, errs := FromE2B(in)
		if len(errs) > 0 {
			if p != nil {
				t.Fatal("refused with a policy")
			}
			return
		}
		if verr := p.Validate(nil); len(verr) > 0 {
			t.Fatalf("accepted %q / %q into an invalid policy: %v", allow, deny, verr)
		}
	})
}
