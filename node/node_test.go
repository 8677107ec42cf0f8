package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
)

var bg = context.Background()

func pools(template string, warm int32) []nodeapi.PoolSpec {
	return []nodeapi.PoolSpec{{Template: template, Warm: warm}}
}

// Under -race: 1000 concurrent claims against a pool of 200 deliver exactly
// 200 sandboxes, no id (or VM, or token) twice, and 800 clean 429s.
func TestClaim_ConcurrentClaimsDeliverEachWarmVMOnce(t *testing.T) {
	drv := newFakeDriver()
	tn := startNode(t, drv, func(c *Config) { c.MaxBootConcurrency = 16 })
	if _, err := tn.root.PutPools(bg, pools("img", 200)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 200)
	drv.HoldClones() // no refill while claiming
	defer drv.ReleaseClones()

	const claims = 1000
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		ids       = map[string]bool{}
		tokens    = map[string]bool{}
		noCap     atomic.Int32
		otherErrs []error
	)
	start := make(chan struct{})
	for i := 0; i < claims; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: fmt.Sprintf("ns/s%d", i)})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				if ids[res.ID] || tokens[res.Token] {
					t.Errorf("delivered twice: %+v", res)
				}
				ids[res.ID], tokens[res.Token] = true, true
			case errors.Is(err, nodeapi.ErrNoCapacity):
				noCap.Add(1)
			default:
				otherErrs = append(otherErrs, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(otherErrs) > 0 {
		t.Fatalf("%d unexpected errors, first: %v", len(otherErrs), otherErrs[0])
	}
	if len(ids) != 200 || noCap.Load() != claims-200 {
		t.Fatalf("delivered %d, 429s %d; want 200 and %d", len(ids), noCap.Load(), claims-200)
	}
	list, err := tn.root.List(bg)
	if err != nil || len(list) != 200 {
		t.Fatalf("list: %d %v", len(list), err)
	}
	vms := map[string]bool{}
	tn.mu.Lock()
	for _, sb := range tn.tab.byID {
		if vms[sb.rec.Handle.ID] {
			t.Errorf("VM %s handed out twice", sb.rec.Handle.ID)
		}
		vms[sb.rec.Handle.ID] = true
	}
	tn.mu.Unlock()
}

func TestClaim_NeverBootsAndAnswers429(t *testing.T) {
	drv := newFakeDriver()
	tn := startNode(t, drv, nil)
	_, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img"})
	if nodeapi.StatusOf(err) != http.StatusTooManyRequests || !errors.Is(err, nodeapi.ErrNoCapacity) {
		t.Fatalf("claim on an empty node: %v", err)
	}
	if drv.Boots.Load()+drv.Clones.Load() != 0 {
		t.Fatal("a claim booted a VM")
	}
}

