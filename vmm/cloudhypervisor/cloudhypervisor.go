// Package cloudhypervisor is the vmm.Driver for Cloud Hypervisor: one
// `cloud-hypervisor --api-socket path=<dir>/api.sock` process per microVM,
// created and driven over its REST API (/api/v1, cloud-hypervisor.yaml), the
// in-guest agent reached over hybrid vsock through a per-VM loopback relay
// (Handle.Addr).
//
// It owns <RootDir>/<vm id>/ (api.sock, vsock.sock, vmm.log, serial.log,
// handle.json, restore/ and state/ snapshot directories) and the processes it
// started there, nothing else.
//
// Contract and limits:
//   - Boot = vm.create (VmConfig) + vm.boot; the agent token reaches the guest
//     as `hearth.token=` on the kernel command line.
//   - Pause/Resume are made idempotent here: CH answers a same-state
//     transition with 500, so the driver reads vm.info first.
//   - Snapshot = vm.pause (if running) → vm.snapshot{destination_url:
//     file://<dir>/vm} → vm.resume. Disks are not captured (the rootfs is
//     attached read-only).
//   - Clone copies config.json (patched: vsock socket, tap, serial file) and
//     state.json, hardlinks the memory-range files, then vm.restore +
//     vm.resume in a fresh process. The guest MAC stays the checkpoint's
//     (changing it needs vm.remove-device + vm.add-net; not done). vCPUs and
//     memory are the checkpoint's. The agent is re-keyed as in firecracker.
//   - memory_restore_mode is sent only when Options.MemoryRestoreMode is set
//     ("CopyOnWrite" shares clean pages between clones on CH versions that
//     have it; the default Copy reads the whole memory in).
//   - Stop = pause + snapshot into state/ + vmm.shutdown; Restore re-adopts a
//     live process (PID + cmdline check) or restores state/.
package cloudhypervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

// Name is the backend id.
const Name = "cloud-hypervisor"

// Size is one size class.
type Size struct {
	VCPUs  int
	MemMiB int
}

// DefaultSizes maps the pool size classes to VM shapes.
var DefaultSizes = map[string]Size{
	"small":  {VCPUs: 1, MemMiB: 512},
	"medium": {VCPUs: 2, MemMiB: 2048},
	"large":  {VCPUs: 4, MemMiB: 8192},
}

// DefaultCmdline is the guest kernel command line.
const DefaultCmdline = "console=ttyS0 reboot=k panic=1"

// Options configure the driver.
type Options struct {
	// RootDir holds one directory per VM. Required.
	RootDir string
	// Binary is the cloud-hypervisor executable; default on PATH.
	Binary string
	// Args are extra arguments after --api-socket.
	Args []string
	// Env is extra environment for the VMM process.
	Env []string
	// Kernel is the guest kernel (vmlinux / bzImage). Required.
	Kernel string
	// Initramfs is optional.
	Initramfs string
	// Rootfs is an optional disk attached read-only to every VM.
	Rootfs string
	// Cmdline is the kernel command line; default DefaultCmdline.
	Cmdline string
	// Sizes overrides DefaultSizes.
	Sizes map[string]Size
	// GuestCID is the vsock CID (hybrid vsock: reusable); default 3.
	GuestCID uint32
	// AgentPort is the guest vsock port of the agent; default 49983.
	AgentPort uint32
	// TapName names the egress tap for a VM id; default uds.TapName("ch", id).
	TapName func(id string) string
	// MemoryRestoreMode, when set, is sent as vm.restore memory_restore_mode.
	MemoryRestoreMode string
	// Prefault, when set, is sent as vm.restore prefault.
	Prefault *bool
	// StartTimeout bounds spawn → agent answering; default 30s.
	StartTimeout time.Duration
}

// Driver is the Cloud Hypervisor vmm.Driver.
type Driver struct {
	o    Options
	mu   sync.Mutex
	live map[string]*live
}

type live struct {
	proc  *uds.Process
	relay *uds.Relay
}

var _ vmm.Driver = (*Driver)(nil)

