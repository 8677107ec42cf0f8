package qemu

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/internal/uds"
)

// guestDriver returns a TCG driver over the built guest, or skips when
// QEMU or the guest (hack/setup.d/20-qemu-guest.sh) is absent.
func guestDriver(t testing.TB, accel string) *Driver {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("qemu-system-x86_64 not installed (run hack/setup.d/20-qemu-guest.sh)")
	}
	dir := DefaultGuestDir()
	if dir == "" {
		t.Skip("guest not built: run hack/setup.d/20-qemu-guest.sh")
	}
	for _, f := range []string{"vmlinuz", "initrd.cpio.gz"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Skipf("guest not built (%v): run hack/setup.d/20-qemu-guest.sh", err)
		}
	}
	// Short root: unix socket paths are limited to 108 bytes.
	root, err := os.MkdirTemp("", "hq")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Root: root, Accel: accel, Logf: t.Logf}
	// HEARTH_QEMU_DISK swaps the busybox test disk for another base image
	// (e.g. the built-in Debian one) in every test and benchmark.
	if disk := os.Getenv("HEARTH_QEMU_DISK"); disk != "" {
		o.Disk = func(string) (string, error) { return disk, nil }
	}
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hs, _ := d.List(context.Background())
		for _, h := range hs {
			t.Errorf("vm %s still running at cleanup; killing", h.ID)
			_ = d.Destroy(context.Background(), h)
		}
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(root, "*", "console.log"))
			for _, l := range logs {
				t.Logf("%s:\n%s", l, logTail(l, 0))
			}
		}
		_ = os.RemoveAll(root)
	})
	return d
}

// destroyOnCleanup makes sure h's QEMU never outlives the test.
func destroyOnCleanup(t testing.TB, d *Driver, h vmm.Handle) {
	t.Cleanup(func() { _ = d.Destroy(context.Background(), h) })
}

func health(addr string) error {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/health")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("health: %s", resp.Status)
	}
	return nil
}

// waitHealthy polls the agent until it answers (bounded).
func waitHealthy(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := health(addr)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent at %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// run starts cmd through the agent's process.Process/Start (Connect JSON
// server stream) and returns its stdout and exit status.
func run(addr, token string, args ...string) (string, int, error) {
	return runAs(addr, token, "", args...)
}

// runAs is run as the guest account user (the e2b SDK's Authorization:
// Basic); "" leaves the agent's default.
func runAs(addr, token, user string, args ...string) (string, int, error) {
	body, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": append([]string{"-l", "-c"}, args...)}})
	var frame bytes.Buffer
	frame.WriteByte(0)
	_ = binary.Write(&frame, binary.BigEndian, uint32(len(body)))
	frame.Write(body)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/process.Process/Start", &frame)
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("X-Access-Token", token)
	if user != "" {
		req.SetBasicAuth(user, "")
	}
	c := http.Client{Timeout: 60 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return "", 0, fmt.Errorf("start: %s: %s", resp.Status, b)
	}
	var out strings.Builder
	exit := -1
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(resp.Body, hdr[:]); err != nil {
			return out.String(), exit, err
		}
		msg := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(resp.Body, msg); err != nil {
			return out.String(), exit, err
		}
		if hdr[0]&2 != 0 { // end of stream
			return out.String(), exit, nil
		}
		var ev struct {
			Event struct {
				Data *struct {
					Stdout []byte `json:"stdout"`
				} `json:"data"`
				End *struct {
					ExitCode int    `json:"exitCode"`
					Status   string `json:"status"`
				} `json:"end"`
			} `json:"event"`
		}
		if err := json.Unmarshal(msg, &ev); err != nil {
			return out.String(), exit, err
		}
		if ev.Event.Data != nil {
			out.Write(ev.Event.Data.Stdout)
		}
		if ev.Event.End != nil {
			exit = ev.Event.End.ExitCode
		}
	}
}

// authStatus is the status of an authenticated agent call with token.
func authStatus(t *testing.T, addr, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+agentapi.IdentityPath, strings.NewReader(`{}`))
	req.Header.Set("X-Access-Token", token)
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func cpuTicks(t *testing.T, pid int) uint64 {
	t.Helper()
	st, err := readProcStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	return st.UTime + st.STime
}

