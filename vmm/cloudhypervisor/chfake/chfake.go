// Package chfake is a protocol-exact stand-in for the cloud-hypervisor
// binary, for tests on hosts that cannot run it. It serves the /api/v1 REST
// API on --api-socket path=<sock> with Cloud Hypervisor's status codes and
// error bodies (a JSON array of the error chain's messages): 400 for a body
// that does not decode (the fake also rejects unknown fields, stricter than
// CH), 404 for an unknown route or when no VM is created, 500 for invalid
// state transitions (vm.boot twice, vm.pause of a paused VM, vm.snapshot of
// a running VM, vm.restore into an existing VM), 204/200 on success.
//
// vm.snapshot writes config.json, state.json and a sparse memory-ranges file
// of the VM's size; vm.restore reads them back (paused unless resume). The
// guest (vmm/internal/uds/fakeguest) runs the real agent behind hybrid vsock.
// Use Main from a test binary's TestMain (re-exec pattern).
package chfake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	ch "github.com/hearthvm/hearth/vmm/cloudhypervisor"
	"github.com/hearthvm/hearth/vmm/internal/uds/fakeguest"
)

// EnvVar selects the fake in a re-exec'd test binary.
const EnvVar = "HEARTH_FAKE_VMM"

// Version is reported by vmm.ping.
const Version = "v48.0-hearth-fake"

// Server is one fake cloud-hypervisor process's API.
type Server struct {
	mu       sync.Mutex
	cfg      *ch.VmConfig
	state    string // "" (no VM) or ch.State*
	guest    *fakeguest.Guest
	home     string
	exit     chan struct{}
	exitOnce sync.Once
}

// NewServer returns a VMM with no VM; guest homes go under home.
func NewServer(home string) *Server {
	return &Server{home: home, exit: make(chan struct{})}
}

// Exit is closed after vmm.shutdown.
func (s *Server) Exit() <-chan struct{} { return s.exit }

// Close stops the guest.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopGuest()
}

func (s *Server) stopGuest() error {
	if s.guest == nil {
		return nil
	}
	err := s.guest.Close()
	s.guest = nil
	return err
}

func reply(w http.ResponseWriter, status int, msgs ...string) {
	w.Header().Set("Server", "Cloud Hypervisor API")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(msgs)
}

func ok(w http.ResponseWriter, v any) {
	w.Header().Set("Server", "Cloud Hypervisor API")
	if v == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func decode(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return err
	}
	return decodeBytes(b, v)
}

func decodeBytes(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing characters")
	}
	return nil
}

func badJSON(w http.ResponseWriter, err error) {
	reply(w, http.StatusBadRequest, "Failed to deserialize JSON", err.Error())
}

func notCreated(w http.ResponseWriter, what string) {
	reply(w, http.StatusNotFound, "Error from API", what, "VM is not created")
}

func invalid(w http.ResponseWriter, what, why string) {
	reply(w, http.StatusInternalServerError, "Error from API", what, why)
}

// ServeHTTP routes /api/v1.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	op, found := strings.CutPrefix(r.URL.Path, ch.API+"/")
	routes := map[string]func(http.ResponseWriter, *http.Request){
		"vmm.ping": s.ping, "vmm.shutdown": s.vmmShutdown, "vm.info": s.info,
		"vm.create": s.create, "vm.boot": s.boot, "vm.pause": s.pause, "vm.resume": s.resume,
		"vm.snapshot": s.snapshot, "vm.restore": s.restore, "vm.shutdown": s.shutdown, "vm.delete": s.del,
	}
	h, known := routes[op]
	if !found || !known {
		reply(w, http.StatusNotFound, "Not Found")
		return
	}
	get := op == "vmm.ping" || op == "vm.info"
	if (get && r.Method != http.MethodGet) || (!get && r.Method != http.MethodPut) {
		w.WriteHeader(http.StatusBadRequest) // CH: unsupported method, empty body
		return
	}
	h(w, r)
}

func (s *Server) ping(w http.ResponseWriter, r *http.Request) {
	ok(w, ch.VmmPingResponse{BuildVersion: Version, Version: Version, PID: int64(os.Getpid()), Features: []string{"kvm"}})
}

func (s *Server) vmmShutdown(w http.ResponseWriter, r *http.Request) {
	_ = s.stopGuest()
	ok(w, nil)
	s.exitOnce.Do(func() { close(s.exit) })
}

func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	if s.state == "" {
		notCreated(w, "Error getting VM info")
		return
	}
	ok(w, ch.VmInfo{Config: *s.cfg, State: s.state, MemoryActualSize: s.cfg.Memory.Size})
}

