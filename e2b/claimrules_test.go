package e2b

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/nodeapi"
)

// TestCreate_ClaimRulesRefuseBeforeAnyNodeIsAsked: a create whose claim
// breaks a claim rule (docs/API.md#claim-rules) is e2b's 400, and no node
// is asked anything — not the lease bounds, not a template, not a claim.
func TestCreate_ClaimRulesRefuseBeforeAnyNodeIsAsked(t *testing.T) {
	many := map[string]string{}
	for i := range nodeapi.MaxMetadataKeys + 1 {
		many[fmt.Sprint("k", i)] = ""
	}
	manyEnv := map[string]string{}
	for i := range nodeapi.MaxEnvVars + 1 {
		manyEnv[fmt.Sprint("V", i)] = ""
	}
	for name, body := range map[string]map[string]any{
		"env name with =":                {"envVars": map[string]string{"A=B": "1"}},
		"env name empty":                 {"envVars": map[string]string{"": "1"}},
		"env name with a NUL":            {"envVars": map[string]string{"A\x00": "1"}},
		"env name with a newline":        {"envVars": map[string]string{"A\nB": "1"}},
		"env value with a NUL":           {"envVars": map[string]string{"A": "1\x00"}},
		"env over MaxEnvBytes":           {"envVars": map[string]string{"A": strings.Repeat("x", nodeapi.MaxEnvBytes)}},
		"env over MaxEnvVars":            {"envVars": manyEnv},
		"metadata empty key":             {"metadata": map[string]string{"": "x"}},
		"metadata over MaxMetadataKeys":  {"metadata": many},
		"metadata over MaxMetadataBytes": {"metadata": map[string]string{"k": strings.Repeat("x", nodeapi.MaxMetadataBytes)}},
	} {
		g := startGateway(t)
		body["templateID"] = "rt"
		b, _ := json.Marshal(body)
		status, out := g.raw("POST", "/sandboxes", strings.NewReader(string(b)), map[string]string{"X-API-KEY": apiKey})
		requireJSONError(t, http.StatusBadRequest, status, out)
		field := "metadata"
		if _, ok := body["envVars"]; ok {
			field = "envVars"
		}
		require.Contains(t, string(out), field, name)
		g.f.mu.Lock()
		claims, leaseAsks := len(g.f.claims), g.f.leaseAsks
		g.f.mu.Unlock()
		require.Zero(t, claims, name)
		require.Zero(t, leaseAsks, "%s: the lease bounds (a node's /v1/info) were asked", name)
	}
}
