// Package restvm is the body shared by the REST-over-unix-socket drivers
// (firecracker, cloudhypervisor): one VMM process per microVM under
// <RootDir>/<vm id>/, its API polled on api.sock, the in-guest agent reached
// over hybrid vsock through a per-VM loopback relay, the agent's identity
// pushed after boot or clone, and the Stop/Restore/Destroy/List/Stats
// plumbing. What differs between VMMs (spawn arguments, the configure+boot,
// pause/resume, snapshot, load and shutdown calls, checkpoint layout) is a
// Backend.
package restvm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

// Size is one size class's machine.
type Size = pool.Shape

// DefaultSizes returns the size classes' shapes: the one table,
// pool.Shapes.
func DefaultSizes() map[string]Size { return pool.Shapes() }

// Paths of one VM directory.
type Paths struct {
	Dir, API, Vsock, Log, Serial, Handle, Restore, State string
}

// NewPaths lays out the VM directory dir.
func NewPaths(dir string) Paths {
	return Paths{
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

// ReadManifest reads dir/manifest.json and checks it is backend's.
func ReadManifest(dir, backend string) (Manifest, error) {
	var m Manifest
	if err := uds.ReadJSON(filepath.Join(dir, "manifest.json"), &m); err != nil {
		return m, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
	}
	if m.Backend != backend {
		return m, fmt.Errorf("%w: backend %q, not %s", vmm.ErrSnapshotInvalid, m.Backend, backend)
	}
	return m, nil
}

// ExitErr appends the tail of the VMM log to err.
func ExitErr(p Paths, err error) error {
	if t := uds.LogTail(p.Log, 1024); t != "" {
		return fmt.Errorf("%w; vmm log: %s", err, t)
	}
	return err
}

// Backend is what one VMM does differently. Errors from Boot and Clone are
// returned as they are (already wrapped); the others are wrapped by Base.
type Backend interface {
	// SpawnArgs are the VMM's arguments that serve its API on api.
	SpawnArgs(api string) []string
	// Ping succeeds once the API answers.
	Ping(ctx context.Context, c *uds.Client) error
	// Boot configures and starts a cold-booted VM.
	Boot(ctx context.Context, c *uds.Client, spec vmm.Spec, sz Size, p Paths) error
	// SetState pauses or resumes the VM, idempotently.
	SetState(ctx context.Context, c *uds.Client, paused bool) error
	// SnapshotTo pauses a running VM, writes the VMM's snapshot files into
	// dir (which exists) and resumes unless keepPaused.
	SnapshotTo(ctx context.Context, c *uds.Client, dir string, keepPaused bool) error
	// ReadManifest reads and preflights a checkpoint directory.
	ReadManifest(dir string) (Manifest, error)
	// Stage lays out the checkpoint's VMM files (ckpt) in p.Restore.
	Stage(ckpt string, spec vmm.Spec, p Paths) error
	// Clone loads p.Restore into the fresh VMM and runs the VM.
	Clone(ctx context.Context, c *uds.Client, spec vmm.Spec, p Paths) error
	// Load loads p.State into the fresh VMM, running unless h.Paused.
	Load(ctx context.Context, c *uds.Client, h vmm.Handle, p Paths) error
	// Shutdown asks the VMM to exit after Stop saved its state.
	Shutdown(ctx context.Context, c *uds.Client, proc *uds.Process, h vmm.Handle, p Paths)
}

// Config is the shared part of a driver's options.
type Config struct {
	// Name is the backend id, also the prefix of error messages.
	Name string
	// DefaultBinary replaces an empty Binary; TapPrefix names default taps.
	DefaultBinary, TapPrefix string
	RootDir, Binary          string
	Args, Env                []string
	Kernel                   string
	Sizes                    map[string]Size
	GuestCID, AgentPort      uint32
	TapName                  func(id string) string
	StartTimeout             time.Duration
	// StateFile is the file in state/ whose presence means a stopped VM.
	StateFile string
	// SnapshotSubdir, if set, is the checkpoint subdirectory for the VMM's files.
	SnapshotSubdir string
	// SizeFixed and NetFixed explain (with a trailing ": ") why a clone
	// cannot change size or lane; may be empty.
	SizeFixed, NetFixed string
}

// Base implements vmm.Driver (except Name) on top of a Backend.
type Base struct {
	c    Config
	b    Backend
	mu   sync.Mutex
	live map[string]*live
}

type live struct {
	proc  *uds.Process
	relay *uds.Relay
}

// New fills c's defaults and returns a driver base.
func New(c Config, b Backend) (*Base, error) {
	if c.RootDir == "" {
		return nil, errors.New(c.Name + ": RootDir is required")
	}
	root, err := filepath.Abs(c.RootDir)
	if err != nil {
		return nil, err
	}
	c.RootDir = root
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	if c.Binary == "" {
		c.Binary = c.DefaultBinary
	}
	if c.Sizes == nil {
		c.Sizes = DefaultSizes()
	}
	if c.GuestCID == 0 {
		c.GuestCID = 3
	}
	if c.AgentPort == 0 {
		c.AgentPort = agentapi.Port
	}
	if c.TapName == nil {
		prefix := c.TapPrefix
		c.TapName = func(id string) string { return uds.TapName(prefix, id) }
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 30 * time.Second
	}
	return &Base{c: c, b: b, live: map[string]*live{}}, nil
}

// Config is the driver's configuration, defaults filled in.
func (d *Base) Config() Config { return d.c }

// RootDir is the driver's root directory.
func (d *Base) RootDir() string { return d.c.RootDir }

func (d *Base) size(name string) (Size, error) {
	sz, ok := d.c.Sizes[name]
	if !ok {
		return Size{}, fmt.Errorf("%s: unknown size %q", d.c.Name, name)
	}
	return sz, nil
}

func (d *Base) checkSpec(spec vmm.Spec) error {
	if err := uds.ValidID(spec.ID); err != nil {
		return err
	}
	switch spec.Net {
	case "none", "egress":
	default:
		return fmt.Errorf("%s: unknown net lane %q", d.c.Name, spec.Net)
	}
	return nil
}

// start spawns the VMM in p.Dir and waits for its API.
func (d *Base) start(ctx context.Context, p Paths) (*uds.Process, *uds.Client, error) {
	for _, s := range []string{p.API, p.Vsock + "_" + strconv.Itoa(int(d.c.AgentPort))} {
		if err := uds.CheckSocketPath(s); err != nil {
			return nil, nil, err
		}
	}
	_ = os.Remove(p.API)
	_ = os.Remove(p.Vsock)
	args := append(d.b.SpawnArgs(p.API), d.c.Args...)
	proc, err := uds.Spawn(d.c.Binary, args, d.c.Env, p.Log)
	if err != nil {
		return nil, nil, err
	}
	c := uds.NewClient(p.API)
	err = uds.PollAlive(ctx, proc.Done(), func(ctx context.Context) error { return d.b.Ping(ctx, c) })
	if err != nil {
		_ = uds.Kill(context.Background(), proc, 0, "")
		return nil, nil, ExitErr(p, fmt.Errorf("%s api: %w", d.c.Name, err))
	}
	return proc, c, nil
}

// attach starts the relay and waits for the agent (unless paused).
func (d *Base) attach(ctx context.Context, h *vmm.Handle, proc *uds.Process) error {
	p := NewPaths(h.Dir)
	relay, err := uds.StartRelay("", p.Vsock, d.c.AgentPort)
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
		return ExitErr(p, fmt.Errorf("%s: agent did not answer: %w", d.c.Name, err))
	}
	return nil
}

func (d *Base) newHandle(spec vmm.Spec, p Paths, pid int, sz Size) vmm.Handle {
	h := vmm.Handle{
		ID: spec.ID, Backend: d.c.Name, Dir: p.Dir, PID: pid, Token: spec.Token,
		Meta: map[string]string{
			"api_sock": p.API, "vsock_uds": p.Vsock,
			"guest_cid": strconv.Itoa(int(d.c.GuestCID)),
			"vcpus":     strconv.Itoa(sz.VCPUs), "mem_mib": strconv.Itoa(sz.MemoryMiB),
			"template": spec.Template, "net": spec.Net, "size": spec.Size,
		},
	}
	if spec.Net == "egress" {
		h.Meta["tap"] = d.c.TapName(spec.ID)
		h.Meta["mac"] = uds.MAC(spec.ID)
	}
	return h
}

func (d *Base) take(id string) *live {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := d.live[id]
	delete(d.live, id)
	return l
}

// release forgets id's live entry and closes its relay, returning the
// process this driver started for it (nil if none).
func (d *Base) release(id string) *uds.Process {
	l := d.take(id)
	if l == nil {
		return nil
	}
	if l.relay != nil {
		l.relay.Close()
	}
	return l.proc
}

// fail undoes a half-made VM: kill, relay, directory.
func (d *Base) fail(id string, p Paths, proc *uds.Process, err error) error {
	d.release(id)
	if proc != nil {
		_ = uds.Kill(context.Background(), proc, 0, "")
	}
	_ = os.RemoveAll(p.Dir)
	return err
}

// mkVM creates the new VM's directory.
func (d *Base) mkVM(id string) (Paths, error) {
	p := NewPaths(filepath.Join(d.c.RootDir, id))
	if err := os.Mkdir(p.Dir, 0o700); err != nil {
		return p, fmt.Errorf("%s: vm dir: %w", d.c.Name, err)
	}
	return p, nil
}

// ready pushes the environment to the agent and persists h.
func (d *Base) ready(ctx context.Context, h vmm.Handle, spec vmm.Spec, p Paths, proc *uds.Process) (vmm.Handle, error) {
	if err := uds.InitEnv(ctx, h.Addr, h.Token, spec.Env); err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, proc, err)
	}
	if err := uds.WriteJSON(p.Handle, h); err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, proc, err)
	}
	return h, nil
}

