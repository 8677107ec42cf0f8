package node

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/vmmtest"
)

func TestPlanEvictions(t *testing.T) {
	ok := func(id string) warmProbe { return warmProbe{ID: id, OK: true} }
	fail := func(id string) warmProbe { return warmProbe{ID: id} }
	gone := func(id string) warmProbe { return warmProbe{ID: id, Gone: true} }
	set := func(ids ...string) map[string]bool {
		m := map[string]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return m
	}
	for _, tc := range []struct {
		name      string
		probes    []warmProbe
		warm      map[string]bool
		strikes   map[string]int
		evict     []string
		nextStrks map[string]int
	}{
		{name: "no warm VMs", warm: set(), strikes: map[string]int{"a": 1}, nextStrks: map[string]int{}},
		{name: "all healthy", probes: []warmProbe{ok("a"), ok("b")}, warm: set("a", "b"), nextStrks: map[string]int{}},
		{name: "first failure is a strike", probes: []warmProbe{fail("a"), ok("b")}, warm: set("a", "b"),
			nextStrks: map[string]int{"a": 1}},
		{name: "second failure in a row evicts", probes: []warmProbe{fail("a"), ok("b")}, warm: set("a", "b"),
			strikes: map[string]int{"a": 1}, evict: []string{"a"}, nextStrks: map[string]int{}},
		{name: "a success clears the strike", probes: []warmProbe{ok("a")}, warm: set("a"),
			strikes: map[string]int{"a": 1}, nextStrks: map[string]int{}},
		{name: "gone evicts at once", probes: []warmProbe{gone("a"), fail("b")}, warm: set("a", "b"),
			evict: []string{"a"}, nextStrks: map[string]int{"b": 1}},
		{name: "claimed meanwhile is left alone", probes: []warmProbe{gone("a"), fail("b")}, warm: set("c"),
			strikes: map[string]int{"b": 1}, nextStrks: map[string]int{}},
		{name: "strikes of VMs not probed are dropped", probes: []warmProbe{ok("a")}, warm: set("a", "new"),
			strikes: map[string]int{"old": 1, "new": 1}, nextStrks: map[string]int{}},
		{name: "evictions in probe order", probes: []warmProbe{fail("z"), gone("m"), fail("a"), fail("q")},
			warm: set("a", "m", "q", "z"), strikes: map[string]int{"z": 1, "a": 3},
			evict: []string{"z", "m", "a"}, nextStrks: map[string]int{"q": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evict, next := planEvictions(tc.probes, tc.warm, tc.strikes)
			if !reflect.DeepEqual(evict, tc.evict) {
				t.Errorf("evict = %v, want %v", evict, tc.evict)
			}
			if !reflect.DeepEqual(next, tc.nextStrks) {
				t.Errorf("strikes = %v, want %v", next, tc.nextStrks)
			}
		})
	}
}

// A warm agent that dies is evicted by the health sweep, destroyed and
// replaced; claims then deliver only live agents.
func TestNode_Sim_EvictsDeadWarmVM(t *testing.T) {
	root := filepath.Join(t.TempDir(), "vms")
	drv := newSim(t, root)
	tn := startNode(t, drv, func(c *Config) { c.WarmCheckInterval = 50 * time.Millisecond })
	if _, err := tn.root.PutPools(bg, pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 2)

	warmIDs := func() map[string]vmm.Handle {
		tn.mu.Lock()
		defer tn.mu.Unlock()
		out := map[string]vmm.Handle{}
		for _, p := range tn.tab.pools {
			for _, h := range p.warm {
				out[h.ID] = h
			}
		}
		return out
	}
	before := warmIDs()
	var dead, alive vmm.Handle
	for _, h := range before {
		if dead.ID == "" {
			dead = h
		} else {
			alive = h
		}
	}
	if dead.PID <= 0 || alive.ID == "" {
		t.Fatalf("warm handles %+v", before)
	}
	if err := syscall.Kill(-dead.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	evictions := func() string {
		_, body := rawDo(t, "GET", tn.srv.URL+"/metrics", "", "")
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "hearth_node_warm_evictions_total ") {
				return strings.TrimPrefix(l, "hearth_node_warm_evictions_total ")
			}
		}
		return ""
	}
	require.Eventually(t, func() bool { return evictions() == "1" }, waitWithin, waitTick)
	require.Eventually(t, func() bool {
		w := warmIDs()
		_, stale := w[dead.ID]
		return !stale && len(w) == 2
	}, waitWithin, waitTick)
	require.Eventually(t, func() bool { _, err := os.Stat(dead.Dir); return os.IsNotExist(err) }, waitWithin, waitTick)
	if _, ok := warmIDs()[alive.ID]; !ok {
		t.Fatalf("the healthy warm VM %s was evicted too", alive.ID)
	}

	for i := 0; i < 2; i++ {
		res, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img"})
		if err != nil {
			t.Fatal(err)
		}
		if res.AgentAddr == dead.Addr {
			t.Fatalf("claim %d delivered the dead VM's address %s", i, dead.Addr)
		}
		if code := agentHealth(res.AgentAddr); code != http.StatusNoContent {
			t.Fatalf("claim %d delivered an agent answering %d", i, code)
		}
	}
	if got := evictions(); got != "1" {
		t.Fatalf("evictions = %s, want 1", got)
	}
}