// New validates o and returns a driver.
func New(o Options) (*Driver, error) {
	if o.RootDir == "" {
		return nil, errors.New("cloud-hypervisor: RootDir is required")
	}
	root, err := filepath.Abs(o.RootDir)
	if err != nil {
		return nil, err
	}
	o.RootDir = root
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	if o.Binary == "" {
		o.Binary = "cloud-hypervisor"
	}
	if o.Cmdline == "" {
		o.Cmdline = DefaultCmdline
	}
	if o.Sizes == nil {
		o.Sizes = DefaultSizes
	}
	if o.GuestCID == 0 {
		o.GuestCID = 3
	}
	if o.AgentPort == 0 {
		o.AgentPort = 49983
	}
	if o.TapName == nil {
		o.TapName = func(id string) string { return uds.TapName("ch", id) }
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 30 * time.Second
	}
	return &Driver{o: o, live: map[string]*live{}}, nil
}

// Name implements vmm.Driver.
func (d *Driver) Name() string { return Name }

// RootDir is the driver's root directory.
func (d *Driver) RootDir() string { return d.o.RootDir }

type paths struct {
	Dir, API, Vsock, Log, Serial, Handle, Restore, State string
}

func vmPaths(dir string) paths {
	return paths{
		Dir:     dir,
		API:     filepath.Join(dir, "api.sock"),
		Vsock:   filepath.Join(dir, "vsock.sock"),
		Log:     filepath.Join(dir, "vmm.log"),
		Serial:  filepath.Join(dir, "serial.log"),
		Handle:  filepath.Join(dir, "handle.json"),
		Restore: filepath.Join(dir, "restore"),
		State:   filepath.Join(dir, "state"),
	}
}

// CreateConfig is the vm.create body for a cold boot (pure; table-tested).
func CreateConfig(o Options, spec vmm.Spec, sz Size, p paths) VmConfig {
	cmdline := o.Cmdline + " hearth.id=" + spec.ID
	if spec.Token != "" {
		cmdline += " hearth.token=" + spec.Token
	}
	c := VmConfig{
		Cpus:    &CpusConfig{BootVcpus: sz.VCPUs, MaxVcpus: sz.VCPUs},
		Memory:  &MemoryConfig{Size: int64(sz.MemMiB) << 20},
		Payload: &PayloadConfig{Kernel: o.Kernel, Initramfs: o.Initramfs, Cmdline: cmdline},
		Rng:     &RngConfig{Src: "/dev/urandom"},
		Serial:  &ConsoleConfig{Mode: "File", File: p.Serial},
		Console: &ConsoleConfig{Mode: "Off"},
		Vsock:   &VsockConfig{CID: o.GuestCID, Socket: p.Vsock, ID: "vsock0"},
	}
	if o.Rootfs != "" {
		c.Disks = []DiskConfig{{Path: o.Rootfs, Readonly: true, ID: "rootfs"}}
	}
	if spec.Net == "egress" {
		c.Net = []NetConfig{{Tap: o.TapName(spec.ID), MAC: uds.MAC(spec.ID), ID: "net0"}}
	}
	return c
}

// PatchConfig rewrites a snapshot's config.json for a VM living in p: its
// vsock socket, serial file and (egress) tap. It edits the JSON generically so
// fields Hearth does not model survive.
func PatchConfig(raw []byte, p paths, tap string) ([]byte, error) {
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("%w: config.json: %v", vmm.ErrSnapshotInvalid, err)
	}
	if v, ok := cfg["vsock"].(map[string]any); ok {
		v["socket"] = p.Vsock
	}
	if s, ok := cfg["serial"].(map[string]any); ok && s["mode"] == "File" {
		s["file"] = p.Serial
	}
	if nets, ok := cfg["net"].([]any); ok && tap != "" {
		for _, n := range nets {
			if m, ok := n.(map[string]any); ok {
				m["tap"] = tap
			}
		}
	}
	return json.Marshal(cfg)
}

func (d *Driver) size(name string) (Size, error) {
	sz, ok := d.o.Sizes[name]
	if !ok {
		return Size{}, fmt.Errorf("cloud-hypervisor: unknown size %q", name)
	}
	return sz, nil
}

