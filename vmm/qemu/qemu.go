// Package qemu is the vmm.Driver backend that runs each microVM as a
// qemu-system-x86_64 -M microvm process controlled over QMP.
//
// Contract:
//   - One QEMU process per VM, in its own process group, with its run
//     directory Root/<id> holding qmp.sock, qemu.pid, qemu.log, console.log,
//     disk.qcow2, passt.pid/passt.log (egress lane) and vm.json (the record
//     a restarted node re-derives the Handle from).
//   - The guest boots the configured kernel and initramfs (hack/guest). With
//     a root disk — the template's base image from Options.Disk (e.g.
//     package image's Store.Ext4) or the config's "disk", raw ext4, opened
//     read-only and never written — each VM gets its own qcow2 overlay
//     (disk.qcow2) on a virtio-blk device; the initramfs mounts it as / and
//     runs the in-guest agent there as root, restarting it when it exits.
//     Processes run as the image's "user" (uid 1000, /home/user) when it has
//     that account. Without a disk the guest stays in its initramfs.
//   - Identity: the agent token, hostname and environment reach the guest
//     only through fw_cfg (opt/hearth/identity) from a 0600 file that is
//     removed once QEMU has read it — never on QEMU's argv or environment,
//     never on the guest's kernel command line. The guest keeps it in
//     root-only /run/hearth.
//   - The agent listens on guest port 49983 (agentapi.Port); the host
//     reaches it at Handle.Addr = 127.0.0.1:<free port>. Lane "none":
//     QEMU slirp with restrict=on — the forwarded agent port works, the
//     guest can open no connection at all. Lane "egress": the NIC is a socketpair to a per-VM
//     passt (started as Options.EgressUID with --no-map-gw, so the gateway
//     is not the host's loopback) which also forwards the agent port; the
//     driver's nftables table (see passt.go) rejects new connections from
//     that uid to every address of the node itself and to 169.254.0.0/16
//     and fe80::/10. Other hosts on the node's networks (its gateway, other
//     nodes, cluster service IPs) are reachable, as they are from any
//     outbound connection. Both lanes give the guest 10.0.2.15/24 via
//     10.0.2.2, DNS 10.0.2.3, so checkpoints clone onto either.
//   - The accelerator is KVM only if a guest actually boots under it within
//     Options.KVMProbeTimeout (on PVM hosts a stock kernel hangs); otherwise
//     TCG. The decision is made once per Driver and reported by Accel.
//   - Pause/Resume are QMP stop/cont (idempotent). Snapshot migrates the
//     paused VM into a checkpoint directory (exec:cat; QEMU 7.2 has no file:
//     URI), copies its disk as one qcow2 overlay directly over the base image
//     (disk.qcow2; the migration has flushed and released it) and restores
//     its prior run state. A cold-booted VM's RAM is a shared file mapping,
//     so its checkpoint is device state plus a sparse copy of that file, and
//     clones map the copy privately: clean pages are shared between clones
//     (copy-on-write). Other VMs (clones) checkpoint as one full migration
//     stream. A byte bound from vmm.WithSnapshotLimit (the node's snapshot
//     budget left) is checked after the migration stream and after the
//     flattened disk (each bounded by the VM's memory and disk size) and
//     bounds the RAM file's copy as it is written; past it the checkpoint
//     is removed and Snapshot fails with vmm.ErrSnapshotTooLarge.
//   - The guest's disk is its base image's size (package backends builds
//     a template's at the node's --disk-size); the overlay takes at most
//     that much of the host's disk, plus qcow2 metadata.
//   - Clone starts QEMU with -incoming from a checkpoint over a fresh
//     overlay of the checkpoint's disk, then — before returning — hands the
//     guest agent the clone's own token through POST /hearth/identity
//     (agentapi.Client.SetIdentity, authenticated with the checkpoint's
//     token), which the agent also writes to its token file: the
//     checkpoint's token never works on a clone, and an agent restarted in
//     the guest keeps the clone's token.
//
// The driver owns only processes and files under Root, the checkpoint
// directories callers name, and the nftables table inet hearth_qemu; it
// never decides which VM is warm or claimed. Base images must not change
// while a VM or checkpoint uses them.
package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

// Backend is the driver's name.
const Backend = "qemu"

// Options configure a Driver.
type Options struct {
	// Root is the directory holding one run directory per VM.
	Root string
	// Binary is the QEMU executable; default qemu-system-x86_64.
	Binary string
	// Config maps templates and sizes to guests; default
	// DefaultConfig(DefaultGuestDir()).
	Config *Config
	// Accel is "auto" (default: KVM if a guest boots under it, else TCG),
	// "kvm" or "tcg".
	Accel string
	// KVMProbeTimeout bounds the first KVM boot in auto mode; default 20s.
	KVMProbeTimeout time.Duration
	// BootTimeout bounds a boot or clone until the agent answers; default
	// 3m (TCG on a loaded two-core host is slow).
	BootTimeout time.Duration
	// Logf receives operational messages; default log.Printf.
	Logf func(format string, args ...any)

	// Disk returns the base root-disk image (raw ext4, read-only, never
	// written) of a template, e.g. from package image; "" means no disk.
	// Nil: the config's "disk" for the template.
	Disk func(template string) (path string, err error)
	// QemuImg is the qemu-img executable; default qemu-img.
	QemuImg string
	// Passt is the passt executable (the "egress" lane); default passt.
	Passt string
	// Nft is the nft executable; default nft.
	Nft string
	// EgressUID is the uid passt runs as, matched by the egress firewall;
	// default DefaultEgressUID. Nothing else may use it.
	EgressUID int
	// EgressFirewall is "nft" (default: the driver installs table
	// inet hearth_qemu, see passt.go, and an egress boot fails if it
	// cannot) or "off" (the node's own non-loopback addresses and
	// 169.254.0.0/16 stay reachable from egress guests).
	EgressFirewall string
}

