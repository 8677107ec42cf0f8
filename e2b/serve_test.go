package e2b

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/hearthvm/hearth/internal/serve"
)

// A control-plane request whose body never arrives is answered within the
// read timeout; a data-plane (envd) request, once the gateway lifts its
// deadlines (serve.Unbound, as ServeHTTP does after the token check),
// streams past it.
func TestServeListener_StalledControlPlaneAnsweredDataPlaneStreams(t *testing.T) {
	saved := ServeOptions
	ServeOptions.Timeouts = serve.Timeouts{Read: 300 * time.Millisecond, Write: 2 * time.Second}
	t.Cleanup(func() { ServeOptions = saved })

	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("E2b-Sandbox-Id") != "" {
			serve.Unbound(w)
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = w.Write(b)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeListener(ctx, ln, h) }()
	t.Cleanup(func() { cancel(); <-done })
	addr := ln.Addr().String()

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /sandboxes HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("stalled control-plane request: %v %v", resp, err)
	}

	pr, pw := io.Pipe()
	go func() {
		for range 4 { // 600ms: past the read timeout
			time.Sleep(150 * time.Millisecond)
			_, _ = pw.Write([]byte("x"))
		}
		pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/process.Process/Start", pr)
	req.Header.Set("E2b-Sandbox-Id", "sb-x")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "xxxx" {
		t.Fatalf("data-plane stream cut: %d %q", resp.StatusCode, b)
	}
}
