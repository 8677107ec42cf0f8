package node

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/vmm/vmmtest"
)

// A pause-at-timeout sandbox is paused, not destroyed, when its lease
// ends; it stays paused past its deadline, across a restart, and a resume
// grants it a new lease.
func TestOnTimeoutPause_PausesKeepsAndResumesWithANewLease(t *testing.T) {
	drv := newFakeDriver()
	dir := t.TempDir()
	cfg := Config{Name: "n1", DataDir: dir, Driver: drv, RootToken: testRoot, ReapInterval: 50 * time.Millisecond, RefillInterval: 50 * time.Millisecond,
		Limits: Limits{Default: time.Minute, Max: time.Hour}}
	a := runNode(t, cfg)
	if _, err := a.root.PutPools(bg, pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	a.waitWarm(t, "img", 2)
	sb, err := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", TTLSeconds: 1, Lifecycle: nodeapi.Lifecycle{OnTimeout: nodeapi.OnTimeoutPause, AutoResume: true}})
	if err != nil {
		t.Fatal(err)
	}
	killed, err := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", TTLSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool { got, err := a.root.Get(bg, sb.ID); return err == nil && got.Paused }, waitWithin, waitTick)
	require.Eventually(t, func() bool { _, err := a.root.Get(bg, killed.ID); return nodeapi.StatusOf(err) == 404 }, waitWithin, waitTick)
	time.Sleep(200 * time.Millisecond) // several reaper ticks past the deadline
	a.crash()

	b := runNode(t, cfg)
	got, err := b.root.Get(bg, sb.ID)
	if err != nil || !got.Paused || got.OnTimeout != nodeapi.OnTimeoutPause || !got.AutoResume {
		t.Fatalf("after the timeout and a restart: %+v %v", got, err)
	}
	if err := b.root.Resume(bg, sb.ID); err != nil {
		t.Fatal(err)
	}
	got, err = b.root.Get(bg, sb.ID)
	if err != nil || got.Paused || time.Until(got.Deadline) < 50*time.Second {
		t.Fatalf("a resume past the deadline grants the default lease: %+v %v", got, err)
	}
}

func TestClaim_RejectsAnUnknownOnTimeout(t *testing.T) {
	tn := startNode(t, newFakeDriver(), nil)
	_, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Lifecycle: nodeapi.Lifecycle{OnTimeout: "hibernate"}})
	if nodeapi.StatusOf(err) != 400 {
		t.Fatalf("claim with on_timeout hibernate: %v", err)
	}
}

// A pause without memory stops the VM (its processes end, its disk is
// kept); it stays stopped across a restart, and a resume restores it.
func TestPauseWithoutMemory_StopsAndResumeRestores(t *testing.T) {
	drv := newFakeDriver()
	dir := t.TempDir()
	cfg := Config{Name: "n1", DataDir: dir, Driver: drv, RootToken: testRoot, ReapInterval: 50 * time.Millisecond, RefillInterval: 50 * time.Millisecond}
	a := runNode(t, cfg)
	if _, err := a.root.PutPools(bg, pools("img", 1)); err != nil {
		t.Fatal(err)
	}
	a.waitWarm(t, "img", 1)
	sb, err := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img"})
	if err != nil {
		t.Fatal(err)
	}
	keep := false
	if err := a.root.PauseWith(bg, sb.ID, nodeapi.PauseRequest{Memory: &keep}); err != nil {
		t.Fatal(err)
	}
	rec := func(n *testNode) record {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.tab.byID[sb.ID].rec
	}
	if r := rec(a); !r.Paused || !r.Stopped || r.Handle.PID != 0 {
		t.Fatalf("after a pause without memory: %+v", r)
	}
	if st, err := a.root.Stats(bg, sb.ID); err != nil || !st.Paused {
		t.Fatalf("stats of a stopped sandbox: %+v %v", st, err)
	}
	a.crash()

	b := runNode(t, cfg)
	if r := rec(b); !r.Paused || !r.Stopped || r.Handle.PID != 0 {
		t.Fatalf("a restart must not restart a sandbox paused without memory: %+v", r)
	}
	if err := b.root.Resume(bg, sb.ID); err != nil {
		t.Fatal(err)
	}
	if r := rec(b); r.Paused || r.Stopped || r.Handle.PID != 1 {
		t.Fatalf("after resume: %+v", r)
	}
}