func TestPlanRestores(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := func(id string, pid int) vmm.Handle {
		return vmm.Handle{ID: "vm-" + id, Dir: "/r/vm-" + id, PID: pid, Addr: fmt.Sprintf("127.0.0.1:%d", 1000+pid)}
	}
	ok := func(id string) claimProbe { return claimProbe{ID: id, Handle: h(id, 1), OK: true} }
	fail := func(id string) claimProbe { return claimProbe{ID: id, Handle: h(id, 1)} }
	gone := func(id string) claimProbe { return claimProbe{ID: id, Handle: h(id, 1), Gone: true} }
	live := func(ids ...string) map[string]vmm.Handle {
		m := map[string]vmm.Handle{}
		for _, id := range ids {
			m[id] = h(id, 1)
		}
		return m
	}
	woken := live("a")
	woken["a"] = h("a", 2) // paused and resumed (or restored) since the probe
	for _, tc := range []struct {
		name    string
		probes  []claimProbe
		live    map[string]vmm.Handle
		state   map[string]claimHealth
		restore []string
		next    map[string]claimHealth
	}{
		{name: "nothing claimed", live: live(), state: map[string]claimHealth{"a": {Strikes: 1}}, next: map[string]claimHealth{}},
		{name: "all healthy", probes: []claimProbe{ok("a"), ok("b")}, live: live("a", "b"), next: map[string]claimHealth{}},
		{name: "first failure is a strike", probes: []claimProbe{fail("a"), ok("b")}, live: live("a", "b"),
			next: map[string]claimHealth{"a": {Strikes: 1}}},
		{name: "second failure in a row restores", probes: []claimProbe{fail("a")}, live: live("a"),
			state: map[string]claimHealth{"a": {Strikes: 1}}, restore: []string{"a"},
			next: map[string]claimHealth{"a": {Strikes: 2}}},
		{name: "gone restores at once", probes: []claimProbe{gone("a"), fail("b")}, live: live("a", "b"),
			restore: []string{"a"}, next: map[string]claimHealth{"a": {Strikes: 1}, "b": {Strikes: 1}}},
		{name: "a success clears strikes and backoff", probes: []claimProbe{ok("a")}, live: live("a"),
			state: map[string]claimHealth{"a": {Strikes: 4, Failures: 2, RetryAt: now.Add(time.Minute)}}, next: map[string]claimHealth{}},
		{name: "released meanwhile is left alone", probes: []claimProbe{gone("a")}, live: live("b"),
			state: map[string]claimHealth{"a": {Strikes: 1}}, next: map[string]claimHealth{}},
		{name: "paused meanwhile is left alone", probes: []claimProbe{gone("a")}, live: live(),
			next: map[string]claimHealth{}},
		{name: "handle changed since the probe is left alone", probes: []claimProbe{gone("a")}, live: woken,
			state: map[string]claimHealth{"a": {Strikes: 1}}, next: map[string]claimHealth{}},
		{name: "failed restore waits for its backoff", probes: []claimProbe{gone("a")}, live: live("a"),
			state: map[string]claimHealth{"a": {Strikes: 3, Failures: 1, RetryAt: now.Add(time.Second)}},
			next:  map[string]claimHealth{"a": {Strikes: 4, Failures: 1, RetryAt: now.Add(time.Second)}}},
		{name: "failed restore retried once its backoff passed", probes: []claimProbe{fail("a")}, live: live("a"),
			state: map[string]claimHealth{"a": {Strikes: 3, Failures: 1, RetryAt: now}}, restore: []string{"a"},
			next: map[string]claimHealth{"a": {Strikes: 4, Failures: 1, RetryAt: now}}},
		{name: "state of sandboxes not probed is dropped", probes: []claimProbe{ok("a")}, live: live("a", "new"),
			state: map[string]claimHealth{"old": {Strikes: 1}, "new": {Strikes: 1, Failures: 1}}, next: map[string]claimHealth{}},
		{name: "restores in probe order", probes: []claimProbe{fail("z"), gone("m"), fail("a"), fail("q")},
			live: live("a", "m", "q", "z"), state: map[string]claimHealth{"z": {Strikes: 1}, "a": {Strikes: 3}},
			restore: []string{"z", "m", "a"},
			next:    map[string]claimHealth{"z": {Strikes: 2}, "m": {Strikes: 1}, "a": {Strikes: 4}, "q": {Strikes: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restore, next := planRestores(tc.probes, tc.live, tc.state, now)
			if !reflect.DeepEqual(restore, tc.restore) {
				t.Errorf("restore = %v, want %v", restore, tc.restore)
			}
			if !reflect.DeepEqual(next, tc.next) {
				t.Errorf("next = %v, want %v", next, tc.next)
			}
		})
	}
}

func TestRestoreBackoff(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{
		{1, restoreBackoffMin}, {2, 2 * restoreBackoffMin}, {3, 4 * restoreBackoffMin},
		{7, restoreBackoffMax}, {1000, restoreBackoffMax},
	} {
		if got := restoreBackoff(tc.failures); got != tc.want {
			t.Errorf("restoreBackoff(%d) = %v, want %v", tc.failures, got, tc.want)
		}
	}
	s := claimHealth{Strikes: 2}
	var waits []time.Duration
	for i := 0; i < 10; i++ {
		s = restoreFailed(s, now)
		waits = append(waits, s.RetryAt.Sub(now))
	}
	if s.Failures != 10 || s.Strikes != 2 {
		t.Fatalf("after 10 failures: %+v", s)
	}
	for i := 1; i < len(waits); i++ {
		if waits[i] < waits[i-1] || waits[i] > restoreBackoffMax {
			t.Fatalf("backoff not monotone and bounded: %v", waits)
		}
	}
}

// A claimed sandbox whose agent dies is restored by the health sweep on the
// same run directory (its files survive) with a new address that answers;
// a paused sandbox is never probed nor restored.
func TestNode_Sim_RestoresDeadClaimedSandbox(t *testing.T) {
	root := filepath.Join(t.TempDir(), "vms")
	drv := newSim(t, root)
	tn := startNode(t, drv, func(c *Config) { c.WarmCheckInterval = 50 * time.Millisecond })
	if _, err := tn.root.PutPools(bg, pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 2)
	c1, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/live", TTLSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/asleep", TTLSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	if err := tn.root.Pause(bg, c2.ID); err != nil {
		t.Fatal(err)
	}
	handle := func(id string) vmm.Handle {
		tn.mu.Lock()
		defer tn.mu.Unlock()
		sb := tn.tab.byID[id]
		if sb == nil {
			t.Fatalf("sandbox %s left the claim table", id)
		}
		return sb.rec.Handle
	}
	h1, h2 := handle(c1.ID), handle(c2.ID)
	if h1.PID <= 0 || h2.PID <= 0 || !h2.Paused {
		t.Fatalf("handles %+v %+v", h1, h2)
	}
	keep := filepath.Join(h1.Dir, "rootfs", "home", "user", "keep.txt")
	if err := os.WriteFile(keep, []byte("still here"), 0o600); err != nil {
		t.Fatal(err)
	}

	restores := func(result string) string {
		_, body := rawDo(t, "GET", tn.srv.URL+"/metrics", "", "")
		prefix := `hearth_node_sandbox_restores_total{result="` + result + `"} `
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, prefix) {
				return strings.TrimPrefix(l, prefix)
			}
		}
		return ""
	}
	if got := restores("ok"); got != "0" {
		t.Fatalf("restores before any death = %q", got)
	}

	// Both agents die; only the running sandbox is brought back.
	for _, h := range []vmm.Handle{h1, h2} {
		if err := syscall.Kill(-h.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	restored := func(want string, old vmm.Handle) vmm.Handle {
		t.Helper()
		var g nodeapi.Sandbox
		require.Eventually(t, func() bool {
			if restores("ok") != want {
				return false
			}
			g, err = tn.root.Get(bg, c1.ID)
			return err == nil && g.AgentAddr != "" && agentHealth(g.AgentAddr) == http.StatusNoContent
		}, waitWithin, waitTick)
		h := handle(c1.ID)
		if h.PID == old.PID || h.Addr != g.AgentAddr || h.ID != old.ID || h.Dir != old.Dir || h.Token != old.Token {
			t.Fatalf("restored handle %+v, was %+v (listed addr %s)", h, old, g.AgentAddr)
		}
		if g.Paused || g.ClaimRef != "ns/live" || !g.Deadline.Equal(c1.Deadline) {
			t.Fatalf("restored sandbox %+v", g)
		}
		b, err := os.ReadFile(keep)
		if err != nil || string(b) != "still here" {
			t.Fatalf("guest file after restore: %q %v", b, err)
		}
		recs, err := tn.store.sandboxes()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.ID == c1.ID && !sameVM(r.Handle, h) {
				t.Fatalf("persisted handle %+v, want %+v", r.Handle, h)
			}
		}
		return h
	}
	h1b := restored("1", h1)
	// Once more: it is restored again, and all along (several sweeps) the
	// paused sandbox was left alone.
	if err := syscall.Kill(-h1b.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	restored("2", h1b)
	if got := restores("failed"); got != "0" {
		t.Fatalf("failed restores = %s", got)
	}
	if got := handle(c2.ID); !sameVM(got, h2) {
		t.Fatalf("the paused sandbox was touched: %+v, was %+v", got, h2)
	}
	if g2, err := tn.root.Get(bg, c2.ID); err != nil || !g2.Paused {
		t.Fatalf("paused sandbox: %+v %v", g2, err)
	}
	if err := tn.root.Release(bg, c1.ID); err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool { _, err := os.Stat(h1.Dir); return os.IsNotExist(err) }, waitWithin, waitTick)
}

