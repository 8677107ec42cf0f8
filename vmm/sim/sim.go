package sim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/internal/uds"
	"github.com/hearthvm/hearth/vmm/sim/seccomp"
)

// Name is the backend id.
const Name = "sim"

// File and directory names inside a VM directory.
const (
	recordFile = "vm.json"
	tokenFile  = "token"
	logFile    = "agent.log"
	rootfsDir  = "rootfs" // the VM's root: overlay of the template and upper
	// manifestFile is the checkpoint manifest.
	manifestFile = "manifest.json"
	// manifestVersion is this driver's checkpoint format: 3 is a disk
	// image (upper.img). Version 2 (a copied upper/ directory, from before
	// disks were sized) is refused.
	manifestVersion = 3
)

// Defaults of Options.
const (
	// DefaultUIDBase is the first host uid (and gid) of the subordinate
	// range every VM's user namespace maps: guest id g is host id
	// DefaultUIDBase+g, for g in [0, UIDRange).
	DefaultUIDBase = 0x70000000
	// UIDRange is the size of the mapped id range.
	UIDRange = 65536
	// DefaultCgroupParent is the cgroup (under each hierarchy's root) that
	// holds the VMs' cgroups.
	DefaultCgroupParent = "hearth-sim"
	// pidsMax bounds the processes of one VM.
	pidsMax = 4096
)

// ErrAlreadyExists is returned (wrapped) when a VM directory or a checkpoint
// directory is already taken.
var ErrAlreadyExists = errors.New("already exists")

var errNotRunning = vmm.ErrNotRunning

// Options configure a Driver.
type Options struct {
	// Root is the directory the driver owns; it is created if missing.
	Root string
	// AgentCommand is the agent executable (a static binary: it runs inside
	// the template's root filesystem, mounted read-only at
	// /.hearth/<name>) and leading arguments. The driver appends --listen,
	// --root, --token-file, --user and, for a VM with an environment,
	// --env-file.
	AgentCommand []string
	// Rootfs resolves a template to its root filesystem directory (read
	// only; the driver makes an id-shifted copy once per directory, so a
	// directory's content must not change: image.Store's are per digest).
	// Nil: every template runs on BusyboxRootfs(<Root>/.images/busybox).
	Rootfs func(ctx context.Context, template string) (string, error)
	// UIDBase is the first host uid/gid of the guests' id range
	// (default DefaultUIDBase).
	UIDBase int
	// LowerCache is the directory of the id-shifted template copies
	// (default <Root>/.lower). Drivers on one host may share it: a copy is
	// built once, under a file lock, and never changed afterwards.
	LowerCache string
	// CgroupParent is the parent cgroup of the VMs' cgroups
	// (default DefaultCgroupParent).
	CgroupParent string
	// BootTimeout bounds how long Boot, Clone and Restore wait for the
	// agent's /health; default 30s.
	BootTimeout time.Duration
	// DiskBytes is the size of each booted VM's disk, its writable layer
	// (default DefaultDiskBytes, at least MinDiskBytes); a clone keeps its
	// checkpoint's.
	DiskBytes int64
	// Logger defaults to klog.Background().
	Logger klog.Logger
	// DNS are the servers ("host" or "host:port") the node's resolvers
	// forward the egress lane's queries to; default the nameservers of the
	// uplink namespace's resolv.conf (/etc/netns/<name>/resolv.conf, as
	// ip-netns keeps them) or else of /etc/resolv.conf.
	DNS []string
	// UplinkNetns is the path of the network namespace the egress lane's
	// traffic leaves from (slirp4netns's sockets, the resolvers' upstream
	// queries); default the driver's own.
	UplinkNetns string
}

// Driver is the sim backend. It implements vmm.Driver and vmm.PortDialer.
type Driver struct {
	root     string
	agent    []string
	rootfs   func(context.Context, string) (string, error)
	uidBase  int
	cgParent string
	rootKey  string // short hash of root: keeps cgroups of two drivers apart
	// registration is the share-locked registry file (see orphans.go),
	// open for the process's life.
	registration *os.File
	bootTimeout  time.Duration
	diskBytes    int64
	log          klog.Logger
	hc           *http.Client

	lowerMu    sync.Mutex
	lowerCache string

	agentMu  sync.Mutex
	agentKey string // size/mtime of the agent binary agentDir was made from
	agentDir string

	mu sync.Mutex
	// children maps the pid of every init this driver started to a channel
	// closed once the process has been reaped.
	children map[int]chan struct{}
	// fwd maps a VM id to its agent forwarder (the Handle.Addr listener).
	fwd map[string]*forwarder
	// egress maps an egress-lane VM id to its filter's namespace and its
	// resolver (egress.go).
	egress map[string]*egressVM
	// dns are the resolvers' upstream servers; uplink the descriptor of
	// Options.UplinkNetns, or -1.
	dns    []string
	uplink int
}

