package resolver

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/egress"
)

// upstream is a test DNS server: allowed.test, denied.test and
// *.wild.test (a CNAME to cdn.test) resolve; it counts what it is asked.
type upstream struct {
	addr  string
	asked atomic.Int32
	hold  chan struct{} // when set, every query waits for it to close
}

func startUpstream(t *testing.T, hold chan struct{}) *upstream {
	u := &upstream{hold: hold}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	u.addr = pc.LocalAddr().String()
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		u.asked.Add(1)
		if u.hold != nil {
			<-u.hold
		}
		m := new(dns.Msg)
		m.SetReply(q)
		name := strings.ToLower(q.Question[0].Name)
		rr := func(s string) dns.RR { r, err := dns.NewRR(s); require.NoError(t, err); return r }
		switch {
		case name == "allowed.test." && q.Question[0].Qtype == dns.TypeA:
			m.Answer = append(m.Answer, rr("allowed.test. 5 IN A 198.18.0.10"))
		case name == "allowed.test." && q.Question[0].Qtype == dns.TypeAAAA:
			m.Answer = append(m.Answer, rr("allowed.test. 600 IN AAAA 2001:db8::10"))
		case name == "denied.test.":
			m.Answer = append(m.Answer, rr("denied.test. 60 IN A 198.51.100.9"))
		case dns.IsSubDomain("wild.test.", name) && name != "wild.test.":
			m.Answer = append(m.Answer, rr(name+" 60 IN CNAME cdn.test."), rr("cdn.test. 60 IN A 198.18.0.20"))
		default:
			m.SetRcode(q, dns.RcodeNameError)
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return u
}

type pins struct {
	mu  sync.Mutex
	got map[string][]netip.Addr
	ttl map[string]time.Duration
	err error
}

// snapshot copies what was pinned.
func (p *pins) snapshot() (map[string][]netip.Addr, map[string]time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	got, ttl := map[string][]netip.Addr{}, map[string]time.Duration{}
	for k, v := range p.got {
		got[k] = append([]netip.Addr(nil), v...)
	}
	for k, v := range p.ttl {
		ttl[k] = v
	}
	return got, ttl
}

func (p *pins) pin(set string, addrs []netip.Addr, ttl time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	p.got[set] = append(p.got[set], addrs...)
	p.ttl[set] = ttl
	return nil
}

// sets names, for the claim's policy, the first domain rule matching name
// by its index (a stand-in for nft.SetsFor, whose runs the filter's tests
// cover).
func sets(_, p *egress.Policy, name string) []string {
	for i, r := range p.Rules {
		if r.Domain != "" && egress.MatchesName(r.Domain, name) {
			return []string{fmt.Sprint(i)}
		}
	}
	return nil
}

func start(t *testing.T, p *egress.Policy, up *upstream) (string, *pins, *Resolver) {
	t.Helper()
	pn := &pins{got: map[string][]netip.Addr{}, ttl: map[string]time.Duration{}}
	r := New(Config{Policy: p, Upstream: []string{up.addr}, Sets: sets, Pin: pn.pin, Timeout: 5 * time.Second})
	pc, ln := listenBoth(t)
	r.Serve(pc, ln)
	t.Cleanup(r.Close)
	return pc.LocalAddr().String(), pn, r
}

// listenBoth binds UDP and TCP on one loopback port, as a resolver serves
// both; the kernel picks the UDP port, which another test's TCP socket may
// hold, so it tries a few.
func listenBoth(t *testing.T) (net.PacketConn, net.Listener) {
	t.Helper()
	var err error
	for range 20 {
		var pc net.PacketConn
		pc, err = net.ListenPacket("udp", "127.0.0.1:0")
		require.NoError(t, err)
		var ln net.Listener
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			return pc, ln
		}
		pc.Close()
	}
	require.NoError(t, err)
	return nil, nil
}

