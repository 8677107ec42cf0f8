package agentapi

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIsInternalHeader_AnyCaseOfThePrefix: every spelling of the internal
// prefix is internal (a proxy drops them all), and nothing else is.
func TestIsInternalHeader_AnyCaseOfThePrefix(t *testing.T) {
	for name, want := range map[string]bool{
		ForwardPortHeader:        true,
		ForwardTokenHeader:       true,
		SandboxIDHeader:          true,
		PortClosedHeader:         true,
		"x-hearth-forward-port":  true,
		"X-HEARTH-ANYTHING":      true,
		"x-HeArTh-":              true,
		"X-Hearth":               false,
		"X-Hearthx":              false,
		"X-Hearth_Forward-Port":  false,
		" X-Hearth-Forward-Port": false,
		"Y-Hearth-Forward-Port":  false,
		AccessTokenHeader:        false,
		"":                       false,
	} {
		require.Equal(t, want, IsInternalHeader(name), "%q", name)
	}
}

// TestForwardToken_IsTheTokensOwnHMAC: the agent and the gateway derive
// the same credential from a token (a fixed vector: changing the
// derivation breaks every running guest), each token its own, and it is
// never the token itself.
func TestForwardToken_IsTheTokensOwnHMAC(t *testing.T) {
	// printf "hearth agent forward" | openssl dgst -sha256 -hmac sandbox-token
	require.Equal(t, "3fa9c242a8e4798574d3b4ca7c276a6ec006b050c64cca10edcccaa7775ed6f4", ForwardToken("sandbox-token"))
	require.Regexp(t, `^[0-9a-f]{64}$`, ForwardToken(""))
	require.NotEqual(t, ForwardToken("a"), ForwardToken("b"))
	require.NotEqual(t, "sandbox-token", ForwardToken("sandbox-token"))
}
