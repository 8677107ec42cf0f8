package kubectlsandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	"k8s.io/client-go/rest"

	"github.com/hearthvm/hearth/e2b"
)

// routerURL parses the router's base URL. The kubeconfig's bearer token
// goes with every request, so plain http is refused unless the host is a
// loopback address or localhost (sandbox-dev's gateway).
func routerURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, fmt.Errorf("no router: give --router-url or set $%s (sandbox-dev prints its e2b URL, which is the router)", RouterEnv)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("--router-url %q: %v", raw, err)
	}
	if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("--router-url %q: want scheme://host[:port]", raw)
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !loopback(u.Hostname()) {
			return nil, fmt.Errorf("--router-url %q: plain http would send your token in the clear; http is only for a loopback router (use https)", raw)
		}
	default:
		return nil, fmt.Errorf("--router-url %q: scheme must be https (or http to a loopback router)", raw)
	}
	u.Path = ""
	return u, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// router speaks agent-sandbox's router protocol to one sandbox.
type router struct {
	base      *url.URL
	client    *http.Client // carries the kubeconfig's credential
	namespace string
	name      string
}

// newRouter returns a router client for namespace/name whose requests
// carry the credential of cfg (a bearer token, a token file, an exec
// plugin's token) over the system's TLS roots: cfg's CA and client
// certificate are the API server's, not the router's. cfg's Timeout
// (--request-timeout) bounds each exec and cp request.
func newRouter(base *url.URL, cfg *rest.Config, namespace, name string) (*router, error) {
	rt, err := rest.HTTPWrappersForConfig(cfg, http.DefaultTransport.(*http.Transport).Clone())
	if err != nil {
		return nil, err
	}
	// A redirect is never followed: the credential is added to every
	// request the client sends, so it would go wherever the answer (the
	// agent's, in the guest) points.
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &router{base: base, client: &http.Client{Transport: rt, Timeout: cfg.Timeout, CheckRedirect: noRedirect},
		namespace: namespace, name: name}, nil
}

// address sets the router headers for port on h.
func (r *router) address(h http.Header, port int) {
	h.Set(e2b.HeaderSandboxID, r.name)
	h.Set(e2b.HeaderSandboxNamespace, r.namespace)
	h.Set(e2b.HeaderSandboxPort, strconv.Itoa(port))
}

// do sends a runtime API request (port e2b.RuntimePort) and returns the
// answer when it is 2xx, else an error carrying the router's message.
func (r *router) do(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Response, error) {
	return r.send(ctx, method, path, body, contentType, false)
}

// doExpect is do for a large body: it asks to continue first (Expect:
// 100-continue), so a refusal (401, 403, 404, 409) comes back before the
// body is sent — the gateway does not read a refused request's body, and
// a connection reset mid-upload would hide its answer.
func (r *router) doExpect(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Response, error) {
	return r.send(ctx, method, path, body, contentType, true)
}

func (r *router) send(ctx context.Context, method, path string, body io.Reader, contentType string, expect bool) (*http.Response, error) {
	u := *r.base
	u.RawPath = path
	u.Path, _ = url.PathUnescape(path)
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	r.address(req.Header, e2b.RuntimePort)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if expect {
		req.Header.Set("Expect", "100-continue")
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, statusError(resp)
	}
	return resp, nil
}

// StatusError is a router answer other than 2xx.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("router: %d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

// statusError reads at most 4 KiB of an error answer: the gateway's
// {"message"} or {"error"}, else the text, its control characters
// replaced.
func statusError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	var m struct{ Message, Error string }
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &m) == nil {
		msg = m.Message + m.Error
	}
	// The message may be the agent's, from the guest: no control
	// character of it reaches the user's terminal.
	msg = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, msg)
	return &StatusError{Code: resp.StatusCode, Message: msg}
}

// Result is what POST /execute answers.
type Result struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
}

// maxExecuteAnswer bounds the answer read: the agent caps each stream at
// 7 MiB (agent-sandbox's client refuses more than 16 MiB).
const maxExecuteAnswer = 16 << 20

// execute runs command under sh -c in the sandbox.
func (r *router) execute(ctx context.Context, command string) (Result, error) {
	body, _ := json.Marshal(map[string]string{"command": command})
	resp, err := r.do(ctx, http.MethodPost, "/execute", bytes.NewReader(body), "application/json")
	if err != nil {
		return Result{}, err
	}
	defer resp.Body.Close()
	var res Result
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxExecuteAnswer)).Decode(&res); err != nil {
		return Result{}, fmt.Errorf("router: reading the result: %v", err)
	}
	return res, nil
}

// upload writes src to path in the sandbox, streamed.
func (r *router) upload(ctx context.Context, path string, src io.Reader) error {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		part, err := mw.CreateFormFile("file", path)
		if err == nil {
			_, err = io.Copy(part, src)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	resp, err := r.doExpect(ctx, http.MethodPost, "/upload", pr, mw.FormDataContentType())
	pr.CloseWithError(io.ErrClosedPipe) // stops the writer if the request ended early
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// download copies path in the sandbox to dst.
func (r *router) download(ctx context.Context, path string, dst io.Writer) error {
	resp, err := r.do(ctx, http.MethodGet, "/download/"+url.PathEscape(path), nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(dst, resp.Body); err != nil {
		return fmt.Errorf("router: reading %s: %v", path, err)
	}
	return nil
}

// forwarder is an HTTP handler sending every request it serves through
// the router to port of the sandbox: streams and WebSocket upgrades pass
// (httputil.ReverseProxy), raw TCP does not. The caller's own
// Authorization is replaced by the kubeconfig's credential.
func (r *router) forwarder(port int) http.Handler {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(r.base)
			pr.Out.Host = r.base.Host
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("X-Access-Token")
			r.address(pr.Out.Header, port)
		},
		Transport:     r.client.Transport,
		FlushInterval: -1,
	}
}