func rawDo(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestAuth(t *testing.T) {
	drv := newFakeDriver()
	tn := startNode(t, drv, nil)
	if _, err := tn.root.PutPools(bg, pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 2)
	drv.HoldClones()
	defer drv.ReleaseClones()
	a, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/b"})
	if err != nil {
		t.Fatal(err)
	}
	u := tn.srv.URL
	cases := []struct {
		name, method, path, token, body string
		want                            int
	}{
		{"no token", "GET", "/v1/sandboxes/" + a.ID, "", "", 401},
		{"unknown token", "GET", "/v1/sandboxes/" + a.ID, "nope", "", 401},
		{"unknown token release", "POST", "/v1/sandboxes/" + a.ID + "/release", "nope", "", 401},
		{"other sandbox's token get", "GET", "/v1/sandboxes/" + a.ID, b.Token, "", 404},
		{"other sandbox's token release", "POST", "/v1/sandboxes/" + a.ID + "/release", b.Token, "", 404},
		{"other sandbox's token pause", "POST", "/v1/sandboxes/" + a.ID + "/pause", b.Token, "", 404},
		{"other sandbox's token renew", "POST", "/v1/sandboxes/" + a.ID + "/renew", b.Token, `{"ttl_seconds":5}`, 404},
		{"own token get", "GET", "/v1/sandboxes/" + a.ID, a.Token, "", 200},
		{"own token stats", "GET", "/v1/sandboxes/" + a.ID + "/stats", a.Token, "", 200},
		{"sandbox token claims", "POST", "/v1/claim", a.Token, `{"template":"img"}`, 403},
		{"sandbox token info", "GET", "/v1/info", a.Token, "", 403},
		{"sandbox token lists", "GET", "/v1/sandboxes", a.Token, "", 403},
		{"sandbox token pools", "PUT", "/v1/pools", a.Token, `{"pools":[]}`, 403},
		{"no token pools", "PUT", "/v1/pools", "", `{"pools":[]}`, 401},
		{"root get", "GET", "/v1/sandboxes/" + a.ID, testRoot, "", 200},
		{"healthz open", "GET", "/healthz", "", "", 200},
		{"metrics open", "GET", "/metrics", "", "", 200},
		{"bad method", "DELETE", "/v1/claim", testRoot, "", 405},
		{"no route", "GET", "/v2/nothing", testRoot, "", 404},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := rawDo(t, tc.method, u+tc.path, tc.token, tc.body)
			if code != tc.want {
				t.Fatalf("%s %s = %d %s, want %d", tc.method, tc.path, code, body, tc.want)
			}
			if code >= 400 {
				var e nodeapi.Error
				if json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
					t.Fatalf("error body is not JSON: %q", body)
				}
			}
		})
	}
	// Nothing the refused calls asked for happened.
	got, err := tn.root.Get(bg, a.ID)
	if err != nil || got.Paused || !got.Deadline.Equal(a.Deadline) {
		t.Fatalf("a after refused calls: %+v %v", got, err)
	}
	if got.Token != a.Token {
		t.Fatal("root read lacks the token")
	}
	own, err := nodeapi.NewClient(u, a.Token).Get(bg, a.ID)
	if err != nil || own.Token != "" {
		t.Fatalf("own-token read: %+v %v", own, err)
	}
	// The sandbox's own token may release it.
	if err := nodeapi.NewClient(u, a.Token).Release(bg, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.root.Get(bg, a.ID); nodeapi.StatusOf(err) != 404 {
		t.Fatalf("released sandbox still there: %v", err)
	}
}

func TestPools_ValidationAndDrain(t *testing.T) {
	drv := newFakeDriver()
	tn := startNode(t, drv, nil)
	for _, body := range []string{
		`{"pools":[{"template":"a","warm":1},{"template":"a","net":"none","warm":2}]}`,
		`{"pools":[{"template":"a","warm":-1}]}`,
		`{"pools":[{"template":"a","net":"wifi","warm":1}]}`,
		`{"pools":`,
	} {
		if code, resp := rawDo(t, "PUT", tn.srv.URL+"/v1/pools", testRoot, body); code != 400 || !strings.Contains(resp, `"error"`) {
			t.Errorf("PUT %s = %d %s", body, code, resp)
		}
	}
	if _, err := tn.root.PutPools(bg, []nodeapi.PoolSpec{{Template: "a", Warm: 3}, {Template: "b", Net: "egress", Size: "medium", Warm: 1}}); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "a", 3)
	tn.waitWarm(t, "b", 1)
	if b, c := drv.Boots.Load(), drv.Clones.Load(); b != 2 || c != 4 {
		t.Fatalf("boots %d clones %d: want one golden boot per pool and clones for the rest", b, c)
	}
	info, _ := tn.root.Info(bg)
	if len(info.Pools) != 2 || info.Pools[1] != (nodeapi.PoolInfo{Template: "b", Net: "egress", Size: "medium", Warm: 1, Target: 1}) {
		t.Fatalf("info pools = %+v", info.Pools)
	}
	// Scale a down, leave b out (drain).
	if _, err := tn.root.PutPools(bg, pools("a", 1)); err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool {
		info, _ := tn.root.Info(bg)
		return len(info.Pools) == 1 && info.Pools[0].Warm == 1 && drv.Len() == 1
	}, waitWithin, waitTick)
	if _, err := tn.root.PutPools(bg, nil); err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool { info, _ := tn.root.Info(bg); return len(info.Pools) == 0 && drv.Len() == 0 }, waitWithin, waitTick)
}

