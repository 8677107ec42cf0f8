package node

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/internal/testagent"
	"github.com/hearthvm/hearth/nodeapi"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type daemon struct {
	cmd *exec.Cmd
	out *bytes.Buffer
}

func startSandboxd(t *testing.T, bin, agent, dataDir, tokenFile, addr string, flags ...string) *daemon {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, append([]string{"--node-name", "kd", "--listen", addr, "--data-dir", dataDir, "--token-file", tokenFile,
		"--agent-bin", agent, "--default-lease", "10m",
		"--vmm-opt", "image_cache="}, flags...)...) // the busybox root: templates here are names, not images
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, out: &out}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandboxd did not come up: %s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A real sandboxd killed with SIGKILL: its claimed agent keeps running, the
// restarted daemon re-adopts it (same address, same deadline) and destroys
// the warm agents of the dead one; SIGTERM then stops everything.
func TestSandboxd_SurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the sandboxd binary")
	}
	bin := testagent.Binary(t, "./cmd/sandboxd")
	agent := testagent.Path(t)
	base := t.TempDir()
	t.Cleanup(func() { killMentioning(base) })
	dataDir := filepath.Join(base, "data")
	tokenFile := filepath.Join(base, "token")
	if err := os.WriteFile(tokenFile, []byte(testRoot+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	root := filepath.Join(dataDir, "vms")

	a := startSandboxd(t, bin, agent, dataDir, tokenFile, addr)
	c := nodeapi.NewClient(addr, testRoot)
	if _, err := c.PutPools(bg, pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	waitPool := func(warm int32) {
		t.Helper()
		require.Eventually(t, func() bool {
			info, err := c.Info(bg)
			return err == nil && len(info.Pools) == 1 && info.Pools[0].Warm == warm && info.Pools[0].Refilling == 0
		}, waitWithin, waitTick)
	}
	waitPool(2)
	res, err := c.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/survivor"})
	if err != nil {
		t.Fatal(err)
	}
	waitPool(2)
	before := liveVMs(root)
	if len(before) != 3 {
		t.Fatalf("agents before the kill: %v", before)
	}

	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	// The agent's address is a forwarder in sandboxd's process (vmm/sim), so
	// only the VM itself outlives the daemon; the restarted daemon serves it
	// again on the same port.
	if live := liveVMs(root); len(live) != 3 {
		t.Fatalf("VMs died with sandboxd: %v", live)
	}

	b := startSandboxd(t, bin, agent, dataDir, tokenFile, addr)
	got, err := c.Get(bg, res.ID)
	if err != nil || got.AgentAddr != res.AgentAddr || !got.Deadline.Equal(res.Deadline) || got.ClaimRef != "ns/survivor" {
		t.Fatalf("after restart: %+v %v\n%s", got, err, b.out.String())
	}
	if refs, err := c.GetByRef(bg, "ns/survivor"); err != nil || len(refs) != 1 {
		t.Fatalf("by ref after restart: %v %v", refs, err)
	}
	waitPool(2)
	after := liveVMs(root)
	if len(after) != 3 {
		t.Fatalf("agents after the restart: %v (before %v)", after, before)
	}
	for id := range before {
		if after[id] {
			continue
		}
		// Only the two warm agents of the dead daemon may be gone.
		delete(before, id)
	}
	if len(before) != 1 {
		t.Fatalf("kept %v of the old agents; want only the claimed one", before)
	}

	// SIGTERM: warm agents destroyed, the claimed one stopped (kept on disk).
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := b.cmd.Wait(); err != nil {
		t.Fatalf("sandboxd exit: %v\n%s", err, b.out.String())
	}
	if live := liveVMs(root); len(live) != 0 {
		t.Fatalf("agents left after SIGTERM: %v", live)
	}
	c2 := startSandboxd(t, bin, agent, dataDir, tokenFile, addr)
	got, err = c.Get(bg, res.ID)
	if err != nil || agentHealth(got.AgentAddr) != http.StatusNoContent {
		t.Fatalf("after an orderly restart: %+v %v\n%s", got, err, c2.out.String())
	}
	_ = c2.cmd.Process.Signal(syscall.SIGTERM)
	_ = c2.cmd.Wait()
}

// loopsUnder lists the loop devices whose backing file is under dir.
func loopsUnder(dir string) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if p := strings.TrimSpace(string(b)); err == nil && strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	return out
}

// sandboxd --disk-size sizes every sandbox's disk (the stats read it from
// the sandbox's file system), and an orderly stop leaves no loop device.
func TestSandboxd_DiskSizeFlagSizesEverySandbox(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the sandboxd binary")
	}
	bin := testagent.Binary(t, "./cmd/sandboxd")
	agent := testagent.Path(t)
	base := t.TempDir()
	t.Cleanup(func() { killMentioning(base) })
	dataDir := filepath.Join(base, "data")
	tokenFile := filepath.Join(base, "token")
	if err := os.WriteFile(tokenFile, []byte(testRoot+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	if out, err := exec.Command(bin, "--node-name", "kd", "--data-dir", dataDir, "--disk-size", "1Mi").CombinedOutput(); err == nil || !strings.Contains(string(out), "--disk-size") {
		t.Fatalf("sandboxd --disk-size 1Mi: %v %s", err, out)
	}
	d := startSandboxd(t, bin, agent, dataDir, tokenFile, addr, "--disk-size", "32Mi")
	c := nodeapi.NewClient(addr, testRoot)
	if _, err := c.PutPools(bg, pools("img", 1)); err != nil {
		t.Fatal(err)
	}
	var res nodeapi.Sandbox
	require.Eventually(t, func() bool {
		var err error
		res, err = c.Claim(bg, nodeapi.ClaimRequest{Template: "img"})
		return err == nil
	}, waitWithin, waitTick)
	st, err := c.Stats(bg, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.DiskTotalBytes <= 16<<20 || st.DiskTotalBytes > 32<<20 {
		t.Fatalf("a sandbox of sandboxd --disk-size 32Mi has a disk of %d bytes", st.DiskTotalBytes)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Wait(); err != nil {
		t.Fatalf("sandboxd exit: %v\n%s", err, d.out.String())
	}
	require.Eventually(t, func() bool { return len(loopsUnder(dataDir)) == 0 }, waitWithin, waitTick)
}
