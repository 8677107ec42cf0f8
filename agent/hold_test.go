package agent

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/agentapi"
)

// holdAnswer is one request's answer, read in full.
type holdAnswer struct {
	status int
	body   string
	err    error
}

// send makes one request with the sandbox token; it fails nothing, so it
// may run in a goroutine.
func (ta *testAgent) send(method, path, body string, hdr map[string]string) holdAnswer {
	req, err := http.NewRequest(method, ta.url+path, strings.NewReader(body))
	if err != nil {
		return holdAnswer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(agentapi.AccessTokenHeader, testToken)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return holdAnswer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return holdAnswer{status: resp.StatusCode, body: string(b), err: err}
}

// waitHeld polls until n requests wait at the agent's gate.
func (ta *testAgent) waitHeld(n int32) {
	ta.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for ta.a.gate.waiting.Load() != n {
		if time.Now().After(deadline) {
			ta.t.Fatalf("%d requests held, want %d", ta.a.gate.waiting.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHold_TenantRequestRunsOnlyOnceTheNodeOpensTheAgent: on a held
// agent a command waits at the gate and runs after the node's POST
// /hearth/open, with the env that call gave.
func TestHold_TenantRequestRunsOnlyOnceTheNodeOpensTheAgent(t *testing.T) {
	ta := startAgent(t, func(o *Options) { o.Hold = true })
	done := make(chan holdAnswer, 1)
	go func() {
		done <- ta.send("POST", agentapi.RuntimePrefix+"/execute", `{"command":"printf %s \"$OPENED\""}`, nil)
	}()
	ta.waitHeld(1)
	select {
	case a := <-done:
		t.Fatalf("a held request was answered before the agent was opened: %+v", a)
	default:
	}
	open := ta.send("POST", agentapi.OpenPath, `{"envVars":{"OPENED":"yes"}}`, nil)
	require.NoError(t, open.err)
	require.Equal(t, http.StatusNoContent, open.status, open.body)
	var a holdAnswer
	select {
	case a = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the held request was not let through once the agent was opened")
	}
	require.NoError(t, a.err)
	require.Equal(t, http.StatusOK, a.status, a.body)
	var out struct {
		Stdout string `json:"stdout"`
	}
	require.NoError(t, json.Unmarshal([]byte(a.body), &out))
	require.Equal(t, "yes", out.Stdout, "the command ran before the open's env was in")
	// Open, the agent serves at once; a second open only merges env.
	require.Equal(t, http.StatusNoContent, ta.send("POST", agentapi.OpenPath, `{}`, nil).status)
	require.Equal(t, http.StatusOK, ta.send("POST", "/filesystem.Filesystem/Stat", `{"path":"/"}`, nil).status)
}

// TestHold_NodePathsAreAnsweredAtOnceAndOnlyTheNodeOpens: a held agent
// answers /health and the node's internal paths without waiting; the
// public /init (a client with the token reaches it through the gateway)
// and a forward (to any path, /health and /hearth/open included) are the
// sandbox's requests: held, and none of them opens the agent.
func TestHold_NodePathsAreAnsweredAtOnceAndOnlyTheNodeOpens(t *testing.T) {
	ta := startAgent(t, func(o *Options) { o.Hold = true })
	ta.a.gate.timeout = 50 * time.Millisecond // a held request is a 503, not a hang
	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{"GET", agentapi.HealthPath, "", http.StatusNoContent},
		{"GET", agentapi.LogsPath, "", http.StatusOK},
	} {
		a := ta.send(c.method, c.path, c.body, nil)
		require.NoError(t, a.err)
		require.Equal(t, c.want, a.status, "%s %s on a held agent: %s", c.method, c.path, a.body)
	}
	fwd := map[string]string{agentapi.ForwardPortHeader: "8080"}
	for _, c := range []struct {
		method, path string
		hdr          map[string]string
	}{
		{"POST", agentapi.InitPath, nil},
		{"GET", agentapi.HealthPath, fwd},
		{"POST", agentapi.OpenPath, fwd},
		{"POST", "/filesystem.Filesystem/Stat", nil},
	} {
		a := ta.send(c.method, c.path, `{"envVars":{"X":"y"},"path":"/"}`, c.hdr)
		require.NoError(t, a.err)
		require.Equal(t, http.StatusServiceUnavailable, a.status, "%s %s (forward %v) on a held agent: %s", c.method, c.path, c.hdr != nil, a.body)
		require.Contains(t, a.body, "not open yet")
	}
	// The re-key is the node's too (a clone's first call).
	require.Equal(t, http.StatusNoContent, ta.send("POST", agentapi.IdentityPath, `{"token":"`+testToken+`"}`, nil).status)
}

// TestHold_AHeldRequestGivesUpWith503: past the bound a held request is
// answered 503 — a Connect error for envd's RPCs, a REST one otherwise.
func TestHold_AHeldRequestGivesUpWith503(t *testing.T) {
	ta := startAgent(t, func(o *Options) { o.Hold = true })
	ta.a.gate.timeout = 50 * time.Millisecond
	a := ta.send("POST", "/filesystem.Filesystem/Stat", `{"path":"/"}`, nil)
	require.Equal(t, http.StatusServiceUnavailable, a.status)
	require.Contains(t, a.body, `"code":"unavailable"`)
	a = ta.send("GET", "/files?path=/etc/hostname", "", nil)
	require.Equal(t, http.StatusServiceUnavailable, a.status)
	require.Contains(t, a.body, `"code":503`)
	require.Equal(t, int32(0), ta.a.gate.waiting.Load())
}

// TestHold_AnAgentThatDoesNotHoldServesAtOnce: without Options.Hold
// nothing waits, and /hearth/open is /init.
func TestHold_AnAgentThatDoesNotHoldServesAtOnce(t *testing.T) {
	ta := startAgent(t, nil)
	ta.a.gate.timeout = time.Hour // a wait would hang the test
	require.Equal(t, http.StatusOK, ta.send("POST", "/filesystem.Filesystem/Stat", `{"path":"/"}`, nil).status)
	require.Equal(t, http.StatusNoContent, ta.send("POST", agentapi.OpenPath, `{"envVars":{"OPENED":"yes"}}`, nil).status)
	a := ta.send("POST", agentapi.RuntimePrefix+"/execute", `{"command":"printf %s \"$OPENED\""}`, nil)
	require.Equal(t, http.StatusOK, a.status, a.body)
	require.Contains(t, a.body, `"stdout":"yes"`)
}

// TestHold_AnAgentRestartedAfterTheOpeningStartsOpenWithItsEnv: qemu's
// stage 2 restarts an agent that exited; with Options.OpenedFile the new
// agent of an opened sandbox serves at once, with the opening's env,
// instead of holding every request until an opening that never comes. An
// agent whose node never opened it (no file yet) stays held.
func TestHold_AnAgentRestartedAfterTheOpeningStartsOpenWithItsEnv(t *testing.T) {
	opened := t.TempDir() + "/opened"
	first := startAgent(t, func(o *Options) { o.Hold, o.OpenedFile = true, opened })
	again := startAgent(t, func(o *Options) { o.Hold, o.OpenedFile = true, opened })
	again.a.gate.timeout = 50 * time.Millisecond
	require.Equal(t, http.StatusServiceUnavailable, again.send("POST", "/filesystem.Filesystem/Stat", `{"path":"/"}`, nil).status,
		"an agent restarted before the node opened the sandbox serves")

	open := first.send("POST", agentapi.OpenPath, `{"envVars":{"OPENED":"yes"}}`, nil)
	require.Equal(t, http.StatusNoContent, open.status, open.body)
	fi, err := os.Stat(opened)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	restarted := startAgent(t, func(o *Options) { o.Hold, o.OpenedFile = true, opened })
	restarted.a.gate.timeout = 50 * time.Millisecond
	a := restarted.send("POST", agentapi.RuntimePrefix+"/execute", `{"command":"printf %s \"$OPENED\""}`, nil)
	require.NoError(t, a.err)
	require.Equal(t, http.StatusOK, a.status, "the restarted agent of an opened sandbox holds: %s", a.body)
	var out struct {
		Stdout string `json:"stdout"`
	}
	require.NoError(t, json.Unmarshal([]byte(a.body), &out))
	require.Equal(t, "yes", out.Stdout, "the restarted agent lost the opening's env")
}
