package e2b

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/agentapi"

	"github.com/hearthvm/hearth/nodeapi"
)

func TestRenderAndMatchID(t *testing.T) {
	for _, tc := range []struct{ raw, rendered string }{
		{"sb_0123", "sb0123"},
		{"SB_ABC", "sbabc"},
		{"sb-ok", "sbok"},
		{"abc123", "abc123"},
		{"sb_é", "sb"},
		{"_", "5f"},
	} {
		require.Equal(t, tc.rendered, RenderID(tc.raw), tc.raw)
		require.True(t, MatchID(tc.raw, tc.rendered))
		require.True(t, MatchID(tc.raw, tc.raw))
	}
	require.True(t, MatchID("sb_0123", "sb-0123"), "the rendering of earlier releases")
	for _, tc := range []struct{ raw, given string }{
		{"sb_1", "sb2"}, {"", ""}, {"sb_1", ""}, {"", "sb1"}, {"sb_1", "SB1"}, {"sb_1", "sb-2"},
	} {
		require.False(t, MatchID(tc.raw, tc.given), "%q vs %q", tc.raw, tc.given)
	}
	require.Equal(t, []string{"sbx", "sb_x"}, idCandidates("sbx"))
	require.Equal(t, []string{"sb-x", "sb_x"}, idCandidates("sb-x"), "the rendering of earlier releases")
	require.Equal(t, []string{"sb_x"}, idCandidates("sb_x"))
	require.Equal(t, []string{"sb"}, idCandidates("sb"))
}

func TestDecodeMetadataQuery(t *testing.T) {
	for _, tc := range []struct {
		name, rawQuery string
		want           map[string]string
		err            bool
	}{
		{"observed triple encoding", "metadata=a%252520b%3Dc%252526d%25253D%2525C3%2525A9", map[string]string{"a b": "c&d=é"}, false},
		{"plain", "metadata=owner%3Dprobe", map[string]string{"owner": "probe"}, false},
		{"two pairs", "metadata=a%3D1%26b%3D2", map[string]string{"a": "1", "b": "2"}, false},
		{"absent", "", nil, false},
		{"empty key", "metadata=%3Dv", nil, true},
		{"bad escape", "metadata=%2525zz%3D1", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := url.ParseQuery(tc.rawQuery)
			require.NoError(t, err)
			got, err := DecodeMetadataQuery(q.Get("metadata"))
			if tc.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestPageList(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var items []listItem
	for i := 0; i < 5; i++ {
		items = append(items, listItem{ID: string(rune('a' + i)), StartedAt: base.Add(time.Duration(i) * time.Second),
			Paused: i == 2, Template: "t", Metadata: map[string]string{"even": map[bool]string{true: "y", false: "n"}[i%2 == 0]}})
	}
	ids := func(p []listItem) string {
		var s string
		for _, it := range p {
			s += it.ID
		}
		return s
	}
	// Newest first by default, two per page, following tokens.
	q := listQuery{Limit: 2}
	var got []string
	for {
		p, next := pageList(items, q)
		got = append(got, ids(p))
		if next == "" {
			break
		}
		q.NextToken = next
	}
	require.Equal(t, []string{"ed", "cb", "a"}, got)

	p, next := pageList(items, listQuery{Limit: 10, Ascending: true})
	require.Equal(t, "abcde", ids(p))
	require.Empty(t, next)

	p, _ = pageList(items, listQuery{Limit: 10, States: map[string]bool{"paused": true}})
	require.Equal(t, "c", ids(p))
	p, _ = pageList(items, listQuery{Limit: 10, Metadata: map[string]string{"even": "y"}})
	require.Equal(t, "eca", ids(p))
	p, _ = pageList(items, listQuery{Limit: 10, StartedAfter: base.Add(2 * time.Second)})
	require.Equal(t, "edc", ids(p), "startedAfter is inclusive")
	p, _ = pageList(items, listQuery{Limit: 10, StartedBefore: base.Add(2 * time.Second)})
	require.Equal(t, "cba", ids(p), "startedBefore is inclusive")
	p, _ = pageList(items, listQuery{Limit: 10, StartedAfter: base.Add(time.Second), StartedBefore: base.Add(3 * time.Second)})
	require.Equal(t, "dcb", ids(p))

	// A deleted item between pages neither repeats nor skips the rest.
	p, next = pageList(items, listQuery{Limit: 2})
	require.Equal(t, "ed", ids(p))
	p, _ = pageList(append(items[:2:2], items[4:]...), listQuery{Limit: 2, NextToken: next}) // drop c, d
	require.Equal(t, "ba", ids(p))

	_, err := parseListQuery(url.Values{"nextToken": {"garbage"}})
	require.Error(t, err)
	_, err = parseListQuery(url.Values{"limit": {"0"}})
	require.Error(t, err)
	_, err = parseListQuery(url.Values{"state": {"running,dead"}})
	require.Error(t, err)
	lq, err := parseListQuery(url.Values{"state": {"running,paused"}, "order": {"asc"}, "limit": {"7"}})
	require.NoError(t, err)
	require.Equal(t, 7, lq.Limit)
	require.True(t, lq.Ascending)
}

func TestNew_FailsWithoutKeysUnlessAnonymous(t *testing.T) {
	f := newFakeFleet(t)
	_, err := New(Config{Fleet: f})
	require.ErrorIs(t, err, ErrNoKeys)
	_, err = New(Config{Fleet: f, APIKeys: []string{"  ", ""}})
	require.ErrorIs(t, err, ErrNoKeys)
	_, err = New(Config{Fleet: f, AllowAnonymous: true})
	require.NoError(t, err)

	o := NewOptions()
	_, err = o.Config(f)
	require.ErrorIs(t, err, ErrNoKeys)
	path := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(path, []byte("# comment\n\n  k1  \nk2\tteam-a\n#k3\n"), 0o600))
	keys, err := LoadKeys(path)
	require.NoError(t, err)
	require.Equal(t, []APIKey{{Key: "k1"}, {Key: "k2", Namespace: "team-a"}}, keys)
	o.APIKeyFile = path
	cfg, err := o.Config(f)
	require.NoError(t, err)
	require.Equal(t, keys, cfg.Keys)
	for _, bad := range []string{"k1 Team_A\n", "k1 team-a extra\n", "k1 " + strings.Repeat("a", 64) + "\n"} {
		require.NoError(t, os.WriteFile(path, []byte(bad), 0o600))
		_, err = LoadKeys(path)
		require.Error(t, err, bad)
		require.NotContains(t, err.Error(), "k1", "the error names the line, not the key")
	}
	_, err = New(Config{Fleet: f, Keys: []APIKey{{Key: "k", Namespace: "a"}, {Key: "k", Namespace: "b"}}})
	require.Error(t, err, "one key in two namespaces")
}

const apiKey = "e2b_test_key"

type gw struct {
	t   testing.TB
	url string
	f   *fakeFleet
}

func startGateway(t *testing.T) *gw { return startGatewayB(t) }

func startGatewayB(t testing.TB) *gw {
	f := newFakeFleet(t)
	f.addWarm("rt", 10)
	h, err := New(Config{Fleet: f, APIKeys: []string{"other", apiKey}, Domain: "gw.local"})
	require.NoError(t, err)
	// Each request's context is a value of itself, so that a fake fleet
	// handed a context detached from it sees when the server noticed
	// the client leave (clientLeft).
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestCtxKey{}, r.Context())))
	}))
	t.Cleanup(srv.Close)
	return &gw{t: t, url: srv.URL, f: f}
}

