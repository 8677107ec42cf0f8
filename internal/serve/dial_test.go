package serve

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// sink accepts connections outside any budget (an agent in a guest) and
// keeps them open until the test ends.
func sink(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return ln.Addr().String()
}

// TestDial_DialledConnectionsDrawFromTheBudget: connections a process
// dials through its Budget (the gateway's to sandbox agents) count with
// the accepted ones: at most MaxOutbound at once, MaxOutboundPerDest to
// one address; past a cap a dial fails at once with ErrBudgetFull and
// dials nothing; a close gives the place back.
func TestDial_DialledConnectionsDrawFromTheBudget(t *testing.T) {
	b := NewBudget(Limits{MaxConns: 16, MaxConnsPerSource: -1, MaxOutbound: 5, MaxOutboundPerDest: 3, FirstRequest: time.Minute})
	dials := 0
	dial := b.Dial(func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials++
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	})
	a, c := sink(t), sink(t)
	var held []net.Conn
	t.Cleanup(func() {
		for _, h := range held {
			h.Close()
		}
	})
	must := func(addr string) net.Conn {
		t.Helper()
		conn, err := dial(context.Background(), "tcp", addr)
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		held = append(held, conn)
		return conn
	}
	refused := func(addr, what string) {
		t.Helper()
		before := dials
		conn, err := dial(context.Background(), "tcp", addr)
		if !errors.Is(err, ErrBudgetFull) {
			if conn != nil {
				conn.Close()
			}
			t.Fatalf("%s: %v, want ErrBudgetFull", what, err)
		}
		if dials != before {
			t.Fatalf("%s: dialled anyway", what)
		}
	}
	first := must(a)
	must(a)
	must(a)
	refused(a, "a fourth connection to one address")
	must(c)
	must(c)
	refused(c, "a sixth dialled connection")
	if s := b.Stats(); s.Outbound != 5 || s.Open != 5 || s.Pending != 0 || s.DialRefused != 2 {
		t.Fatalf("stats %+v, want 5 dialled connections open, none pending, 2 refused", s)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	first.Close() // a second close gives back nothing more
	if s := b.Stats(); s.Outbound != 4 || s.Open != 4 {
		t.Fatalf("after a close: %+v", s)
	}
	must(a)
	refused(a, "the closed connection's place, taken again")
}

// TestDial_DialledAndAcceptedConnectionsShareTheBudget: accepted
// connections find the dialled ones in the budget (half-open newcomers
// cannot take it past MaxConns, nor take a dialled connection's place),
// and a dial at a full budget takes the place of a pending accepted
// connection, as a newcomer would; a fresh client still gets through.
func TestDial_DialledAndAcceptedConnectionsShareTheBudget(t *testing.T) {
	b := NewBudget(Limits{MaxConns: 10, MaxConnsPerSource: -1, MaxOutbound: 6, MaxOutboundPerDest: -1, FirstRequest: time.Minute})
	srv := startOn(t, b, routes(nil))
	dial := b.Dial((&net.Dialer{}).DialContext)
	agent := sink(t)
	for i := 0; i < 4; i++ {
		conn, err := dial(context.Background(), "tcp", agent)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
	}
	openHalf(t, srv, 20)
	await(t, "the half-open connections to fill the budget", func() bool { return b.Stats().Evicted >= 20-6 })
	if s := b.Stats(); s.Open > 10 || s.Outbound != 4 {
		t.Fatalf("stats %+v: over a budget of 10, or a dialled connection given up", s)
	}
	if _, err := healthz(srv, 2*time.Second); err != nil {
		t.Fatalf("a fresh client at a full budget: %v", err)
	}
	// The fresh client's connection closes on the server after healthz
	// returns; until then the budget still counts it, and a newcomer would
	// take a pending connection's place instead of the freed one.
	await(t, "the fresh client's place to be given back", func() bool { return b.Stats().Open == 9 })
	openHalf(t, srv, 1) // the fresh client's place, taken again
	await(t, "the budget to be full again", func() bool { return b.Stats().Open == 10 })
	evicted := b.Stats().Evicted
	conn, err := dial(context.Background(), "tcp", agent)
	if err != nil {
		t.Fatalf("a dial at a budget full of pending connections: %v", err)
	}
	defer conn.Close()
	if s := b.Stats(); s.Evicted != evicted+1 || s.Open > 10 || s.Outbound != 5 {
		t.Fatalf("stats %+v: the dial did not take a pending connection's place", s)
	}
}

// TestDefaultLimits_DialCaps: by default half the budget may be dialled
// connections, a quarter of that to one address (at least 16, at most
// 4,096, never more than the dial cap).
func TestDefaultLimits_DialCaps(t *testing.T) {
	for _, tc := range []struct {
		in                Limits
		outbound, perDest int
	}{
		{Limits{MaxConns: 64}, 32, 16},
		{Limits{MaxConns: 20}, 10, 10},
		{Limits{MaxConns: 1000}, 500, 125},
		{Limits{MaxConns: 100000}, 50000, 4096},
		{Limits{MaxConns: -1}, -1, 4096},
		{Limits{MaxConns: 64, MaxOutbound: -1}, -1, 4096},
		{Limits{MaxConns: 64, MaxOutbound: 8, MaxOutboundPerDest: -1}, 8, -1},
	} {
		l := NewBudget(tc.in).Limits()
		if l.MaxOutbound != tc.outbound || l.MaxOutboundPerDest != tc.perDest {
			t.Errorf("%+v: MaxOutbound %d, MaxOutboundPerDest %d; want %d, %d", tc.in, l.MaxOutbound, l.MaxOutboundPerDest, tc.outbound, tc.perDest)
		}
	}
	if d := DefaultLimits(); d.MaxOutbound != d.MaxConns/2 || d.MaxOutboundPerDest < minOutboundPerDest || d.MaxOutboundPerDest > maxOutboundPerDest {
		t.Errorf("DefaultLimits %+v", d)
	}
}
