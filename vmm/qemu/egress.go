package qemu

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/egress/nft"
	"github.com/hearthvm/hearth/egress/resolver"
	"github.com/hearthvm/hearth/vmm"
)

// Egress policies on the "egress" lane. Each VM's passt runs as a uid of
// its own from [EgressUID, EgressUID+EgressUIDs), allocated as the VM is
// made (Boot, Clone), kept in its run directory (egress-uid) so a stop
// and Restore reuse it, and released by Destroy. The VM's filter is an
// owner filter of package egress/nft in the host's namespace (chains of
// the uid in table inet hearth_egress_owners: the pool's policy as it
// boots, the claim's added by SetEgress, both recorded in vm.json and
// installed again before passt starts on a Restore), holding every packet
// passt sends for the guest to the policies.
//
// DNS: passt forwards the guest's queries (to 10.0.2.3) to the host's
// first nameserver (hostDNS; passt drops a loopback one under
// --no-map-gw, and maps back only answers from the address it asked).
// The firewall (firewallRules) rewrites (DNAT) port 53 to that address
// from each uid to its VM's own resolver (package egress/resolver) on
// resolverAddr(uid), and lets each uid reach exactly its own resolver
// before it rejects the node's addresses; the answers come back as from
// the address passt asked. The resolver answers only names the policies
// allow and pins its answers into the filter's domain sets. Without a
// host nameserver passt could forward to, or with the firewall off, the
// guest's DNS does not pass a resolver of the node: domain rules are then
// vmm.ErrUnsupported.

// DefaultEgressUIDs is how many uids the egress lane uses from EgressUID
// when Options.EgressUIDs is 0: at most that many egress VMs on a node.
// With DefaultEgressUID the range ends below 65534 (nobody).
const DefaultEgressUIDs = 512

// uidFile is the run directory's record of its passt's uid.
const uidFile = "egress-uid"

// resolverAddr is the loopback address the resolver of uid's VM listens
// on: 127.78.<uid's high byte>.<its low byte>, one per uid (all of
// 127.0.0.0/8 is the loopback's).
func resolverAddr(uid int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 78, byte(uid >> 8), byte(uid)})
}

// pickUID returns the lowest uid of [base, base+n) not in used.
func pickUID(used map[int]string, base, n int) (int, bool) {
	for u := base; u < base+n; u++ {
		if _, ok := used[u]; !ok {
			return u, true
		}
	}
	return 0, false
}

// readUID reads dir's egress-uid (0: none).
func readUID(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, uidFile))
	if err != nil {
		return 0
	}
	u, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return u
}

// usedUIDs loads the allocation from the run directories under Root (a
// restarted driver's VMs keep theirs). Caller holds uidMu.
func (d *Driver) usedUIDs() map[int]string {
	if d.uids != nil {
		return d.uids
	}
	d.uids = map[int]string{}
	ents, _ := os.ReadDir(d.o.Root)
	for _, e := range ents {
		if u := readUID(filepath.Join(d.o.Root, e.Name())); e.IsDir() && u != 0 {
			d.uids[u] = e.Name()
		}
	}
	return d.uids
}

// allocUID gives VM id (run directory dir) a uid of its own for passt, or
// the one dir already records if it is in the driver's range (one from
// before the range changed is given up, its table deleted: the firewall
// would no longer cover it).
func (d *Driver) allocUID(id, dir string) (int, error) {
	d.uidMu.Lock()
	defer d.uidMu.Unlock()
	used := d.usedUIDs()
	if u := readUID(dir); u >= d.o.EgressUID && u < d.o.EgressUID+d.o.EgressUIDs {
		used[u] = id
		return u, nil
	} else if u != 0 {
		delete(used, u)
		if f, err := nft.OpenOwner(-1, uint32(u)); err == nil {
			_ = f.Delete()
			_ = f.Close()
		}
	}
	u, ok := pickUID(used, d.o.EgressUID, d.o.EgressUIDs)
	if !ok {
		return 0, fmt.Errorf("qemu: all %d egress uids (from %d) are in use: at most that many VMs on the egress lane", d.o.EgressUIDs, d.o.EgressUID)
	}
	if err := writeFile0600(filepath.Join(dir, uidFile), []byte(strconv.Itoa(u))); err != nil {
		return 0, err
	}
	used[u] = id
	return u, nil
}

// releaseUID returns id's uid (its run directory is gone).
func (d *Driver) releaseUID(id string) {
	d.uidMu.Lock()
	defer d.uidMu.Unlock()
	for u, v := range d.usedUIDs() {
		if v == id {
			delete(d.uids, u)
		}
	}
}