type requestCtxKey struct{}

// clientLeft waits until the server noticed that the client of the
// request ctx serves (any context derived from it, detached or not) went
// away: its request context ended.
func clientLeft(t testing.TB, ctx context.Context) {
	rctx, ok := ctx.Value(requestCtxKey{}).(context.Context)
	if !ok {
		t.Error("not a request's context")
		return
	}
	select {
	case <-rctx.Done():
	case <-time.After(10 * time.Second):
		t.Error("the server never noticed the client leave")
	}
}

func (g *gw) call(method, path string, body any, out any) (*http.Response, []byte) {
	g.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, g.url+path, rd)
	require.NoError(g.t, err)
	req.Header.Set("X-API-KEY", apiKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(g.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		require.NoError(g.t, json.Unmarshal(b, out), string(b))
	}
	if resp.StatusCode >= 400 {
		var e apiError
		require.NoError(g.t, json.Unmarshal(b, &e), "error bodies are JSON: %s", b)
		require.Equal(g.t, resp.StatusCode, e.Code)
	}
	return resp, b
}

func (g *gw) create(body map[string]any) sandboxJSON {
	g.t.Helper()
	var s sandboxJSON
	resp, b := g.call("POST", "/v2/sandboxes", body, &s)
	require.Equal(g.t, http.StatusCreated, resp.StatusCode, string(b))
	return s
}

