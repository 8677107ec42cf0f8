package node

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hearthvm/hearth/agent"
	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/internal/testagent"
	"github.com/hearthvm/hearth/internal/testnet"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/sim"
	"github.com/hearthvm/hearth/vmm/vmmtest"

	"github.com/stretchr/testify/require"
)

// slowEnforcer is an in-memory driver that enforces policies (and checks
// them: domain rules are vmm.ErrUnsupported) whose SetEgress waits, while
// gated, until released, and fails while failing is set. Its VMs share
// one real agent (package agent), started held.
type slowEnforcer struct {
	*vmmtest.Driver
	mu       sync.Mutex
	gate     chan struct{} // non-nil: SetEgress waits for it to close
	failing  atomic.Bool
	entered  atomic.Int32 // SetEgress calls begun
	enforced atomic.Int32 // SetEgress calls that succeeded
	cloned   []vmm.Spec   // each Clone's spec (under mu)
}

func (d *slowEnforcer) Clone(ctx context.Context, dir string, spec vmm.Spec) (vmm.Handle, error) {
	d.mu.Lock()
	d.cloned = append(d.cloned, spec)
	d.mu.Unlock()
	return d.Driver.Clone(ctx, dir, spec)
}

var errEnforce = errors.New("slowEnforcer: injected SetEgress failure")

func (d *slowEnforcer) CheckEgress(p *egress.Policy) error {
	for _, r := range p.Rules {
		if r.Domain != "" {
			return vmm.ErrUnsupported
		}
	}
	return nil
}