func checkSpec(spec vmm.Spec) error {
	if err := uds.ValidID(spec.ID); err != nil {
		return err
	}
	switch spec.Net {
	case "none", "egress":
	default:
		return fmt.Errorf("cloud-hypervisor: unknown net lane %q", spec.Net)
	}
	return nil
}

func (d *Driver) start(ctx context.Context, p paths) (*uds.Process, *uds.Client, error) {
	for _, s := range []string{p.API, p.Vsock + "_" + strconv.Itoa(int(d.o.AgentPort))} {
		if err := uds.CheckSocketPath(s); err != nil {
			return nil, nil, err
		}
	}
	_ = os.Remove(p.API)
	_ = os.Remove(p.Vsock)
	args := append([]string{"--api-socket", "path=" + p.API}, d.o.Args...)
	proc, err := uds.Spawn(d.o.Binary, args, d.o.Env, p.Log)
	if err != nil {
		return nil, nil, err
	}
	c := uds.NewClient(p.API)
	err = uds.Poll(ctx, func() error {
		if proc.Exited() {
			return vmm.ErrVMMExited
		}
		var ping VmmPingResponse
		return c.Do(ctx, "GET", API+"/vmm.ping", nil, &ping)
	})
	if err != nil {
		_ = uds.Kill(context.Background(), proc, 0, "")
		return nil, nil, d.exitErr(p, fmt.Errorf("cloud-hypervisor api: %w", err))
	}
	return proc, c, nil
}

func (d *Driver) exitErr(p paths, err error) error {
	if t := uds.LogTail(p.Log, 1024); t != "" {
		return fmt.Errorf("%w; vmm log: %s", err, t)
	}
	return err
}

func (d *Driver) attach(ctx context.Context, h *vmm.Handle, proc *uds.Process) error {
	p := vmPaths(h.Dir)
	relay, err := uds.StartRelay("", p.Vsock, d.o.AgentPort)
	if err != nil {
		return err
	}
	h.Addr = relay.Addr()
	d.mu.Lock()
	if old := d.live[h.ID]; old != nil && old.relay != nil {
		old.relay.Close()
	}
	d.live[h.ID] = &live{proc: proc, relay: relay}
	d.mu.Unlock()
	if h.Paused {
		return nil
	}
	var exited <-chan struct{}
	if proc != nil {
		exited = proc.Done()
	}
	if err := uds.WaitAgent(ctx, h.Addr, exited); err != nil {
		return d.exitErr(p, fmt.Errorf("cloud-hypervisor: agent did not answer: %w", err))
	}
	return nil
}

func (d *Driver) newHandle(spec vmm.Spec, p paths, pid int, sz Size) vmm.Handle {
	h := vmm.Handle{
		ID: spec.ID, Backend: Name, Dir: p.Dir, PID: pid, Token: spec.Token,
		Meta: map[string]string{
			"api_sock": p.API, "vsock_uds": p.Vsock,
			"guest_cid": strconv.Itoa(int(d.o.GuestCID)),
			"vcpus":     strconv.Itoa(sz.VCPUs), "mem_mib": strconv.Itoa(sz.MemMiB),
			"template": spec.Template, "net": spec.Net, "size": spec.Size,
		},
	}
	if spec.Net == "egress" {
		h.Meta["tap"] = d.o.TapName(spec.ID)
		h.Meta["mac"] = uds.MAC(spec.ID)
	}
	return h
}

func (d *Driver) take(id string) *live {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := d.live[id]
	delete(d.live, id)
	return l
}

func (d *Driver) fail(id string, p paths, proc *uds.Process, err error) error {
	if l := d.take(id); l != nil && l.relay != nil {
		l.relay.Close()
	}
	if proc != nil {
		_ = uds.Kill(context.Background(), proc, 0, "")
	}
	_ = os.RemoveAll(p.Dir)
	return err
}

