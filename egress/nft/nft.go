package nft

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"go4.org/netipx"
	"golang.org/x/sys/unix"

	"github.com/hearthvm/hearth/egress"
)

// Table is the nftables table (family inet) a node's egress filter lives
// in, one per sandbox network namespace (or per VM path).
const Table = "hearth_egress"

// OwnerTable is the table (family inet) of the owner filters (OpenOwner)
// of a namespace: one hooked chain whose verdict map (ownersMap, by the
// sending socket's uid) jumps to each uid's chains, so a packet costs one
// lookup however many uids have a filter.
const OwnerTable = "hearth_egress_owners"

// ownersMap is OwnerTable's verdict map: uid → jump to its filter's chain.
const ownersMap = "owners"

// Options places the filter.
type Options struct {
	// Hook is the base chain's hook: "output" (the default) where the
	// guest's packets are locally generated (a sim sandbox's network
	// namespace), "forward" where they are routed (a VM's tap).
	Hook string
	// Resolver, when valid, is the node's resolver for the sandbox: DNS to
	// it (UDP and TCP port 53) is always allowed, before any rule.
	Resolver netip.Addr
	// Pool is the pool's policy (a SandboxTemplate's), installed with the
	// skeleton; a claim's own (Apply) holds in addition: a packet leaves
	// only if both allow it.
	Pool *egress.Policy
}

// The two policies' chains and the prefixes of their domain sets.
const (
	poolChain  = "pool"
	rulesChain = "rules"
	poolSets   = "p"
	claimSets  = "d"
)

// runSets names the set pair of the domain run starting at rule i of the
// policy whose sets have prefix (SetsFor's names); domainSet names one
// family's ("v4" or "v6") set of the pair.
func runSets(prefix string, i int) string { return fmt.Sprintf("%s%d", prefix, i) }

func domainSet(prefix string, i int, family string) string {
	return runSets(prefix, i) + "_" + family
}

// domainRunEnd returns the end (exclusive) of the run of domain rules that
// starts at rule i: those after it with its action and ports. compile
// gives a run one set pair; SetsFor pins into it.
func domainRunEnd(p *egress.Policy, i int) int {
	j := i + 1
	for ; j < len(p.Rules) && p.Rules[j].Domain != "" && sameRun(p.Rules[i], p.Rules[j]); j++ {
	}
	return j
}

// Prepare replaces f's table (Table, or an owner filter's OwnerTable) in
// its network namespace with the filter's skeleton, in one netlink
// transaction: a base chain on o.Hook that accepts — for an owner filter
// first every packet not sent by a socket of its uid — loopback and DNS
// to o.Resolver, then jumps
// to the pool chain (o.Pool: its allows return, its denies reject) and to
// the (empty) rules chain of the claim's policy, and a deny chain that
// rejects at once (a TCP reset, else ICMP administratively prohibited), so
// a denied call fails rather than hangs. With both empty everything is
// accepted. A node prepares a warm VM as it boots: replacing a table waits
// for the kernel's RCU grace period (milliseconds), which must not fall on
// a claim; Apply at claim time only adds.
func (f *Filter) Prepare(o Options) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.c
	t := &nftables.Table{Name: f.table, Family: nftables.TableFamilyINet}
	hook := nftables.ChainHookOutput
	if o.Hook == "forward" {
		hook = nftables.ChainHookForward
	}
	var ch *nftables.Chain
	var old ownerObjects
	if f.owner < 0 {
		if _, err := c.ListTableOfFamily(f.table, nftables.TableFamilyINet); err == nil {
			c.DelTable(t)
		}
		t = c.AddTable(t)
		addDeny(c, t)
		accept := nftables.ChainPolicyAccept
		ch = c.AddChain(&nftables.Chain{Name: "egress", Table: t, Type: nftables.ChainTypeFilter, Hooknum: hook, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	} else {
		hook = nftables.ChainHookOutput
		if err := f.ownerSkeleton(); err != nil {
			return err
		}
		var err error
		if old, err = f.ownerObjects(); err != nil {
			return err
		}
		f.prefix = fmt.Sprintf("u%dg%08x_", f.owner, rand.Uint32())
		ch = c.AddChain(&nftables.Chain{Name: f.prefix + "egress", Table: t})
	}
	pool := c.AddChain(&nftables.Chain{Name: f.prefix + poolChain, Table: t})
	if o.Pool != nil {
		if err := fill(c, t, pool, o.Pool, f.prefix+poolSets, true); err != nil {
			return err
		}
	}
	c.AddChain(&nftables.Chain{Name: f.prefix + rulesChain, Table: t})
	add := func(exprs ...expr.Any) { c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs}) }
	if hook == nftables.ChainHookOutput {
		add(&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname("lo")}, verdict(egress.Allow))
	}
	if o.Resolver.IsValid() {
		r := netip.PrefixFrom(o.Resolver.Unmap(), o.Resolver.Unmap().BitLen())
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			exprs := append(append(daddrIn(r), l4proto(proto)...), dport(53, 53)...)
			add(append(exprs, verdict(egress.Allow))...)
		}
	}
	add(&expr.Verdict{Kind: expr.VerdictJump, Chain: f.prefix + poolChain})
	add(&expr.Verdict{Kind: expr.VerdictJump, Chain: f.prefix + rulesChain})
	if f.owner >= 0 {
		// The uid's packets go to the new chains and the old ones go, in
		// this one transaction: no packet of the uid passes unfiltered.
		m := &nftables.Set{Table: t, Name: ownersMap, IsMap: true, KeyType: nftables.TypeUID, DataType: nftables.TypeVerdict}
		if len(old.chains) > 0 {
			if err := c.SetDeleteElements(m, []nftables.SetElement{{Key: f.uidKey()}}); err != nil {
				return err
			}
		}
		if err := c.SetAddElements(m, []nftables.SetElement{{Key: f.uidKey(), VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: ch.Name}}}); err != nil {
			return err
		}
		old.delete(c)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("egress: preparing the filter: %w", err)
	}
	return nil
}

