package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/nodeapi"
)

// raw sends a request with exactly the given headers and returns the
// status and body.
func (g *gw) raw(method, path string, body io.Reader, hdr map[string]string) (int, []byte) {
	g.t.Helper()
	req, err := http.NewRequest(method, g.url+path, body)
	require.NoError(g.t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(g.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// requireJSONError checks an e2b error answer: the status and a JSON
// {code,message} body carrying it.
func requireJSONError(t *testing.T, want, status int, body []byte) {
	t.Helper()
	require.Equal(t, want, status, string(body))
	var e apiError
	require.NoError(t, json.Unmarshal(body, &e), "error bodies are JSON: %s", body)
	require.Equal(t, want, e.Code)
	require.NotEmpty(t, e.Message)
}

func TestDataPlane_UnauthenticatedRequestCostsNoLookup(t *testing.T) {
	g := startGateway(t)
	for _, tok := range []string{"", "short", strings.Repeat("x", 300), "has space in it 0123456789"} {
		status, b := g.raw("POST", "/process.Process/Start", strings.NewReader("{}"),
			map[string]string{"E2b-Sandbox-Id": "sb-0001", "E2b-Sandbox-Port": "49983", "X-Access-Token": tok})
		requireJSONError(t, http.StatusUnauthorized, status, b)
	}
	status, b := g.raw("GET", "/sandboxes/sb-0001", nil, map[string]string{"X-API-KEY": "wrong"})
	requireJSONError(t, http.StatusUnauthorized, status, b)
	require.Zero(t, g.f.lookupCount(), "no request without credentials reaches the fleet")

	// A well-formed token for an id the fleet's view does not name: no
	// node call at all.
	hdr := map[string]string{"E2b-Sandbox-Id": "sb-9999", "X-Access-Token": fakeToken(9999)}
	for i := 0; i < 20; i++ {
		status, b = g.raw("GET", "/health", nil, hdr)
		requireJSONError(t, http.StatusBadGateway, status, b)
	}
	require.Zero(t, g.f.lookupCount(), "an id nobody names costs no node call")
}

func TestDataPlane_NeverSkipsTheTokenCheck(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt"})
	g.f.mu.Lock()
	g.f.sandboxes["sb_0001"].loc.Token = "" // a record without its token
	g.f.mu.Unlock()
	status, _, _ := g.run(s.SandboxID, *s.EnvdAccessToken, "true")
	require.Equal(t, http.StatusUnauthorized, status, "no token on record is a refusal, not an open door")
	// An API key passes the pre-check, but the sandbox token is still required.
	status, b := g.raw("GET", "/health", nil, map[string]string{"E2b-Sandbox-Id": s.SandboxID, "X-API-KEY": apiKey})
	requireJSONError(t, http.StatusUnauthorized, status, b)
}

func TestConnect_AfterAGatewayRestartReturnsTheLiveToken(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt"})

	// A new gateway over the same fleet: nothing cached.
	h, err := New(Config{Fleet: g.f, APIKeys: []string{apiKey}})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	g2 := &gw{t: t, url: srv.URL, f: g.f}
	var c sandboxJSON
	resp, b := g2.call("POST", "/v2/sandboxes/"+s.SandboxID+"/connect", map[string]any{}, &c)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.NotNil(t, c.EnvdAccessToken)
	require.Equal(t, *s.EnvdAccessToken, *c.EnvdAccessToken)
	status, out, _ := g2.run(c.SandboxID, *c.EnvdAccessToken, "echo ok")
	require.Equal(t, 200, status)
	require.Equal(t, "ok\n", out)
	status, _, _ = g2.run(c.SandboxID, fakeToken(2), "true")
	require.Equal(t, http.StatusUnauthorized, status)
}

func TestSnapshots_ScopedToTheGatewaysNamespace(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt"})
	var mine snapshotJSON
	resp, _ := g.call("POST", "/sandboxes/"+s.SandboxID+"/snapshots", map[string]any{"name": "base"}, &mine)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	g.f.mu.Lock()
	g.f.snaps = append(g.f.snaps,
		nodeapi.Snapshot{ID: "sn_other", Name: "base", Namespace: "team-b", Node: "node-a", CreatedAt: time.Now()},
		nodeapi.Snapshot{ID: "sn_legacy", Node: "node-a", CreatedAt: time.Now()}) // no namespace on record
	g.f.mu.Unlock()

	var list []snapshotJSON
	g.call("GET", "/snapshots", nil, &list)
	require.Equal(t, []snapshotJSON{mine}, list)
	for _, id := range []string{"sn_other", "sn_legacy"} {
		resp, _ = g.call("DELETE", "/templates/"+id, nil, nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, id)
		resp, _ = g.call("POST", "/v2/sandboxes", map[string]any{"templateID": id}, nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, id)
	}
	g.f.mu.Lock()
	require.Len(t, g.f.snaps, 3, "other namespaces' snapshots are untouched")
	g.f.mu.Unlock()
}

func TestCreate_FromASnapshotClaimsItsClone(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt"})
	var snap snapshotJSON
	resp, _ := g.call("POST", "/sandboxes/"+s.SandboxID+"/snapshots", map[string]any{"name": "golden"}, &snap)
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	for i, tpl := range []string{snap.SnapshotID, nodeapi.DNSName(snap.SnapshotID), "golden"} {
		c := g.create(map[string]any{"templateID": tpl, "timeout": 60, "metadata": map[string]string{"from": "snap"}})
		require.Equal(t, "rt", c.TemplateID, tpl)
		req := g.f.claims[len(g.f.claims)-1]
		require.True(t, strings.HasPrefix(req.ClaimRef, "default/e2b-"), req.ClaimRef)
		require.Equal(t, int64(60), req.TTLSeconds)
		status, out, _ := g.run(c.SandboxID, *c.EnvdAccessToken, "echo clone-"+strconv.Itoa(i))
		require.Equal(t, 200, status, tpl)
		require.Equal(t, "clone-"+strconv.Itoa(i)+"\n", out)
	}
	resp, _ = g.call("POST", "/v2/sandboxes", map[string]any{"templateID": "sn_missing"}, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

func TestCreate_ClientGoneReleasesTheClaim(t *testing.T) {
	g := startGateway(t)
	ctx, cancel := context.WithCancel(t.Context())
	g.f.onClaim = func(sctx context.Context) {
		cancel()
		clientLeft(t, sctx)
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", g.url+"/v2/sandboxes", strings.NewReader(`{"templateID":"rt"}`))
	req.Header.Set("X-API-KEY", apiKey)
	_, err := http.DefaultClient.Do(req)
	require.Error(t, err)
	require.Eventually(t, func() bool {
		g.f.mu.Lock()
		defer g.f.mu.Unlock()
		return len(g.f.claims) == 1 && len(g.f.sandboxes) == 0
	}, 5*time.Second, 10*time.Millisecond, "the claim nobody will learn of is released")
}

// TestClaims_AClientGoneMidAnswerLeaksNoMicroVM: a client that goes away
// while its create, create from a snapshot or fork is at the node does not
// cut the claim off — a claim cancelled mid-answer leaves its microVMs on
// the node, unknown to anyone until their leases end. The claim runs to
// its answer, and every sandbox it delivered is released.
func TestClaims_AClientGoneMidAnswerLeaksNoMicroVM(t *testing.T) {
	g := startGateway(t)
	parent := g.create(map[string]any{"templateID": "rt"})
	var snap snapshotJSON
	resp, _ := g.call("POST", "/sandboxes/"+parent.SandboxID+"/snapshots", map[string]any{"name": "golden"}, &snap)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	for _, c := range []struct{ name, path, body string }{
		{"create", "/v2/sandboxes", `{"templateID":"rt"}`},
		{"create from a snapshot", "/v2/sandboxes", `{"templateID":"` + snap.SnapshotID + `"}`},
		{"create from a snapshot's name", "/v2/sandboxes", `{"templateID":"golden"}`},
		{"fork", "/sandboxes/" + parent.SandboxID + "/fork", `{"count":3}`},
	} {
		ctx, cancel := context.WithCancel(t.Context())
		g.f.mu.Lock()
		g.f.inFlight = func(sctx context.Context) {
			cancel() // the client goes away while the node answers
			clientLeft(t, sctx)
		}
		g.f.mu.Unlock()
		req, _ := http.NewRequestWithContext(ctx, "POST", g.url+c.path, strings.NewReader(c.body))
		req.Header.Set("X-API-KEY", apiKey)
		_, err := http.DefaultClient.Do(req)
		require.Error(t, err, c.name)
		require.Eventually(t, func() bool {
			g.f.mu.Lock()
			defer g.f.mu.Unlock()
			return len(g.f.sandboxes) == 1
		}, 10*time.Second, 10*time.Millisecond, "%s: every microVM claimed for the client gone is released", c.name)
		g.f.mu.Lock()
		g.f.inFlight = nil
		g.f.mu.Unlock()
	}
	g.f.mu.Lock()
	defer g.f.mu.Unlock()
	for id := range g.f.sandboxes {
		require.True(t, MatchID(id, parent.SandboxID), "the parent stays")
	}
}

func TestBadInput_Is4xxWithAJSONBody(t *testing.T) {
	g := startGateway(t)
	key := map[string]string{"X-API-KEY": apiKey}
	post := func(body string) (int, []byte) {
		return g.raw("POST", "/v2/sandboxes", strings.NewReader(body), key)
	}
	status, b := post(`{"templateID":"rt","metadata":{"x":"` + strings.Repeat("a", maxBodyBytes) + `"}}`)
	requireJSONError(t, http.StatusRequestEntityTooLarge, status, b)
	status, b = post(`{"templateID":"rt","envVars":{"BIG":"` + strings.Repeat("a", nodeapi.MaxEnvBytes) + `"}}`)
	requireJSONError(t, http.StatusBadRequest, status, b)
	status, b = post(`{"templateID":"rt","envVars":{"A=B":"1"}}`)
	requireJSONError(t, http.StatusBadRequest, status, b)
	status, b = post(`{"templateID":"rt","timeout":9223372036854775807}`)
	requireJSONError(t, http.StatusBadRequest, status, b)
	status, b = post(`{"templateID":"rt","timeout":86401}`)
	requireJSONError(t, http.StatusBadRequest, status, b)
	status, b = post(`{"templateID":"rt","timeout":9223372036854775808}`)
	requireJSONError(t, http.StatusBadRequest, status, b)
	for _, tpl := range []string{"rt\u0001", "rt\n", "r\u007ft", strings.Repeat("t", maxTemplateIDLen+1)} {
		body, _ := json.Marshal(map[string]any{"templateID": tpl})
		status, b = post(string(body))
		requireJSONError(t, http.StatusBadRequest, status, b)
	}
	require.Empty(t, g.f.claims, "rejected creates spend nothing")

	s := g.create(map[string]any{"templateID": "rt"})
	for _, p := range []string{"/timeout", "/connect"} {
		status, b = g.raw("POST", "/sandboxes/"+s.SandboxID+p, strings.NewReader(`{"timeout":9223372036854775807}`), key)
		requireJSONError(t, http.StatusBadRequest, status, b)
	}
	require.Empty(t, g.f.renews, "no lease was changed")

	for _, p := range []string{"/sandboxes/..", "/sandboxes/../sandboxes/" + s.SandboxID, "/sandboxes/" + s.SandboxID + "/", "//sandboxes", "/nope"} {
		status, b = g.raw("DELETE", p, nil, key)
		requireJSONError(t, http.StatusNotFound, status, b)
	}
	status, b = g.raw("PUT", "/v2/sandboxes", nil, key)
	requireJSONError(t, http.StatusMethodNotAllowed, status, b)
	g.f.mu.Lock()
	require.Len(t, g.f.sandboxes, 1, "nothing was killed")
	g.f.mu.Unlock()
}

func TestList_MillisecondsNewestFirstAndNoTies(t *testing.T) {
	g := startGateway(t)
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	// Two pairs claimed within the same millisecond, one pair in the same second.
	at := []time.Time{base.Add(100 * time.Microsecond), base.Add(200 * time.Microsecond), base.Add(5 * time.Millisecond), base.Add(5 * time.Millisecond)}
	g.f.claimedAt = func(n int) time.Time { return at[n-1] }
	for range at {
		g.create(map[string]any{"templateID": "rt"})
	}
	var list []listedJSON
	g.call("GET", "/v2/sandboxes", nil, &list)
	var got []string
	for _, l := range list {
		got = append(got, l.SandboxID+"@"+l.StartedAt)
	}
	require.Equal(t, []string{
		"sb0004@2026-12-01T10:00:00.005Z", "sb0003@2026-12-01T10:00:00.005Z",
		"sb0002@2026-12-01T10:00:00.000Z", "sb0001@2026-12-01T10:00:00.000Z",
	}, got, "newest first at full precision, ties broken by id")

	// Paging one at a time visits every sandbox once.
	var paged []string
	next := ""
	for i := 0; i < 10; i++ {
		q := "/v2/sandboxes?limit=1"
		if next != "" {
			q += "&nextToken=" + url.QueryEscape(next)
		}
		resp, _ := g.call("GET", q, nil, &list)
		require.Len(t, list, 1)
		paged = append(paged, list[0].SandboxID)
		if next = resp.Header.Get("X-Next-Token"); next == "" {
			break
		}
	}
	require.Equal(t, []string{"sb0004", "sb0003", "sb0002", "sb0001"}, paged)

	// Bounds are inclusive, at the millisecond a client sees.
	g.call("GET", "/v2/sandboxes?order=asc&startedAfter="+url.QueryEscape("2026-12-01T10:00:00.005Z"), nil, &list)
	require.Len(t, list, 2)
	g.call("GET", "/v2/sandboxes?startedBefore="+url.QueryEscape("2026-12-01T10:00:00.000Z"), nil, &list)
	require.Len(t, list, 2)
	require.Equal(t, "sb0002", list[0].SandboxID)
	resp, _ := g.call("GET", "/v2/sandboxes?startedBefore=yesterday", nil, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

func TestMetrics_HonourStartAndEnd(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt"})
	now := time.Now().Unix()
	var m []metricJSON
	for q, want := range map[string]int{
		"": 1,
		"?start=" + strconv.FormatInt(now-60, 10) + "&end=" + strconv.FormatInt(now+60, 10): 1,
		"?start=" + strconv.FormatInt(now+3600, 10):                                         0,
		"?end=" + strconv.FormatInt(now-3600, 10):                                           0,
	} {
		resp, b := g.call("GET", "/sandboxes/"+s.SandboxID+"/metrics"+q, nil, &m)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		require.Len(t, m, want, q)
		require.NotNil(t, m, "an empty range is [], not null")
	}
	for _, q := range []string{"?start=abc", "?start=10&end=5", "?end=-1"} {
		resp, _ := g.call("GET", "/sandboxes/"+s.SandboxID+"/metrics"+q, nil, nil)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, q)
	}
}

func TestNewAPIKey_HasE2BsFormat(t *testing.T) {
	re := regexp.MustCompile(`^e2b_[0-9a-f]{40}$`)
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		k := NewAPIKey()
		require.Regexp(t, re, k)
		require.True(t, IsAPIKeyFormat(k))
		require.False(t, seen[k])
		seen[k] = true
	}
	for _, k := range []string{"", "e2b_", "e2b_" + strings.Repeat("A", 40), "sk_e2b_" + strings.Repeat("a", 40), "e2b_" + strings.Repeat("a", 41)} {
		require.False(t, IsAPIKeyFormat(k), k)
	}
}

func TestDataPlane_ReachesAnyPortOfTheSandbox(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt"})
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "web "+r.URL.Path+" fwd="+r.Header.Get("X-Hearth-Forward-Port"))
	}))
	defer web.Close()
	port := strconv.Itoa(web.Listener.Addr().(*net.TCPAddr).Port)
	hdr := map[string]string{"E2b-Sandbox-Id": s.SandboxID, "E2b-Sandbox-Port": port, "X-Access-Token": *s.EnvdAccessToken}
	status, b := g.raw("GET", "/index.html", nil, hdr)
	require.Equal(t, http.StatusOK, status, string(b))
	require.Equal(t, "web /index.html fwd=", string(b))

	// envd's port is the agent itself, whatever the client adds.
	hdr["E2b-Sandbox-Port"] = "49983"
	hdr["X-Hearth-Forward-Port"] = port
	status, _ = g.raw("GET", "/health", nil, hdr)
	require.Equal(t, http.StatusNoContent, status)

	hdr["E2b-Sandbox-Port"] = "99999"
	status, b = g.raw("GET", "/", nil, hdr)
	requireJSONError(t, http.StatusBadRequest, status, b)
	hdr["E2b-Sandbox-Port"] = port
	hdr["X-Access-Token"] = fakeToken(77)
	status, b = g.raw("GET", "/", nil, hdr)
	requireJSONError(t, http.StatusUnauthorized, status, b)
}

func TestHostRoute(t *testing.T) {
	for _, tc := range []struct{ host, domain, id, port string }{
		{"49983-sb-0001.gw.local", "gw.local", "sb-0001", "49983"},
		{"8080-sb-abc.GW.local:3000", "gw.local", "sb-abc", "8080"},
	} {
		id, port, ok := HostRoute(tc.host, tc.domain)
		require.True(t, ok, tc.host)
		require.Equal(t, tc.id, id)
		require.Equal(t, tc.port, port)
	}
	for _, tc := range []struct{ host, domain string }{
		{"49983-sb-0001.gw.local", ""}, {"api.gw.local", "gw.local"}, {"gw.local", "gw.local"},
		{"x-sb-1.gw.local", "gw.local"}, {"1-sb.a.gw.local", "gw.local"}, {"49983-sb-1.other", "gw.local"},
		{"-sb-1.gw.local", "gw.local"}, {"123456-sb-1.gw.local", "gw.local"},
	} {
		_, _, ok := HostRoute(tc.host, tc.domain)
		require.False(t, ok, tc.host)
	}
}

func TestDataPlane_HostRoutingReachesAnyPort(t *testing.T) {
	g := startGateway(t) // domain gw.local
	s := g.create(map[string]any{"templateID": "rt"})
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "web "+r.URL.Path)
	}))
	defer web.Close()
	port := strconv.Itoa(web.Listener.Addr().(*net.TCPAddr).Port)
	get := func(host, token string) (int, string) {
		req, _ := http.NewRequest("GET", g.url+"/page", nil)
		req.Host = host
		req.Header.Set("X-Access-Token", token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status, body := get(port+"-"+s.SandboxID+".gw.local", *s.EnvdAccessToken)
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "web /page", body)
	// The agent's own ports need a token: refused before any lookup.
	n := g.f.lookupCount()
	for _, p := range []string{"49983", strconv.Itoa(agentapi.InterpreterPort)} {
		status, _ = get(p+"-"+s.SandboxID+".gw.local", "")
		require.Equal(t, http.StatusUnauthorized, status, p)
	}
	require.Equal(t, n, g.f.lookupCount(), "no lookup without a token")
	// Any other port is public by default, as on e2b: what the sandbox
	// listens on answers its URL with no token.
	status, body = get(port+"-"+s.SandboxID+".gw.local", "")
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "web /page", body)
	status, _ = get("api.gw.local", *s.EnvdAccessToken) // the control plane: no API key
	require.Equal(t, http.StatusUnauthorized, status)
}

