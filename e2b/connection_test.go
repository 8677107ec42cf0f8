package e2b

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
)

// connectionAttacks are Connection header values naming the headers the
// gateway reads or sets for itself. A proxy removes the headers its
// Connection names from what it forwards (they are hop-by-hop), so a
// gateway that put identity or routing on the inbound request would lose
// them to these: a request for a public port would then reach the
// agent's own API with the sandbox token.
var connectionAttacks = []string{
	agentapi.ForwardPortHeader, agentapi.ForwardTokenHeader, agentapi.SandboxIDHeader, "X-Access-Token",
	"E2b-Sandbox-Id", "E2b-Sandbox-Port", TrafficTokenHeader, "Authorization",
	HeaderSandboxID, HeaderSandboxNamespace, HeaderSandboxPort,
	"x-hearth-forward-port", "X-HEARTH-FORWARD-PORT", "x-access-token",
	agentapi.ForwardPortHeader + ", X-Access-Token, " + agentapi.SandboxIDHeader + ", " + agentapi.ForwardTokenHeader,
	"close, " + agentapi.ForwardPortHeader,
	"keep-alive, x-Hearth-Forward-Port , X-Hearth-Sandbox-Id",
}

// secretFile puts a file only the agent's API can serve into the
// sandbox's root and returns its path.
func secretFile(t *testing.T, f *fakeFleet, id string) string {
	t.Helper()
	f.mu.Lock()
	root := f.sandboxes[id].root
	f.mu.Unlock()
	p := filepath.Join(root, "secret")
	require.NoError(t, os.WriteFile(p, []byte("SECRET"), 0o600))
	return p
}

// echoApp is the sandbox's own web app on the "guest's" loopback: it
// answers "app <path> internal=<the internal headers it was given>".
func echoApp(t *testing.T) string {
	t.Helper()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var leaked []string
		for k := range r.Header {
			if strings.HasPrefix(strings.ToLower(k), "x-hearth-") || strings.EqualFold(k, "X-Access-Token") ||
				strings.EqualFold(k, TrafficTokenHeader) || strings.EqualFold(k, "X-API-KEY") {
				leaked = append(leaked, k)
			}
		}
		if strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
			leaked = append(leaked, "Authorization: Bearer")
		}
		sort.Strings(leaked)
		_, _ = io.WriteString(w, "app "+r.URL.Path+" internal="+strings.Join(leaked, ","))
	}))
	t.Cleanup(web.Close)
	return strconv.Itoa(web.Listener.Addr().(*net.TCPAddr).Port)
}

func send(t *testing.T, url, method, path, host string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url+path, nil)
	require.NoError(t, err)
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestProxy_ConnectionHeaderCannotStripForwardPort: whatever internal
// header a client names in Connection, a request for a public port
// (anonymous), for a private sandbox's port (traffic token only) or a
// router port forward reaches the sandbox's app — never the agent's own
// API (here: GET /files of a file in the guest) — and the app sees none of
// the internal headers.
func TestProxy_ConnectionHeaderCannotStripForwardPort(t *testing.T) {
	g := startGateway(t) // domain gw.local
	app := echoApp(t)
	public := g.create(map[string]any{"templateID": "rt"})
	private := g.create(map[string]any{"templateID": "rt", "network": map[string]any{"allowPublicTraffic": false}})
	pubSecret := secretFile(t, g.f, "sb_0001")
	privSecret := secretFile(t, g.f, "sb_0002")

	rsrv, rf, _ := routerGatewayF(t, authz{"kube-alice": true})
	routerSecret := secretFile(t, rf, "sb_0001")

	for _, conn := range connectionAttacks {
		for _, tc := range []struct {
			what, url, host string
			hdr             map[string]string
			secret          string
		}{
			{"public port by headers", g.url, "", map[string]string{"E2b-Sandbox-Id": public.SandboxID, "E2b-Sandbox-Port": app}, pubSecret},
			{"public port by host", g.url, app + "-" + public.SandboxID + ".gw.local", nil, pubSecret},
			{"private port, traffic token", g.url, "", map[string]string{"E2b-Sandbox-Id": private.SandboxID, "E2b-Sandbox-Port": app,
				TrafficTokenHeader: *private.TrafficAccessToken}, privSecret},
			{"private port by host, traffic token", g.url, app + "-" + private.SandboxID + ".gw.local", map[string]string{
				TrafficTokenHeader: *private.TrafficAccessToken}, privSecret},
			{"router port forward", rsrv.URL, "", map[string]string{HeaderSandboxID: "demo", HeaderSandboxNamespace: "team", HeaderSandboxPort: app,
				"Authorization": "Bearer kube-alice"}, routerSecret},
		} {
			hdr := map[string]string{"Authorization": "Basic cm9vdDo=", "Connection": conn}
			for k, v := range tc.hdr {
				hdr[k] = v
			}
			status, body := send(t, tc.url, "GET", "/files?path="+tc.secret, tc.host, hdr)
			require.NotContains(t, body, "SECRET", "%s, Connection: %s: the agent's API answered", tc.what, conn)
			require.Equal(t, http.StatusOK, status, "%s, Connection: %s: %s", tc.what, conn, body)
			require.Equal(t, "app /files internal=", body, "%s, Connection: %s", tc.what, conn)
		}
	}
}