// Boot implements vmm.Driver.
func (d *Driver) Boot(ctx context.Context, spec vmm.Spec) (vmm.Handle, error) {
	if err := checkSpec(spec); err != nil {
		return vmm.Handle{}, err
	}
	sz, err := d.size(spec.Size)
	if err != nil {
		return vmm.Handle{}, err
	}
	if d.o.Kernel == "" {
		return vmm.Handle{}, errors.New("cloud-hypervisor: no guest kernel configured")
	}
	p := vmPaths(filepath.Join(d.o.RootDir, spec.ID))
	if err := os.Mkdir(p.Dir, 0o700); err != nil {
		return vmm.Handle{}, fmt.Errorf("cloud-hypervisor: vm dir: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, d.o.StartTimeout)
	defer cancel()
	proc, c, err := d.start(ctx, p)
	if err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, nil, err)
	}
	defer c.Close()
	if err := c.Do(ctx, "PUT", API+"/vm.create", CreateConfig(d.o, spec, sz, p), nil); err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, proc, fmt.Errorf("cloud-hypervisor create: %w", err))
	}
	if err := c.Do(ctx, "PUT", API+"/vm.boot", nil, nil); err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, proc, d.exitErr(p, fmt.Errorf("cloud-hypervisor boot: %w", err)))
	}
	h := d.newHandle(spec, p, proc.PID(), sz)
	if err := d.attach(ctx, &h, proc); err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, proc, err)
	}
	if err := uds.InitEnv(ctx, h.Addr, h.Token, spec.Env); err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, proc, err)
	}
	if err := uds.WriteJSON(p.Handle, h); err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, proc, err)
	}
	return h, nil
}

func (d *Driver) client(h vmm.Handle) (*uds.Client, error) {
	p := vmPaths(h.Dir)
	if !uds.Alive(h.PID, p.API) {
		return nil, fmt.Errorf("cloud-hypervisor %s: %w", h.ID, vmm.ErrNotRunning)
	}
	return uds.NewClient(p.API), nil
}

func info(ctx context.Context, c *uds.Client) (VmInfo, error) {
	var i VmInfo
	err := c.Do(ctx, "GET", API+"/vm.info", nil, &i)
	return i, err
}

// transition moves the VM to want (Paused or Running); a VM already there
// is success (CH itself answers 500 InvalidStateTransition).
func transition(ctx context.Context, c *uds.Client, want string) error {
	i, err := info(ctx, c)
	if err != nil {
		return err
	}
	if i.State == want {
		return nil
	}
	op := "/vm.pause"
	if want == StateRunning {
		op = "/vm.resume"
	}
	return c.Do(ctx, "PUT", API+op, nil, nil)
}

func (d *Driver) setState(ctx context.Context, h vmm.Handle, want string) (vmm.Handle, error) {
	c, err := d.client(h)
	if err != nil {
		return h, err
	}
	defer c.Close()
	if err := transition(ctx, c, want); err != nil {
		return h, fmt.Errorf("cloud-hypervisor %s: %w", h.ID, err)
	}
	h.Paused = want == StatePaused
	return h, uds.WriteJSON(vmPaths(h.Dir).Handle, h)
}

// Pause implements vmm.Driver.
func (d *Driver) Pause(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	return d.setState(ctx, h, StatePaused)
}

// Resume implements vmm.Driver.
func (d *Driver) Resume(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	return d.setState(ctx, h, StateRunning)
}

// Manifest describes a checkpoint directory (CH's own files live in vm/).
type Manifest struct {
	Backend  string    `json:"backend"`
	Source   string    `json:"source"`
	Template string    `json:"template"`
	Net      string    `json:"net"`
	Size     string    `json:"size"`
	VCPUs    int       `json:"vcpus"`
	MemMiB   int       `json:"mem_mib"`
	Token    string    `json:"token"`
	MAC      string    `json:"mac,omitempty"`
	Created  time.Time `json:"created"`
}

