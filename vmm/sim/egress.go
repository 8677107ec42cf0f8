package sim

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/egress/nft"
	"github.com/hearthvm/hearth/egress/resolver"
	"github.com/hearthvm/hearth/vmm"
)

// guestAddr is slirp4netns's address for the guest (tap0, --configure),
// where the node's resolver listens for it: the guest's resolv.conf names
// it. A guest cannot bind port 53 there first (a port below 1024 in a
// namespace its user namespace does not own).
const guestAddr = "10.0.2.100"

var (
	_ vmm.EgressEnforcer = (*Driver)(nil)
	_ vmm.EgressChecker  = (*Driver)(nil)
)

// egressVM is what the driver holds for one VM of the egress lane: its
// network namespace, the node's resolver serving it, and whether the
// filter is still the skeleton this process prepared (Apply may only add).
type egressVM struct {
	nsfd     int
	filter   *nft.Filter
	resolver *resolver.Resolver
	fresh    bool
	pool     *egress.Policy
}

// startEgress prepares the filter of a VM's new network namespace (fresh),
// with its pool's policy, or takes over an existing one (a re-adopted VM:
// its table is kept) and serves the node's resolver in it. It owns a
// duplicate of nsfd.
func (d *Driver) startEgress(id string, nsfd int, pool *egress.Policy, fresh bool) error {
	fd, err := unix.FcntlInt(uintptr(nsfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sim: egress: %w", err)
	}
	filter, err := nft.Open(fd)
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("sim: %s: %w", id, err)
	}
	if fresh {
		if err := filter.Prepare(nft.Options{Resolver: netip.MustParseAddr(guestAddr), Pool: pool}); err != nil {
			_ = filter.Close()
			unix.Close(fd)
			return fmt.Errorf("sim: %s: %w", id, err)
		}
	}
	var pc net.PacketConn
	var ln net.Listener
	err = inNetns(fd, func() error {
		var err error
		if pc, err = net.ListenPacket("udp4", guestAddr+":53"); err != nil {
			return err
		}
		ln, err = net.Listen("tcp4", guestAddr+":53")
		return err
	})
	if err != nil {
		if pc != nil {
			pc.Close()
		}
		_ = filter.Close()
		unix.Close(fd)
		return fmt.Errorf("sim: %s: the resolver's sockets: %w", id, err)
	}
	res := resolver.New(resolver.Config{
		Pool:     pool,
		Upstream: d.dns,
		Sets:     nft.SetsFor,
		Pin: func(set string, addrs []netip.Addr, ttl time.Duration) error {
			return filter.Pin(set, addrs, ttl)
		},
		Dial: d.uplinkDial,
	})
	res.Serve(pc, ln)
	d.mu.Lock()
	old := d.egress[id]
	d.egress[id] = &egressVM{nsfd: fd, filter: filter, resolver: res, fresh: fresh, pool: pool}
	d.mu.Unlock()
	if old != nil {
		old.close()
	}
	return nil
}

func (e *egressVM) close() {
	e.resolver.Close()
	_ = e.filter.Close()
	unix.Close(e.nsfd)
}

// dropEgress stops a VM's resolver (its filter lives and dies with the
// namespace).
func (d *Driver) dropEgress(id string) {
	d.mu.Lock()
	e := d.egress[id]
	delete(d.egress, id)
	d.mu.Unlock()
	if e != nil {
		e.close()
	}
}

// CheckEgress implements vmm.EgressChecker: the driver enforces every
// valid policy.
func (d *Driver) CheckEgress(p *egress.Policy) error {
	if errs := p.Validate(nil); len(errs) > 0 {
		return fmt.Errorf("sim: invalid egress policy: %v", errs.ToAggregate())
	}
	return nil
}

// SetEgress makes h enforce p: its filter (nft.Apply on the skeleton its
// boot prepared: additions only, the claim path's cost; or, for a VM this
// process re-adopted or already filtered, the table replaced) and its
// resolver's policy. A VM of the lane "none" has no network: nothing to do.
func (d *Driver) SetEgress(ctx context.Context, h vmm.Handle, p *egress.Policy) error {
	if errs := p.Validate(nil); len(errs) > 0 {
		return fmt.Errorf("sim: %s: invalid egress policy: %v", h.ID, errs.ToAggregate())
	}
	d.mu.Lock()
	e := d.egress[h.ID]
	d.mu.Unlock()
	if e == nil {
		dir, err := d.dirOf(h)
		if err != nil {
			return err
		}
		r, err := readRecord(dir)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", vmm.ErrNotRunning, h.ID, err)
		}
		if r.Net != NetEgress {
			return nil
		}
		return fmt.Errorf("%w: %s: no egress filter (not started by this driver)", vmm.ErrNotRunning, h.ID)
	}
	if !e.fresh {
		if err := e.filter.Prepare(nft.Options{Resolver: netip.MustParseAddr(guestAddr), Pool: e.pool}); err != nil {
			return fmt.Errorf("sim: %s: %w", h.ID, err)
		}
	}
	if err := e.filter.Apply(p); err != nil {
		return fmt.Errorf("sim: %s: %w", h.ID, err)
	}
	d.mu.Lock()
	e.fresh = false
	d.mu.Unlock()
	e.resolver.SetPolicy(p)
	return nil
}

// uplinkDial connects to an upstream DNS server from the uplink namespace
// (Options.UplinkNetns), else from the driver's own.
func (d *Driver) uplinkDial(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.uplink < 0 {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	var c net.Conn
	err := inNetns(d.uplink, func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// upstreamDNS returns the servers the resolvers forward to: dns when set,
// else the nameservers of the uplink namespace's resolv.conf (ip-netns's
// /etc/netns/<name>/resolv.conf) or the host's /etc/resolv.conf.
func upstreamDNS(dnsServers []string, uplink string) ([]string, error) {
	if len(dnsServers) > 0 {
		out := make([]string, 0, len(dnsServers))
		for _, s := range dnsServers {
			if _, _, err := net.SplitHostPort(s); err != nil {
				s = net.JoinHostPort(s, "53")
			}
			out = append(out, s)
		}
		return out, nil
	}
	files := []string{"/etc/resolv.conf"}
	if uplink != "" {
		files = append([]string{filepath.Join("/etc/netns", filepath.Base(uplink), "resolv.conf")}, files...)
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			continue
		}
		cc, err := dns.ClientConfigFromFile(f)
		if err != nil {
			return nil, fmt.Errorf("sim: %s: %w", f, err)
		}
		var out []string
		for _, s := range cc.Servers {
			out = append(out, net.JoinHostPort(strings.Trim(s, "[]"), cc.Port))
		}
		return out, nil
	}
	return nil, nil
}

// Close releases what the driver holds in this process for its VMs — the
// agent forwarders and the egress resolvers, and the uplink namespace —
// and leaves every VM running, as the process's exit would: a new driver
// on the same root re-adopts them (Restore). The driver is unusable
// afterwards.
func (d *Driver) Close() error {
	d.mu.Lock()
	fwds, egs := d.fwd, d.egress
	d.fwd, d.egress = map[string]*forwarder{}, map[string]*egressVM{}
	d.mu.Unlock()
	for _, f := range fwds {
		f.close()
	}
	for _, e := range egs {
		e.close()
	}
	if d.uplink >= 0 {
		unix.Close(d.uplink)
		d.uplink = -1
	}
	return nil
}