// Driver is the QEMU backend. Methods are safe for concurrent use.
type Driver struct {
	o Options

	probeMu sync.Mutex // held while the first auto-mode boot probes KVM
	accelMu sync.Mutex
	accel   string // decided accelerator; "" until decided

	locksMu sync.Mutex
	locks   map[string]*sync.Mutex // per VM id

	fwMu sync.Mutex // serialises nft runs

	httpc *http.Client
}

var _ vmm.Driver = (*Driver)(nil)

// New returns a Driver; it creates Root but starts nothing.
func New(o Options) (*Driver, error) {
	if o.Root == "" {
		return nil, errors.New("qemu: Root is required")
	}
	if o.Binary == "" {
		o.Binary = "qemu-system-x86_64"
	}
	if o.Config == nil {
		dir := DefaultGuestDir()
		if dir == "" {
			return nil, errors.New("qemu: no guest found: run hack/setup.d/20-qemu-guest.sh or set HEARTH_QEMU_GUEST_DIR / a config")
		}
		c := DefaultConfig(dir)
		o.Config = &c
	}
	switch o.Accel {
	case "", "auto":
		o.Accel = "auto"
	case AccelKVM, AccelTCG:
	default:
		return nil, fmt.Errorf("qemu: accel %q: want auto, kvm or tcg", o.Accel)
	}
	if o.KVMProbeTimeout <= 0 {
		o.KVMProbeTimeout = 20 * time.Second
	}
	if o.BootTimeout <= 0 {
		o.BootTimeout = 3 * time.Minute
	}
	if o.Logf == nil {
		o.Logf = log.Printf
	}
	if o.QemuImg == "" {
		o.QemuImg = "qemu-img"
	}
	if o.Passt == "" {
		o.Passt = "passt"
	}
	if o.Nft == "" {
		o.Nft = "nft"
	}
	if o.EgressUID == 0 {
		o.EgressUID = DefaultEgressUID
	}
	switch o.EgressFirewall {
	case "":
		o.EgressFirewall = "nft"
	case "nft", "off":
	default:
		return nil, fmt.Errorf("qemu: egress firewall %q: want nft or off", o.EgressFirewall)
	}
	if err := os.MkdirAll(o.Root, 0o755); err != nil {
		return nil, err
	}
	root, err := filepath.Abs(o.Root)
	if err != nil {
		return nil, err
	}
	o.Root = root
	d := &Driver{o: o, locks: map[string]*sync.Mutex{}, httpc: &http.Client{Timeout: 5 * time.Second}}
	if o.Accel != "auto" {
		d.accel = o.Accel
	}
	return d, nil
}

// Name implements vmm.Driver.
func (d *Driver) Name() string { return Backend }

// Accel is the accelerator in use: "kvm" or "tcg", or "auto" before the
// first boot decided it.
func (d *Driver) Accel() string {
	d.accelMu.Lock()
	defer d.accelMu.Unlock()
	if d.accel == "" {
		return "auto"
	}
	return d.accel
}

func (d *Driver) lock(id string) func() {
	d.locksMu.Lock()
	m, ok := d.locks[id]
	if !ok {
		m = &sync.Mutex{}
		d.locks[id] = m
	}
	d.locksMu.Unlock()
	m.Lock()
	return m.Unlock
}

// record is vm.json: everything needed to re-derive a Handle and to
// checkpoint or restart the VM.
type record struct {
	Handle    vmm.Handle `json:"handle"`
	Machine   Machine    `json:"machine"`
	MemPath   string     `json:"mem_path,omitempty"`
	MemShared bool       `json:"mem_shared,omitempty"`
	Restrict  bool       `json:"restrict,omitempty"`
	// DiskBase is the read-only base image under Machine.Disk's chain.
	DiskBase string   `json:"disk_base,omitempty"`
	Spec     vmm.Spec `json:"spec"`
}

// manifest is a checkpoint's snapshot.json.
type manifest struct {
	Backend string  `json:"backend"`
	Machine Machine `json:"machine"`
	// Memory is "file" (device state in state, RAM in mem) or "stream"
	// (everything in state).
	Memory string `json:"memory"`
	// Token is the agent token inside the checkpointed guest.
	Token string `json:"token"`
	// DiskBase is the base image disk.qcow2 is an overlay of.
	DiskBase string    `json:"disk_base,omitempty"`
	Spec     vmm.Spec  `json:"spec"`
	Paused   bool      `json:"paused,omitempty"`
	Created  time.Time `json:"created"`
	MemBytes int64     `json:"mem_bytes,omitempty"`
}

func (d *Driver) vmDir(id string) string { return filepath.Join(d.o.Root, id) }

