package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/hearthvm/hearth/apiserver/registry/registrytest"
	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/pool/controller"
)

// secret is the fleet secret; a fakeNode accepts only its own token.
const secret = "fleet-secret"

// fakeNode speaks PUT /v1/pools like a node whose pools fill instantly
// (warm = target), or fails when broken is set. It accepts only its own
// token, nodeapi.NodeToken(secret, name), and records every bearer token
// it was sent.
type fakeNode struct {
	srv    *httptest.Server
	name   string
	tokens []string
	mu     sync.Mutex
	puts   [][]nodeapi.PoolSpec
	broken atomic.Bool
	hang   chan struct{} // when non-nil, PUT blocks until closed or the request ends
	// bootErr, when set, makes its pools boot nothing: each answer holds
	// warm 0 and one more boot failure with this error.
	bootErr  string
	failures int32
}

func newFakeNode(t *testing.T, name string) *fakeNode {
	f := &fakeNode{name: name}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || r.URL.Path != "/v1/pools" {
			http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
			return
		}
		got := r.Header.Get("Authorization")
		f.mu.Lock()
		f.tokens = append(f.tokens, got)
		f.mu.Unlock()
		if got != "Bearer "+nodeapi.NodeToken(secret, f.name) {
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		if f.broken.Load() {
			http.Error(w, `{"error":"boom"}`, http.StatusInternalServerError)
			return
		}
		if f.hang != nil {
			select {
			case <-f.hang:
			case <-r.Context().Done():
				return
			}
		}
		var req nodeapi.PoolsRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, `{"error":"bad"}`, http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.puts = append(f.puts, req.Pools)
		f.mu.Unlock()
		info := nodeapi.Info{Pools: []nodeapi.PoolInfo{}}
		f.mu.Lock()
		if f.bootErr != "" {
			f.failures++
		}
		for _, p := range req.Pools {
			pi := nodeapi.PoolInfo{Template: p.Template, Net: p.Net, Size: p.Size, Warm: p.Warm, Target: p.Warm}
			if f.bootErr != "" {
				pi.Warm, pi.BootFailures, pi.BootError = 0, f.failures, f.bootErr
			}
			info.Pools = append(info.Pools, pi)
		}
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(info)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeNode) addr() string { return strings.TrimPrefix(f.srv.URL, "http://") }

func (f *fakeNode) lastPut() ([]nodeapi.PoolSpec, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.puts) == 0 {
		return nil, 0
	}
	return f.puts[len(f.puts)-1], len(f.puts)
}

func apply(t *testing.T, dc dynamic.Interface, y string) {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(js, &u.Object); err != nil {
		t.Fatal(err)
	}
	gvr := controller.WarmPools
	switch u.GetKind() {
	case "SandboxTemplate":
		gvr = controller.Templates
	case "NodeInventory":
		gvr = inventory.GroupVersionResource
	}
	ri := dc.Resource(gvr)
	var r dynamic.ResourceInterface = ri
	if u.GetNamespace() != "" {
		r = ri.Namespace(u.GetNamespace())
	}
	if _, err := r.Patch(context.Background(), u.GetName(), types.ApplyPatchType, js, metav1.PatchOptions{FieldManager: "test", Force: ptr(true)}); err != nil {
		t.Fatalf("apply %s: %v", u.GetName(), err)
	}
}

func ptr[T any](v T) *T { return &v }

const tmpl = `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata: {name: rt, namespace: default}
spec:
  podTemplate:
    spec:
      containers: [{name: main, image: hearth/runtime:1}]
`

func poolYAML(replicas int) string {
	return `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {name: rt, namespace: default}
spec:
  replicas: ` + itoa(replicas) + `
  sandboxTemplateRef: {name: rt}
`
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func inv(name, addr string, warm int) string {
	return `
apiVersion: sandbox.cocoonstack.io/v1beta1
kind: NodeInventory
metadata: {name: ` + name + `}
node: ` + name + `
address: "` + addr + `"
pools: [{template: "hearth/runtime:1", net: none, size: small, warm: ` + itoa(warm) + `, target: 0}]
`
}

var leases = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}

var rtKey = pool.Key{Template: "hearth/runtime:1", Net: "none", Size: "small"}

