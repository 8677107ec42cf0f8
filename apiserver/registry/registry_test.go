package registry_test

import (
	"context"
	"encoding/json"
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