func validID(id string) bool {
	if id == "" || len(id) > 64 || id == "." || id == ".." {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func (d *Driver) checkSpec(spec vmm.Spec) error {
	if !validID(spec.ID) {
		return fmt.Errorf("qemu: invalid vm id %q", spec.ID)
	}
	if !validToken(spec.Token) {
		return fmt.Errorf("qemu: token must be printable ASCII without spaces or quotes")
	}
	if spec.Net != "" && spec.Net != "none" && spec.Net != "egress" {
		return fmt.Errorf("qemu: unknown net %q", spec.Net)
	}
	return nil
}

// Boot implements vmm.Driver.
func (d *Driver) Boot(ctx context.Context, spec vmm.Spec) (vmm.Handle, error) {
	if err := d.checkSpec(spec); err != nil {
		return vmm.Handle{}, err
	}
	g, sz, err := d.o.Config.Resolve(spec.Template, spec.Size)
	if err != nil {
		return vmm.Handle{}, err
	}
	defer d.lock(spec.ID)()
	base, err := d.baseDisk(spec.Template, g)
	if err != nil {
		return vmm.Handle{}, fmt.Errorf("qemu: disk for template %q: %w", spec.Template, err)
	}
	if base != "" && !fileExists(base) {
		return vmm.Handle{}, fmt.Errorf("qemu: disk for template %q: %s does not exist", spec.Template, base)
	}
	m := Machine{
		VCPUs: sz.VCPUs, MemoryMiB: sz.MemoryMiB,
		Kernel: g.Kernel, Initrd: g.Initrd, Cmdline: g.Cmdline,
		Disk: base, // the base for now; boot puts the VM's overlay over it
	}
	if accel := d.decided(); accel != "" {
		m.Accel = accel
		return d.boot(ctx, spec, m, d.o.BootTimeout)
	}
	// First boot in auto mode: try KVM, verify the guest answers, else TCG.
	d.probeMu.Lock()
	defer d.probeMu.Unlock()
	if accel := d.decided(); accel != "" { // another boot probed meanwhile
		m.Accel = accel
		return d.boot(ctx, spec, m, d.o.BootTimeout)
	}
	if _, err := os.Stat("/dev/kvm"); err != nil {
		d.decide(AccelTCG, fmt.Sprintf("/dev/kvm: %v", err))
		m.Accel = AccelTCG
		return d.boot(ctx, spec, m, d.o.BootTimeout)
	}
	m.Accel = AccelKVM
	h, err := d.boot(ctx, spec, m, d.o.KVMProbeTimeout)
	if err == nil {
		d.decide(AccelKVM, "a guest booted under KVM")
		return h, nil
	}
	if ctx.Err() != nil {
		return vmm.Handle{}, err
	}
	d.decide(AccelTCG, fmt.Sprintf("KVM boot failed: %v", err))
	m.Accel = AccelTCG
	return d.boot(ctx, spec, m, d.o.BootTimeout)
}

func (d *Driver) decided() string {
	d.accelMu.Lock()
	defer d.accelMu.Unlock()
	return d.accel
}

func (d *Driver) decide(accel, why string) {
	d.accelMu.Lock()
	d.accel = accel
	d.accelMu.Unlock()
	d.o.Logf("qemu: accelerator %s (%s)", accel, why)
}

// boot cold-boots spec with machine m, leaving nothing behind on failure.
func (d *Driver) boot(ctx context.Context, spec vmm.Spec, m Machine, timeout time.Duration) (vmm.Handle, error) {
	dir := d.vmDir(spec.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return vmm.Handle{}, fmt.Errorf("qemu: vm %q already exists", spec.ID)
		}
		return vmm.Handle{}, err
	}
	rec := record{Spec: spec, MemPath: filepath.Join(dir, "mem"), MemShared: true, Restrict: spec.Net != "egress"}
	rec.Handle = vmm.Handle{ID: spec.ID, Backend: Backend, Dir: dir, Token: spec.Token}
	rec.Machine = m
	if m.Disk != "" {
		rec.DiskBase = m.Disk
		rec.Machine.Disk = filepath.Join(dir, "disk.qcow2")
		if err := d.newOverlay(ctx, rec.Machine.Disk, m.Disk, diskFormat(m.Disk)); err != nil {
			_ = os.RemoveAll(dir)
			return vmm.Handle{}, err
		}
	}
	h, err := d.launch(ctx, &rec, "", timeout)
	if err != nil {
		d.kill(rec.Handle.PID, dir)
		_ = os.RemoveAll(dir)
		return vmm.Handle{}, err
	}
	return h, nil
}

// launch starts QEMU for rec (cold boot when incoming is "", else from the
// checkpoint dir incoming), waits for the agent unless the VM stays paused,
// and persists rec. It fills rec.Handle's PID, Addr and Meta.
func (d *Driver) launch(ctx context.Context, rec *record, incoming string, timeout time.Duration) (vmm.Handle, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dir := rec.Handle.Dir
	m := rec.Machine
	m.QMPSocket = filepath.Join(dir, "qmp.sock")
	m.ConsoleLog = filepath.Join(dir, "console.log")
	m.MemPath, m.MemShared, m.Restrict = rec.MemPath, rec.MemShared, rec.Restrict
	m.NetFD = rec.Spec.Net == "egress"
	if incoming != "" {
		m.Incoming = "defer"
	}
	if m.NetFD {
		if err := d.ensureFirewall(ctx); err != nil {
			return vmm.Handle{}, err
		}
	}
	// The identity travels as a fw_cfg file, 0600, removed as soon as QEMU
	// has read it (it has once QMP answers: QMP runs after machine init).
	m.Identity = filepath.Join(dir, "identity")
	id := Identity{Token: rec.Spec.Token, Hostname: "hearth-guest", Env: rec.Spec.Env}
	if err := writeFile0600(m.Identity, id.Encode()); err != nil {
		return vmm.Handle{}, err
	}
	defer os.Remove(m.Identity)
	// A host port picked free may be taken before QEMU (or passt) binds
	// it; QEMU then exits (possibly after its QMP socket appeared) saying
	// "host forwarding", or passt exits, and a new port is tried.
	var pid int
	var q *QMP
	var lastErr error
	for attempt := 0; attempt < 4; attempt++ {
		port, err := freePort()
		if err != nil {
			return vmm.Handle{}, err
		}
		m.HostPort = port
		if err := m.Validate(); err != nil {
			return vmm.Handle{}, err
		}
		var netEnd *os.File
		if m.NetFD {
			if _, netEnd, err = d.startPasst(dir, port); err != nil {
				return vmm.Handle{}, err
			}
		}
		pid, lastErr = d.spawn(ctx, dir, m, netEnd)
		if netEnd != nil {
			netEnd.Close()
		}
		if lastErr == nil {
			q, lastErr = dialQMPWhileAlive(ctx, m.QMPSocket, pid)
			if lastErr == nil && m.NetFD && !passtAlive(dir) {
				q.Close()
				lastErr = fmt.Errorf("qemu: host forwarding of port %d: passt exited: %s", port, logTail(filepath.Join(dir, "passt.log"), 0))
				d.kill(pid, dir)
			} else if lastErr == nil {
				break
			} else {
				lastErr = d.exitErr(dir, pid, fmt.Errorf("qemu: qmp: %w", lastErr))
				d.kill(pid, dir)
			}
		}
		d.killPasst(dir)
		if !strings.Contains(lastErr.Error(), "host forwarding") {
			return vmm.Handle{}, lastErr
		}
	}
	if lastErr != nil {
		return vmm.Handle{}, lastErr
	}
	_ = os.Remove(m.Identity)
	rec.Handle.PID = pid
	rec.Handle.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(m.HostPort))
	rec.Handle.Meta = map[string]string{"qmp": m.QMPSocket, "accel": m.Accel, "memory": memMode(rec), "net": netMode(m)}
	if m.Disk != "" {
		rec.Handle.Meta["disk"] = m.Disk
	}
	defer q.Close()
	if incoming != "" {
		// The stream's RAM blocks were skipped (x-ignore-shared) exactly
		// when the checkpoint carries a memory file; the capability must
		// match on both sides.
		caps := []map[string]any{{"capability": "x-ignore-shared", "state": rec.MemPath != ""}}
		if err := q.Execute(ctx, "migrate-set-capabilities", map[string]any{"capabilities": caps}, nil); err != nil {
			return vmm.Handle{}, d.exitErr(dir, pid, err)
		}
		uri := "exec:cat " + shellQuote(filepath.Join(incoming, "state"))
		if err := q.Execute(ctx, "migrate-incoming", map[string]any{"uri": uri}, nil); err != nil {
			return vmm.Handle{}, d.exitErr(dir, pid, err)
		}
		st, err := waitIncoming(ctx, q)
		if err != nil {
			return vmm.Handle{}, d.exitErr(dir, pid, err)
		}
		if !rec.Handle.Paused && !st.Running {
			if err := q.Execute(ctx, "cont", nil, nil); err != nil {
				return vmm.Handle{}, d.exitErr(dir, pid, err)
			}
		}
	}
	if !rec.Handle.Paused {
		if err := d.waitAgent(ctx, rec.Handle.Addr, pid, m.QMPSocket); err != nil {
			return vmm.Handle{}, d.exitErr(dir, pid, err)
		}
	}
	rec.Machine.HostPort = m.HostPort
	if err := uds.WriteJSON(filepath.Join(dir, "vm.json"), rec); err != nil {
		return vmm.Handle{}, err
	}
	return rec.Handle, nil
}