// egressVM is what the driver holds in this process for one VM of the
// egress lane: its filter, the resolver serving it, and whether the filter
// holds the pool's policy alone, as Prepare left it (Apply may only add).
type egressVM struct {
	filter   *nft.Filter
	resolver *resolver.Resolver
	pool     *egress.Policy
	fresh    bool
}

func (e *egressVM) close() {
	e.resolver.Close()
	_ = e.filter.Close()
}

// CheckEgress implements vmm.EgressChecker: checkPolicy's answer.
func (d *Driver) CheckEgress(p *egress.Policy) error {
	if err := d.checkPolicy(p); err != nil {
		return fmt.Errorf("qemu: %w", err)
	}
	return nil
}

// dnsRedirected reports whether the guests' DNS reaches their resolvers
// (firewallRules' DNAT): a host nameserver and the firewall on.
func (d *Driver) dnsRedirected() bool {
	return d.hostDNS.IsValid() && d.o.EgressFirewall != "off"
}

// checkPolicy refuses what the egress lane of this driver cannot enforce.
func (d *Driver) checkPolicy(p *egress.Policy) error {
	if errs := p.Validate(nil); len(errs) > 0 {
		return fmt.Errorf("invalid egress policy: %v", errs.ToAggregate())
	}
	if p == nil || d.dnsRedirected() {
		return nil
	}
	for i, r := range p.Rules {
		if r.Domain != "" {
			return fmt.Errorf("%w: egress rule %d (%q): domain rules need the node's resolver in the guests' DNS path (a nameserver in the host's /etc/resolv.conf, egress_firewall nft)", vmm.ErrUnsupported, i, r.Domain)
		}
	}
	return nil
}

// filterOptions places uid's filter: DNS to its resolver (or, when the
// guests' DNS is not redirected, to the host's nameserver) always passes.
func (d *Driver) filterOptions(uid int, pool *egress.Policy) nft.Options {
	r := resolverAddr(uid)
	if !d.dnsRedirected() {
		r = d.hostDNS
	}
	return nft.Options{Resolver: r, Pool: pool}
}

// startEgress makes rec's VM (uid) enforce its policies before its passt
// starts: its filter prepared with the pool's (rec.Spec.Egress) and, when
// SetEgress recorded one, the claim's; its resolver serving on
// resolverAddr(uid). prepare false takes over the table as it is (a VM
// still running that this process re-adopts).
func (d *Driver) startEgress(rec *record, uid int, prepare bool) error {
	id := rec.Handle.ID
	d.stopEgress(id) // a restart's: its resolver's address is this one's
	if err := d.checkPolicy(rec.Spec.Egress); err != nil {
		return fmt.Errorf("qemu: %s: the pool's %w", id, err)
	}
	filter, err := nft.OpenOwner(-1, uint32(uid))
	if err != nil {
		return fmt.Errorf("qemu: %s: %w", id, err)
	}
	fresh := false
	if prepare {
		if err := filter.Prepare(d.filterOptions(uid, rec.Spec.Egress)); err != nil {
			_ = filter.Close()
			return fmt.Errorf("qemu: %s: %w", id, err)
		}
		fresh = rec.Egress == nil
		if err := filter.Apply(rec.Egress); err != nil {
			_ = filter.Close()
			return fmt.Errorf("qemu: %s: %w", id, err)
		}
	}
	addr := net.JoinHostPort(resolverAddr(uid).String(), "53")
	pc, err := net.ListenPacket("udp4", addr)
	if err != nil {
		_ = filter.Close()
		return fmt.Errorf("qemu: %s: the resolver's socket: %w", id, err)
	}
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		pc.Close()
		_ = filter.Close()
		return fmt.Errorf("qemu: %s: the resolver's socket: %w", id, err)
	}
	res := resolver.New(resolver.Config{
		Pool:     rec.Spec.Egress,
		Policy:   rec.Egress,
		Upstream: d.o.DNS,
		Sets:     nft.SetsFor,
		Pin: func(set string, addrs []netip.Addr, ttl time.Duration) error {
			return filter.Pin(set, addrs, ttl)
		},
	})
	res.Serve(pc, ln)
	d.egMu.Lock()
	d.egress[id] = &egressVM{filter: filter, resolver: res, pool: rec.Spec.Egress, fresh: fresh}
	d.egMu.Unlock()
	return nil
}

// stopEgress stops id's resolver and lets go of its filter; its table
// stays (a stopped VM keeps its uid, and Restore prepares it again).
func (d *Driver) stopEgress(id string) {
	d.egMu.Lock()
	e := d.egress[id]
	delete(d.egress, id)
	d.egMu.Unlock()
	if e != nil {
		e.close()
	}
}

