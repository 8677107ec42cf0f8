package serve

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func start(t *testing.T, h http.Handler, o Options) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(h, o)
	go func() { _ = srv.Serve(Listen(ln, o)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// halfOpen sends a request's headers announcing a body that never comes.
func halfOpen(t *testing.T, addr, path string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n", path)
	return c
}

func readAll(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// The answer leaves at the read timeout, not once the server has waited
// a second read timeout for the rest of the body.
func TestDeadlines_BodyThatNeverArrivesIsAnsweredWithinTheReadTimeout(t *testing.T) {
	const read = time.Second
	addr := start(t, readAll(http.NotFoundHandler()), Options{Timeouts: Timeouts{Read: read}})
	c := halfOpen(t, addr, "/x")
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	t0 := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", resp.StatusCode)
	}
	if el := time.Since(t0); el > read*17/10 {
		t.Fatalf("answered after %v, read timeout %v", el, read)
	}
}

func TestDeadlines_StreamingRoutesOutliveTheTimeouts(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = w.Write(b)
	})
	o := Options{Timeouts: Timeouts{Read: 200 * time.Millisecond, Write: 200 * time.Millisecond},
		Streaming: func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/stream") }}
	addr := start(t, h, o)
	pr, pw := io.Pipe()
	go func() {
		for i := 0; i < 5; i++ {
			time.Sleep(100 * time.Millisecond)
			_, _ = pw.Write([]byte("x"))
		}
		pw.Close()
	}()
	resp, err := http.Post("http://"+addr+"/stream", "text/plain", pr)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "xxxxx" {
		t.Fatalf("stream cut: %d %q", resp.StatusCode, b)
	}
}

func TestDeadlines_ALongOperationAfterItsBodyIsNotCanceled(t *testing.T) {
	h := readAll(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(500 * time.Millisecond):
			_, _ = io.WriteString(w, "done")
		case <-r.Context().Done():
			http.Error(w, "canceled", http.StatusServiceUnavailable)
		}
	}))
	addr := start(t, h, Options{Timeouts: Timeouts{Read: 100 * time.Millisecond}})
	resp, err := http.Post("http://"+addr+"/op", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "done" {
		t.Fatalf("got %d %q", resp.StatusCode, b)
	}
	// The same keep-alive connection serves the next request.
	resp, err = http.Post("http://"+addr+"/op", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

func TestUnbound_AnAuthenticatedStreamOutlivesTheTimeouts(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Token") != "ok" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		Unbound(w)
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = w.Write(b)
	})
	addr := start(t, h, Options{Timeouts: Timeouts{Read: 200 * time.Millisecond, Write: 300 * time.Millisecond}})
	pr, pw := io.Pipe()
	go func() {
		for i := 0; i < 5; i++ {
			time.Sleep(100 * time.Millisecond)
			_, _ = pw.Write([]byte("x"))
		}
		pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/stream", pr)
	req.Header.Set("X-Token", "ok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "xxxxx" {
		t.Fatalf("stream cut: %d %q", resp.StatusCode, b)
	}

	// Unauthenticated, the same stalled body is bounded: the 401 leaves and
	// the connection does not stay open waiting for the body.
	c := halfOpen(t, addr, "/stream")
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unauthenticated: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the connection answered more")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the connection of an unauthenticated stalled body stayed open")
	}
}
