// Package fakeguest is the "guest" inside the protocol-exact Firecracker and
// Cloud Hypervisor fakes (vmm/firecracker/fcfake, vmm/cloudhypervisor/chfake):
// it runs the real in-guest agent (package agent) in-process on a loopback port,
// serves the VMM's hybrid-vsock unix socket with the real CONNECT/OK
// handshake, stops moving bytes while the VM is paused, and keeps its state
// (the agent token the guest booted with) in a sparse "memory file" of the
// VM's nominal size, so snapshot and restore carry it like real guest RAM.
//
// It is test machinery for code that cannot run the real VMMs here; nothing in
// production imports it.
package fakeguest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hearthvm/hearth/agent"
	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

// State is what the guest's memory holds that matters to Hearth.
type State struct {
	Token   string `json:"token"`
	Cmdline string `json:"cmdline"`
	// Generation counts restores, so a test can tell a restored guest apart.
	Generation int `json:"generation"`
}

const memMagic = "HEARTH-FAKE-GUEST-MEM\n"

// WriteMem writes st at the start of a sparse file of size bytes at path.
func WriteMem(path string, size int64, st State) error {
	b, _ := json.Marshal(st)
	b = append([]byte(memMagic), append(b, '\n')...)
	if int64(len(b)) > size {
		return fmt.Errorf("memory size %d too small", size)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReadMem reads the state from a memory file and checks its size.
func ReadMem(path string, wantSize int64) (State, error) {
	var st State
	f, err := os.Open(path)
	if err != nil {
		return st, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return st, err
	}
	if wantSize > 0 && fi.Size() != wantSize {
		return st, fmt.Errorf("memory file %s is %d bytes, want %d", path, fi.Size(), wantSize)
	}
	r := bufio.NewReader(io.LimitReader(f, 1<<16))
	magic, err := r.ReadString('\n')
	if err != nil || magic != memMagic {
		return st, fmt.Errorf("memory file %s: not a guest memory image", path)
	}
	line, err := r.ReadBytes('\n')
	if err != nil {
		return st, fmt.Errorf("memory file %s: %w", path, err)
	}
	if err := json.Unmarshal(bytes.TrimSpace(line), &st); err != nil {
		return st, fmt.Errorf("memory file %s: %w", path, err)
	}
	return st, nil
}

// CmdlineParam returns the value of key=value in a kernel command line.
func CmdlineParam(cmdline, key string) string {
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// Guest is one fake guest with its vsock device.
type Guest struct {
	mu      sync.Mutex
	cond    *sync.Cond
	paused  bool
	closed  bool
	running bool
	state   State
	agent   string // envd's loopback host:port
	srv     *http.Server
	vln     net.Listener
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

// New returns a guest that has not booted.
func New() *Guest {
	g := &Guest{conns: map[net.Conn]struct{}{}}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// BindVsock creates the hybrid-vsock unix socket at path. A path in use is
// an error, as in the real VMMs.
func (g *Guest) BindVsock(path string) error {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.vln = ln
	g.mu.Unlock()
	g.wg.Add(1)
	go g.serveVsock(ln)
	return nil
}

// VsockBound reports whether BindVsock succeeded.
func (g *Guest) VsockBound() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.vln != nil
}

// Boot starts the agent with st.Token, guest home dir home. paused leaves
// the guest paused (restore without resume).
func (g *Guest) Boot(home string, st State, paused bool) error {
	if err := os.MkdirAll(home, 0o700); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: agent.NewHandler(agent.Options{Token: st.Token, Root: home}), ReadHeaderTimeout: 10 * time.Second}
	g.mu.Lock()
	g.srv, g.agent, g.state, g.running, g.paused = srv, ln.Addr().String(), st, true, paused
	g.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
	return nil
}

// State returns the guest's memory state.
func (g *Guest) State() State {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state
}

// SetPaused pauses or resumes the guest.
func (g *Guest) SetPaused(p bool) {
	g.mu.Lock()
	g.paused = p
	g.mu.Unlock()
	g.cond.Broadcast()
}

// gate blocks while the guest is paused; false once closed.
func (g *Guest) gate() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.paused && !g.closed {
		g.cond.Wait()
	}
	return !g.closed
}

func (g *Guest) track(c net.Conn, add bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if add {
		if g.closed {
			return false
		}
		g.conns[c] = struct{}{}
		return true
	}
	delete(g.conns, c)
	return true
}

func (g *Guest) serveVsock(ln net.Listener) {
	defer g.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if !g.track(c, true) {
			c.Close()
			return
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			defer func() { g.track(c, false); c.Close() }()
			g.handle(c)
		}()
	}
}

// handle is the VMM side of a host-initiated hybrid-vsock connection.
func (g *Guest) handle(c net.Conn) {
	r := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := r.ReadString('\n')
	if err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	port, err := uds.ParseConnect(line)
	if err != nil {
		return // the VMMs drop a malformed request
	}
	// The guest answers (and the VMM says OK) only while its vCPUs run.
	if !g.gate() {
		return
	}
	g.mu.Lock()
	running, agent := g.running, g.agent
	g.mu.Unlock()
	if !running || port != agentapi.Port {
		return // nobody listens on that guest port: the VMM closes the stream
	}
	a, err := net.Dial("tcp", agent)
	if err != nil {
		return
	}
	if !g.track(a, true) {
		a.Close()
		return
	}
	defer func() { g.track(a, false); a.Close() }()
	if _, err := fmt.Fprintf(c, "OK %d\n", 1073741824+port); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { g.copy(a, r); closeWrite(a); done <- struct{}{} }()
	go func() { g.copy(c, a); closeWrite(c); done <- struct{}{} }()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// copy moves bytes only while the guest runs.
func (g *Guest) copy(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !g.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Close stops the agent, the vsock socket and every connection.
func (g *Guest) Close() error {
	g.mu.Lock()
	g.closed = true
	srv, vln := g.srv, g.vln
	for c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
	g.cond.Broadcast()
	var errs []error
	if vln != nil {
		errs = append(errs, vln.Close())
	}
	if srv != nil {
		errs = append(errs, srv.Close())
	}
	g.wg.Wait()
	return errors.Join(errs...)
}
