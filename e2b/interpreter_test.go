package e2b

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/image"
)

func TestDefaultTemplateIsTheDefaultPoolsImage(t *testing.T) {
	require.Equal(t, image.DefaultRef, DefaultTemplate)
}

func startOn(t *testing.T, h http.Handler, f *fakeFleet) *gw {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &gw{t: t, url: srv.URL, f: f}
}

func TestCreate_SDKDefaultTemplatesLandOnTheDefaultPool(t *testing.T) {
	f := newFakeFleet(t)
	f.addWarm(DefaultTemplate, 2)
	h, err := New(Config{Fleet: f, APIKeys: []string{apiKey}})
	require.NoError(t, err)
	g := startOn(t, h, f)
	s := g.create(map[string]any{"templateID": CodeInterpreterTemplate})
	require.Equal(t, DefaultTemplate, s.TemplateID)
	// The e2b SDK's default, "base", too.
	s = g.create(map[string]any{"templateID": BaseTemplate})
	require.Equal(t, DefaultTemplate, s.TemplateID)

	// A pool named like the alias wins.
	f.addWarm(CodeInterpreterTemplate, 1)
	s = g.create(map[string]any{"templateID": CodeInterpreterTemplate})
	require.Equal(t, CodeInterpreterTemplate, s.TemplateID)

	// No aliases: the name is a template like any other (none here: 503).
	h, err = New(Config{Fleet: f, APIKeys: []string{apiKey}, TemplateAliases: map[string]string{}})
	require.NoError(t, err)
	f.mu.Lock()
	for k := range f.warm {
		if k.Template == CodeInterpreterTemplate {
			f.warm[k] = 0
		}
	}
	f.mu.Unlock()
	resp, _ := startOn(t, h, f).call("POST", "/v2/sandboxes", map[string]any{"templateID": CodeInterpreterTemplate}, nil)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
}

func TestDataPlane_TrafficTokenOpensPortsNotEnvd(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt"})
	require.NotNil(t, s.TrafficAccessToken)
	require.Equal(t, TrafficToken(*s.EnvdAccessToken), *s.TrafficAccessToken)
	require.NotEqual(t, *s.EnvdAccessToken, *s.TrafficAccessToken)
	var c sandboxJSON
	resp, _ := g.call("POST", "/v2/sandboxes/"+s.SandboxID+"/connect", map[string]any{}, &c)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, *s.TrafficAccessToken, *c.TrafficAccessToken)

	port := strconv.Itoa(agentapi.InterpreterPort)
	hdr := func(p, traffic string) map[string]string {
		return map[string]string{"E2b-Sandbox-Id": s.SandboxID, "E2b-Sandbox-Port": p, TrafficTokenHeader: traffic}
	}
	// envd's port: the traffic token is no access token.
	status, b := g.raw("GET", "/health", nil, hdr("49983", *s.TrafficAccessToken))
	requireJSONError(t, http.StatusUnauthorized, status, b)
	// Another sandbox's traffic token, or the access token in its place.
	status, b = g.raw("GET", "/contexts", nil, hdr(port, TrafficToken(fakeToken(99))))
	requireJSONError(t, http.StatusUnauthorized, status, b)
	status, b = g.raw("GET", "/contexts", nil, hdr(port, *s.EnvdAccessToken))
	requireJSONError(t, http.StatusUnauthorized, status, b)
	// Any other port: accepted, and the agent sees the sandbox token (its
	// forward to 8080 finds nothing listening: e2b's closed-port 502).
	status, b = g.raw("GET", "/", nil, hdr("8080", *s.TrafficAccessToken))
	require.Equal(t, http.StatusBadGateway, status, string(b))
	require.Contains(t, string(b), `"port":8080`)
}

