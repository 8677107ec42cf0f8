package e2b

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/internal/testnet"
)

// sdkTemplate is the template the SDK acceptance test creates from.
const sdkTemplate = "ghcr.io/cocoonstack/sandbox/rt:24.04"

// TestSDK runs the real e2b JS SDK (e2e/e2b, e2b@2.51.0) against the
// gateway. It runs when HEARTH_E2B_SDK_TEST=1 and e2e/e2b/node_modules is
// installed (hack/test.d/50-e2b-sdk.sh does both). The fleet is the real
// fleet.NodeFleet over one real sim node (newNodeViewUplink).
func TestSDK(t *testing.T) {
	if os.Getenv("HEARTH_E2B_SDK_TEST") != "1" {
		t.Skip("set HEARTH_E2B_SDK_TEST=1 (and npm ci in e2e/e2b) to run the e2b SDK acceptance test")
	}
	dir, err := filepath.Abs(filepath.Join("..", "e2e", "e2b"))
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b")); err != nil {
		t.Fatalf("e2b SDK not installed: run npm ci in %s", dir)
	}
	// As root, the node's egress lane leaves into a test network of its
	// own (internal/testnet): the SDK's network tests run against it.
	uplink, egressHosts := "", ""
	if os.Geteuid() == 0 {
		net := testnet.Start(t,
			testnet.Host{Addr: "198.18.0.10", Names: []string{"allowed.test"}},
			testnet.Host{Addr: "198.18.0.20", Names: []string{"denied.test"}},
		)
		uplink, egressHosts = net.UplinkPath, "1"
	}
	nf := fleet.New(fleet.Config{View: newNodeViewUplink(t, uplink), Secret: sdkRootToken})
	h, err := New(Config{Fleet: nf, APIKeys: []string{"hearth-sdk-key"}, Domain: "hearth.local"})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "--test", "--test-reporter=spec", "sdk.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"E2B_API_URL="+srv.URL, "E2B_SANDBOX_URL="+srv.URL, "E2B_API_KEY=hearth-sdk-key",
		"HEARTH_E2B_TEMPLATE="+sdkTemplate, "HEARTH_E2B_DOMAIN=hearth.local", "E2B_DEBUG=",
		"HEARTH_E2B_TESTNET="+egressHosts)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test output:\n%s", out)
	require.NoError(t, err, "the e2b SDK test failed")
}
