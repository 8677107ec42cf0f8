package node

import (
	"testing"

	"github.com/hearthvm/hearth/nodeapi"
)

// A node accepts its own derived token and the operator's root token, and
// nothing derived for another node nor the fleet secret itself.
func TestAuth_NodeTokenOpensOnlyItsOwnNode(t *testing.T) {
	const secret = "fleet-secret"
	tn := startNode(t, newFakeDriver(), func(c *Config) { c.NodeToken = nodeapi.NodeToken(secret, c.Name) })
	u := tn.srv.URL
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"own node token", nodeapi.NodeToken(secret, "n1"), 200},
		{"operator root token", testRoot, 200},
		{"another node's token", nodeapi.NodeToken(secret, "n2"), 401},
		{"the fleet secret", secret, 401},
		{"derived from another secret", nodeapi.NodeToken("other", "n1"), 401},
	} {
		if code, body := rawDo(t, "GET", u+"/v1/info", tc.token, ""); code != tc.want {
			t.Errorf("%s: GET /v1/info = %d %s, want %d", tc.name, code, body, tc.want)
		}
	}
}

// With only a node token (sandboxd --node-token-file), auth stays on.
func TestAuth_NodeTokenAloneKeepsAuthOn(t *testing.T) {
	tok := nodeapi.NodeToken("s", "n1")
	tn := startNode(t, newFakeDriver(), func(c *Config) { c.RootToken, c.NodeToken = "", tok })
	if code, _ := rawDo(t, "GET", tn.srv.URL+"/v1/info", "", ""); code != 401 {
		t.Fatalf("no token: %d, want 401", code)
	}
	if code, _ := rawDo(t, "GET", tn.srv.URL+"/v1/info", tok, ""); code != 200 {
		t.Fatalf("node token: %d, want 200", code)
	}
}
