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
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

// Name is the backend id.
const Name = "sim"

// File and directory names inside a VM directory.
const (
	recordFile = "vm.json"
	tokenFile  = "token"
	addrFile   = "addr"
	logFile    = "agent.log"
	homeDir    = "home"
	tmpDir     = "tmp"
	// manifestFile is the checkpoint manifest.
	manifestFile = "manifest.json"
)

// ErrAlreadyExists is returned (wrapped) when a VM directory or a checkpoint
// directory is already taken.
var ErrAlreadyExists = errors.New("already exists")

// Options configure a Driver.
type Options struct {
	// Root is the directory the driver owns; it is created if missing.
	Root string
	// AgentCommand is the agent executable and leading arguments (see
	// FindAgent). The driver appends --listen, --addr-file, --root and
	// --token-file.
	AgentCommand []string
	// BootTimeout bounds how long Boot, Clone and Restore wait for the
	// agent's /health; default 30s.
	BootTimeout time.Duration
	// StopGrace is how long Stop waits after SIGTERM before SIGKILL; default 3s.
	StopGrace time.Duration
	// Logger defaults to klog.Background().
	Logger klog.Logger
}

// Driver is the sim backend. It implements vmm.Driver.
type Driver struct {
	root        string
	agent       []string
	bootTimeout time.Duration
	grace       time.Duration
	log         klog.Logger
	hc          *http.Client

	mu sync.Mutex
	// children maps the pid of every agent this driver started to a channel
	// closed once the process has been reaped.
	children map[int]chan struct{}
}

var _ vmm.Driver = (*Driver)(nil)

// New returns a driver rooted at opts.Root.
func New(opts Options) (*Driver, error) {
	if opts.Root == "" {
		return nil, errors.New("sim: Options.Root is required")
	}
	if len(opts.AgentCommand) == 0 || opts.AgentCommand[0] == "" {
		return nil, errors.New("sim: Options.AgentCommand is required (see sim.FindAgent)")
	}
	root, err := filepath.Abs(opts.Root)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	d := &Driver{
		root:        root,
		agent:       append([]string(nil), opts.AgentCommand...),
		bootTimeout: opts.BootTimeout,
		grace:       opts.StopGrace,
		log:         opts.Logger,
		children:    map[int]chan struct{}{},
		hc: &http.Client{
			Timeout:   2 * time.Second,
			Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
		},
	}
	if d.bootTimeout <= 0 {
		d.bootTimeout = 30 * time.Second
	}
	if d.grace <= 0 {
		d.grace = 3 * time.Second
	}
	if d.log.GetSink() == nil {
		d.log = klog.Background()
	}
	d.log = d.log.WithName("sim")
	return d, nil
}

// Name returns "sim".
func (d *Driver) Name() string { return Name }

// Accel reports the acceleration in use: none (guests are host processes).
func (d *Driver) Accel() string { return "none" }

// Root returns the directory the driver owns.
func (d *Driver) Root() string { return d.root }

// record is vm.json.
type record struct {
	ID        string            `json:"id"`
	Template  string            `json:"template,omitempty"`
	Net       string            `json:"net,omitempty"`
	Size      string            `json:"size,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	PID       int               `json:"pid,omitempty"`
	Addr      string            `json:"addr,omitempty"`
	Paused    bool              `json:"paused,omitempty"`
	StartedAt time.Time         `json:"started_at,omitzero"`
	// From is the checkpoint directory a clone was made from.
	From string `json:"from,omitempty"`
}

// manifest is a checkpoint's manifest.json.
type manifest struct {
	Backend   string    `json:"backend"`
	Version   int       `json:"version"`
	SourceID  string    `json:"source_id"`
	Template  string    `json:"template,omitempty"`
	Net       string    `json:"net,omitempty"`
	Size      string    `json:"size,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	Files     int       `json:"files"`
	Bytes     int64     `json:"bytes"`
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
	}
}

