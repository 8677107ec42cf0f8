// Package firecracker is the vmm.Driver for Firecracker: one `firecracker
// --api-sock <dir>/api.sock` process per microVM, configured and driven over
// its REST API (src/firecracker/swagger/firecracker.yaml), the in-guest agent
// reached over hybrid vsock through a per-VM loopback relay (Handle.Addr).
//
// It owns <RootDir>/<vm id>/ (api.sock, vsock.sock, vmm.log, handle.json,
// restore/ and state/ snapshot files) and the processes it started there, and
// nothing else: which VM is warm or claimed is the node's business, and tap
// devices for the egress lane must be created by the host's network setup.
//
// Contract and limits (Firecracker's, documented where they bite):
//   - Boot passes the agent token to the guest as `hearth.token=` on the
//     kernel command line; the guest image's init hands it to the agent, which
//     listens on vsock port Options.AgentPort.
//   - Snapshot pauses (PATCH /vm), writes a Full snapshot (vmstate + mem) and
//     resumes if the VM was running. Disks are not captured: the rootfs is
//     attached read-only and shared by every VM.
//   - Clone loads the snapshot in a fresh process (PUT /snapshot/load, memory
//     File backend = MAP_PRIVATE of a hardlink of the checkpoint's mem file)
//     with vsock_override (a unique socket per clone) and, on the egress lane,
//     network_overrides (a new tap). The guest MAC cannot change on load, so
//     clones keep the checkpoint's MAC; vCPUs and memory are fixed by the
//     snapshot (a Spec with another size is ErrUnsupported). The guest still
//     holds the checkpoint's token, so the driver re-keys the agent
//     (uds.Rekey); an agent without that endpoint keeps the old token, and
//     the returned Handle.Token says which token works.
//   - Stop = pause + snapshot into state/ + kill; Restore re-adopts a live
//     process (PID + cmdline check) or loads state/.
package firecracker

import (
	"context"
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
const Name = "firecracker"

// Size is one size class.
type Size struct {
	VCPUs  int
	MemMiB int
}

// DefaultSizes maps the pool size classes to machine configs.
var DefaultSizes = map[string]Size{
	"small":  {VCPUs: 1, MemMiB: 512},
	"medium": {VCPUs: 2, MemMiB: 2048},
	"large":  {VCPUs: 4, MemMiB: 8192},
}

// DefaultBootArgs is the usual Firecracker guest command line.
const DefaultBootArgs = "console=ttyS0 reboot=k panic=1 pci=off"

// Options configure the driver.
type Options struct {
	// RootDir holds one directory per VM. Required.
	RootDir string
	// Binary is the firecracker executable; default "firecracker" on PATH.
	Binary string
	// Args are extra arguments after --api-sock (e.g. --level Warning).
	Args []string
	// Env is extra environment for the VMM process.
	Env []string
	// Kernel is the uncompressed guest kernel (vmlinux). Required.
	Kernel string
	// Initrd is an optional initramfs.
	Initrd string
	// Rootfs is an optional root disk, attached read-only to every VM.
	Rootfs string
	// BootArgs is the kernel command line; default DefaultBootArgs.
	BootArgs string
	// Sizes overrides DefaultSizes.
	Sizes map[string]Size
	// GuestCID is the vsock CID (hybrid vsock: any VM may reuse it); default 3.
	GuestCID uint32
	// AgentPort is the guest vsock port of the agent; default 49983.
	AgentPort uint32
	// TapName names the egress tap for a VM id; default uds.TapName("fc", id).
	TapName func(id string) string
	// StartTimeout bounds spawn → agent answering; default 30s.
	StartTimeout time.Duration
}

// Driver is the Firecracker vmm.Driver.
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
		return nil, errors.New("firecracker: RootDir is required")
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
		o.Binary = "firecracker"
	}
	if o.BootArgs == "" {
		o.BootArgs = DefaultBootArgs
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
		o.TapName = func(id string) string { return uds.TapName("fc", id) }
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 30 * time.Second
	}
	return &Driver{o: o, live: map[string]*live{}}, nil
}

// Name implements vmm.Driver.
func (d *Driver) Name() string { return Name }

// paths of one VM directory.
type paths struct {
	Dir, API, Vsock, Log, Handle, Restore, State string
}

