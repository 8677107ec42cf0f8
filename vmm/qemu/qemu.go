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
//     passt (started with --no-map-gw, so the gateway is not the host's
//     loopback, as a uid of the VM's own from Options.EgressUID, kept in
//     egress-uid across a stop and Restore, released by Destroy) which
//     also forwards the agent port; the driver's nftables table (see
//     passt.go) rejects new connections from those uids to every address
//     of the node itself and to 169.254.0.0/16 and fe80::/10. Other hosts
//     on the node's networks (its gateway, other nodes, cluster service
//     IPs) are reachable unless an egress policy denies them. Both lanes
//     give the guest 10.0.2.15/24 via 10.0.2.2, DNS 10.0.2.3, so
//     checkpoints clone onto either.
//   - Egress policies (vmm.EgressEnforcer; egress.go): each egress VM's
//     filter is a package egress/nft owner filter in the host's
//     namespace, table inet hearth_egress_owners (chains per uid, reached
//     through a verdict map by the sending socket's uid), holding every
//     packet its passt sends to the pool's policy (Spec.Egress, installed before passt
//     starts) and the claim's (SetEgress: additions only; recorded in
//     vm.json and installed again before a restored guest runs). The
//     guest's DNS reaches the VM's own resolver (package egress/resolver,
//     on 127.78.x.y:53 from its uid; Options.DNS upstream): it answers only
//     names the policies allow and pins its answers into the filter's
//     domain sets. Without a nameserver in the host's resolv.conf or with
//     EgressFirewall "off", domain rules are vmm.ErrUnsupported.
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
//   - Stop (the node's orderly shutdown) checkpoints the VM with its
//     memory into <dir>/stopped; Restore brings it back as it was.
//     Shutdown (vmm.Shutdowner: the node's pause without memory) keeps
//     only the disk: the guest runs sync as root through its agent
//     (bounded by 30 s; past it, or if the guest's agent does not answer,
//     the disk holds what the guest flushed), QEMU quits, flushing
//     disk.qcow2, and Restore cold-boots the VM from that disk with fresh
//     RAM — a new boot (a new boot_id), no process of the old one.
//   - Clone starts QEMU with -incoming from a checkpoint over a fresh
//     overlay of the checkpoint's disk, then — before returning — hands the
//     guest agent the clone's own token through POST /hearth/identity
//     (agentapi.Client.SetIdentity, authenticated with the checkpoint's
//     token), which the agent also writes to its token file: the
//     checkpoint's token never works on a clone, and an agent restarted in
//     the guest keeps the clone's token.
//   - OOM kills (vmm.OOMCounter; oom.go): the guest kernel's oom_kill
//     counter (/proc/vmstat), asked of the guest's agent
//     (agentapi.OOMKillsPath, bounded by 2 s). Snapshot of a running VM
//     records it in the checkpoint, and a clone subtracts that count (or,
//     from a paused VM's checkpoint, the one it reads as it starts), so a
//     clone counts from 0, as does a VM that Restore boots again after
//     Shutdown; Stop and a Restore of its memory keep the count.
//
// The driver owns only processes and files under Root, the checkpoint
// directories callers name, the nftables table inet hearth_qemu and the
// chains and map entries of its uid range in inet hearth_egress_owners,
// and its resolvers' addresses 127.78.x.y:53; it
// never decides which VM is warm or claimed. Base images must not change
// while a VM or checkpoint uses them.
package qemu

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/egress"
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
	// EgressUID is the first of the uids passt runs as, one per VM of the
	// egress lane, matched by the egress firewall and each VM's egress
	// filter; default DefaultEgressUID. Nothing else may use them.
	EgressUID int
	// EgressUIDs is how many uids from EgressUID (at most that many VMs
	// on the egress lane); default DefaultEgressUIDs.
	EgressUIDs int
	// DNS are the upstream servers ("host" or "host:port") of the egress
	// lane's resolvers; default the host's /etc/resolv.conf's.
	DNS []string
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

	uidMu sync.Mutex
	uids  map[int]string // egress uid → VM id; nil until loaded from Root

	egMu    sync.Mutex
	egress  map[string]*egressVM // per VM id, the egress lane's in this process
	hostDNS netip.Addr           // where passt sends the guest's DNS (hostDNS)

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
	if o.EgressUIDs <= 0 {
		o.EgressUIDs = DefaultEgressUIDs
	}
	if o.EgressUID < 1 || o.EgressUID+o.EgressUIDs > 1<<16 {
		return nil, fmt.Errorf("qemu: egress uids %d to %d: want uids of 1 to 65535", o.EgressUID, o.EgressUID+o.EgressUIDs-1)
	}
	o.DNS = upstreamDNS(o.DNS)
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
	d := &Driver{o: o, locks: map[string]*sync.Mutex{}, egress: map[string]*egressVM{}, hostDNS: hostDNS(), httpc: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}, CheckRedirect: agentapi.NoRedirect}}
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
	// Shutdown: Shutdown left only the disk; Restore boots it again.
	Shutdown bool `json:"shutdown,omitempty"`
	// Egress is the claim's egress policy (SetEgress), installed again
	// with the pool's (Spec.Egress) before a restored guest runs.
	Egress *egress.Policy `json:"egress,omitempty"`
	// OOMBase is the guest kernel's OOM kill count a clone started with
	// (its checkpoint's), which OOMKills subtracts; 0 after a new boot.
	OOMBase uint64 `json:"oom_base,omitempty"`
}

func writeRecord(rec record) error {
	return uds.WriteJSON(filepath.Join(rec.Handle.Dir, "vm.json"), rec)
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
	// OOMKills is the guest kernel's OOM kill count just before the
	// capture, its clones' baseline (record.OOMBase); nil when not read
	// (a paused VM's guest cannot answer: a clone reads its own as it
	// starts).
	OOMKills *uint64 `json:"oom_kills,omitempty"`
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
	d.stopEgress(rec.Handle.ID)
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
		if rec.Spec.Net == "egress" && !d.hasEgress(rec.Handle.ID) {
			// Re-adopted: its filter holds on; this process serves its
			// resolver again, and SetEgress prepares the filter anew.
			if uid := readUID(rec.Handle.Dir); uid != 0 {
				if err := d.startEgress(&rec, uid, false); err != nil {
					return h, err
				}
			}
		}
		return rec.Handle, uds.WriteJSON(filepath.Join(rec.Handle.Dir, "vm.json"), rec)
	}
	if rec.Shutdown {
		return d.bootAgain(ctx, rec)
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
	if err := d.dropEgress(h.ID, dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	d.releaseUID(h.ID)
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
