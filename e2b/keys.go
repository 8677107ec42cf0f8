package e2b

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
)

// APIKeyPrefix starts every API key in e2b's format.
const APIKeyPrefix = "e2b_"

// apiKeyBytes is the random part of a key: 20 bytes, 40 hex digits.
const apiKeyBytes = 20

// NewAPIKey returns a fresh API key in e2b's format: "e2b_" and 40
// lowercase hex digits (160 random bits), which is what e2b's dashboard
// issues and what users' tooling expects. Wiring that generates a key file
// (sandbox-dev's e2b-api-key, a sandbox-e2b bootstrap) calls it; any key a
// file holds is accepted, whatever its form.
func NewAPIKey() string {
	b := make([]byte, apiKeyBytes)
	_, _ = rand.Read(b) // crypto/rand does not fail on Linux
	return APIKeyPrefix + hex.EncodeToString(b)
}

// IsAPIKeyFormat reports whether k has e2b's API key form ("e2b_" and 40
// lowercase hex digits).
func IsAPIKeyFormat(k string) bool {
	if len(k) != len(APIKeyPrefix)+2*apiKeyBytes || k[:len(APIKeyPrefix)] != APIKeyPrefix {
		return false
	}
	for i := len(APIKeyPrefix); i < len(k); i++ {
		if c := k[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// TrafficTokenHeader carries a sandbox's traffic access token: e2b's
// credential for the sandbox's ports. @e2b/code-interpreter sends it, not
// X-Access-Token, on its context calls (create, list, restart, remove);
// runCode sends both.
const TrafficTokenHeader = "E2b-Traffic-Access-Token"

// TrafficToken is the traffic access token of the sandbox whose access
// token is token: HMAC-SHA256(token, "hearth e2b traffic access token"),
// 64 hex digits. Create, connect and fork return it as
// trafficAccessToken; the data plane accepts it, in place of
// X-Access-Token, for any port but envd's (EnvdPort), and hands the agent
// only the forward-only credential (agentapi.ForwardToken). It grants no more
// than the sandbox token (which can already reach every port), opens no
// envd route and runs no code: on the code interpreter's port it opens the
// context calls, never /execute.
func TrafficToken(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("hearth e2b traffic access token"))
	return hex.EncodeToString(m.Sum(nil))
}