func vmPaths(dir string) paths {
	return paths{
		Dir:     dir,
		API:     filepath.Join(dir, "api.sock"),
		Vsock:   filepath.Join(dir, "vsock.sock"),
		Log:     filepath.Join(dir, "vmm.log"),
		Handle:  filepath.Join(dir, "handle.json"),
		Restore: filepath.Join(dir, "restore"),
		State:   filepath.Join(dir, "state"),
	}
}

// Call is one API request.
type Call struct {
	Method, Path string
	Body         any
}

// BootCalls is the exact request sequence that configures and starts a
// cold-booted VM (pure; table-tested).
func BootCalls(o Options, spec vmm.Spec, sz Size, p paths) []Call {
	args := o.BootArgs + " hearth.id=" + spec.ID
	if spec.Token != "" {
		args += " hearth.token=" + spec.Token
	}
	calls := []Call{
		{"PUT", "/machine-config", MachineConfig{VcpuCount: sz.VCPUs, MemSizeMib: sz.MemMiB}},
		{"PUT", "/boot-source", BootSource{KernelImagePath: o.Kernel, BootArgs: args, InitrdPath: o.Initrd}},
	}
	if o.Rootfs != "" {
		calls = append(calls, Call{"PUT", "/drives/rootfs", Drive{DriveID: "rootfs", PathOnHost: o.Rootfs, IsRootDevice: true, IsReadOnly: true}})
	}
	if spec.Net == "egress" {
		calls = append(calls, Call{"PUT", "/network-interfaces/eth0", NetworkInterface{IfaceID: "eth0", HostDevName: o.TapName(spec.ID), GuestMAC: uds.MAC(spec.ID)}})
	}
	calls = append(calls,
		Call{"PUT", "/vsock", Vsock{GuestCID: o.GuestCID, UDSPath: p.Vsock}},
		Call{"PUT", "/actions", InstanceAction{ActionType: "InstanceStart"}},
	)
	return calls
}

// LoadCall is the PUT /snapshot/load that starts a VM from snapshot files.
func LoadCall(o Options, id, net, vmstate, mem string, p paths, resume bool) Call {
	body := SnapshotLoad{
		SnapshotPath:  vmstate,
		MemBackend:    &MemoryBackend{BackendType: "File", BackendPath: mem},
		ResumeVM:      resume,
		VsockOverride: &VsockOverride{UDSPath: p.Vsock},
	}
	if net == "egress" {
		body.NetworkOverrides = []NetworkOverride{{IfaceID: "eth0", HostDevName: o.TapName(id)}}
	}
	return Call{"PUT", "/snapshot/load", body}
}

func (d *Driver) size(name string) (Size, error) {
	sz, ok := d.o.Sizes[name]
	if !ok {
		return Size{}, fmt.Errorf("firecracker: unknown size %q", name)
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
		return fmt.Errorf("firecracker: unknown net lane %q", spec.Net)
	}
	return nil
}

// start spawns the VMM in p.Dir and waits for its API.
func (d *Driver) start(ctx context.Context, p paths) (*uds.Process, *uds.Client, error) {
	for _, s := range []string{p.API, p.Vsock + "_" + strconv.Itoa(int(d.o.AgentPort))} {
		if err := uds.CheckSocketPath(s); err != nil {
			return nil, nil, err
		}
	}
	_ = os.Remove(p.API)
	_ = os.Remove(p.Vsock)
	args := append([]string{"--api-sock", p.API}, d.o.Args...)
	proc, err := uds.Spawn(d.o.Binary, args, d.o.Env, p.Log)
	if err != nil {
		return nil, nil, err
	}
	c := uds.NewClient(p.API)
	err = uds.Poll(ctx, func() error {
		if proc.Exited() {
			return vmm.ErrVMMExited
		}
		var info InstanceInfo
		return c.Do(ctx, "GET", "/", nil, &info)
	})
	if err != nil {
		_ = uds.Kill(context.Background(), proc, 0, "")
		return nil, nil, d.exitErr(p, fmt.Errorf("firecracker api: %w", err))
	}
	return proc, c, nil
}

func (d *Driver) exitErr(p paths, err error) error {
	if t := uds.LogTail(p.Log, 1024); t != "" {
		return fmt.Errorf("%w; vmm log: %s", err, t)
	}
	return err
}

func do(ctx context.Context, c *uds.Client, calls ...Call) error {
	for _, call := range calls {
		if err := c.Do(ctx, call.Method, call.Path, call.Body, nil); err != nil {
			return err
		}
	}
	return nil
}

// attach starts the relay and waits for the agent (unless paused).
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
		return d.exitErr(p, fmt.Errorf("firecracker: agent did not answer: %w", err))
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

