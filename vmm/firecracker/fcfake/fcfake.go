// Package fcfake is a protocol-exact stand-in for the Firecracker binary,
// for tests on hosts that cannot run Firecracker. It serves Firecracker's REST
// API on --api-sock and checks every request as Firecracker does:
// bodies decoded with unknown fields rejected, required fields enforced, the
// pre-boot / running / paused state machine (snapshot/create only while
// paused, snapshot/load only on a fresh process, configuration only before
// InstanceStart), 204 on success and 400 {"fault_message": "..."} on error.
//
// Its "guest" (vmm/internal/uds/fakeguest) runs the real in-guest agent and
// answers hybrid vsock on the configured uds_path, so a driver sees a VM whose
// agent answers only once started and never while paused.
//
// Use Main from a test binary's TestMain (re-exec pattern) so drivers really
// spawn a process.
package fcfake

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

	fc "github.com/hearthvm/hearth/vmm/firecracker"
	"github.com/hearthvm/hearth/vmm/internal/uds/fakeguest"
)

// EnvVar selects the fake in a re-exec'd test binary.
const EnvVar = "HEARTH_FAKE_VMM"

// Version is reported as vmm_version.
const Version = "1.12.0-hearth-fake"

// vmstate is the fake's snapshot_path content: the device configuration a
// real vmstate carries (opaque to callers), absolute paths included.
type vmstate struct {
	Magic   string                `json:"magic"`
	Machine fc.MachineConfig      `json:"machine"`
	Boot    fc.BootSource         `json:"boot"`
	Drives  []fc.Drive            `json:"drives"`
	Nets    []fc.NetworkInterface `json:"nets"`
	Vsock   *fc.Vsock             `json:"vsock"`
	MemMiB  int                   `json:"mem_mib"`
}

const stateMagic = "hearth-fake-firecracker-vmstate-v1"

// Server is one fake Firecracker process's API.
type Server struct {
	mu         sync.Mutex
	state      string // fc.StateNotStarted / StateRunning / StatePaused
	configured bool
	machine    *fc.MachineConfig
	boot       *fc.BootSource
	drives     map[string]fc.Drive
	nets       map[string]fc.NetworkInterface
	vsock      *fc.Vsock
	guest      *fakeguest.Guest
	home       string
	exit       chan struct{}
	exitOnce   sync.Once
}

// NewServer returns a fresh (not started) instance; guest home dirs are
// created under home.
func NewServer(home string) *Server {
	return &Server{
		state: fc.StateNotStarted, drives: map[string]fc.Drive{}, nets: map[string]fc.NetworkInterface{},
		guest: fakeguest.New(), home: home, exit: make(chan struct{}),
	}
}

// Exit is closed when the process should end (SendCtrlAltDel, failed load).
func (s *Server) Exit() <-chan struct{} { return s.exit }

func (s *Server) quit() { s.exitOnce.Do(func() { close(s.exit) }) }

// Close stops the guest.
func (s *Server) Close() error { return s.guest.Close() }

func fault(w http.ResponseWriter, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(fc.Fault{FaultMessage: fmt.Sprintf(format, args...)})
}

func noContent(w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) }

// decode reads exactly one JSON object into v, rejecting unknown fields,
// then checks required keys are present.
func decode(r *http.Request, v any, required ...string) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return errors.New("Empty request body")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("An error occurred when deserializing the json body of a request: %v", err)
	}
	if dec.More() {
		return errors.New("An error occurred when deserializing the json body of a request: trailing characters")
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return fmt.Errorf("An error occurred when deserializing the json body of a request: %v", err)
	}
	for _, k := range required {
		if raw, ok := keys[k]; !ok || string(raw) == "null" {
			return fmt.Errorf("An error occurred when deserializing the json body of a request: missing field `%s`", k)
		}
	}
	return nil
}

const preBootOnly = "The requested operation is not supported after starting the microVM."

