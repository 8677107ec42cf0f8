package e2b

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/internal/serve"
	"github.com/hearthvm/hearth/nodeapi"
)

// Data plane: envd requests (E2b-Sandbox-Id, E2b-Sandbox-Port) are
// reverse-proxied, streaming, to the sandbox's agent — requests for
// another port through the agent's forward to that guest port — after the sandbox
// token (X-Access-Token) is checked: first its form, before any lookup
// (ServeHTTP), then its value against the sandbox's, always, found by
// asking at most the one node the fleet's index or view names (route: a
// data-plane request costs no node call for an id neither names, whatever
// it carries); a signed file
// URL (agentapi.VerifyFileSignature) stands in for the token on /files. What
// the agent gets is decided here and set by the proxy's Rewrite on the
// outbound request only (upstream, rewrite). An
// unknown, killed or paused sandbox answers 502, which the SDK reads as
// "not running" — a paused sandbox created with autoResume is resumed by
// the request instead, once the request is admitted (a refused one resumes
// nothing). That holds whoever paused it: a route is cached for routeTTL,
// but every cached route is checked, in memory, against the live fleet
// view (Fleet.ViewByID, cachedRoute), so a pause made elsewhere — the
// Kubernetes API, another replica, the node's auto-pause — ends it as soon
// as the node's change stream has brought it to the view (milliseconds),
// and the request is answered as for any paused sandbox instead of going
// to the paused VM's agent and waiting for a resume. A request already
// proxied when the VM pauses waits, like any TCP peer of a frozen VM.

// EnvdPort is the agent's port in e2b addressing (agentapi.Port).
const EnvdPort = agentapi.Port

// routeTTL bounds how long an id → agent route is reused without asking
// the fleet; kills and pauses through this gateway drop the route at once,
// and a pause anywhere else as soon as the live view shows it (cachedRoute).
const routeTTL = 2 * time.Second

type route struct {
	id, addr, token string
	// public: ports other than envd's and the code interpreter's answer
	// anyone, as on e2b — only for a sandbox an e2b create made with
	// network.allowPublicTraffic not false (nodeapi.Lifecycle.PublicTraffic);
	// any other sandbox's ports answer only its tokens.
	public bool
	exp    time.Time
	// resume, set for a paused sandbox created with autoResume, is that
	// sandbox: the request resumes it once admitted (never cached).
	resume *nodeapi.Sandbox
}

// route resolves a client sandbox id to its agent, through lookupKnown
// only, whatever credential the request carries (its value can only be
// checked against the record the lookup finds): at most the one node the
// fleet's claim index or view names, never a fan-out, and no node call at
// all for an id neither names — so fake tokens, fake signatures and random
// ids cost the nodes nothing.
func (g *gateway) route(ctx context.Context, given string) (route, error) {
	now := g.now()
	if rt, ok := g.cachedRoute(given, now); ok {
		return rt, nil
	}
	s, err := g.lookupKnown(ctx, given)
	if err != nil {
		return route{}, err
	}
	var resume *nodeapi.Sandbox
	if s.Paused {
		// The view may lag a resume; ask the node.
		if paused, err := g.live(ctx, s); err != nil || paused {
			if err != nil || !s.AutoResume {
				return route{}, errPaused
			}
			// autoResume: the request itself resumes the sandbox, once
			// serveData has admitted it.
			resume = &s
		}
	}
	if s.AgentAddr == "" {
		return route{}, errors.New("the sandbox has no agent address")
	}
	rt := route{id: s.ID, addr: s.AgentAddr, token: s.Token, public: s.PublicTraffic && !s.PrivateTraffic, exp: now.Add(routeTTL), resume: resume}
	if resume != nil {
		return rt, nil
	}
	g.routes.Add(given, rt)
	return rt, nil
}

var errPaused = errors.New("the sandbox is paused; connect to resume it")