func TestClaimSnapshot_RecordsTheLifecycle_AndAStoppedSandboxIsNotSnapshotted(t *testing.T) {
	tn := startNode(t, newFakeDriver(), nil)
	if _, err := tn.root.PutPools(bg, pools("img", 1)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 1)
	sb, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img"})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tn.root.Snapshot(bg, sb.ID, "s")
	if err != nil {
		t.Fatal(err)
	}
	life := nodeapi.Lifecycle{OnTimeout: nodeapi.OnTimeoutPause, AutoResume: true}
	child, err := tn.root.ClaimSnapshotAs(bg, snap.ID, nodeapi.SnapshotClaimRequest{Lifecycle: life})
	if err != nil || child.Lifecycle != life {
		t.Fatalf("snapshot claim: %+v %v", child, err)
	}
	if got, err := tn.root.Get(bg, child.ID); err != nil || got.Lifecycle != life {
		t.Fatalf("lookup after a snapshot claim: %+v %v", got, err)
	}
	keep := false
	if err := tn.root.PauseWith(bg, sb.ID, nodeapi.PauseRequest{Memory: &keep}); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.root.Snapshot(bg, sb.ID, "t"); nodeapi.StatusOf(err) != 409 {
		t.Fatalf("snapshot of a sandbox paused without memory: %v", err)
	}
}

// initRecorder is a fake agent that records the env of every POST /init.
type initRecorder struct {
	mu   sync.Mutex
	envs []map[string]string
}

func (ir *initRecorder) start(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/init" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		var req struct {
			EnvVars map[string]string `json:"envVars"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ir.mu.Lock()
		ir.envs = append(ir.envs, req.EnvVars)
		ir.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

func (ir *initRecorder) calls() []map[string]string {
	ir.mu.Lock()
	defer ir.mu.Unlock()
	return append([]map[string]string(nil), ir.envs...)
}

// A claim's env vars are recorded with it, so a resume after a pause
// without memory (whose VM restarts with a new agent), even on a
// restarted node, gives the new agent the env again.
func TestPauseWithoutMemory_ResumeReappliesTheClaimsEnv(t *testing.T) {
	var agent initRecorder
	drv := vmmtest.New(vmmtest.Options{Name: "fake", Addr: agent.start(t)})
	cfg := Config{Name: "n1", DataDir: t.TempDir(), Driver: drv, RootToken: testRoot, ReapInterval: 50 * time.Millisecond, RefillInterval: 50 * time.Millisecond}
	a := runNode(t, cfg)
	if _, err := a.root.PutPools(bg, pools("img", 1)); err != nil {
		t.Fatal(err)
	}
	a.waitWarm(t, "img", 1)
	env := map[string]string{"FOO": "bar", "TOKEN": "x=y"}
	sb, err := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Env: env})
	if err != nil {
		t.Fatal(err)
	}
	if got := agent.calls(); len(got) != 1 || !reflect.DeepEqual(got[0], env) {
		t.Fatalf("/init at claim: %v", got)
	}
	keep := false
	if err := a.root.PauseWith(bg, sb.ID, nodeapi.PauseRequest{Memory: &keep}); err != nil {
		t.Fatal(err)
	}
	a.crash()

	b := runNode(t, cfg)
	if err := b.root.Resume(bg, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := agent.calls(); len(got) != 2 || !reflect.DeepEqual(got[1], env) {
		t.Fatalf("/init after the resume: %v; want the claim's env again", got)
	}
	// A pause with memory keeps the agent: nothing to apply.
	if err := b.root.Pause(bg, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := b.root.Resume(bg, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := agent.calls(); len(got) != 2 {
		t.Fatalf("/init calls after a pause with memory: %v", got)
	}
	if s, err := b.root.Get(bg, sb.ID); err != nil || strings.Contains(fmt.Sprint(s), "x=y") {
		t.Fatalf("the sandbox as served: %+v %v (env must not be served)", s, err)
	}
}