// TestGuestLifecycle boots the real guest under QEMU (TCG) and walks the
// driver contract: boot, exec, pause, resume, snapshot, two clones with
// their own identities, stats, list, destroy.
func TestGuestLifecycle(t *testing.T) {
	d := guestDriver(t, AccelTCG)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	h, err := d.Boot(ctx, vmm.Spec{ID: "golden", Template: "img", Net: "none", Size: "small", Token: "tok-golden"})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, d, h)
	if err := health(h.Addr); err != nil {
		t.Fatalf("boot returned before the agent answered: %v", err)
	}
	if d.Accel() != AccelTCG || h.Meta["accel"] != AccelTCG {
		t.Fatalf("accel = %q / %q, want tcg", d.Accel(), h.Meta["accel"])
	}

	// The command runs in the guest: its hostname is set by the guest init.
	out, code, err := run(h.Addr, h.Token, "uname -a; hostname")
	if err != nil || code != 0 {
		t.Fatalf("uname through the agent: %q exit %d: %v", out, code, err)
	}
	hostHost, _ := os.Hostname()
	if !strings.Contains(out, "hearth-guest") || strings.Contains(out, " "+hostHost+" ") {
		t.Fatalf("uname output %q does not come from the guest (host %q)", out, hostHost)
	}
	t.Logf("guest: %s", strings.TrimSpace(out))

	// Pause: the QEMU process stops burning CPU.
	if h, err = d.Pause(ctx, h); err != nil || !h.Paused {
		t.Fatalf("pause: %v paused=%v", err, h.Paused)
	}
	if h, err = d.Pause(ctx, h); err != nil {
		t.Fatalf("second pause (idempotent): %v", err)
	}
	before := cpuTicks(t, h.PID)
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if used := cpuTicks(t, h.PID) - before; used > 10 { // < 0.1s over 0.5s
		t.Fatalf("paused VM used %d ticks in 500ms", used)
	}
	if h, err = d.Resume(ctx, h); err != nil || h.Paused {
		t.Fatalf("resume: %v paused=%v", err, h.Paused)
	}
	if _, err = d.Resume(ctx, h); err != nil {
		t.Fatalf("second resume (idempotent): %v", err)
	}
	waitHealthy(t, h.Addr)

	// Snapshot, then two clones with their own identities.
	snap := filepath.Join(t.TempDir(), "ckpt")
	if err := d.Snapshot(ctx, h, snap); err != nil {
		t.Fatal(err)
	}
	if err := d.Snapshot(ctx, h, snap); err == nil {
		t.Fatal("snapshot into an existing dir succeeded")
	}
	if err := health(h.Addr); err != nil {
		t.Fatalf("source after snapshot: %v", err)
	}
	var clones []vmm.Handle
	for i := 1; i <= 2; i++ {
		c, err := d.Clone(ctx, snap, vmm.Spec{ID: fmt.Sprintf("clone-%d", i), Net: "none", Token: fmt.Sprintf("tok-clone-%d", i)})
		if err != nil {
			t.Fatalf("clone %d: %v", i, err)
		}
		destroyOnCleanup(t, d, c)
		clones = append(clones, c)
	}
	if clones[0].Addr == clones[1].Addr || clones[0].Addr == h.Addr {
		t.Fatalf("clones share an address: %s %s (source %s)", clones[0].Addr, clones[1].Addr, h.Addr)
	}
	for i, c := range clones {
		if err := health(c.Addr); err != nil {
			t.Fatalf("clone %d: %v", i+1, err)
		}
		if got := authStatus(t, c.Addr, "tok-golden"); got != http.StatusUnauthorized {
			t.Fatalf("clone %d accepts the golden token: %d", i+1, got)
		}
		if got := authStatus(t, c.Addr, c.Token); got != http.StatusBadRequest {
			t.Fatalf("clone %d rejects its own token: %d", i+1, got)
		}
		other := clones[1-i].Token
		if got := authStatus(t, c.Addr, other); got != http.StatusUnauthorized {
			t.Fatalf("clone %d accepts its sibling's token: %d", i+1, got)
		}
		out, code, err := run(c.Addr, c.Token, "echo clone-$((20+1))")
		if err != nil || code != 0 || strings.TrimSpace(out) != "clone-21" {
			t.Fatalf("exec in clone %d: %q %d %v", i+1, out, code, err)
		}
		st, err := d.Stats(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("clone %d: rss %d MiB, private %d MiB, shared %d MiB", i+1, st.RSSBytes>>20, st.PrivateBytes>>20, st.SharedBytes>>20)
		if st.RSSBytes <= 0 || st.MemTotalBytes != int64(DefaultSizes["small"].MemoryMiB)<<20 {
			t.Fatalf("clone %d stats: %+v", i+1, st)
		}
	}
	if got := authStatus(t, h.Addr, "tok-golden"); got != http.StatusBadRequest {
		t.Fatalf("source lost its own token: %d", got)
	}

	// Fork of a clone: its RAM is a private mapping, so its checkpoint is
	// one full migration stream.
	fork := filepath.Join(t.TempDir(), "fork")
	if err := d.Snapshot(ctx, clones[0], fork); err != nil {
		t.Fatalf("snapshot of a clone: %v", err)
	}
	var man manifest
	if err := uds.ReadJSON(filepath.Join(fork, "snapshot.json"), &man); err != nil || man.Memory != "stream" || man.Token != clones[0].Token {
		t.Fatalf("fork manifest = %+v, %v", man, err)
	}
	child, err := d.Clone(ctx, fork, vmm.Spec{ID: "child", Token: "tok-child"})
	if err != nil {
		t.Fatalf("clone of a clone: %v", err)
	}
	if got := authStatus(t, child.Addr, clones[0].Token); got != http.StatusUnauthorized {
		t.Fatalf("child accepts its parent's token: %d", got)
	}
	if err := d.Destroy(ctx, child); err != nil {
		t.Fatal(err)
	}

	hs, err := d.List(ctx)
	if err != nil || len(hs) != 3 {
		t.Fatalf("list = %d VMs (%v), want 3", len(hs), err)
	}

	pids := []int{h.PID, clones[0].PID, clones[1].PID}
	for _, x := range append([]vmm.Handle{h}, clones...) {
		if err := d.Destroy(ctx, x); err != nil {
			t.Fatal(err)
		}
		if err := d.Destroy(ctx, x); err != nil {
			t.Fatalf("second destroy: %v", err)
		}
		if _, err := os.Stat(x.Dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("destroy left %s", x.Dir)
		}
	}
	for _, pid := range pids {
		if st, err := readProcStat(pid); err == nil && st.State != 'Z' {
			t.Fatalf("qemu pid %d survives destroy", pid)
		}
	}
	if hs, _ := d.List(ctx); len(hs) != 0 {
		t.Fatalf("list after destroy: %v", hs)
	}
	// Clones from the checkpoint still work after its source is gone.
	c3, err := d.Clone(ctx, snap, vmm.Spec{ID: "clone-3", Token: "tok-clone-3"})
	if err != nil {
		t.Fatalf("clone after source destroyed: %v", err)
	}
	destroyOnCleanup(t, d, c3)

	// Stop then Restore brings the VM back with its own identity.
	c3, err = d.Stop(ctx, c3)
	if err != nil || c3.PID != 0 {
		t.Fatalf("stop: %v pid=%d", err, c3.PID)
	}
	if hs, _ := d.List(ctx); len(hs) != 0 {
		t.Fatalf("stopped VM still listed: %v", hs)
	}
	c3, err = d.Restore(ctx, c3)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if got := authStatus(t, c3.Addr, "tok-clone-3"); got != http.StatusBadRequest {
		t.Fatalf("restored VM rejects its token: %d", got)
	}
	again, err := d.Restore(ctx, c3) // alive: re-attach
	if err != nil || again.PID != c3.PID {
		t.Fatalf("re-attach: %v pid %d vs %d", err, again.PID, c3.PID)
	}
	if err := d.Destroy(ctx, c3); err != nil {
		t.Fatal(err)
	}
}