func (g *gateway) serveData(w http.ResponseWriter, r *http.Request, id, portValue string) {
	port, err := sandboxPort(portValue)
	if err != nil {
		writeError(w, http.StatusBadRequest, "sandbox %q: %v", id, err)
		return
	}
	// Never skipped: a sandbox whose record carries no token is refused,
	// not served open.
	tok, traffic := r.Header.Get("X-Access-Token"), r.Header.Get(TrafficTokenHeader)
	signed := tok == "" && port == EnvdPort && agentapi.HasFileSignature(r)
	anonymous := tok == "" && traffic == "" && !signed
	rt, err := g.route(r.Context(), id)
	if err != nil {
		if errors.Is(err, fleet.ErrNotFound) {
			writeJSON(w, http.StatusBadGateway, proxyError{apiError: apiError{Code: http.StatusBadGateway, Message: sandboxNotFoundMessage}, SandboxID: id})
			return
		}
		writeError(w, http.StatusBadGateway, "sandbox %q: %v", id, err)
		return
	}
	// Any other port than envd's is reached through the agent's forward
	// (agentapi.ForwardPortHeader), with the forward-only credential whatever
	// admitted the request: it opens that port and never the agent's API —
	// except that the sandbox token reaches the code interpreter's port
	// with the token (below), as only it runs code there.
	u := upstream{route: rt, cred: credForward}
	if port == EnvdPort {
		u.cred = credToken
	} else {
		u.port = port
	}
	switch {
	case tok == "" && traffic != "" && port != EnvdPort:
		// The traffic access token (TrafficToken) opens the sandbox's ports.
		if rt.token == "" || subtle.ConstantTimeCompare([]byte(traffic), []byte(TrafficToken(rt.token))) != 1 {
			writeError(w, http.StatusUnauthorized, "invalid %s for sandbox %q", TrafficTokenHeader, id)
			return
		}
	case signed:
		// A signed file URL (Sandbox.downloadUrl / uploadUrl) stands in
		// for the token; the agent checks it again, and gets no token.
		if err := agentapi.VerifyFileSignature(r, rt.token, g.now()); err != nil {
			// 401 with envd's own message for an expired one, as e2b answers.
			if errors.Is(err, agentapi.ErrSignatureExpired) {
				writeError(w, http.StatusUnauthorized, "%v", err)
				return
			}
			writeError(w, http.StatusUnauthorized, "sandbox %q: %v", id, err)
			return
		}
		u.cred = credNone
	case anonymous && publicPort(port) && rt.public && rt.token != "":
		// A public port (e2b's default, allowPublicTraffic): what the
		// sandbox's own code listens on answers anyone holding its URL.
	case rt.token == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(rt.token)) != 1:
		writeError(w, http.StatusUnauthorized, "missing or invalid X-Access-Token for sandbox %q", id)
		return
	default:
		// The sandbox token: the code interpreter's port, which runs code,
		// gets it (the forward-only credential opens only the
		// interpreter's context calls there).
		if port == agentapi.InterpreterPort {
			u.cred = credToken
		}
	}
	if rt.resume != nil {
		// Admitted: an autoResume sandbox wakes for it (only now, so that
		// a request about to be refused resumes nothing).
		if err := g.fleet.Resume(r.Context(), *rt.resume); err != nil {
			writeError(w, http.StatusBadGateway, "sandbox %q: resuming the paused sandbox: %v", id, err)
			return
		}
	}
	g.proxyTo(w, r, u)
}

// upstream is the gateway's decision for one admitted request: which
// agent, which guest port, with what credential. It travels in the
// request's context to the proxy's Rewrite, which alone puts identity and
// routing on the outbound request — after the proxy has removed the
// hop-by-hop headers, so a header a client names in Connection cannot
// take any of it away — and drops every internal header a client sent
// (agentapi.IsInternalHeader, X-Access-Token, the traffic token) and any API
// key (X-API-KEY) first.
type upstream struct {
	route
	// port is the guest port the agent forwards to; 0 is the agent's own API.
	port int
	// cred is what the agent is given.
	cred credential
	// prefix goes before the path (the router's runtime API).
	prefix string
	// dropAuthorization keeps the caller's Authorization (the router's
	// bearer token) from the agent.
	dropAuthorization bool
}