// addDeny adds t's deny chain: it rejects at once.
func addDeny(c *nftables.Conn, t *nftables.Table) {
	deny := c.AddChain(&nftables.Chain{Name: "deny", Table: t})
	c.AddRule(&nftables.Rule{Table: t, Chain: deny, Exprs: append(l4proto(unix.IPPROTO_TCP), &expr.Reject{Type: unix.NFT_REJECT_TCP_RST})})
	c.AddRule(&nftables.Rule{Table: t, Chain: deny, Exprs: []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}}})
}

// ownerSkeletonMu serializes the owner table's creation in this process.
var ownerSkeletonMu sync.Mutex

// ownerSkeleton creates OwnerTable in f's namespace unless it is there, in
// one transaction: the deny chain, the verdict map, and the output chain
// that looks up the sending socket's uid in it.
func (f *Filter) ownerSkeleton() error {
	ownerSkeletonMu.Lock()
	defer ownerSkeletonMu.Unlock()
	c := f.c
	if _, err := c.ListTableOfFamily(f.table, nftables.TableFamilyINet); err == nil {
		return nil
	}
	t := c.AddTable(&nftables.Table{Name: f.table, Family: nftables.TableFamilyINet})
	addDeny(c, t)
	m := &nftables.Set{Table: t, ID: setID(), Name: ownersMap, IsMap: true, KeyType: nftables.TypeUID, DataType: nftables.TypeVerdict}
	if err := c.AddSet(m, nil); err != nil {
		return err
	}
	accept := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{Name: "egress", Table: t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: m.Name, SetID: m.ID, DestRegister: 0, IsDestRegSet: true},
	}})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("egress: creating table %s: %w", f.table, err)
	}
	return nil
}

func (f *Filter) uidKey() []byte {
	b := make([]byte, 4)
	binary.NativeEndian.PutUint32(b, uint32(f.owner))
	return b
}

// ownerObjects are an owner filter's chains and named sets in OwnerTable
// (all generations: their names start with "u<uid>g").
type ownerObjects struct {
	chains []*nftables.Chain
	sets   []*nftables.Set
}

