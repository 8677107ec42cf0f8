package agentapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// IsInternalHeader reports whether the header named name (any case) is in
// the internal namespace (InternalHeaderPrefix).
func IsInternalHeader(name string) bool {
	return len(name) >= len(InternalHeaderPrefix) && strings.EqualFold(name[:len(InternalHeaderPrefix)], InternalHeaderPrefix)
}

// ForwardToken is the forward-only credential of the agent whose access
// token is token: HMAC-SHA256(token, "hearth agent forward"), 64 hex digits.
// It opens a forward to a guest port (ForwardPortHeader) and never the
// agent's own routes, so a request the e2b gateway admitted to a guest
// port only cannot reach the agent's API even if its forward header were
// lost on the way.
func ForwardToken(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("hearth agent forward"))
	return hex.EncodeToString(m.Sum(nil))
}
