package cloudhypervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hearthvm/hearth/vmm"
	ch "github.com/hearthvm/hearth/vmm/cloudhypervisor"
	"github.com/hearthvm/hearth/vmm/cloudhypervisor/chfake"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

// TestMain doubles as the fake firecracker binary: the driver under test
// spawns this test executable with HEARTH_FAKE_VMM=cloud-hypervisor.
func TestMain(m *testing.M) {
	if os.Getenv(chfake.EnvVar) == "cloud-hypervisor" {
		os.Exit(chfake.Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func fakeDriver(t *testing.T) *ch.Driver {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	assets := t.TempDir()
	kernel := filepath.Join(assets, "vmlinux")
	if err := os.WriteFile(kernel, []byte("not a kernel"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := ch.New(ch.Options{
		RootDir:      t.TempDir(),
		Binary:       exe,
		Env:          []string{chfake.EnvVar + "=cloud-hypervisor"},
		Kernel:       kernel,
		StartTimeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// realDriver runs against a real Firecracker when the environment names one.
func realDriver(t *testing.T) *ch.Driver {
	t.Helper()
	bin, kernel := os.Getenv("HEARTH_CLOUD_HYPERVISOR_BIN"), os.Getenv("HEARTH_CH_KERNEL")
	if bin == "" || kernel == "" {
		t.Skip("real Cloud Hypervisor not configured: set HEARTH_CLOUD_HYPERVISOR_BIN and HEARTH_CH_KERNEL, optionally HEARTH_CH_INITRAMFS / HEARTH_CH_ROOTFS / HEARTH_CH_MEMORY_RESTORE_MODE; the guest must run sandbox-agent behind vsock port 49983 and read hearth.token= from /proc/cmdline; needs /dev/kvm")
	}
	d, err := ch.New(ch.Options{
		RootDir: t.TempDir(), Binary: bin, Kernel: kernel,
		Initramfs: os.Getenv("HEARTH_CH_INITRAMFS"), Rootfs: os.Getenv("HEARTH_CH_ROOTFS"),
		MemoryRestoreMode: os.Getenv("HEARTH_CH_MEMORY_RESTORE_MODE"),
		StartTimeout:      60 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func health(addr string, timeout time.Duration) error {
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

// authStatus posts an empty /init with token and returns the status: the
// agent answers 204 to its own token and 401 to any other.
func authStatus(t *testing.T, addr, token string) int {
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

func vmState(t *testing.T, h vmm.Handle) string {
	t.Helper()
	c := uds.NewClient(h.Meta["api_sock"])
	defer c.Close()
	var info ch.VmInfo
	if err := c.Do(context.Background(), "GET", ch.API+"/vm.info", nil, &info); err != nil {
		t.Fatal(err)
	}
	return info.State
}

func gone(t *testing.T, h vmm.Handle) {
	t.Helper()
	if err := syscall.Kill(h.PID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("vm %s: process %d still exists (kill 0: %v)", h.ID, h.PID, err)
	}
	if _, err := os.Stat(h.Dir); !os.IsNotExist(err) {
		t.Errorf("vm %s: dir %s still exists (%v)", h.ID, h.Dir, err)
	}
}

func TestLifecycle_Fake(t *testing.T) { lifecycle(t, fakeDriver(t)) }

func TestLifecycle_RealCloudHypervisor(t *testing.T) { lifecycle(t, realDriver(t)) }

func lifecycle(t *testing.T, d *ch.Driver) {
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
	if h.PID <= 0 || h.Addr == "" || h.Token != "tok-a" || h.Backend != "cloud-hypervisor" {
		t.Fatalf("handle = %+v", h)
	}
	if err := health(h.Addr, 5*time.Second); err != nil {
		t.Fatalf("agent health after boot: %v", err)
	}
	if s := vmState(t, h); s != ch.StateRunning {
		t.Fatalf("state after boot = %q", s)
	}
	if st := authStatus(t, h.Addr, "tok-a"); st != http.StatusNoContent {
		t.Fatalf("agent rejects the boot token: %d", st)
	}
	if st := authStatus(t, h.Addr, "wrong"); st != http.StatusUnauthorized {
		t.Fatalf("agent accepts a wrong token: %d", st)
	}

	// Pause is idempotent and really stops the guest.
	for i := 0; i < 2; i++ {
		if h, err = d.Pause(ctx, h); err != nil || !h.Paused {
			t.Fatalf("pause %d: %v paused=%v", i, err, h.Paused)
		}
	}
	if s := vmState(t, h); s != ch.StatePaused {
		t.Fatalf("state after pause = %q", s)
	}
	if err := health(h.Addr, 300*time.Millisecond); err == nil {
		t.Fatal("agent answered while paused")
	}
	for i := 0; i < 2; i++ {
		if h, err = d.Resume(ctx, h); err != nil || h.Paused {
			t.Fatalf("resume %d: %v paused=%v", i, err, h.Paused)
		}
	}
	if err := health(h.Addr, 5*time.Second); err != nil {
		t.Fatalf("agent health after resume: %v", err)
	}

	// Snapshot leaves the VM running and refuses an existing dir.
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	if err := d.Snapshot(ctx, h, ckpt); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if s := vmState(t, h); s != ch.StateRunning {
		t.Fatalf("state after snapshot = %q", s)
	}
	if err := d.Snapshot(ctx, h, ckpt); err == nil {
		t.Fatal("snapshot into an existing dir succeeded")
	}
	m, err := ch.ReadManifest(ckpt)
	if err != nil || m.MemMiB != 512 || m.Token != "tok-a" {
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
		if err := health(c.Addr, 5*time.Second); err != nil {
			t.Fatalf("clone %s health: %v", id, err)
		}
		want := "tok-" + id
		if c.Meta["identity"] == "inherited" {
			want = "tok-a" // the agent cannot be re-keyed: the handle says so
		}
		if c.Token != want {
			t.Errorf("clone %s token = %q, want %q", id, c.Token, want)
		}
		if st := authStatus(t, c.Addr, c.Token); st != http.StatusNoContent {
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
	if err != nil || st.CPUCount != 1 || st.MemTotalBytes != 512<<20 || st.RSSBytes <= 0 {
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
	if err := health(c1.Addr, 5*time.Second); err != nil {
		t.Fatalf("health after restore: %v", err)
	}

	for _, x := range append([]vmm.Handle{h}, clones...) {
		if err := d.Destroy(ctx, x); err != nil {
			t.Fatalf("destroy %s: %v", x.ID, err)
		}
		gone(t, x)
		if err := d.Destroy(ctx, x); err != nil {
			t.Errorf("second destroy %s: %v", x.ID, err)
		}
	}
	if list, _ := d.List(ctx); len(list) != 0 {
		t.Errorf("list after destroy = %v", list)
	}
}

func TestBoot_RejectedConfigLeavesNothing(t *testing.T) {
	d := fakeDriver(t)
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
	// A kernel the VMM cannot open: vm.boot's 500 surfaces, nothing leaks.
	bad, err := ch.New(ch.Options{RootDir: t.TempDir(), Binary: mustExe(t), Env: []string{chfake.EnvVar + "=cloud-hypervisor"}, Kernel: "/nonexistent/vmlinux"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.Boot(ctx, vmm.Spec{ID: "k", Net: "none", Size: "small", Token: "t"})
	var apiErr *uds.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusInternalServerError || apiErr.Path != ch.API+"/vm.boot" {
		t.Fatalf("boot with a missing kernel: %v", err)
	}
	var msgs []string
	if json.Unmarshal([]byte(apiErr.Body), &msgs) != nil || len(msgs) == 0 {
		t.Errorf("error body %q is not a JSON array of messages", apiErr.Body)
	}
	if list, _ := bad.List(ctx); len(list) != 0 {
		t.Errorf("leaked vms: %v", list)
	}
	ents, _ := os.ReadDir(bad.RootDir())
	if len(ents) != 0 {
		t.Errorf("leaked dirs: %v", ents)
	}
}

func TestClone_InvalidCheckpoint(t *testing.T) {
	d := fakeDriver(t)
	dir := t.TempDir()
	if _, err := d.Clone(context.Background(), dir, vmm.Spec{ID: "c", Net: "none", Size: "small"}); !errors.Is(err, vmm.ErrSnapshotInvalid) {
		t.Fatalf("clone from an empty dir: %v", err)
	}
}

func mustExe(t *testing.T) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// BenchmarkClone measures snapshot → clone (to agent answering) → destroy
// against the fake VMM process: the driver's own overhead (spawn, API,
// relay, health, re-key), not a real VMM's restore time.
func BenchmarkClone(b *testing.B) {
	exe, _ := os.Executable()
	assets := b.TempDir()
	kernel := filepath.Join(assets, "vmlinux")
	_ = os.WriteFile(kernel, []byte("k"), 0o600)
	d, err := ch.New(ch.Options{RootDir: b.TempDir(), Binary: exe, Env: []string{chfake.EnvVar + "=cloud-hypervisor"}, Kernel: kernel})
	if err != nil {
		b.Fatal(err)
	}
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