// TestBoot_BadInputLeavesNothing checks input errors come before any process.
func TestBoot_BadInputLeavesNothing(t *testing.T) {
	root := t.TempDir()
	c := DefaultConfig("/nonexistent")
	d, err := New(Options{Root: root, Accel: AccelTCG, Config: &c, Binary: "/bin/false", Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, spec := range []vmm.Spec{
		{ID: "../x", Size: "small"},
		{ID: "a", Size: "huge"},
		{ID: "a", Size: "small", Token: "has space"},
		{ID: "a", Size: "small", Net: "wifi"},
	} {
		if _, err := d.Boot(ctx, spec); err == nil {
			t.Errorf("Boot(%+v) succeeded", spec)
		}
	}
	// A QEMU that exits at once is ErrVMMExited and leaves no directory.
	if _, err := d.Boot(ctx, vmm.Spec{ID: "a", Size: "small", Token: "t"}); !errors.Is(err, vmm.ErrVMMExited) {
		t.Fatalf("boot with a failing binary: %v, want ErrVMMExited", err)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Fatalf("failed boots left %d entries in root", len(ents))
	}
	if _, err := d.Clone(ctx, t.TempDir(), vmm.Spec{ID: "b", Token: "t"}); !errors.Is(err, vmm.ErrSnapshotInvalid) {
		t.Fatalf("clone from an empty dir: %v, want ErrSnapshotInvalid", err)
	}
	if _, err := d.Pause(ctx, vmm.Handle{ID: "nope"}); !errors.Is(err, vmm.ErrNotRunning) {
		t.Fatalf("pause unknown: %v, want ErrNotRunning", err)
	}
	if err := d.Destroy(ctx, vmm.Handle{ID: "nope"}); err != nil {
		t.Fatalf("destroy unknown: %v", err)
	}
}

// TestAccelAuto_VerifiesKVMOrFallsBack boots under "auto": the driver must
// settle on an accelerator under which the guest really answers.
func TestAccelAuto_VerifiesKVMOrFallsBack(t *testing.T) {
	d := guestDriver(t, "auto")
	d.o.KVMProbeTimeout = 15 * time.Second
	if d.Accel() != "auto" {
		t.Fatalf("accel before first boot = %q", d.Accel())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h, err := d.Boot(ctx, vmm.Spec{ID: "probe", Size: "small", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, d, h)
	if err := health(h.Addr); err != nil {
		t.Fatal(err)
	}
	got := d.Accel()
	if got != AccelKVM && got != AccelTCG || h.Meta["accel"] != got {
		t.Fatalf("accel = %q, handle says %q", got, h.Meta["accel"])
	}
	t.Logf("accelerator: %s", got)
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
}
