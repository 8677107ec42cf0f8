// Package resolver is the DNS resolver a node runs for each sandbox with
// an egress policy: the only name resolution its domain rules trust.
//
// It answers a name only when the policy could allow traffic for it
// (Allows); any other query is REFUSED without being forwarded, so a guest
// under an allow-list of domains cannot carry data out in the names it
// asks for (DNS exfiltration through the node's upstream). A policy that
// allows addresses (a CIDR) answers any name, since a name may point there.
// An answered query is forwarded to the node's upstream servers, and the
// A and AAAA records of the answer (at the end of any CNAME chain) are
// pinned into the filter's sets of every domain run matching the name
// (Config.Pin) before the answer is returned, each for its TTL but at
// least MinPin: the guest can connect to what it was told as soon as it
// is told. Names are matched case-insensitively; only standard queries
// of one question in class IN are answered (others: NOTIMP or FORMERR).
//
// Trade-off (docs/API.md): a domain rule allows the addresses its name
// resolved to, for any host name or SNI sent to them — a CDN address
// shared by an allowed and a denied site reaches both. The alternative,
// an SNI/Host-inspecting proxy, reads only TLS and HTTP and breaks
// everything else; the resolver covers every protocol and never
// terminates the guest's TLS.
//
// The resolver serves sockets its caller opened (in the sandbox's network
// namespace, on a port below 1024 the guest cannot bind first); it holds
// no state but its policy, so a node restart re-creates it from the
// sandbox's record.
package resolver

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/hearthvm/hearth/egress"
)

// MinPin is the shortest a resolved address stays pinned: clients cache
// answers a little past their TTL, and a zero-TTL answer must still be
// usable for the connect that follows it.
const MinPin = 30 * time.Second

// MaxInFlight bounds the queries one resolver forwards at once; past it a
// query is answered SERVFAIL (a guest cannot make the node flood its
// upstream).
const MaxInFlight = 32

// Config configures one sandbox's resolver.
type Config struct {
	// Policy is the claim's egress policy; nil answers every name (the
	// egress lane without a policy, and a warm VM before its claim).
	Policy *egress.Policy
	// Pool is the pool's policy (a SandboxTemplate's), fixed as the VM
	// boots: a name is answered only if both policies allow it (Allows).
	Pool *egress.Policy
	// Upstream are the servers ("host:port") queries are forwarded to, in
	// order of preference.
	Upstream []string
	// Sets returns the filter sets an answer for name is pinned into
	// (nft.SetsFor the pool's and the claim's policies).
	Sets func(pool, claim *egress.Policy, name string) []string
	// Pin adds addrs to set for ttl (nft.Pin in the sandbox's namespace).
	Pin func(set string, addrs []netip.Addr, ttl time.Duration) error
	// Timeout bounds one upstream exchange; default 3s.
	Timeout time.Duration
	// Dial opens the connection to an upstream server ("udp" or "tcp");
	// default a net.Dialer's (the caller's network namespace).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Resolver serves one sandbox.
type Resolver struct {
	cfg     Config
	mu      sync.RWMutex
	policy  *egress.Policy
	slots   chan struct{}
	servers []*dns.Server
}

// New returns a resolver for cfg; Serve starts it.
func New(cfg Config) *Resolver {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 3 * time.Second
	}
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{}).DialContext
	}
	return &Resolver{cfg: cfg, policy: cfg.Policy, slots: make(chan struct{}, MaxInFlight)}
}

// SetPolicy replaces the policy (a warm VM's resolver learns it at claim).
func (r *Resolver) SetPolicy(p *egress.Policy) {
	r.mu.Lock()
	r.policy = p
	r.mu.Unlock()
}