// Boot implements vmm.Driver.
func (d *Base) Boot(ctx context.Context, spec vmm.Spec) (vmm.Handle, error) {
	if err := d.checkSpec(spec); err != nil {
		return vmm.Handle{}, err
	}
	sz, err := d.size(spec.Size)
	if err != nil {
		return vmm.Handle{}, err
	}
	if d.c.Kernel == "" {
		return vmm.Handle{}, errors.New(d.c.Name + ": no guest kernel configured")
	}
	p, err := d.mkVM(spec.ID)
	if err != nil {
		return vmm.Handle{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.c.StartTimeout)
	defer cancel()
	proc, c, err := d.start(ctx, p)
	if err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, nil, err)
	}
	defer c.Close()
	if err := d.b.Boot(ctx, c, spec, sz, p); err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, proc, err)
	}
	h := d.newHandle(spec, p, proc.PID(), sz)
	if err := d.attach(ctx, &h, proc); err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, proc, err)
	}
	return d.ready(ctx, h, spec, p, proc)
}

func (d *Base) client(h vmm.Handle) (*uds.Client, error) {
	p := NewPaths(h.Dir)
	if !uds.Alive(h.PID, p.API) {
		return nil, fmt.Errorf("%s %s: %w", d.c.Name, h.ID, vmm.ErrNotRunning)
	}
	return uds.NewClient(p.API), nil
}