// Boot starts a fresh VM with an empty home and returns once its agent
// answers /health.
func (d *Driver) Boot(ctx context.Context, spec vmm.Spec) (vmm.Handle, error) {
	r := record{ID: spec.ID, Template: spec.Template, Net: spec.Net, Size: spec.Size, Env: spec.Env}
	return d.create(ctx, spec, r, func(dir string) error {
		return os.Mkdir(filepath.Join(dir, homeDir), 0o700)
	})
}

// Clone starts a new VM whose home is a copy of the checkpoint in ckDir.
func (d *Driver) Clone(ctx context.Context, ckDir string, spec vmm.Spec) (vmm.Handle, error) {
	m, err := readManifest(ckDir)
	if err != nil {
		return vmm.Handle{}, err
	}
	r := record{ID: spec.ID, Template: spec.Template, Net: spec.Net, Size: spec.Size, Env: spec.Env, From: ckDir}
	if r.Template == "" {
		r.Template, r.Net, r.Size = m.Template, m.Net, m.Size
	}
	return d.create(ctx, spec, r, func(dir string) error {
		if _, _, err := copyTree(filepath.Join(ckDir, homeDir), filepath.Join(dir, homeDir)); err != nil {
			return fmt.Errorf("%w: copying %s: %v", vmm.ErrSnapshotInvalid, ckDir, err)
		}
		return nil
	})
}

func readManifest(ckDir string) (manifest, error) {
	var m manifest
	b, err := os.ReadFile(filepath.Join(ckDir, manifestFile))
	if err != nil {
		return m, fmt.Errorf("%w: %v", vmm.ErrSnapshotInvalid, err)
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Backend != Name {
		return m, fmt.Errorf("%w: %s: not a sim checkpoint", vmm.ErrSnapshotInvalid, ckDir)
	}
	if st, err := os.Stat(filepath.Join(ckDir, homeDir)); err != nil || !st.IsDir() {
		return m, fmt.Errorf("%w: %s has no home", vmm.ErrSnapshotInvalid, ckDir)
	}
	return m, nil
}

// create makes the VM directory, fills its home with populate, and starts
// the agent. On any error nothing is left behind: no process, no directory.
func (d *Driver) create(ctx context.Context, spec vmm.Spec, r record, populate func(dir string) error) (h vmm.Handle, err error) {
	if err := validID(spec.ID); err != nil {
		return vmm.Handle{}, err
	}
	if err := checkEnv(spec.Env); err != nil {
		return vmm.Handle{}, err
	}
	dir := filepath.Join(d.root, spec.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return vmm.Handle{}, fmt.Errorf("sim: vm %s: %w", spec.ID, ErrAlreadyExists)
		}
		return vmm.Handle{}, fmt.Errorf("sim: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	if err := populate(dir); err != nil {
		return vmm.Handle{}, err
	}
	if err := os.Mkdir(filepath.Join(dir, tmpDir), 0o700); err != nil {
		return vmm.Handle{}, err
	}
	token := spec.Token
	if token == "" {
		token = randHex(16)
	}
	if err := os.WriteFile(filepath.Join(dir, tokenFile), []byte(token), 0o600); err != nil {
		return vmm.Handle{}, err
	}
	if err := writeRecord(dir, r); err != nil {
		return vmm.Handle{}, err
	}
	if err := d.start(ctx, dir, &r); err != nil {
		return vmm.Handle{}, err
	}
	if err := writeRecord(dir, r); err != nil {
		d.kill(dir, r.PID)
		return vmm.Handle{}, err
	}
	return d.handle(dir, r), nil
}

func checkEnv(env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=,") || strings.Contains(v, ",") {
			return fmt.Errorf("sim: environment entry %q cannot be passed to the agent", k)
		}
	}
	return nil
}