// A sandbox created with network.allowPublicTraffic false opens its ports
// only to its traffic access token (or its own token); a fork child of it
// stays private.
func TestDataPlane_PrivateTrafficNeedsTheTrafficToken(t *testing.T) {
	g := startGateway(t) // domain gw.local
	s := g.create(map[string]any{"templateID": "rt", "network": map[string]any{"allowPublicTraffic": false}})
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "web "+r.URL.Path)
	}))
	defer web.Close()
	port := strconv.Itoa(web.Listener.Addr().(*net.TCPAddr).Port)
	get := func(hdr map[string]string) (int, string) {
		req, _ := http.NewRequest("GET", g.url+"/page", nil)
		req.Host = port + "-" + s.SandboxID + ".gw.local"
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status, body := get(nil)
	requireJSONError(t, http.StatusUnauthorized, status, []byte(body))
	status, body = get(map[string]string{TrafficTokenHeader: *s.TrafficAccessToken})
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "web /page", body)
	status, body = get(map[string]string{"X-Access-Token": *s.EnvdAccessToken})
	require.Equal(t, http.StatusOK, status, body)

	// Unknown sandbox on a public port: not found, not served.
	req, _ := http.NewRequest("GET", g.url+"/page", nil)
	req.Host = port + "-sb-00000000deadbeef.gw.local"
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadGateway, resp.StatusCode)
}

