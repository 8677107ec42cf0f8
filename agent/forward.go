package agent

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"syscall"
)

// ForwardPortHeader asks the agent to forward the request to a port of the
// guest instead of serving it: the value is the port (1-65535) on the
// guest's loopback. It is how the e2b gateway reaches any port of a
// sandbox (E2b-Sandbox-Port) through the one address it knows, the
// agent's. A forwarded request needs the sandbox token like any other
// (GET /health included), or the forward-only credential
// (ForwardTokenHeader); no internal header and no token is passed on.
// HTTP, streaming and upgraded (WebSocket) connections are forwarded.
const ForwardPortHeader = "X-Hearth-Forward-Port"

// PortClosedHeader marks the agent's 502 for a forward to a guest port
// nothing listens on (the connection was refused), so that the gateway
// can answer as e2b does for a closed port; its value is the port.
const PortClosedHeader = "X-Hearth-Port-Closed"

// InternalHeaderPrefix starts every header Hearth's components set for
// each other (ForwardPortHeader, ForwardTokenHeader, SandboxIDHeader,
// PortClosedHeader): a proxy drops a client's before setting its own, and
// none reaches a guest app.
const InternalHeaderPrefix = "X-Hearth-"

// IsInternalHeader reports whether the header named name (any case) is in
// the internal namespace (InternalHeaderPrefix).
func IsInternalHeader(name string) bool {
	return len(name) >= len(InternalHeaderPrefix) && strings.EqualFold(name[:len(InternalHeaderPrefix)], InternalHeaderPrefix)
}

// stripInternal drops every internal header and X-Access-Token from h:
// what a guest app is never given.
func stripInternal(h http.Header) {
	for k := range h {
		if IsInternalHeader(k) || strings.EqualFold(k, "X-Access-Token") {
			delete(h, k)
		}
	}
}

// forwardPort parses ForwardPortHeader; ok is false when absent.
func forwardPort(r *http.Request) (port int, ok bool, err error) {
	v := r.Header.Get(ForwardPortHeader)
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 65535 {
		return 0, true, strconv.ErrRange
	}
	return n, true, nil
}

// forwarder reverse-proxies forwarded requests to the guest's loopback.
var forwarder = &httputil.ReverseProxy{
	FlushInterval: -1,
	Rewrite: func(pr *httputil.ProxyRequest) {
		port := pr.In.Header.Get(ForwardPortHeader)
		host := net.JoinHostPort("127.0.0.1", port)
		pr.SetURL(&url.URL{Scheme: "http", Host: host})
		pr.Out.Host = net.JoinHostPort("localhost", port)
		stripInternal(pr.Out.Header)
	},
	// Nor does a guest app speak for the agent (PortClosedHeader).
	ModifyResponse: func(resp *http.Response) error {
		stripInternal(resp.Header)
		return nil
	},
	ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
		if r.Context().Err() != nil {
			return
		}
		// r is the outgoing request, without the header: the port is in
		// its context (forward).
		port, _ := r.Context().Value(forwardPortKey{}).(int)
		if errors.Is(err, syscall.ECONNREFUSED) {
			w.Header().Set(PortClosedHeader, strconv.Itoa(port))
			writeRESTError(w, http.StatusBadGateway, "port "+strconv.Itoa(port)+" of the sandbox is not open")
			return
		}
		writeRESTError(w, http.StatusBadGateway, "port "+strconv.Itoa(port)+" of the sandbox is not reachable: "+err.Error())
	},
}

type forwardPortKey struct{}

// forward serves a request carrying ForwardPortHeader (already authorized).
func (a *agent) forward(w http.ResponseWriter, r *http.Request) {
	port, _, err := forwardPort(r)
	if err != nil {
		writeRESTError(w, http.StatusBadRequest, ForwardPortHeader+" must be a port in [1, 65535]")
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), forwardPortKey{}, port))
	// Streams both ways at once (see the gateway's data plane).
	_ = http.NewResponseController(w).EnableFullDuplex()
	forwarder.ServeHTTP(w, r)
	// Reach the end of the body before returning (as the gateway does): a
	// full-duplex body that net/http drains after the handler races with
	// its read of the next request ("invalid concurrent Body.Read call").
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
}

// ForwardTokenHeader carries the forward-only credential (ForwardToken):
// what the e2b gateway sends, instead of the sandbox token, for a request
// it admitted to a guest port only.
const ForwardTokenHeader = "X-Hearth-Forward-Token"

// ForwardToken is the forward-only credential of the agent whose access
// token is token: HMAC-SHA256(token, "hearth agent forward"), 64 hex digits.
func ForwardToken(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("hearth agent forward"))
	return hex.EncodeToString(m.Sum(nil))
}
