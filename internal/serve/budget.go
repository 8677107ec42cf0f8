package serve

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Limits bound the connections of a Budget, across all of its listeners.
type Limits struct {
	// MaxConns caps the connections open at once; 0 means
	// DefaultLimits' (the descriptor limit less a reserve), negative
	// means no cap.
	MaxConns int
	// MaxConnsPerSource caps the connections one source holds at once (an
	// IPv4 address, an IPv6 /64); 0 means DefaultLimits', negative means
	// no cap.
	MaxConnsPerSource int
	// FirstRequest bounds how long a new connection may take to send its
	// first request's headers (TLS handshake included); 0 means
	// DefaultLimits', negative means no bound. Later requests are bounded
	// by Timeouts.Idle and Timeouts.ReadHeader.
	FirstRequest time.Duration
	// MaxOutbound caps the connections the process dials through the
	// budget (Budget.Dial) open at once; they count against MaxConns
	// with the accepted ones. 0 means half of MaxConns, negative no cap
	// of its own.
	MaxOutbound int
	// MaxOutboundPerDest caps the dialled connections to one address
	// (host:port; for the e2b gateway, one sandbox's agent) open at once;
	// 0 means a quarter of MaxOutbound (at least 16, at most 4,096, never
	// more than MaxOutbound), negative no cap.
	MaxOutboundPerDest int
}

const (
	// fdReserve is the least number of file descriptors the budget leaves
	// to the rest of the process (stores, VM sockets, etcd, logs); an
	// eighth of the limit when that is more.
	fdReserve = 1024
	// minConns is the smallest default cap.
	minConns = 64
	// maxConnsPerSource is the largest default per-source cap.
	maxConnsPerSource = 4096
	// firstRequest is the default Limits.FirstRequest.
	firstRequest = 5 * time.Second
	// minOutboundPerDest and maxOutboundPerDest bound the default
	// Limits.MaxOutboundPerDest.
	minOutboundPerDest = 16
	maxOutboundPerDest = 4096
)

// DefaultLimits sizes a budget from the process's soft RLIMIT_NOFILE,
// which Go (1.19 and later) raises to the hard limit at start: MaxConns is
// the limit less a reserve (1,024 descriptors or an eighth of the limit,
// whichever is more; at least 64, at most 2^20), MaxConnsPerSource a
// quarter of MaxConns (at least 64, at most 4,096), FirstRequest 5 s,
// MaxOutbound half of MaxConns and MaxOutboundPerDest a quarter of that
// (at least 16, at most 4,096).
func DefaultLimits() Limits {
	total := 1 << 16
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil && rl.Cur != unix.RLIM_INFINITY {
		n := int64(rl.Cur)
		n -= max(fdReserve, n/8)
		total = int(min(max(n, minConns), 1<<20))
	}
	return Limits{MaxConns: total, MaxConnsPerSource: min(max(total/4, minConns), maxConnsPerSource), FirstRequest: firstRequest}.orOutbound()
}

// orOutbound fills l's zero outbound caps from its MaxConns.
func (l Limits) orOutbound() Limits {
	if l.MaxOutbound == 0 {
		l.MaxOutbound = -1
		if l.MaxConns > 0 {
			l.MaxOutbound = max(l.MaxConns/2, 1)
		}
	}
	if l.MaxOutboundPerDest == 0 {
		l.MaxOutboundPerDest = maxOutboundPerDest
		if l.MaxOutbound > 0 {
			l.MaxOutboundPerDest = min(max(l.MaxOutbound/4, minOutboundPerDest), maxOutboundPerDest, l.MaxOutbound)
		}
	}
	return l
}

// orDefault fills l's zero fields from DefaultLimits.
func (l Limits) orDefault() Limits {
	d := DefaultLimits()
	if l.MaxConns == 0 {
		l.MaxConns = d.MaxConns
	}
	if l.MaxConnsPerSource == 0 {
		l.MaxConnsPerSource = maxConnsPerSource
		if l.MaxConns > 0 {
			l.MaxConnsPerSource = min(max(l.MaxConns/4, minConns), maxConnsPerSource)
		}
	}
	if l.FirstRequest == 0 {
		l.FirstRequest = d.FirstRequest
	}
	return l.orOutbound()
}

