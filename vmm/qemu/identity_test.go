package qemu

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hearthvm/hearth/agentapi"
)

// droppingAgent accepts connections and closes them at once (a restored
// guest whose network does not carry requests yet) until up, then serves
// status; it counts the connections.
func droppingAgent(t *testing.T, drops int32, status int) (string, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: &dropListener{Listener: ln, n: &n, drops: drops}, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != agentapi.IdentityPath || r.Header.Get(agentapi.AccessTokenHeader) != "old" {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		w.WriteHeader(status)
	})}}
	srv.Start()
	t.Cleanup(srv.Close)
	return ln.Addr().String(), &n
}

type dropListener struct {
	net.Listener
	n     *atomic.Int32
	drops int32
}

func (l *dropListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.n.Add(1) <= l.drops {
			c.Close()
			continue
		}
		return c, nil
	}
}

// setIdentity retries a transport error, 20 tries 50 ms apart, and takes
// an agent's answer other than 2xx as final.
func TestSetIdentity_RetriesTransportErrorsNotRefusals(t *testing.T) {
	d := &Driver{httpc: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}}
	ctx := context.Background()

	addr, n := droppingAgent(t, 3, http.StatusNoContent)
	if err := d.setIdentity(ctx, addr, "old", "new"); err != nil || n.Load() != 4 {
		t.Fatalf("after 3 dropped connections: %v, %d connections", err, n.Load())
	}

	addr, n = droppingAgent(t, 0, http.StatusUnauthorized)
	if err := d.setIdentity(ctx, addr, "old", "new"); agentapi.StatusOf(err) != http.StatusUnauthorized || n.Load() != 1 {
		t.Fatalf("a 401: %v after %d connections, want it final after 1", err, n.Load())
	}

	addr, n = droppingAgent(t, 1000, http.StatusNoContent)
	start := time.Now()
	err := d.setIdentity(ctx, addr, "old", "new")
	if err == nil || !strings.Contains(err.Error(), "agent identity") || n.Load() != 20 {
		t.Fatalf("an agent never reachable: %v after %d connections, want an error after 20", err, n.Load())
	}
	if el := time.Since(start); el < 19*50*time.Millisecond {
		t.Fatalf("20 tries took %v, want them 50 ms apart", el)
	}
}