func netMode(m Machine) string {
	switch {
	case m.NetFD:
		return "passt"
	case m.Restrict:
		return "slirp-restricted"
	default:
		return "slirp"
	}
}

func writeFile0600(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func memMode(rec *record) string {
	switch {
	case rec.MemPath == "":
		return "anonymous"
	case rec.MemShared:
		return "shared-file"
	default:
		return "cow-file"
	}
}

// spawn starts QEMU in its own process group (with netEnd, if any, as its
// fd 3) and waits until its QMP socket exists (or it exits).
func (d *Driver) spawn(ctx context.Context, dir string, m Machine, netEnd *os.File) (int, error) {
	_ = os.Remove(m.QMPSocket)
	logf, err := os.OpenFile(filepath.Join(dir, "qemu.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	logStart, _ := logf.Seek(0, io.SeekEnd)
	cmd := exec.Command(d.o.Binary, m.Args()...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if netEnd != nil {
		cmd.ExtraFiles = []*os.File{netEnd}
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("qemu: start: %w", err)
	}
	pid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }() // reap
	if err := os.WriteFile(filepath.Join(dir, "qemu.pid"), []byte(strconv.Itoa(pid)), 0o600); err != nil {
		_ = cmd.Process.Kill()
		return 0, err
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(m.QMPSocket); err == nil {
			return pid, nil
		}
		select {
		case <-exited:
			return 0, fmt.Errorf("%w: %s", vmm.ErrVMMExited, logTail(filepath.Join(dir, "qemu.log"), logStart))
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			return 0, fmt.Errorf("qemu: waiting for qmp socket: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// dialQMPWhileAlive connects to QEMU's QMP socket, retrying while the
// socket exists but is not yet listening (QEMU binds it before it listens)
// and the process is alive.
func dialQMPWhileAlive(ctx context.Context, sock string, pid int) (*QMP, error) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		q, err := DialQMP(ctx, sock)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || !pidAlive(pid, sock) {
			return q, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-tick.C:
		}
	}
}

func logTail(path string, from int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if from > 0 && from <= int64(len(b)) {
		b = b[from:]
	}
	if len(b) > 800 {
		b = b[len(b)-800:]
	}
	return strings.TrimSpace(string(b))
}

// exitErr decorates err with the QEMU log when the process has died.
func (d *Driver) exitErr(dir string, pid int, err error) error {
	if !pidAlive(pid, filepath.Join(dir, "qmp.sock")) {
		return fmt.Errorf("%w: %v: %s", vmm.ErrVMMExited, err, logTail(filepath.Join(dir, "qemu.log"), 0))
	}
	return err
}

// waitIncoming polls query-status until the incoming migration is over.
func waitIncoming(ctx context.Context, q *QMP) (Status, error) {
	for {
		st, err := q.QueryStatus(ctx)
		if err != nil {
			return Status{}, err
		}
		switch st.Status {
		case "inmigrate":
		case "paused", "running", "postmigrate", "prelaunch":
			return st, nil
		default:
			return st, fmt.Errorf("%w: incoming migration ended in state %q", vmm.ErrSnapshotInvalid, st.Status)
		}
		var mi MigrationInfo
		if err := q.Execute(ctx, "query-migrate", nil, &mi); err == nil && mi.Status == "failed" {
			return st, fmt.Errorf("%w: incoming migration failed: %s", vmm.ErrSnapshotInvalid, mi.ErrorDesc)
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return Status{}, fmt.Errorf("qemu: waiting for incoming migration: %w", err)
		}
	}
}

// waitAgent polls GET /health on addr until the agent answers (204), the
// process dies or ctx ends.
func (d *Driver) waitAgent(ctx context.Context, addr string, pid int, qmp string) error {
	c := &agentapi.Client{Addr: addr, HTTP: d.httpc}
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := c.Health(rctx)
		cancel()
		if err == nil {
			return nil
		}
		if !pidAlive(pid, qmp) {
			return fmt.Errorf("%w: before the agent answered", vmm.ErrVMMExited)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("qemu: waiting for agent at %s: %w", addr, err)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// load reads h's record and checks that it names the same VM.
func (d *Driver) load(h vmm.Handle) (record, error) {
	if !validID(h.ID) {
		return record{}, fmt.Errorf("qemu: invalid vm id %q", h.ID)
	}
	var rec record
	if err := uds.ReadJSON(filepath.Join(d.vmDir(h.ID), "vm.json"), &rec); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return record{}, fmt.Errorf("qemu: vm %q: %w", h.ID, vmm.ErrNotRunning)
		}
		return record{}, err
	}
	return rec, nil
}

// live dials the QMP socket of a running VM.
func (d *Driver) live(ctx context.Context, rec record) (*QMP, error) {
	sock := filepath.Join(rec.Handle.Dir, "qmp.sock")
	if !pidAlive(rec.Handle.PID, sock) {
		return nil, fmt.Errorf("qemu: vm %q: %w", rec.Handle.ID, vmm.ErrNotRunning)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return DialQMP(cctx, sock)
}

// Pause implements vmm.Driver (QMP stop; idempotent).
func (d *Driver) Pause(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	return d.setRun(ctx, h, false)
}

// Resume implements vmm.Driver (QMP cont; idempotent).
func (d *Driver) Resume(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	return d.setRun(ctx, h, true)
}

func (d *Driver) setRun(ctx context.Context, h vmm.Handle, run bool) (vmm.Handle, error) {
	defer d.lock(h.ID)()
	rec, err := d.load(h)
	if err != nil {
		return h, err
	}
	q, err := d.live(ctx, rec)
	if err != nil {
		return h, err
	}
	defer q.Close()
	cmd := "stop"
	if run {
		cmd = "cont"
	}
	if err := q.Execute(ctx, cmd, nil, nil); err != nil {
		return h, err
	}
	rec.Handle.Paused = !run
	if err := uds.WriteJSON(filepath.Join(rec.Handle.Dir, "vm.json"), rec); err != nil {
		return h, err
	}
	return rec.Handle, nil
}

// Snapshot implements vmm.Driver.
func (d *Driver) Snapshot(ctx context.Context, h vmm.Handle, dir string) error {
	defer d.lock(h.ID)()
	rec, err := d.load(h)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("qemu: checkpoint dir %s already exists", dir)
	}
	q, err := d.live(ctx, rec)
	if err != nil {
		return err
	}
	defer q.Close()
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	st, err := q.QueryStatus(ctx)
	if err != nil {
		return err
	}
	man, err := d.capture(ctx, q, rec, tmp, true)
	if st.Running {
		if cerr := q.Execute(ctx, "cont", nil, nil); cerr != nil && err == nil {
			err = cerr
		}
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	man.Paused = !st.Running
	if err := uds.WriteJSON(filepath.Join(tmp, "snapshot.json"), man); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	return nil
}

// capture stops the VM and writes its state (and RAM file, and with
// withDisk a copy of its disk overlay) into dir. It leaves the VM stopped;
// the caller decides whether to cont. Without withDisk the manifest names
// the VM's own overlay (Stop: the VM keeps using it).
func (d *Driver) capture(ctx context.Context, q *QMP, rec record, dir string, withDisk bool) (manifest, error) {
	if err := q.Execute(ctx, "stop", nil, nil); err != nil {
		return manifest{}, err
	}
	shared := rec.MemPath != "" && rec.MemShared
	caps := []map[string]any{{"capability": "x-ignore-shared", "state": shared}}
	if err := q.Execute(ctx, "migrate-set-capabilities", map[string]any{"capabilities": caps}, nil); err != nil {
		return manifest{}, err
	}
	uri := "exec:cat > " + shellQuote(filepath.Join(dir, "state"))
	if err := q.Execute(ctx, "migrate", map[string]any{"uri": uri}, nil); err != nil {
		return manifest{}, err
	}
	for {
		var mi MigrationInfo
		if err := q.Execute(ctx, "query-migrate", nil, &mi); err != nil {
			return manifest{}, err
		}
		if mi.Status == "completed" {
			break
		}
		if mi.Status == "failed" || mi.Status == "cancelled" {
			return manifest{}, fmt.Errorf("qemu: migrate to %s: %s %s", dir, mi.Status, mi.ErrorDesc)
		}
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			_ = q.Execute(context.Background(), "migrate_cancel", nil, nil)
			return manifest{}, err
		}
	}
	limit := vmm.SnapshotLimit(ctx)
	if err := withinLimit(dir, limit); err != nil {
		return manifest{}, err
	}
	man := manifest{Backend: Backend, Machine: rec.Machine, Memory: "stream", Token: rec.Handle.Token, Spec: rec.Spec, Created: time.Now().UTC()}
	man.Machine.HostPort = 0
	// The migration has flushed and released the disk; the overlay is
	// consistent with the captured device state until the VM runs again.
	if withDisk && rec.Machine.Disk != "" {
		if err := d.flatten(ctx, rec.Machine.Disk, filepath.Join(dir, "disk.qcow2"), rec.DiskBase, diskFormat(rec.DiskBase)); err != nil {
			return manifest{}, err
		}
		if err := withinLimit(dir, limit); err != nil {
			return manifest{}, err
		}
		man.Machine.Disk, man.DiskBase = "disk.qcow2", rec.DiskBase
	}
	if shared {
		left := int64(-1)
		if limit >= 0 {
			used, err := allocatedBytes(dir)
			if err != nil {
				return manifest{}, err
			}
			left = max(limit-used, 0)
		}
		n, err := copySparse(rec.MemPath, filepath.Join(dir, "mem"), left)
		if err != nil {
			return manifest{}, err
		}
		man.Memory, man.MemBytes = "file", n
	}
	return man, nil
}

// withinLimit fails with vmm.ErrSnapshotTooLarge when the checkpoint being
// written in dir takes more than limit bytes of the host's disk (negative:
// no limit). capture checks after each part (the migration stream, the
// flattened disk: each bounded by the VM's memory and disk size) and
// bounds the RAM file's copy itself.
func withinLimit(dir string, limit int64) error {
	if limit < 0 {
		return nil
	}
	used, err := allocatedBytes(dir)
	if err != nil {
		return err
	}
	if used > limit {
		return fmt.Errorf("%w: %s takes %d bytes, more than %d", vmm.ErrSnapshotTooLarge, filepath.Base(dir), used, limit)
	}
	return nil
}

// allocatedBytes is what the files directly in dir take on the host's disk.
func allocatedBytes(dir string) (int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			return 0, err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		}
	}
	return n, nil
}

// copySparse copies src to dst, leaving all-zero 64 KiB blocks as holes.
// It writes at most limit bytes (negative: no bound); past that it fails
// with vmm.ErrSnapshotTooLarge (the caller removes dst).
func copySparse(src, dst string, limit int64) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 64<<10)
	zero := make([]byte, len(buf))
	var off, written int64
	for {
		n, rerr := io.ReadFull(in, buf)
		if n > 0 {
			if !bytes.Equal(buf[:n], zero[:n]) {
				if written += int64(n); limit >= 0 && written > limit {
					out.Close()
					return 0, fmt.Errorf("%w: the RAM file's copy passed %d bytes", vmm.ErrSnapshotTooLarge, limit)
				}
				if _, err := out.WriteAt(buf[:n], off); err != nil {
					out.Close()
					return 0, err
				}
			}
			off += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			out.Close()
			return 0, rerr
		}
	}
	if err := out.Truncate(off); err != nil {
		out.Close()
		return 0, err
	}
	return off, out.Close()
}

func readManifest(dir string) (manifest, error) {
	var man manifest
	if err := uds.ReadJSON(filepath.Join(dir, "snapshot.json"), &man); err != nil {
		return manifest{}, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
	}
	if man.Backend != Backend {
		return manifest{}, fmt.Errorf("%w: backend %q, want %q", vmm.ErrSnapshotInvalid, man.Backend, Backend)
	}
	if _, err := os.Stat(filepath.Join(dir, "state")); err != nil {
		return manifest{}, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
	}
	if man.Machine.Disk == "disk.qcow2" {
		if _, err := os.Stat(filepath.Join(dir, "disk.qcow2")); err != nil {
			return manifest{}, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
		}
	}
	if man.Memory == "file" {
		fi, err := os.Stat(filepath.Join(dir, "mem"))
		if err != nil {
			return manifest{}, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
		}
		if fi.Size() != int64(man.Machine.MemoryMiB)<<20 {
			return manifest{}, fmt.Errorf("%w: mem is %d bytes, want %d", vmm.ErrSnapshotInvalid, fi.Size(), int64(man.Machine.MemoryMiB)<<20)
		}
	}
	return man, nil
}

// Clone implements vmm.Driver. The clone keeps the checkpoint's template,
// size and environment; spec supplies its id, token and lane.
func (d *Driver) Clone(ctx context.Context, dir string, spec vmm.Spec) (vmm.Handle, error) {
	if err := d.checkSpec(spec); err != nil {
		return vmm.Handle{}, err
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return vmm.Handle{}, err
	}
	man, err := readManifest(dir)
	if err != nil {
		return vmm.Handle{}, err
	}
	defer d.lock(spec.ID)()
	vdir := d.vmDir(spec.ID)
	if err := os.Mkdir(vdir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return vmm.Handle{}, fmt.Errorf("qemu: vm %q already exists", spec.ID)
		}
		return vmm.Handle{}, err
	}
	full := man.Spec
	full.ID, full.Token = spec.ID, spec.Token
	if spec.Net != "" {
		full.Net = spec.Net
	}
	rec := record{Spec: full, Machine: man.Machine, Restrict: full.Net != "egress"}
	rec.Handle = vmm.Handle{ID: spec.ID, Backend: Backend, Dir: vdir, Token: man.Token}
	if man.Memory == "file" {
		rec.MemPath = filepath.Join(dir, "mem")
	}
	var err2 error
	if man.Machine.Disk != "" {
		rec.DiskBase = man.DiskBase
		rec.Machine.Disk = filepath.Join(vdir, "disk.qcow2")
		err2 = d.newOverlay(ctx, rec.Machine.Disk, filepath.Join(dir, "disk.qcow2"), "qcow2")
	}
	h, err := vmm.Handle{}, err2
	if err == nil {
		h, err = d.launch(ctx, &rec, dir, d.o.BootTimeout)
	}
	// Re-key before returning: the checkpoint's token must never work on a
	// VM that can be handed out.
	if err == nil && spec.Token != man.Token {
		err = d.setIdentity(ctx, h.Addr, man.Token, spec.Token)
		if err == nil {
			rec.Handle.Token = spec.Token
			h = rec.Handle
			err = uds.WriteJSON(filepath.Join(vdir, "vm.json"), rec)
		}
	}
	if err != nil {
		d.kill(rec.Handle.PID, vdir)
		_ = os.RemoveAll(vdir)
		return vmm.Handle{}, err
	}
	return h, nil
}

