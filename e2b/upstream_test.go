package e2b

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/internal/serve"
)

// streamApp is a sandbox's web app that answers every request with a
// stream: "open\n" at once, then nothing until the client goes away (an
// SSE or WebSocket page). It returns its port.
func streamApp(t *testing.T) string {
	t.Helper()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("open\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(func() { web.CloseClientConnections(); web.Close() })
	return strconv.Itoa(web.Listener.Addr().(*net.TCPAddr).Port)
}

// stream opens one anonymous stream to a public port of sandbox id and
// returns its status, its Retry-After, and a func that ends it.
func stream(t *testing.T, gwURL, port, id string) (int, string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", gwURL+"/events", nil)
	require.NoError(t, err)
	req.Host = port + "-" + id + ".gw.local"
	// A connection of its own: each stream holds one to the gateway.
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	require.NoError(t, err)
	end := func() { cancel(); resp.Body.Close() }
	if resp.StatusCode == http.StatusOK {
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "open\n", line)
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), end
}

// TestProxy_UpstreamConnectionsAreCappedPerSandboxAndInAll: every
// long-lived stream to a public port — anyone may open one — holds a
// connection from the gateway to the sandbox's agent. Those connections
// draw from the process's connection budget (serve.Budget), so streams
// cannot take the descriptors the process serves everything else with:
// at most half the budget is upstream connections, and one sandbox takes
// at most a quarter of that; past either cap a request is answered 503
// with Retry-After (nothing dialled), and an ended stream gives its place
// back.
func TestProxy_UpstreamConnectionsAreCappedPerSandboxAndInAll(t *testing.T) {
	prev := serve.Shared().Limits()
	// 64 connections: 32 upstream in all, 16 to one sandbox.
	serve.Shared().SetLimits(serve.Limits{MaxConns: 64})
	t.Cleanup(func() { serve.Shared().SetLimits(prev) })
	g := startGateway(t)
	app := streamApp(t)
	a := g.create(map[string]any{"templateID": "rt"})
	b := g.create(map[string]any{"templateID": "rt"})
	c := g.create(map[string]any{"templateID": "rt"})

	var ends []func()
	t.Cleanup(func() {
		for _, end := range ends {
			end()
		}
	})
	open := func(id string, n int) []func() {
		var out []func()
		for i := 0; i < n; i++ {
			status, _, end := stream(t, g.url, app, id)
			require.Equal(t, http.StatusOK, status, "stream %d to %s", i+1, id)
			out = append(out, end)
			ends = append(ends, end)
		}
		return out
	}
	refused := func(id, what string) {
		t.Helper()
		status, retry, end := stream(t, g.url, app, id)
		end()
		require.Equal(t, http.StatusServiceUnavailable, status, what)
		require.NotEmpty(t, retry, "%s: Retry-After", what)
	}

	fromA := open(a.SandboxID, 16)
	refused(a.SandboxID, "a 17th stream to one sandbox")
	open(b.SandboxID, 16)
	refused(c.SandboxID, "a stream to a third sandbox with 32 upstream connections open")

	for _, end := range fromA {
		end()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, _, end := stream(t, g.url, app, c.SandboxID)
		ends = append(ends, end)
		if status == http.StatusOK {
			break
		}
		require.True(t, time.Now().Before(deadline), "the ended streams never gave their upstream connections back: %d", status)
		time.Sleep(20 * time.Millisecond)
	}
}