// credential is what the gateway gives the agent for a request.
type credential int

const (
	// credNone: nothing (a signed file URL, which the agent checks itself).
	credNone credential = iota
	// credToken: the sandbox token in X-Access-Token — the agent's API.
	credToken
	// credForward: agentapi.ForwardToken in agentapi.ForwardTokenHeader — the
	// forward to upstream.port and nothing else (on the code interpreter's
	// port, its context calls only: no code runs).
	credForward
)

type upstreamKey struct{}

// proxyTo sends r to u. The agent's paths for the node alone
// (agentapi.InternalPathPrefix) answer 404: no client reaches them.
func (g *gateway) proxyTo(w http.ResponseWriter, r *http.Request, u upstream) {
	if u.port == 0 && internalPath(u.prefix+r.URL.Path) {
		writeError(w, http.StatusNotFound, "no route for %s %q", r.Method, r.URL.Path)
		return
	}
	// The agent answers a stream before the proxy has seen the end of the
	// request body; without full duplex the server would discard and close
	// that body under the proxy's feet as soon as the answer's headers go out,
	// and the proxy would drop the upstream connection mid-stream.
	_ = http.NewResponseController(w).EnableFullDuplex()
	g.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), upstreamKey{}, u)))
	// Reach the end of the body before returning (see envd's drainBody): a
	// full-duplex body drained by net/http after the handler races with the
	// next request on the connection.
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
}

// internalPath reports whether p, cleaned as a server would, is one of the
// agent's internal paths.
func internalPath(p string) bool {
	c := path.Clean("/" + p)
	return c+"/" == agentapi.InternalPathPrefix || strings.HasPrefix(c, agentapi.InternalPathPrefix)
}

// rewrite is the proxy's Rewrite: u's agent, and on the outbound request
// only, u's identity and routing.
func rewrite(pr *httputil.ProxyRequest) {
	u := pr.In.Context().Value(upstreamKey{}).(upstream)
	pr.SetURL(&url.URL{Scheme: "http", Host: u.addr})
	pr.Out.Host = u.addr
	if u.prefix != "" {
		pr.Out.URL.Path = u.prefix + pr.Out.URL.Path
		if pr.Out.URL.RawPath != "" {
			pr.Out.URL.RawPath = u.prefix + pr.Out.URL.RawPath
		}
	}
	h := pr.Out.Header
	for k := range h {
		// X-API-KEY is the gateway's credential: no guest sees a key a
		// client sent along.
		if agentapi.IsInternalHeader(k) || strings.EqualFold(k, agentapi.AccessTokenHeader) || strings.EqualFold(k, TrafficTokenHeader) || strings.EqualFold(k, "X-API-KEY") {
			delete(h, k)
		}
	}
	if u.dropAuthorization {
		h.Del("Authorization")
	}
	// The agent learns the id it is addressed by (E2B_SANDBOX_ID).
	h.Set(agentapi.SandboxIDHeader, RenderID(u.id))
	switch u.cred {
	case credToken:
		h.Set(agentapi.AccessTokenHeader, u.token)
	case credForward:
		h.Set(agentapi.ForwardTokenHeader, agentapi.ForwardToken(u.token))
	}
	if u.port != 0 {
		h.Set(agentapi.ForwardPortHeader, strconv.Itoa(u.port))
	}
}

// publicPort reports whether port may be public: every port but the
// agent's own services (envd's and the code interpreter's), which always
// need the sandbox's token.
func publicPort(port int) bool {
	return port != EnvdPort && port != agentapi.InterpreterPort
}

// publicPortValue reports whether an E2b-Sandbox-Port value names a port
// that may be public (publicPort); whether it is, the sandbox's record
// decides (route.public).
func publicPortValue(v string) bool {
	p, err := sandboxPort(v)
	return err == nil && publicPort(p)
}

