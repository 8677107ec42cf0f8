package e2b

import (
	"context"
	"crypto/subtle"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"time"

	"github.com/hearthvm/hearth/claim"
	"github.com/hearthvm/hearth/node"
)

// Data plane: envd requests (E2b-Sandbox-Id, E2b-Sandbox-Port) are
// reverse-proxied, streaming, to the sandbox's agent after the sandbox
// token (X-Access-Token) is checked. An unknown, killed or paused sandbox
// answers 502, which the SDK reads as "not running".

// EnvdPort is the agent's port in e2b addressing.
const EnvdPort = 49983

// routeTTL bounds how long an id → agent route is reused without asking
// the fleet; kills through this gateway drop the route at once.
const routeTTL = 2 * time.Second

type route struct {
	id, addr, token string
	exp             time.Time
}

type routeKey struct{}

func (g *gateway) dropRoute(rawID string) {
	g.mu.Lock()
	for k, rt := range g.routes {
		if rt.id == rawID {
			delete(g.routes, k)
		}
	}
	g.mu.Unlock()
}

// route resolves a client sandbox id to its agent.
func (g *gateway) route(ctx context.Context, given string) (route, error) {
	now := g.now()
	g.mu.Lock()
	rt, ok := g.routes[given]
	g.mu.Unlock()
	if ok && now.Before(rt.exp) {
		return rt, nil
	}
	s, err := g.lookup(ctx, given)
	if err != nil {
		return route{}, err
	}
	if s.Hibernated {
		// The view may lag a wake; ask the node.
		if paused, err := g.live(ctx, s); err != nil || paused {
			return route{}, errPaused
		}
	}
	if s.Addr == "" {
		return route{}, errors.New("the sandbox has no agent address")
	}
	rt = route{id: s.ID, addr: s.Addr, token: s.Token, exp: now.Add(routeTTL)}
	g.mu.Lock()
	g.routes[given] = rt
	if len(g.routes) > 100000 { // bound the cache; entries are cheap to rebuild
		for k, v := range g.routes {
			if now.After(v.exp) {
				delete(g.routes, k)
			}
		}
	}
	g.mu.Unlock()
	return rt, nil
}

var errPaused = errors.New("the sandbox is paused; connect to resume it")

func (g *gateway) serveData(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("E2b-Sandbox-Id")
	if p := r.Header.Get("E2b-Sandbox-Port"); p != "" && p != strconv.Itoa(EnvdPort) {
		writeError(w, http.StatusBadGateway, "sandbox %q: port %s is not served (only the agent port %d)", id, p, EnvdPort)
		return
	}
	rt, err := g.route(r.Context(), id)
	if err != nil {
		if errors.Is(err, claim.ErrNotFound) || node.StatusOf(err) == http.StatusNotFound {
			writeError(w, http.StatusBadGateway, "sandbox %q not found", id)
			return
		}
		writeError(w, http.StatusBadGateway, "sandbox %q: %v", id, err)
		return
	}
	if rt.token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Access-Token")), []byte(rt.token)) != 1 {
		writeError(w, http.StatusUnauthorized, "missing or invalid X-Access-Token for sandbox %q", id)
		return
	}
	// The agent answers a stream before the proxy has seen the end of the
	// request body; without full duplex the server would discard and close
	// that body under the proxy's feet as soon as the answer's headers go out,
	// and the proxy would drop the upstream connection mid-stream.
	_ = http.NewResponseController(w).EnableFullDuplex()
	g.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), routeKey{}, rt)))
	// Reach the end of the body before returning (see envd's drainBody): a
	// full-duplex body drained by net/http after the handler races with the
	// next request on the connection.
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
}

func (g *gateway) newProxy(tr http.RoundTripper) http.Handler {
	if tr == nil {
		tr = &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		}
	}
	return &httputil.ReverseProxy{
		Transport:     tr,
		FlushInterval: -1, // stream every write (Connect server streams)
		Rewrite: func(pr *httputil.ProxyRequest) {
			rt := pr.In.Context().Value(routeKey{}).(route)
			pr.SetURL(&url.URL{Scheme: "http", Host: rt.addr})
			pr.Out.Host = rt.addr
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			rt, _ := r.Context().Value(routeKey{}).(route)
			g.dropRoute(rt.id)
			if r.Context().Err() != nil {
				return // the client went away
			}
			writeError(w, http.StatusBadGateway, "sandbox %q is not reachable: %v", r.Header.Get("E2b-Sandbox-Id"), err)
		},
	}
}
