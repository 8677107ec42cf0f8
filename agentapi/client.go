package agentapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hearthvm/hearth/internal/httpjson"
)

// DefaultHTTPClient is shared by clients that are not given one: no proxy
// (an agent's address is the node's own way into the guest), a few idle
// connections per agent, and no redirect followed (NoRedirect). It sets
// no timeout: a call's context bounds it.
var DefaultHTTPClient = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2, IdleConnTimeout: 30 * time.Second}, CheckRedirect: NoRedirect}

// NoRedirect is the CheckRedirect of every client that speaks to an
// agent: a redirect is its answer, never followed. The agent is the
// guest's: a caller on the host that followed it would send a request
// (with the agent's token) wherever the guest pointed, from the host's
// network and past the sandbox's egress policy.
func NoRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// maxMessage bounds the part of an error answer kept in HTTPError.
const maxMessage = 4 << 10

// Client speaks to one agent: what the node and the VMM drivers send it.
// Its calls set no deadline of their own; the caller's context bounds
// each. The zero value is not usable; set Addr.
type Client struct {
	// Addr is the agent's host:port.
	Addr string
	// Token is the agent's current access token, sent in
	// AccessTokenHeader when non-empty.
	Token string
	// HTTP defaults to DefaultHTTPClient. Its CheckRedirect is ignored:
	// the client follows no redirect (NoRedirect).
	HTTP *http.Client
}

// HTTPError is a non-2xx answer from an agent.
type HTTPError struct {
	// Path is the route asked (InitPath, OpenPath, IdentityPath, HealthPath).
	Path   string
	Status int
	// Message is the answer's body, at most 4 KiB, trimmed.
	Message string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("agent %s answered %d: %s", e.Path, e.Status, e.Message)
}

// StatusOf returns the HTTP status an agent answered with, or 0 when err
// is not an agent's answer (a transport error, say).
func StatusOf(err error) int {
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Status
	}
	return 0
}

// Health asks GET /health: nil once the agent answers 2xx (it answers
// 204), an *HTTPError for another answer, the transport's error (as is,
// for the caller to tell a timeout from a refused connection) otherwise.
func (c *Client) Health(ctx context.Context) error {
	return c.do(ctx, HealthPath, "", httpjson.Call{Method: http.MethodGet})
}

// Init posts env to /init (InitRequest): the agent adds it to every
// process it starts from then on. An agent without /init answers 404
// (an *HTTPError; StatusOf tells).
func (c *Client) Init(ctx context.Context, env map[string]string) error {
	return c.do(ctx, InitPath, "", httpjson.Call{Method: http.MethodPost, In: InitRequest{EnvVars: env}})
}

// Open posts env to OpenPath: what Init does, and it opens an agent that
// holds requests until the node opens it (OpenPath). An agent without the
// route answers 404 (an *HTTPError).
func (c *Client) Open(ctx context.Context, env map[string]string) error {
	return c.do(ctx, OpenPath, "", httpjson.Call{Method: http.MethodPost, In: InitRequest{EnvVars: env}})
}

// SetIdentity re-keys the agent: it presents c.Token, the agent's current
// token, and installs token in its place (IdentityRequest). An agent
// without the route answers 404 or 405 (an *HTTPError).
func (c *Client) SetIdentity(ctx context.Context, token string) error {
	return c.do(ctx, IdentityPath, "", httpjson.Call{Method: http.MethodPost, In: IdentityRequest{Token: token}})
}

// httpClient is c.HTTP following no redirect (NoRedirect, whatever its
// own CheckRedirect), or DefaultHTTPClient when it is nil.
func (c *Client) httpClient() *http.Client {
	if c.HTTP == nil {
		return DefaultHTTPClient
	}
	hc := *c.HTTP
	hc.CheckRedirect = NoRedirect
	return &hc
}

// do sends call to route (with query, when it is not empty) and the
// agent's token: a non-2xx answer is an *HTTPError naming route, with at
// most maxMessage bytes of its body.
func (c *Client) do(ctx context.Context, route, query string, call httpjson.Call) error {
	call.URL = "http://" + c.Addr + route
	if query != "" {
		call.URL += "?" + query
	}
	call.Header, call.Value, call.ErrLimit = AccessTokenHeader, c.Token, maxMessage
	err := call.Do(ctx, c.httpClient())
	var he *httpjson.Error
	if errors.As(err, &he) {
		return &HTTPError{Path: route, Status: he.Status, Message: strings.TrimSpace(string(he.Body))}
	}
	return err
}

// Logs asks GET LogsPath for the entries q selects. An agent without the
// route answers 404 (an *HTTPError).
func (c *Client) Logs(ctx context.Context, q LogsQuery) (Logs, error) {
	var out Logs
	if err := c.do(ctx, LogsPath, q.Values().Encode(), httpjson.Call{Method: http.MethodGet, Out: &out}); err != nil {
		return Logs{}, err
	}
	return out, nil
}