// ServeHTTP routes the Firecracker API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	path := r.URL.Path
	switch {
	case r.Method == http.MethodGet && path == "/":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(fc.InstanceInfo{AppName: "Firecracker", ID: "anonymous-instance", State: s.state, VMMVersion: Version})
	case r.Method == http.MethodGet && path == "/machine-config":
		m := fc.MachineConfig{VcpuCount: 1, MemSizeMib: 128}
		if s.machine != nil {
			m = *s.machine
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(m)
	case r.Method == http.MethodPut && path == "/machine-config":
		s.putMachine(w, r)
	case r.Method == http.MethodPut && path == "/boot-source":
		s.putBoot(w, r)
	case r.Method == http.MethodPut && strings.HasPrefix(path, "/drives/"):
		s.putDrive(w, r, strings.TrimPrefix(path, "/drives/"))
	case r.Method == http.MethodPut && strings.HasPrefix(path, "/network-interfaces/"):
		s.putNet(w, r, strings.TrimPrefix(path, "/network-interfaces/"))
	case r.Method == http.MethodPut && path == "/vsock":
		s.putVsock(w, r)
	case r.Method == http.MethodPut && path == "/actions":
		s.putAction(w, r)
	case r.Method == http.MethodPatch && path == "/vm":
		s.patchVM(w, r)
	case r.Method == http.MethodPut && path == "/snapshot/create":
		s.snapshotCreate(w, r)
	case r.Method == http.MethodPut && path == "/snapshot/load":
		s.snapshotLoad(w, r)
	default:
		fault(w, "Invalid request method and/or path: %s %s.", r.Method, path)
	}
}

func (s *Server) preBoot(w http.ResponseWriter) bool {
	if s.state != fc.StateNotStarted {
		fault(w, preBootOnly)
		return false
	}
	return true
}

func (s *Server) putMachine(w http.ResponseWriter, r *http.Request) {
	if !s.preBoot(w) {
		return
	}
	var m fc.MachineConfig
	if err := decode(r, &m, "vcpu_count", "mem_size_mib"); err != nil {
		fault(w, "%v", err)
		return
	}
	smt := m.Smt != nil && *m.Smt
	switch {
	case m.VcpuCount < 1 || m.VcpuCount > 32:
		fault(w, "The vCPU number is invalid! The vCPU number can only be 1 or an even number when SMT is enabled.")
		return
	case smt && m.VcpuCount > 1 && m.VcpuCount%2 != 0:
		fault(w, "The vCPU number is invalid! The vCPU number can only be 1 or an even number when SMT is enabled.")
		return
	case m.MemSizeMib < 1:
		fault(w, "The memory size (MiB) is invalid.")
		return
	}
	s.machine, s.configured = &m, true
	noContent(w)
}

func (s *Server) putBoot(w http.ResponseWriter, r *http.Request) {
	if !s.preBoot(w) {
		return
	}
	var b fc.BootSource
	if err := decode(r, &b, "kernel_image_path"); err != nil {
		fault(w, "%v", err)
		return
	}
	if _, err := os.Stat(b.KernelImagePath); err != nil {
		fault(w, "Invalid kernel path: %v", err)
		return
	}
	if b.InitrdPath != "" {
		if _, err := os.Stat(b.InitrdPath); err != nil {
			fault(w, "Invalid initrd path: %v", err)
			return
		}
	}
	s.boot, s.configured = &b, true
	noContent(w)
}

func (s *Server) putDrive(w http.ResponseWriter, r *http.Request, id string) {
	if !s.preBoot(w) {
		return
	}
	var d fc.Drive
	if err := decode(r, &d, "drive_id", "is_root_device", "path_on_host", "is_read_only"); err != nil {
		fault(w, "%v", err)
		return
	}
	if d.DriveID != id {
		fault(w, "The id from the path does not match the id from the body!")
		return
	}
	if _, err := os.Stat(d.PathOnHost); err != nil {
		fault(w, "Unable to create the block device: BackingFile(%v)", err)
		return
	}
	if d.IsRootDevice {
		for oid, od := range s.drives {
			if od.IsRootDevice && oid != id {
				fault(w, "A root block device already exists!")
				return
			}
		}
	}
	s.drives[id], s.configured = d, true
	noContent(w)
}

func (s *Server) putNet(w http.ResponseWriter, r *http.Request, id string) {
	if !s.preBoot(w) {
		return
	}
	var n fc.NetworkInterface
	if err := decode(r, &n, "iface_id", "host_dev_name"); err != nil {
		fault(w, "%v", err)
		return
	}
	if n.IfaceID != id {
		fault(w, "The id from the path does not match the id from the body!")
		return
	}
	if n.HostDevName == "" || len(n.HostDevName) > 15 {
		fault(w, "Could not create the network device: Open tap device failed: invalid name %q", n.HostDevName)
		return
	}
	if n.GuestMAC != "" {
		if _, err := net.ParseMAC(n.GuestMAC); err != nil {
			fault(w, "Invalid guest MAC address: %v", err)
			return
		}
	}
	for oid, o := range s.nets {
		if oid != id && o.HostDevName == n.HostDevName {
			fault(w, "The host device name %s is already in use.", n.HostDevName)
			return
		}
	}
	s.nets[id], s.configured = n, true
	noContent(w)
}