// start launches the agent for dir and waits for its /health. It sets
// r.PID, r.Addr and r.StartedAt. On error the process is killed and reaped.
func (d *Driver) start(ctx context.Context, dir string, r *record) error {
	_ = os.Remove(filepath.Join(dir, addrFile))
	logf, err := os.OpenFile(filepath.Join(dir, logFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := append(append([]string(nil), d.agent[1:]...),
		"--listen", "127.0.0.1:0",
		"--addr-file", filepath.Join(dir, addrFile),
		"--root", filepath.Join(dir, homeDir),
		"--token-file", filepath.Join(dir, tokenFile),
	)
	if len(r.Env) > 0 {
		keys := make([]string, 0, len(r.Env))
		for k := range r.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		pairs := make([]string, len(keys))
		for i, k := range keys {
			pairs[i] = k + "=" + r.Env[k]
		}
		args = append(args, "--env", strings.Join(pairs, ","))
	}
	cmd := exec.Command(d.agent[0], args...)
	cmd.Dir = filepath.Join(dir, homeDir)
	cmd.Env = []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + filepath.Join(dir, homeDir),
		"TMPDIR=" + filepath.Join(dir, tmpDir),
		"LANG=C.UTF-8",
		"HEARTH_SANDBOX_ID=" + r.ID,
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("sim: starting agent %s: %w", d.agent[0], err)
	}
	pid := cmd.Process.Pid
	done := make(chan struct{})
	d.mu.Lock()
	d.children[pid] = done
	d.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		d.mu.Lock()
		delete(d.children, pid)
		d.mu.Unlock()
		close(done)
	}()
	addr, err := d.waitReady(ctx, dir, done)
	if err != nil {
		d.kill(dir, pid)
		return err
	}
	r.PID, r.Addr, r.StartedAt = pid, addr, time.Now().UTC()
	return nil
}

// waitReady polls the addr file and /health until the agent answers, the
// process exits (exited closes), or the boot deadline passes.
func (d *Driver) waitReady(ctx context.Context, dir string, exited <-chan struct{}) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, d.bootTimeout)
	defer cancel()
	delay := time.Millisecond
	for {
		if b, err := os.ReadFile(filepath.Join(dir, addrFile)); err == nil && len(b) > 0 {
			addr := strings.TrimSpace(string(b))
			if d.healthy(ctx, addr) {
				return addr, nil
			}
		}
		select {
		case <-exited:
			return "", fmt.Errorf("%w: agent for %s exited during start: %s", vmm.ErrVMMExited, filepath.Base(dir), logTail(dir))
		case <-ctx.Done():
			return "", fmt.Errorf("sim: agent for %s not healthy: %w (log: %s)", filepath.Base(dir), ctx.Err(), logTail(dir))
		case <-time.After(delay):
		}
		if delay < 25*time.Millisecond {
			delay += delay / 2
		}
	}
}

func (d *Driver) healthy(ctx context.Context, addr string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/health", nil)
	if err != nil {
		return false
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusOK
}

func logTail(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, logFile))
	if len(b) > 512 {
		b = b[len(b)-512:]
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "(empty)"
	}
	return s
}

// Pause sends SIGSTOP to the VM's process group (idempotent).
func (d *Driver) Pause(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	return d.setPaused(h, true)
}

// Resume sends SIGCONT to the VM's process group (idempotent).
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
	if r.PID == 0 || !d.owns(r.PID, dir) {
		return h, fmt.Errorf("%w: %s", vmm.ErrNotRunning, h.ID)
	}
	if paused {
		stopGroup(r.PID)
	} else {
		contGroup(r.PID)
	}
	r.Paused = paused
	if err := writeRecord(dir, r); err != nil {
		return h, err
	}
	return d.handle(dir, r), nil
}

func stopGroup(pid int) {
	_ = syscall.Kill(-pid, syscall.SIGSTOP)
	// SIGSTOP is delivered asynchronously; wait until the leader shows it.
	for i := 0; i < 200; i++ {
		if st := procState(pid); st == 'T' || st == 't' || st == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func contGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGCONT) }