// A Budget is the connections one process may hold open, shared by every
// listener it wraps (Budget.Listen, Listen): a cap on the whole, a cap per
// source address, and a deadline for a new connection's first request.
// A connection is pending until it has sent a full request (its headers
// and its whole body); once it has, it is never closed to make room while
// it serves a request. A newcomer from a source at its cap takes the place
// of that source's oldest pending connection, and is closed at once when
// there is none; one arriving at a full budget, of the oldest pending
// connection of any source, or when none is pending, of a keep-alive
// connection idle between requests (none in flight for idleGrace) —
// sources enough to fill the budget with connections that each carried
// one request (many IPv6 /64s) would otherwise keep every newcomer out;
// when there is neither, the newcomer is closed at once. A client that
// sends its request at once thus always gets a connection, however many
// connections other clients hold open without a request in flight.
//
// A server learns which connections have sent a full request through
// Track (NewServer installs it); a connection whose requests never reach
// Track stays pending.
//
// The connections the process dials through Dial (the e2b gateway's to
// sandbox agents: a long-lived stream to a public port holds one besides
// its client's) draw from the same budget, never pending and never given
// up: at most MaxOutbound at once, MaxOutboundPerDest to one address.
// One that finds the budget full takes the place of a pending (or, with
// nothing pending, idle) accepted connection, as a newcomer would; when
// there is none, or a dial cap is reached, the dial fails at once with
// ErrBudgetFull.
type Budget struct {
	mu  sync.Mutex
	lim Limits
	led ledger

	evicted, refused, timedOut atomic.Int64
	// outbound counts the dialled connections open (guarded by mu);
	// dialRefused the dials refused.
	outbound    int
	dialRefused atomic.Int64
}

// NewBudget returns a budget with l's bounds (zero fields take
// DefaultLimits').
func NewBudget(l Limits) *Budget { return &Budget{lim: l.orDefault()} }

var shared = sync.OnceValue(func() *Budget { return NewBudget(Limits{}) })

// Shared is the process's budget, the one Listen uses by default: every
// server of a process (sandbox-dev's nodes, gateway and API server alike)
// draws from it, so together they never take the descriptors the process
// needs for its own work.
func Shared() *Budget { return shared() }

// SetLimits changes b's bounds (zero fields take DefaultLimits'); they
// apply to the connections accepted and dialled from now on.
func (b *Budget) SetLimits(l Limits) {
	l = l.orDefault()
	b.mu.Lock()
	b.lim = l
	b.mu.Unlock()
}

// Limits returns b's bounds.
func (b *Budget) Limits() Limits {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lim
}

// BudgetStats count a budget's connections.
type BudgetStats struct {
	// Open and Pending are the connections open now, and those of them
	// that have not yet sent a full request.
	Open, Pending int
	// Evicted counts the pending connections closed to make room for a
	// newcomer, Refused the newcomers closed for want of one, TimedOut the
	// connections closed for not sending their first request's headers
	// within Limits.FirstRequest.
	Evicted, Refused, TimedOut int64
	// Outbound is the dialled connections open now (counted in Open);
	// DialRefused counts the dials refused (ErrBudgetFull).
	Outbound    int
	DialRefused int64
}

// Stats returns b's counts.
func (b *Budget) Stats() BudgetStats {
	b.mu.Lock()
	s := BudgetStats{Open: b.led.open, Pending: b.led.pending.Len(), Outbound: b.outbound}
	b.mu.Unlock()
	s.Evicted, s.Refused, s.TimedOut, s.DialRefused = b.evicted.Load(), b.refused.Load(), b.timedOut.Load(), b.dialRefused.Load()
	return s
}

// Listen wraps ln so that its connections draw from b.
func (b *Budget) Listen(ln net.Listener) net.Listener { return &listener{Listener: ln, b: b} }

type listener struct {
	net.Listener
	b *Budget
}

// Accept returns the next connection b admits, closing those it refuses.
// It never waits for room, so a backlog of connections never forms in the
// kernel's accept queue.
func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc := l.b.admit(c); tc != nil {
			return tc, nil
		}
	}
}

func (b *Budget) admit(c net.Conn) *conn {
	src := source(c.RemoteAddr())
	b.mu.Lock()
	e, victim, ok := b.led.admit(src, caps{total: b.lim.MaxConns, perSource: b.lim.MaxConnsPerSource}, idleNow(time.Now()))
	var tc *conn
	if ok {
		tc = &conn{Conn: c, b: b, e: e}
		e.conn = tc
		if key, ok := addrKeyOf(c.LocalAddr(), c.RemoteAddr()); ok {
			tc.key = key
			byAddr.Store(key, tc)
		}
		if d := b.lim.FirstRequest; d > 0 {
			tc.timer = time.AfterFunc(d, tc.expire)
		}
	}
	b.mu.Unlock()
	if victim != nil {
		b.evicted.Add(1)
		_ = victim.conn.Close()
	}
	if !ok {
		b.refused.Add(1)
		_ = c.Close()
	}
	return tc
}

