package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/internal/testagent"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/sim"
)

func TestMain(m *testing.M) { testagent.Main(m) }

// gatedDriver holds Clone while gated, so a test controls when the pool refills.
type gatedDriver struct {
	*sim.Driver
	gated   atomic.Bool
	release chan struct{}
}

func (g *gatedDriver) Clone(ctx context.Context, dir string, spec vmm.Spec) (vmm.Handle, error) {
	if g.gated.Load() {
		select {
		case <-g.release:
		case <-ctx.Done():
			return vmm.Handle{}, ctx.Err()
		}
	}
	return g.Driver.Clone(ctx, dir, spec)
}

func newSim(t testing.TB, root string) *gatedDriver {
	t.Helper()
	return &gatedDriver{Driver: newSimOn(t, root, ""), release: make(chan struct{})}
}

// newSimOn starts a sim driver under root whose VMs run the test agent and
// whose egress lane goes out through the network namespace uplink (a
// testnet.Net's UplinkPath; "" for the host's), and kills what is left of
// its VMs when t ends.
func newSimOn(t testing.TB, root, uplink string) *sim.Driver {
	t.Helper()
	d, err := sim.New(sim.Options{Root: root, AgentCommand: []string{testagent.Path(t)}, UplinkNetns: uplink})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killMentioning(root) })
	return d
}

// killMentioning SIGKILLs live processes whose command line mentions s (the
// test's own temp dirs): a safety net so a failed test leaks nothing.
func killMentioning(s string) {
	for _, pid := range procsMentioning(s) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pattern := range []string{"*", "*/*", "*/*/*"} { // sim VM inits
		dirs, _ := filepath.Glob(filepath.Join(s, pattern, "vm.json"))
		for _, f := range dirs {
			if pid := simInit(filepath.Dir(f)); pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	// The sim VMs' root mounts (overlays) would keep t.TempDir from going.
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], s) {
			_ = syscall.Unmount(f[4], syscall.MNT_DETACH)
		}
	}
}

