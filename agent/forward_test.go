package agent

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/agentapi"
)

// guestServer is a web server on the "guest's" loopback; it echoes what
// the agent forwarded, and upgrades /ws to an echo connection.
func guestServer(t *testing.T) (port string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws" {
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Upgrade", "echo")
			w.WriteHeader(http.StatusSwitchingProtocols)
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			_ = rw.Flush()
			line, _ := rw.ReadString('\n')
			_, _ = rw.WriteString("echo:" + line)
			_ = rw.Flush()
			return
		}
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.Method+" "+r.URL.RequestURI()+" host="+r.Host+
			" token="+r.Header.Get("X-Access-Token")+" fwd="+r.Header.Get(agentapi.ForwardPortHeader)+" body="+string(b))
	}))
	t.Cleanup(srv.Close)
	_, port, _ = net.SplitHostPort(srv.Listener.Addr().String())
	return port
}

func TestForward_ReachesAGuestPortWithTheToken(t *testing.T) {
	ta := startAgent(t, nil)
	port := guestServer(t)

	resp := ta.do("POST", "/api/x?q=1", "text/plain", strings.NewReader("hi"), map[string]string{agentapi.ForwardPortHeader: port})
	require.Equal(t, 200, resp.StatusCode)
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, "POST /api/x?q=1 host=localhost:"+port+" token= fwd= body=hi", string(b),
		"the guest server sees neither the token nor the forward header")

	// The agent's own /health is open; a forwarded one is not.
	for _, tok := range []string{"", "wrong"} {
		req, _ := http.NewRequest("GET", ta.url+"/health", nil)
		req.Header.Set(agentapi.ForwardPortHeader, port)
		req.Header.Set("X-Access-Token", tok)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}

	for _, bad := range []string{"0", "65536", "http", "-1"} {
		resp = ta.do("GET", "/", "", nil, map[string]string{agentapi.ForwardPortHeader: bad})
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	resp = ta.do("GET", "/", "", nil, map[string]string{agentapi.ForwardPortHeader: closed})
	require.Equal(t, http.StatusBadGateway, resp.StatusCode)
	require.Equal(t, closed, resp.Header.Get(agentapi.PortClosedHeader), "a refused port is marked closed")
}

func TestForward_UpgradedConnectionsFlowBothWays(t *testing.T) {
	ta := startAgent(t, nil)
	port := guestServer(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(ta.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n"+
		"X-Access-Token: "+testToken+"\r\n"+agentapi.ForwardPortHeader+": "+port+"\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	_, err = io.WriteString(conn, "ping\n")
	require.NoError(t, err)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "echo:ping\n", line)
}

// TestForward_TheForwardTokenOpensForwardsOnly: ForwardToken(token) opens
// a forward to a valid guest port and nothing else — not the agent's own
// routes, whatever the path, and not with a port the agent cannot forward to.
func TestForward_TheForwardTokenOpensForwardsOnly(t *testing.T) {
	ta := startAgent(t, nil)
	port := guestServer(t)
	fwdTok := agentapi.ForwardToken(testToken)
	require.Regexp(t, `^[0-9a-f]{64}$`, fwdTok)
	require.NotEqual(t, fwdTok, agentapi.ForwardToken("other"))

	only := map[string]string{"X-Access-Token": "", agentapi.ForwardTokenHeader: fwdTok}
	with := func(extra map[string]string) map[string]string {
		h := map[string]string{}
		for k, v := range only {
			h[k] = v
		}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}
	resp := ta.do("GET", "/app", "", nil, with(map[string]string{agentapi.ForwardPortHeader: port}))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, "GET /app host=localhost:"+port+" token= fwd= body=", string(b))

	for _, tc := range []struct{ method, path string }{
		{"GET", "/files?path=/etc/hostname"}, {"POST", "/process.Process/List"}, {"POST", "/process.Process/Start"},
		{"POST", agentapi.IdentityPath}, {"POST", "/init"}, {"POST", agentapi.RuntimePrefix + "/execute"},
	} {
		resp := ta.do(tc.method, tc.path, "application/json", strings.NewReader("{}"), only)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s %s with the forward token alone", tc.method, tc.path)
	}
	for _, bad := range []string{"0", "65536", "http", "", " "} {
		resp := ta.do("GET", "/files?path=/etc/hostname", "", nil, with(map[string]string{agentapi.ForwardPortHeader: bad}))
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "port %q", bad)
	}
	resp = ta.do("GET", "/app", "", nil, map[string]string{"X-Access-Token": "", agentapi.ForwardTokenHeader: agentapi.ForwardToken("other"), agentapi.ForwardPortHeader: port})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "another agent's forward token")
	resp = ta.do("GET", "/app", "", nil, map[string]string{"X-Access-Token": "", agentapi.ForwardTokenHeader: testToken, agentapi.ForwardPortHeader: port})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the token is not the forward token")
}

// TestForward_TheGuestSeesNoInternalHeader: a forwarded request reaches
// the guest's app without any X-Hearth-* header (any case) or X-Access-Token.
func TestForward_TheGuestSeesNoInternalHeader(t *testing.T) {
	ta := startAgent(t, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var seen []string
		for k := range r.Header {
			if agentapi.IsInternalHeader(k) || strings.EqualFold(k, "X-Access-Token") {
				seen = append(seen, k)
			}
		}
		w.Header().Set(agentapi.PortClosedHeader, "1") // a guest app cannot speak for the agent
		_, _ = io.WriteString(w, strings.Join(seen, ","))
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	resp := ta.do("GET", "/", "", nil, map[string]string{
		agentapi.ForwardPortHeader: port, agentapi.ForwardTokenHeader: agentapi.ForwardToken(testToken), agentapi.SandboxIDHeader: "sb1",
		"X-Hearth-Anything": "x", "x-hearth-lower": "y", "Connection": "keep-alive",
	})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, _ := io.ReadAll(resp.Body)
	require.Empty(t, string(b))
	require.Empty(t, resp.Header.Get(agentapi.PortClosedHeader))
}

// TestForward_TheForwardTokenRunsNoInterpreterCode: the code interpreter
// (port InterpreterPort, served by the agent itself) runs code, so the
// forward-only credential — what a traffic token, a public port or a
// router port forward reaches the agent with — opens only its context
// calls (what @e2b/code-interpreter sends with the traffic token alone),
// never POST /execute, which needs the sandbox token.
func TestForward_TheForwardTokenRunsNoInterpreterCode(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	ta := startAgent(t, nil)
	ip := strconv.Itoa(agentapi.InterpreterPort)
	only := map[string]string{"X-Access-Token": "", agentapi.ForwardTokenHeader: agentapi.ForwardToken(testToken), agentapi.ForwardPortHeader: ip}
	for _, p := range []string{"/execute", "/execute/", "//execute", "/./execute"} {
		resp := ta.do("POST", p, "application/json", strings.NewReader(`{"code":"print('pwned-' + 'x')"}`), only)
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "POST %s with the forward token alone: %s", p, b)
		require.NotContains(t, string(b), "pwned-x")
	}
	// The context calls stay open to it.
	resp := ta.do("POST", "/contexts", "application/json", strings.NewReader(`{"language":"python"}`), only)
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	resp = ta.do("GET", "/contexts", "", nil, only)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp = ta.do("GET", "/health", "", nil, only)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	// The sandbox token runs code.
	resp = ta.do("POST", "/execute", "application/json", strings.NewReader(`{"code":"print('ran-' + 'x')"}`), map[string]string{agentapi.ForwardPortHeader: ip})
	b, _ = io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Contains(t, string(b), "ran-x")
}
