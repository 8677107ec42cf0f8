package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// ErrBudgetFull is a dial the Budget refused (Budget.Dial): the process
// holds as many connections as its budget allows, or as many dialled ones
// as Limits.MaxOutbound or Limits.MaxOutboundPerDest allow. Nothing was
// dialled; a server answers 503 with Retry-After.
var ErrBudgetFull = errors.New("connection budget full")

// DialFunc dials a connection (net.Dialer.DialContext's shape).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Dial wraps dial so that every connection it opens draws from b (see
// Budget) until it is closed; a dial b has no room for fails at once with
// ErrBudgetFull, before dial is called.
func (b *Budget) Dial(dial DialFunc) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		e, err := b.hold(addr)
		if err != nil {
			return nil, err
		}
		c, err := dial(ctx, network, addr)
		if err != nil {
			b.unhold(e)
			return nil, err
		}
		return &dialled{Conn: c, b: b, e: e}, nil
	}
}

// outboundSource is the ledger source of the connections dialled to addr:
// no accepted connection's source (an IP address, an IPv6 /64, "") starts
// with a NUL.
func outboundSource(addr string) string { return "\x00dial " + addr }

// hold accounts a connection about to be dialled to addr.
func (b *Budget) hold(addr string) (*entry, error) {
	b.mu.Lock()
	lim := b.lim
	if n := b.outbound; lim.MaxOutbound >= 0 && n >= lim.MaxOutbound {
		b.mu.Unlock()
		b.dialRefused.Add(1)
		return nil, fmt.Errorf("%w: %d dialled connections open (at most %d)", ErrBudgetFull, n, lim.MaxOutbound)
	}
	e, victim, ok := b.led.hold(outboundSource(addr), caps{total: lim.MaxConns, perSource: lim.MaxOutboundPerDest}, idleNow(time.Now()))
	if ok {
		b.outbound++
	}
	open := b.led.open
	b.mu.Unlock()
	if victim != nil {
		b.evicted.Add(1)
		_ = victim.conn.Close()
	}
	if !ok {
		b.dialRefused.Add(1)
		return nil, fmt.Errorf("%w: %d connections open, at most %d to %s (at most %d in all)", ErrBudgetFull, open, lim.MaxOutboundPerDest, addr, lim.MaxConns)
	}
	return e, nil
}

// unhold gives back the place of a dialled connection.
func (b *Budget) unhold(e *entry) {
	b.mu.Lock()
	if !e.dropped {
		b.led.drop(e)
		b.outbound--
	}
	b.mu.Unlock()
}

// dialled is a connection Dial opened: closing it gives its place back.
type dialled struct {
	net.Conn
	b    *Budget
	e    *entry
	once sync.Once
}

func (c *dialled) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.b.unhold(c.e) })
	return err
}
