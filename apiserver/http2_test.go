package apiserver_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"testing"

	"github.com/hearthvm/hearth/fleet/fleettest"
)

// TestStandalone_ReusesHTTP2Connections: without a kube-apiserver every
// caller is anonymous; the server must still keep an HTTP/2 connection
// open across requests, or every request pays a TLS handshake.
func TestStandalone_ReusesHTTP2Connections(t *testing.T) {
	f := fleettest.Start(t, 1)
	s := startServer(t, f)
	var dials atomic.Int64
	tr := &http.Transport{
		ForceAttemptHTTP2: true,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	for i := 0; i < 5; i++ {
		var proto string
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
			if tc, ok := ci.Conn.(*tls.Conn); ok {
				proto = tc.ConnectionState().NegotiatedProtocol
			}
		}})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes", nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || proto != "h2" {
			t.Fatalf("list answered %d over %q, want 200 over h2", resp.StatusCode, proto)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("5 requests opened %d connections, want 1", n)
	}
}