func poolStatus(t *testing.T, dc dynamic.Interface) (int64, int64, string) {
	t.Helper()
	u, err := dc.Resource(controller.WarmPools).Namespace("default").Get(context.Background(), "rt", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, _, _ := unstructured.NestedInt64(u.Object, "status", "replicas")
	rr, _, _ := unstructured.NestedInt64(u.Object, "status", "readyReplicas")
	sel, _, _ := unstructured.NestedString(u.Object, "status", "selector")
	return r, rr, sel
}

// failingTemplates fails every sandboxtemplates request while on.
type failingTemplates struct {
	on   atomic.Bool
	next http.RoundTripper
}

func (f *failingTemplates) RoundTrip(r *http.Request) (*http.Response, error) {
	if f.on.Load() && strings.Contains(r.URL.Path, "/sandboxtemplates") {
		return nil, errors.New("injected: etcd unavailable")
	}
	return f.next.RoundTrip(r)
}

func setup(t *testing.T) (*registrytest.Server, dynamic.Interface, *fakeNode, *fakeNode, *failingTemplates, *controller.Controller) {
	s := registrytest.Start(t)
	dc := dynamic.NewForConfigOrDie(s.Config)
	a, b := newFakeNode(t, "node-a"), newFakeNode(t, "node-b")
	apply(t, dc, tmpl)
	apply(t, dc, inv("node-a", a.addr(), 1))
	apply(t, dc, inv("node-b", b.addr(), 1))
	apply(t, dc, inv("node-c", "", 9)) // no address: not schedulable
	ft := &failingTemplates{}
	rc := rest.CopyConfig(s.Config)
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { ft.next = rt; return ft }
	d, err := controller.New(controller.Config{REST: rc, Secret: secret, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return s, dc, a, b, ft, d
}

func TestTick_SpreadsReplicasAndReportsWhatNodesHold(t *testing.T) {
	_, dc, a, b, _, d := setup(t)
	ctx := context.Background()
	apply(t, dc, poolYAML(5))
	tick, err := d.Tick(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"node-a", "node-b"}, tick.Nodes); d != "" {
		t.Fatalf("nodes -want +got:\n%s", d)
	}
	pa, _ := a.lastPut()
	pb, _ := b.lastPut()
	want := func(w int32) []nodeapi.PoolSpec {
		return []nodeapi.PoolSpec{{Template: rtKey.Template, Net: "none", Size: "small", Warm: w}}
	}
	if d := cmp.Diff(want(3), pa); d != "" {
		t.Fatalf("node-a PUT -want +got:\n%s", d)
	}
	if d := cmp.Diff(want(2), pb); d != "" {
		t.Fatalf("node-b PUT -want +got:\n%s", d)
	}
	// Status follows the PUT answers (3 + 2), not the stale inventory (1 + 1).
	r, rr, sel := poolStatus(t, dc)
	if r != 5 || rr != 5 || sel != controller.SelectorLabel+"=rt" {
		t.Fatalf("status %d/%d %q", r, rr, sel)
	}

	// Scale to 0: every node gets warm 0 for the key.
	apply(t, dc, poolYAML(0))
	if _, err := d.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	pa, _ = a.lastPut()
	if d := cmp.Diff(want(0), pa); d != "" {
		t.Fatalf("node-a PUT after scale to 0 -want +got:\n%s", d)
	}
	if r, _, _ := poolStatus(t, dc); r != 0 {
		t.Fatalf("status replicas %d after scale to 0", r)
	}
}

func TestTick_TransientTemplateErrorDoesNotDrain(t *testing.T) {
	_, dc, a, _, ft, d := setup(t)
	ctx := context.Background()
	apply(t, dc, poolYAML(4))
	if _, err := d.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	ft.on.Store(true)
	apply(t, dc, poolYAML(6)) // a change forces a fresh PUT during the outage
	tick, err := d.Tick(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tick.Plan.Keys[pool.Ref{Namespace: "default", Name: "rt"}] != rtKey {
		t.Fatalf("pool lost its key on a transient error: %v", tick.Plan.Keys)
	}
	pa, _ := a.lastPut()
	if len(pa) != 1 || pa[0].Warm != 3 {
		t.Fatalf("node-a PUT during template outage: %+v", pa)
	}
}

func TestTick_TemplateNotFoundDrainsAndReportsZero(t *testing.T) {
	_, dc, a, _, _, d := setup(t)
	ctx := context.Background()
	apply(t, dc, poolYAML(4))
	if _, err := d.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dc.Resource(controller.Templates).Namespace("default").Delete(ctx, "rt", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	pa, _ := a.lastPut()
	if len(pa) != 0 {
		t.Fatalf("node-a still asked to hold %+v after its template was deleted", pa)
	}
	if r, rr, _ := poolStatus(t, dc); r != 0 || rr != 0 {
		t.Fatalf("status %d/%d for a pool without template", r, rr)
	}
}

func TestTick_FailingNodeDoesNotStallOthers(t *testing.T) {
	_, dc, a, b, _, d := setup(t)
	ctx := context.Background()
	b.hang = make(chan struct{})
	defer close(b.hang)
	a.broken.Store(false)
	apply(t, dc, poolYAML(4))
	// node-b hangs until the tick's context ends (it would otherwise hit
	// its 10 s PUT deadline); node-a's PUT runs concurrently and lands.
	tctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	start := time.Now()
	tick, err := d.Tick(tctx)
	if err != nil {
		t.Fatal(err)
	}
	if tick.PutErrors["node-b"] == nil {
		t.Fatal("node-b's PUT did not fail")
	}
	if _, n := a.lastPut(); n != 1 {
		t.Fatalf("node-a got %d PUTs", n)
	}
	t.Logf("tick with a hanging node took %s", time.Since(start))
	// node-a answered 2; node-b contributes its inventory value 1.
	if tick.Observed[pool.Ref{Namespace: "default", Name: "rt"}] != 3 {
		t.Fatalf("observed %v", tick.Observed)
	}
}

func TestRun_ElectedLoopReactsToPoolChanges(t *testing.T) {
	s, dc, a, _, _, _ := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, err := controller.New(controller.Config{REST: s.Config, Secret: secret, Interval: time.Hour, Elect: true, LeaseNamespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	apply(t, dc, poolYAML(8))
	require.Eventually(t, func() bool {
		p, _ := a.lastPut()
		return len(p) == 1 && p[0].Warm == 4
	}, 20*time.Second, 20*time.Millisecond)
	apply(t, dc, poolYAML(2))
	require.Eventually(t, func() bool {
		p, _ := a.lastPut()
		return len(p) == 1 && p[0].Warm == 1
	}, 10*time.Second, 20*time.Millisecond)
	lease, err := dc.Resource(leases).Namespace("default").Get(ctx, "hearth-warmpool-driver", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h, _, _ := unstructured.NestedString(lease.Object, "spec", "holderIdentity"); h == "" {
		t.Fatal("lease has no holder")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A NodeInventory whose address points at another node's listener (or an
// attacker's) makes the controller send there only the publishing node's own
// token: never the fleet secret, and useless on the node it points at.
func TestTick_AddressPointedElsewhereGetsOnlyThatNodesToken(t *testing.T) {
	_, dc, a, _, _, d := setup(t)
	trap := newFakeNode(t, "trap") // a listener that accepts nothing and records
	apply(t, dc, inv("node-evil", trap.addr(), 1))
	apply(t, dc, inv("node-evil2", a.addr(), 1)) // node-a's address, another node's name
	apply(t, dc, poolYAML(8))
	tick, err := d.Tick(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	trap.mu.Lock()
	got := append([]string(nil), trap.tokens...)
	trap.mu.Unlock()
	if len(got) == 0 {
		t.Fatal("the controller sent node-evil nothing")
	}
	for _, h := range got {
		if h != "Bearer "+nodeapi.NodeToken(secret, "node-evil") || strings.Contains(h, secret) {
			t.Fatalf("node-evil's address received %q", h)
		}
	}
	// node-evil2's PUT reached node-a with node-evil2's token: refused.
	if tick.PutErrors["node-evil2"] == nil || nodeapi.StatusOf(tick.PutErrors["node-evil2"]) != http.StatusUnauthorized {
		t.Fatalf("node-evil2 → node-a: %v, want 401", tick.PutErrors["node-evil2"])
	}
	// The captured token opens no other node.
	req, _ := http.NewRequest(http.MethodPut, a.srv.URL+"/v1/pools", strings.NewReader(`{"pools":[]}`))
	req.Header.Set("Authorization", got[0])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("node-evil's token on node-a: %d, want 401", resp.StatusCode)
	}
}

func TestTick_WithoutTokenSendsNothingButWritesStatus(t *testing.T) {
	s, dc, a, b, _, _ := setup(t)
	d, err := controller.New(controller.Config{REST: s.Config, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	apply(t, dc, poolYAML(4))
	if _, err := d.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, n := a.lastPut(); n != 0 {
		t.Fatalf("node-a got %d PUTs without a token", n)
	}
	if _, n := b.lastPut(); n != 0 {
		t.Fatalf("node-b got %d PUTs without a token", n)
	}
	// Status comes from the inventories (1 + 1; node-c has no address).
	if r, rr, _ := poolStatus(t, dc); r != 2 || rr != 2 {
		t.Fatalf("status %d/%d", r, rr)
	}
}

const policyTemplate = `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata:
  name: rt
  namespace: default
  annotations: {sandbox.cocoonstack.io/net: egress}
spec:
  podTemplate:
    spec:
      containers: [{name: main, image: hearth/runtime:1}]
  networkPolicy:
    egress:
    - to: [{ipBlock: {cidr: 203.0.113.0/24, except: [203.0.113.7/32]}}]
      ports: [{port: 443}]
`

// A pool's PUT carries its template's egress policy (egress.FromTemplate),
// kept through a transient template error; a second template that maps to
// the same key with another policy provisions nothing and reports 0 — it
// neither loosens the first one's sandboxes nor gets VMs held to a policy
// it did not ask for.
func TestTick_PoolsCarryTheirTemplatesEgressPolicyOneKeyOnePolicy(t *testing.T) {
	_, dc, a, _, ft, d := setup(t)
	ctx := context.Background()
	apply(t, dc, policyTemplate)
	apply(t, dc, poolYAML(2))
	if _, err := d.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	want := &egress.Policy{Otherwise: egress.Deny, Rules: []egress.Rule{{Action: egress.Allow, CIDR: "203.0.113.0/24",
		Except: []string{"203.0.113.7/32"}, Ports: []egress.Port{{Port: 443}}}}}
	wantPut := []nodeapi.PoolSpec{{Template: "hearth/runtime:1", Net: "egress", Size: "small", Warm: 1, Egress: want}}
	pa, _ := a.lastPut()
	if d := cmp.Diff(wantPut, pa); d != "" {
		t.Fatalf("node-a PUT -want +got:\n%s", d)
	}

	// The same key from a template with no filter (Unmanaged).
	apply(t, dc, `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata:
  name: zz
  namespace: default
  annotations: {sandbox.cocoonstack.io/net: egress}
spec:
  networkPolicyManagement: Unmanaged
  podTemplate:
    spec:
      containers: [{name: main, image: hearth/runtime:1}]
`)
	apply(t, dc, `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {name: zz, namespace: default}
spec:
  replicas: 6
  sandboxTemplateRef: {name: zz}
`)
	tick, err := d.Tick(ctx)
	if err != nil {
		t.Fatal(err)
	}
	zz := pool.Ref{Namespace: "default", Name: "zz"}
	if !errors.Is(tick.Plan.Problems[zz], pool.ErrEgressConflict) || tick.Observed[zz] != 0 {
		t.Fatalf("conflicting pool: problem %v, observed %d", tick.Plan.Problems[zz], tick.Observed[zz])
	}
	if _, ok := tick.Plan.Keys[zz]; ok {
		t.Fatal("the conflicting pool provisions its key")
	}
	pa, _ = a.lastPut()
	if d := cmp.Diff(wantPut, pa); d != "" {
		t.Fatalf("node-a PUT with a conflicting template -want +got:\n%s", d)
	}

	// A transient template error keeps the key and its policy.
	ft.on.Store(true)
	if _, err := d.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	ft.on.Store(false)
	pa, _ = a.lastPut()
	if d := cmp.Diff(wantPut, pa); d != "" {
		t.Fatalf("node-a PUT after a transient template error -want +got:\n%s", d)
	}

	// Unmanaged on the first template: the pool filters nothing, and the
	// two templates agree again.
	apply(t, dc, strings.Replace(strings.Replace(policyTemplate, "spec:\n  podTemplate", "spec:\n  networkPolicyManagement: Unmanaged\n  podTemplate", 1), "  networkPolicy:\n    egress:\n    - to: [{ipBlock: {cidr: 203.0.113.0/24, except: [203.0.113.7/32]}}]\n      ports: [{port: 443}]\n", "", 1))
	if _, err := d.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	pa, _ = a.lastPut()
	if d := cmp.Diff([]nodeapi.PoolSpec{{Template: "hearth/runtime:1", Net: "egress", Size: "small", Warm: 4}}, pa); d != "" {
		t.Fatalf("node-a PUT, both Unmanaged -want +got:\n%s", d)
	}
}

// The none lane has no network: its pools carry no policy, and templates
// that differ only in networkPolicy share the key.
func TestTick_NoneLanePoolsCarryNoEgressPolicy(t *testing.T) {
	_, dc, a, _, _, d := setup(t)
	ctx := context.Background()
	apply(t, dc, poolYAML(2)) // tmpl: none lane, no networkPolicy (the default policy)
	if _, err := d.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	pa, _ := a.lastPut()
	if d := cmp.Diff([]nodeapi.PoolSpec{{Template: rtKey.Template, Net: "none", Size: "small", Warm: 1}}, pa); d != "" {
		t.Fatalf("node-a PUT -want +got:\n%s", d)
	}
}