func ask(t *testing.T, addr, network, name string, qtype uint16) *dns.Msg {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	var ans *dns.Msg
	require.Eventually(t, func() bool { // the servers start asynchronously
		var err error
		ans, _, err = (&dns.Client{Net: network, Timeout: 5 * time.Second}).Exchange(q, addr)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	return ans
}

var allowList = &egress.Policy{Otherwise: egress.Deny, Rules: []egress.Rule{
	{Action: egress.Deny, Domain: "bad.wild.test"},
	{Action: egress.Allow, Domain: "allowed.test"},
	{Action: egress.Allow, Domain: "*.wild.test"},
}}

func TestResolver_AnswersAndPinsAllowedNames(t *testing.T) {
	up := startUpstream(t, nil)
	addr, pn, _ := start(t, allowList, up)
	ans := ask(t, addr, "udp", "ALLOWED.test", dns.TypeA)
	require.Equal(t, dns.RcodeSuccess, ans.Rcode)
	require.Len(t, ans.Answer, 1)
	got, ttl := pn.snapshot()
	require.Equal(t, []netip.Addr{netip.MustParseAddr("198.18.0.10")}, got["1"])
	require.Equal(t, MinPin, ttl["1"], "a 5 s TTL is pinned for MinPin")
	ask(t, addr, "tcp", "allowed.test", dns.TypeAAAA)
	got, ttl = pn.snapshot()
	require.Equal(t, netip.MustParseAddr("2001:db8::10"), got["1"][1])
	require.Equal(t, 600*time.Second, ttl["1"])
	// A CNAME chain pins its final address under the asked name's rule.
	ans = ask(t, addr, "udp", "a.wild.test", dns.TypeA)
	require.Equal(t, dns.RcodeSuccess, ans.Rcode)
	got, _ = pn.snapshot()
	require.Equal(t, []netip.Addr{netip.MustParseAddr("198.18.0.20")}, got["2"])
}

func TestResolver_RefusesWithoutAskingUpstream(t *testing.T) {
	up := startUpstream(t, nil)
	addr, pn, r := start(t, allowList, up)
	for _, name := range []string{"denied.test", "secret-0123456789abcdef.exfil.example", "bad.wild.test", "wild.test"} {
		ans := ask(t, addr, "udp", name, dns.TypeA)
		require.Equal(t, dns.RcodeRefused, ans.Rcode, name)
	}
	require.Zero(t, up.asked.Load(), "a refused name must never reach the upstream (exfiltration)")
	got, _ := pn.snapshot()
	require.Empty(t, got)
	r.SetPolicy(nil)
	require.Equal(t, dns.RcodeSuccess, ask(t, addr, "udp", "denied.test", dns.TypeA).Rcode, "no policy: every name answered")
}

func TestResolver_DenyListPolicyForwardsEverythingAndPinsNothing(t *testing.T) {
	up := startUpstream(t, nil)
	addr, pn, _ := start(t, &egress.Policy{Otherwise: egress.Allow, Rules: []egress.Rule{{Action: egress.Deny, CIDR: "198.51.100.0/24"}}}, up)
	ans := ask(t, addr, "udp", "denied.test", dns.TypeA)
	require.Equal(t, dns.RcodeSuccess, ans.Rcode)
	got, _ := pn.snapshot()
	require.Empty(t, got)
}

func TestResolver_NeverAnswersWhatItCouldNotPin(t *testing.T) {
	up := startUpstream(t, nil)
	addr, pn, _ := start(t, allowList, up)
	pn.mu.Lock()
	pn.err = net.ErrClosed
	pn.mu.Unlock()
	require.Equal(t, dns.RcodeServerFailure, ask(t, addr, "udp", "allowed.test", dns.TypeA).Rcode)
}

func TestResolver_BoundsQueriesInFlight(t *testing.T) {
	up := startUpstream(t, make(chan struct{}))
	addr, _, _ := start(t, allowList, up)
	ask(t, addr, "udp", "wild.test", dns.TypeA) // refused: the servers are up
	var wg sync.WaitGroup
	for range MaxInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := new(dns.Msg)
			q.SetQuestion("allowed.test.", dns.TypeA)
			_, _, _ = (&dns.Client{Timeout: 30 * time.Second}).Exchange(q, addr)
		}()
	}
	require.Eventually(t, func() bool { return up.asked.Load() == MaxInFlight }, 20*time.Second, 5*time.Millisecond)
	require.Equal(t, dns.RcodeServerFailure, ask(t, addr, "udp", "allowed.test", dns.TypeA).Rcode)
	close(up.hold)
	wg.Wait()
}