func TestCreate_NoCapacityForAServedTemplateListsNoSnapshots(t *testing.T) {
	g := startGateway(t)
	g.f.mu.Lock()
	for k := range g.f.warm {
		g.f.warm[k] = 0 // drained, still advertised
	}
	g.f.mu.Unlock()
	resp, _ := g.call("POST", "/v2/sandboxes", map[string]any{"templateID": "rt"}, nil)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	resp, _ = g.call("POST", "/v2/sandboxes", map[string]any{"templateID": "unknown"}, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "a template no node serves and no snapshot is named")
	g.f.mu.Lock()
	defer g.f.mu.Unlock()
	require.Equal(t, 1, g.f.snapLists, "only the template no node serves may be a snapshot's name")
}

// TestDataPlane_AClosedPortAnswersAsE2b: a port of a running sandbox that
// nothing listens on is e2b's 502 — JSON naming the sandbox (an id the
// SDK's users cut at '-' and compare whole) and the port, or an HTML page
// for a browser; a killed sandbox's is e2b's "not found" 502.
func TestDataPlane_AClosedPortAnswersAsE2b(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt"})
	require.NotContains(t, s.SandboxID, "-")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	get := func(ua string) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", g.url+"/", nil)
		req.Host = strconv.Itoa(port) + "-" + s.SandboxID + ".gw.local"
		req.Header.Set("User-Agent", ua)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	resp, b := get("node")
	require.Equal(t, http.StatusBadGateway, resp.StatusCode)
	require.Empty(t, resp.Header.Get(agentapi.PortClosedHeader))
	require.JSONEq(t, fmt.Sprintf(`{"code":502,"message":"The sandbox is running but port is not open","sandboxId":%q,"port":%d}`, s.SandboxID, port), string(b))
	resp, b = get("Mozilla/5.0 (X11; Linux x86_64) Chrome/120.0")
	require.Equal(t, http.StatusBadGateway, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/html")
	require.Contains(t, string(b), "<title>Closed Port Error</title>")

	// Killed: e2b's "not found", naming the sandbox.
	kr, _ := g.call("DELETE", "/sandboxes/"+s.SandboxID, nil, nil)
	require.Equal(t, http.StatusNoContent, kr.StatusCode)
	resp, b = get("node")
	require.Equal(t, http.StatusBadGateway, resp.StatusCode)
	require.JSONEq(t, fmt.Sprintf(`{"code":502,"message":"The sandbox was not found","sandboxId":%q}`, s.SandboxID), string(b))
}

// TestDataPlane_ProcessesKnowTheirSandbox: as on e2b, a process sees
// E2B_SANDBOX=true and E2B_SANDBOX_ID, the id it was addressed by — a fork
// child its own, not its source's (agentapi.SandboxIDHeader).
func TestDataPlane_ProcessesKnowTheirSandbox(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt"})
	status, out, _ := g.run(s.SandboxID, *s.EnvdAccessToken, `echo "$E2B_SANDBOX $E2B_SANDBOX_ID"`)
	require.Equal(t, 200, status)
	require.Equal(t, "true "+s.SandboxID+"\n", out)

	var forked []struct{ Sandbox sandboxJSON }
	resp, _ := g.call("POST", "/sandboxes/"+s.SandboxID+"/fork", map[string]any{"count": 1}, &forked)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	child := forked[0].Sandbox
	require.NotEqual(t, s.SandboxID, child.SandboxID)
	status, out, _ = g.run(child.SandboxID, *child.EnvdAccessToken, `echo "$E2B_SANDBOX_ID"`)
	require.Equal(t, 200, status)
	require.Equal(t, child.SandboxID+"\n", out)
}

// TestCPUUsedPct_IsTheNodesRateOverTheSandboxsCPUs: e2b's cpuUsedPct is
// the node's CPU rate as a percentage of the sandbox's CPUs; without a
// rate (the node's first measurement) it is 0.
func TestCPUUsedPct_IsTheNodesRateOverTheSandboxsCPUs(t *testing.T) {
	rate := func(c float64) *float64 { return &c }
	for _, c := range []struct {
		st   nodeapi.Stats
		want float64
	}{
		{nodeapi.Stats{CPUCount: 2, CPURateCores: rate(0.5)}, 25},
		{nodeapi.Stats{CPUCount: 1, CPURateCores: rate(1)}, 100},
		{nodeapi.Stats{CPUCount: 4, CPURateCores: rate(0.123456)}, 3.09},
		{nodeapi.Stats{CPUCount: 2}, 0},
		{nodeapi.Stats{CPUCount: 0, CPURateCores: rate(1)}, 0},
		{nodeapi.Stats{CPUCount: 2, CPURateCores: rate(-1)}, 0},
	} {
		require.Equal(t, c.want, cpuUsedPct(c.st), "%+v", c.st)
	}
}