func (f *Filter) ownerObjects() (ownerObjects, error) {
	var o ownerObjects
	mine := fmt.Sprintf("u%dg", f.owner)
	chains, err := f.c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return o, fmt.Errorf("egress: listing chains: %w", err)
	}
	for _, ch := range chains {
		if ch.Table.Name == f.table && strings.HasPrefix(ch.Name, mine) {
			o.chains = append(o.chains, ch)
		}
	}
	if len(o.chains) == 0 {
		return o, nil
	}
	sets, err := f.c.GetSets(&nftables.Table{Name: f.table, Family: nftables.TableFamilyINet})
	if err != nil {
		return o, fmt.Errorf("egress: listing sets: %w", err)
	}
	for _, s := range sets {
		if strings.HasPrefix(s.Name, mine) {
			o.sets = append(o.sets, s)
		}
	}
	return o, nil
}

// delete removes the objects (the caller removed the map's jump to them):
// every chain's rules first, so nothing refers to a chain or set deleted.
func (o ownerObjects) delete(c *nftables.Conn) {
	for _, ch := range o.chains {
		c.FlushChain(ch)
	}
	for _, ch := range o.chains {
		c.DelChain(ch)
	}
	for _, s := range o.sets {
		c.DelSet(s)
	}
}

// fill adds p's lines (compile) to chain ch, then Otherwise. In the pool
// chain (then) an allow returns to the base chain, which goes on to the
// claim's rules; in the rules chain an allow accepts.
func fill(c *nftables.Conn, t *nftables.Table, ch *nftables.Chain, p *egress.Policy, sets string, then bool) error {
	lines, err := compile(p)
	if err != nil {
		return err
	}
	v := func(a egress.Action) expr.Any {
		if a == egress.Allow && then {
			return &expr.Verdict{Kind: expr.VerdictReturn}
		}
		return verdict(a)
	}
	for _, l := range lines {
		dsts, err := l.destinations(c, t, sets)
		if err != nil {
			return err
		}
		for _, d := range dsts {
			for _, l4 := range portMatches(l.ports) {
				exprs := append(append(append([]expr.Any{}, d...), l4...), v(l.action))
				c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs})
			}
		}
	}
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{v(p.Otherwise)}})
	return nil
}

// Apply fills the prepared rules chain in f's namespace with
// the filter p means (compile), in one netlink transaction that only adds
// (the chain must be empty: a VM as Prepare left it): the first matching
// line decides, Otherwise ends the chain. A nil policy adds nothing
// (everything is accepted). p must have passed Validate: a rule Apply
// cannot express is an error, never a wider rule.
func (f *Filter) Apply(p *egress.Policy) error {
	if p == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.c
	t := &nftables.Table{Name: f.table, Family: nftables.TableFamilyINet}
	if err := fill(c, t, &nftables.Chain{Name: f.prefix + rulesChain, Table: t}, p, f.prefix+claimSets, false); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("egress: applying the filter: %w", err)
	}
	return nil
}

// line is one matching line of the compiled filter: a run of consecutive
// policy rules with one action and one port list whose destinations can
// share a match — CIDRs without excepts (an address set per family), or
// domains (one pinned set pair, named for its first rule) — or a single rule.
type line struct {
	action egress.Action
	ports  []egress.Port
	// exactly one of:
	any    bool             // every destination
	cidr   netip.Prefix     // one CIDR with excepts
	except []netip.Prefix   // cidr's excepts
	v4, v6 []netipx.IPRange // a CIDR run; nil and all4/all6 false: no address of that family
	all4   bool             // the run holds 0.0.0.0/0
	all6   bool             // the run holds ::/0
	domain int              // a domain run: the index of its first rule (its sets' names); -1 otherwise
}

