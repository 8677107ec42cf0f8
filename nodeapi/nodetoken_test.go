package nodeapi_test

import (
	"testing"

	"github.com/hearthvm/hearth/nodeapi"
)

func TestNodeToken_PerNodeAndNeverTheSecret(t *testing.T) {
	const secret = "fleet-secret"
	a, b := nodeapi.NodeToken(secret, "node-a"), nodeapi.NodeToken(secret, "node-b")
	if a == "" || a == b || a == secret || b == secret {
		t.Fatalf("tokens a=%q b=%q secret=%q", a, b, secret)
	}
	if a != nodeapi.NodeToken(secret, "node-a") {
		t.Fatal("not deterministic")
	}
	if a == nodeapi.NodeToken("other-secret", "node-a") {
		t.Fatal("independent of the secret")
	}
	// Pinned: an operator can derive the same token with
	//   printf %s hearth-node:node-a | openssl dgst -sha256 -hmac fleet-secret -binary | base64 | tr '+/' '-_' | tr -d =
	if want := "RvhghudyeJ0a5rvVqAQ7Gwn-KC3uwm-cRlYgZ4y4MWo"; a != want {
		t.Fatalf("NodeToken(%q, node-a) = %s, want %s", secret, a, want)
	}
	if nodeapi.NodeToken("", "node-a") != "" {
		t.Fatal("empty secret must derive no token")
	}
}