// hangingAgent listens and accepts connections but never answers: a hung
// agent. It returns its address.
func hangingAgent(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// Warm VMs whose agents accept the connection but never answer are hung:
// each probe times out, and after warmEvictStrikes sweeps in a row they
// are evicted and replaced. A claimed sandbox's hung agent is not
// restored over a timeout.
func TestSweep_HungWarmAgentsAreEvicted(t *testing.T) {
	drv := vmmtest.New(vmmtest.Options{Name: "fake", Addr: hangingAgent(t)})
	tn := startNode(t, drv, func(c *Config) { c.WarmCheckInterval = time.Hour })
	tn.probeTimeout = 100 * time.Millisecond
	if _, err := tn.root.PutPools(bg, pools("img", 3)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 3)
	sb, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img"})
	if err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 3)
	warmIDs := func() map[string]bool {
		tn.mu.Lock()
		defer tn.mu.Unlock()
		out := map[string]bool{}
		for _, p := range tn.tab.pools {
			for _, h := range p.warm {
				out[h.ID] = true
			}
		}
		return out
	}
	hung := warmIDs()
	strikes := tn.sweepWarm(bg, map[string]int{})
	if len(strikes) != 3 {
		t.Fatalf("strikes after one sweep of 3 hung agents: %v", strikes)
	}
	if strikes = tn.sweepWarm(bg, strikes); len(strikes) != 0 {
		t.Fatalf("strikes after the second sweep: %v", strikes)
	}
	_, body := rawDo(t, "GET", tn.srv.URL+"/metrics", "", "")
	if !strings.Contains(body, "hearth_node_warm_evictions_total 3") || !strings.Contains(body, "hearth_node_health_probe_errors_total 0") {
		t.Fatalf("metrics: want 3 evictions and no probe errors:\n%s", grepLines(body, "hearth_node_warm_evictions_total", "hearth_node_health_probe_errors_total"))
	}
	require.Eventually(t, func() bool {
		w := warmIDs()
		for id := range hung {
			if w[id] {
				return false
			}
		}
		return len(w) == 3
	}, waitWithin, waitTick)
	for range 3 {
		if claimed := tn.sweepClaimed(bg, map[string]claimHealth{}); len(claimed) != 0 {
			t.Fatalf("a hung claimed agent counted against its sandbox: %v", claimed)
		}
	}
	if got, err := tn.root.Get(bg, sb.ID); err != nil || got.AgentAddr != sb.AgentAddr {
		t.Fatalf("the claimed sandbox: %+v %v", got, err)
	}
}

