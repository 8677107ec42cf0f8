package sim

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hearthvm/hearth/vmm"
)

// Network lanes.
const (
	NetNone   = "none"
	NetEgress = "egress"
)

// slirp4netns's fixed addresses (--cidr default 10.0.2.0/24).
const (
	slirpGateway = "10.0.2.2" // the host, as seen from the guest
	slirpTap     = "tap0"
)

// inNewNetns runs fn on an OS thread that first unshares a fresh network
// namespace (owned by the initial user namespace, since the driver runs as
// root there) with its loopback up and ICMP echo sockets open to every
// group (net.ipv4.ping_group_range, as Docker sets it: the guest's
// CAP_NET_RAW does not reach a namespace it does not own, so this is how
// ping works). Processes fn starts inherit that namespace. The thread is
// thrown away afterwards.
func inNewNetns(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("sim: unshare netns: %w", err)
			return
		}
		if err := loopbackUp(); err != nil {
			errc <- err
			return
		}
		// /proc/sys/net is the opening thread's namespace.
		if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 2147483647"), 0); err != nil {
			errc <- fmt.Errorf("sim: ping_group_range: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// inNetns runs fn on an OS thread that has joined the network namespace
// behind nsfd; the thread is restored (or discarded) afterwards.
func inNetns(nsfd int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("sim: setns: %w", err)
			return
		}
		err = fn()
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("sim: lo up: %w", err)
	}
	return nil
}

// openNetns opens pid's network namespace.
func openNetns(pid int) (int, error) {
	return unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
}

// dialNetns connects to 127.0.0.1:port inside the network namespace nsfd.
// The socket is created on a thread inside the namespace and belongs to it
// for good; connecting happens in the calling goroutine's usual way.
func dialNetns(ctx context.Context, nsfd, port int) (net.Conn, error) {
	var c net.Conn
	err := inNetns(nsfd, func() error {
		var err error
		d := net.Dialer{Timeout: 5 * time.Second}
		c, err = d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		return err
	})
	return c, err
}

// blockRoutes adds unreachable routes inside the netns for the addresses a
// guest must never reach: slirp's gateway (the host), link-local and
// metadata 169.254.0.0/16, and every address of the node. The routes live
// in a netns owned by the initial user namespace, so the guest (root only
// in its own user namespace) cannot remove them.
func blockRoutes(nsfd int) error {
	dests := []string{slirpGateway + "/32", "169.254.0.0/16"}
	if addrs, err := net.InterfaceAddrs(); err == nil { // the driver's (host) netns
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.IsLoopback() {
				continue
			}
			if ip4 := ipn.IP.To4(); ip4 != nil {
				dests = append(dests, ip4.String()+"/32")
			} else {
				dests = append(dests, ipn.IP.String()+"/128")
			}
		}
	}
	ipBin, err := exec.LookPath("ip")
	if err != nil {
		return fmt.Errorf("sim: the egress lane needs iproute2's ip: %w", err)
	}
	return inNetns(nsfd, func() error {
		for _, d := range dests {
			args := []string{"route", "add", "unreachable", d}
			if len(d) > 4 && d[len(d)-4:] == "/128" {
				args = append([]string{"-6"}, args...)
			}
			if out, err := exec.Command(ipBin, args...).CombinedOutput(); err != nil {
				return fmt.Errorf("sim: ip %v: %v: %s", args, err, out)
			}
		}
		return nil
	})
}

