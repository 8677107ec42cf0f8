package fleet_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/nodeapi"
)

// faultyNode is an http.RoundTripper in front of the real ones that makes
// one node address misbehave like a node killed at a bad moment.
type faultyNode struct {
	addr string
	mode atomic.Int32
}

const (
	nodeOK       = iota
	nodeHangsUp  // the request reaches the node, which acts; the answer is lost
	nodeHangsUp0 // the connection breaks before the node reads the request
	nodeDown     // nothing listens: connection refused
)

func (n *faultyNode) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host != n.addr {
		return http.DefaultTransport.RoundTrip(r)
	}
	switch n.mode.Load() {
	case nodeHangsUp:
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return nil, io.ErrUnexpectedEOF
	case nodeHangsUp0:
		return nil, syscall.ECONNRESET
	case nodeDown:
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	return http.DefaultTransport.RoundTrip(r)
}

// A node killed after it recorded a claim and before it answered: the
// claim is a clean 503 (never a 500), and a retry of the same name is
// never delivered a second microVM on another node — while the node is
// down it is 503 (in doubt), once it is back it is the node's 409. Found
// by e2e/fault_test.go (node kill -9: "Post .../v1/claim: EOF" was a 500).
func TestFleet_ClaimWhoseAnswerIsLostIsNeverDoubled(t *testing.T) {
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 2, 2)
	ctx := context.Background()
	bad := &faultyNode{addr: f.Nodes[0].Addr}
	fl := f.NewFleet(t, fleet.Config{Seed: 5, HTTP: &http.Client{Transport: bad}})

	// Only node-0 advertises: the first claim goes there, and its answer is lost.
	f.View.Set(f.Nodes[0].Inventory())
	bad.mode.Store(nodeHangsUp)
	_, err := fl.Claim(ctx, nodeapi.ClaimFor(key, "ns/a"))
	var unknown *fleet.ErrOutcomeUnknown
	if !errors.As(err, &unknown) || unknown.Node != f.Nodes[0].Name || fleet.HTTPStatus(err) != http.StatusServiceUnavailable {
		t.Fatalf("claim whose answer was lost = %v (status %d), want ErrOutcomeUnknown from node-0, 503", err, fleet.HTTPStatus(err))
	}
	held, err := f.Nodes[0].Client.GetByRef(ctx, "ns/a")
	if err != nil || len(held) != 1 {
		t.Fatalf("node-0 holds ns/a: %v, %v; the test needs the claim to have landed", held, err)
	}

	// node-0 is down; node-1 advertises warm capacity: the retry must not claim there.
	f.Publish()
	bad.mode.Store(nodeDown)
	for i := 0; i < 3; i++ {
		_, err = fl.Claim(ctx, nodeapi.ClaimFor(key, "ns/a"))
		var doubt *fleet.ErrClaimInDoubt
		if !errors.As(err, &doubt) || fleet.HTTPStatus(err) != http.StatusServiceUnavailable {
			t.Fatalf("retry while node-0 is down = %v (status %d), want ErrClaimInDoubt, 503", err, fleet.HTTPStatus(err))
		}
	}
	if l, _ := f.Nodes[1].Client.GetByRef(ctx, "ns/a"); len(l) != 0 {
		t.Fatalf("node-1 was delivered a second ns/a: %v", l)
	}
	// Other names are not held up.
	if d, err := fl.Claim(ctx, nodeapi.ClaimFor(key, "ns/b")); err != nil || d.Node != f.Nodes[1].Name {
		t.Fatalf("claim of another name while node-0 is down: %+v, %v", d, err)
	}

	// node-0 is back, holding ns/a: the retry is its 409, and the name is indexed.
	bad.mode.Store(nodeOK)
	_, err = fl.Claim(ctx, nodeapi.ClaimFor(key, "ns/a"))
	if !errors.Is(err, nodeapi.ErrConflict) || fleet.HTTPStatus(err) != http.StatusConflict || !strings.Contains(err.Error(), "answer was lost") {
		t.Fatalf("retry once node-0 answers = %v (status %d), want the 409 of the landed claim", err, fleet.HTTPStatus(err))
	}
	if s, ok := fl.Held(ctx, "ns/a"); !ok || s.Node != f.Nodes[0].Name || s.ID != held[0].ID {
		t.Fatalf("Held(ns/a) = %+v %v, want node-0's %s", s, ok, held[0].ID)
	}
	if l, _ := f.Nodes[1].Client.GetByRef(ctx, "ns/a"); len(l) != 0 {
		t.Fatalf("node-1 holds ns/a: %v", l)
	}
}

// A claim whose connection broke before the node acted is in doubt too;
// once the node answers that it does not hold the name, the retry claims.
func TestFleet_ClaimInDoubtThatDidNotLandIsClaimedOnRetry(t *testing.T) {
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 1, 1)
	ctx := context.Background()
	bad := &faultyNode{addr: f.Nodes[0].Addr}
	fl := f.NewFleet(t, fleet.Config{Seed: 5, HTTP: &http.Client{Transport: bad}})
	f.View.Set(f.Nodes[0].Inventory())
	bad.mode.Store(nodeHangsUp0)
	if _, err := fl.Claim(ctx, nodeapi.ClaimFor(key, "ns/c")); fleet.HTTPStatus(err) != http.StatusServiceUnavailable {
		t.Fatalf("claim over a reset connection = %v (status %d), want 503", err, fleet.HTTPStatus(err))
	}
	bad.mode.Store(nodeOK)
	f.Publish()
	d, err := fl.Claim(ctx, nodeapi.ClaimFor(key, "ns/c"))
	if err != nil {
		t.Fatalf("retry once node-0 says it does not hold ns/c: %v", err)
	}
	if all, err := fl.AllByRef(ctx, "ns/c"); err != nil || len(all) != 1 || all[0].ID != d.ID {
		t.Fatalf("ns/c is held %v (%v), want once", all, err)
	}
	// A claim without a name keeps no doubt: nothing to double.
	f.View.Set(f.Nodes[0].Inventory())
	bad.mode.Store(nodeHangsUp0)
	if _, err := fl.Claim(ctx, nodeapi.ClaimFor(key, "")); fleet.HTTPStatus(err) != http.StatusServiceUnavailable {
		t.Fatalf("unnamed claim over a reset connection = %v, want 503", err)
	}
}

func TestHTTPStatus_NodeUnreachableIs503(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{&url.Error{Op: "Post", URL: "http://n/v1/claim", Err: io.EOF}, 503},
		{io.ErrUnexpectedEOF, 503},
		{syscall.ECONNRESET, 503},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, 503},
		{&fleet.ErrOutcomeUnknown{Node: "n", Err: io.EOF}, 503},
		{&fleet.ErrOutcomeUnknown{Node: "n", Err: context.DeadlineExceeded}, 504},
		{&fleet.ErrClaimInDoubt{Ref: "ns/a", Node: "n", Err: syscall.ECONNREFUSED}, 503},
		{errors.New("something else"), 500},
	} {
		if got := fleet.HTTPStatus(c.err); got != c.want {
			t.Errorf("HTTPStatus(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