// waitWithin and waitTick are the tests' require.Eventually deadline and
// poll interval.
const (
	waitWithin = 30 * time.Second
	waitTick   = 10 * time.Millisecond
)

func TestForkSnapshotClaim(t *testing.T) {
	drv := newFakeDriver()
	tn := startNode(t, drv, nil)
	if _, err := tn.root.PutPools(bg, pools("img", 1)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 1)
	p, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "team/parent"})
	if err != nil {
		t.Fatal(err)
	}
	kids, err := tn.root.Fork(bg, p.ID, nodeapi.ForkRequest{Count: 3, TTLSeconds: 60})
	if err != nil || len(kids) != 3 {
		t.Fatalf("fork: %v %v", kids, err)
	}
	for i, c := range kids {
		if c.ClaimRef != fmt.Sprintf("team/parent-fork-%d", i+1) || c.ID == p.ID || c.Token == p.Token {
			t.Fatalf("child %+v", c)
		}
		if got, err := tn.root.GetByRef(bg, c.ClaimRef); err != nil || len(got) != 1 || got[0].ID != c.ID {
			t.Fatalf("child by ref: %v %v", got, err)
		}
	}
	if _, err := tn.root.Fork(bg, p.ID, nodeapi.ForkRequest{Count: 17}); nodeapi.StatusOf(err) != 400 {
		t.Fatalf("fork 17: %v", err)
	}

	// All or nothing: one failing clone, nothing recorded or left running.
	before, vmsBefore := len(mustList(t, tn)), drv.Len()
	drv.FailClones(1)
	if _, err := tn.root.Fork(bg, p.ID, nodeapi.ForkRequest{Count: 3}); nodeapi.StatusOf(err) != 500 {
		t.Fatalf("fork with a failing clone: %v", err)
	}
	if got := len(mustList(t, tn)); got != before {
		t.Fatalf("a failed fork recorded children: %d → %d", before, got)
	}
	require.Eventually(t, func() bool { return drv.Len() <= vmsBefore+1 }, waitWithin, waitTick) // +1: the refill of the claimed warm VM

	if err := tn.root.Pause(bg, p.ID); err != nil {
		t.Fatal(err)
	}
	if err := tn.root.Pause(bg, p.ID); err != nil {
		t.Fatalf("pause is not idempotent: %v", err)
	}
	if _, err := tn.root.Fork(bg, p.ID, nodeapi.ForkRequest{}); nodeapi.StatusOf(err) != 409 {
		t.Fatalf("fork of a paused sandbox: %v", err)
	}
	ck1, err := tn.root.Snapshot(bg, p.ID, "first")
	if err != nil || !strings.HasPrefix(ck1.ID, "sn_") || ck1.SandboxID != p.ID || ck1.Name != "first" || ck1.Key.Template != "img" || ck1.Node != "n1" {
		t.Fatalf("snapshot: %+v %v", ck1, err)
	}
	if err := tn.root.Resume(bg, p.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	ck2, err := tn.root.Snapshot(bg, p.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	cks, err := tn.root.Snapshots(bg)
	if err != nil || len(cks) != 2 || cks[0].ID != ck2.ID || cks[1].ID != ck1.ID {
		t.Fatalf("snapshots not newest first: %+v %v", cks, err)
	}
	br, err := tn.root.ClaimSnapshot(bg, ck1.ID, 30)
	if err != nil || br.ClaimRef != "" || br.Template != "img" {
		t.Fatalf("snapshot claim: %+v %v", br, err)
	}
	if got, err := tn.root.Get(bg, br.ID); err != nil || got.ClaimRef != "" {
		t.Fatalf("snapshot claim lookup: %+v %v", got, err)
	}
	if err := tn.root.DeleteSnapshot(bg, ck1.ID); err != nil {
		t.Fatal(err)
	}
	if err := tn.root.DeleteSnapshot(bg, ck1.ID); nodeapi.StatusOf(err) != 404 {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := tn.root.ClaimSnapshot(bg, ck1.ID, 0); nodeapi.StatusOf(err) != 404 {
		t.Fatalf("snapshot claim from a deleted snapshot: %v", err)
	}
	inv := tn.Inventory()
	var names []string
	for _, e := range inv.Entries {
		names = append(names, e.Name)
	}
	if len(inv.Entries) != 5 || inv.Entries[0].Name != "default/"+nodeapi.DNSName(br.ID) {
		t.Fatalf("inventory entries %v", names)
	}
	for i := 1; i < len(names); i++ {
		if names[i-1] > names[i] {
			t.Fatalf("entries not sorted: %v", names)
		}
	}
}

func mustList(t *testing.T, tn *testNode) []nodeapi.Sandbox {
	t.Helper()
	l, err := tn.root.List(bg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestRenewAndReaper(t *testing.T) {
	drv := newFakeDriver()
	tn := startNode(t, drv, func(c *Config) { c.Limits = Limits{Default: time.Minute, Max: time.Hour} })
	if _, err := tn.root.PutPools(bg, pools("img", 3)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 3)
	short, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", TTLSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", TTLSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	dl, err := tn.root.Renew(bg, renewed.ID, 999999)
	if err != nil || !dl.After(renewed.Deadline) || dl.After(time.Now().Add(time.Hour+time.Second)) {
		t.Fatalf("renew: %v %v", dl, err)
	}
	long, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img"})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(long.Deadline); d < 50*time.Second || d > time.Minute {
		t.Fatalf("default lease: %v", d)
	}
	require.Eventually(t, func() bool { _, err := tn.root.Get(bg, short.ID); return nodeapi.StatusOf(err) == 404 }, waitWithin, waitTick)
	if _, err := tn.root.Get(bg, renewed.ID); err != nil {
		t.Fatalf("renewed sandbox was reaped: %v", err)
	}
	if _, err := tn.root.Renew(bg, short.ID, 5); nodeapi.StatusOf(err) != 404 {
		t.Fatalf("renew of a reaped sandbox: %v", err)
	}
	if _, err := tn.root.Renew(bg, renewed.ID, -1); nodeapi.StatusOf(err) != 400 {
		t.Fatalf("negative renew: %v", err)
	}
}

// The inventory is published on its cadence only (changes travel on the
// change stream): a failed publish is retried at the next tick, and the
// next publish after a claim carries it.
func TestPublisher_IntervalRetriesAndCarriesClaims(t *testing.T) {
	drv := newFakeDriver()
	var (
		mu    sync.Mutex
		seen  []*inventory.NodeInventory
		fails atomic.Int32
	)
	fails.Store(1)
	pub := inventory.PublisherFunc(func(ctx context.Context, inv *inventory.NodeInventory) error {
		if fails.Add(-1) >= 0 {
			return errors.New("apiserver away")
		}
		mu.Lock()
		seen = append(seen, inv)
		mu.Unlock()
		return nil
	})
	tn := startNode(t, drv, func(c *Config) {
		c.Publisher = pub
		c.InventoryInterval = 100 * time.Millisecond
		c.AdvertiseAddress = "127.0.0.1:7070"
	})
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	require.Eventually(t, func() bool { return count() >= 1 }, waitWithin, waitTick) // the failed first publish is retried by the tick
	if _, err := tn.root.PutPools(bg, pools("img", 1)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 1)
	c0 := count()
	res, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/x"})
	if err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) <= c0 {
			return false
		}
		last := seen[len(seen)-1]
		return len(last.Entries) == 1 && last.Entries[0].ID == res.ID
	}, waitWithin, waitTick)
	mu.Lock()
	last := seen[len(seen)-1]
	mu.Unlock()
	if last.Name != "n1" || last.Node != "n1" || last.Address != "127.0.0.1:7070" || last.Entries[0].Name != "ns/x" || last.Entries[0].Phase != "Running" {
		t.Fatalf("published %+v", last)
	}
}