// Snapshot copies h's home and a manifest into ckDir (which must not exist).
// A running VM is paused for the copy and resumed afterwards.
func (d *Driver) Snapshot(ctx context.Context, h vmm.Handle, ckDir string) error {
	dir, err := d.dirOf(h)
	if err != nil {
		return err
	}
	r, err := readRecord(dir)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", vmm.ErrNotRunning, h.ID, err)
	}
	if _, err := os.Lstat(ckDir); err == nil {
		return fmt.Errorf("sim: checkpoint %s: %w", ckDir, ErrAlreadyExists)
	}
	if err := os.MkdirAll(filepath.Dir(ckDir), 0o700); err != nil {
		return err
	}
	tmp := ckDir + ".tmp-" + randHex(4)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(tmp)
		}
	}()
	if r.PID != 0 && !r.Paused && d.owns(r.PID, dir) {
		stopGroup(r.PID)
		defer contGroup(r.PID)
	}
	files, bytes, err := copyTree(filepath.Join(dir, homeDir), filepath.Join(tmp, homeDir))
	if err != nil {
		return fmt.Errorf("sim: snapshot of %s: %w", h.ID, err)
	}
	m := manifest{Backend: Name, Version: 1, SourceID: r.ID, Template: r.Template, Net: r.Net, Size: r.Size,
		CreatedAt: time.Now().UTC(), Files: files, Bytes: bytes}
	if err := uds.WriteJSON(filepath.Join(tmp, manifestFile), m); err != nil {
		return err
	}
	if err := os.Rename(tmp, ckDir); err != nil {
		return err
	}
	ok = true
	return nil
}

// Stop ends the VM's processes (SIGTERM, then SIGKILL after the grace
// period) and keeps its directory for Restore.
func (d *Driver) Stop(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	dir, err := d.dirOf(h)
	if err != nil {
		return h, err
	}
	r, err := readRecord(dir)
	if err != nil {
		return h, fmt.Errorf("%w: %s: %v", vmm.ErrNotRunning, h.ID, err)
	}
	if r.PID != 0 && d.owns(r.PID, dir) {
		_ = syscall.Kill(-r.PID, syscall.SIGTERM)
		contGroup(r.PID) // a stopped process handles SIGTERM only once continued
		if !d.waitGone(r.PID, dir, d.grace) {
			d.kill(dir, r.PID)
		} else {
			_ = syscall.Kill(-r.PID, syscall.SIGKILL) // stragglers in the group
		}
	}
	r.PID, r.Addr = 0, ""
	// Keep r.Paused: Restore brings the VM back in the state the node recorded.
	if err := writeRecord(dir, r); err != nil {
		return h, err
	}
	_ = os.Remove(filepath.Join(dir, addrFile))
	out := d.handle(dir, r)
	out.Paused = h.Paused
	return out, nil
}

