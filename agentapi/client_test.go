package agentapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/agent"
	"github.com/hearthvm/hearth/agentapi"
)

// run has the agent at addr run command (agent-sandbox's runtime API) and
// returns its stdout.
func run(t *testing.T, addr, token, command string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"command": command})
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+agentapi.RuntimePrefix+"/execute", strings.NewReader(string(body)))
	req.Header.Set(agentapi.AccessTokenHeader, token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out struct {
		Stdout string `json:"stdout"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out.Stdout
}

// TestClient_SpeaksTheAgentsWire: against the real agent, Health needs no
// token, Init's env reaches later processes, and SetIdentity replaces the
// token: the old one is refused from then on.
func TestClient_SpeaksTheAgentsWire(t *testing.T) {
	srv := httptest.NewServer(agent.NewHandler(agent.Options{Token: "token-0", Root: t.TempDir()}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()

	require.NoError(t, (&agentapi.Client{Addr: addr}).Health(ctx))

	err := (&agentapi.Client{Addr: addr, Token: "wrong"}).Init(ctx, map[string]string{"HEARTH_T": "x"})
	require.Equal(t, http.StatusUnauthorized, agentapi.StatusOf(err), "%v", err)

	c := &agentapi.Client{Addr: addr, Token: "token-0"}
	require.NoError(t, c.Init(ctx, map[string]string{"HEARTH_T": "a,b=c \"d\""}))
	require.Equal(t, "a,b=c \"d\"", run(t, addr, "token-0", `printf %s "$HEARTH_T"`))

	require.Equal(t, http.StatusBadRequest, agentapi.StatusOf(c.SetIdentity(ctx, "")), "an empty token")
	require.NoError(t, c.SetIdentity(ctx, "token-1"))
	err = c.Init(ctx, nil)
	require.Equal(t, http.StatusUnauthorized, agentapi.StatusOf(err), "the old token after the re-key: %v", err)
	var he *agentapi.HTTPError
	require.ErrorAs(t, err, &he)
	require.Equal(t, agentapi.InitPath, he.Path)
	require.NoError(t, (&agentapi.Client{Addr: addr, Token: "token-1"}).Init(ctx, nil))
}

// TestClient_AnAgentWithoutTheRouteAnswers404: an older agent's missing
// route is an answer the caller can tell (StatusOf), not a transport error.
func TestClient_AnAgentWithoutTheRouteAnswers404(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := &agentapi.Client{Addr: strings.TrimPrefix(srv.URL, "http://"), Token: "t"}
	ctx := context.Background()
	require.NoError(t, c.Health(ctx))
	require.Equal(t, http.StatusNotFound, agentapi.StatusOf(c.Init(ctx, map[string]string{"A": "b"})))
	require.Equal(t, http.StatusNotFound, agentapi.StatusOf(c.SetIdentity(ctx, "t2")))
}

// TestClient_TransportErrorsKeepTheirCause: a refused connection and a
// deadline come back as themselves (the node's health sweep tells a hung
// agent from a gone one by them), with no agent status.
func TestClient_TransportErrorsKeepTheirCause(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	silent := ln.Addr().String() // accepts (the backlog), never answers
	t.Cleanup(func() { ln.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = (&agentapi.Client{Addr: silent}).Health(ctx)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	require.Zero(t, agentapi.StatusOf(err))

	gone, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := gone.Addr().String()
	gone.Close()
	err = (&agentapi.Client{Addr: addr}).Health(context.Background())
	require.True(t, errors.Is(err, syscall.ECONNREFUSED), "%v", err)
	require.Zero(t, agentapi.StatusOf(err))
}
