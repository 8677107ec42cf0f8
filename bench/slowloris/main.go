// Command slowloris checks that a running node daemon (sandboxd, or a
// node of sandbox-dev) is not starved by slow clients: it opens -conns
// connections that each send a request's headers with a Content-Length and
// never the body, then times GET /healthz and, with -token and -template,
// a claim on a fresh connection, and finally counts how many stalled
// requests the node answered (or closed) within -wait.
//
//	go run ./bench/slowloris -addr 127.0.0.1:7070 -conns 20000 -token "$(cat token)" -template img
//
// It needs a descriptor per connection: raise `ulimit -n` above -conns
// (hack/slowloris.sh does).
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7070", "node API host:port")
	conns := flag.Int("conns", 20000, "half-open requests to hold")
	token := flag.String("token", "", "root bearer token (for the claim)")
	template := flag.String("template", "", "template to claim once the connections are open (empty: no claim)")
	wait := flag.Duration("wait", 45*time.Second, "how long the stalled requests may take to be answered (the node's --read-timeout plus slack)")
	flag.Parse()
	if err := run(*addr, *conns, *token, *template, *wait); err != nil {
		fmt.Fprintln(os.Stderr, "slowloris:", err)
		os.Exit(1)
	}
}

func run(addr string, n int, token, template string, wait time.Duration) error {
	held := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	t0 := time.Now()
	head := fmt.Sprintf("POST /v1/claim HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n", addr, token)
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			return fmt.Errorf("connection %d: %w (raise ulimit -n?)", i, err)
		}
		if _, err := io.WriteString(c, head); err != nil {
			c.Close()
			return fmt.Errorf("connection %d: %w", i, err)
		}
		held = append(held, c)
	}
	fmt.Printf("%d half-open requests open in %v\n", n, time.Since(t0).Round(time.Millisecond))

	hc := &http.Client{Timeout: 10 * time.Second}
	t1 := time.Now()
	resp, err := hc.Get("http://" + addr + "/healthz")
	if err != nil {
		return fmt.Errorf("/healthz: %w", err)
	}
	resp.Body.Close()
	fmt.Printf("/healthz: %d in %v\n", resp.StatusCode, time.Since(t1).Round(time.Microsecond))
	if template != "" {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/claim", bytes.NewReader([]byte(`{"template":"`+template+`","ttl_seconds":60}`)))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		t2 := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		fmt.Printf("claim: %d in %v: %s\n", resp.StatusCode, time.Since(t2).Round(time.Microsecond), bytes.TrimSpace(b))
	}

	var answered, closed atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(wait)
	for _, c := range held {
		wg.Add(1)
		go func(c net.Conn) {
			defer wg.Done()
			_ = c.SetReadDeadline(deadline)
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				resp.Body.Close()
				answered.Add(1)
			} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				closed.Add(1)
			}
		}(c)
	}
	wg.Wait()
	left := int64(n) - answered.Load() - closed.Load()
	fmt.Printf("stalled requests: %d answered, %d closed, %d still open after %v\n", answered.Load(), closed.Load(), left, wait)
	if left > 0 {
		return fmt.Errorf("%d stalled requests outlived %v", left, wait)
	}
	return nil
}