// Restore re-attaches to h's agent if it still runs (its pid is alive and
// its cmdline names this VM) and answers, or restarts it on the same
// directory. The VM ends paused iff h.Paused.
func (d *Driver) Restore(ctx context.Context, h vmm.Handle) (vmm.Handle, error) {
	dir, err := d.dirOf(h)
	if err != nil {
		return h, err
	}
	r, err := readRecord(dir)
	if err != nil {
		return h, fmt.Errorf("%w: %s cannot be restored: %v", vmm.ErrNotRunning, h.ID, err)
	}
	if st, err := os.Stat(filepath.Join(dir, homeDir)); err != nil || !st.IsDir() {
		return h, fmt.Errorf("%w: %s has no home", vmm.ErrNotRunning, h.ID)
	}
	attached := false
	if r.PID != 0 && d.owns(r.PID, dir) {
		b, err := os.ReadFile(filepath.Join(dir, addrFile))
		addr := strings.TrimSpace(string(b))
		if err == nil && addr != "" {
			contGroup(r.PID)
			hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			for !attached && hctx.Err() == nil {
				if d.healthy(hctx, addr) {
					attached = true
					r.Addr = addr
					break
				}
				select {
				case <-hctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
			cancel()
		}
		if !attached {
			d.log.Info("Agent is alive but does not answer; restarting it", "vm", h.ID, "pid", r.PID)
			d.kill(dir, r.PID)
		} else {
			d.log.V(2).Info("Re-adopted running agent", "vm", h.ID, "pid", r.PID, "addr", r.Addr)
		}
	}
	if !attached {
		r.PID, r.Addr = 0, ""
		if err := d.start(ctx, dir, &r); err != nil {
			return h, err
		}
		d.log.V(2).Info("Restarted agent", "vm", h.ID, "pid", r.PID, "addr", r.Addr)
	}
	if h.Paused {
		stopGroup(r.PID)
	}
	r.Paused = h.Paused
	if err := writeRecord(dir, r); err != nil {
		d.kill(dir, r.PID)
		return h, err
	}
	return d.handle(dir, r), nil
}

// Destroy kills the VM's process group, reaps it and removes its
// directory. Destroying a VM that is already gone succeeds.
func (d *Driver) Destroy(ctx context.Context, h vmm.Handle) error {
	dir, err := d.dirOf(h)
	if err != nil {
		return err
	}
	pid := h.PID
	if r, err := readRecord(dir); err == nil && r.PID != 0 {
		pid = r.PID
	}
	if pid != 0 {
		d.kill(dir, pid)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("sim: removing %s: %w", dir, err)
	}
	return nil
}

// kill SIGKILLs pid's process group if it is this VM's (or only remnants of
// it can remain) and waits until the leader is gone.
func (d *Driver) kill(dir string, pid int) {
	if pid <= 0 {
		return
	}
	switch {
	case d.owns(pid, dir):
		contGroup(pid)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	case !procExists(pid) || d.isChild(pid):
		// The leader is gone (or is our unreaped child): a group with its
		// id can only hold our own stragglers, since Linux does not reuse
		// an id that still names a process group.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	default:
		return // another process now has this pid: not ours to signal
	}
	if !d.waitGone(pid, dir, 5*time.Second) {
		d.log.Info("Agent did not exit after SIGKILL", "pid", pid, "dir", dir)
	}
}

func (d *Driver) isChild(pid int) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.children[pid]
	return ok
}

// waitGone waits up to timeout until pid no longer runs as this VM. A child
// of this driver is waited for until reaped.
func (d *Driver) waitGone(pid int, dir string, timeout time.Duration) bool {
	d.mu.Lock()
	done, child := d.children[pid]
	d.mu.Unlock()
	if child {
		select {
		case <-done:
			return true
		case <-time.After(timeout):
			return false
		}
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if !d.owns(pid, dir) {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return !d.owns(pid, dir)
}

// owns reports whether pid is a live (non-zombie) process whose command line
// carries dir's addr-file path, i.e. the agent of the VM in dir.
func (d *Driver) owns(pid int, dir string) bool {
	if pid <= 0 {
		return false
	}
	st := procState(pid)
	if st == 0 || st == 'Z' || st == 'X' {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	want := filepath.Join(dir, addrFile)
	for _, arg := range strings.Split(string(b), "\x00") {
		if arg == want {
			return true
		}
	}
	return false
}

// Stats measures the VM's process group from /proc.
func (d *Driver) Stats(ctx context.Context, h vmm.Handle) (vmm.Stats, error) {
	dir, err := d.dirOf(h)
	if err != nil {
		return vmm.Stats{}, err
	}
	r, err := readRecord(dir)
	if err != nil || r.PID == 0 || !d.owns(r.PID, dir) {
		return vmm.Stats{}, fmt.Errorf("%w: %s", vmm.ErrNotRunning, h.ID)
	}
	cpus, mem := nominal(r.Size)
	s := vmm.Stats{CPUCount: cpus, MemTotalBytes: mem, MeasuredAt: time.Now().UTC()}
	for _, pid := range groupMembers(r.PID) {
		if m, ok := readSmapsRollup(pid); ok {
			s.RSSBytes += m.rss
			s.PrivateBytes += m.private
			s.SharedBytes += m.shared
		}
		s.CPUSeconds += cpuSeconds(pid)
	}
	s.MemUsedBytes = s.RSSBytes
	s.MemUsedMeasured = !r.Paused && s.RSSBytes > 0
	return s, nil
}

// nominal returns the size class's advertised vCPUs and memory.
func nominal(size string) (int, int64) {
	switch size {
	case "large":
		return 8, 16 << 30
	case "medium":
		return 4, 8 << 30
	}
	return 1, 2 << 30
}

// List returns every VM under the root whose agent process is alive.
func (d *Driver) List(ctx context.Context) ([]vmm.Handle, error) {
	live, _, err := d.scan()
	return live, err
}

// Stale returns the VM directories under the root that have no live agent
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
		if r.PID != 0 && d.owns(r.PID, dir) {
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