// snapshotTo writes CH's snapshot files into dir (which must exist).
func snapshotTo(ctx context.Context, c *uds.Client, dir string, keepPaused bool) error {
	i, err := info(ctx, c)
	if err != nil {
		return err
	}
	running := i.State == StateRunning
	if running {
		if err := c.Do(ctx, "PUT", API+"/vm.pause", nil, nil); err != nil {
			return err
		}
	}
	err = c.Do(ctx, "PUT", API+"/vm.snapshot", VmSnapshotConfig{DestinationURL: "file://" + dir}, nil)
	if running && !keepPaused {
		if rerr := c.Do(context.WithoutCancel(ctx), "PUT", API+"/vm.resume", nil, nil); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// Snapshot implements vmm.Driver.
func (d *Driver) Snapshot(ctx context.Context, h vmm.Handle, dir string) error {
	c, err := d.client(h)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("cloud-hypervisor snapshot: %w", err)
	}
	vmDir := filepath.Join(dir, "vm")
	if err := os.Mkdir(vmDir, 0o700); err != nil {
		os.RemoveAll(dir)
		return err
	}
	if err := snapshotTo(ctx, c, vmDir, false); err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("cloud-hypervisor snapshot %s: %w", h.ID, err)
	}
	vcpus, _ := strconv.Atoi(h.Meta["vcpus"])
	mem, _ := strconv.Atoi(h.Meta["mem_mib"])
	m := Manifest{
		Backend: Name, Source: h.ID, Template: h.Meta["template"], Net: h.Meta["net"], Size: h.Meta["size"],
		VCPUs: vcpus, MemMiB: mem, Token: h.Token, MAC: h.Meta["mac"], Created: time.Now().UTC(),
	}
	if err := uds.WriteJSON(filepath.Join(dir, "manifest.json"), m); err != nil {
		os.RemoveAll(dir)
		return err
	}
	return nil
}

// ReadManifest reads and preflights a checkpoint directory.
func ReadManifest(dir string) (Manifest, error) {
	var m Manifest
	if err := uds.ReadJSON(filepath.Join(dir, "manifest.json"), &m); err != nil {
		return m, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
	}
	if m.Backend != Name {
		return m, fmt.Errorf("%w: backend %q, not %s", vmm.ErrSnapshotInvalid, m.Backend, Name)
	}
	for _, f := range []string{"config.json", "state.json"} {
		if _, err := os.Stat(filepath.Join(dir, "vm", f)); err != nil {
			return m, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
		}
	}
	return m, nil
}

