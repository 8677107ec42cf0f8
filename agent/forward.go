package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	"github.com/hearthvm/hearth/agentapi"
)

// stripInternal drops every internal header and X-Access-Token from h:
// what a guest app is never given.
func stripInternal(h http.Header) {
	for k := range h {
		if agentapi.IsInternalHeader(k) || strings.EqualFold(k, agentapi.AccessTokenHeader) {
			delete(h, k)
		}
	}
}

// forwardPort parses agentapi.ForwardPortHeader; ok is false when absent.
func forwardPort(r *http.Request) (port int, ok bool, err error) {
	v := r.Header.Get(agentapi.ForwardPortHeader)
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
		port := pr.In.Header.Get(agentapi.ForwardPortHeader)
		host := net.JoinHostPort("127.0.0.1", port)
		pr.SetURL(&url.URL{Scheme: "http", Host: host})
		pr.Out.Host = net.JoinHostPort("localhost", port)
		stripInternal(pr.Out.Header)
	},
	// Nor does a guest app speak for the agent (agentapi.PortClosedHeader).
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
			w.Header().Set(agentapi.PortClosedHeader, strconv.Itoa(port))
			writeRESTError(w, http.StatusBadGateway, "port "+strconv.Itoa(port)+" of the sandbox is not open")
			return
		}
		writeRESTError(w, http.StatusBadGateway, "port "+strconv.Itoa(port)+" of the sandbox is not reachable: "+err.Error())
	},
}

type forwardPortKey struct{}

// forward serves a request carrying agentapi.ForwardPortHeader (already authorized).
func (a *agent) forward(w http.ResponseWriter, r *http.Request) {
	port, _, err := forwardPort(r)
	if err != nil {
		writeRESTError(w, http.StatusBadRequest, agentapi.ForwardPortHeader+" must be a port in [1, 65535]")
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