// fail undoes a half-made VM: kill, relay, directory.
func (d *Driver) fail(id string, p paths, proc *uds.Process, err error) error {
	d.mu.Lock()
	l := d.live[id]
	delete(d.live, id)
	d.mu.Unlock()
	if l != nil && l.relay != nil {
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
		return vmm.Handle{}, errors.New("firecracker: no guest kernel configured")
	}
	p := vmPaths(filepath.Join(d.o.RootDir, spec.ID))
	if err := os.Mkdir(p.Dir, 0o700); err != nil {
		return vmm.Handle{}, fmt.Errorf("firecracker: vm dir: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, d.o.StartTimeout)
	defer cancel()
	proc, c, err := d.start(ctx, p)
	if err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, nil, err)
	}
	defer c.Close()
	if err := do(ctx, c, BootCalls(d.o, spec, sz, p)...); err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, proc, fmt.Errorf("firecracker boot: %w", err))
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
		return nil, fmt.Errorf("firecracker %s: %w", h.ID, vmm.ErrNotRunning)
	}
	return uds.NewClient(p.API), nil
}

func (d *Driver) setState(ctx context.Context, h vmm.Handle, state string) (vmm.Handle, error) {
	c, err := d.client(h)
	if err != nil {
		return h, err
	}
	defer c.Close()
	// PATCH /vm is idempotent in Firecracker: Paused on a paused VM is a 204.
	if err := c.Do(ctx, "PATCH", "/vm", VM{State: state}, nil); err != nil {
		return h, fmt.Errorf("firecracker %s: %w", h.ID, err)
	}
	h.Paused = state == "Paused"
	return h, uds.WriteJSON(vmPaths(h.Dir).Handle, h)
}

// Pause implements vmm.Driver.
func (d *Driver) Pause(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	return d.setState(ctx, h, "Paused")
}

// Resume implements vmm.Driver.
func (d *Driver) Resume(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	return d.setState(ctx, h, "Resumed")
}

// Manifest describes a checkpoint directory.
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