var (
	_ vmm.Driver     = (*Driver)(nil)
	_ vmm.PortDialer = (*Driver)(nil)
)

// New returns a driver rooted at opts.Root. It must run as root (it
// mounts, creates namespaces and cgroups).
func New(opts Options) (*Driver, error) {
	if opts.Root == "" {
		return nil, errors.New("sim: Options.Root is required")
	}
	if len(opts.AgentCommand) == 0 || opts.AgentCommand[0] == "" {
		return nil, errors.New("sim: Options.AgentCommand is required (see sim.FindAgent)")
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("sim: the sim backend must run as root (it creates namespaces, mounts and cgroups)")
	}

	root, err := filepath.Abs(opts.Root)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	agent := append([]string(nil), opts.AgentCommand...)
	if p, err := filepath.Abs(agent[0]); err == nil {
		agent[0] = p
	}
	d := &Driver{
		root:        root,
		agent:       agent,
		rootfs:      opts.Rootfs,
		uidBase:     opts.UIDBase,
		cgParent:    opts.CgroupParent,
		rootKey:     rootKey(root),
		bootTimeout: opts.BootTimeout,
		diskBytes:   opts.DiskBytes,
		log:         opts.Logger,
		children:    map[int]chan struct{}{},
		fwd:         map[string]*forwarder{},
		egress:      map[string]*egressVM{},
		uplink:      -1,
		hc: &http.Client{
			Timeout:   2 * time.Second,
			Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
		},
	}
	if d.uidBase <= 0 {
		d.uidBase = DefaultUIDBase
	}
	d.lowerCache = opts.LowerCache
	if d.lowerCache == "" {
		d.lowerCache = filepath.Join(root, lowerDir)
	}
	if d.cgParent == "" {
		d.cgParent = DefaultCgroupParent
	}
	if d.rootfs == nil {
		dir := filepath.Join(root, imagesDir, "busybox")
		var mu sync.Mutex // one build at a time
		d.rootfs = func(context.Context, string) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			return BusyboxRootfs(dir)
		}
	}
	if d.bootTimeout <= 0 {
		d.bootTimeout = 30 * time.Second
	}
	switch {
	case d.diskBytes == 0:
		d.diskBytes = DefaultDiskBytes
	case d.diskBytes < MinDiskBytes:
		return nil, fmt.Errorf("sim: a disk of %d bytes is too small; the least is %d (16 MiB)", d.diskBytes, MinDiskBytes)
	}
	if d.log.GetSink() == nil {
		d.log = klog.Background()
	}
	if opts.UplinkNetns != "" {
		if d.uplink, err = unix.Open(opts.UplinkNetns, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			return nil, fmt.Errorf("sim: the uplink network namespace: %w", err)
		}
	}
	if d.dns, err = upstreamDNS(opts.DNS, opts.UplinkNetns); err != nil {
		return nil, err
	}
	d.log = d.log.WithName("sim")
	if err := d.register(); err != nil {
		return nil, fmt.Errorf("sim: registering the root on the host: %w", err)
	}
	if _, err := d.SweepOrphans(); err != nil {
		d.log.Error(err, "Sweeping the guests of deleted roots")
	}
	return d, nil
}

// Name returns "sim".
func (d *Driver) Name() string { return Name }

// Accel reports the acceleration in use: none (guests are host processes).
func (d *Driver) Accel() string { return "none" }

// Root returns the directory the driver owns.
func (d *Driver) Root() string { return d.root }

