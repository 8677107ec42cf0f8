package e2b

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/node"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
)

// TestErrStatus_QuotaRefusalsAre429: e2b maps errors as the Kubernetes
// surface does (fleet.HTTPStatus): a node's quota refusal is a 429, no
// warm microVM a 503.
func TestErrStatus_QuotaRefusalsAre429(t *testing.T) {
	quota := &nodeapi.HTTPError{Status: http.StatusTooManyRequests, Message: "forking 2 would make 9 children in this sandbox tree; this node's limit is 8 (--max-fork-children)"}
	for _, tc := range []struct {
		err  error
		want int
	}{
		{quota, 429},
		{fmt.Errorf("fork: %w", quota), 429},
		{&fleet.ErrNoWarmCapacity{Key: pool.Key{Template: "rt"}}, 503},
		{&nodeapi.HTTPError{Status: http.StatusNotFound}, 404},
		{&nodeapi.HTTPError{Status: http.StatusConflict}, 409},
		{fleet.ErrNotFound, 404},
	} {
		require.Equal(t, tc.want, fleet.HTTPStatus(tc.err), "%v", tc.err)
	}
}

// TestQuota_NodeRefusalsReachTheClientAs429: a node's quota refusal of a
// fork, a snapshot or a create from a snapshot is e2b's 429 with the
// node's words, not a 503 ("no capacity, retry").
func TestQuota_NodeRefusalsReachTheClientAs429(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt"})
	var snap snapshotJSON
	resp, _ := g.call("POST", "/sandboxes/"+s.SandboxID+"/snapshots", map[string]any{"name": "golden"}, &snap)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	g.f.mu.Lock()
	g.f.refuse = &nodeapi.HTTPError{Status: http.StatusTooManyRequests, Message: "this node's limit is 8 (--max-fork-children)"}
	g.f.mu.Unlock()
	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{"/sandboxes/" + s.SandboxID + "/fork", map[string]any{"count": 2}},
		{"/sandboxes/" + s.SandboxID + "/snapshots", map[string]any{}},
		{"/v2/sandboxes", map[string]any{"templateID": snap.SnapshotID}},
	} {
		resp, b := g.call("POST", c.path, c.body, nil)
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s: %s", c.path, b)
		require.Contains(t, string(b), "--max-fork-children")
	}
}

// TestFork_CountsTheNodeWouldRefuseAre400: e2b refuses a fork count the
// node refuses, naming the bound (nodeapi.MaxForkCount, the node's own),
// before any node call.
func TestFork_CountsTheNodeWouldRefuseAre400(t *testing.T) {
	require.Equal(t, nodeapi.MaxForkCount, node.MaxForkCount, "the node's bound is nodeapi's")
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt"})
	n := g.f.lookupCount()
	for _, count := range []int{0, -1, nodeapi.MaxForkCount + 1, 100} {
		resp, b := g.call("POST", "/sandboxes/"+s.SandboxID+"/fork", map[string]any{"count": count}, nil)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "count %d", count)
		require.Contains(t, string(b), fmt.Sprintf("[1, %d]", nodeapi.MaxForkCount))
	}
	require.Equal(t, n, g.f.lookupCount(), "refused before any node call")
	var forked []struct{ Sandbox sandboxJSON }
	resp, b := g.call("POST", "/sandboxes/"+s.SandboxID+"/fork", map[string]any{"count": nodeapi.MaxForkCount}, &forked)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Len(t, forked, nodeapi.MaxForkCount)
}

// TestCreate_AnUnknownTemplateIs404NamingTheKnownOnes: a templateID no
// node serves, no alias names and no snapshot goes by is a 404 listing
// what a create may ask for; a known template with no warm microVM stays
// a 503.
func TestCreate_AnUnknownTemplateIs404NamingTheKnownOnes(t *testing.T) {
	g := startGateway(t)
	resp, b := g.call("POST", "/v2/sandboxes", map[string]any{"templateID": "no-such-template"}, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, string(b))
	var e apiError
	require.NoError(t, json.Unmarshal(b, &e))
	for _, want := range []string{`"no-such-template"`, `"rt"`, `"base"`, `"code-interpreter-v1"`} {
		require.Contains(t, e.Message, want)
	}
	g.f.mu.Lock()
	for k := range g.f.warm {
		g.f.warm[k] = 0
	}
	g.f.mu.Unlock()
	resp, _ = g.call("POST", "/v2/sandboxes", map[string]any{"templateID": "rt"}, nil)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
}

// TestRoutes_AWrongMethodIs405WithAllow: a known path with another method
// is 405 naming the allowed ones (Allow and the JSON message); an unknown
// path stays 404.
func TestRoutes_AWrongMethodIs405WithAllow(t *testing.T) {
	g := startGateway(t)
	key := map[string]string{"X-API-KEY": apiKey}
	for _, tc := range []struct{ method, path, allow string }{
		{"PUT", "/v2/sandboxes", "GET, HEAD, POST"},
		{"PATCH", "/sandboxes/sb1", "DELETE, GET, HEAD"},
		{"GET", "/sandboxes/sb1/pause", "POST"},
		{"POST", "/templates", "GET, HEAD"},
		{"DELETE", "/health", "GET, HEAD"},
	} {
		req, _ := http.NewRequest(tc.method, g.url+tc.path, nil)
		req.Header.Set("X-API-KEY", apiKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "%s %s", tc.method, tc.path)
		require.Equal(t, tc.allow, resp.Header.Get("Allow"), "%s %s", tc.method, tc.path)
		status, b := g.raw(tc.method, tc.path, nil, key)
		requireJSONError(t, http.StatusMethodNotAllowed, status, b)
	}
	status, b := g.raw("GET", "/no/such/route", nil, key)
	requireJSONError(t, http.StatusNotFound, status, b)
	require.Zero(t, g.f.lookupCount())
}

// TestSizes_ReportedFromTheTable: the cpuCount and memoryMB e2b reports
// for a sandbox are its size class's shape in the one table every backend
// boots with (pool.Shapes; vmm/backends' TestSizes_EveryBackendBootsTheTable).
func TestSizes_ReportedFromTheTable(t *testing.T) {
	var g gateway
	for size, want := range pool.Shapes() {
		l := g.listedOf(nodeapi.Sandbox{ID: "sb_1", Size: size})
		require.Equal(t, want.VCPUs, l.CPUCount, size)
		require.Equal(t, want.MemoryMiB, l.MemoryMB, size)
	}
	small, _ := pool.ShapeOf("")
	l := g.listedOf(nodeapi.Sandbox{ID: "sb_1", Size: "huge"})
	require.Equal(t, []int{small.VCPUs, small.MemoryMiB}, []int{l.CPUCount, l.MemoryMB}, "an unknown class reports small's")
}