func (s *Server) putVsock(w http.ResponseWriter, r *http.Request) {
	if !s.preBoot(w) {
		return
	}
	var v fc.Vsock
	if err := decode(r, &v, "guest_cid", "uds_path"); err != nil {
		fault(w, "%v", err)
		return
	}
	if v.GuestCID < 3 {
		fault(w, "Invalid guest CID %d", v.GuestCID)
		return
	}
	if s.guest.VsockBound() {
		fault(w, "Cannot create backend for vsock device: a vsock device is already configured")
		return
	}
	if err := s.guest.BindVsock(v.UDSPath); err != nil {
		fault(w, "Cannot create backend for vsock device: UnixBind(%v)", err)
		return
	}
	s.vsock, s.configured = &v, true
	noContent(w)
}

func (s *Server) putAction(w http.ResponseWriter, r *http.Request) {
	var a fc.InstanceAction
	if err := decode(r, &a, "action_type"); err != nil {
		fault(w, "%v", err)
		return
	}
	switch a.ActionType {
	case "InstanceStart":
		if s.state != fc.StateNotStarted {
			fault(w, "The requested operation is not supported after starting the microVM.")
			return
		}
		if s.boot == nil {
			fault(w, "Cannot start microvm without kernel configuration.")
			return
		}
		st := fakeguest.State{Token: fakeguest.CmdlineParam(s.boot.BootArgs, "hearth.token"), Cmdline: s.boot.BootArgs}
		if err := s.guest.Boot(s.home, st, false); err != nil {
			fault(w, "Failed to start microVM: %v", err)
			return
		}
		s.state = fc.StateRunning
	case "SendCtrlAltDel":
		if s.state == fc.StateNotStarted {
			fault(w, "The requested operation is not supported before starting the microVM.")
			return
		}
		// reboot=k: the guest's reboot ends the Firecracker process.
		defer s.quit()
	case "FlushMetrics":
		fault(w, "The metrics system is not initialized.")
		return
	default:
		fault(w, "An error occurred when deserializing the json body of a request: unknown variant `%s`", a.ActionType)
		return
	}
	noContent(w)
}

func (s *Server) patchVM(w http.ResponseWriter, r *http.Request) {
	var v fc.VM
	if err := decode(r, &v, "state"); err != nil {
		fault(w, "%v", err)
		return
	}
	if s.state == fc.StateNotStarted {
		fault(w, "The requested operation is not supported before starting the microVM.")
		return
	}
	switch v.State {
	case "Paused":
		s.state = fc.StatePaused
		s.guest.SetPaused(true)
	case "Resumed":
		s.state = fc.StateRunning
		s.guest.SetPaused(false)
	default:
		fault(w, "An error occurred when deserializing the json body of a request: unknown variant `%s`, expected `Paused` or `Resumed`", v.State)
		return
	}
	noContent(w)
}

func (s *Server) snapshotCreate(w http.ResponseWriter, r *http.Request) {
	var c fc.SnapshotCreate
	if err := decode(r, &c, "snapshot_path", "mem_file_path"); err != nil {
		fault(w, "%v", err)
		return
	}
	switch c.SnapshotType {
	case "", "Full":
	case "Diff":
		fault(w, "Diff snapshots are not enabled: track_dirty_pages is off.")
		return
	default:
		fault(w, "An error occurred when deserializing the json body of a request: unknown variant `%s`", c.SnapshotType)
		return
	}
	if s.state != fc.StatePaused {
		fault(w, "Cannot create a snapshot of a microVM that is not paused (state: %s).", s.state)
		return
	}
	mem := 128
	if s.machine != nil {
		mem = s.machine.MemSizeMib
	}
	vs := vmstate{Magic: stateMagic, Boot: *s.boot, Vsock: s.vsock, MemMiB: mem}
	if s.machine != nil {
		vs.Machine = *s.machine
	}
	for _, d := range s.drives {
		vs.Drives = append(vs.Drives, d)
	}
	for _, n := range s.nets {
		vs.Nets = append(vs.Nets, n)
	}
	b, _ := json.Marshal(vs)
	os.Remove(c.SnapshotPath)
	os.Remove(c.MemFilePath)
	if err := os.WriteFile(c.SnapshotPath, b, 0o600); err != nil {
		fault(w, "Cannot save the microVM state: %v", err)
		return
	}
	if err := fakeguest.WriteMem(c.MemFilePath, int64(mem)<<20, s.guest.State()); err != nil {
		fault(w, "Cannot save the guest memory: %v", err)
		return
	}
	noContent(w)
}