func (d *Base) setState(ctx context.Context, h vmm.Handle, paused bool) (vmm.Handle, error) {
	c, err := d.client(h)
	if err != nil {
		return h, err
	}
	defer c.Close()
	if err := d.b.SetState(ctx, c, paused); err != nil {
		return h, fmt.Errorf("%s %s: %w", d.c.Name, h.ID, err)
	}
	h.Paused = paused
	return h, uds.WriteJSON(NewPaths(h.Dir).Handle, h)
}

// Pause implements vmm.Driver.
func (d *Base) Pause(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	return d.setState(ctx, h, true)
}

// Resume implements vmm.Driver.
func (d *Base) Resume(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	return d.setState(ctx, h, false)
}

// Snapshot implements vmm.Driver.
func (d *Base) Snapshot(ctx context.Context, h vmm.Handle, dir string) error {
	c, err := d.client(h)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("%s snapshot: %w", d.c.Name, err)
	}
	vmDir := dir
	if d.c.SnapshotSubdir != "" {
		vmDir = filepath.Join(dir, d.c.SnapshotSubdir)
		if err := os.Mkdir(vmDir, 0o700); err != nil {
			os.RemoveAll(dir)
			return err
		}
	}
	if err := d.b.SnapshotTo(ctx, c, vmDir, false); err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("%s snapshot %s: %w", d.c.Name, h.ID, err)
	}
	vcpus, _ := strconv.Atoi(h.Meta["vcpus"])
	mem, _ := strconv.Atoi(h.Meta["mem_mib"])
	m := Manifest{
		Backend: d.c.Name, Source: h.ID, Template: h.Meta["template"], Net: h.Meta["net"], Size: h.Meta["size"],
		VCPUs: vcpus, MemMiB: mem, Token: h.Token, MAC: h.Meta["mac"], Created: time.Now().UTC(),
	}
	if err := uds.WriteJSON(filepath.Join(dir, "manifest.json"), m); err != nil {
		os.RemoveAll(dir)
		return err
	}
	return nil
}

// Clone implements vmm.Driver.
func (d *Base) Clone(ctx context.Context, dir string, spec vmm.Spec) (vmm.Handle, error) {
	if err := d.checkSpec(spec); err != nil {
		return vmm.Handle{}, err
	}
	m, err := d.b.ReadManifest(dir)
	if err != nil {
		return vmm.Handle{}, err
	}
	if spec.Size != m.Size {
		return vmm.Handle{}, fmt.Errorf("%s: clone as size %q from a %q checkpoint: %s%w", d.c.Name, spec.Size, m.Size, d.c.SizeFixed, vmm.ErrUnsupported)
	}
	if spec.Net != m.Net {
		return vmm.Handle{}, fmt.Errorf("%s: clone onto lane %q from a %q checkpoint: %s%w", d.c.Name, spec.Net, m.Net, d.c.NetFixed, vmm.ErrUnsupported)
	}
	p, err := d.mkVM(spec.ID)
	if err != nil {
		return vmm.Handle{}, err
	}
	ckpt := dir
	if d.c.SnapshotSubdir != "" {
		ckpt = filepath.Join(dir, d.c.SnapshotSubdir)
	}
	if err := d.b.Stage(ckpt, spec, p); err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, nil, err)
	}
	ctx, cancel := context.WithTimeout(ctx, d.c.StartTimeout)
	defer cancel()
	proc, c, err := d.start(ctx, p)
	if err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, nil, err)
	}
	defer c.Close()
	if err := d.b.Clone(ctx, c, spec, p); err != nil {
		return vmm.Handle{}, d.fail(spec.ID, p, proc, err)
	}
	h := d.newHandle(spec, p, proc.PID(), Size{VCPUs: m.VCPUs, MemoryMiB: m.MemMiB})
	if m.MAC != "" {
		h.Meta["mac"] = m.MAC // the guest MAC cannot change on load
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
	return d.ready(ctx, h, spec, p, proc)
}