// run executes cmd through the data plane and returns stdout and exit code.
func (g *gw) run(id, token, cmd string) (int, string, string) {
	g.t.Helper()
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-c", cmd}}})
	env := append([]byte{0, 0, 0, 0, 0}, msg...)
	binary.BigEndian.PutUint32(env[1:5], uint32(len(msg)))
	req, _ := http.NewRequest("POST", g.url+"/process.Process/Start", bytes.NewReader(env))
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("X-Access-Token", token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(g.t, err)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return resp.StatusCode, "", ""
	}
	var stdout string
	var exit string
	frames := 0
	for {
		frames++
		var hdr [5]byte
		if _, err := io.ReadFull(resp.Body, hdr[:]); err != nil {
			if err != io.EOF {
				return 200, stdout, fmt.Sprintf("read error after %d frames: %v", frames, err)
			}
			break
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		_, err := io.ReadFull(resp.Body, body)
		require.NoError(g.t, err)
		if hdr[0]&2 != 0 {
			if string(body) != "{}" {
				return 200, stdout, "end-stream " + string(body)
			}
			continue
		}
		var m struct {
			Event struct {
				Data *struct{ Stdout []byte }
				End  *struct{ ExitCode int }
			}
		}
		require.NoError(g.t, json.Unmarshal(body, &m))
		if m.Event.Data != nil {
			stdout += string(m.Event.Data.Stdout)
		}
		if m.Event.End != nil {
			exit = string(rune('0' + m.Event.End.ExitCode))
		}
	}
	if exit == "" {
		exit = "no end event; trailer " + resp.Header.Get("Content-Type") + " " + stdout
	}
	return 200, stdout, exit
}

func TestAuth(t *testing.T) {
	g := startGateway(t)
	resp, err := http.Get(g.url + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	for _, key := range []string{"", "wrong", apiKey + "x"} {
		req, _ := http.NewRequest("GET", g.url+"/v2/sandboxes", nil)
		req.Header.Set("X-API-KEY", key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var e apiError
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.Equal(t, 401, e.Code)
	}
}

func TestCreate_ClaimsAndTheDataPlaneWorks(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt", "metadata": map[string]string{"owner": "me"}, "envVars": map[string]string{"FOO": "bar"}})
	require.Equal(t, "sb0001", s.SandboxID)
	require.Equal(t, "rt", s.TemplateID)
	require.Equal(t, "node-a", s.ClientID)
	require.Equal(t, agentapi.Version, s.EnvdVersion)
	require.Equal(t, fakeToken(1), *s.EnvdAccessToken)
	require.Equal(t, "gw.local", *s.Domain)

	req := g.f.claims[0]
	require.Equal(t, int64(300), req.TTLSeconds, "no timeout → e2b's default 300 s")
	require.True(t, strings.HasPrefix(req.ClaimRef, "default/e2b-"), req.ClaimRef)
	require.Equal(t, "none", req.Net)
	require.Equal(t, "small", req.Size)
	require.Equal(t, map[string]string{"owner": "me"}, req.Metadata)

	status, out, exit := g.run(s.SandboxID, *s.EnvdAccessToken, "echo $FOO && exit 3")
	require.Equal(t, 200, status)
	require.Equal(t, "bar\n", out, "envVars reach the guest")
	require.Equal(t, "3", exit)
	status, out, _ = g.run("sb_0001", fakeToken(1), "echo raw-id")
	require.Equal(t, 200, status)
	require.Equal(t, "raw-id\n", out)
	status, _, _ = g.run(s.SandboxID, "wrong", "true")
	require.Equal(t, http.StatusUnauthorized, status)
	status, _, _ = g.run("sb-9999", fakeToken(9999), "true")
	require.Equal(t, http.StatusBadGateway, status)

	// Timeout goes through as the lease; bad bodies are 400 before any claim.
	g.create(map[string]any{"templateID": "rt", "timeout": 42})
	require.Equal(t, int64(42), g.f.claims[1].TTLSeconds)
	n := len(g.f.claims)
	for _, body := range []any{map[string]any{"templateID": "rt", "timeout": -1}, map[string]any{"templateID": " "}, "not an object"} {
		resp, _ := g.call("POST", "/v2/sandboxes", body, nil)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	}
	require.Len(t, g.f.claims, n, "rejected creates spend nothing")

	resp, _ := g.call("POST", "/v2/sandboxes", map[string]any{"templateID": "cold"}, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "no node serves the template")
}

func TestList_ShowsUnpublishedClaimsFiltersAndPages(t *testing.T) {
	g := startGateway(t)
	a := g.create(map[string]any{"templateID": "rt", "metadata": map[string]string{"team": "x"}})
	b := g.create(map[string]any{"templateID": "rt", "metadata": map[string]string{"team": "y"}})

	var list []listedJSON
	resp, _ := g.call("GET", "/v2/sandboxes", nil, &list)
	require.Equal(t, 200, resp.StatusCode)
	require.Len(t, list, 2, "claims show before their node publishes (the fleet lists its claim-time index)")
	require.Equal(t, b.SandboxID, list[0].SandboxID, "newest first")

	resp, _ = g.call("GET", "/v2/sandboxes?metadata="+url.QueryEscape(url.QueryEscape("team")+"="+url.QueryEscape("x")), nil, &list)
	require.Equal(t, 200, resp.StatusCode)
	require.Len(t, list, 1)
	require.Equal(t, a.SandboxID, list[0].SandboxID)
	require.Equal(t, map[string]string{"team": "x"}, list[0].Metadata)

	resp, _ = g.call("GET", "/v2/sandboxes?limit=1", nil, &list)
	require.Len(t, list, 1)
	next := resp.Header.Get("X-Next-Token")
	require.NotEmpty(t, next)
	resp, _ = g.call("GET", "/v2/sandboxes?limit=1&nextToken="+url.QueryEscape(next), nil, &list)
	require.Len(t, list, 1)
	require.Equal(t, a.SandboxID, list[0].SandboxID)
	require.Empty(t, resp.Header.Get("X-Next-Token"))

	resp, _ = g.call("POST", "/sandboxes/"+a.SandboxID+"/pause", map[string]any{}, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	g.call("GET", "/v2/sandboxes?state=paused", nil, &list)
	require.Len(t, list, 1)
	require.Equal(t, "paused", list[0].State)
	g.call("GET", "/sandboxes", nil, &list) // v1: running only
	require.Len(t, list, 1)
	require.Equal(t, b.SandboxID, list[0].SandboxID)

	// Killed elsewhere (e.g. kubectl delete) → gone from the list.
	require.NoError(t, g.f.Release(t.Context(), mustByID(t, g.f, "sb_0002")))
	g.call("GET", "/v2/sandboxes", nil, &list)
	require.Len(t, list, 1)

	resp, _ = g.call("GET", "/v2/sandboxes?limit=abc", nil, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

func TestLifecycleVerbs(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt", "metadata": map[string]string{"k": "v"}})
	id := s.SandboxID

	var d detailJSON
	resp, _ := g.call("GET", "/sandboxes/"+id, nil, &d)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "rt", d.TemplateID)
	require.Equal(t, "running", d.State)
	require.Equal(t, map[string]string{"k": "v"}, d.Metadata)
	loc := mustByID(t, g.f, "sb_0001")
	require.Equal(t, loc.ClaimedAt.UTC().Format(timeLayout), d.StartedAt)
	require.Equal(t, loc.Deadline.UTC().Format(timeLayout), d.EndAt)

	resp, _ = g.call("POST", "/sandboxes/"+id+"/timeout", map[string]any{"timeout": 1000}, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Equal(t, []int64{1000}, g.f.renews)
	require.True(t, mustByID(t, g.f, "sb_0001").Deadline.After(loc.Deadline), "the lease really moved")
	resp, _ = g.call("POST", "/sandboxes/"+id+"/timeout", map[string]any{}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)

	resp, _ = g.call("POST", "/sandboxes/"+id+"/pause", map[string]any{}, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	resp, _ = g.call("POST", "/sandboxes/"+id+"/pause", map[string]any{}, nil)
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	g.call("GET", "/sandboxes/"+id, nil, &d)
	require.Equal(t, "paused", d.State)
	status, _, _ := g.run(id, fakeToken(1), "true")
	require.Equal(t, http.StatusBadGateway, status, "a paused sandbox is not running")
	resp, _ = g.call("POST", "/sandboxes/"+id+"/fork", map[string]any{}, nil)
	require.Equal(t, http.StatusConflict, resp.StatusCode)

	var c sandboxJSON
	resp, _ = g.call("POST", "/v2/sandboxes/"+id+"/connect", map[string]any{"timeout": 30}, &c)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "resumed")
	require.Equal(t, id, c.SandboxID)
	resp, _ = g.call("POST", "/v2/sandboxes/"+id+"/connect", map[string]any{}, &c)
	require.Equal(t, http.StatusOK, resp.StatusCode, "already running")
	status, out, _ := g.run(id, fakeToken(1), "echo back")
	require.Equal(t, 200, status)
	require.Equal(t, "back\n", out)

	var forked []struct{ Sandbox sandboxJSON }
	resp, _ = g.call("POST", "/sandboxes/"+id+"/fork", map[string]any{"count": 2}, &forked)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, forked, 2)
	require.Equal(t, "rt", forked[0].Sandbox.TemplateID)
	resp, _ = g.call("GET", "/sandboxes/"+forked[1].Sandbox.SandboxID, nil, &d)
	require.Equal(t, 200, resp.StatusCode, "fork children are found at once")
	resp, _ = g.call("POST", "/sandboxes/"+id+"/fork", map[string]any{"count": 0}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)

	var snap snapshotJSON
	resp, _ = g.call("POST", "/sandboxes/"+id+"/snapshots", map[string]any{"name": "s1"}, &snap)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, []string{"s1"}, snap.Names)
	var snaps []snapshotJSON
	g.call("GET", "/snapshots?sandboxID="+id, nil, &snaps)
	require.Equal(t, []snapshotJSON{snap}, snaps)
	resp, _ = g.call("DELETE", "/templates/"+snap.SnapshotID, nil, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	resp, _ = g.call("DELETE", "/templates/"+snap.SnapshotID, nil, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)

	var metrics []metricJSON
	resp, _ = g.call("GET", "/sandboxes/"+id+"/metrics", nil, &metrics)
	require.Equal(t, 200, resp.StatusCode)
	require.Len(t, metrics, 1)
	require.Equal(t, int64(1<<20), metrics[0].MemUsed)
	require.Equal(t, int64(10<<30), metrics[0].DiskTotal, "the sandbox's disk (--disk-size)")
	require.Equal(t, int64(3<<20), metrics[0].DiskUsed)

	var tpls []templateJSON
	g.call("GET", "/templates", nil, &tpls)
	require.Len(t, tpls, 1, "the fleet's advertised pools, warm or drained")
	g.call("GET", "/v2/templates", nil, &tpls)
	require.Len(t, tpls, 1)
	require.Equal(t, "rt", tpls[0].TemplateID)

	resp, _ = g.call("DELETE", "/sandboxes/"+id, nil, nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	resp, _ = g.call("DELETE", "/sandboxes/"+id, nil, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp, _ = g.call("GET", "/sandboxes/"+id, nil, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	status, _, _ = g.run(id, fakeToken(1), "true")
	require.Equal(t, http.StatusBadGateway, status, "a killed sandbox is 502 at once")
	for _, p := range []string{"/timeout", "/pause", "/fork", "/snapshots"} {
		resp, _ = g.call("POST", "/sandboxes/"+id+p, map[string]any{"timeout": 1}, nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, p)
	}
}

func TestOtherNamespacesAreInvisible(t *testing.T) {
	g := startGateway(t)
	g.create(map[string]any{"templateID": "rt"})
	g.f.mu.Lock()
	g.f.sandboxes["sb_0001"].loc.ClaimRef = "team-b/x"
	g.f.mu.Unlock()
	resp, _ := g.call("GET", "/sandboxes/sb-0001", nil, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

func mustByID(t *testing.T, f *fakeFleet, id string) nodeapi.Sandbox {
	t.Helper()
	l, err := f.LiveByID(t.Context(), id)
	require.NoError(t, err)
	return l
}

// TestDataPlane_StreamsWhileTheRequestBodyIsOpen: frames flow before the
// client has finished its request body. Without full duplex on the proxy
// (and the agent) the server drains the body before the first frame, and a
// body still being read by the proxy is closed under it mid-stream.
func TestDataPlane_StreamsWhileTheRequestBodyIsOpen(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt"})
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/echo", "args": []string{"hi"}}})
	env := append([]byte{0, 0, 0, 0, 0}, msg...)
	binary.BigEndian.PutUint32(env[1:5], uint32(len(msg)))
	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", g.url+"/process.Process/Start", pr)
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("E2b-Sandbox-Id", s.SandboxID)
	req.Header.Set("X-Access-Token", *s.EnvdAccessToken)
	go func() { _, _ = pw.Write(env) }() // the body stays open
	type result struct {
		got []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		var got []byte
		for {
			var hdr [5]byte
			if _, err := io.ReadFull(resp.Body, hdr[:]); err != nil {
				done <- result{got, err}
				return
			}
			body := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
			if _, err := io.ReadFull(resp.Body, body); err != nil {
				done <- result{got, err}
				return
			}
			got = append(got, body...)
			if bytes.Contains(body, []byte(`"end"`)) {
				done <- result{got, nil}
				return
			}
		}
	}()
	var res result
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		pw.CloseWithError(errors.New("test gave up"))
		cancel()
		t.Fatal("no frames while the request body is open")
	}
	require.NoError(t, res.err)
	got := res.got
	require.Contains(t, string(got), `"stdout":"aGkK"`)
}