// compile turns p into lines: runs merge, order is kept, the meaning is
// Decide's (the kernel test checks it).
func compile(p *egress.Policy) ([]line, error) {
	var out []line
	for i := 0; i < len(p.Rules); {
		r := p.Rules[i]
		l := line{action: r.Action, ports: r.Ports, domain: -1}
		j := i + 1
		switch {
		case r.Domain != "":
			l.domain, j = i, domainRunEnd(p, i)
		case r.CIDR != "" && len(r.Except) > 0:
			pfx, err := egress.Prefix(r.CIDR)
			if err != nil {
				return nil, fmt.Errorf("egress: rule %d: %w", i, err)
			}
			l.cidr = pfx
			for _, e := range r.Except {
				q, err := egress.Prefix(e)
				if err != nil {
					return nil, fmt.Errorf("egress: rule %d: %w", i, err)
				}
				l.except = append(l.except, q)
			}
		case r.CIDR != "":
			var b4, b6 netipx.IPSetBuilder
			for ; ; j++ {
				pfx, err := egress.Prefix(p.Rules[j-1].CIDR)
				if err != nil {
					return nil, fmt.Errorf("egress: rule %d: %w", j-1, err)
				}
				switch {
				case pfx.Bits() == 0 && pfx.Addr().Is4():
					l.all4 = true
				case pfx.Bits() == 0:
					l.all6 = true
				case pfx.Addr().Is4():
					b4.AddPrefix(pfx)
				default:
					b6.AddPrefix(pfx)
				}
				if j == len(p.Rules) || !sameRun(r, p.Rules[j]) || p.Rules[j].CIDR == "" || len(p.Rules[j].Except) > 0 {
					break
				}
			}
			s4, err := b4.IPSet()
			if err != nil {
				return nil, err
			}
			s6, err := b6.IPSet()
			if err != nil {
				return nil, err
			}
			if !l.all4 {
				l.v4 = s4.Ranges()
			}
			if !l.all6 {
				l.v6 = s6.Ranges()
			}
		default:
			l.any = true
		}
		out = append(out, l)
		i = j
	}
	return out, nil
}

// sameRun reports whether b may join a's run: one action, one port list.
func sameRun(a, b egress.Rule) bool {
	if a.Action != b.Action || len(a.Ports) != len(b.Ports) {
		return false
	}
	for k := range a.Ports {
		if a.Ports[k] != b.Ports[k] {
			return false
		}
	}
	return true
}

// destinations is a line's destination matches, one per rule it needs
// (sets are added to the table here).
func (l line) destinations(c *nftables.Conn, t *nftables.Table, sets string) ([][]expr.Any, error) {
	switch {
	case l.any:
		return [][]expr.Any{nil}, nil
	case l.domain >= 0:
		var out [][]expr.Any
		for _, fam := range []string{"v4", "v6"} {
			s := &nftables.Set{Table: t, ID: setID(), Name: domainSet(sets, l.domain, fam), KeyType: keyType(fam == "v4"), HasTimeout: true}
			if err := c.AddSet(s, nil); err != nil {
				return nil, err
			}
			out = append(out, append(daddr(fam == "v4"), &expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID}))
		}
		return out, nil
	case l.cidr.IsValid():
		m := daddrIn(l.cidr)
		for _, q := range l.except {
			m = append(m, daddr(l.cidr.Addr().Is4())[2]) // reload the address
			m = append(m, prefixCmp(q, expr.CmpOpNeq)...)
		}
		return [][]expr.Any{m}, nil
	}
	var out [][]expr.Any
	for _, fam := range []struct {
		v4     bool
		all    bool
		ranges []netipx.IPRange
	}{{true, l.all4, l.v4}, {false, l.all6, l.v6}} {
		switch {
		case fam.all:
			out = append(out, daddr(fam.v4)[:2]) // the family alone
		case len(fam.ranges) > 0:
			// "__set%d" is what the kernel names an anonymous set by; the
			// id is ours (setID).
			s := &nftables.Set{Table: t, ID: setID(), Name: "__set%d", Anonymous: true, Constant: true, Interval: true, KeyType: keyType(fam.v4)}
			if err := c.AddSet(s, intervalElements(fam.ranges)); err != nil {
				return nil, err
			}
			out = append(out, append(daddr(fam.v4), &expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID}))
		}
	}
	return out, nil
}

// setIDs numbers the sets this process adds. google/nftables allocates a
// set's id from an unguarded package variable when it has none, a data
// race between two filters (two VMs booting at once); giving every set an
// id of our own skips that.
var setIDs atomic.Uint32

func setID() uint32 { return setIDs.Add(1) }

func keyType(v4 bool) nftables.SetDatatype {
	if v4 {
		return nftables.TypeIPAddr
	}
	return nftables.TypeIP6Addr
}

