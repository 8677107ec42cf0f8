package nodeapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
)

// nodeTokenContext separates node tokens from any other use of the fleet
// secret.
const nodeTokenContext = "hearth-node:"

// NodeToken is the bearer token the fleet sends to the node named
// nodeName: base64url (no padding) of HMAC-SHA256(fleetSecret,
// "hearth-node:" + nodeName). The fleet secret itself is never sent to a
// node, so nothing a node publishes (its NodeInventory address) can make
// the fleet, the warm-pool driver or an API surface hand it a credential
// that works on another node: a token opens only the node whose name it
// was derived for. A node is given only its own token (sandboxd
// --node-token-file) and so cannot derive another's. The empty secret
// derives the empty token (no auth, development only).
func NodeToken(fleetSecret, nodeName string) string {
	if fleetSecret == "" {
		return ""
	}
	m := hmac.New(sha256.New, []byte(fleetSecret))
	m.Write([]byte(nodeTokenContext + nodeName))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}