func TestClose_DestroysWarmStopsClaimedAnd503(t *testing.T) {
	drv := newFakeDriver()
	tn := startNode(t, drv, nil)
	if _, err := tn.root.PutPools(bg, pools("img", 2)); err != nil {
		t.Fatal(err)
	}
	tn.waitWarm(t, "img", 2)
	drv.HoldClones()
	defer drv.ReleaseClones()
	if _, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img"}); err != nil {
		t.Fatal(err)
	}
	tn.cancel()
	<-tn.done
	if err := tn.Close(bg); err != nil {
		t.Fatal(err)
	}
	if drv.Len() != 1 {
		t.Fatalf("after Close the driver holds %d VMs, want the claimed one", drv.Len())
	}
	if _, err := tn.root.Info(bg); nodeapi.StatusOf(err) != 503 {
		t.Fatalf("info after Close: %v", err)
	}
}

// A node that dies without Close leaves its claimed sandboxes, deadlines and
// snapshots to the next node on the same data dir, which destroys the
// warm VMs nobody owns.
func TestRestart_FakeDriver(t *testing.T) {
	drv := newFakeDriver()
	dir := t.TempDir()
	cfg := Config{Name: "n1", DataDir: dir, Driver: drv, RootToken: testRoot, ReapInterval: 50 * time.Millisecond, RefillInterval: 50 * time.Millisecond}
	a := runNode(t, cfg)
	if _, err := a.root.PutPools(bg, pools("img", 3)); err != nil {
		t.Fatal(err)
	}
	a.waitWarm(t, "img", 3)
	c1, _ := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/one", TTLSeconds: 600, Metadata: map[string]string{"k": "v"}})
	c2, _ := a.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", ClaimRef: "ns/two"})
	if err := a.root.Pause(bg, c2.ID); err != nil {
		t.Fatal(err)
	}
	ck, err := a.root.Snapshot(bg, c1.ID, "snap")
	if err != nil {
		t.Fatal(err)
	}
	a.waitWarm(t, "img", 3)
	a.crash()

	b := runNode(t, cfg)
	got, err := b.root.Get(bg, c1.ID)
	if err != nil || !got.Deadline.Equal(c1.Deadline) || got.Metadata["k"] != "v" || got.ClaimRef != "ns/one" {
		t.Fatalf("c1 after restart: %+v %v", got, err)
	}
	if got, err := b.root.Get(bg, c2.ID); err != nil || !got.Paused {
		t.Fatalf("c2 after restart: %+v %v", got, err)
	}
	if cks, err := b.root.Snapshots(bg); err != nil || len(cks) != 1 || cks[0].ID != ck.ID {
		t.Fatalf("snapshots after restart: %+v %v", cks, err)
	}
	if br, err := b.root.ClaimSnapshot(bg, ck.ID, 0); err != nil {
		t.Fatalf("snapshot claim after restart: %+v %v", br, err)
	}
	// The pool target survived; the old warm VMs were destroyed and refilled.
	b.waitWarm(t, "img", 3)
	b.mu.Lock()
	owned := b.tab.vmIDs()
	for _, p := range b.tab.pools {
		for _, h := range p.warm {
			owned[h.ID] = true
		}
	}
	b.mu.Unlock()
	live, _ := drv.List(bg)
	for _, h := range live {
		if !owned[h.ID] {
			t.Errorf("orphan VM %s survived the restart", h.ID)
		}
	}
}

func TestNew_RefusesASharedDataDir(t *testing.T) {
	drv := newFakeDriver()
	tn := startNode(t, drv, nil)
	_, err := New(Config{Name: "n2", DataDir: tn.dirs.data, Driver: drv})
	if err == nil || !errors.Is(err, errStoreLocked) {
		t.Fatalf("second node on one data dir: %v", err)
	}
}
