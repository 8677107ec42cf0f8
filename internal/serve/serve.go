// Package serve hardens Hearth's HTTP servers (the node daemon, the e2b
// gateway, the in-guest agent, the Pod-path webhook, the aggregated API
// server) against slow, idle and too many clients: per-request read and
// write deadlines that streaming routes opt out of, an idle timeout, and a
// connection Budget shared by every listener of the process and sized to
// its file-descriptor limit, with a cap per source address and a deadline
// for a new connection's first request. At a cap, a connection that has
// not yet sent a full request gives way to a newcomer (at the process's
// cap, when none has, a keep-alive connection idle between requests), so
// a client that sends its request at once (a health probe, an
// authenticated caller) always gets through, and a connection serving a
// request is never closed to make room. Connections the process dials
// through the budget (Budget.Dial: the e2b gateway's to sandbox agents)
// count with the accepted ones, capped on their own and per address, and
// a dial past a cap fails at once (ErrBudgetFull).
//
// It owns no routes and no listeners' addresses: callers pass the handler
// and the listener, and say which of their routes stream.
package serve

import (
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Timeouts bound how long one client may hold a connection.
type Timeouts struct {
	// ReadHeader bounds the request line and headers.
	ReadHeader time.Duration
	// Read bounds reading the request body, from the handler's start: a
	// request whose body never arrives is answered (or closed) this late.
	Read time.Duration
	// Write bounds the whole response, from the handler's start, so a
	// client that stops reading cannot hold the handler forever. Keep it
	// above Read: a request whose body stalls is then answered (400), not
	// just closed.
	Write time.Duration
	// Idle bounds a keep-alive connection between two requests.
	Idle time.Duration
}

// DefaultTimeouts suit an API whose bodies are small and whose slowest
// operation (a fork, a snapshot claim) takes well under a minute.
var DefaultTimeouts = Timeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: 2 * time.Minute, Idle: 90 * time.Second}

// Options configure NewServer and Listen.
type Options struct {
	Timeouts
	// Budget is the connection budget Listen draws from; nil means the
	// process's (Shared).
	Budget *Budget
	// Streaming reports the requests exempt from Timeouts.Read and
	// Timeouts.Write from their start; nil means none is. A route that
	// must authenticate first calls Unbound instead.
	Streaming func(*http.Request) bool
}

// NewServer returns a server for h with o's header and idle timeouts, and
// h wrapped in Deadlines for the per-request read and write deadlines and
// in Track for its Budget. It sets no server-wide ReadTimeout or
// WriteTimeout: those would also cut the streaming routes.
func NewServer(h http.Handler, o Options) *http.Server {
	t := o.Timeouts.orDefault()
	return &http.Server{
		Handler:           Track(Deadlines(h, t, o.Streaming)),
		ReadHeaderTimeout: t.ReadHeader,
		IdleTimeout:       t.Idle,
		ConnContext:       withConn,
	}
}

// Listen wraps ln so that its connections draw from o.Budget (the
// process's, Shared, when nil): see Budget for who gives way to whom. Serve
// it with NewServer's server, or a handler wrapped in Track.
func Listen(ln net.Listener, o Options) net.Listener {
	b := o.Budget
	if b == nil {
		b = Shared()
	}
	return b.Listen(ln)
}

func (t Timeouts) orDefault() Timeouts {
	d := DefaultTimeouts
	if t.ReadHeader > 0 {
		d.ReadHeader = t.ReadHeader
	}
	if t.Read > 0 {
		d.Read = t.Read
	}
	if t.Write > 0 {
		d.Write = t.Write
	}
	if t.Idle > 0 {
		d.Idle = t.Idle
	}
	return d
}

// Deadlines bounds every request that streaming does not report: reading
// its body gets t.Read from now (cleared once the body is read to its end,
// so that a long operation is not canceled by the server's background read
// timing out) and its response gets t.Write from now, both through
// http.ResponseController. A streaming request gets neither. A handler
// that streams only once it has authenticated its caller calls Unbound
// instead. Whatever the handler did, when it returns the connection gets
// t.Write again, and t.Read when its body was read to the end — else the
// read deadline is now: the answer leaves at once rather than after the
// server waited for the rest of the body (which would answer a stalled
// body at twice the read timeout), and the connection closes after it.
// Zero fields of t take DefaultTimeouts'. A ResponseWriter without
// deadline support (a test recorder) is served as is.
func Deadlines(h http.Handler, t Timeouts, streaming func(*http.Request) bool) http.Handler {
	t = t.orDefault()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		var body *deadlineBody
		defer func() {
			now := time.Now()
			read := now.Add(t.Read)
			if body != nil && !body.eof.Load() {
				read = now
			}
			_ = rc.SetReadDeadline(read)
			_ = rc.SetWriteDeadline(now.Add(t.Write))
		}()
		if streaming != nil && streaming(r) {
			_ = rc.SetReadDeadline(time.Time{})
			_ = rc.SetWriteDeadline(time.Time{})
			h.ServeHTTP(w, r)
			return
		}
		now := time.Now()
		_ = rc.SetWriteDeadline(now.Add(t.Write))
		if r.Body != nil && r.Body != http.NoBody {
			if rc.SetReadDeadline(now.Add(t.Read)) == nil {
				body = &deadlineBody{ReadCloser: r.Body, rc: rc}
				r.Body = body
			}
		}
		h.ServeHTTP(w, r)
	})
}

// Unbound lifts the read and write deadlines Deadlines set on w's
// connection, for a long-lived stream (a process's output, a proxied data
// plane, a file transfer); call it once the caller is authenticated, so an
// anonymous client never holds a connection unbounded.
func Unbound(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
}

// deadlineBody clears the connection's read deadline once the body has
// been read to its end.
type deadlineBody struct {
	io.ReadCloser
	rc  *http.ResponseController
	eof atomic.Bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && b.eof.CompareAndSwap(false, true) {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