func TestResolver_OnlyStandardQueries(t *testing.T) {
	up := startUpstream(t, nil)
	addr, _, _ := start(t, allowList, up)
	q := new(dns.Msg)
	q.SetQuestion("allowed.test.", dns.TypeA)
	q.Question = append(q.Question, q.Question[0])
	ans, _, err := (&dns.Client{Timeout: 5 * time.Second}).Exchange(q, addr)
	require.NoError(t, err)
	require.Equal(t, dns.RcodeFormatError, ans.Rcode)
	q = new(dns.Msg)
	q.SetQuestion("allowed.test.", dns.TypeA)
	q.Opcode = dns.OpcodeUpdate
	ans, _, err = (&dns.Client{Timeout: 5 * time.Second}).Exchange(q, addr)
	require.NoError(t, err)
	require.Equal(t, dns.RcodeNotImplemented, ans.Rcode)
	require.Zero(t, up.asked.Load())
}

func TestAllows(t *testing.T) {
	e2b := func(in egress.E2B) *egress.Policy {
		p, errs := egress.FromE2B(in)
		require.Empty(t, errs)
		return p
	}
	domainsOnly := e2b(egress.E2B{DenyOut: []string{egress.AllTraffic}, AllowOut: []string{"allowed.test", "*.wild.test"}})
	withAddress := e2b(egress.E2B{DenyOut: []string{egress.AllTraffic}, AllowOut: []string{"allowed.test", "10.1.2.3"}})
	noInternet := e2b(egress.E2B{AllowInternetAccess: new(bool), AllowOut: []string{"allowed.test"}})
	denyList := e2b(egress.E2B{DenyOut: []string{"203.0.113.0/24"}})
	for _, tc := range []struct {
		p    *egress.Policy
		name string
		want bool
	}{
		{nil, "anything.test", true},
		{domainsOnly, "allowed.test", true},
		{domainsOnly, "a.wild.test", true},
		{domainsOnly, "denied.test", false},
		{domainsOnly, "exfil-data.attacker.example", false},
		{withAddress, "denied.test", true}, // it may point at 10.1.2.3
		{noInternet, "allowed.test", true},
		{noInternet, "denied.test", false},
		{denyList, "denied.test", true},
		{egress.Default(), "denied.test", true}, // the public internet
		{&egress.Policy{Otherwise: egress.Deny}, "denied.test", false},
		{&egress.Policy{Otherwise: egress.Allow, Rules: []egress.Rule{{Action: egress.Deny}}}, "denied.test", false},
		{&egress.Policy{Otherwise: egress.Allow, Rules: []egress.Rule{{Action: egress.Deny, CIDR: "0.0.0.0/0"}}}, "denied.test", true}, // IPv6 still open
	} {
		require.Equal(t, tc.want, Allows(tc.p, tc.name), "%s under %+v", tc.name, tc.p)
	}
}

// A name is answered only if the pool's policy allows it too.
func TestResolver_PoolPolicyHoldsToo(t *testing.T) {
	up := startUpstream(t, nil)
	pn := &pins{got: map[string][]netip.Addr{}, ttl: map[string]time.Duration{}}
	pool := &egress.Policy{Otherwise: egress.Allow, Rules: []egress.Rule{{Action: egress.Deny, Domain: "*.wild.test"}}}
	r := New(Config{Policy: allowList, Pool: pool, Upstream: []string{up.addr}, Sets: sets, Pin: pn.pin})
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	r.Serve(pc, nil)
	t.Cleanup(r.Close)
	addr := pc.LocalAddr().String()
	require.Equal(t, dns.RcodeRefused, ask(t, addr, "udp", "a.wild.test", dns.TypeA).Rcode)
	require.Equal(t, dns.RcodeSuccess, ask(t, addr, "udp", "allowed.test", dns.TypeA).Rcode)
}