// intervalElements encodes sorted, disjoint ranges as an interval set's
// elements, as nft does: each range's first address, and the address
// after its last flagged as an interval end (none past the family's last
// address); an end at the zero address first when no range starts there.
func intervalElements(rs []netipx.IPRange) []nftables.SetElement {
	var els []nftables.SetElement
	if zero := netip.IPv4Unspecified(); !rs[0].From().Is4() {
		if rs[0].From() != netip.IPv6Unspecified() {
			els = append(els, nftables.SetElement{Key: netip.IPv6Unspecified().AsSlice(), IntervalEnd: true})
		}
	} else if rs[0].From() != zero {
		els = append(els, nftables.SetElement{Key: zero.AsSlice(), IntervalEnd: true})
	}
	for _, r := range rs {
		els = append(els, nftables.SetElement{Key: r.From().AsSlice()})
		if next := r.To().Next(); next.IsValid() {
			els = append(els, nftables.SetElement{Key: next.AsSlice(), IntervalEnd: true})
		}
	}
	return els
}

// SetsFor returns the sets the node's resolver pins an answer for name
// into: those of every domain run, of the pool's policy and of the
// claim's, with a rule matching name.
func SetsFor(pool, claim *egress.Policy, name string) []string {
	return append(domainRuns(pool, poolSets, name), domainRuns(claim, claimSets, name)...)
}

func domainRuns(p *egress.Policy, prefix, name string) []string {
	if p == nil {
		return nil
	}
	var out []string
	for i := 0; i < len(p.Rules); {
		if p.Rules[i].Domain == "" {
			i++
			continue
		}
		j := domainRunEnd(p, i)
		for _, r := range p.Rules[i:j] {
			if egress.MatchesName(r.Domain, name) {
				out = append(out, runSets(prefix, i))
				break
			}
		}
		i = j
	}
	return out
}

// Pin adds addrs (the node's resolver's answer for a name) to set (one of
// SetsFor's) in f's namespace, each for ttl (at least a
// second).
func (f *Filter) Pin(set string, addrs []netip.Addr, ttl time.Duration) error {
	if len(addrs) == 0 {
		return nil
	}
	ttl = max(ttl, time.Second)
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.c
	t := &nftables.Table{Name: f.table, Family: nftables.TableFamilyINet}
	var v4, v6 []nftables.SetElement
	for _, a := range addrs {
		a = a.Unmap()
		if a.Is4() {
			v4 = append(v4, nftables.SetElement{Key: a.AsSlice(), Timeout: ttl})
		} else {
			v6 = append(v6, nftables.SetElement{Key: a.AsSlice(), Timeout: ttl})
		}
	}
	for _, fam := range []struct {
		v4  bool
		els []nftables.SetElement
	}{{true, v4}, {false, v6}} {
		if len(fam.els) == 0 {
			continue
		}
		name := f.prefix + set + "_" + map[bool]string{true: "v4", false: "v6"}[fam.v4]
		if err := c.SetAddElements(&nftables.Set{Table: t, Name: name, KeyType: keyType(fam.v4), HasTimeout: true}, fam.els); err != nil {
			return err
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("egress: pinning %v: %w", addrs, err)
	}
	return nil
}

// Filter is one sandbox's filter: a lasting netlink connection into its
// network namespace (opened once, as the VM boots, so a claim's Apply
// pays no socket set-up), its operations serialized (a connection's
// batch is its own).
type Filter struct {
	mu    sync.Mutex
	c     *nftables.Conn
	table string
	owner int64 // the uid whose packets an owner filter sees; -1: every packet
	// prefix starts the names of an owner filter's chains and sets:
	// "u<uid>g<generation>_" (a new generation per Prepare); "" otherwise.
	prefix string
}

// Open opens the filter of the network namespace behind nsfd (-1: the
// caller's); Close releases it (the table stays with the namespace).
func Open(nsfd int) (*Filter, error) {
	opts := []nftables.ConnOption{nftables.AsLasting()}
	if nsfd >= 0 {
		opts = append(opts, nftables.WithNetNSFd(nsfd))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("egress: netlink: %w", err)
	}
	return &Filter{c: c, table: Table, owner: -1}, nil
}

// OpenOwner opens the owner filter of uid in the network namespace behind
// nsfd (-1: the caller's): chains in OwnerTable that only the packets that
// sockets of uid send reach (meta skuid, through the table's verdict map)
// — for a VM whose network is a host process running as its own uid
// (qemu's passt), which shares the host's namespace with everything else.
// Hook "output" (its packets are locally generated). Its chains outlive
// the process: a new Filter of the uid takes them over, Delete removes
// them.
func OpenOwner(nsfd int, uid uint32) (*Filter, error) {
	f, err := Open(nsfd)
	if err != nil {
		return nil, err
	}
	f.table, f.owner = OwnerTable, int64(uid)
	if _, err := f.c.ListTableOfFamily(f.table, nftables.TableFamilyINet); err == nil {
		old, err := f.ownerObjects()
		if err != nil {
			_ = f.Close()
			return nil, err
		}
		for _, ch := range old.chains {
			if p, ok := strings.CutSuffix(ch.Name, "egress"); ok {
				f.prefix = p
			}
		}
	}
	return f, nil
}

// Delete removes f's filter: a namespace's table, or an owner filter's
// chains and sets and its uid's entry in the verdict map (its VM ended).
func (f *Filter) Delete() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &nftables.Table{Name: f.table, Family: nftables.TableFamilyINet}
	if _, err := f.c.ListTableOfFamily(f.table, nftables.TableFamilyINet); err != nil {
		return nil
	}
	if f.owner < 0 {
		f.c.DelTable(t)
	} else {
		old, err := f.ownerObjects()
		if err != nil {
			return err
		}
		if len(old.chains) == 0 {
			return nil
		}
		m := &nftables.Set{Table: t, Name: ownersMap, IsMap: true, KeyType: nftables.TypeUID, DataType: nftables.TypeVerdict}
		if err := f.c.SetDeleteElements(m, []nftables.SetElement{{Key: f.uidKey()}}); err != nil {
			return err
		}
		old.delete(f.c)
		f.prefix = ""
	}
	if err := f.c.Flush(); err != nil {
		return fmt.Errorf("egress: deleting the filter: %w", err)
	}
	return nil
}

