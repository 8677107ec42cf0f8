package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/hearthvm/hearth/e2e/cluster"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/sandbox"
)

const (
	// freshness is the bound: a change made through one API server
	// replica, or on a node directly, is in another replica's watch and
	// list within it.
	freshness = time.Second
	// freshInventoryInterval is the nodes' publish cadence in
	// TestFreshness: far longer than the test's claims, so whatever
	// replica B sees came from the nodes' change streams.
	freshInventoryInterval       = 5 * time.Minute
	freshClaims                  = 8
	freshWarmPerNode       int32 = 6
)

// TestFreshness runs two sandbox-apiserver replicas over two sandboxd
// nodes that publish NodeInventory only every freshInventoryInterval. It
// creates sandboxes through replica A (and one on a node directly with the
// node's own token), deletes them, and asserts that replica B's watch and
// list show each change within `freshness` — and that not one
// NodeInventory object was written meanwhile: the view is the nodes'
// change streams, a claim writes nothing.
//
// Both replicas are reached directly as kube-apiserver's aggregator
// reaches them: a front-proxy client certificate and X-Remote-User /
// X-Remote-Group headers (the requestheader authentication the control
// plane configures).
func TestFreshness(t *testing.T) {
	if freshInventoryInterval < 30*time.Second {
		t.Fatalf("freshInventoryInterval %v: a short publish cadence would let NodeInventory, not the streams, carry the changes", freshInventoryInterval)
	}
	bins := binDir(t)
	if err := cluster.CheckBinaries(bins); err != nil {
		t.Skipf("SKIP real-cluster e2e: %v", err)
	}
	bin := needHearth(t, "freshness e2e", "sandbox-agent", "sandboxd", "sandbox-apiserver")
	start := time.Now()
	cp := startControlPlane(t, bins, "hearth-e2e-fresh-")

	e := (&env{cp: cp, nodes: map[string]string{}, inventoryInterval: freshInventoryInterval}).connect()
	mustKubectl(t, cp.Admin, "", "apply", "--server-side", "-k", repoRoot+"/deploy/base")
	mustKubectl(t, cp.Admin, "", "wait", "--for=condition=Established", "--timeout=60s", "crd/nodeinventories.sandbox.cocoonstack.io")
	e.startNodes(t, bin)
	e.nodeInventory(t) // each node's first (and, in this test, only) publish
	t.Logf("nodes published at %v (next publish in %v)", time.Since(start).Round(time.Millisecond), freshInventoryInterval)
	e.ns = testNamespace(t, e.cs, "fresh")

	// Warm targets straight on the nodes (the warm-pool driver is off):
	// the published objects never hear of these pools, so routing on A
	// can only use the warm counts its streams carry.
	for name, addr := range e.nodes {
		c := nodeapi.NewClient(addr, nodeapi.NodeToken(fleetToken, name))
		if _, err := c.PutPools(context.Background(), []nodeapi.PoolSpec{{Template: e2eImage, Net: sandbox.NetNone, Size: sandbox.SizeSmall, Warm: freshWarmPerNode}}); err != nil {
			t.Fatalf("PUT /v1/pools on %s: %v", name, err)
		}
	}

	// Two replicas, started together; neither is registered (nothing here
	// goes through kube-apiserver's proxy).
	type replica struct {
		name string
		port int
		proc *cluster.Proc
		dyn  dynamic.Interface
		cfg  *rest.Config
	}
	reps := []*replica{{name: "sandbox-apiserver-a"}, {name: "sandbox-apiserver-b"}}
	for _, r := range reps {
		r.port, r.proc = e.startAPIReplica(t, bin, r.name, "--enable-warm-pool-driver=false")
		r.cfg = e.replicaConfig(t, r.port)
		r.dyn = dynamic.NewForConfigOrDie(r.cfg)
	}
	for _, r := range reps {
		hc, err := rest.HTTPClientFor(r.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := cluster.Poll(r.proc, 90*time.Second, 100*time.Millisecond, func() (bool, error) {
			resp, err := hc.Get(r.cfg.Host + "/readyz")
			if err != nil {
				return false, err
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, fmt.Errorf("GET /readyz: %s", resp.Status)
		}); err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
	}
	a, b := reps[0], reps[1]
	t.Logf("replicas ready at %v", time.Since(start).Round(time.Millisecond))

	// The pools fill on the nodes; the published objects still say nothing.
	if err := cluster.Poll(nil, 60*time.Second, 100*time.Millisecond, func() (bool, error) {
		for name, addr := range e.nodes {
			info, err := nodeapi.NewClient(addr, nodeapi.NodeToken(fleetToken, name)).Info(context.Background())
			if err != nil {
				return false, err
			}
			warm := int32(0)
			for _, p := range info.Pools {
				warm += p.Warm
			}
			if warm < freshWarmPerNode {
				return false, fmt.Errorf("%s: %d warm, want %d", name, warm, freshWarmPerNode)
			}
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	if warm, _, err := e.warmTotal(); err != nil || warm != 0 {
		t.Fatalf("published warm count %d (%v): a NodeInventory was republished; the test cannot tell streams from publishes", warm, err)
	}

	// NodeInventory writes: a watch from the current resourceVersions
	// counts every change to the objects from here to the end.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	invs, err := e.dyn.Resource(inventoriesGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	invRVs := map[string]string{}
	for _, it := range invs.Items {
		invRVs[it.GetName()] = it.GetResourceVersion()
	}
	invWatch, err := e.dyn.Resource(inventoriesGVR).Watch(ctx, metav1.ListOptions{ResourceVersion: invs.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	defer invWatch.Stop()
	var invWrites []string
	var invMu sync.Mutex
	go func() {
		for ev := range invWatch.ResultChan() {
			if u, ok := ev.Object.(*unstructured.Unstructured); ok {
				invMu.Lock()
				invWrites = append(invWrites, fmt.Sprintf("%s %s rv=%s", ev.Type, u.GetName(), u.GetResourceVersion()))
				invMu.Unlock()
			}
		}
	}()

	// B's watch, from B's list.
	bs := b.dyn.Resource(sandboxesGVR).Namespace(e.ns)
	l0, err := bs.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := bs.Watch(ctx, metav1.ListOptions{ResourceVersion: l0.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	seen := newArrivals()
	go func() {
		for ev := range w.ResultChan() {
			if u, ok := ev.Object.(*unstructured.Unstructured); ok {
				seen.note(string(ev.Type)+" "+u.GetName(), u.GetResourceVersion())
			} else {
				seen.note(string(ev.Type)+" ?", fmt.Sprint(ev.Object))
			}
		}
		seen.note("CLOSED", "")
	}()

	// inList polls B's list until name is (present) or is not there, and
	// returns when; the list item's resourceVersion when present.
	inList := func(name string, present bool) (time.Time, string, error) {
		deadline := time.Now().Add(10 * freshness)
		for {
			l, err := bs.List(ctx, metav1.ListOptions{})
			if err != nil {
				return time.Time{}, "", err
			}
			now, rv, has := time.Now(), "", false
			for _, it := range l.Items {
				if it.GetName() == name {
					has, rv = true, it.GetResourceVersion()
				}
			}
			if has == present {
				return now, rv, nil
			}
			if now.After(deadline) {
				return time.Time{}, "", fmt.Errorf("%s: in B's list = %v after %v", name, has, 10*freshness)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	var watchLat, listLat, sentLat []time.Duration
	// expect waits for B to show the change of name made by the call sent
	// at sent that returned at done (watch event typ, and the list), and
	// records how long after done each came (and the watch after sent).
	expect := func(what, name, typ string, sent, done time.Time) {
		t.Helper()
		at, _, ok := seen.wait(typ+" "+name, 10*freshness)
		if !ok {
			if _, _, closed := seen.wait("CLOSED", 0); closed {
				t.Fatalf("%s: B's watch closed before %s %s", what, typ, name)
			}
			t.Fatalf("%s: no %s %s in B's watch within %v", what, typ, name, 10*freshness)
		}
		lt, rv, err := inList(name, typ != string(watch.Deleted))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		wl, ll := max(at.Sub(done), 0), max(lt.Sub(done), 0)
		watchLat, listLat, sentLat = append(watchLat, wl), append(listLat, ll), append(sentLat, at.Sub(sent))
		if wl > freshness || ll > freshness {
			t.Errorf("%s: %s %s in B's watch after %v, list after %v; want ≤ %v", what, typ, name, wl, ll, freshness)
		}
		if typ == string(watch.Added) {
			// Get on B renders the resourceVersion B's list and watch gave.
			got, err := bs.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s: get %s on B: %v", what, name, err)
			}
			if got.GetResourceVersion() != rv {
				t.Errorf("%s: B's get says resourceVersion %s, its list %s", what, got.GetResourceVersion(), rv)
			}
		}
	}

	as := a.dyn.Resource(sandboxesGVR).Namespace(e.ns)
	names := make([]string, freshClaims)
	claimStart := time.Now()
	for i := range names {
		names[i] = fmt.Sprintf("fresh-%d", i)
		var sent time.Time
		err := cluster.Poll(nil, 30*time.Second, 50*time.Millisecond, func() (bool, error) {
			sent = time.Now()
			_, err := as.Create(ctx, sandboxObject(names[i]), metav1.CreateOptions{})
			return !apierrors.IsServiceUnavailable(err), err
		})
		if err != nil {
			t.Fatalf("create %s through A: %v", names[i], err)
		}
		expect("create through A", names[i], string(watch.Added), sent, time.Now())
	}

	// A claim made on a node directly, with that node's own token: no API
	// server was involved, B sees it all the same.
	node := nodeNames[0]
	nc := nodeapi.NewClient(e.nodes[node], nodeapi.NodeToken(fleetToken, node))
	sent := time.Now()
	direct, err := nc.Claim(ctx, nodeapi.ClaimRequest{Template: e2eImage, Net: sandbox.NetNone, Size: sandbox.SizeSmall,
		TTLSeconds: 600, ClaimRef: e.ns + "/fresh-direct"})
	if err != nil {
		t.Fatalf("claim on %s directly: %v", node, err)
	}
	expect("claim on a node directly", "fresh-direct", string(watch.Added), sent, time.Now())
	sent = time.Now()
	if err := nc.Release(ctx, direct.ID); err != nil {
		t.Fatalf("release on %s directly: %v", node, err)
	}
	expect("release on a node directly", "fresh-direct", string(watch.Deleted), sent, time.Now())

	for _, name := range names {
		sent := time.Now()
		if err := as.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s through A: %v", name, err)
		}
		expect("delete through A", name, string(watch.Deleted), sent, time.Now())
	}
	claimWall := time.Since(claimStart)

	// Not one NodeInventory write for all of it: the resourceVersions
	// (below) are the proof; the watch names any write it saw.
	invMu.Lock()
	if len(invWrites) > 0 {
		t.Errorf("%d NodeInventory writes during %d claims and releases, want 0: %v", len(invWrites), freshClaims+1, invWrites)
	}
	invMu.Unlock()
	after, err := e.dyn.Resource(inventoriesGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range after.Items {
		if rv := invRVs[it.GetName()]; rv != it.GetResourceVersion() {
			t.Errorf("NodeInventory %s: resourceVersion %s → %s during the claims", it.GetName(), rv, it.GetResourceVersion())
		}
	}
	if _, _, closed := seen.wait("CLOSED", 0); closed {
		t.Error("B's watch closed during the test")
	}
	t.Logf("%d changes (%d creates through A, 1 claim and 1 release on %s directly, %d deletes through A) in %v; 0 NodeInventory writes (publish cadence %v)",
		len(watchLat), freshClaims, node, freshClaims, claimWall.Round(time.Millisecond), freshInventoryInterval)
	t.Logf("replica B, after the change returned: watch p50 %v max %v; list p50 %v max %v (bound %v); watch after the call was sent: p50 %v max %v (a delete waits for its node to drop the VM)",
		pct(watchLat, 50), pct(watchLat, 100), pct(listLat, 50), pct(listLat, 100), freshness, pct(sentLat, 50), pct(sentLat, 100))
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}

// replicaConfig reaches one sandbox-apiserver replica directly, as
// kube-apiserver's aggregator does: a front-proxy client certificate
// (CN front-proxy-client, signed by the requestheader CA) and the user in
// X-Remote-User / X-Remote-Group.
func (e *env) replicaConfig(t *testing.T, port int) *rest.Config {
	pair, err := e.cp.FrontProxyCA.Client("front-proxy-client")
	if err != nil {
		t.Fatal(err)
	}
	return &rest.Config{
		Host:            fmt.Sprintf("https://127.0.0.1:%d", port),
		TLSClientConfig: rest.TLSClientConfig{CAData: e.cp.CA.CertPEM, CertData: pair.CertPEM, KeyData: pair.KeyPEM},
		WrapTransport:   func(rt http.RoundTripper) http.RoundTripper { return remoteUser{rt} },
		QPS:             500, Burst: 1000,
	}
}

// remoteUser names the user the aggregator would: admin, system:masters.
type remoteUser struct{ rt http.RoundTripper }

func (r remoteUser) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("X-Remote-User", cluster.AdminUser)
	req.Header.Set("X-Remote-Group", "system:masters")
	return r.rt.RoundTrip(req)
}

// sandboxObject is a Sandbox of the e2e image named name.
func sandboxObject(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("agents.x-k8s.io/v1beta1")
	u.SetKind("Sandbox")
	u.SetName(name)
	_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"name": "main", "image": e2eImage}},
		"spec", "podTemplate", "spec", "containers")
	return u
}

// arrivals records when each keyed event first arrived, and a value with it.
type arrivals struct {
	mu   sync.Mutex
	at   map[string]time.Time
	val  map[string]string
	wake chan struct{}
}

func newArrivals() *arrivals {
	return &arrivals{at: map[string]time.Time{}, val: map[string]string{}, wake: make(chan struct{})}
}

func (a *arrivals) note(key, val string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.at[key]; ok {
		return
	}
	a.at[key], a.val[key] = time.Now(), val
	close(a.wake)
	a.wake = make(chan struct{})
}

// wait returns when key arrived, waiting up to timeout for it.
func (a *arrivals) wait(key string, timeout time.Duration) (time.Time, string, bool) {
	deadline := time.After(timeout)
	for {
		a.mu.Lock()
		at, ok := a.at[key]
		val, wake := a.val[key], a.wake
		a.mu.Unlock()
		if ok {
			return at, val, true
		}
		select {
		case <-wake:
		case <-deadline:
			return time.Time{}, "", false
		}
	}
}

// pct is the p-th percentile (p in 0..100) of ds.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[i].Round(100 * time.Microsecond)
}
