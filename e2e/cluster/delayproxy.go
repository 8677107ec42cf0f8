package cluster

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// DelayProxy is a TCP proxy on loopback in front of one upstream address
// that, while a delay is set, holds every chunk the upstream sends back for
// that long before passing it on: a slow node, as its clients see it (every
// answer late, the change stream's events too), with the node itself
// untouched. Requests pass through at once. With no delay it is a plain
// proxy.
type DelayProxy struct {
	ln       net.Listener
	upstream string
	delay    atomic.Int64 // nanoseconds

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewDelayProxy listens on a free loopback port and forwards to upstream.
func NewDelayProxy(upstream string) (*DelayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &DelayProxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *DelayProxy) Addr() string { return p.ln.Addr().String() }

// SetDelay sets the delay of every upstream chunk from now on; 0 turns it off.
func (p *DelayProxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Close stops listening and closes every proxied connection.
func (p *DelayProxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *DelayProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *DelayProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *DelayProxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(down)
		}()
	}
}

func (p *DelayProxy) serve(down net.Conn) {
	if !p.track(down) {
		return
	}
	defer p.untrack(down)
	up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		return // the client sees the connection close: like a dead node
	}
	if !p.track(up) {
		return
	}
	defer p.untrack(up)
	done := make(chan struct{}, 2)
	go func() { // requests: at once
		_, _ = io.Copy(up, down)
		done <- struct{}{}
	}()
	go func() { // answers: each chunk held for the delay
		buf := make([]byte, 32<<10)
		for {
			n, err := up.Read(buf)
			if n > 0 {
				if d := time.Duration(p.delay.Load()); d > 0 {
					time.Sleep(d)
				}
				if _, werr := down.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}()
	<-done // either side ending ends both (the deferred closes)
}