// dropEgress ends dir's VM's egress lane: its resolver and its filter's
// table. Destroy calls it after QEMU and passt are gone, then releases
// the uid.
func (d *Driver) dropEgress(id, dir string) error {
	d.stopEgress(id)
	uid := readUID(dir)
	if uid == 0 {
		return nil
	}
	f, err := nft.OpenOwner(-1, uint32(uid))
	if err != nil {
		return fmt.Errorf("qemu: %s: %w", id, err)
	}
	defer f.Close()
	if err := f.Delete(); err != nil {
		return fmt.Errorf("qemu: %s: %w", id, err)
	}
	return nil
}

var (
	_ vmm.EgressEnforcer = (*Driver)(nil)
	_ vmm.EgressChecker  = (*Driver)(nil)
)

// SetEgress implements vmm.EgressEnforcer: h's filter holds p in addition
// to its pool's policy (Apply on the table its boot prepared: additions
// only, the claim path's cost; a filter that already holds a claim's
// policy, or that this process re-adopted, is prepared again first), its
// resolver answers by p, and vm.json records p so a Restore installs it
// before the guest runs again. A domain rule the driver cannot enforce is
// vmm.ErrUnsupported (see checkPolicy). A VM of the lane "none" has no
// network: nothing to do.
func (d *Driver) SetEgress(ctx context.Context, h vmm.Handle, p *egress.Policy) error {
	if errs := p.Validate(nil); len(errs) > 0 {
		return fmt.Errorf("qemu: %s: invalid egress policy: %v", h.ID, errs.ToAggregate())
	}
	defer d.lock(h.ID)()
	rec, err := d.load(h)
	if err != nil {
		return err
	}
	if rec.Spec.Net != "egress" {
		return nil
	}
	if err := d.checkPolicy(p); err != nil {
		return fmt.Errorf("qemu: %s: %w", h.ID, err)
	}
	d.egMu.Lock()
	e := d.egress[h.ID]
	d.egMu.Unlock()
	if e == nil {
		return fmt.Errorf("%w: %s: no egress filter (not started by this driver)", vmm.ErrNotRunning, h.ID)
	}
	if !e.fresh {
		if err := e.filter.Prepare(d.filterOptions(readUID(rec.Handle.Dir), e.pool)); err != nil {
			return fmt.Errorf("qemu: %s: %w", h.ID, err)
		}
	}
	if err := e.filter.Apply(p); err != nil {
		return fmt.Errorf("qemu: %s: %w", h.ID, err)
	}
	d.egMu.Lock()
	e.fresh = p == nil
	d.egMu.Unlock()
	e.resolver.SetPolicy(p)
	rec.Egress = p
	return writeRecord(rec)
}

// hostDNS is the host's first IPv4 nameserver that is not a loopback
// address (/etc/resolv.conf): the one passt forwards the guest's DNS to.
// The zero Addr without one.
func hostDNS() netip.Addr {
	cc, err := dns.ClientConfigFromFile("/etc/resolv.conf")
	if err != nil {
		return netip.Addr{}
	}
	for _, s := range cc.Servers {
		if a, err := netip.ParseAddr(s); err == nil && a.Is4() && !a.IsLoopback() {
			return a
		}
	}
	return netip.Addr{}
}

// upstreamDNS is the resolvers' upstream servers: servers ("host" or
// "host:port") when given, else the host's /etc/resolv.conf's.
func upstreamDNS(servers []string) []string {
	if len(servers) == 0 {
		cc, err := dns.ClientConfigFromFile("/etc/resolv.conf")
		if err != nil {
			return nil
		}
		for _, s := range cc.Servers {
			servers = append(servers, net.JoinHostPort(strings.Trim(s, "[]"), cc.Port))
		}
		return servers
	}
	out := make([]string, 0, len(servers))
	for _, s := range servers {
		if _, _, err := net.SplitHostPort(s); err != nil {
			s = net.JoinHostPort(s, "53")
		}
		out = append(out, s)
	}
	return out
}

// Close releases what the driver holds in this process — the egress
// lane's resolvers and netlink connections — and leaves every VM running (their filters stay):
// a new driver on the same Root re-adopts them (Restore). The driver is
// unusable afterwards.
func (d *Driver) Close() error {
	d.egMu.Lock()
	egs := d.egress
	d.egress = map[string]*egressVM{}
	d.egMu.Unlock()
	for _, e := range egs {
		e.close()
	}
	return nil
}

func (d *Driver) hasEgress(id string) bool {
	d.egMu.Lock()
	defer d.egMu.Unlock()
	return d.egress[id] != nil
}