// Every request the API answers is counted by route and status, so an
// operator (and the attack suite) can see what a caller's traffic costs
// the node: an unauthenticated sandbox lookup is one 401 on its route.
func TestMetrics_CountRequestsByRouteAndCode(t *testing.T) {
	tn := startNode(t, newFakeDriver(), nil)
	for range 3 {
		rawDo(t, "GET", tn.srv.URL+"/v1/sandboxes/sb_nope", "", "")
	}
	rawDo(t, "GET", tn.srv.URL+"/healthz", "", "")
	_, body := rawDo(t, "GET", tn.srv.URL+"/metrics", "", "")
	for _, want := range []string{
		`hearth_node_http_requests_total{code="401",route="GET /v1/sandboxes/{id}"} 3`,
		`hearth_node_http_requests_total{code="200",route="GET /healthz"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Fatalf("metrics lack %s:\n%s", want, grepLines(body, "hearth_node_http_requests_total"))
		}
	}
}

// stallingOOM is an in-memory driver whose OOM count (vmm.OOMCounter) is
// a guest that never answers: each call waits until its context ends.
type stallingOOM struct {
	*vmmtest.Driver
	asked atomic.Int32
}

func (d *stallingOOM) OOMKills(ctx context.Context, _ vmm.Handle) (uint64, error) {
	d.asked.Add(1)
	<-ctx.Done()
	return 0, ctx.Err()
}

// TestSweep_AGuestThatStallsItsOOMCountDelaysNoHealthProbe: the OOM count
// is the guest's answer (qemu asks its agent); a guest that never gives it
// must not hold up the health sweep that probes every other VM on the node
// and restores the claimed ones whose agent died — the OOM sweep is a loop
// of its own. (It was the sweep's last step: while a guest stalled, no VM
// on the node was probed.)
func TestSweep_AGuestThatStallsItsOOMCountDelaysNoHealthProbe(t *testing.T) {
	var probes atomic.Int64
	ag := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			probes.Add(1)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer ag.Close()
	d := &stallingOOM{Driver: vmmtest.New(vmmtest.Options{Addr: strings.TrimPrefix(ag.URL, "http://")})}
	tn := runNode(t, Config{Name: "n1", DataDir: t.TempDir(), Driver: d, RootToken: testRoot, WarmCheckInterval: 20 * time.Millisecond})
	if _, err := tn.root.PutPools(bg, []nodeapi.PoolSpec{{Template: "img", Net: "none", Warm: 1}}); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 1)
	if _, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img"}); err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool { return d.asked.Load() > 0 }, waitWithin, waitTick, "the OOM sweep to ask the guest")
	before := probes.Load()
	require.Eventually(t, func() bool { return probes.Load() >= before+10 }, waitWithin, waitTick,
		"the health sweep to go on probing while a guest's OOM count stalls")
}