// source is the address a per-source cap counts by: an IPv4 address, an
// IPv6 /64 (one host's usual share), or "" for a non-IP address.
func source(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return ""
	}
	if ip4 := ta.IP.To4(); ip4 != nil {
		return ip4.String()
	}
	return ta.IP.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// addrKey names a TCP connection by its two ends, unique among the
// process's open connections: how Track finds the connection of a request
// served by a server it did not build (the API server's).
type addrKey struct{ local, remote string }

func addrKeyOf(local, remote net.Addr) (addrKey, bool) {
	_, l := local.(*net.TCPAddr)
	_, r := remote.(*net.TCPAddr)
	if !l || !r {
		return addrKey{}, false
	}
	return addrKey{local.String(), remote.String()}, true
}

// byAddr holds the open connections of every budget by addrKey.
var byAddr sync.Map

// conn is a connection a Budget admitted.
type conn struct {
	net.Conn
	b     *Budget
	e     *entry // guarded by b.mu
	key   addrKey
	timer *time.Timer

	headers, full atomic.Bool
	once          sync.Once
	// active counts its requests in flight (Track); ended is when the last
	// one ended (unix nanoseconds).
	active atomic.Int32
	ended  atomic.Int64
}

// idleGrace is how long a connection must have had no request in flight
// to give way at a full budget: its answer has left, and a keep-alive
// client that sends its requests back to back is left alone.
const idleGrace = time.Second

// idleNow is the ledger's idle test at now: a connection with no request
// in flight since idleGrace (one of a server Track does not see never is).
func idleNow(now time.Time) func(*entry) bool {
	return func(e *entry) bool {
		c := e.conn
		return c != nil && c.active.Load() == 0 && c.ended.Load() != 0 && now.UnixNano()-c.ended.Load() >= int64(idleGrace)
	}
}

// begin and end bracket a request on c (Track).
func (c *conn) begin() { c.active.Add(1) }

func (c *conn) end() {
	c.ended.Store(time.Now().UnixNano())
	c.active.Add(-1)
}

// Close closes the connection and gives its place back to the budget.
func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

func (c *conn) release() {
	c.b.mu.Lock()
	c.b.led.drop(c.e)
	c.b.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.key != (addrKey{}) {
		byAddr.CompareAndDelete(c.key, c)
	}
}

// expire closes a connection that has not sent its first request's
// headers within Limits.FirstRequest.
func (c *conn) expire() {
	if c.headers.Load() {
		return
	}
	c.b.timedOut.Add(1)
	_ = c.Close()
}

// sawHeaders records that a request's headers arrived: the first-request
// deadline no longer applies.
func (c *conn) sawHeaders() {
	if c.headers.CompareAndSwap(false, true) && c.timer != nil {
		c.timer.Stop()
	}
}

// sawRequest records that a full request arrived: the connection is no
// longer pending.
func (c *conn) sawRequest() {
	if c.full.CompareAndSwap(false, true) {
		c.b.mu.Lock()
		c.b.led.complete(c.e)
		c.b.mu.Unlock()
	}
}

type connCtxKey struct{}

// withConn is NewServer's http.Server.ConnContext: it gives a request the
// Budget connection it arrived on.
func withConn(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*conn); ok {
		return context.WithValue(ctx, connCtxKey{}, tc)
	}
	return ctx
}

// connOf returns the Budget connection r arrived on, or nil.
func connOf(r *http.Request) *conn {
	ctx := r.Context()
	if tc, ok := ctx.Value(connCtxKey{}).(*conn); ok {
		return tc
	}
	local, ok := ctx.Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return nil
	}
	if _, ok := local.(*net.TCPAddr); !ok {
		return nil
	}
	if v, ok := byAddr.Load(addrKey{local.String(), r.RemoteAddr}); ok {
		return v.(*conn)
	}
	return nil
}

// Track tells the Budget a request's connection was admitted by that the
// request has arrived: its headers at once (the connection's first-request
// deadline stops), its body once read to the end — or at once when it has
// none — after which the connection is no longer pending, never closed to
// make room while a request is in flight on it (its handler has not
// returned), and only at a full budget with nothing pending once idle
// since idleGrace. NewServer installs it; a server built elsewhere over a
// Budget's listener (the API server) installs it outermost, before
// anything that rewrites RemoteAddr. A request whose connection no Budget
// admitted passes through.
func Track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c := connOf(r); c != nil {
			c.begin()
			defer c.end()
			c.sawHeaders()
			if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
				c.sawRequest()
			} else if !c.full.Load() {
				r.Body = &trackedBody{ReadCloser: r.Body, c: c}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// trackedBody reports its connection's request full once read to the end.
type trackedBody struct {
	io.ReadCloser
	c *conn
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.c.sawRequest()
	}
	return n, err
}