// validate applies CH's VmConfig checks that matter to Hearth.
func validate(c *ch.VmConfig) error {
	if c.Payload == nil || (c.Payload.Kernel == "" && c.Payload.Firmware == "") {
		return errors.New("payload: a kernel or firmware is required")
	}
	if c.Cpus == nil {
		c.Cpus = &ch.CpusConfig{BootVcpus: 1, MaxVcpus: 1}
	}
	if c.Cpus.BootVcpus < 1 || c.Cpus.MaxVcpus < c.Cpus.BootVcpus {
		return fmt.Errorf("cpus: boot_vcpus %d / max_vcpus %d invalid", c.Cpus.BootVcpus, c.Cpus.MaxVcpus)
	}
	if c.Memory == nil {
		c.Memory = &ch.MemoryConfig{Size: 512 << 20}
	}
	if c.Memory.Size <= 0 || c.Memory.Size%4096 != 0 {
		return fmt.Errorf("memory: size %d must be a positive multiple of 4096", c.Memory.Size)
	}
	for _, cc := range []*ch.ConsoleConfig{c.Serial, c.Console} {
		if cc == nil {
			continue
		}
		switch cc.Mode {
		case "Off", "Pty", "Tty", "Null":
		case "File":
			if cc.File == "" {
				return errors.New("console: mode File needs file")
			}
		case "Socket":
			if cc.Socket == "" {
				return errors.New("console: mode Socket needs socket")
			}
		default:
			return fmt.Errorf("console: unknown mode %q", cc.Mode)
		}
	}
	if v := c.Vsock; v != nil && (v.CID < 3 || v.Socket == "") {
		return fmt.Errorf("vsock: cid %d (>= 3) and socket are required", v.CID)
	}
	for _, d := range c.Disks {
		if d.Path == "" {
			return errors.New("disk: path is required")
		}
	}
	for _, n := range c.Net {
		if len(n.Tap) > 15 {
			return fmt.Errorf("net: tap name %q too long", n.Tap)
		}
	}
	return nil
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var c ch.VmConfig
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err := decodeBytes(b, &c); err != nil {
		badJSON(w, err)
		return
	}
	// required fields of nested objects (serde would refuse them missing)
	var raw struct {
		Payload json.RawMessage `json:"payload"`
		Cpus    map[string]any  `json:"cpus"`
		Memory  map[string]any  `json:"memory"`
		Vsock   map[string]any  `json:"vsock"`
	}
	_ = json.Unmarshal(b, &raw)
	for obj, keys := range map[string][]string{"cpus": {"boot_vcpus", "max_vcpus"}, "memory": {"size"}, "vsock": {"cid", "socket"}} {
		m := map[string]map[string]any{"cpus": raw.Cpus, "memory": raw.Memory, "vsock": raw.Vsock}[obj]
		if m == nil {
			continue
		}
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				badJSON(w, fmt.Errorf("missing field `%s` in %s", k, obj))
				return
			}
		}
	}
	if len(raw.Payload) == 0 {
		badJSON(w, errors.New("missing field `payload`"))
		return
	}
	if s.state != "" {
		invalid(w, "The VM could not be created", "VM is already created")
		return
	}
	if err := validate(&c); err != nil {
		invalid(w, "The VM could not be created", err.Error())
		return
	}
	s.cfg, s.state = &c, ch.StateCreated
	ok(w, nil)
}

func (s *Server) startGuest(st fakeguest.State, paused bool) error {
	g := fakeguest.New()
	if v := s.cfg.Vsock; v != nil {
		if err := g.BindVsock(v.Socket); err != nil {
			return fmt.Errorf("Error creating vsock device: %v", err)
		}
	}
	if err := g.Boot(s.home, st, paused); err != nil {
		g.Close()
		return err
	}
	s.guest = g
	return nil
}

func (s *Server) boot(w http.ResponseWriter, r *http.Request) {
	switch s.state {
	case "":
		notCreated(w, "The VM could not boot")
		return
	case ch.StateCreated, ch.StateShutdown:
	default:
		invalid(w, "The VM could not boot", "VM is already running")
		return
	}
	if _, err := os.Stat(s.cfg.Payload.Kernel); s.cfg.Payload.Kernel != "" && err != nil {
		invalid(w, "The VM could not boot", "Cannot open kernel file: "+err.Error())
		return
	}
	st := fakeguest.State{Token: fakeguest.CmdlineParam(s.cfg.Payload.Cmdline, "hearth.token"), Cmdline: s.cfg.Payload.Cmdline}
	if err := s.startGuest(st, false); err != nil {
		invalid(w, "The VM could not boot", err.Error())
		return
	}
	s.state = ch.StateRunning
	ok(w, nil)
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	if s.state == "" {
		notCreated(w, "The VM could not be paused")
		return
	}
	if s.state != ch.StateRunning {
		invalid(w, "The VM could not be paused", fmt.Sprintf("InvalidStateTransition(%s, Paused)", s.state))
		return
	}
	s.guest.SetPaused(true)
	s.state = ch.StatePaused
	ok(w, nil)
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) {
	if s.state == "" {
		notCreated(w, "The VM could not be resumed")
		return
	}
	if s.state != ch.StatePaused {
		invalid(w, "The VM could not be resumed", fmt.Sprintf("InvalidStateTransition(%s, Running)", s.state))
		return
	}
	s.guest.SetPaused(false)
	s.state = ch.StateRunning
	ok(w, nil)
}