// TestDataPlane_CodeInterpreterThroughTheGateway: the calls
// @e2b/code-interpreter makes (e2b/sdk: runCode with X-Access-Token, the
// context calls with the traffic token only) reach the agent's interpreter.
func TestDataPlane_CodeInterpreterThroughTheGateway(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt"})
	base := map[string]string{"E2b-Sandbox-Id": s.SandboxID, "E2b-Sandbox-Port": "49999", "Content-Type": "application/json"}
	with := func(k, v string) map[string]string {
		h := map[string]string{k: v}
		for a, b := range base {
			h[a] = b
		}
		return h
	}
	status, b := g.raw("POST", "/execute", strings.NewReader(`{"code":"x = 6*7\nx"}`), with("X-Access-Token", *s.EnvdAccessToken))
	require.Equal(t, http.StatusOK, status, string(b))
	require.Contains(t, string(b), `"text":"42"`)
	require.Contains(t, string(b), `"end_of_execution"`)

	status, b = g.raw("POST", "/contexts", strings.NewReader(`{"language":"python"}`), with(TrafficTokenHeader, *s.TrafficAccessToken))
	require.Equal(t, http.StatusOK, status, string(b))
	require.Contains(t, string(b), `"language":"python"`)
	status, b = g.raw("GET", "/contexts", nil, with(TrafficTokenHeader, *s.TrafficAccessToken))
	require.Equal(t, http.StatusOK, status, string(b))
	// Without either token: refused before any lookup.
	status, b = g.raw("GET", "/contexts", nil, base)
	requireJSONError(t, http.StatusUnauthorized, status, b)
}

// TestDataPlane_TheTrafficTokenRunsNoInterpreterCode: the traffic token
// opens a sandbox's ports, and the code interpreter's context calls, but
// runs no code: POST /execute on port 49999 needs the sandbox token, as
// envd's API does. Nor does a router port forward (create
// sandboxes/portforward) run code there: port 49999 is exec, like 8888.
func TestDataPlane_TheTrafficTokenRunsNoInterpreterCode(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt", "network": map[string]any{"allowPublicTraffic": false}})
	code := `{"code":"print('pwned-' + 'x')"}`
	hdr := map[string]string{"E2b-Sandbox-Id": s.SandboxID, "E2b-Sandbox-Port": "49999", "Content-Type": "application/json", TrafficTokenHeader: *s.TrafficAccessToken}
	for _, conn := range []string{"", "X-Hearth-Forward-Token", "X-Hearth-Forward-Port"} {
		h := map[string]string{"Connection": conn}
		for k, v := range hdr {
			h[k] = v
		}
		status, b := g.raw("POST", "/execute", strings.NewReader(code), h)
		require.Equal(t, http.StatusUnauthorized, status, "Connection %q: %s", conn, b)
		require.NotContains(t, string(b), "pwned-x")
	}
	status, b := g.raw("POST", "/contexts", strings.NewReader(`{"language":"python"}`), hdr)
	require.Equal(t, http.StatusOK, status, string(b))
	hdr["X-Access-Token"] = *s.EnvdAccessToken // what runCode sends: both
	status, b = g.raw("POST", "/execute", strings.NewReader(`{"code":"print('ran-' + 'x')"}`), hdr)
	require.Equal(t, http.StatusOK, status, string(b))
	require.Contains(t, string(b), "ran-x")
}

func TestRouter_TheInterpreterPortIsExec(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	srv, _, sb := routerGatewayF(t, grants{"kube-pf": {SubresourcePortForward}, "kube-exec": {SubresourceExec}})
	for _, port := range []string{"49999", "049999", "+49999"} {
		for _, tc := range []struct {
			bearer string
			want   int
		}{{"kube-pf", http.StatusForbidden}, {"kube-exec", http.StatusOK}, {sb.Token, http.StatusOK}} {
			status, body := sendBody(t, srv.URL, "POST", "/execute", `{"code":"print('ran-' + 'x')"}`, map[string]string{
				HeaderSandboxID: "demo", HeaderSandboxNamespace: "team", HeaderSandboxPort: port,
				"Authorization": "Bearer " + tc.bearer, "Content-Type": "application/json"})
			require.Equal(t, tc.want, status, "port %s, %s: %s", port, tc.bearer, body)
			if tc.want == http.StatusOK {
				require.Contains(t, body, "ran-x")
			} else {
				require.Contains(t, body, "sandboxes/exec")
				require.NotContains(t, body, "ran-x")
			}
		}
	}
}

func sendBody(t *testing.T, url, method, path, body string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url+path, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