func (d *slowEnforcer) SetEgress(ctx context.Context, _ vmm.Handle, _ *egress.Policy) error {
	d.entered.Add(1)
	d.mu.Lock()
	g := d.gate
	d.mu.Unlock()
	if g != nil {
		select {
		case <-g:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if d.failing.Load() {
		return errEnforce
	}
	d.enforced.Add(1)
	return nil
}

func (d *slowEnforcer) hold() {
	d.mu.Lock()
	d.gate = make(chan struct{})
	d.mu.Unlock()
}

func (d *slowEnforcer) release() {
	d.mu.Lock()
	if d.gate != nil {
		close(d.gate)
		d.gate = nil
	}
	d.mu.Unlock()
}

// heldAgent serves a real agent started held and counts the node's opens;
// an open that arrives before the driver enforced a policy is an error.
type heldAgent struct {
	addr   string
	opens  atomic.Int32
	before atomic.Int32 // opens before any SetEgress succeeded
}

func startHeldAgent(t *testing.T, d *slowEnforcer) *heldAgent {
	t.Helper()
	ha := &heldAgent{}
	h := agent.NewHandler(agent.Options{Hold: true, Root: t.TempDir()})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == agentapi.OpenPath {
			ha.opens.Add(1)
			if d.enforced.Load() == 0 {
				ha.before.Add(1)
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	ha.addr = strings.TrimPrefix(srv.URL, "http://")
	return ha
}

// tenant makes one request of the sandbox to the agent (a file system
// Stat) and returns its status.
func (ha *heldAgent) tenant() (int, error) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+ha.addr+"/filesystem.Filesystem/Stat", strings.NewReader(`{"path":"/"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func denyAll() *egress.Policy {
	return &egress.Policy{Otherwise: egress.Deny, Rules: []egress.Rule{{Action: egress.Allow, CIDR: "198.18.0.10"}}}
}

// heldNode runs a node over a slowEnforcer whose VMs' agent is ha, with
// one warm VM of the egress lane.
func heldNode(t *testing.T, dataDir string) (*testNode, *slowEnforcer, *heldAgent) {
	t.Helper()
	d := &slowEnforcer{}
	ha := startHeldAgent(t, d)
	d.Driver = vmmtest.New(vmmtest.Options{Name: "fake", Addr: ha.addr})
	tn := runNode(t, Config{Name: "n1", DataDir: dataDir, Driver: d, RootToken: testRoot,
		MaxBootConcurrency: 4, ReapInterval: 50 * time.Millisecond, RefillInterval: 50 * time.Millisecond})
	if _, err := tn.root.PutPools(bg, []nodeapi.PoolSpec{{Template: "img", Net: "egress", Warm: 1}}); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 1)
	return tn, d, ha
}

// TestClaim_HeldVMIsAnsweredBeforeItsPolicyIsInAndServesOnlyAfter: on a
// lane whose VMs boot held, a claim with a policy is answered while the
// driver's SetEgress still runs; the sandbox's first request waits at its
// agent until the policy is in and the node opened the agent — never
// before — and the sandbox's other operations wait for it too.
func TestClaim_HeldVMIsAnsweredBeforeItsPolicyIsInAndServesOnlyAfter(t *testing.T) {
	tn, d, ha := heldNode(t, t.TempDir())
	d.hold()
	defer d.release()
	sb, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Net: "egress", Egress: denyAll(), Env: map[string]string{"A": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if d.enforced.Load() != 0 {
		t.Fatal("SetEgress finished before the claim was answered: the test proves nothing")
	}
	require.Eventually(t, func() bool { return d.entered.Load() == 1 }, waitWithin, waitTick, "SetEgress to begin")
	answered := make(chan int, 1)
	go func() {
		code, _ := ha.tenant()
		answered <- code
	}()
	renewed := make(chan error, 1)
	go func() {
		_, err := tn.root.Renew(bg, sb.ID, 600)
		renewed <- err
	}()
	select {
	case code := <-answered:
		t.Fatalf("the sandbox's request was answered (%d) while its policy was being enforced", code)
	case err := <-renewed:
		t.Fatalf("a renew ran (%v) while the claim's policy was being enforced", err)
	case <-time.After(300 * time.Millisecond): // a negative check: nothing may happen meanwhile
	}
	d.release()
	select {
	case code := <-answered:
		if code != http.StatusOK {
			t.Fatalf("the held request, once the sandbox was opened: %d, want 200", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the held request was never let through")
	}
	if err := <-renewed; err != nil {
		t.Fatalf("renew after the opening: %v", err)
	}
	if ha.opens.Load() != 1 || ha.before.Load() != 0 {
		t.Fatalf("opens %d (%d before the policy was in), want 1 after it", ha.opens.Load(), ha.before.Load())
	}
	if _, err := tn.root.Get(bg, sb.ID); err != nil {
		t.Fatalf("the opened sandbox: %v", err)
	}
	// What the driver would refuse is still refused before the answer.
	tn.waitWarm(t, "img", 1)
	dom := &egress.Policy{Otherwise: egress.Deny, Rules: []egress.Rule{{Action: egress.Allow, Domain: "example.com"}}}
	if _, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Net: "egress", Egress: dom}); nodeapi.StatusOf(err) != http.StatusConflict {
		t.Fatalf("a policy the driver cannot enforce: %v, want 409", err)
	}
}

// TestClaim_HeldVMWhosePolicyFailsAfterTheAnswerIsRemoved: when the
// driver's SetEgress fails after the claim was answered, the sandbox is
// removed as a failed claim is (404, its VM destroyed) and its agent is
// never opened.
func TestClaim_HeldVMWhosePolicyFailsAfterTheAnswerIsRemoved(t *testing.T) {
	tn, d, ha := heldNode(t, t.TempDir())
	d.failing.Store(true)
	destroyed := d.Destroys.Load()
	sb, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Net: "egress", Egress: denyAll()})
	if err != nil {
		t.Fatalf("the claim is answered before SetEgress runs: %v", err)
	}
	require.Eventually(t, func() bool {
		_, err := tn.root.Get(bg, sb.ID)
		return nodeapi.StatusOf(err) == http.StatusNotFound
	}, waitWithin, waitTick, "the sandbox to be removed")
	require.Eventually(t, func() bool { return d.Destroys.Load() > destroyed }, waitWithin, waitTick, "its VM to be destroyed")
	if ha.opens.Load() != 0 {
		t.Fatal("the agent of a sandbox whose policy failed was opened")
	}
}

// TestClaim_HeldVMClaimedJustBeforeTheNodeDiedIsOpenedByTheNextStart: a
// node that dies between a held claim's answer and its opening leaves the
// record; the next start enforces the policy and opens the agent — or,
// when the policy fails then, removes the sandbox — never serving it
// without its policy.
func TestClaim_HeldVMClaimedJustBeforeTheNodeDiedIsOpenedByTheNextStart(t *testing.T) {
	for _, fails := range []bool{false, true} {
		name := map[bool]string{false: "opened", true: "removed"}[fails]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			tn, d, ha := heldNode(t, filepath.Join(dir, "data"))
			d.hold()
			sb, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Net: "egress", Egress: denyAll()})
			if err != nil {
				t.Fatal(err)
			}
			require.Eventually(t, func() bool { return d.entered.Load() == 1 }, waitWithin, waitTick, "SetEgress to begin")
			tn.crash() // its SetEgress ends with the node's context, unfinished
			if d.enforced.Load() != 0 || ha.opens.Load() != 0 {
				t.Fatal("the claim was opened before the crash: the test proves nothing")
			}
			d.release()
			d.failing.Store(fails)
			tn2 := runNode(t, Config{Name: "n1", DataDir: filepath.Join(dir, "data"), Driver: d, RootToken: testRoot,
				ReapInterval: 50 * time.Millisecond, RefillInterval: 50 * time.Millisecond})
			_, err = tn2.root.Get(bg, sb.ID)
			if fails {
				if nodeapi.StatusOf(err) != http.StatusNotFound {
					t.Fatalf("a sandbox whose policy failed at the restart: %v, want 404", err)
				}
				if ha.opens.Load() != 0 {
					t.Fatal("its agent was opened")
				}
				return
			}
			if err != nil {
				t.Fatalf("the restarted node lost the sandbox: %v", err)
			}
			if d.enforced.Load() != 1 || ha.opens.Load() != 1 || ha.before.Load() != 0 {
				t.Fatalf("enforced %d, opened %d (%d before), want the policy then the opening", d.enforced.Load(), ha.opens.Load(), ha.before.Load())
			}
			if code, err := ha.tenant(); err != nil || code != http.StatusOK {
				t.Fatalf("the sandbox after the restart: %d %v", code, err)
			}
		})
	}
}

// lateSim is the sim driver whose filter commits come late (after
// commitDelay): the tail of a slow nf_tables commit, made long enough that
// a process of the sandbox started meanwhile would connect first.
type lateSim struct{ *sim.Driver }

// Long beside a claim (its fdatasync included, under -race on a loaded
// machine), which the test requires to answer before it.
const commitDelay = 1500 * time.Millisecond

func (d lateSim) SetEgress(ctx context.Context, h vmm.Handle, p *egress.Policy) error {
	select {
	case <-time.After(commitDelay): // the injected latency, not a synchronization
	case <-ctx.Done():
		return ctx.Err()
	}
	return d.Driver.SetEgress(ctx, h, p)
}

// TestNode_Sim_HeldClaimsFirstProcessCannotReachADeniedAddress: on the
// sim driver (its VMs of the egress lane boot held), the first process a
// client starts the moment its claim is answered already runs under the
// claim's policy, however late the filter's commit — claim after claim: a
// denied address of the test network is unreachable, an allowed one
// answers.
func TestNode_Sim_HeldClaimsFirstProcessCannotReachADeniedAddress(t *testing.T) {
	net := testnet.Start(t,
		testnet.Host{Addr: "198.18.0.10", Names: []string{"allowed.test"}},
		testnet.Host{Addr: "198.18.0.20", Names: []string{"denied.test"}},
	)
	base := t.TempDir()
	root := filepath.Join(base, "vms")
	d := newSimOn(t, root, net.UplinkPath)
	tn := runNode(t, Config{Name: "n1", DataDir: filepath.Join(base, "data"), RootToken: testRoot, Driver: lateSim{d},
		ReapInterval: 50 * time.Millisecond, RefillInterval: 50 * time.Millisecond})
	if _, err := tn.root.PutPools(bg, []nodeapi.PoolSpec{{Template: "img", Net: "egress", Warm: 2}}); err != nil {
		t.Fatal(err)
	}
	pol := &egress.Policy{Otherwise: egress.Allow, Rules: []egress.Rule{{Action: egress.Deny, CIDR: "198.18.0.20"}}}
	probe := func(addr string) string {
		return "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 " + addr + " 80 2>&1; echo"
	}
	for i := range 3 {
		tn.waitWarm(t, "img", 2)
		t0 := time.Now()
		sb, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Net: "egress", Egress: pol})
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(t0) >= commitDelay {
			t.Fatalf("claim %d waited for the filter's commit (%v)", i, time.Since(t0))
		}
		r := testagent.Run(t, sb.AgentAddr, sb.Token, "root", probe("198.18.0.20")+"; echo ---; "+probe("198.18.0.10"))
		denied, allowed, _ := strings.Cut(r.Stdout, "---")
		if strings.Contains(denied, "hello from") {
			t.Fatalf("claim %d: the first process reached the denied address: %q", i, r.Stdout)
		}
		if !strings.Contains(allowed, "hello from") {
			t.Fatalf("claim %d: the allowed address is unreachable (the test network is broken?): %q", i, r.Stdout)
		}
	}
}

// TestResume_AHeldVMWhosePolicyFailsAfterARestartStaysPausedForARetry: a
// resume of a pause without memory boots the VM again, held; when its
// policy then fails, the resume fails and the sandbox is stopped again and
// paused — not left running held, which a second resume (the record says
// resumed) would never open — and a retry boots, enforces and opens it.
func TestResume_AHeldVMWhosePolicyFailsAfterARestartStaysPausedForARetry(t *testing.T) {
	tn, d, ha := heldNode(t, t.TempDir())
	sb, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Net: "egress", Egress: denyAll()})
	if err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool { return ha.opens.Load() == 1 }, waitWithin, waitTick, "the claim's opening")
	noMemory := false
	if err := tn.root.PauseWith(bg, sb.ID, nodeapi.PauseRequest{Memory: &noMemory}); err != nil {
		t.Fatal(err)
	}
	d.failing.Store(true)
	if err := tn.root.Resume(bg, sb.ID); err == nil {
		t.Fatal("a resume whose policy failed succeeded")
	}
	got, err := tn.root.Get(bg, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Paused {
		t.Fatalf("after a failed resume the sandbox is %+v, want paused for a retry", got)
	}
	if ha.opens.Load() != 1 {
		t.Fatal("the agent was opened although its policy failed")
	}
	d.failing.Store(false)
	if err := tn.root.Resume(bg, sb.ID); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if got, _ := tn.root.Get(bg, sb.ID); got.Paused || ha.opens.Load() != 2 {
		t.Fatalf("after the retry: paused %v, opens %d; want running, opened again", got.Paused, ha.opens.Load())
	}
}

// TestFork_ClonesStartUnderTheSandboxsOwnPolicy: a fork's children are
// cloned with their parent's claim policy for the driver to install before
// the guest runs (vmm.Spec.ClaimEgress), beside — not instead of — their
// pool's (Spec.Egress: both hold) — a clone of a running VM's checkpoint
// (qemu) resumes open, with the tenant's processes running, so until
// SetEgress they would be held to the pool's policy alone (allow-all on
// e2b's egress lane).
func TestFork_ClonesStartUnderTheSandboxsOwnPolicy(t *testing.T) {
	tn, d, ha := heldNode(t, t.TempDir())
	sb, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Net: "egress", Egress: denyAll()})
	if err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool { return ha.opens.Load() == 1 }, waitWithin, waitTick, "the claim's opening")
	kids, err := tn.root.Fork(bg, sb.ID, nodeapi.ForkRequest{Count: 2})
	if err != nil || len(kids) != 2 {
		t.Fatalf("fork: %v %v", kids, err)
	}
	// The pool's own refills are clones too: with no claim policy.
	d.mu.Lock()
	var children []vmm.Spec
	for _, s := range d.cloned {
		if s.ClaimEgress != nil {
			children = append(children, s)
		}
	}
	d.mu.Unlock()
	if len(children) != 2 {
		t.Fatalf("%d clones carried a claim policy, want the 2 children", len(children))
	}
	for i, s := range children {
		if !reflect.DeepEqual(s.ClaimEgress, denyAll()) || s.Egress != nil {
			t.Fatalf("clone %d: claim policy %+v, pool policy %+v; want the parent's claim policy and the pool's (none)", i, s.ClaimEgress, s.Egress)
		}
	}
}
