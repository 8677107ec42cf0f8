package sim_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hearthvm/hearth/internal/testagent"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/sim"
)

func TestMain(m *testing.M) { testagent.Main(m) }

func newDriver(t testing.TB, root string) *sim.Driver {
	t.Helper()
	d, err := sim.New(sim.Options{Root: root, AgentCommand: []string{testagent.Path(t)}, BootTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func health(addr, token string) (int, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/health", nil)
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func mustHealthy(t *testing.T, h vmm.Handle) {
	t.Helper()
	code, err := health(h.Addr, h.Token)
	if err != nil || code != http.StatusNoContent {
		t.Fatalf("health of %s at %s: %d %v", h.ID, h.Addr, code, err)
	}
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

func state(pid int) byte {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0
	}
	return s[i+2]
}

func TestBootPauseResumeDestroy(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := newDriver(t, root)
	h, err := d.Boot(ctx, vmm.Spec{ID: "vm-a", Template: "img", Net: "none", Size: "small", Token: "tok-a"})
	if err != nil {
		t.Fatal(err)
	}
	if h.Token != "tok-a" || h.PID == 0 || h.Addr == "" || h.Dir != filepath.Join(root, "vm-a") || h.Backend != "sim" || h.Meta["cgroup"] == "" {
		t.Fatalf("handle = %+v", h)
	}
	mustHealthy(t, h)
	if pg, _ := syscall.Getpgid(h.PID); pg != h.PID {
		t.Fatalf("init is not its own process group leader: pgid %d pid %d", pg, h.PID)
	}
	members := cgroupProcs(t, h)
	if len(members) < 2 {
		t.Fatalf("cgroup holds %v, want the init and the agent", members)
	}

	for i := 0; i < 2; i++ { // idempotent
		if h, err = d.Pause(ctx, h); err != nil || !h.Paused {
			t.Fatalf("pause: %v %+v", err, h)
		}
	}
	if !frozen(t, h) {
		t.Fatal("Pause did not freeze the VM's cgroup")
	}
	if _, err := health(h.Addr, ""); err == nil {
		t.Fatal("a paused agent answered")
	}
	for i := 0; i < 2; i++ {
		if h, err = d.Resume(ctx, h); err != nil || h.Paused {
			t.Fatalf("resume: %v %+v", err, h)
		}
	}
	mustHealthy(t, h)

	st, err := d.Stats(ctx, h)
	if err != nil || st.RSSBytes <= 0 || st.CPUCount != 1 || !st.MemUsedMeasured {
		t.Fatalf("stats %+v %v", st, err)
	}

	if _, err := d.Boot(ctx, vmm.Spec{ID: "vm-a"}); !errors.Is(err, sim.ErrAlreadyExists) {
		t.Fatalf("second boot with one id: %v", err)
	}

	pid := h.PID
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
	for _, p := range append(members, pid) {
		if alive(p) {
			t.Fatalf("process %d survived Destroy", p)
		}
	}
	if _, err := os.Stat(h.Dir); !os.IsNotExist(err) {
		t.Fatalf("dir survived Destroy: %v", err)
	}
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatalf("second destroy: %v", err)
	}
}

func TestSnapshotClone(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := newDriver(t, root)
	src, err := d.Boot(ctx, vmm.Spec{ID: "src", Template: "img", Net: "none", Size: "medium", Token: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, src)
	home := filepath.Join(src.Dir, "rootfs", "home", "user")
	if err := os.MkdirAll(filepath.Join(home, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "sub", "f.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Symlink("sub/f.txt", filepath.Join(home, "link"))

	ck := filepath.Join(t.TempDir(), "ck1")
	if err := d.Snapshot(ctx, src, ck); err != nil {
		t.Fatal(err)
	}
	if err := d.Snapshot(ctx, src, ck); !errors.Is(err, sim.ErrAlreadyExists) {
		t.Fatalf("snapshot into an existing dir: %v", err)
	}
	mustHealthy(t, src) // the source keeps running

	var clones []vmm.Handle
	for i := 0; i < 2; i++ {
		c, err := d.Clone(ctx, ck, vmm.Spec{ID: fmt.Sprintf("clone-%d", i), Token: fmt.Sprintf("ct%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Destroy(ctx, c)
		mustHealthy(t, c)
		b, err := os.ReadFile(filepath.Join(c.Dir, "rootfs", "home", "user", "link"))
		if err != nil || string(b) != "hello" {
			t.Fatalf("clone home: %q %v", b, err)
		}
		if st, _ := d.Stats(ctx, c); st.CPUCount != 4 {
			t.Fatalf("clone did not keep the size class: %+v", st)
		}
		clones = append(clones, c)
	}
	if clones[0].Addr == clones[1].Addr || clones[0].Token == clones[1].Token || clones[0].PID == clones[1].PID {
		t.Fatalf("clones share identity: %+v %+v", clones[0], clones[1])
	}
	// A write in one clone is not seen by the other or the checkpoint.
	_ = os.WriteFile(filepath.Join(clones[0].Dir, "rootfs", "home", "user", "sub", "f.txt"), []byte("changed"), 0o644)
	if b, _ := os.ReadFile(filepath.Join(clones[1].Dir, "rootfs", "home", "user", "sub", "f.txt")); string(b) != "hello" {
		t.Fatalf("clones share files: %q", b)
	}

	if _, err := d.Clone(ctx, t.TempDir(), vmm.Spec{ID: "bad"}); !errors.Is(err, vmm.ErrSnapshotInvalid) {
		t.Fatalf("clone from an empty dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "bad")); !os.IsNotExist(err) {
		t.Fatal("a failed clone left its dir")
	}
}

func TestStopRestore(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, t.TempDir())
	h, err := d.Boot(ctx, vmm.Spec{ID: "vm", Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	if h, err = d.Pause(ctx, h); err != nil {
		t.Fatal(err)
	}
	old := h.PID
	h, err = d.Stop(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	if alive(old) || h.PID != 0 {
		t.Fatalf("Stop left the agent: %+v", h)
	}
	if _, err := os.Stat(h.Dir); err != nil {
		t.Fatal("Stop removed the dir")
	}
	if live, _ := d.List(ctx); len(live) != 0 {
		t.Fatalf("List after Stop = %+v", live)
	}
	if stale, _ := d.Stale(ctx); len(stale) != 1 || stale[0].ID != "vm" {
		t.Fatalf("Stale after Stop = %+v", stale)
	}
	h, err = d.Restore(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	if h.PID == 0 || h.PID == old || !h.Paused || h.Token != "tok" {
		t.Fatalf("restored handle %+v", h)
	}
	if !frozen(t, h) {
		t.Fatalf("restored paused VM runs")
	}
	if h, err = d.Resume(ctx, h); err != nil {
		t.Fatal(err)
	}
	mustHealthy(t, h)
}

// A second driver on the same root (a restarted node) re-adopts a running
// agent instead of starting another, and List sees it.
func TestRestoreReattach(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d1 := newDriver(t, root)
	h, err := d1.Boot(ctx, vmm.Spec{ID: "vm", Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	d2 := newDriver(t, root)
	defer d2.Destroy(ctx, h)
	live, err := d2.List(ctx)
	if err != nil || len(live) != 1 || live[0].ID != "vm" || live[0].PID != h.PID {
		t.Fatalf("List = %+v %v", live, err)
	}
	r, err := d2.Restore(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	if r.PID != h.PID {
		t.Fatalf("Restore restarted a live VM: %+v vs %+v", r, h)
	}
	mustHealthy(t, r)
}

// A recorded pid that now belongs to another process is never adopted nor
// signalled.
func TestRestorePIDReuseGuard(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := newDriver(t, root)
	h, err := d.Boot(ctx, vmm.Spec{ID: "vm", Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	h, err = d.Stop(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	// Forge the record: pid = this test process.
	rec := filepath.Join(h.Dir, "vm.json")
	b, _ := os.ReadFile(rec)
	forged := strings.Replace(string(b), `"id": "vm",`, fmt.Sprintf(`"id": "vm", "pid": %d,`, os.Getpid()), 1)
	if err := os.WriteFile(rec, []byte(forged), 0o600); err != nil {
		t.Fatal(err)
	}
	if live, _ := d.List(ctx); len(live) != 0 {
		t.Fatalf("List adopted a foreign pid: %+v", live)
	}
	r, err := d.Restore(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	if r.PID == os.Getpid() {
		t.Fatal("Restore adopted a foreign pid")
	}
	mustHealthy(t, r)
	if err := d.Destroy(ctx, r); err != nil {
		t.Fatal(err)
	}
}

func TestBootFailuresLeaveNothing(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		agent []string
		want  error
	}{
		{"agent exits", []string{busybox(t), "false"}, vmm.ErrVMMExited},
		{"agent hangs", []string{busybox(t), "sh", "-c", "sleep 30", "sh"}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			d, err := sim.New(sim.Options{Root: root, AgentCommand: tc.agent, BootTimeout: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			_, err = d.Boot(ctx, vmm.Spec{ID: "vm"})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Boot err = %v, want %v", err, tc.want)
			}
			if ents, _ := os.ReadDir(root); len(ents) != 0 {
				for _, e := range ents {
					if !strings.HasPrefix(e.Name(), ".") { // .images, .lower: shared caches
						t.Fatalf("a failed boot left %v", ents)
					}
				}
			}
			if pids := procsMentioning(root); len(pids) != 0 {
				t.Fatalf("a failed boot left processes %v", pids)
			}
			for _, hier := range []string{"", "freezer"} {
				if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", hier, d.Cgroup("vm"))); !os.IsNotExist(err) {
					t.Fatalf("a failed boot left its cgroup: %v", err)
				}
			}
		})
	}
}

func TestInvalidIDs(t *testing.T) {
	d := newDriver(t, t.TempDir())
	for _, id := range []string{"", ".", "..", "../x", "a/b", strings.Repeat("x", 200)} {
		if _, err := d.Boot(context.Background(), vmm.Spec{ID: id}); err == nil {
			t.Errorf("Boot accepted id %q", id)
		}
	}
	if err := d.Destroy(context.Background(), vmm.Handle{ID: "x", Dir: "/etc"}); err == nil {
		t.Error("Destroy accepted a dir outside the root")
	}
}

// procsMentioning returns live processes whose command line mentions s.
func procsMentioning(s string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), s) && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// BenchmarkCloneFill measures the sim fill rate: warm VMs cloned from one
// checkpoint per second (sequentially).
func BenchmarkCloneFill(b *testing.B) {
	ctx := context.Background()
	d := newDriver(b, b.TempDir())
	src, err := d.Boot(ctx, vmm.Spec{ID: "golden"})
	if err != nil {
		b.Fatal(err)
	}
	ck := filepath.Join(b.TempDir(), "ck")
	if err := d.Snapshot(ctx, src, ck); err != nil {
		b.Fatal(err)
	}
	_ = d.Destroy(ctx, src)
	hs := make([]vmm.Handle, 0, b.N)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		h, err := d.Clone(ctx, ck, vmm.Spec{ID: fmt.Sprintf("c%d", i)})
		if err != nil {
			b.Fatal(err)
		}
		hs = append(hs, h)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "VMs/s")
	b.StopTimer()
	for _, h := range hs {
		_ = d.Destroy(ctx, h)
	}
}
