// Package testnet builds a small "internet" out of network namespaces for
// tests of egress policy: nothing it serves exists outside the namespaces
// it makes, so no test traffic leaves the machine.
//
// Start makes two namespaces joined by a veth pair:
//
//   - World holds every Host's addresses (documentation and benchmark
//     ranges such as 198.18.0.0/15 and 203.0.113.0/24, or private and
//     link-local ones a policy must block) on its loopback and serves, on
//     each, HTTP on port 80 and HTTPS on 443 (a self-signed certificate;
//     each answers "hello from <addr>"), and a DNS server at DNSAddr that
//     resolves every Host's names ("allowed.test", "*.wild.test", ...) to
//     its addresses;
//   - Uplink is where a sandbox's traffic leaves from (sim.Options
//     .UplinkNetns): its only route is into World, and ip-netns's
//     /etc/netns/<name>/resolv.conf names DNSAddr.
//
// It needs root and iproute2; the test is skipped without them.
package testnet

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// DNSAddr is the test network's DNS server (in World).
const DNSAddr = "198.18.255.53"

// Host is one machine of the test network.
type Host struct {
	// Addr is its IPv4 address.
	Addr string
	// Names resolve to Addr ("allowed.test", or "*.wild.test" for every
	// name below wild.test).
	Names []string
}

// Net is a running test network.
type Net struct {
	// World and Uplink are the namespaces' names (under /run/netns).
	World, Uplink string
	// UplinkPath is Uplink's path, for sim.Options.UplinkNetns.
	UplinkPath string
	// hits counts the requests World's servers answered, per address.
	hits map[string]*atomic.Int64
	// asked counts the DNS server's queries, per lower-case name.
	mu    sync.Mutex
	asked map[string]int
}

var seq atomic.Int32

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
}

// Start builds the network; it is torn down when the test ends.
func Start(t testing.TB, hosts ...Host) *Net {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("testnet needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("testnet needs iproute2's ip")
	}
	id := fmt.Sprintf("%d-%d", os.Getpid(), seq.Add(1))
	n := &Net{World: "hearth-world-" + id, Uplink: "hearth-uplink-" + id, hits: map[string]*atomic.Int64{}, asked: map[string]int{}}
	n.UplinkPath = "/run/netns/" + n.Uplink
	for _, ns := range []string{n.World, n.Uplink} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	in := func(ns string, args ...string) {
		t.Helper()
		run(t, append([]string{"ip", "netns", "exec", ns}, args...)...)
	}
	in(n.Uplink, "ip", "link", "add", "u0", "type", "veth", "peer", "name", "w0", "netns", n.World)
	in(n.Uplink, "ip", "link", "set", "lo", "up")
	in(n.Uplink, "ip", "link", "set", "u0", "up")
	in(n.Uplink, "ip", "addr", "add", "192.0.2.1/30", "dev", "u0")
	in(n.Uplink, "ip", "route", "add", "default", "via", "192.0.2.2")
	in(n.World, "ip", "link", "set", "lo", "up")
	in(n.World, "ip", "link", "set", "w0", "up")
	in(n.World, "ip", "addr", "add", "192.0.2.2/30", "dev", "w0")
	conf := filepath.Join("/etc/netns", n.Uplink)
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(conf) })
	if err := os.WriteFile(filepath.Join(conf, "resolv.conf"), []byte("nameserver "+DNSAddr+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addrs := map[string]bool{DNSAddr: true}
	for _, h := range hosts {
		addrs[h.Addr] = true
	}
	for a := range addrs {
		in(n.World, "ip", "addr", "add", a+"/32", "dev", "lo")
		n.hits[a] = &atomic.Int64{}
	}
	for a := range addrs {
		if a == DNSAddr {
			continue
		}
		hits := n.hits[a]
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			fmt.Fprintf(w, "hello from %s\n", a)
		})
		for _, port := range []string{"80", "443"} {
			ln := n.listen(t, "tcp4", net.JoinHostPort(a, port))
			srv := httptest.NewUnstartedServer(h)
			srv.Listener.Close()
			srv.Listener = ln
			if port == "443" {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			t.Cleanup(srv.Close)
		}
	}
	n.serveDNS(t, hosts)
	return n
}

// Hits is how many HTTP requests World's servers at addr answered.
func (n *Net) Hits(addr string) int64 { return n.hits[addr].Load() }

// Asked is how many queries for name the DNS server received.
func (n *Net) Asked(name string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.asked[strings.ToLower(name)]
}

// TLSConfig is for clients of the HTTPS servers (self-signed).
func TLSConfig() *tls.Config { return &tls.Config{InsecureSkipVerify: true} }

// listen opens a socket in World.
func (n *Net) listen(t testing.TB, network, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	n.inWorld(t, func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln
}

func (n *Net) inWorld(t testing.TB, f func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		fd, err := unix.Open("/run/netns/"+n.World, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
		}
		if err == nil {
			err = f()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatalf("testnet: in %s: %v", n.World, err)
	}
}

// serveDNS answers A queries for every host name (UDP and TCP).
func (n *Net) serveDNS(t testing.TB, hosts []Host) {
	t.Helper()
	h := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Authoritative = true
		name := strings.ToLower(strings.TrimSuffix(q.Question[0].Name, "."))
		n.mu.Lock()
		n.asked[name]++
		n.mu.Unlock()
		found := false
		for _, host := range hosts {
			for _, hn := range host.Names {
				if hn == name || strings.HasPrefix(hn, "*.") && strings.HasSuffix(name, hn[1:]) {
					found = true
					if q.Question[0].Qtype == dns.TypeA {
						rr, _ := dns.NewRR(fmt.Sprintf("%s 60 IN A %s", q.Question[0].Name, host.Addr))
						m.Answer = append(m.Answer, rr)
					}
				}
			}
		}
		if !found {
			m.SetRcode(q, dns.RcodeNameError)
		}
		_ = w.WriteMsg(m)
	})
	var pc net.PacketConn
	n.inWorld(t, func() error {
		var err error
		pc, err = net.ListenPacket("udp4", DNSAddr+":53")
		return err
	})
	ln := n.listen(t, "tcp4", DNSAddr+":53")
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
		go func() { _ = s.ActivateAndServe() }()
		t.Cleanup(func() { _ = s.Shutdown() })
	}
}

// RouteFromHost makes every Host's address and DNSAddr reachable from the
// test's own (the host's) network namespace, for a sandbox whose traffic
// leaves from there (qemu's passt): a veth pair from the host into World
// and a /32 route over it for each address — only those, so nothing else
// changes and no test traffic leaves the machine. The pair's own
// addresses are 198.19.255.253 (the host's end) and .254 (World's): no
// Host may use 198.19.255.252/30. Undone when the test ends (the pair
// dies with World).
func (n *Net) RouteFromHost(t testing.TB) {
	t.Helper()
	link := "hw" + strings.TrimPrefix(n.World, "hearth-world-")
	if len(link) > 15 {
		link = link[:15]
	}
	run(t, "ip", "link", "add", link, "type", "veth", "peer", "name", "h0", "netns", n.World)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", link).Run() })
	run(t, "ip", "link", "set", link, "up")
	run(t, "ip", "addr", "add", "198.19.255.253/30", "dev", link)
	run(t, "ip", "netns", "exec", n.World, "ip", "link", "set", "h0", "up")
	run(t, "ip", "netns", "exec", n.World, "ip", "addr", "add", "198.19.255.254/30", "dev", "h0")
	for a := range n.hits {
		run(t, "ip", "route", "add", a+"/32", "via", "198.19.255.254", "dev", link, "src", "198.19.255.253")
	}
}