// Serve answers on udp and tcp (either may be nil) until Close.
func (r *Resolver) Serve(udp net.PacketConn, tcp net.Listener) {
	h := dns.HandlerFunc(r.handle)
	r.mu.Lock()
	if udp != nil {
		r.servers = append(r.servers, &dns.Server{PacketConn: udp, Handler: h, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	}
	if tcp != nil {
		r.servers = append(r.servers, &dns.Server{Listener: tcp, Handler: h, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
			IdleTimeout: func() time.Duration { return 5 * time.Second }, MaxTCPQueries: 64})
	}
	servers := append([]*dns.Server(nil), r.servers...)
	r.mu.Unlock()
	for _, s := range servers {
		go func() { _ = s.ActivateAndServe() }()
	}
}

// Close stops serving and closes the sockets.
func (r *Resolver) Close() {
	r.mu.Lock()
	servers := r.servers
	r.servers = nil
	r.mu.Unlock()
	for _, s := range servers {
		_ = s.Shutdown()
	}
}

// Allows reports whether p lets the resolver answer name: whether any
// address it could resolve to might be allowed. Walking the rules in
// order: the first domain rule matching name decides; an allow rule for
// addresses (a CIDR, or any destination) before that means yes — the name
// may point there; a deny of every destination (both families, every
// port) means no; past the last rule, Otherwise decides. A nil policy
// answers everything. So an allow-list of domains only answers exactly
// those names, and nothing else reaches the upstream.
func Allows(p *egress.Policy, name string) bool {
	if p == nil {
		return true
	}
	denied4, denied6 := false, false
	for _, rule := range p.Rules {
		switch {
		case rule.Domain != "":
			if egress.MatchesName(rule.Domain, name) {
				return rule.Action == egress.Allow
			}
		case rule.Action == egress.Allow:
			return true
		case len(rule.Ports) == 0 && len(rule.Except) == 0:
			if rule.CIDR == "" {
				return false
			}
			if pfx, err := egress.Prefix(rule.CIDR); err == nil && pfx.Bits() == 0 {
				denied4 = denied4 || pfx.Addr().Is4()
				denied6 = denied6 || pfx.Addr().Is6()
				if denied4 && denied6 {
					return false
				}
			}
		}
	}
	return p.Otherwise == egress.Allow
}

func (r *Resolver) handle(w dns.ResponseWriter, q *dns.Msg) {
	reply := func(rcode int) {
		m := new(dns.Msg)
		m.SetRcode(q, rcode)
		_ = w.WriteMsg(m)
	}
	if q.Opcode != dns.OpcodeQuery {
		reply(dns.RcodeNotImplemented)
		return
	}
	if len(q.Question) != 1 || q.Question[0].Qclass != dns.ClassINET {
		reply(dns.RcodeFormatError)
		return
	}
	name := strings.ToLower(strings.TrimSuffix(q.Question[0].Name, "."))
	r.mu.RLock()
	p := r.policy
	r.mu.RUnlock()
	if !Allows(r.cfg.Pool, name) || !Allows(p, name) {
		reply(dns.RcodeRefused)
		return
	}
	select {
	case r.slots <- struct{}{}:
		defer func() { <-r.slots }()
	default:
		reply(dns.RcodeServerFailure)
		return
	}
	ans, err := r.forward(q)
	if err != nil {
		reply(dns.RcodeServerFailure)
		return
	}
	if err := r.pin(p, name, ans); err != nil {
		// Never tell the guest an address the filter does not hold.
		reply(dns.RcodeServerFailure)
		return
	}
	ans.Id = q.Id
	_ = w.WriteMsg(ans)
}

// forward asks the upstream servers in turn (over TCP when an answer is
// truncated).
func (r *Resolver) forward(q *dns.Msg) (*dns.Msg, error) {
	out := q.Copy()
	out.Id = dns.Id()
	var last error = errors.New("resolver: no upstream")
	for _, up := range r.cfg.Upstream {
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
		ans, err := r.exchange(ctx, "udp", out, up)
		if err == nil && ans.Truncated {
			ans, err = r.exchange(ctx, "tcp", out, up)
		}
		cancel()
		if err == nil {
			return ans, nil
		}
		last = err
	}
	return nil, last
}

func (r *Resolver) exchange(ctx context.Context, network string, m *dns.Msg, up string) (*dns.Msg, error) {
	c, err := r.cfg.Dial(ctx, network, up)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ans, _, err := (&dns.Client{Net: network}).ExchangeWithConnContext(ctx, m, &dns.Conn{Conn: c})
	return ans, err
}

// pin adds the answer's addresses to the sets of name's domain runs.
func (r *Resolver) pin(p *egress.Policy, name string, ans *dns.Msg) error {
	if (p == nil && r.cfg.Pool == nil) || r.cfg.Sets == nil || r.cfg.Pin == nil {
		return nil
	}
	sets := r.cfg.Sets(r.cfg.Pool, p, name)
	if len(sets) == 0 {
		return nil
	}
	var addrs []netip.Addr
	ttl := uint32(0)
	for _, rr := range ans.Answer {
		var ip net.IP
		switch v := rr.(type) {
		case *dns.A:
			ip = v.A
		case *dns.AAAA:
			ip = v.AAAA
		default:
			continue
		}
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		addrs = append(addrs, a.Unmap())
		ttl = max(ttl, rr.Header().Ttl)
	}
	if len(addrs) == 0 {
		return nil
	}
	d := max(time.Duration(ttl)*time.Second, MinPin)
	for _, s := range sets {
		if err := r.cfg.Pin(s, addrs, d); err != nil {
			return err
		}
	}
	return nil
}
