package uds

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ConnectLine is the host→VMM request of the hybrid-vsock handshake
// (Firecracker docs/vsock.md; Cloud Hypervisor docs/vsock.md).
func ConnectLine(port uint32) string { return fmt.Sprintf("CONNECT %d\n", port) }

// ParseOK parses the VMM's answer to CONNECT: "OK <host-side port>" (the
// trailing newline already stripped or not). Anything else is an error.
func ParseOK(line string) (uint32, error) {
	line = strings.TrimRight(line, "\r\n")
	rest, ok := strings.CutPrefix(line, "OK ")
	if !ok {
		return 0, fmt.Errorf("hybrid vsock: unexpected answer %q", line)
	}
	n, err := strconv.ParseUint(rest, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("hybrid vsock: bad port in %q", line)
	}
	return uint32(n), nil
}

// ParseConnect parses a "CONNECT <port>" request line (the VMM side).
func ParseConnect(line string) (uint32, error) {
	line = strings.TrimRight(line, "\r\n")
	rest, ok := strings.CutPrefix(line, "CONNECT ")
	if !ok {
		return 0, fmt.Errorf("hybrid vsock: unexpected request %q", line)
	}
	n, err := strconv.ParseUint(rest, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("hybrid vsock: bad port in %q", line)
	}
	return uint32(n), nil
}

// vsockConn is a hybrid-vsock stream whose reads go through the reader that
// consumed the handshake line (it may hold guest bytes already).
type vsockConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *vsockConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *vsockConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// DialVsock connects to guest port through the VMM's hybrid-vsock socket.
func DialVsock(ctx context.Context, udsPath string, port uint32) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", udsPath)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := io.WriteString(c, ConnectLine(port)); err != nil {
		c.Close()
		return nil, err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("hybrid vsock %s port %d: %w", udsPath, port, err)
	}
	if _, err := ParseOK(line); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return &vsockConn{Conn: c, r: r}, nil
}

// Relay listens on a loopback TCP port and splices every connection to one
// guest vsock port, so the node reaches the agent at a plain host:port.
type Relay struct {
	ln      net.Listener
	uds     string
	port    uint32
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
	timeout time.Duration
}

// StartRelay starts a relay to guest port behind udsPath on listen (default
// 127.0.0.1:0).
func StartRelay(listen, udsPath string, port uint32) (*Relay, error) {
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	r := &Relay{ln: ln, uds: udsPath, port: port, conns: map[net.Conn]struct{}{}, timeout: 10 * time.Second}
	r.wg.Add(1)
	go r.serve()
	return r, nil
}

// Addr is the relay's host:port.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

func (r *Relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *Relay) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	c.Close()
}

func (r *Relay) serve() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		if !r.track(c) {
			c.Close()
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer r.untrack(c)
			ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
			g, err := DialVsock(ctx, r.uds, r.port)
			cancel()
			if err != nil {
				return
			}
			if !r.track(g) {
				g.Close()
				return
			}
			defer r.untrack(g)
			Splice(c, g)
		}()
	}
}

// Splice copies both ways until both directions end, half-closing where the
// connections allow it.
func Splice(a, b net.Conn) {
	var wg sync.WaitGroup
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	wg.Add(2)
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
}

// Close stops listening, drops every open connection and waits for the
// relay's goroutines.
func (r *Relay) Close() error {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	err := r.ln.Close()
	r.wg.Wait()
	return err
}