// setIdentity hands the agent at addr its new token, authenticated with
// old. A transport error is retried (the restored guest's network may not
// carry the request yet); an answer other than 2xx is final.
func (d *Driver) setIdentity(ctx context.Context, addr, old, token string) error {
	c := &agentapi.Client{Addr: addr, Token: old, HTTP: d.httpc}
	var last error
	for attempt := 0; attempt < 20; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.SetIdentity(rctx, token)
		cancel()
		if err == nil {
			return nil
		}
		if agentapi.StatusOf(err) != 0 {
			return fmt.Errorf("qemu: agent identity: %w", err)
		}
		last = err
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("qemu: agent identity: %w", last)
}

// Stop implements vmm.Driver: it checkpoints the VM into h.Dir/stopped
// (keeping its run state) and ends QEMU.
func (d *Driver) Stop(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	defer d.lock(h.ID)()
	rec, err := d.load(h)
	if err != nil {
		return h, err
	}
	q, err := d.live(ctx, rec)
	if err != nil {
		return h, err
	}
	defer q.Close()
	st, err := q.QueryStatus(ctx)
	if err != nil {
		return h, err
	}
	dst := filepath.Join(rec.Handle.Dir, "stopped")
	tmp := dst + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return h, err
	}
	man, err := d.capture(ctx, q, rec, tmp, false)
	if err != nil {
		if st.Running {
			_ = q.Execute(ctx, "cont", nil, nil)
		}
		_ = os.RemoveAll(tmp)
		return h, err
	}
	man.Paused = !st.Running
	if err := uds.WriteJSON(filepath.Join(tmp, "snapshot.json"), man); err != nil {
		return h, err
	}
	_ = os.RemoveAll(dst)
	if err := os.Rename(tmp, dst); err != nil {
		return h, err
	}
	_ = q.Execute(ctx, "quit", nil, nil)
	d.kill(rec.Handle.PID, rec.Handle.Dir)
	if rec.MemShared {
		_ = os.Remove(rec.MemPath) // the checkpoint holds a copy
	}
	rec.Handle.PID = 0
	rec.Handle.Paused = !st.Running
	if err := uds.WriteJSON(filepath.Join(rec.Handle.Dir, "vm.json"), rec); err != nil {
		return h, err
	}
	return rec.Handle, nil
}