// record is vm.json. PID and Cgroup are written the moment the init
// starts, before the agent answers, so a restarted node finds every VM it
// started.
type record struct {
	ID       string            `json:"id"`
	Template string            `json:"template,omitempty"`
	Net      string            `json:"net,omitempty"`
	Size     string            `json:"size,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	// PID is the VM's init (pid 1 of its pid namespace), a host pid.
	PID int `json:"pid,omitempty"`
	// Cgroup is the VM's cgroup path under each hierarchy's root.
	Cgroup string `json:"cgroup,omitempty"`
	// Lower is the id-shifted template root filesystem under the overlay.
	Lower     string    `json:"lower,omitempty"`
	UIDBase   int       `json:"uid_base,omitempty"`
	Addr      string    `json:"addr,omitempty"`
	Paused    bool      `json:"paused,omitempty"`
	StartedAt time.Time `json:"started_at,omitzero"`
	// From is the checkpoint directory a clone was made from.
	From string `json:"from,omitempty"`
	// Egress is the pool's egress policy (vmm.Spec.Egress), installed at
	// each start of the VM.
	Egress *egress.Policy `json:"egress,omitempty"`
	// Hold is vmm.Spec.Hold: the agent starts with --hold at each start.
	Hold bool `json:"hold,omitempty"`
}

// manifest is a checkpoint's manifest.json.
type manifest struct {
	Backend   string    `json:"backend"`
	Version   int       `json:"version"`
	SourceID  string    `json:"source_id"`
	Template  string    `json:"template,omitempty"`
	Net       string    `json:"net,omitempty"`
	Size      string    `json:"size,omitempty"`
	UIDBase   int       `json:"uid_base"`
	CreatedAt time.Time `json:"created_at"`
	// DiskBytes is the disk image's size (what the guest's df shows).
	DiskBytes int64 `json:"disk_bytes"`
	// Bytes is what the copy of the image takes on the host's disk.
	Bytes int64 `json:"bytes"`
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

func validID(id string) error {
	if !idRE.MatchString(id) {
		return fmt.Errorf("sim: invalid vm id %q", id)
	}
	return nil
}

// dirOf returns the VM directory of h, refusing any directory the driver
// does not own.
func (d *Driver) dirOf(h vmm.Handle) (string, error) {
	if err := validID(h.ID); err != nil {
		return "", err
	}
	dir := filepath.Join(d.root, h.ID)
	if h.Dir != "" && filepath.Clean(h.Dir) != dir {
		return "", fmt.Errorf("sim: handle dir %q is not %q under this driver's root", h.Dir, h.ID)
	}
	return dir, nil
}

func readRecord(dir string) (record, error) {
	var r record
	b, err := os.ReadFile(filepath.Join(dir, recordFile))
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("sim: %s: %w", filepath.Join(dir, recordFile), err)
	}
	return r, nil
}

func writeRecord(dir string, r record) error {
	return uds.WriteJSON(filepath.Join(dir, recordFile), r)
}

// handle is the Handle of the VM in dir. Its token is the host's (the file
// the driver wrote from spec.Token): nothing is ever read back from the
// guest.
func (d *Driver) handle(dir string, r record) vmm.Handle {
	tok, _ := os.ReadFile(filepath.Join(dir, tokenFile))
	return vmm.Handle{
		ID:      r.ID,
		Backend: Name,
		Dir:     dir,
		PID:     r.PID,
		Addr:    r.Addr,
		Token:   strings.TrimSpace(string(tok)),
		Paused:  r.Paused,
		Hold:    r.Hold,
		Meta:    map[string]string{"cgroup": r.Cgroup},
	}
}

// cgroupOf returns the cgroup for VM id (recorded, or derived).
func (d *Driver) cgroupOf(r record) vmCgroup {
	if r.Cgroup != "" {
		return newCgroup(r.Cgroup)
	}
	return newCgroup(d.cgParent + "/" + d.rootKey + "-" + r.ID)
}

// Cgroup returns the path of VM id's cgroup under each hierarchy's root
// (also in Handle.Meta["cgroup"]).
func (d *Driver) Cgroup(id string) string { return d.cgroupOf(record{ID: id}).rel }

// owns reports whether r.PID is a live (non-zombie) process in r's cgroup:
// the VM's init, never a process that merely inherited a recycled pid. It
// fails (rather than answering false, "not running") when /proc cannot be
// read: out of descriptors or memory, the node knows nothing of the VM.
func (d *Driver) owns(r record) (bool, error) {
	if r.PID <= 0 || r.Cgroup == "" {
		return false, nil
	}
	st, err := procStateErr(r.PID)
	if err != nil {
		return false, fmt.Errorf("sim: %s: reading its init's state: %w", r.ID, err)
	}
	if st == 0 || st == 'Z' || st == 'X' {
		return false, nil
	}
	in, err := d.cgroupOf(r).containsErr(r.PID)
	if err != nil {
		return false, fmt.Errorf("sim: %s: reading its init's cgroup: %w", r.ID, err)
	}
	return in, nil
}

// Boot starts a fresh VM (an empty disk of Options.DiskBytes as the
// writable layer over the template's root filesystem) and returns once its
// agent answers /health.
func (d *Driver) Boot(ctx context.Context, spec vmm.Spec) (vmm.Handle, error) {
	r := record{ID: spec.ID, Template: spec.Template, Net: spec.Net, Size: spec.Size, Env: spec.Env, Egress: spec.Egress}
	return d.create(ctx, spec, r, func(dir string) error {
		return makeDisk(ctx, filepath.Join(dir, diskImage), d.diskBytes)
	})
}

// Pause freezes every process of the VM (its cgroup; idempotent).
func (d *Driver) Pause(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	return d.setPaused(h, true)
}

// Resume thaws the VM's cgroup (idempotent).
func (d *Driver) Resume(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	return d.setPaused(h, false)
}

func (d *Driver) setPaused(h vmm.Handle, paused bool) (vmm.Handle, error) {
	dir, err := d.dirOf(h)
	if err != nil {
		return h, err
	}
	r, err := readRecord(dir)
	if err != nil {
		return h, fmt.Errorf("%w: %s: %v", vmm.ErrNotRunning, h.ID, err)
	}
	if owned, err := d.owns(r); err != nil {
		return h, err
	} else if !owned {
		return h, fmt.Errorf("%w: %s", vmm.ErrNotRunning, h.ID)
	}
	if err := d.cgroupOf(r).freeze(paused); err != nil {
		return h, err
	}
	r.Paused = paused
	if err := writeRecord(dir, r); err != nil {
		return h, err
	}
	return d.handle(dir, r), nil
}

// Stop kills every process of the VM and unmounts its root, keeping the
// directory (the writable layer is the VM's state) for Restore.
func (d *Driver) Stop(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	dir, err := d.dirOf(h)
	if err != nil {
		return h, err
	}
	r, err := readRecord(dir)
	if err != nil {
		return h, fmt.Errorf("%w: %s: %v", vmm.ErrNotRunning, h.ID, err)
	}
	if err := d.teardown(dir, r); err != nil {
		return h, err
	}
	r.PID, r.Addr = 0, ""
	// Keep r.Paused: Restore brings the VM back in the state the node recorded.
	if err := writeRecord(dir, r); err != nil {
		return h, err
	}
	out := d.handle(dir, r)
	out.Paused = h.Paused
	return out, nil
}

// teardown ends everything of the VM but its directory: forwarder,
// processes (the whole cgroup), the root mount, the cgroup.
func (d *Driver) teardown(dir string, r record) error {
	d.dropForwarder(r.ID)
	d.dropEgress(r.ID)
	killLegacy(dir, r.PID)
	cg := d.cgroupOf(r)
	err := cg.kill()
	if err == nil {
		d.waitReaped(r.PID)
	}
	unmountAll(filepath.Join(dir, rootfsDir))
	unmountDisk(dir)
	if err != nil {
		return fmt.Errorf("sim: killing %s: %w", r.ID, err)
	}
	// A killed init may still wait to be reaped by its parent (the host's
	// init after a node restart): the cgroup is removable once it is. A
	// restart creates it again.
	if err := poll(5*time.Second, func() bool { return cg.remove() == nil }); err != nil {
		d.log.Info("Cgroup not removed", "vm", r.ID, "cgroup", cg.rel, "err", cg.remove())
	}
	return nil
}

// waitReaped waits (bounded) until this driver's child pid is reaped.
func (d *Driver) waitReaped(pid int) {
	d.mu.Lock()
	done, ok := d.children[pid]
	d.mu.Unlock()
	if ok {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	}
}

// Restore re-attaches to h if its init still runs (a node restart after a
// crash): a new forwarder serves it on its previous Addr when that port is
// free, else on a new one. Otherwise it restarts the VM
// on its writable layer. The VM ends paused iff h.Paused.
func (d *Driver) Restore(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	dir, err := d.dirOf(h)
	if err != nil {
		return h, err
	}
	r, err := readRecord(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		// A transient failure (EMFILE, EIO) proves nothing about the VM.
		return h, fmt.Errorf("sim: %s: reading its state: %w", h.ID, err)
	}
	if err != nil {
		return h, fmt.Errorf("%w: %s cannot be restored: %v", vmm.ErrNotRunning, h.ID, err)
	}
	if st, err := os.Lstat(filepath.Join(dir, diskImage)); err != nil || !st.Mode().IsRegular() {
		// A VM of an earlier sim: unconfined, or with an unbounded
		// directory as its writable layer. It cannot be brought back.
		killLegacy(dir, r.PID)
		if err := d.teardown(dir, r); err != nil {
			return h, err
		}
		return h, fmt.Errorf("%w: %s has no disk image (made by an earlier sim)", vmm.ErrNotRunning, h.ID)
	}
	attached := false
	owned, err := d.owns(r)
	if err != nil {
		// Out of descriptors: never start a second init beside a live one.
		return h, err
	}
	if owned {
		cg := d.cgroupOf(r)
		_ = cg.freeze(false)
		if fwd, err := d.attach(ctx, r); err == nil {
			attached = true
			r.Addr = fwd.addr()
			d.log.V(2).Info("Re-adopted running VM", "vm", h.ID, "pid", r.PID, "addr", r.Addr)
		} else {
			d.log.Info("VM is alive but its agent does not answer; restarting it", "vm", h.ID, "pid", r.PID, "err", err)
		}
	}
	if !attached {
		if err := d.teardown(dir, r); err != nil {
			return h, err
		}
		r.PID, r.Addr = 0, ""
		if err := d.start(ctx, dir, &r, false); err != nil {
			_ = d.teardown(dir, r)
			return h, err
		}
		d.log.V(2).Info("Restarted VM", "vm", h.ID, "pid", r.PID, "addr", r.Addr)
	}
	if h.Paused {
		if err := d.cgroupOf(r).freeze(true); err != nil {
			return h, err
		}
	}
	r.Paused = h.Paused
	if err := writeRecord(dir, r); err != nil {
		return h, err
	}
	return d.handle(dir, r), nil
}

// attach makes (or reuses) the forwarder of a running VM and checks its
// agent answers.
func (d *Driver) attach(ctx context.Context, r record) (*forwarder, error) {
	d.mu.Lock()
	fwd := d.fwd[r.ID]
	d.mu.Unlock()
	if fwd == nil {
		nsfd, err := openNetns(r.PID)
		if err != nil {
			return nil, err
		}
		if owned, err := d.owns(r); err != nil || !owned {
			unix.Close(nsfd)
			if err != nil {
				return nil, err
			}
			return nil, errNotRunning
		}
		if fwd, err = newForwarder(nsfd, agentapi.Port, r.Addr); err != nil {
			return nil, err
		}
	}
	err := poll(5*time.Second, func() bool { return d.healthy(ctx, fwd.addr()) })
	if err != nil {
		fwd.close()
		d.mu.Lock()
		if d.fwd[r.ID] == fwd {
			delete(d.fwd, r.ID)
		}
		d.mu.Unlock()
		return nil, err
	}
	d.setForwarder(r.ID, fwd)
	if r.Net == NetEgress {
		d.mu.Lock()
		_, ok := d.egress[r.ID]
		d.mu.Unlock()
		if !ok {
			nsfd, err := openNetns(r.PID)
			if err != nil {
				return nil, err
			}
			err = d.startEgress(r.ID, nsfd, r.Egress, false)
			unix.Close(nsfd)
			if err != nil {
				return nil, err
			}
		}
	}
	return fwd, nil
}

// Destroy kills every process of the VM's cgroup, unmounts its root,
// removes the cgroup and the directory. Destroying a VM that is already
// gone succeeds.
func (d *Driver) Destroy(ctx context.Context, h vmm.Handle) error {
	dir, err := d.dirOf(h)
	if err != nil {
		return err
	}
	r, rerr := readRecord(dir)
	if rerr != nil {
		r = record{ID: h.ID}
	}
	if r.ID == "" {
		r.ID = h.ID
	}
	if err := d.teardown(dir, r); err != nil {
		return err
	}
	// Never remove through a mount: a disk still mounted would lose the
	// guest's files but keep its loop device.
	if err := unmountUnder(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("sim: removing %s: %w", dir, err)
	}
	return nil
}

// Stats measures the VM: memory charged to its cgroup, its processes'
// RSS (smaps), CPU time from the cgroup.
func (d *Driver) Stats(ctx context.Context, h vmm.Handle) (vmm.Stats, error) {
	dir, err := d.dirOf(h)
	if err != nil {
		return vmm.Stats{}, err
	}
	r, err := readRecord(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return vmm.Stats{}, fmt.Errorf("sim: %s: reading its state: %w", h.ID, err)
	}
	if err != nil {
		return vmm.Stats{}, fmt.Errorf("%w: %s", vmm.ErrNotRunning, h.ID)
	}
	if owned, err := d.owns(r); err != nil {
		return vmm.Stats{}, err
	} else if !owned {
		return vmm.Stats{}, fmt.Errorf("%w: %s", vmm.ErrNotRunning, h.ID)
	}
	cg := d.cgroupOf(r)
	cpus, mem := nominal(r.Size)
	s := vmm.Stats{CPUCount: cpus, MemTotalBytes: mem, MeasuredAt: time.Now().UTC()}
	for _, pid := range cg.procs() {
		if m, ok := readSmapsRollup(pid); ok {
			s.RSSBytes += m.rss
			s.PrivateBytes += m.private
			s.SharedBytes += m.shared
		}
	}
	s.CPUSeconds = cg.cpuSeconds()
	s.MemUsedBytes = cg.memoryUsage()
	if s.MemUsedBytes == 0 {
		s.MemUsedBytes = s.RSSBytes
	}
	s.MemUsedMeasured = !r.Paused && s.MemUsedBytes > 0
	if total, used, err := diskUsage(dir, r.PID); err == nil {
		s.DiskTotalBytes, s.DiskUsedBytes = total, used
	}
	return s, nil
}

// nominal returns the size class's vCPUs and memory in bytes, which the
// VM's cgroup enforces (CPU quota and memory limit): its shape in the one
// table, pool.Shapes (an unknown class is small's).
func nominal(size string) (int, int64) {
	s, ok := pool.ShapeOf(size)
	if !ok {
		s, _ = pool.ShapeOf("")
	}
	return s.VCPUs, int64(s.MemoryMiB) << 20
}

// List returns every VM under the root whose init is alive.
func (d *Driver) List(ctx context.Context) ([]vmm.Handle, error) {
	live, _, err := d.scan()
	return live, err
}

// Stale returns the VM directories under the root that have no live init
// (stopped VMs, and leftovers of a crash in the middle of a boot). A node
// destroys the ones it does not own after a restart.
func (d *Driver) Stale(ctx context.Context) ([]vmm.Handle, error) {
	_, stale, err := d.scan()
	return stale, err
}

func (d *Driver) scan() (live, stale []vmm.Handle, err error) {
	ents, err := os.ReadDir(d.root)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range ents {
		if !e.IsDir() || validID(e.Name()) != nil {
			continue
		}
		dir := filepath.Join(d.root, e.Name())
		r, err := readRecord(dir)
		if err != nil || r.ID != e.Name() {
			stale = append(stale, vmm.Handle{ID: e.Name(), Backend: Name, Dir: dir})
			continue
		}
		h := d.handle(dir, r)
		owned, err := d.owns(r)
		if err != nil {
			// A VM whose state cannot be read is neither live nor stale
			// (a stale one is destroyed): fail the scan.
			return nil, nil, err
		}
		if owned {
			live = append(live, h)
		} else {
			h.PID, h.Addr = 0, ""
			stale = append(stale, h)
		}
	}
	return live, stale, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// checkConfined refuses a VM whose agent (the init's child; the init and
// slirp4netns are the driver's) is not confined (seccomp.CheckStatus): it
// does not run under the syscall filter or holds capabilities past the
// guest's set, as an agent binary that ignores seccomp.EnvVar would.
func checkConfined(cg vmCgroup, initPid int) error {
	for _, pid := range cg.procs() {
		if pid == initPid || procPPid(pid) != initPid {
			continue
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return fmt.Errorf("the agent (pid %d): %w", pid, err)
		}
		if err := seccomp.CheckStatus(status); err != nil {
			return fmt.Errorf("the agent (pid %d) %w: build it from this module's cmd/sandbox-agent", pid, err)
		}
		return nil
	}
	return errors.New("no agent process in the VM's cgroup")
}

// killLegacy ends the agent of a VM started by the earlier, unconfined sim
// (a host process group whose command line carries <dir>/addr), so that a
// node upgraded in place leaves no such process behind.
func killLegacy(dir string, pid int) {
	if pid <= 0 {
		return
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return
	}
	want := filepath.Join(dir, "addr")
	for _, arg := range strings.Split(string(b), "\x00") {
		if arg == want {
			_ = syscall.Kill(-pid, syscall.SIGCONT)
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = poll(5*time.Second, func() bool { st := procState(pid); return st == 0 || st == 'Z' })
			return
		}
	}
}