func (s *Server) snapshotLoad(w http.ResponseWriter, r *http.Request) {
	var l fc.SnapshotLoad
	if err := decode(r, &l, "snapshot_path"); err != nil {
		fault(w, "%v", err)
		return
	}
	if s.state != fc.StateNotStarted || s.configured {
		fault(w, "Loading a microVM snapshot not allowed after configuring boot-specific resources.")
		return
	}
	if l.MemBackend == nil {
		fault(w, "Missing memory backend: either mem_backend or mem_file_path is required.")
		return
	}
	if l.MemBackend.BackendType != "File" && l.MemBackend.BackendType != "Uffd" {
		fault(w, "An error occurred when deserializing the json body of a request: unknown variant `%s`", l.MemBackend.BackendType)
		return
	}
	// From here on a failure leaves the process unusable: Firecracker exits.
	failLoad := func(format string, args ...any) {
		fault(w, "Load snapshot error: "+format, args...)
		s.quit()
	}
	if l.MemBackend.BackendType == "Uffd" {
		failLoad("the fake supports only the File memory backend")
		return
	}
	b, err := os.ReadFile(l.SnapshotPath)
	if err != nil {
		failLoad("Cannot open snapshot file: %v", err)
		return
	}
	var vs vmstate
	if err := json.Unmarshal(b, &vs); err != nil || vs.Magic != stateMagic {
		failLoad("Cannot deserialize the microVM state: invalid snapshot file")
		return
	}
	st, err := fakeguest.ReadMem(l.MemBackend.BackendPath, int64(vs.MemMiB)<<20)
	if err != nil {
		failLoad("Cannot load guest memory: %v", err)
		return
	}
	nets := map[string]fc.NetworkInterface{}
	for _, n := range vs.Nets {
		nets[n.IfaceID] = n
	}
	for _, o := range l.NetworkOverrides {
		n, ok := nets[o.IfaceID]
		if !ok {
			failLoad("Network interface %s not found in the snapshot.", o.IfaceID)
			return
		}
		n.HostDevName = o.HostDevName // the MAC stays the snapshot's
		nets[o.IfaceID] = n
	}
	if vs.Vsock == nil {
		if l.VsockOverride != nil {
			failLoad("Vsock override given but the snapshot has no vsock device.")
			return
		}
	} else {
		v := *vs.Vsock
		if l.VsockOverride != nil {
			v.UDSPath = l.VsockOverride.UDSPath
		}
		if err := s.guest.BindVsock(v.UDSPath); err != nil {
			failLoad("Cannot create backend for vsock device: UnixBind(%v)", err)
			return
		}
		s.vsock = &v
	}
	for _, d := range vs.Drives {
		if _, err := os.Stat(d.PathOnHost); err != nil {
			failLoad("Cannot restore block device %s: %v", d.DriveID, err)
			return
		}
		s.drives[d.DriveID] = d
	}
	st.Generation++
	if err := s.guest.Boot(s.home, st, !l.ResumeVM); err != nil {
		failLoad("%v", err)
		return
	}
	m, bs := vs.Machine, vs.Boot
	s.machine, s.boot, s.nets = &m, &bs, nets
	s.state = fc.StatePaused
	if l.ResumeVM {
		s.state = fc.StateRunning
	}
	noContent(w)
}

// Main is the fake `firecracker` command line: --api-sock PATH [--id X]
// [--level L] [--log-path P]. It serves until SIGTERM/SIGINT or until the
// guest ends the process.
func Main(args []string) int {
	fs := flag.NewFlagSet("firecracker", flag.ContinueOnError)
	sock := fs.String("api-sock", "/run/firecracker.socket", "API socket path")
	fs.String("id", "anonymous-instance", "instance id")
	fs.String("level", "Warning", "log level")
	fs.String("log-path", "", "log file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ln, err := net.Listen("unix", *sock)
	if err != nil {
		fmt.Fprintf(os.Stderr, "Failed to open the API socket: %v\n", err)
		return 1
	}
	s := NewServer(filepath.Join(filepath.Dir(*sock), "guest-home"))
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