// Restore implements vmm.Driver.
func (d *Driver) Restore(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	defer d.lock(h.ID)()
	rec, err := d.load(h)
	if err != nil {
		return h, err
	}
	if pidAlive(rec.Handle.PID, filepath.Join(rec.Handle.Dir, "qmp.sock")) {
		q, err := d.live(ctx, rec)
		if err != nil {
			return h, err
		}
		defer q.Close()
		st, err := q.QueryStatus(ctx)
		if err != nil {
			return h, err
		}
		rec.Handle.Paused = !st.Running
		return rec.Handle, uds.WriteJSON(filepath.Join(rec.Handle.Dir, "vm.json"), rec)
	}
	src := filepath.Join(rec.Handle.Dir, "stopped")
	man, err := readManifest(src)
	if err != nil {
		return h, fmt.Errorf("qemu: vm %q: not running and no stop checkpoint: %w", h.ID, err)
	}
	rec.Machine = man.Machine
	rec.MemShared = false
	rec.MemPath = ""
	if man.Memory == "file" {
		rec.MemPath = filepath.Join(src, "mem")
	}
	rec.Handle.Paused = man.Paused
	out, err := d.launch(ctx, &rec, src, d.o.BootTimeout)
	if err != nil {
		d.kill(rec.Handle.PID, rec.Handle.Dir)
		return h, err
	}
	return out, nil
}