// Close releases the netlink connection.
func (f *Filter) Close() error { return f.c.CloseLasting() }

func verdict(a egress.Action) expr.Any {
	if a == egress.Allow {
		return &expr.Verdict{Kind: expr.VerdictAccept}
	}
	return &expr.Verdict{Kind: expr.VerdictJump, Chain: "deny"}
}

func ifname(s string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, s)
	return b
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
}

func port16(p int32) []byte {
	b := make([]byte, 2)
	binary.BigEndian.PutUint16(b, uint16(p))
	return b
}

// dport matches the transport header's destination port in [from, to].
func dport(from, to int32) []expr.Any {
	load := &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}
	if from == to {
		return []expr.Any{load, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: port16(from)}}
	}
	return []expr.Any{load, &expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: port16(from), ToData: port16(to)}}
}

// nfproto matches the packet's family, then loads its destination address.
func daddr(v4 bool) []expr.Any {
	if v4 {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		}
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV6}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 24, Len: 16},
	}
}

// prefixCmp compares the loaded address (register 1) with p: equal (in p)
// or not.
func prefixCmp(p netip.Prefix, op expr.CmpOp) []expr.Any {
	n := p.Addr().BitLen() / 8
	if p.Bits() == p.Addr().BitLen() {
		return []expr.Any{&expr.Cmp{Op: op, Register: 1, Data: p.Addr().AsSlice()}}
	}
	mask := make([]byte, n)
	for i := 0; i < p.Bits(); i++ {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	return []expr.Any{
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: uint32(n), Mask: mask, Xor: make([]byte, n)},
		&expr.Cmp{Op: op, Register: 1, Data: p.Addr().AsSlice()},
	}
}

// daddrIn matches a destination in p (the whole family for a /0).
func daddrIn(p netip.Prefix) []expr.Any {
	out := daddr(p.Addr().Is4())
	if p.Bits() == 0 {
		return out[:2] // the family alone
	}
	return append(out, prefixCmp(p, expr.CmpOpEq)...)
}

// portMatches is a rule's protocol and port matches, one per rule line
// (any: one empty match).
func portMatches(ports []egress.Port) [][]expr.Any {
	if len(ports) == 0 {
		return [][]expr.Any{nil}
	}
	out := make([][]expr.Any, 0, len(ports))
	for _, pt := range ports {
		proto := map[string]byte{egress.TCP: unix.IPPROTO_TCP, egress.UDP: unix.IPPROTO_UDP, egress.SCTP: unix.IPPROTO_SCTP}[pt.Proto()]
		m := l4proto(proto)
		if pt.Port != 0 {
			m = append(m, dport(pt.Port, pt.Last())...)
		}
		out = append(out, m)
	}
	return out
}