func fileURL(u string) (string, error) {
	p, ok := strings.CutPrefix(u, "file://")
	if !ok || !filepath.IsAbs(p) {
		return "", fmt.Errorf("invalid URL %q: only file:///<absolute dir> is supported", u)
	}
	return p, nil
}

type stateFile struct {
	Magic string `json:"magic"`
	Size  int64  `json:"size"`
}

const stateMagic = "hearth-fake-cloud-hypervisor-state-v1"

func (s *Server) snapshot(w http.ResponseWriter, r *http.Request) {
	var c ch.VmSnapshotConfig
	if err := decode(r, &c); err != nil {
		badJSON(w, err)
		return
	}
	if s.state == "" {
		notCreated(w, "The VM could not be snapshotted")
		return
	}
	if s.state != ch.StatePaused {
		invalid(w, "The VM could not be snapshotted", "VM is not paused")
		return
	}
	dir, err := fileURL(c.DestinationURL)
	if err == nil {
		if fi, serr := os.Stat(dir); serr != nil || !fi.IsDir() {
			err = fmt.Errorf("destination %s is not a directory", dir)
		}
	}
	if err == nil {
		cfg, _ := json.Marshal(s.cfg)
		st, _ := json.Marshal(stateFile{Magic: stateMagic, Size: s.cfg.Memory.Size})
		err = errors.Join(
			os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o600),
			os.WriteFile(filepath.Join(dir, "state.json"), st, 0o600),
			fakeguest.WriteMem(filepath.Join(dir, "memory-ranges"), s.cfg.Memory.Size, s.guest.State()),
		)
	}
	if err != nil {
		invalid(w, "The VM could not be snapshotted", err.Error())
		return
	}
	ok(w, nil)
}

func (s *Server) restore(w http.ResponseWriter, r *http.Request) {
	var c ch.RestoreConfig
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err := decodeBytes(b, &c); err != nil {
		badJSON(w, err)
		return
	}
	if !bytes.Contains(b, []byte(`"source_url"`)) {
		badJSON(w, errors.New("missing field `source_url`"))
		return
	}
	switch c.MemoryRestoreMode {
	case "", "Copy", "OnDemand", "CopyOnWrite":
	default:
		badJSON(w, fmt.Errorf("unknown variant `%s`, expected one of `Copy`, `OnDemand`, `CopyOnWrite`", c.MemoryRestoreMode))
		return
	}
	if s.state != "" {
		invalid(w, "The VM could not be restored", "VM is already created")
		return
	}
	fail := func(err error) { invalid(w, "The VM could not be restored", err.Error()) }
	dir, err := fileURL(c.SourceURL)
	if err != nil {
		fail(err)
		return
	}
	cb, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		fail(err)
		return
	}
	var cfg ch.VmConfig
	if err := decodeBytes(cb, &cfg); err != nil {
		fail(fmt.Errorf("config.json: %v", err))
		return
	}
	var sf stateFile
	sb, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err == nil {
		err = json.Unmarshal(sb, &sf)
	}
	if err != nil || sf.Magic != stateMagic {
		fail(fmt.Errorf("state.json: invalid (%v)", err))
		return
	}
	st, err := fakeguest.ReadMem(filepath.Join(dir, "memory-ranges"), sf.Size)
	if err != nil {
		fail(err)
		return
	}
	st.Generation++
	s.cfg = &cfg
	resume := c.Resume != nil && *c.Resume
	if err := s.startGuest(st, !resume); err != nil {
		s.cfg = nil
		fail(err)
		return
	}
	s.state = ch.StatePaused
	if resume {
		s.state = ch.StateRunning
	}
	ok(w, nil)
}

func (s *Server) shutdown(w http.ResponseWriter, r *http.Request) {
	if s.state == "" {
		notCreated(w, "The VM could not shut down")
		return
	}
	if s.state == ch.StateCreated || s.state == ch.StateShutdown {
		invalid(w, "The VM could not shut down", "VM is not running")
		return
	}
	_ = s.stopGuest()
	s.state = ch.StateShutdown
	ok(w, nil)
}

func (s *Server) del(w http.ResponseWriter, r *http.Request) {
	_ = s.stopGuest()
	s.cfg, s.state = nil, ""
	ok(w, nil)
}

// Main is the fake `cloud-hypervisor --api-socket path=<sock>` (also accepts
// a bare path). It serves until SIGTERM/SIGINT or vmm.shutdown.
func Main(args []string) int {
	fs := flag.NewFlagSet("cloud-hypervisor", flag.ContinueOnError)
	api := fs.String("api-socket", "", "path=<API socket>")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	sock := *api
	for _, kv := range strings.Split(*api, ",") {
		if v, ok := strings.CutPrefix(kv, "path="); ok {
			sock = v
		}
	}
	if sock == "" {
		fmt.Fprintln(os.Stderr, "Error: --api-socket path=<socket> is required")
		return 1
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error creating API server socket: %v\n", err)
		return 1
	}
	s := NewServer(filepath.Join(filepath.Dir(sock), "guest-home"))
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	select {
	case <-ctx.Done():
	case <-s.Exit():
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	_ = s.Close()
	return 0
}
