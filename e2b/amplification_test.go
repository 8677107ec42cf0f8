package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/inventory"
)

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// fakeCredentials are data-plane requests for sandbox id that carry a
// credential of the right form and the wrong value (or none, on a public
// port): what an outsider can send without knowing anything.
func fakeCredentials(id string) []struct {
	path string
	hdr  map[string]string
} {
	return []struct {
		path string
		hdr  map[string]string
	}{
		{"/health", map[string]string{"E2b-Sandbox-Id": id, "X-Access-Token": randomHex(24)}},
		{"/health", map[string]string{"E2b-Sandbox-Id": id, "X-Access-Token": randomHex(24), "X-API-KEY": apiKey}},
		{"/", map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "8080", TrafficTokenHeader: randomHex(32)}},
		{"/", map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "8080"}}, // a public port, no credential
		{"/files?path=/etc/passwd&username=user&signature=v1_" + randomHex(16), map[string]string{"E2b-Sandbox-Id": id}},
	}
}

// TestDataPlane_FakeCredentialsCostNoNodeCall: data-plane requests for
// random ids with fake tokens, fake traffic tokens, fake signed URLs or no
// credential cost no node call — the ids are resolved only through the
// fleet's index or view (Fleet.KnownByID), and a new id each time cannot
// get past a miss cache because there is nothing to miss.
func TestDataPlane_FakeCredentialsCostNoNodeCall(t *testing.T) {
	g := startGateway(t)
	g.create(map[string]any{"templateID": "rt"})
	before := g.f.lookupCount()
	for i := 0; i < 20; i++ {
		id := "sb" + randomHex(8)
		for _, c := range fakeCredentials(id) {
			status, b := g.raw("GET", c.path, nil, c.hdr)
			requireJSONError(t, http.StatusBadGateway, status, b)
			require.Contains(t, string(b), sandboxNotFoundMessage)
		}
	}
	require.Equal(t, before, g.f.lookupCount(), "random ids with fake credentials reached a node")
}

// TestDataPlane_FakeCredentialsCostNoNodeCallOnARealFleet: the same over
// the real fleet.NodeFleet and a node that counts what reaches it: none of
// the requests does, while one fan-out lookup would.
func TestDataPlane_FakeCredentialsCostNoNodeCallOnARealFleet(t *testing.T) {
	var calls atomic.Int64
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
	}))
	defer node.Close()
	view := inventory.NewStatic()
	view.Set(&inventory.NodeInventory{Node: "n1", Address: strings.TrimPrefix(node.URL, "http://"),
		Pools: []inventory.Pool{{Template: "rt", Warm: 1, Target: 1}}})
	fl := fleet.New(fleet.Config{View: fleettest.StaticView{Static: view}, Secret: "s"})
	h, err := New(Config{Fleet: fl, APIKeys: []string{apiKey}, Domain: "gw.local"})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	g := &gw{t: t, url: srv.URL}
	for i := 0; i < 20; i++ {
		id := "sb" + randomHex(8)
		for _, c := range fakeCredentials(id) {
			status, b := g.raw("GET", c.path, nil, c.hdr)
			requireJSONError(t, http.StatusBadGateway, status, b)
		}
	}
	require.Zero(t, calls.Load(), "random ids with fake credentials reached the node")
	_, err = fl.LiveByID(context.Background(), "sb_"+randomHex(8))
	require.ErrorIs(t, err, fleet.ErrNotFound)
	require.NotZero(t, calls.Load(), "the counter sees a fan-out lookup")
}

// TestRouter_FakeCredentialsCostNoNodeCallAndLeakNoName: router requests
// naming random sandboxes with no credential, a fake sandbox token, or a
// bearer token the API refuses cost no node call; and an unknown name
// answers exactly as a known one with a wrong credential.
func TestRouter_FakeCredentialsCostNoNodeCallAndLeakNoName(t *testing.T) {
	srv, f, _ := routerGatewayF(t, authz{"kube-alice": true})
	before := f.lookupCount()
	call := func(name string, hdr map[string]string) (int, string) {
		h := map[string]string{HeaderSandboxID: name, HeaderSandboxNamespace: "team"}
		for k, v := range hdr {
			h[k] = v
		}
		return send(t, srv.URL, "POST", "/execute", "", h)
	}
	creds := []map[string]string{
		nil,
		{"X-Access-Token": randomHex(24)},
		{"Authorization": "Bearer " + randomHex(24)},
		{"Authorization": "Bearer kube-mallory", "X-Access-Token": randomHex(24)},
	}
	for i := 0; i < 20; i++ {
		name := "ghost-" + randomHex(4)
		for _, c := range creds {
			status, body := call(name, c)
			require.Contains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, status, body)
		}
	}
	require.Equal(t, before, f.lookupCount(), "random names with fake credentials reached a node")

	for _, c := range creds {
		ks, kb := call("demo", c)
		us, ub := call("ghost", c)
		require.Equal(t, ks, us, "status: a known name with a wrong credential vs an unknown name")
		require.Equal(t, kb, strings.ReplaceAll(ub, "ghost", "demo"), "body: a known name with a wrong credential vs an unknown name")
	}
}