// sandboxPort parses E2b-Sandbox-Port: empty is envd's port.
func sandboxPort(v string) (int, error) {
	if v == "" {
		return EnvdPort, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("E2b-Sandbox-Port %.16q is not a port", v)
	}
	return n, nil
}

// newProxy returns the data plane's reverse proxy over tr; nil is the
// gateway's own transport, whose connections to agents draw from the
// process's connection budget (Config.Budget; serve.Budget.Dial): a
// long-lived stream to a public port, which anyone may open, holds one
// besides its client's, so without the budget many sources could take
// every descriptor through the gateway's dials. Past the budget's dial
// caps — half the budget in all, a quarter of that to one sandbox's agent
// — a request is answered 503 with Retry-After, and nothing is dialled.
func (g *gateway) newProxy(tr http.RoundTripper) http.Handler {
	if tr == nil {
		b := g.cfg.Budget
		if b == nil {
			b = serve.Shared()
		}
		t := &http.Transport{
			Proxy:               nil,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		}
		dial := b.Dial((&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
		t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if errors.Is(err, serve.ErrBudgetFull) {
				// Idle keep-alive connections to other agents hold places
				// too: give them back before refusing.
				t.CloseIdleConnections()
				c, err = dial(ctx, network, addr)
			}
			return c, err
		}
		tr = t
	}
	return &httputil.ReverseProxy{
		Transport:      tr,
		FlushInterval:  -1, // stream every write (Connect server streams)
		Rewrite:        rewrite,
		ModifyResponse: closedPort,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			u, _ := r.Context().Value(upstreamKey{}).(upstream)
			if r.Context().Err() != nil {
				g.dropRoute(u.id)
				return // the client went away
			}
			if errors.Is(err, serve.ErrBudgetFull) {
				w.Header().Set("Retry-After", "1")
				writeError(w, http.StatusServiceUnavailable, "sandbox %q: the gateway holds as many connections to sandboxes as it may; retry", RenderID(u.id))
				return
			}
			g.dropRoute(u.id)
			writeError(w, http.StatusBadGateway, "sandbox %q is not reachable: %v", RenderID(u.id), err)
		},
	}
}

// e2b's data-plane answers (its client proxy's), which code written for
// e2b matches: an unknown or killed sandbox, and a port of a running
// sandbox that nothing listens on.
const (
	sandboxNotFoundMessage = "The sandbox was not found"
	closedPortMessage      = "The sandbox is running but port is not open"
)

// proxyError is the body of those answers: the API's error body and the
// sandbox (and port) it is about.
type proxyError struct {
	apiError
	SandboxID string `json:"sandboxId"`
	Port      int    `json:"port,omitempty"`
}

// closedPort rewrites the agent's 502 for a closed guest port
// (agentapi.PortClosedHeader) into e2b's: {"message", "sandboxId", "port"}, or
// an HTML page for a browser.
func closedPort(resp *http.Response) error {
	port := resp.Header.Get(agentapi.PortClosedHeader)
	if resp.StatusCode != http.StatusBadGateway || port == "" {
		return nil
	}
	resp.Header.Del(agentapi.PortClosedHeader)
	u, _ := resp.Request.Context().Value(upstreamKey{}).(upstream)
	id := RenderID(u.id)
	var body []byte
	if strings.Contains(resp.Request.Header.Get("User-Agent"), "Mozilla/") {
		resp.Header.Set("Content-Type", "text/html; charset=utf-8")
		body = []byte("<!DOCTYPE html>\n<html><head><title>Closed Port Error</title></head><body><h1>Closed Port Error</h1><p>" +
			html.EscapeString(closedPortMessage) + ": sandbox " + html.EscapeString(id) + ", port " + html.EscapeString(port) + ".</p></body></html>\n")
	} else {
		n, _ := strconv.Atoi(port)
		resp.Header.Set("Content-Type", "application/json")
		body, _ = json.Marshal(proxyError{apiError: apiError{Code: http.StatusBadGateway, Message: closedPortMessage}, SandboxID: id, Port: n})
	}
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return nil
}
