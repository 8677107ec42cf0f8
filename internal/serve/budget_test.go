package serve

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// patient timeouts: nothing but the budget closes a connection during a
// test.
var patient = Timeouts{ReadHeader: time.Minute, Read: time.Minute, Write: time.Minute, Idle: time.Minute}

// routes: GET /healthz answers at once, POST /echo reads its body, GET
// /block waits for release.
func routes(release <-chan struct{}) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = w.Write(b)
	})
	mux.HandleFunc("GET /block", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
			_, _ = io.WriteString(w, "released\n")
		case <-r.Context().Done():
		}
	})
	return mux
}

func startOn(t testing.TB, b *Budget, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Timeouts: patient, Budget: b}
	srv := NewServer(h, o)
	go func() { _ = srv.Serve(Listen(ln, o)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// keepAlive is a raw HTTP/1.1 connection that sends requests one by one.
type keepAlive struct {
	c  net.Conn
	br *bufio.Reader
}

func dialKeepAlive(t testing.TB, addr string) *keepAlive {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &keepAlive{c: c, br: bufio.NewReader(c)}
}

func (k *keepAlive) send(path string) error {
	_, err := fmt.Fprintf(k.c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	return err
}

func (k *keepAlive) answer(within time.Duration) (string, error) {
	_ = k.c.SetReadDeadline(time.Now().Add(within))
	resp, err := http.ReadResponse(k.br, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d", resp.StatusCode)
	}
	return string(b), err
}

func (k *keepAlive) get(path string) (string, error) {
	if err := k.send(path); err != nil {
		return "", err
	}
	return k.answer(5 * time.Second)
}

// openHalf opens n connections that never send a full request, in three
// kinds by turn: silent, headers cut off, a body announced and never sent.
func openHalf(t testing.TB, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
		switch i % 3 {
		case 1:
			_, err = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
		case 2:
			_, err = io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
		}
		if err != nil {
			t.Fatalf("half-open %d: %v", i, err)
		}
	}
	return conns
}

// await polls cond until it holds or 10 s pass.
func await(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// closedByServer reports whether the server closed c: a read ends in EOF
// or a reset, not in the read deadline.
func closedByServer(c net.Conn, within time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func healthz(addr string, timeout time.Duration) (time.Duration, error) {
	hc := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	t0 := time.Now()
	resp, err := hc.Get("http://" + addr + "/healthz")
	if err != nil {
		return time.Since(t0), err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return time.Since(t0), fmt.Errorf("/healthz: %d", resp.StatusCode)
	}
	return time.Since(t0), nil
}

// One source holding twice its cap in connections that never send a full
// request (the caller's own source, as in sandbox-dev) does not keep a
// fresh /healthz out; a keep-alive connection that carried a request and
// one serving a request are not closed to make room.
func TestBudget_HalfOpenConnectionsGiveWayToAFreshClient(t *testing.T) {
	const perSource = 16
	b := NewBudget(Limits{MaxConns: 1000, MaxConnsPerSource: perSource, FirstRequest: time.Minute})
	release := make(chan struct{})
	addr := startOn(t, b, routes(release))

	idle := dialKeepAlive(t, addr)
	if _, err := idle.get("/healthz"); err != nil {
		t.Fatal(err)
	}
	busy := dialKeepAlive(t, addr)
	if err := busy.send("/block"); err != nil {
		t.Fatal(err)
	}
	await(t, "the blocking request to arrive", func() bool { return b.Stats().Pending == 0 && b.Stats().Open == 2 })

	n := 2*perSource + 16
	half := openHalf(t, addr, n)
	await(t, "the half-open connections to be admitted", func() bool {
		s := b.Stats()
		return s.Evicted == int64(n+2-perSource) && s.Open == perSource
	})
	if !closedByServer(half[0], 5*time.Second) {
		t.Fatal("the oldest half-open connection is still open")
	}

	if el, err := healthz(addr, 2*time.Second); err != nil {
		t.Fatalf("/healthz under %d half-open connections: %v", n, err)
	} else {
		t.Logf("/healthz under %d half-open connections (cap %d per source): %v", n, perSource, el)
	}
	if _, err := idle.get("/healthz"); err != nil {
		t.Fatalf("the idle keep-alive connection that carried a request was closed: %v", err)
	}
	close(release)
	if body, err := busy.answer(5 * time.Second); err != nil || body != "released\n" {
		t.Fatalf("the connection serving a request was closed: %q %v", body, err)
	}
	if s := b.Stats(); s.Refused != 0 {
		t.Fatalf("refused %d newcomers", s.Refused)
	}
}

// The budget is the process's, not a listener's: half-open connections
// filling it through one server give way to a client of another.
func TestBudget_ListenersShareOneBudget(t *testing.T) {
	b := NewBudget(Limits{MaxConns: 16, MaxConnsPerSource: -1, FirstRequest: time.Minute})
	nodeA := startOn(t, b, routes(nil))
	gateway := startOn(t, b, routes(nil))
	kept := dialKeepAlive(t, gateway)
	if _, err := kept.get("/healthz"); err != nil {
		t.Fatal(err)
	}
	openHalf(t, nodeA, 40)
	await(t, "the half-open connections to fill the budget", func() bool { return b.Stats().Evicted == 40+1-16 })
	if _, err := healthz(gateway, 2*time.Second); err != nil {
		t.Fatalf("the gateway under a full budget: %v", err)
	}
	if _, err := healthz(nodeA, 2*time.Second); err != nil {
		t.Fatalf("node A under a full budget: %v", err)
	}
	if _, err := kept.get("/healthz"); err != nil {
		t.Fatalf("the gateway's keep-alive connection was closed: %v", err)
	}
	if s := b.Stats(); s.Open > 16 {
		t.Fatalf("%d connections open over a budget of 16", s.Open)
	}
}

// A connection that sends no request headers within Limits.FirstRequest
// is closed, however long Timeouts.ReadHeader is; one that sent a request
// then idles is not.
func TestBudget_FirstRequestDeadlineClosesASilentConnection(t *testing.T) {
	b := NewBudget(Limits{FirstRequest: time.Second}) // long beside the kept connection's first request, under -race
	addr := startOn(t, b, routes(nil))
	kept := dialKeepAlive(t, addr)
	if _, err := kept.get("/healthz"); err != nil {
		t.Fatal(err)
	}
	half := openHalf(t, addr, 2) // silent; headers cut off
	t0 := time.Now()
	for i, c := range half {
		if !closedByServer(c, 5*time.Second) {
			t.Fatalf("half-open connection %d still open after %v", i, time.Since(t0))
		}
	}
	if el := time.Since(t0); el > 3*time.Second {
		t.Fatalf("closed after %v", el)
	}
	await(t, "the time-outs to be counted", func() bool { return b.Stats().TimedOut == 2 })
	if _, err := kept.get("/healthz"); err != nil {
		t.Fatalf("the connection that sent a request was closed: %v", err)
	}
}

// A request whose body never ends keeps its connection pending: it gives
// way like a silent one, while a body read to its end does not.
func TestBudget_AStalledBodyIsNotAFullRequest(t *testing.T) {
	b := NewBudget(Limits{MaxConnsPerSource: 2, FirstRequest: time.Minute})
	addr := startOn(t, b, routes(nil))
	posted := dialKeepAlive(t, addr)
	if _, err := fmt.Fprintf(posted.c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"); err != nil {
		t.Fatal(err)
	}
	if body, err := posted.answer(5 * time.Second); err != nil || body != "hi" {
		t.Fatalf("echo: %q %v", body, err)
	}
	stalled := dialKeepAlive(t, addr)
	if _, err := io.WriteString(stalled.c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	await(t, "the stalled body's headers", func() bool { s := b.Stats(); return s.Open == 2 && s.Pending == 1 })
	if _, err := healthz(addr, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if !closedByServer(stalled.c, 5*time.Second) {
		t.Fatal("the stalled body's connection is still open")
	}
	if _, err := posted.get("/healthz"); err != nil {
		t.Fatalf("the connection whose body arrived was closed: %v", err)
	}
}

// When a source's connections have all sent a request, a newcomer from it
// is closed at once rather than any of them.
func TestBudget_ASourceAtItsCapWithNothingPendingRefusesANewcomer(t *testing.T) {
	b := NewBudget(Limits{MaxConnsPerSource: 2, FirstRequest: time.Minute})
	addr := startOn(t, b, routes(nil))
	k1, k2 := dialKeepAlive(t, addr), dialKeepAlive(t, addr)
	for _, k := range []*keepAlive{k1, k2} {
		if _, err := k.get("/healthz"); err != nil {
			t.Fatal(err)
		}
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !closedByServer(c, 5*time.Second) {
		t.Fatal("a newcomer over the cap was kept")
	}
	if s := b.Stats(); s.Refused != 1 || s.Evicted != 0 {
		t.Fatalf("stats %+v, want 1 refused, 0 evicted", s)
	}
	for _, k := range []*keepAlive{k1, k2} {
		if _, err := k.get("/healthz"); err != nil {
			t.Fatalf("a connection that carried a request was closed: %v", err)
		}
	}
}

// Many sources (an IPv6 /56 is 256 /64s) each holding their cap in
// keep-alive connections that carried one request and idle since — cheap
// to keep: a request now and then — fill the whole budget with nothing
// pending. A fresh client is still answered: at a full budget an idle
// connection (no request in flight for idleGrace) gives way when no
// pending one can; one serving a request never does.
func TestBudget_IdleConnectionsOfManySourcesGiveWayToAFreshClient(t *testing.T) {
	const sources, perSource = 4, 2
	b := NewBudget(Limits{MaxConns: sources * perSource, MaxConnsPerSource: perSource, FirstRequest: time.Minute})
	release := make(chan struct{})
	defer close(release)
	addr := startOn(t, b, routes(release))
	from := func(i int) *keepAlive {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(10+i))}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Skipf("no loopback address 127.0.0.%d: %v", 10+i, err)
		}
		t.Cleanup(func() { c.Close() })
		return &keepAlive{c: c, br: bufio.NewReader(c)}
	}
	busy := from(0)
	if err := busy.send("/block"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < sources; i++ {
		for j := 0; j < perSource; j++ {
			if i == 0 && j == 0 {
				continue // busy
			}
			if _, err := from(i).get("/healthz"); err != nil {
				t.Fatal(err)
			}
		}
	}
	await(t, "a full budget with nothing pending", func() bool { s := b.Stats(); return s.Open == sources*perSource && s.Pending == 0 })
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := healthz(addr, 2*time.Second)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a fresh client under a budget full of idle connections: %v (stats %+v)", err, b.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s := b.Stats(); s.Evicted == 0 || s.Open > sources*perSource {
		t.Fatalf("stats %+v", s)
	}
	release <- struct{}{}
	if body, err := busy.answer(5 * time.Second); err != nil || body != "released\n" {
		t.Fatalf("the connection serving a request was closed: %q %v", body, err)
	}
}

// Track finds its connection by address under a server it did not build,
// over TLS and HTTP/2 as the API server serves: after a request the
// connection is no longer pending.
func TestTrack_FindsTheConnectionOfAServerItDidNotBuild(t *testing.T) {
	b := NewBudget(Limits{FirstRequest: time.Minute})
	srv := httptest.NewUnstartedServer(Track(routes(nil)))
	srv.Listener = b.Listen(srv.Listener)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	hc := srv.Client()
	resp, err := hc.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("served %s, want HTTP/2", resp.Proto)
	}
	if s := b.Stats(); s.Open != 1 || s.Pending != 0 {
		t.Fatalf("stats %+v, want one connection, not pending", s)
	}
}

// DefaultLimits leave a reserve of descriptors and cap a source below the
// whole; Go has raised the soft descriptor limit to the hard one.
func TestDefaultLimits_LeaveAReserve(t *testing.T) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Cur != rl.Max {
		t.Errorf("soft RLIMIT_NOFILE %d below the hard %d: Go no longer raises it", rl.Cur, rl.Max)
	}
	l := DefaultLimits()
	if rl.Max != unix.RLIM_INFINITY && (l.MaxConns < minConns || uint64(l.MaxConns) > rl.Cur-fdReserve && l.MaxConns > minConns) {
		t.Errorf("MaxConns %d for a limit of %d", l.MaxConns, rl.Cur)
	}
	if l.MaxConnsPerSource > l.MaxConns && l.MaxConns > minConns || l.MaxConnsPerSource > maxConnsPerSource {
		t.Errorf("MaxConnsPerSource %d of %d", l.MaxConnsPerSource, l.MaxConns)
	}
	if l.FirstRequest != firstRequest {
		t.Errorf("FirstRequest %v", l.FirstRequest)
	}
}

// HEARTH_SLOWLORIS=20000 go test ./internal/serve -run TwentyThousand -v
//
// The acceptance run: 20,000 connections that send a request's headers
// and never its body (bench/slowloris's) against a server on the
// process's default limits; fresh /healthz requests answer at once and a
// keep-alive connection that carried a request stays. The connections are
// held by child processes (this test binary, TestHoldHalfOpen), each
// within its own descriptor limit, so the server's process counts only its
// own side.
func TestBudget_TwentyThousandHalfOpenConnections(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("HEARTH_SLOWLORIS"))
	if n <= 0 {
		t.Skip("set HEARTH_SLOWLORIS=20000 to run")
	}
	b := NewBudget(Limits{})
	addr := startOn(t, b, routes(nil))
	kept := dialKeepAlive(t, addr)
	if _, err := kept.get("/healthz"); err != nil {
		t.Fatal(err)
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	per := int(rl.Cur) - 256
	t0 := time.Now()
	var holders []*exec.Cmd
	for left := n; left > 0; left -= per {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHoldHalfOpen$")
		cmd.Env = append(os.Environ(), holdEnv+"="+addr+","+strconv.Itoa(min(per, left)))
		cmd.Stderr = os.Stderr
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
		if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("holder: %q %v", line, err)
		}
		holders = append(holders, cmd)
	}
	await(t, "every connection admitted", func() bool { s := b.Stats(); return int64(s.Open)+s.Evicted == int64(n+1) })
	t.Logf("%d half-open connections held by %d processes in %v; limits %+v; budget %+v; this process's descriptors %d of %d",
		n, len(holders), time.Since(t0).Round(time.Millisecond), b.Limits(), b.Stats(), openFDs(), rl.Cur)
	var took []time.Duration
	for i := 0; i < 5; i++ {
		el, err := healthz(addr, 5*time.Second)
		if err != nil {
			t.Fatalf("/healthz under %d half-open connections: %v", n, err)
		}
		took = append(took, el)
	}
	slices.Sort(took)
	t.Logf("/healthz under %d half-open connections: median %v, worst %v", n, took[2], took[4])
	if took[4] > time.Second {
		t.Fatalf("/healthz took %v", took[4])
	}
	if _, err := kept.get("/healthz"); err != nil {
		t.Fatalf("the keep-alive connection was closed: %v", err)
	}
}

const holdEnv = "HEARTH_SLOWLORIS_HOLD"

// TestHoldHalfOpen is TestBudget_TwentyThousandHalfOpenConnections's
// holder: with HEARTH_SLOWLORIS_HOLD=ADDR,N it opens N stalled requests to
// ADDR, says "ready" and holds them until its stdin closes.
func TestHoldHalfOpen(t *testing.T) {
	addr, count, ok := strings.Cut(os.Getenv(holdEnv), ",")
	if !ok {
		t.Skip("a holder process of TestBudget_TwentyThousandHalfOpenConnections")
	}
	n, _ := strconv.Atoi(count)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
		_, _ = io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 64\r\n\r\n")
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
}

func openFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}