func (d *Base) stopped(p Paths) bool {
	_, err := os.Stat(filepath.Join(p.State, d.c.StateFile))
	return err == nil
}

// Stop implements vmm.Driver.
func (d *Base) Stop(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	p := NewPaths(h.Dir)
	if !uds.Alive(h.PID, p.API) {
		if d.stopped(p) {
			h.PID, h.Addr = 0, ""
			return h, nil
		}
		return h, fmt.Errorf("%s %s: %w", d.c.Name, h.ID, vmm.ErrNotRunning)
	}
	c := uds.NewClient(p.API)
	defer c.Close()
	tmp := p.State + ".new"
	os.RemoveAll(tmp)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return h, err
	}
	if err := d.b.SnapshotTo(ctx, c, tmp, true); err != nil {
		os.RemoveAll(tmp)
		return h, fmt.Errorf("%s stop %s: %w", d.c.Name, h.ID, err)
	}
	// The running VM may map state's memory (MAP_PRIVATE): never write it
	// in place, swap directories instead.
	os.RemoveAll(p.State)
	if err := os.Rename(tmp, p.State); err != nil {
		return h, err
	}
	proc := d.release(h.ID)
	d.b.Shutdown(ctx, c, proc, h, p)
	if err := uds.Kill(ctx, proc, h.PID, p.API); err != nil {
		return h, err
	}
	h.PID, h.Addr = 0, ""
	return h, uds.WriteJSON(p.Handle, h)
}

// Restore implements vmm.Driver.
func (d *Base) Restore(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	p := NewPaths(h.Dir)
	if err := uds.Within(d.c.RootDir, h.Dir); err != nil {
		return h, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.c.StartTimeout)
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
	if !d.stopped(p) {
		return h, fmt.Errorf("%s %s: no live process and no stopped state: %w", d.c.Name, h.ID, vmm.ErrNotRunning)
	}
	proc, c, err := d.start(ctx, p)
	if err != nil {
		return h, err
	}
	defer c.Close()
	if err := d.b.Load(ctx, c, h, p); err != nil {
		_ = uds.Kill(context.Background(), proc, 0, "")
		return h, ExitErr(p, fmt.Errorf("%s restore %s: %w", d.c.Name, h.ID, err))
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
func (d *Base) Destroy(ctx context.Context, h vmm.Handle) error {
	if h.Dir == "" {
		if err := uds.ValidID(h.ID); err != nil {
			return err
		}
		h.Dir = filepath.Join(d.c.RootDir, h.ID)
	}
	if err := uds.Within(d.c.RootDir, h.Dir); err != nil {
		return err
	}
	proc := d.release(h.ID)
	if err := uds.Kill(ctx, proc, h.PID, NewPaths(h.Dir).API); err != nil {
		return fmt.Errorf("%s destroy %s: %w", d.c.Name, h.ID, err)
	}
	return os.RemoveAll(h.Dir)
}

// Stats implements vmm.Driver.
func (d *Base) Stats(ctx context.Context, h vmm.Handle) (vmm.Stats, error) {
	if !uds.Alive(h.PID, NewPaths(h.Dir).API) {
		return vmm.Stats{}, fmt.Errorf("%s %s: %w", d.c.Name, h.ID, vmm.ErrNotRunning)
	}
	ps, err := uds.ReadProcStats(h.PID)
	if err != nil {
		return vmm.Stats{}, err
	}
	return StatsFrom(h, ps), nil
}

// StatsFrom turns a VMM process's figures into h's stats.
func StatsFrom(h vmm.Handle, ps uds.ProcStats) vmm.Stats {
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
func (d *Base) List(ctx context.Context) ([]vmm.Handle, error) {
	ents, err := os.ReadDir(d.c.RootDir)
	if err != nil {
		return nil, err
	}
	var out []vmm.Handle
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		p := NewPaths(filepath.Join(d.c.RootDir, e.Name()))
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
