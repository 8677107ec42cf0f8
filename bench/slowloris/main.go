// Command slowloris checks that a running node daemon (sandboxd, or a
// node of sandbox-dev) is not starved by slow clients: it opens -conns
// connections that each send a request's headers with a Content-Length and
// never the body, then times GET /healthz -probes times on fresh
// connections (and GET of each -probe URL: the gateway's /health, another
// node's /healthz), with -token and -template a claim, and finally counts
// how many stalled requests the node answered (or closed) within -wait.
// With -path /sandboxes and -header "X-API-KEY: ..." the stalled requests
// are the e2b gateway's.
//
//	go run ./bench/slowloris -addr 127.0.0.1:7070 -conns 20000 -token "$(cat token)" -template img
//
// It needs a descriptor per connection: raise `ulimit -n` above -conns
// (hack/slowloris.sh does). When the limit is lower (a container's hard
// limit), it holds the connections in as many child processes of itself
// as it takes.
package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// holdEnv, set, makes the process a holder: it holds that many
// connections to -addr, says "ready" on stdout, and once its stdin closes
// counts their answers and prints them.
const holdEnv = "SLOWLORIS_HOLD"

func main() {
	addr := flag.String("addr", "127.0.0.1:7070", "node API host:port")
	conns := flag.Int("conns", 20000, "half-open requests to hold")
	token := flag.String("token", "", "root bearer token (for the claim)")
	template := flag.String("template", "", "template to claim once the connections are open (empty: no claim)")
	wait := flag.Duration("wait", 45*time.Second, "how long the stalled requests may take to be answered (the node's --read-timeout plus slack)")
	probes := flag.Int("probes", 5, "GET /healthz this many times, each on a fresh connection")
	probeTimeout := flag.Duration("probe-timeout", 60*time.Second, "how long one probe may take before it counts as failed")
	extra := flag.String("probe", "", "comma-separated URLs to GET once each as well (https is not verified)")
	path := flag.String("path", "/v1/claim", "path of the stalled requests (a POST); the e2b gateway's is /sandboxes")
	header := flag.String("header", "", "one more header of the stalled requests, e.g. \"X-API-KEY: e2b_...\" for the e2b gateway")
	flag.Parse()
	more := ""
	if *header != "" {
		more = *header + "\r\n"
	}
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n%sContent-Type: application/json\r\nContent-Length: 64\r\n\r\n", *path, *addr, *token, more)
	var err error
	if s := os.Getenv(holdEnv); s != "" {
		n, _ := strconv.Atoi(s)
		err = holder(*addr, head, n, *wait)
	} else {
		err = run(*addr, head, *conns, *token, *template, *wait, *probes, *probeTimeout, *extra)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "slowloris:", err)
		os.Exit(1)
	}
}

// room is how many connections this process can hold.
func room() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY {
		return 1 << 20
	}
	return max(int(rl.Cur)-128, 1)
}

