package e2b

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLogs_ServesTheAgentsLogInE2BsShape: GET /sandboxes/{id}/logs is the
// sandbox's log in e2b's shape (logs and logEntries), start and limit
// select from it, an unknown sandbox is a 404, a missing key a 401, a bad
// parameter a 400 — and the create's envVars are not in it.
func TestLogs_ServesTheAgentsLogInE2BsShape(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt", "envVars": map[string]string{"CREATE_SECRET": "create-secret-value"}})
	code, out, _ := g.run(s.SandboxID, *s.EnvdAccessToken, "echo hello; echo oops >&2; echo $CREATE_SECRET_NOT_SET")
	require.Equal(t, 200, code)
	require.Equal(t, "hello\n\n", out)

	var l sandboxLogsJSON
	resp, b := g.call("GET", "/sandboxes/"+s.SandboxID+"/logs", nil, &l)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.NotContains(t, string(b), "create-secret-value")
	require.Len(t, l.Logs, 5, string(b)) // start, hello, oops, the empty line, exit
	require.Len(t, l.LogEntries, 5)
	require.True(t, strings.HasPrefix(l.Logs[0].Line, "[start pid "), l.Logs[0].Line)
	require.Contains(t, l.Logs[0].Line, `/bin/bash -c "echo hello;`)
	// stdout and stderr are two pipes: their lines interleave in any order.
	lines := []string{l.Logs[1].Line, l.Logs[2].Line, l.Logs[3].Line}
	require.ElementsMatch(t, []string{"hello", "oops", ""}, lines)
	require.Contains(t, l.Logs[4].Line, "] exit status 0")
	e := l.LogEntries[1]
	require.Equal(t, "info", e.Level)
	require.Contains(t, []string{"stdout", "stderr"}, e.Fields["event"])
	require.NotEmpty(t, e.Fields["pid"])
	ts, err := time.Parse(time.RFC3339Nano, e.Timestamp)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), ts, time.Minute)

	// limit keeps the first entries; start those at or after it.
	var limited sandboxLogsJSON
	g.call("GET", "/sandboxes/"+s.SandboxID+"/logs?limit=2", nil, &limited)
	require.Equal(t, l.Logs[:2], limited.Logs)
	var none sandboxLogsJSON
	_, b = g.call("GET", "/sandboxes/"+s.SandboxID+"/logs?limit=0", nil, &none)
	require.Equal(t, `{"logs":[],"logEntries":[]}`+"\n", string(b))
	last, err := time.Parse(time.RFC3339Nano, l.LogEntries[4].Timestamp)
	require.NoError(t, err)
	var since sandboxLogsJSON
	g.call("GET", "/sandboxes/"+s.SandboxID+"/logs?start="+strconv.FormatInt(last.UnixMilli(), 10), nil, &since)
	require.NotEmpty(t, since.Logs)
	require.Equal(t, l.Logs[4], since.Logs[len(since.Logs)-1])
	var future sandboxLogsJSON
	g.call("GET", "/sandboxes/"+s.SandboxID+"/logs?start="+strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10), nil, &future)
	require.Empty(t, future.Logs)

	for _, q := range []string{"?limit=-1", "?start=yesterday", "?limit=1.5"} {
		resp, b := g.call("GET", "/sandboxes/"+s.SandboxID+"/logs"+q, nil, nil)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", q, b)
	}
	resp, _ = g.call("GET", "/sandboxes/sbnope/logs", nil, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	status, _ := g.raw("GET", "/sandboxes/"+s.SandboxID+"/logs", nil, nil)
	require.Equal(t, http.StatusUnauthorized, status)
	status, _ = g.raw("GET", "/sandboxes/"+s.SandboxID+"/logs", nil, map[string]string{"X-API-KEY": "wrong"})
	require.Equal(t, http.StatusUnauthorized, status)
}

// TestLogsV2_CursorDirectionLevelSearchAndLimit: e2b's v2 logs read
// forward from a cursor or backward (newest first), keep the levels at or
// above level and the messages holding search.
func TestLogsV2_CursorDirectionLevelSearchAndLimit(t *testing.T) {
	g := startGateway(t)
	s := g.create(map[string]any{"templateID": "rt"})
	code, _, _ := g.run(s.SandboxID, *s.EnvdAccessToken, "echo alpha; echo beta; echo gamma")
	require.Equal(t, 200, code)
	messages := func(q string) []string {
		t.Helper()
		var out sandboxLogsV2JSON
		resp, b := g.call("GET", "/v2/sandboxes/"+s.SandboxID+"/logs"+q, nil, &out)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		var m []string
		for _, e := range out.Logs {
			m = append(m, e.Message)
		}
		return m
	}
	all := messages("")
	require.Len(t, all, 5) // start, alpha, beta, gamma, exit
	require.Equal(t, []string{"alpha", "beta", "gamma"}, all[1:4])
	require.Equal(t, []string{"exit status 0", "gamma"}, messages("?direction=backward&limit=2"))
	require.Equal(t, []string{"gamma"}, messages("?search=gam&direction=backward&limit=1"))
	require.Equal(t, []string{"/bin/bash -c \"echo alpha; echo beta; echo gamma\"", "beta"}, messages("?search=beta"))
	require.Empty(t, messages("?level=warn"))
	require.Len(t, messages("?level=info"), 5)
	future := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	require.Empty(t, messages("?cursor="+future))
	require.Len(t, messages("?direction=backward&cursor="+future), 5)
	require.Empty(t, messages("?direction=backward&cursor=0"))
	for _, q := range []string{"?direction=up", "?level=trace", "?cursor=-5", "?limit=x"} {
		resp, b := g.call("GET", "/v2/sandboxes/"+s.SandboxID+"/logs"+q, nil, nil)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", q, b)
	}
	resp, _ := g.call("GET", "/v2/sandboxes/sbnope/logs", nil, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}