// stage lays out a snapshot from src (CH files) in dst for the VM in p:
// config.json patched, state.json copied, memory files hardlinked.
func stage(src, dst string, p paths, tap string) error {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		s, t := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		switch e.Name() {
		case "config.json":
			raw, err := os.ReadFile(s)
			if err != nil {
				return err
			}
			out, err := PatchConfig(raw, p, tap)
			if err != nil {
				return err
			}
			if err := os.WriteFile(t, out, 0o600); err != nil {
				return err
			}
		case "state.json":
			raw, err := os.ReadFile(s)
			if err != nil {
				return err
			}
			if err := os.WriteFile(t, raw, 0o600); err != nil {
				return err
			}
		default:
			if err := uds.LinkOrCopy(s, t); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *Driver) restoreCall(dir string) RestoreConfig {
	return RestoreConfig{SourceURL: "file://" + dir, Prefault: d.o.Prefault, MemoryRestoreMode: d.o.MemoryRestoreMode}
}

// Clone implements vmm.Driver.
func (d *Driver) Clone(ctx context.Context, dir string, spec vmm.Spec) (vmm.Handle, error) {
	if err := checkSpec(spec); err != nil {
		return vmm.Handle{}, err
	}
	m, err := ReadManifest(dir)
	if err != nil {
		return vmm.Handle{}, err
	}
	if spec.Size != m.Size {
		return vmm.Handle{}, fmt.Errorf("cloud-hypervisor: clone as size %q from a %q checkpoint: %w", spec.Size, m.Size, vmm.ErrUnsupported)
	}
	if spec.Net != m.Net {
		return vmm.Handle{}, fmt.Errorf("cloud-hypervisor: clone onto lane %q from a %q checkpoint: %w", spec.Net, m.Net, vmm.ErrUnsupported)
	}
	p := vmPaths(filepath.Join(d.o.RootDir, spec.ID))
	if err := os.Mkdir(p.Dir, 0o700); err != nil {
		return vmm.Handle{}, fmt.Errorf("cloud-hypervisor: vm dir: %w", err)
	}
	tap := ""
	if spec.Net == "egress" {
		tap = d.o.TapName(spec.ID)
	}
	if err := stage(filepath.Join(dir, "vm"), p.Restore, p, tap); err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, nil, err)
	}
	ctx, cancel := context.WithTimeout(ctx, d.o.StartTimeout)
	defer cancel()
	proc, c, err := d.start(ctx, p)
	if err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, nil, err)
	}
	defer c.Close()
	if err := c.Do(ctx, "PUT", API+"/vm.restore", d.restoreCall(p.Restore), nil); err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, proc, d.exitErr(p, fmt.Errorf("cloud-hypervisor clone: %w", err)))
	}
	if err := c.Do(ctx, "PUT", API+"/vm.resume", nil, nil); err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, proc, fmt.Errorf("cloud-hypervisor clone: %w", err))
	}
	h := d.newHandle(spec, p, proc.PID(), Size{VCPUs: m.VCPUs, MemMiB: m.MemMiB})
	if m.MAC != "" {
		h.Meta["mac"] = m.MAC
	}
	h.Token = m.Token
	if err := d.attach(ctx, &h, proc); err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, proc, err)
	}
	ok, err := uds.Rekey(ctx, h.Addr, m.Token, spec.Token)
	if err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, proc, err)
	}
	if ok {
		h.Token = spec.Token
	} else {
		h.Meta["identity"] = "inherited"
	}
	if err := uds.InitEnv(ctx, h.Addr, h.Token, spec.Env); err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, proc, err)
	}
	if err := uds.WriteJSON(p.Handle, h); err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, proc, err)
	}
	return h, nil
}

// Stop implements vmm.Driver.
func (d *Driver) Stop(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	p := vmPaths(h.Dir)
	if !uds.Alive(h.PID, p.API) {
		if _, err := os.Stat(filepath.Join(p.State, "config.json")); err == nil {
			h.PID, h.Addr = 0, ""
			return h, nil
		}
		return h, fmt.Errorf("cloud-hypervisor %s: %w", h.ID, vmm.ErrNotRunning)
	}
	c := uds.NewClient(p.API)
	defer c.Close()
	tmp := p.State + ".new"
	os.RemoveAll(tmp)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return h, err
	}
	if err := snapshotTo(ctx, c, tmp, true); err != nil {
		os.RemoveAll(tmp)
		return h, fmt.Errorf("cloud-hypervisor stop %s: %w", h.ID, err)
	}
	os.RemoveAll(p.State)
	if err := os.Rename(tmp, p.State); err != nil {
		return h, err
	}
	l := d.take(h.ID)
	var proc *uds.Process
	if l != nil {
		proc = l.proc
		if l.relay != nil {
			l.relay.Close()
		}
	}
	// Orderly: vmm.shutdown, then make sure (SIGKILL after a short grace).
	_ = c.Do(ctx, "PUT", API+"/vmm.shutdown", nil, nil)
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_ = uds.Poll(gctx, func() error {
		if proc != nil && proc.Exited() || proc == nil && !uds.Alive(h.PID, p.API) {
			return nil
		}
		return errors.New("running")
	})
	cancel()
	if err := uds.Kill(ctx, proc, h.PID, p.API); err != nil {
		return h, err
	}
	h.PID, h.Addr = 0, ""
	return h, uds.WriteJSON(p.Handle, h)
}

