// Package restvmtest is the test routine shared by the REST VMM drivers
// (firecracker, cloudhypervisor): the full lifecycle against a driver, the
// rejected-boot and leak checks, the clone benchmark, and the helpers for
// the fakes' step tables. What differs between VMMs (the driver, backend
// name, how the VMM reports its state, the checkpoint reader, error bodies)
// comes in as parameters; per-backend assertions stay in each package.
package restvmtest

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/internal/restvm"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

// FakeMain lets a test binary double as the fake VMM: when envVar is set to
// name (the driver under test spawns the test executable that way) it runs
// fake and exits; otherwise it runs the tests.
func FakeMain(m *testing.M, envVar, name string, fake func(args []string) int) {
	if os.Getenv(envVar) == name {
		os.Exit(fake(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// Exe is the running test executable (the fake VMM binary).
func Exe(tb testing.TB) string {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	return exe
}

// FakeKernel writes a placeholder kernel file and returns its path.
func FakeKernel(tb testing.TB) string {
	tb.Helper()
	kernel := filepath.Join(tb.TempDir(), "vmlinux")
	if err := os.WriteFile(kernel, []byte("not a kernel"), 0o600); err != nil {
		tb.Fatal(err)
	}
	return kernel
}

// Health GETs the agent's /health and wants a 204.
func Health(addr string, timeout time.Duration) error {
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + "/health")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return errors.New(resp.Status)
	}
	return nil
}

// AuthStatus posts an empty /init with token and returns the status: the
// agent answers 204 to its own token and 401 to any other.
func AuthStatus(t *testing.T, addr, token string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+addr+"/init", strings.NewReader(`{"envVars":{}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Access-Token", token)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Gone checks h's process and directory no longer exist.
func Gone(t *testing.T, h vmm.Handle) {
	t.Helper()
	if err := syscall.Kill(h.PID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("vm %s: process %d still exists (kill 0: %v)", h.ID, h.PID, err)
	}
	if _, err := os.Stat(h.Dir); !os.IsNotExist(err) {
		t.Errorf("vm %s: dir %s still exists (%v)", h.ID, h.Dir, err)
	}
}

// Backend is what the lifecycle needs to know about one VMM.
type Backend struct {
	// Name is the expected Handle.Backend.
	Name string
	// State asks the VMM (over h.Meta["api_sock"]) for its state.
	State func(t *testing.T, h vmm.Handle) string
	// Running and Paused are the State values of a running / paused VM.
	Running, Paused string
	// ReadManifest reads and preflights a checkpoint directory.
	ReadManifest func(dir string) (restvm.Manifest, error)
}

// Lifecycle runs boot → health → pause → resume → snapshot → clone ×2 →
// stop → restore → destroy against d, checking identities and leaks.
func Lifecycle(t *testing.T, d vmm.Driver, b Backend) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var all []vmm.Handle
	t.Cleanup(func() {
		for _, h := range all {
			_ = d.Destroy(context.Background(), h)
		}
	})

	h, err := d.Boot(ctx, vmm.Spec{ID: "vm-a", Template: "img:1", Net: "none", Size: "small", Token: "tok-a"})
	if err != nil {
		t.Fatalf("boot: %v", err)
	}
	all = append(all, h)
	if h.PID <= 0 || h.Addr == "" || h.Token != "tok-a" || h.Backend != b.Name {
		t.Fatalf("handle = %+v", h)
	}
	if err := Health(h.Addr, 5*time.Second); err != nil {
		t.Fatalf("agent health after boot: %v", err)
	}
	if s := b.State(t, h); s != b.Running {
		t.Fatalf("state after boot = %q", s)
	}
	if st := AuthStatus(t, h.Addr, "tok-a"); st != http.StatusNoContent {
		t.Fatalf("agent rejects the boot token: %d", st)
	}
	if st := AuthStatus(t, h.Addr, "wrong"); st != http.StatusUnauthorized {
		t.Fatalf("agent accepts a wrong token: %d", st)
	}

	// Pause is idempotent and really stops the guest.
	for i := 0; i < 2; i++ {
		if h, err = d.Pause(ctx, h); err != nil || !h.Paused {
			t.Fatalf("pause %d: %v paused=%v", i, err, h.Paused)
		}
	}
	if s := b.State(t, h); s != b.Paused {
		t.Fatalf("state after pause = %q", s)
	}
	if err := Health(h.Addr, 300*time.Millisecond); err == nil {
		t.Fatal("agent answered while paused")
	}
	for i := 0; i < 2; i++ {
		if h, err = d.Resume(ctx, h); err != nil || h.Paused {
			t.Fatalf("resume %d: %v paused=%v", i, err, h.Paused)
		}
	}
	if err := Health(h.Addr, 5*time.Second); err != nil {
		t.Fatalf("agent health after resume: %v", err)
	}

	// Snapshot leaves the VM running and refuses an existing dir.
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	if err := d.Snapshot(ctx, h, ckpt); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if s := b.State(t, h); s != b.Running {
		t.Fatalf("state after snapshot = %q", s)
	}
	if err := d.Snapshot(ctx, h, ckpt); err == nil {
		t.Fatal("snapshot into an existing dir succeeded")
	}
	m, err := b.ReadManifest(ckpt)
	if err != nil || m.MemMiB != restvm.DefaultSizes()["small"].MemoryMiB || m.Token != "tok-a" {
		t.Fatalf("manifest %+v: %v", m, err)
	}

	// Two clones with distinct identities.
	var clones []vmm.Handle
	for _, id := range []string{"vm-b", "vm-c"} {
		c, err := d.Clone(ctx, ckpt, vmm.Spec{ID: id, Template: "img:1", Net: "none", Size: "small", Token: "tok-" + id})
		if err != nil {
			t.Fatalf("clone %s: %v", id, err)
		}
		all = append(all, c)
		clones = append(clones, c)
		if err := Health(c.Addr, 5*time.Second); err != nil {
			t.Fatalf("clone %s health: %v", id, err)
		}
		want := "tok-" + id
		if c.Meta["identity"] == "inherited" {
			want = "tok-a" // the agent cannot be re-keyed: the handle says so
		}
		if c.Token != want {
			t.Errorf("clone %s token = %q, want %q", id, c.Token, want)
		}
		if st := AuthStatus(t, c.Addr, c.Token); st != http.StatusNoContent {
			t.Errorf("clone %s: agent rejects the handle's token: %d", id, st)
		}
	}
	seen := map[string]bool{}
	for _, x := range append([]vmm.Handle{h}, clones...) {
		for _, k := range []string{x.ID, x.Addr, x.Dir, x.Meta["vsock_uds"], x.Meta["api_sock"], "pid" + strconv.Itoa(x.PID)} {
			if seen[k] {
				t.Errorf("identity %q shared between VMs", k)
			}
			seen[k] = true
		}
	}
	if _, err := d.Clone(ctx, ckpt, vmm.Spec{ID: "vm-big", Net: "none", Size: "large", Token: "x"}); !errors.Is(err, vmm.ErrUnsupported) {
		t.Errorf("clone with another size: %v, want ErrUnsupported", err)
	}

	list, err := d.List(ctx)
	if err != nil || len(list) != 3 {
		t.Fatalf("list = %d handles, %v", len(list), err)
	}
	st, err := d.Stats(ctx, h)
	small := restvm.DefaultSizes()["small"]
	if err != nil || st.CPUCount != small.VCPUs || st.MemTotalBytes != int64(small.MemoryMiB)<<20 || st.RSSBytes <= 0 {
		t.Fatalf("stats %+v: %v", st, err)
	}

	// Stop keeps state; Restore brings the VM back with a new process.
	c1 := clones[0]
	oldPID := c1.PID
	if c1, err = d.Stop(ctx, c1); err != nil || c1.PID != 0 {
		t.Fatalf("stop: %v pid=%d", err, c1.PID)
	}
	if uds.Alive(oldPID, c1.Meta["api_sock"]) {
		t.Fatal("process alive after stop")
	}
	if c1, err = d.Restore(ctx, c1); err != nil || c1.PID == 0 || c1.PID == oldPID {
		t.Fatalf("restore: %v pid=%d", err, c1.PID)
	}
	clones[0] = c1
	all = append(all, c1)
	if err := Health(c1.Addr, 5*time.Second); err != nil {
		t.Fatalf("health after restore: %v", err)
	}

	for _, x := range append([]vmm.Handle{h}, clones...) {
		if err := d.Destroy(ctx, x); err != nil {
			t.Fatalf("destroy %s: %v", x.ID, err)
		}
		Gone(t, x)
		if err := d.Destroy(ctx, x); err != nil {
			t.Errorf("second destroy %s: %v", x.ID, err)
		}
	}
	if list, _ := d.List(ctx); len(list) != 0 {
		t.Errorf("list after destroy = %v", list)
	}
}

// BadSpecsRejected checks Boot refuses a bad id, size and lane.
func BadSpecsRejected(t *testing.T, d vmm.Driver) {
	t.Helper()
	ctx := context.Background()
	if _, err := d.Boot(ctx, vmm.Spec{ID: "bad/id", Net: "none", Size: "small"}); err == nil {
		t.Error("boot with a bad id succeeded")
	}
	if _, err := d.Boot(ctx, vmm.Spec{ID: "a", Net: "none", Size: "huge"}); err == nil {
		t.Error("boot with an unknown size succeeded")
	}
	if _, err := d.Boot(ctx, vmm.Spec{ID: "a", Net: "wifi", Size: "small"}); err == nil {
		t.Error("boot with an unknown lane succeeded")
	}
}

// BadKernelBoot boots on a driver whose kernel the VMM cannot open and
// returns the API error (failing unless it is one); the caller checks the
// backend's status, path and body.
func BadKernelBoot(t *testing.T, d vmm.Driver) *uds.APIError {
	t.Helper()
	_, err := d.Boot(context.Background(), vmm.Spec{ID: "k", Net: "none", Size: "small", Token: "t"})
	var apiErr *uds.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("boot with a missing kernel: %v", err)
	}
	return apiErr
}

// NoLeaks checks d lists no VM and root holds no directory.
func NoLeaks(t *testing.T, d vmm.Driver, root string) {
	t.Helper()
	if list, _ := d.List(context.Background()); len(list) != 0 {
		t.Errorf("leaked vms: %v", list)
	}
	ents, _ := os.ReadDir(root)
	if len(ents) != 0 {
		t.Errorf("leaked dirs: %v", ents)
	}
}

// CloneInvalidCheckpoint checks Clone from an empty dir is ErrSnapshotInvalid.
func CloneInvalidCheckpoint(t *testing.T, d vmm.Driver) {
	t.Helper()
	dir := t.TempDir()
	if _, err := d.Clone(context.Background(), dir, vmm.Spec{ID: "c", Net: "none", Size: "small"}); !errors.Is(err, vmm.ErrSnapshotInvalid) {
		t.Fatalf("clone from an empty dir: %v", err)
	}
}

// BenchClone measures snapshot → clone (to agent answering) → destroy
// against d (the fake VMM process: the driver's own overhead — spawn, API,
// relay, health, re-key — not a real VMM's restore time).
func BenchClone(b *testing.B, d vmm.Driver) {
	ctx := context.Background()
	h, err := d.Boot(ctx, vmm.Spec{ID: "golden", Net: "none", Size: "small", Token: "g"})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	ckpt := filepath.Join(b.TempDir(), "ckpt")
	if err := d.Snapshot(ctx, h, ckpt); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := d.Clone(ctx, ckpt, vmm.Spec{ID: "c" + strconv.Itoa(i), Net: "none", Size: "small", Token: "t"})
		if err != nil {
			b.Fatal(err)
		}
		if err := d.Destroy(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
}

// Server is a fake VMM's API handler.
type Server interface {
	http.Handler
	Close() error
}

// Serve runs the fake server made by newServer (home is its state dir) on
// <dir>/api.sock, with a placeholder <dir>/vmlinux, and returns a client
// and dir. Everything is torn down at the end of the test.
func Serve(t *testing.T, prefix string, newServer func(home string) Server) (*uds.Client, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(filepath.Join(dir, "home"))
	srv := &http.Server{Handler: s}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close(); s.Close() })
	if err := os.WriteFile(filepath.Join(dir, "vmlinux"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := uds.NewClient(sock)
	t.Cleanup(c.Close)
	return c, dir
}

// Step is one API request to a fake and the answer it must get: Status, and
// when Msg is set, an error message containing it. "$D" in Path and Body is
// replaced by the test directory.
type Step struct {
	Method, Path, Body string
	Status             int
	Msg                string
}

// Protocol is how a VMM's API answers.
type Protocol struct {
	// PathPrefix is prepended to every Step.Path.
	PathPrefix string
	// GetOK is the status of a successful GET (otherwise 204).
	GetOK int
	// ErrMsg parses an error body into its message, or says why it is not
	// the VMM's error format.
	ErrMsg func(body string) (string, error)
}

// Run sends steps to c and checks each answer.
func Run(t *testing.T, c *uds.Client, dir string, p Protocol, steps []Step) {
	t.Helper()
	for i, s := range steps {
		body := strings.ReplaceAll(s.Body, "$D", dir)
		var in any
		if body != "" {
			in = json.RawMessage(body)
		}
		err := c.Do(context.Background(), s.Method, p.PathPrefix+s.Path, in, nil)
		status := http.StatusNoContent
		if s.Method == "GET" && err == nil && p.GetOK != 0 {
			status = p.GetOK
		}
		var apiErr *uds.APIError
		if errors.As(err, &apiErr) {
			status = apiErr.Status
			msg, perr := p.ErrMsg(apiErr.Body)
			if perr != nil {
				t.Errorf("step %d: error body %q: %v", i, apiErr.Body, perr)
			}
			if s.Msg != "" && !strings.Contains(msg, s.Msg) {
				t.Errorf("step %d %s %s: error %q, want it to contain %q", i, s.Method, s.Path, msg, s.Msg)
			}
		} else if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if status != s.Status {
			t.Fatalf("step %d %s %s %s: status %d, want %d (%v)", i, s.Method, s.Path, body, status, s.Status, err)
		}
	}
}
