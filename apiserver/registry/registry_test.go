package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/hearthvm/hearth/apiserver/registry/registrytest"
)

var (
	gvrPool  = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxwarmpools"}
	gvrTmpl  = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxtemplates"}
	gvrInv   = schema.GroupVersionResource{Group: "sandbox.cocoonstack.io", Version: "v1beta1", Resource: "nodeinventories"}
	gvrLease = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
)

func obj(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	js, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

const poolYAML = `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {name: rt, namespace: default}
spec:
  replicas: 4
  sandboxTemplateRef: {name: rt}
`

const templateYAML = `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata: {name: rt, namespace: default}
spec:
  podTemplate:
    spec:
      containers:
      - name: main
        image: hearth/runtime:latest
        env: [{name: A, value: "1"}]
`

func TestRegistry_CRUDStatusScaleWatch(t *testing.T) {
	s := registrytest.Start(t)
	dc := dynamic.NewForConfigOrDie(s.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pools := dc.Resource(gvrPool).Namespace("default")

	w, err := pools.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	created, err := pools.Create(ctx, obj(t, poolYAML), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.GetResourceVersion() == "" || created.GetGeneration() != 1 {
		t.Fatalf("rv %q generation %d", created.GetResourceVersion(), created.GetGeneration())
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Added {
			t.Fatalf("first event %s", ev.Type)
		}
	case <-ctx.Done():
		t.Fatal("no watch event")
	}

	// Status on the main resource is ignored; through /status it sticks,
	// and spec changes there are ignored.
	u := created.DeepCopy()
	_ = unstructured.SetNestedField(u.Object, int64(3), "status", "readyReplicas")
	u, err = pools.Update(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, found, _ := unstructured.NestedInt64(u.Object, "status", "readyReplicas"); found {
		t.Fatal("main resource wrote status")
	}
	_ = unstructured.SetNestedField(u.Object, int64(3), "status", "readyReplicas")
	_ = unstructured.SetNestedField(u.Object, "x=y", "status", "selector")
	_ = unstructured.SetNestedField(u.Object, int64(99), "spec", "replicas")
	u, err = pools.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedInt64(u.Object, "status", "readyReplicas"); r != 3 {
		t.Fatalf("status readyReplicas %d", r)
	}
	if r, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicas"); r != 4 {
		t.Fatalf("status wrote spec.replicas=%d", r)
	}

	// Merge patch, the whole scaling interface.
	u, err = pools.Patch(ctx, "rt", types.MergePatchType, []byte(`{"spec":{"replicas":12}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u.GetGeneration() != 2 {
		t.Fatalf("generation %d after a spec change", u.GetGeneration())
	}
	// Scale subresource.
	sc, err := pools.Get(ctx, "rt", metav1.GetOptions{}, "scale")
	if err != nil {
		t.Fatal(err)
	}
	if sc.GetKind() != "Scale" {
		t.Fatalf("scale kind %q", sc.GetKind())
	}
	if r, _, _ := unstructured.NestedInt64(sc.Object, "spec", "replicas"); r != 12 {
		t.Fatalf("scale spec.replicas %d", r)
	}
	if sel, _, _ := unstructured.NestedString(sc.Object, "status", "selector"); sel != "x=y" {
		t.Fatalf("scale selector %q", sel)
	}
	if _, err := pools.Patch(ctx, "rt", types.MergePatchType, []byte(`{"spec":{"replicas":7}}`), metav1.PatchOptions{}, "scale"); err != nil {
		t.Fatal(err)
	}
	u, err = pools.Get(ctx, "rt", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicas"); r != 7 {
		t.Fatalf("spec.replicas %d after scale", r)
	}

	// JSON patch.
	if _, err := pools.Patch(ctx, "rt", types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/replicas","value":0}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// Validation.
	_, err = pools.Patch(ctx, "rt", types.MergePatchType, []byte(`{"spec":{"replicas":-1}}`), metav1.PatchOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("replicas -1: %v", err)
	}
	bad := obj(t, poolYAML)
	bad.SetName("noref")
	unstructured.RemoveNestedField(bad.Object, "spec", "sandboxTemplateRef")
	if _, err := pools.Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("no template ref: %v", err)
	}
	// Default replicas 1.
	def := obj(t, poolYAML)
	def.SetName("def")
	unstructured.RemoveNestedField(def.Object, "spec", "replicas")
	def, err = pools.Create(ctx, def, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedInt64(def.Object, "spec", "replicas"); r != 1 {
		t.Fatalf("default replicas %d", r)
	}

	if err := pools.Delete(ctx, "rt", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pools.Get(ctx, "rt", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after delete: %v", err)
	}
}

func TestRegistry_ServerSideApplyMergesContainerLists(t *testing.T) {
	s := registrytest.Start(t)
	dc := dynamic.NewForConfigOrDie(s.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tmpls := dc.Resource(gvrTmpl).Namespace("default")
	apply := func(u *unstructured.Unstructured, manager string) *unstructured.Unstructured {
		t.Helper()
		js, _ := json.Marshal(u.Object)
		out, err := tmpls.Patch(ctx, u.GetName(), types.ApplyPatchType, js, metav1.PatchOptions{FieldManager: manager})
		if err != nil {
			t.Fatalf("apply by %s: %v", manager, err)
		}
		return out
	}
	first := apply(obj(t, templateYAML), "a")
	if len(first.GetManagedFields()) == 0 {
		t.Fatal("no managedFields: the OpenAPI model is not wired")
	}
	// A second manager adds an env var by key: with real schemas the
	// containers list (a map keyed by name) merges instead of conflicting.
	second := obj(t, `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata: {name: rt, namespace: default}
spec:
  podTemplate:
    spec:
      containers:
      - name: main
        env: [{name: B, value: "2"}]
`)
	got := apply(second, "b")
	cs, _, _ := unstructured.NestedSlice(got.Object, "spec", "podTemplate", "spec", "containers")
	if len(cs) != 1 {
		t.Fatalf("containers %v", cs)
	}
	env := cs[0].(map[string]any)["env"].([]any)
	if len(env) != 2 || cs[0].(map[string]any)["image"] != "hearth/runtime:latest" {
		t.Fatalf("merged container %v", cs[0])
	}
	// Re-applying the first manager's config is a no-op for the other's fields.
	again := apply(obj(t, templateYAML), "a")
	if again.GetResourceVersion() != got.GetResourceVersion() {
		t.Fatalf("re-apply changed the object: rv %s → %s", got.GetResourceVersion(), again.GetResourceVersion())
	}
}

func TestRegistry_NodeInventoryClusterScopedNameEqualsNode(t *testing.T) {
	s := registrytest.Start(t)
	dc := dynamic.NewForConfigOrDie(s.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inv := dc.Resource(gvrInv)
	good := obj(t, `
apiVersion: sandbox.cocoonstack.io/v1beta1
kind: NodeInventory
metadata: {name: node-a}
node: node-a
address: 127.0.0.1:1
pools: [{template: img, net: none, size: small, warm: 2, target: 2}]
`)
	js, _ := json.Marshal(good.Object)
	if _, err := inv.Patch(ctx, "node-a", types.ApplyPatchType, js, metav1.PatchOptions{FieldManager: "node"}); err != nil {
		t.Fatal(err)
	}
	bad := good.DeepCopy()
	bad.SetName("node-b")
	if _, err := inv.Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("name != node: %v", err)
	}
	l, err := inv.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 || l.Items[0].GetNamespace() != "" {
		t.Fatalf("items %v", l.Items)
	}
	// Leases are served too (the driver's leader election).
	lease := obj(t, `
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: l, namespace: default}
spec: {holderIdentity: me, leaseDurationSeconds: 15}
`)
	if _, err := dc.Resource(gvrLease).Namespace("default").Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestRegistry_OpenAPIV2ProtobufServes(t *testing.T) {
	s := registrytest.Start(t)
	hc, err := rest.HTTPClientFor(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	// kubectl downloads /openapi/v2 as protobuf for client-side validation;
	// a schema v2 cannot carry (anyOf) makes that a 503.
	req, _ := http.NewRequest(http.MethodGet, s.Config.Host+"/openapi/v2", nil)
	req.Header.Set("Accept", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/openapi/v2 protobuf: %d %s", resp.StatusCode, body)
	}
}

// A template whose egress policy Hearth cannot enforce as written is
// refused on create and on update (422 naming the field), never stored for
// its pools to run without the policy it asked for.
func TestRegistry_TemplateEgressPolicyHearthCannotEnforceIs422NamingTheField(t *testing.T) {
	s := registrytest.Start(t)
	dc := dynamic.NewForConfigOrDie(s.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tmpls := dc.Resource(gvrTmpl).Namespace("default")
	withPolicy := func(name string, policy any) *unstructured.Unstructured {
		u := obj(t, templateYAML)
		u.SetName(name)
		if policy != nil {
			_ = unstructured.SetNestedField(u.Object, policy, "spec", "networkPolicy")
		}
		return u
	}
	egressOf := func(rules ...any) map[string]any { return map[string]any{"egress": rules} }
	to := func(peers ...any) map[string]any { return map[string]any{"to": peers} }
	block := func(cidr string) map[string]any { return map[string]any{"ipBlock": map[string]any{"cidr": cidr}} }
	many := make([]any, 0, 1001)
	for i := range 1001 {
		many = append(many, block(fmt.Sprintf("198.18.%d.%d/32", i/256, i%256)))
	}
	refuse := map[string]struct {
		policy map[string]any
		field  string
	}{
		"pod selector":       {egressOf(to(map[string]any{"podSelector": map[string]any{}})), "spec.networkPolicy.egress[0].to[0]"},
		"namespace selector": {egressOf(to(block("10.0.0.0/8"), map[string]any{"namespaceSelector": map[string]any{}})), "spec.networkPolicy.egress[0].to[1]"},
		"named port":         {egressOf(map[string]any{"ports": []any{map[string]any{"port": "https"}}}), "spec.networkPolicy.egress[0].ports[0].port"},
		"invalid CIDR":       {egressOf(to(block("300.0.0.0/8"))), "spec.networkPolicy.egress[0].to[0].ipBlock.cidr"},
		"port out of range":  {egressOf(map[string]any{"ports": []any{map[string]any{"port": int64(70000)}}}), "spec.networkPolicy.egress[0].ports[0].port"},
		"1001 rules":         {egressOf(to(many...)), "spec.networkPolicy.egress"},
	}
	for name, c := range refuse {
		t.Run(name, func(t *testing.T) {
			_, err := tmpls.Create(ctx, withPolicy("bad", c.policy), metav1.CreateOptions{})
			assertInvalidField(t, err, c.field)
		})
	}
	// An unknown networkPolicyManagement is refused too.
	u := withPolicy("mgmt", nil)
	_ = unstructured.SetNestedField(u.Object, "Sometimes", "spec", "networkPolicyManagement")
	_, err := tmpls.Create(ctx, u, metav1.CreateOptions{})
	assertInvalidField(t, err, "spec.networkPolicyManagement")

	// A policy Hearth enforces is stored; updating it into one it cannot is
	// refused and the stored policy is unchanged.
	good, err := tmpls.Create(ctx, withPolicy("good", egressOf(to(block("203.0.113.0/24")), map[string]any{"ports": []any{map[string]any{"port": int64(443)}}})), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpls.Patch(ctx, "good", types.MergePatchType, []byte(`{"spec":{"networkPolicy":{"egress":[{"to":[{"podSelector":{}}]}]}}}`), metav1.PatchOptions{})
	assertInvalidField(t, err, "spec.networkPolicy.egress[0].to[0]")
	after, err := tmpls.Get(ctx, "good", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.GetResourceVersion() != good.GetResourceVersion() {
		t.Fatalf("a refused update changed the template: rv %s → %s", good.GetResourceVersion(), after.GetResourceVersion())
	}
	// Unmanaged: Hearth filters nothing and does not read networkPolicy.
	um := withPolicy("unmanaged", nil)
	_ = unstructured.SetNestedField(um.Object, "Unmanaged", "spec", "networkPolicyManagement")
	if _, err := tmpls.Create(ctx, um, metav1.CreateOptions{}); err != nil {
		t.Fatalf("Unmanaged: %v", err)
	}
}

func assertInvalidField(t *testing.T, err error, fieldPath string) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want 422 naming %s, got %v", fieldPath, err)
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Code != http.StatusUnprocessableEntity || st.Status().Details == nil {
		t.Fatalf("want a 422 with details, got %v", err)
	}
	for _, c := range st.Status().Details.Causes {
		if c.Field == fieldPath {
			return
		}
	}
	t.Fatalf("422 does not name %s: %v", fieldPath, st.Status().Details.Causes)
}