// TestProxy_ConnectionHeaderCannotStripTheToken: on envd's own port,
// naming X-Access-Token (or anything else) in Connection neither lets a
// request without the token in nor turns a token holder away.
func TestProxy_ConnectionHeaderCannotStripTheToken(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt"})
	secret := secretFile(t, g.f, "sb_0001")
	for _, conn := range connectionAttacks {
		base := map[string]string{"E2b-Sandbox-Id": s.SandboxID, "E2b-Sandbox-Port": "49983", "Connection": conn}
		withToken := map[string]string{"X-Access-Token": *s.EnvdAccessToken}
		for k, v := range base {
			withToken[k] = v
		}
		status, body := send(t, g.url, "GET", "/files?path="+secret, "", withToken)
		require.Equal(t, http.StatusOK, status, "Connection: %s: %s", conn, body)
		require.Equal(t, "SECRET", body)
		withTraffic := map[string]string{TrafficTokenHeader: *s.TrafficAccessToken}
		for k, v := range base {
			withTraffic[k] = v
		}
		for _, hdr := range []map[string]string{base, withTraffic} {
			status, body = send(t, g.url, "GET", "/files?path="+secret, "", hdr)
			require.Equal(t, http.StatusUnauthorized, status, "Connection: %s: %s", conn, body)
		}
	}
}

// TestProxy_ClientsCannotSetInternalHeaders: a client's own
// X-Hearth-* headers (a forward token, a forward port, a sandbox id) are
// dropped before the gateway sets its own; the guest never sees them.
func TestProxy_ClientsCannotSetInternalHeaders(t *testing.T) {
	g := startGateway(t)
	app := echoApp(t)
	s := g.create(map[string]any{"templateID": "rt"})
	secret := secretFile(t, g.f, "sb_0001")
	forged := map[string]string{
		"E2b-Sandbox-Id": s.SandboxID, "E2b-Sandbox-Port": app,
		agentapi.ForwardPortHeader:  "49983",
		agentapi.ForwardTokenHeader: agentapi.ForwardToken(*s.EnvdAccessToken),
		agentapi.SandboxIDHeader:    "sbother",
		"X-Hearth-Anything":         "x",
	}
	status, body := send(t, g.url, "GET", "/files?path="+secret, "", forged)
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "app /files internal=", body)
}

// TestProxy_TheAPIKeyNeverReachesTheGuest: an e2b API key a client sends
// along with a data-plane or router request (a proxy that adds it to
// everything, a misconfigured client) is the gateway's, never the guest's:
// the app on a sandbox port does not see it.
func TestProxy_TheAPIKeyNeverReachesTheGuest(t *testing.T) {
	g := startGateway(t)
	app := echoApp(t)
	s := g.create(map[string]any{"templateID": "rt"})
	for _, hdr := range []map[string]string{
		{"E2b-Sandbox-Id": s.SandboxID, "E2b-Sandbox-Port": app, "X-API-KEY": apiKey},
		{"E2b-Sandbox-Id": s.SandboxID, "E2b-Sandbox-Port": app, "x-api-key": apiKey, "X-Access-Token": *s.EnvdAccessToken},
	} {
		status, body := send(t, g.url, "GET", "/", "", hdr)
		require.Equal(t, http.StatusOK, status, body)
		require.Equal(t, "app / internal=", body)
	}
	rsrv, _, sb := routerGatewayF(t, nil)
	status, body := send(t, rsrv.URL, "GET", "/", "", map[string]string{HeaderSandboxID: "demo", HeaderSandboxNamespace: "team",
		HeaderSandboxPort: app, "X-Access-Token": sb.Token, "X-API-KEY": "k"})
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "app / internal=", body)
}

// TestProxy_InternalAgentPathsAreNotServed: the node's endpoints on the
// agent (agentapi.IdentityPath re-keys it) answer 404 through the gateway,
// whatever the spelling and even with the sandbox's token.
func TestProxy_InternalAgentPathsAreNotServed(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt"})
	hdr := map[string]string{"E2b-Sandbox-Id": s.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": *s.EnvdAccessToken}
	for _, p := range []string{agentapi.IdentityPath, "/hearth/../hearth/identity", "//hearth/identity", "/hearth/", "/hearth%2Fidentity", "/./hearth/identity"} {
		status, body := send(t, g.url, "POST", p, "", hdr)
		requireJSONError(t, http.StatusNotFound, status, []byte(body))
	}
	// The log is the node's to read (the control plane serves it).
	for _, p := range []string{agentapi.LogsPath, "/hearth/logs?tail=1", "//hearth/logs"} {
		status, body := send(t, g.url, "GET", p, "", hdr)
		requireJSONError(t, http.StatusNotFound, status, []byte(body))
	}
	status, out, _ := g.run(s.SandboxID, *s.EnvdAccessToken, "echo still-mine")
	require.Equal(t, 200, status)
	require.Equal(t, "still-mine\n", out, "the sandbox's token is unchanged")

	rsrv, _, sb := routerGatewayF(t, authz{"kube-alice": true})
	for _, p := range []string{agentapi.IdentityPath, "/../hearth/identity", "/../../hearth/identity"} {
		status, body := send(t, rsrv.URL, "POST", p, "", map[string]string{HeaderSandboxID: "demo", HeaderSandboxNamespace: "team",
			HeaderSandboxPort: "8888", "X-Access-Token": sb.Token})
		requireJSONError(t, http.StatusNotFound, status, []byte(body))
	}
}

// routerGatewayF is routerGateway that also returns the fake fleet.
func routerGatewayF(t *testing.T, a SandboxAuthorizer) (*httptest.Server, *fakeFleet, nodeapi.Sandbox) {
	t.Helper()
	f := newFakeFleet(t)
	f.addWarm("tmpl", 1)
	k, _ := pool.KeyForE2B("tmpl", false)
	sb, err := f.Claim(context.Background(), nodeapi.ClaimRequest{Template: k.Template, Net: k.Net, Size: k.Size, ClaimRef: "team/demo", Env: map[string]string{"WHO": "claim"}})
	require.NoError(t, err)
	h, err := New(Config{Fleet: f, APIKeys: []string{"k"}, Refs: refsOf{f}, Authorizer: a})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, f, sb
}