// startSlirp runs slirp4netns for the netns of pid (the VM's init) and
// waits until it has configured tap0. It runs as host root, sandboxed by
// its own --enable-sandbox/--enable-seccomp, with the host loopback
// mapping disabled, and exits when life (a pipe whose write end only the
// init holds) reports EOF, i.e. with the init. Its pid joins the VM's
// cgroup by the caller.
func startSlirp(ctx context.Context, pid, uplink int, logf, life *os.File) (*exec.Cmd, error) {
	bin, err := exec.LookPath("slirp4netns")
	if err != nil {
		return nil, fmt.Errorf("sim: the egress lane needs slirp4netns: %w", err)
	}
	rr, rw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer rr.Close()
	cmd := exec.Command(bin, "--configure", "--mtu=65520", "--disable-host-loopback",
		"--enable-sandbox", "--enable-seccomp", "--ready-fd=3", "--exit-fd=4", strconv.Itoa(pid), slirpTap)
	cmd.ExtraFiles = []*os.File{rw, life}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	// A mount namespace of its own, made private before slirp4netns runs
	// (Go does that for CLONE_NEWNS): its --enable-sandbox makes only "/"
	// private before detaching the old root, and the detach would
	// propagate to the host and unmount every mount nested below a shared
	// one (/run/netns/<name> among them).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Unshareflags: syscall.CLONE_NEWNS}
	start := cmd.Start
	if uplink >= 0 {
		// Its sockets, the guest's traffic, leave from the uplink namespace.
		start = func() error { return inNetns(uplink, cmd.Start) }
	}
	if err := start(); err != nil {
		rw.Close()
		return nil, fmt.Errorf("sim: starting slirp4netns: %w", err)
	}
	rw.Close()
	ready := make(chan error, 1)
	go func() {
		b := make([]byte, 1)
		_, err := io.ReadFull(rr, b)
		ready <- err
	}()
	select {
	case err := <-ready:
		if err == nil {
			return cmd, nil
		}
		err = fmt.Errorf("sim: slirp4netns did not become ready: %v", err)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, ctx.Err()
	}
}

// forwarder listens on a host loopback port and forwards every connection
// to the agent port inside a VM's netns.
type forwarder struct {
	ln   net.Listener
	nsfd int
	port int
	once sync.Once
	mu   sync.Mutex
	conn map[net.Conn]struct{}
}

// newForwarder listens on prefer (a previous Addr, kept across a node
// restart when that port is still free) or else on a fresh loopback port.
func newForwarder(nsfd, port int, prefer string) (*forwarder, error) {
	var ln net.Listener
	var err error
	if prefer != "" {
		if host, _, _ := net.SplitHostPort(prefer); host == "127.0.0.1" {
			ln, err = net.Listen("tcp", prefer)
		}
	}
	if ln == nil {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		unix.Close(nsfd)
		return nil, err
	}
	f := &forwarder{ln: ln, nsfd: nsfd, port: port, conn: map[net.Conn]struct{}{}}
	go f.serve()
	return f, nil
}

func (f *forwarder) addr() string { return f.ln.Addr().String() }

func (f *forwarder) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		go f.pipe(c)
	}
}

func (f *forwarder) track(c net.Conn, on bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conn == nil {
		return false
	}
	if on {
		f.conn[c] = struct{}{}
	} else {
		delete(f.conn, c)
	}
	return true
}

func (f *forwarder) pipe(c net.Conn) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	in, err := dialNetns(ctx, f.nsfd, f.port)
	cancel()
	if err != nil {
		return
	}
	defer in.Close()
	if !f.track(c, true) {
		return
	}
	defer f.track(c, false)
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(in, c)
	go cp(c, in)
	<-done
	<-done
}

// close stops listening, drops open connections and releases the netns.
func (f *forwarder) close() {
	f.once.Do(func() {
		_ = f.ln.Close()
		f.mu.Lock()
		for c := range f.conn {
			_ = c.Close()
		}
		f.conn = nil
		f.mu.Unlock()
		unix.Close(f.nsfd)
	})
}

// Dial connects to port on the VM's loopback inside its network namespace
// (any port a guest process listens on, at 127.0.0.1 or 0.0.0.0). It is how
// the node reaches guest ports besides the agent's: the connection is made
// from the host side, needs no published port and works on both lanes.
func (d *Driver) Dial(ctx context.Context, h vmm.Handle, port int) (net.Conn, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("sim: invalid port %d", port)
	}
	d.mu.Lock()
	f := d.fwd[h.ID]
	d.mu.Unlock()
	if f != nil {
		return dialNetns(ctx, f.nsfd, port)
	}
	dir, err := d.dirOf(h)
	if err != nil {
		return nil, err
	}
	r, err := readRecord(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", errNotRunning, h.ID)
	}
	if owned, err := d.owns(r); err != nil || !owned {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s", errNotRunning, h.ID)
	}
	fd, err := openNetns(r.PID)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	// The pid may have been reused while we opened its netns.
	if owned, err := d.owns(r); err != nil || !owned {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s", errNotRunning, h.ID)
	}
	return dialNetns(ctx, fd, port)
}