func run(addr, head string, n int, token, template string, wait time.Duration, probes int, probeTimeout time.Duration, extra string) error {
	t0 := time.Now()
	var held []net.Conn
	var children []*child
	defer func() {
		for _, c := range held {
			c.Close()
		}
		for _, ch := range children {
			ch.kill()
		}
	}()
	if per := room(); n <= per {
		var err error
		if held, err = hold(addr, head, n); err != nil {
			return err
		}
	} else {
		for left := n; left > 0; left -= per {
			ch, err := spawn(min(per, left))
			if err != nil {
				return err
			}
			children = append(children, ch)
		}
		for _, ch := range children {
			if err := ch.ready(); err != nil {
				return err
			}
		}
		fmt.Printf("holding in %d processes (descriptor limit %d)\n", len(children), room()+128)
	}
	fmt.Printf("%d half-open requests open in %v\n", n, time.Since(t0).Round(time.Millisecond))

	hc := &http.Client{Timeout: probeTimeout, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	var took []time.Duration
	failed := 0
	for i := 0; i < probes; i++ {
		el, code, err := get(hc, "http://"+addr+"/healthz")
		if err != nil || code != http.StatusOK {
			failed++
			fmt.Printf("/healthz: %d %v after %v\n", code, err, el.Round(time.Millisecond))
			continue
		}
		took = append(took, el)
	}
	if len(took) > 0 {
		slices.Sort(took)
		fmt.Printf("/healthz: %d of %d answered 200; min %v, median %v, max %v\n", len(took), probes, took[0].Round(time.Microsecond),
			took[len(took)/2].Round(time.Microsecond), took[len(took)-1].Round(time.Microsecond))
	}
	for _, u := range strings.Split(extra, ",") {
		if u = strings.TrimSpace(u); u != "" {
			el, code, err := get(hc, u)
			if err != nil {
				fmt.Printf("%s: %v after %v\n", u, err, el.Round(time.Microsecond))
				continue
			}
			fmt.Printf("%s: %d in %v\n", u, code, el.Round(time.Microsecond))
		}
	}
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

	var answered, closed, left int64
	if held != nil {
		answered, closed, left = settle(held, wait)
	}
	for _, ch := range children {
		a, c, l, err := ch.settle()
		if err != nil {
			return err
		}
		answered, closed, left = answered+a, closed+c, left+l
	}
	fmt.Printf("stalled requests: %d answered, %d closed, %d still open after %v\n", answered, closed, left, wait)
	if failed > 0 {
		return fmt.Errorf("%d of %d /healthz probes failed", failed, probes)
	}
	if left > 0 {
		return fmt.Errorf("%d stalled requests outlived %v", left, wait)
	}
	return nil
}

func get(hc *http.Client, u string) (time.Duration, int, error) {
	t0 := time.Now()
	resp, err := hc.Get(u)
	if err != nil {
		return time.Since(t0), 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Since(t0), resp.StatusCode, nil
}

// hold opens n connections that each send head and never the body.
func hold(addr, head string, n int) ([]net.Conn, error) {
	held := make([]net.Conn, 0, n)
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err == nil {
			_, err = io.WriteString(c, head)
			if err != nil {
				c.Close()
			}
		}
		if err != nil {
			for _, c := range held {
				c.Close()
			}
			return nil, fmt.Errorf("connection %d: %w (raise ulimit -n?)", i, err)
		}
		held = append(held, c)
	}
	return held, nil
}

// settle waits up to wait for each held request's answer (or close).
func settle(held []net.Conn, wait time.Duration) (answered, closed, left int64) {
	var a, c atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(wait)
	for _, conn := range held {
		wg.Add(1)
		go func(conn net.Conn) {
			defer wg.Done()
			_ = conn.SetReadDeadline(deadline)
			if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
				resp.Body.Close()
				a.Add(1)
			} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				c.Add(1)
			}
		}(conn)
	}
	wg.Wait()
	return a.Load(), c.Load(), int64(len(held)) - a.Load() - c.Load()
}

// holder is a child's part: hold n, say ready, wait for stdin to close,
// settle and report.
func holder(addr, head string, n int, wait time.Duration) error {
	held, err := hold(addr, head, n)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	a, c, l := settle(held, wait)
	fmt.Printf("settled %d %d %d\n", a, c, l)
	return nil
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

func spawn(n int) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Env = append(os.Environ(), holdEnv+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &child{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}, nil
}

func (ch *child) line() (string, error) {
	if ch.out.Scan() {
		return ch.out.Text(), nil
	}
	if err := ch.out.Err(); err != nil {
		return "", err
	}
	if err := ch.cmd.Wait(); err != nil {
		return "", fmt.Errorf("holder exited: %w", err)
	}
	return "", errors.New("holder exited")
}

func (ch *child) ready() error {
	l, err := ch.line()
	if err == nil && l != "ready" {
		err = fmt.Errorf("holder: %q", l)
	}
	return err
}

func (ch *child) settle() (answered, closed, left int64, err error) {
	ch.stdin.Close()
	l, err := ch.line()
	if err != nil {
		return 0, 0, 0, err
	}
	if _, err := fmt.Sscanf(l, "settled %d %d %d", &answered, &closed, &left); err != nil {
		return 0, 0, 0, fmt.Errorf("holder: %q", l)
	}
	return answered, closed, left, ch.cmd.Wait()
}

func (ch *child) kill() {
	if ch.cmd.ProcessState == nil {
		_ = ch.cmd.Process.Kill()
		_ = ch.cmd.Wait()
	}
}
