package server_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/internal/serve"
)

// The aggregated API server and the e2b gateway draw from the process's
// one connection budget: connections to the API server that never send a
// request give way at the per-source cap (the oldest closed), so fresh
// /healthz and /health answer, and a keep-alive (HTTP/2) connection that
// carried a request keeps carrying them.
func TestRun_APIServerConnectionsDrawFromTheProcessBudget(t *testing.T) {
	const perSource = 64
	b := serve.Shared()
	prev := b.Limits()
	b.SetLimits(serve.Limits{MaxConns: prev.MaxConns, MaxConnsPerSource: perSource, FirstRequest: time.Minute})
	t.Cleanup(func() { b.SetLimits(prev) })

	cfg, url := newConfig(t)
	srv, err := cfg.Complete().New()
	if err != nil {
		t.Fatal(err)
	}
	run(t, srv)
	fleettest.Eventually(t, 60*time.Second, func() bool { code, _ := get(url + "/readyz"); return code == http.StatusOK }, "never ready")
	gateway := "http://" + srv.E2BAddr().String()

	kept := &http.Client{Timeout: 10 * time.Second, Transport: insecure.Transport.(*http.Transport).Clone()}
	kept.Transport.(*http.Transport).ForceAttemptHTTP2 = true
	reused := func() (bool, error) {
		var info httptrace.GotConnInfo
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { info = i }})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes", nil)
		resp, err := kept.Do(req)
		if err != nil {
			return false, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, errors.New(resp.Status)
		}
		return info.Reused, nil
	}
	if _, err := reused(); err != nil {
		t.Fatal(err)
	}

	host := strings.TrimPrefix(url, "https://")
	var half []net.Conn
	t.Cleanup(func() {
		for _, c := range half {
			c.Close()
		}
	})
	before := b.Stats().Evicted
	for i := 0; i < 3*perSource; i++ {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		half = append(half, c)
	}
	fleettest.Eventually(t, 10*time.Second, func() bool { return b.Stats().Evicted-before >= 2*perSource }, "the half-open connections never gave way")
	_ = half[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, half[0]); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the oldest half-open connection to the API server is still open")
		}
	}

	if code, body := get(url + "/healthz"); code != http.StatusOK {
		t.Fatalf("API server /healthz under %d half-open connections: %d %s", 3*perSource, code, body)
	}
	if code, body := get(gateway + "/health"); code != http.StatusNoContent {
		t.Fatalf("gateway /health under %d half-open connections: %d %s", 3*perSource, code, body)
	}
	if ok, err := reused(); err != nil || !ok {
		t.Fatalf("the keep-alive connection: reused %v, %v", ok, err)
	}
}