// Restore implements vmm.Driver.
func (d *Driver) Restore(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	p := vmPaths(h.Dir)
	if err := uds.Within(d.o.RootDir, h.Dir); err != nil {
		return h, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.o.StartTimeout)
	defer cancel()
	if uds.Alive(h.PID, p.API) {
		d.mu.Lock()
		l := d.live[h.ID]
		d.mu.Unlock()
		if l != nil && l.relay != nil {
			h.Addr = l.relay.Addr()
			return h, nil
		}
		var proc *uds.Process
		if l != nil {
			proc = l.proc
		}
		if err := d.attach(ctx, &h, proc); err != nil {
			return h, err
		}
		return h, uds.WriteJSON(p.Handle, h)
	}
	if _, err := os.Stat(filepath.Join(p.State, "config.json")); err != nil {
		return h, fmt.Errorf("cloud-hypervisor %s: no live process and no stopped state: %w", h.ID, vmm.ErrNotRunning)
	}
	proc, c, err := d.start(ctx, p)
	if err != nil {
		return h, err
	}
	defer c.Close()
	err = c.Do(ctx, "PUT", API+"/vm.restore", d.restoreCall(p.State), nil)
	if err == nil && !h.Paused {
		err = c.Do(ctx, "PUT", API+"/vm.resume", nil, nil)
	}
	if err != nil {
		_ = uds.Kill(context.Background(), proc, 0, "")
		return h, d.exitErr(p, fmt.Errorf("cloud-hypervisor restore %s: %w", h.ID, err))
	}
	h.PID = proc.PID()
	if err := d.attach(ctx, &h, proc); err != nil {
		d.take(h.ID)
		_ = uds.Kill(context.Background(), proc, 0, "")
		return h, err
	}
	return h, uds.WriteJSON(p.Handle, h)
}

// Destroy implements vmm.Driver.
func (d *Driver) Destroy(ctx context.Context, h vmm.Handle) error {
	if h.Dir == "" {
		if err := uds.ValidID(h.ID); err != nil {
			return err
		}
		h.Dir = filepath.Join(d.o.RootDir, h.ID)
	}
	if err := uds.Within(d.o.RootDir, h.Dir); err != nil {
		return err
	}
	p := vmPaths(h.Dir)
	l := d.take(h.ID)
	var proc *uds.Process
	if l != nil {
		proc = l.proc
		if l.relay != nil {
			l.relay.Close()
		}
	}
	if err := uds.Kill(ctx, proc, h.PID, p.API); err != nil {
		return fmt.Errorf("cloud-hypervisor destroy %s: %w", h.ID, err)
	}
	return os.RemoveAll(h.Dir)
}

// Stats implements vmm.Driver.
func (d *Driver) Stats(ctx context.Context, h vmm.Handle) (vmm.Stats, error) {
	if !uds.Alive(h.PID, vmPaths(h.Dir).API) {
		return vmm.Stats{}, fmt.Errorf("cloud-hypervisor %s: %w", h.ID, vmm.ErrNotRunning)
	}
	ps, err := uds.ReadProcStats(h.PID)
	if err != nil {
		return vmm.Stats{}, err
	}
	vcpus, _ := strconv.Atoi(h.Meta["vcpus"])
	mem, _ := strconv.ParseInt(h.Meta["mem_mib"], 10, 64)
	st := vmm.Stats{
		CPUCount: vcpus, MemTotalBytes: mem << 20,
		RSSBytes: ps.RSS, PrivateBytes: ps.Private, SharedBytes: ps.Shared,
		CPUSeconds: ps.CPUSeconds, MeasuredAt: ps.MeasuredAt,
	}
	if !h.Paused {
		st.MemUsedBytes = min(ps.RSS, st.MemTotalBytes)
		st.MemUsedMeasured = true
	}
	return st, nil
}

// List implements vmm.Driver.
func (d *Driver) List(ctx context.Context) ([]vmm.Handle, error) {
	ents, err := os.ReadDir(d.o.RootDir)
	if err != nil {
		return nil, err
	}
	var out []vmm.Handle
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		p := vmPaths(filepath.Join(d.o.RootDir, e.Name()))
		var h vmm.Handle
		if err := uds.ReadJSON(p.Handle, &h); err != nil || !uds.Alive(h.PID, p.API) {
			continue
		}
		d.mu.Lock()
		if l := d.live[h.ID]; l != nil && l.relay != nil {
			h.Addr = l.relay.Addr()
		}
		d.mu.Unlock()
		out = append(out, h)
	}
	return out, nil
}
