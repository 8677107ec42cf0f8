package node

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

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

func startSandboxd(t *testing.T, bin, agent, dataDir, tokenFile, addr string) *daemon {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, "--node-name", "kd", "--listen", addr, "--data-dir", dataDir, "--token-file", tokenFile,
		"--agent-bin", agent, "--default-lease", "10m",
		"--vmm-opt", "image_cache=") // the busybox root: templates here are names, not images
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
		waitFor(t, func() bool {
			info, err := c.Info(bg)
			return err == nil && len(info.Pools) == 1 && info.Pools[0].Warm == warm && info.Pools[0].Refilling == 0
		})
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