func procsMentioning(s string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(b), s) {
			continue
		}
		if st, _ := os.ReadFile("/proc/" + e.Name() + "/stat"); strings.Contains(string(st), ") Z") {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// simInit returns the pid of the live init of the sim VM in dir (recorded
// in its vm.json, command line "hearth-sim-init <id>"), or 0.
func simInit(dir string) int {
	var rec struct {
		PID int `json:"pid"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "vm.json"))
	if err != nil || json.Unmarshal(b, &rec) != nil || rec.PID <= 0 {
		return 0
	}
	cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", rec.PID))
	if string(cmd) != "hearth-sim-init\x00"+filepath.Base(dir)+"\x00" {
		return 0
	}
	if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", rec.PID)); strings.Contains(string(st), ") Z") {
		return 0
	}
	return rec.PID
}

// liveVMs returns the ids of the sim VMs running under root.
func liveVMs(root string) map[string]bool {
	out := map[string]bool{}
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if simInit(filepath.Join(root, e.Name())) > 0 {
			out[e.Name()] = true
		}
	}
	return out
}

func agentHealth(addr string) int {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/health")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestNode_Sim_EndToEnd(t *testing.T) {
	root := filepath.Join(t.TempDir(), "vms")
	drv := newSim(t, root)
	tn := startNode(t, drv, nil)
	if _, err := tn.root.PutPools(bg, pools("img", 3)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 3)
	drv.gated.Store(true) // no refill until released

	var got []nodeapi.Sandbox
	for i := 0; i < 3; i++ {
		res, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: fmt.Sprintf("ns/s%d", i), TTLSeconds: 600})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(res.ID, "sb_") || len(res.ID) != 3+16 || res.Token == "" || res.Node != "n1" {
			t.Fatalf("claim result %+v", res)
		}
		for _, g := range got {
			if g.ID == res.ID || g.AgentAddr == res.AgentAddr || g.Token == res.Token {
				t.Fatalf("claims share identity: %+v %+v", g, res)
			}
		}
		if code := agentHealth(res.AgentAddr); code != http.StatusNoContent {
			t.Fatalf("claimed agent health = %d", code)
		}
		got = append(got, res)
	}
	if _, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img"}); !errors.Is(err, nodeapi.ErrNoCapacity) {
		t.Fatalf("4th claim: %v", err)
	}
	close(drv.release)
	drv.gated.Store(false)

	// Lookup by claim ref at once.
	byRef, err := tn.root.GetByRef(bg, "ns/s1")
	if err != nil || len(byRef) != 1 || byRef[0].ID != got[1].ID || byRef[0].AgentAddr != got[1].AgentAddr {
		t.Fatalf("by ref: %+v %v", byRef, err)
	}
	if _, err := tn.root.GetByRef(bg, "ns/none"); nodeapi.StatusOf(err) != 404 {
		t.Fatalf("unknown ref: %v", err)
	}

	// Wrong tokens: 401 / 404, and nothing happened.
	if code, _ := rawDo(t, "POST", tn.srv.URL+"/v1/sandboxes/"+got[0].ID+"/release", "wrong", ""); code != 401 {
		t.Fatalf("release with an unknown token = %d", code)
	}
	if code, _ := rawDo(t, "POST", tn.srv.URL+"/v1/sandboxes/"+got[0].ID+"/release", got[1].Token, ""); code != 404 {
		t.Fatalf("release with another sandbox's token = %d", code)
	}
	if code := agentHealth(got[0].AgentAddr); code != http.StatusNoContent {
		t.Fatal("a refused release acted")
	}

	// Malformed JSON: a JSON 400.
	if code, body := rawDo(t, "POST", tn.srv.URL+"/v1/claim", testRoot, `{"template":`); code != 400 || !strings.HasPrefix(body, `{"error":`) {
		t.Fatalf("malformed claim = %d %s", code, body)
	}

	// Pause stops the guest; resume brings it back.
	if err := tn.root.Pause(bg, got[2].ID); err != nil {
		t.Fatal(err)
	}
	if code := agentHealth(got[2].AgentAddr); code != 0 {
		t.Fatalf("paused agent answered %d", code)
	}
	if err := tn.root.Resume(bg, got[2].ID); err != nil {
		t.Fatal(err)
	}
	if code := agentHealth(got[2].AgentAddr); code != http.StatusNoContent {
		t.Fatalf("woken agent = %d", code)
	}
	st, err := tn.root.Stats(bg, got[2].ID)
	if err != nil || st.RSSBytes <= 0 || st.CPUCount != 1 || st.ID != got[2].ID {
		t.Fatalf("stats %+v %v", st, err)
	}

	// Fork copies the guest's files into each child.
	tn.mu.Lock()
	parentDir := tn.tab.byID[got[0].ID].rec.Handle.Dir
	tn.mu.Unlock()
	if err := os.WriteFile(filepath.Join(parentDir, "rootfs", "home", "user", "note.txt"), []byte("from parent"), 0o644); err != nil {
		t.Fatal(err)
	}
	kids, err := tn.root.Fork(bg, got[0].ID, nodeapi.ForkRequest{Count: 2})
	if err != nil || len(kids) != 2 {
		t.Fatalf("fork %v %v", kids, err)
	}
	for i, c := range kids {
		if agentHealth(c.AgentAddr) != http.StatusNoContent || c.ClaimRef != fmt.Sprintf("%s-fork-%d", got[0].ClaimRef, i+1) {
			t.Fatalf("child %+v", c)
		}
		tn.mu.Lock()
		dir := tn.tab.byID[c.ID].rec.Handle.Dir
		tn.mu.Unlock()
		if b, _ := os.ReadFile(filepath.Join(dir, "rootfs", "home", "user", "note.txt")); string(b) != "from parent" {
			t.Fatalf("child home lacks the parent's file: %q", b)
		}
	}

	// Snapshot and snapshot claim.
	ck, err := tn.root.Snapshot(bg, got[0].ID, "c")
	if err != nil {
		t.Fatal(err)
	}
	if agentHealth(got[0].AgentAddr) != http.StatusNoContent {
		t.Fatal("the snapshot source stopped running")
	}
	br, err := tn.root.ClaimSnapshot(bg, ck.ID, 0)
	if err != nil || agentHealth(br.AgentAddr) != http.StatusNoContent {
		t.Fatalf("snapshot claim %+v %v", br, err)
	}

	// Release: 204, then 404, and the agent is gone.
	if err := tn.root.Release(bg, got[1].ID); err != nil {
		t.Fatal(err)
	}
	if err := tn.root.Release(bg, got[1].ID); nodeapi.StatusOf(err) != 404 {
		t.Fatalf("second release: %v", err)
	}
	if agentHealth(got[1].AgentAddr) != 0 {
		t.Fatal("a released agent still answers")
	}

	// A short lease is reaped by the node itself.
	tn.waitWarm(t, "img", 3)
	short, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", TTLSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool { _, err := tn.root.Get(bg, short.ID); return nodeapi.StatusOf(err) == 404 }, waitWithin, waitTick)
	require.Eventually(t, func() bool { return agentHealth(short.AgentAddr) == 0 }, waitWithin, waitTick)

	// A claim with env posts it to the agent's /init before answering.
	withEnv, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Env: map[string]string{"GREETING": "hi"}})
	if err != nil || agentHealth(withEnv.AgentAddr) != http.StatusNoContent {
		t.Fatalf("claim with env: %+v %v", withEnv, err)
	}

	// Metrics carry the pool gauges and claim counters.
	_, body := rawDo(t, "GET", tn.srv.URL+"/metrics", "", "")
	for _, want := range []string{`hearth_node_pool_warm{net="none",size="small",template="img"}`, `hearth_node_claims_total{result="delivered"} 5`,
		`hearth_node_claims_total{result="no_capacity"} 1`, "hearth_node_claim_duration_seconds_bucket", "hearth_node_boots_total"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// A node that dies (no Close) leaves claimed agents running; the next node
// on the same data dir re-adopts them with their deadlines and snapshots
// and leaves no orphan agent behind.
func TestNode_Sim_RestartAfterCrash(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "vms")
	cfg := Config{Name: "n1", DataDir: filepath.Join(base, "data"), RootToken: testRoot, Driver: newSim(t, root),
		ReapInterval: 50 * time.Millisecond, RefillInterval: 50 * time.Millisecond}
	a := runNode(t, cfg)
	if _, err := a.root.PutPools(bg, pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	a.waitWarm(t, "img", 2)
	c1, err := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/one", TTLSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/two"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.root.Pause(bg, c2.ID); err != nil {
		t.Fatal(err)
	}
	ck, err := a.root.Snapshot(bg, c1.ID, "keep")
	if err != nil {
		t.Fatal(err)
	}
	a.waitWarm(t, "img", 2)
	a.mu.Lock()
	var oldWarm []string
	for _, p := range a.tab.pools {
		for _, h := range p.warm {
			oldWarm = append(oldWarm, h.ID)
		}
	}
	a.mu.Unlock()
	a.crash()
	if agentHealth(c1.AgentAddr) != http.StatusNoContent {
		t.Fatal("a claimed agent died with its node")
	}

	cfg.Driver = newSim(t, root) // a fresh driver, as in a new process
	b := runNode(t, cfg)
	list, err := b.root.List(bg)
	if err != nil || len(list) != 2 {
		t.Fatalf("list after restart: %+v %v", list, err)
	}
	g1, err := b.root.Get(bg, c1.ID)
	// The sim driver's forwarder lives in the node process; this test's
	// crashed node still holds the old port, so the address may change.
	if err != nil || !g1.Deadline.Equal(c1.Deadline) || g1.AgentAddr == "" || g1.ClaimRef != "ns/one" {
		t.Fatalf("c1 after restart: %+v %v", g1, err)
	}
	if agentHealth(g1.AgentAddr) != http.StatusNoContent {
		t.Fatal("re-adopted agent does not answer")
	}
	g2, err := b.root.Get(bg, c2.ID)
	if err != nil || !g2.Paused || !g2.Deadline.Equal(c2.Deadline) {
		t.Fatalf("c2 after restart: %+v %v", g2, err)
	}
	if err := b.root.Resume(bg, c2.ID); err != nil || agentHealth(g2.AgentAddr) != http.StatusNoContent {
		t.Fatalf("resume after restart: %v", err)
	}
	cks, err := b.root.Snapshots(bg)
	if err != nil || len(cks) != 1 || cks[0].ID != ck.ID {
		t.Fatalf("snapshots after restart: %+v %v", cks, err)
	}
	b.waitWarm(t, "img", 2)
	require.Eventually(t, func() bool {
		info, _ := b.root.Info(bg)
		return len(info.Pools) == 1 && info.Pools[0].Refilling == 0
	}, waitWithin, waitTick)
	b.mu.Lock()
	want := b.tab.vmIDs()
	for _, p := range b.tab.pools {
		for _, h := range p.warm {
			want[h.ID] = true
		}
	}
	b.mu.Unlock()
	live := liveVMs(root)
	for id := range live {
		if !want[id] {
			t.Errorf("orphan agent %s survived the restart", id)
		}
	}
	for _, id := range oldWarm {
		if live[id] {
			t.Errorf("the crashed node's warm VM %s was not destroyed", id)
		}
	}
	if len(live) != len(want) {
		t.Errorf("live agents %v, want %v", live, want)
	}
}
