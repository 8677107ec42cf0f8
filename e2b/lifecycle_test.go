package e2b

import (
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/nodeapi"
)

func TestCreate_LifecycleReachesTheClaimAndGetInfo(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt", "autoPause": true, "autoResume": map[string]any{"enabled": true}})
	require.Equal(t, nodeapi.Lifecycle{OnTimeout: nodeapi.OnTimeoutPause, AutoResume: true, PublicTraffic: true}, g.f.claims[0].Lifecycle)
	var d detailJSON
	g.call("GET", "/sandboxes/"+s.SandboxID, nil, &d)
	require.Equal(t, lifecycle{OnTimeout: "pause", AutoResume: true}, d.Lifecycle)

	plain := g.create(map[string]any{"templateID": "rt"})
	g.call("GET", "/sandboxes/"+plain.SandboxID, nil, &d)
	require.Equal(t, lifecycle{OnTimeout: "kill"}, d.Lifecycle)

	resp, _ := g.call("POST", "/v2/sandboxes", map[string]any{"templateID": "rt", "autoResume": map[string]any{"enabled": true}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "autoResume needs autoPause")

	g.create(map[string]any{"templateID": "rt", "autoPause": true, "autoPauseMemory": false})
	require.Equal(t, nodeapi.Lifecycle{OnTimeout: nodeapi.OnTimeoutPause, PauseWithoutMemory: true, PublicTraffic: true}, g.f.claims[len(g.f.claims)-1].Lifecycle)
	resp, _ = g.call("POST", "/v2/sandboxes", map[string]any{"templateID": "rt", "autoPause": true, "autoPauseMemory": false, "autoResume": map[string]any{"enabled": true}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "a pause without memory is not auto-resumed")
}

func TestDataPlane_AutoResumeWakesAPausedSandbox(t *testing.T) {
	g := startGateway(t)
	auto := g.create(map[string]any{"templateID": "rt", "autoPause": true, "autoResume": map[string]any{"enabled": true}})
	manual := g.create(map[string]any{"templateID": "rt", "autoPause": true})
	for _, id := range []string{auto.SandboxID, manual.SandboxID} {
		resp, _ := g.call("POST", "/sandboxes/"+id+"/pause", nil, nil)
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
	}
	code, out, _ := g.run(auto.SandboxID, *auto.EnvdAccessToken, "echo woke")
	require.Equal(t, 200, code)
	require.Equal(t, "woke\n", out)
	code, _, _ = g.run(manual.SandboxID, *manual.EnvdAccessToken, "echo no")
	require.Equal(t, http.StatusBadGateway, code, "without autoResume a paused sandbox stays paused")
}

func TestDataPlane_SignedFileURLs(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt"})
	tok := *s.EnvdAccessToken
	// Write a file the ordinary way, through an upload signed for writing.
	var body []byte
	get := func(method string, q url.Values) int {
		req, _ := http.NewRequest(method, g.url+"/files?"+q.Encode(), nil)
		req.Host = "49983-" + s.SandboxID + ".gw.local"
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	up := url.Values{"path": {"f.txt"}, "signature": {agentapi.FileSignature("f.txt", "write", "", tok, 0)}}
	require.Equal(t, 200, get("POST", up))
	down := url.Values{"path": {"f.txt"}, "signature": {agentapi.FileSignature("f.txt", "read", "", tok, 0)}}
	require.Equal(t, 200, get("GET", down))
	require.Equal(t, http.StatusUnauthorized, get("GET", url.Values{"path": {"f.txt"}}), "unsigned")
	require.Equal(t, http.StatusUnauthorized, get("POST", down), "signed for reading, used for writing")
	other := url.Values{"path": {"f.txt"}, "signature": {agentapi.FileSignature("f.txt", "read", "", "another-token-0123456789", 0)}}
	require.Equal(t, http.StatusUnauthorized, get("GET", other), "another sandbox's token")
	exp := time.Now().Add(-time.Second).Unix()
	expired := url.Values{"path": {"f.txt"}, "signature": {agentapi.FileSignature("f.txt", "read", "", tok, exp)}, "signature_expiration": {strconv.FormatInt(exp, 10)}}
	require.Equal(t, http.StatusUnauthorized, get("GET", expired))
	require.JSONEq(t, `{"code":401,"message":"signature is already expired"}`, string(body), "e2b's answer, which its SDK's users match")
}

// TestDataPlane_AutoResumeNeedsTheRequestToBeAdmitted: a paused sandbox
// with autoResume is resumed by a request the data plane admits — its
// token, its traffic token, a valid signed URL, or anyone on a public port
// of a public sandbox, as on e2b — never by one it is about to refuse: a
// fake token, a fake traffic token or signature, or no credential on a
// private sandbox's port or on the agent's own, each a 401 that leaves it
// paused.
func TestDataPlane_AutoResumeNeedsTheRequestToBeAdmitted(t *testing.T) {
	g := startGateway(t)
	fake := "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0"
	for _, public := range []bool{false, true} {
		s := g.create(map[string]any{"templateID": "rt", "autoPause": true, "autoResume": map[string]any{"enabled": true},
			"network": map[string]any{"allowPublicTraffic": public}})
		paused := func() bool {
			var d detailJSON
			g.call("GET", "/sandboxes/"+s.SandboxID, nil, &d)
			return d.State == "paused"
		}
		resp, _ := g.call("POST", "/sandboxes/"+s.SandboxID+"/pause", nil, nil)
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
		id := map[string]string{"E2b-Sandbox-Id": s.SandboxID}
		with := func(kv ...string) map[string]string {
			h := map[string]string{}
			for k, v := range id {
				h[k] = v
			}
			for i := 0; i+1 < len(kv); i += 2 {
				h[kv[i]] = kv[i+1]
			}
			return h
		}
		sig := url.Values{"path": {"f.txt"}, "signature": {agentapi.FileSignature("f.txt", "read", "", fake, 0)}}.Encode()
		for _, tc := range []struct {
			what, path string
			hdr        map[string]string
		}{
			{"a fake token", "/health", with("X-Access-Token", fake)},
			{"a fake traffic token", "/", with("E2b-Sandbox-Port", "8080", TrafficTokenHeader, fake)},
			{"a fake signed URL", "/files?" + sig, id},
			{"a fake token on a port", "/", with("E2b-Sandbox-Port", "8080", "X-Access-Token", fake)},
		} {
			status, b := g.raw("GET", tc.path, nil, tc.hdr)
			require.Equal(t, http.StatusUnauthorized, status, "public %v, %s: %s", public, tc.what, b)
			require.True(t, paused(), "public %v: %s resumed the sandbox", public, tc.what)
		}
		if !public {
			status, b := g.raw("GET", "/", nil, with("E2b-Sandbox-Port", "8080"))
			require.Equal(t, http.StatusUnauthorized, status, string(b))
			require.True(t, paused(), "no credential on a private sandbox's port resumed it")
			// Its traffic token resumes it.
			status, b = g.raw("GET", "/", nil, with("E2b-Sandbox-Port", "8080", TrafficTokenHeader, *s.TrafficAccessToken))
			require.NotEqual(t, http.StatusUnauthorized, status, string(b))
			require.False(t, paused(), "the traffic token did not resume it")
		} else {
			// Anyone on a public port, as on e2b.
			status, b := g.raw("GET", "/", nil, with("E2b-Sandbox-Port", "8080"))
			require.NotEqual(t, http.StatusUnauthorized, status, string(b))
			require.False(t, paused(), "traffic on a public port did not resume it")
		}
	}
}