// Destroy implements vmm.Driver.
func (d *Driver) Destroy(ctx context.Context, h vmm.Handle) error {
	if !validID(h.ID) {
		return fmt.Errorf("qemu: invalid vm id %q", h.ID)
	}
	defer d.lock(h.ID)()
	dir := d.vmDir(h.ID)
	pid := h.PID
	var rec record
	if err := uds.ReadJSON(filepath.Join(dir, "vm.json"), &rec); err == nil {
		pid = rec.Handle.PID
	} else if b, err := os.ReadFile(filepath.Join(dir, "qemu.pid")); err == nil {
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	d.kill(pid, dir)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	d.locksMu.Lock()
	delete(d.locks, h.ID)
	d.locksMu.Unlock()
	return nil
}

// kill ends the QEMU process of dir (SIGKILL to its process group) and
// waits, bounded, until it is gone.
func (d *Driver) kill(pid int, dir string) {
	defer d.killPasst(dir)
	sock := filepath.Join(dir, "qmp.sock")
	if !pidAlive(pid, sock) {
		return
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	// A dying process loses its cmdline before it is dead, so wait on its
	// state: gone, or a zombie (dead; its parent reaps it).
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		st, err := readProcStat(pid)
		if err != nil || st.State == 'Z' || st.State == 'X' {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Stats implements vmm.Driver from /proc/PID/smaps_rollup and /proc/PID/stat.
func (d *Driver) Stats(ctx context.Context, h vmm.Handle) (vmm.Stats, error) {
	rec, err := d.load(h)
	if err != nil {
		return vmm.Stats{}, err
	}
	s := vmm.Stats{CPUCount: rec.Machine.VCPUs, MemTotalBytes: int64(rec.Machine.MemoryMiB) << 20, MeasuredAt: time.Now().UTC()}
	pid := rec.Handle.PID
	if !pidAlive(pid, filepath.Join(rec.Handle.Dir, "qmp.sock")) {
		return s, fmt.Errorf("qemu: vm %q: %w", h.ID, vmm.ErrNotRunning)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return s, err
	}
	sm, err := ParseSmapsRollup(b)
	if err != nil {
		return s, err
	}
	st, err := readProcStat(pid)
	if err != nil {
		return s, err
	}
	s.RSSBytes, s.PrivateBytes, s.SharedBytes = sm.RSS, sm.Private, sm.Shared
	s.MemUsedBytes = sm.PSS
	// An egress VM's passt (about 20 MiB, mostly private) is its process too.
	if pp := passtPID(rec.Handle.Dir); pp > 0 {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pp) + "/smaps_rollup"); err == nil {
			if ps, err := ParseSmapsRollup(b); err == nil {
				s.RSSBytes += ps.RSS
				s.PrivateBytes += ps.Private
				s.SharedBytes += ps.Shared
				s.MemUsedBytes += ps.PSS
			}
		}
	}
	s.MemUsedMeasured = !rec.Handle.Paused
	s.CPUSeconds = float64(st.UTime+st.STime) / clockTicks
	return s, nil
}

// List implements vmm.Driver: every VM under Root whose QEMU still runs.
func (d *Driver) List(ctx context.Context) ([]vmm.Handle, error) {
	ents, err := os.ReadDir(d.o.Root)
	if err != nil {
		return nil, err
	}
	var out []vmm.Handle
	for _, e := range ents {
		if !e.IsDir() || !validID(e.Name()) {
			continue
		}
		dir := filepath.Join(d.o.Root, e.Name())
		var rec record
		if err := uds.ReadJSON(filepath.Join(dir, "vm.json"), &rec); err != nil {
			// A VM mid-boot has a pidfile but no record yet.
			b, err := os.ReadFile(filepath.Join(dir, "qemu.pid"))
			if err != nil {
				continue
			}
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if pidAlive(pid, filepath.Join(dir, "qmp.sock")) {
				out = append(out, vmm.Handle{ID: e.Name(), Backend: Backend, Dir: dir, PID: pid})
			}
			continue
		}
		if pidAlive(rec.Handle.PID, filepath.Join(dir, "qmp.sock")) {
			out = append(out, rec.Handle)
		}
	}
	return out, nil
}