// snapshotTo pauses if needed, writes vmstate+mem into dir, and restores the
// running state. It returns whether the VM was running.
func (d *Driver) snapshotTo(ctx context.Context, c *uds.Client, dir string, keepPaused bool) error {
	var info InstanceInfo
	if err := c.Do(ctx, "GET", "/", nil, &info); err != nil {
		return err
	}
	running := info.State == StateRunning
	if running {
		if err := c.Do(ctx, "PATCH", "/vm", VM{State: "Paused"}, nil); err != nil {
			return err
		}
	}
	err := c.Do(ctx, "PUT", "/snapshot/create", SnapshotCreate{
		SnapshotType: "Full",
		SnapshotPath: filepath.Join(dir, "vmstate"),
		MemFilePath:  filepath.Join(dir, "mem"),
	}, nil)
	if running && !keepPaused {
		if rerr := c.Do(context.WithoutCancel(ctx), "PATCH", "/vm", VM{State: "Resumed"}, nil); rerr != nil && err == nil {
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
		return fmt.Errorf("firecracker snapshot: %w", err)
	}
	if err := d.snapshotTo(ctx, c, dir, false); err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("firecracker snapshot %s: %w", h.ID, err)
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
	if _, err := os.Stat(filepath.Join(dir, "vmstate")); err != nil {
		return m, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "mem"))
	if err != nil {
		return m, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
	}
	if fi.Size() != int64(m.MemMiB)<<20 {
		return m, fmt.Errorf("%w: mem is %d bytes, want %d MiB", vmm.ErrSnapshotInvalid, fi.Size(), m.MemMiB)
	}
	return m, nil
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
		return vmm.Handle{}, fmt.Errorf("firecracker: clone as size %q from a %q checkpoint: machine config is fixed on load: %w", spec.Size, m.Size, vmm.ErrUnsupported)
	}
	if spec.Net != m.Net {
		return vmm.Handle{}, fmt.Errorf("firecracker: clone onto lane %q from a %q checkpoint: NICs are fixed on load: %w", spec.Net, m.Net, vmm.ErrUnsupported)
	}
	p := vmPaths(filepath.Join(d.o.RootDir, spec.ID))
	if err := os.Mkdir(p.Dir, 0o700); err != nil {
		return vmm.Handle{}, fmt.Errorf("firecracker: vm dir: %w", err)
	}
	if err := os.Mkdir(p.Restore, 0o700); err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, nil, err)
	}
	for _, f := range []string{"vmstate", "mem"} {
		if err := uds.LinkOrCopy(filepath.Join(dir, f), filepath.Join(p.Restore, f)); err != nil {
			return vmm.Handle{}, d.fail(spec.ID, p, nil, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, d.o.StartTimeout)
	defer cancel()
	proc, c, err := d.start(ctx, p)
	if err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, nil, err)
	}
	defer c.Close()
	load := LoadCall(d.o, spec.ID, spec.Net, filepath.Join(p.Restore, "vmstate"), filepath.Join(p.Restore, "mem"), p, true)
	if err := do(ctx, c, load); err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, proc, fmt.Errorf("firecracker clone: %w", err))
	}
	h := d.newHandle(spec, p, proc.PID(), Size{VCPUs: m.VCPUs, MemMiB: m.MemMiB})
	if m.MAC != "" {
		h.Meta["mac"] = m.MAC // Firecracker cannot change the guest MAC on load
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

func (d *Driver) take(id string) *live {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := d.live[id]
	delete(d.live, id)
	return l
}

// Stop implements vmm.Driver.
func (d *Driver) Stop(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	p := vmPaths(h.Dir)
	if !uds.Alive(h.PID, p.API) {
		if _, err := os.Stat(filepath.Join(p.State, "vmstate")); err == nil {
			h.PID, h.Addr = 0, ""
			return h, nil
		}
		return h, fmt.Errorf("firecracker %s: %w", h.ID, vmm.ErrNotRunning)
	}
	c := uds.NewClient(p.API)
	defer c.Close()
	tmp := p.State + ".new"
	os.RemoveAll(tmp)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return h, err
	}
	if err := d.snapshotTo(ctx, c, tmp, true); err != nil {
		os.RemoveAll(tmp)
		return h, fmt.Errorf("firecracker stop %s: %w", h.ID, err)
	}
	// The running VM may map state/mem (MAP_PRIVATE): never write it in
	// place, swap directories instead.
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
	if _, err := os.Stat(filepath.Join(p.State, "vmstate")); err != nil {
		return h, fmt.Errorf("firecracker %s: no live process and no stopped state: %w", h.ID, vmm.ErrNotRunning)
	}
	proc, c, err := d.start(ctx, p)
	if err != nil {
		return h, err
	}
	defer c.Close()
	load := LoadCall(d.o, h.ID, h.Meta["net"], filepath.Join(p.State, "vmstate"), filepath.Join(p.State, "mem"), p, !h.Paused)
	if err := do(ctx, c, load); err != nil {
		_ = uds.Kill(context.Background(), proc, 0, "")
		return h, d.exitErr(p, fmt.Errorf("firecracker restore %s: %w", h.ID, err))
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
		return fmt.Errorf("firecracker destroy %s: %w", h.ID, err)
	}
	return os.RemoveAll(h.Dir)
}

// Stats implements vmm.Driver.
func (d *Driver) Stats(ctx context.Context, h vmm.Handle) (vmm.Stats, error) {
	if !uds.Alive(h.PID, vmPaths(h.Dir).API) {
		return vmm.Stats{}, fmt.Errorf("firecracker %s: %w", h.ID, vmm.ErrNotRunning)
	}
	ps, err := uds.ReadProcStats(h.PID)
	if err != nil {
		return vmm.Stats{}, err
	}
	return statsFrom(h, ps), nil
}

func statsFrom(h vmm.Handle, ps uds.ProcStats) vmm.Stats {
	vcpus, _ := strconv.Atoi(h.Meta["vcpus"])
	mem, _ := strconv.ParseInt(h.Meta["mem_mib"], 10, 64)
	st := vmm.Stats{
		CPUCount: vcpus, MemTotalBytes: mem << 20,
		RSSBytes: ps.RSS, PrivateBytes: ps.Private, SharedBytes: ps.Shared,
		CPUSeconds: ps.CPUSeconds, MeasuredAt: ps.MeasuredAt,
	}
	if !h.Paused {
		// Guest pages the VMM has touched: an upper bound of guest use.
		st.MemUsedBytes = min(ps.RSS, st.MemTotalBytes)
		st.MemUsedMeasured = true
	}
	return st
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
		if err := uds.ReadJSON(p.Handle, &h); err != nil {
			continue
		}
		if !uds.Alive(h.PID, p.API) {
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

// RootDir is the driver's root directory.
func (d *Driver) RootDir() string { return d.o.RootDir }
