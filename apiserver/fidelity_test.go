package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/sandbox"
)

func TestCreate_NameHeldIsAlreadyExistsAndSpendsNoVM(t *testing.T) {
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 2, 2)
	s1, s2 := startServer(t, f), startServer(t, f)
	ctx := context.Background()
	if _, err := sandboxes(s1, "default").Create(ctx, sandboxObj("web", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claimed := func() int {
		n := 0
		for _, nd := range f.Nodes {
			l, err := nd.Client.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			n += len(l)
		}
		return n
	}
	// The replica that claimed knows the name from its claim-time index;
	// another one from its live view, which the node's stream fed (never
	// published). Neither spends a microVM.
	if _, err := sandboxes(s1, "default").Create(ctx, sandboxObj("web", nil), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second create on the same replica = %v, want 409 AlreadyExists", err)
	}
	fleettest.Eventually(t, 5*time.Second, func() bool {
		_, ok := s2.Live.Current("default/web")
		return ok
	}, "the second replica's live view never held default/web")
	if _, err := sandboxes(s2, "default").Create(ctx, sandboxObj("web", nil), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second create on another replica = %v, want 409 AlreadyExists", err)
	}
	if _, err := sandboxes(s1, "other").Create(ctx, sandboxObj("web", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the same name in another namespace: %v", err)
	}
	if got := claimed(); got != 2 {
		t.Fatalf("%d microVMs claimed after two creates; a refused create spent one", got)
	}
}

func TestCreate_ConcurrentCreatesOfOneNameOnOneNode(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 4)
	var servers []*server
	for i := 0; i < 2; i++ {
		servers = append(servers, startServer(t, f))
	}
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		won, lost int
	)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := sandboxes(servers[i%2], "default").Create(context.Background(), sandboxObj("race", nil), metav1.CreateOptions{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case apierrors.IsAlreadyExists(err):
				lost++
			default:
				t.Errorf("create: %v", err)
			}
		}()
	}
	wg.Wait()
	if won != 1 || lost != 3 {
		t.Fatalf("%d creates of one name won, %d AlreadyExists; want exactly one winner", won, lost)
	}
	if l, err := f.Nodes[0].Client.List(context.Background()); err != nil || len(l) != 1 {
		t.Fatalf("node holds %d sandboxes (%v), want 1", len(l), err)
	}
}

func TestCreate_GenerateNameStillWorks(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 3)
	s := startServer(t, f)
	seen := map[string]bool{}
	for i := 0; i < 3; i++ {
		gen := sandboxObj("", nil)
		gen.SetGenerateName("job-")
		g, err := sandboxes(s, "default").Create(context.Background(), gen, metav1.CreateOptions{})
		if err != nil || seen[g.GetName()] {
			t.Fatalf("generateName create %d = %v, %v", i, g, err)
		}
		seen[g.GetName()] = true
	}
}

// Two nodes may each hold one claim of a name (two replicas, two nodes,
// within one publish window): Delete by name releases both.
func TestDelete_ReleasesEveryClaimOfTheName(t *testing.T) {
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 1, 1)
	s := startServer(t, f)
	ctx := context.Background()
	var ids []string
	for _, n := range f.Nodes {
		sb, err := n.Client.Claim(ctx, nodeapi.ClaimRequest{Template: image, ClaimRef: "default/twice"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	if err := sandboxes(s, "default").Delete(ctx, "twice", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, n := range f.Nodes {
		if _, err := n.Client.Get(ctx, ids[i]); err == nil {
			t.Fatalf("%s still holds %s after delete", n.Name, ids[i])
		}
	}
	if _, err := sandboxes(s, "default").Get(ctx, "twice", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete = %v", err)
	}
}

func TestReads_UIDLabelsAnnotationsSpecAreWhatWasWritten(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 2)
	s := startServer(t, f)
	ctx := context.Background()
	in := sandboxObj("keep", map[string]string{"note": "hello", sandbox.AnnotationClaimID: "forged"})
	in.SetLabels(map[string]string{"team": "a", sandbox.LabelPhase: "Forged"})
	_ = unstructured.SetNestedField(in.Object, true, "spec", "service")
	w, err := sandboxes(s, "default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	out, err := sandboxes(s, "default").Create(ctx, in, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid := out.GetUID()
	check := func(what string, u *unstructured.Unstructured) {
		t.Helper()
		if u.GetUID() != uid || uid == "" {
			t.Errorf("%s: uid %q, create said %q", what, u.GetUID(), uid)
		}
		if l := u.GetLabels(); l["team"] != "a" || l[sandbox.LabelPhase] != "Running" {
			t.Errorf("%s: labels %v", what, l)
		}
		if a := u.GetAnnotations(); a["note"] != "hello" || a[sandbox.AnnotationClaimID] == "forged" || a[sandbox.AnnotationClaimID] == "" {
			t.Errorf("%s: annotations %v", what, a)
		}
	}
	checkSpec := func(what string, u *unstructured.Unstructured) {
		t.Helper()
		img, _, _ := unstructured.NestedSlice(u.Object, "spec", "podTemplate", "spec", "containers")
		svc, _, _ := unstructured.NestedBool(u.Object, "spec", "service")
		if len(img) != 1 || img[0].(map[string]any)["image"] != image || !svc {
			t.Errorf("%s: spec %v", what, u.Object["spec"])
		}
	}
	check("create", out)
	checkSpec("create", out)
	got, err := sandboxes(s, "default").Get(ctx, "keep", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check("get", got)
	checkSpec("get", got)
	l, err := sandboxes(s, "default").List(ctx, metav1.ListOptions{LabelSelector: "team=a"})
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("list -l team=a = %v, %v", l, err)
	}
	check("list", &l.Items[0])
	// One revision scheme: the create's answer, a get, a list item and the
	// watch event of one state carry the live view's one revision of it.
	if rv := out.GetResourceVersion(); l.Items[0].GetResourceVersion() != got.GetResourceVersion() || rv != got.GetResourceVersion() {
		t.Errorf("list rv %s, get rv %s, create rv %s: want one", l.Items[0].GetResourceVersion(), got.GetResourceVersion(), rv)
	}
	deadline := time.After(10 * time.Second)
	for seen := false; !seen; {
		select {
		case ev := <-w.ResultChan():
			if u, ok := ev.Object.(*unstructured.Unstructured); ok && ev.Type == watch.Added && u.GetName() == "keep" {
				check("watch", u)
				if u.GetResourceVersion() != got.GetResourceVersion() {
					t.Errorf("watch rv %s ≠ get rv %s", u.GetResourceVersion(), got.GetResourceVersion())
				}
				seen = true
			}
		case <-deadline:
			t.Fatal("watch never saw keep")
		}
	}
	f.Restart(t, 0)
	got, err = sandboxes(s, "default").Get(ctx, "keep", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check("get after a node restart", got)
	checkSpec("get after a node restart", got)

	big := sandboxObj("big", map[string]string{"blob": strings.Repeat("x", nodeapi.MaxObjectBytes)})
	if _, err := sandboxes(s, "default").Create(ctx, big, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("create past the object bound = %v, want 422", err)
	}
}

func TestUpdate_LabelsModeLeaseImmutablesAndConflicts(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 1)
	s := startServer(t, f)
	ctx := context.Background()
	out, err := sandboxes(s, "default").Create(ctx, sandboxObj("mut", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := out.GetAnnotations()[sandbox.AnnotationClaimID]
	node := f.Nodes[0].Client
	patch := func(pt types.PatchType, body string) (*unstructured.Unstructured, error) {
		return sandboxes(s, "default").Patch(ctx, "mut", pt, []byte(body), metav1.PatchOptions{})
	}
	u, err := patch(types.MergePatchType, `{"metadata":{"labels":{"team":"a"},"annotations":{"why":"test"}}}`)
	if err != nil || u.GetLabels()["team"] != "a" || u.GetAnnotations()["why"] != "test" || u.GetUID() != out.GetUID() {
		t.Fatalf("merge patch labels = %v, %v", u, err)
	}
	if u, err = patch(types.JSONPatchType, `[{"op":"add","path":"/metadata/labels/tier","value":"gold"}]`); err != nil || u.GetLabels()["tier"] != "gold" {
		t.Fatalf("json patch = %v, %v", u, err)
	}
	if u, err = patch(types.StrategicMergePatchType, `{"metadata":{"labels":{"tier":null}}}`); err != nil || u.GetLabels()["tier"] != "" || u.GetLabels()["team"] != "a" {
		t.Fatalf("strategic merge patch = %v, %v", u, err)
	}
	if sb, _ := node.Get(ctx, id); sb.Labels["team"] != "a" || sb.Annotations["why"] != "test" {
		t.Fatalf("node records labels %v annotations %v", sb.Labels, sb.Annotations)
	}

	// operatingMode pauses and resumes the microVM.
	if u, err = patch(types.MergePatchType, `{"spec":{"operatingMode":"Suspended"}}`); err != nil {
		t.Fatal(err)
	}
	if sb, _ := node.Get(ctx, id); !sb.Paused {
		t.Fatal("operatingMode Suspended did not pause the microVM")
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	if fmt.Sprint(conds) == "" || !strings.Contains(fmt.Sprint(conds), "Suspended") {
		t.Fatalf("conditions after suspend: %v", conds)
	}
	if _, err = patch(types.MergePatchType, `{"spec":{"operatingMode":"Running"}}`); err != nil {
		t.Fatal(err)
	}
	if sb, _ := node.Get(ctx, id); sb.Paused {
		t.Fatal("operatingMode Running did not resume the microVM")
	}

	// shutdownTime renews the lease.
	want := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
	if u, err = patch(types.MergePatchType, `{"spec":{"shutdownTime":"`+want.Format(time.RFC3339)+`"}}`); err != nil {
		t.Fatal(err)
	}
	if sb, _ := node.Get(ctx, id); sb.Deadline.Sub(want).Abs() > 2*time.Second {
		t.Fatalf("deadline %v after asking for %v", sb.Deadline, want)
	}

	// Any other spec change is 422 naming the field.
	_, err = patch(types.JSONPatchType, `[{"op":"replace","path":"/spec/podTemplate/spec/containers/0/image","value":"other:2"}]`)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.podTemplate") {
		t.Fatalf("image patch = %v, want 422 naming spec.podTemplate", err)
	}
	if _, err = patch(types.MergePatchType, `{"spec":{"operatingMode":"Sleeping"}}`); !apierrors.IsInvalid(err) {
		t.Fatalf("unknown operatingMode = %v, want 422", err)
	}

	// A stale resourceVersion is 409.
	cur, err := sandboxes(s, "default").Get(ctx, "mut", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stale := cur.DeepCopy()
	cur.SetLabels(map[string]string{"team": "b"})
	if _, err := sandboxes(s, "default").Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update: %v", err)
	}
	stale.SetLabels(map[string]string{"team": "c"})
	if _, err := sandboxes(s, "default").Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("stale update = %v, want 409", err)
	}
	if _, err := sandboxes(s, "default").Update(ctx, stale, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsBadRequest(err) {
		t.Fatalf("dry-run update = %v, want 400", err)
	}
}

func TestUpdate_ServerSideApply(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 1)
	s := startServer(t, f)
	ctx := context.Background()
	apply := func(labels map[string]any) (*unstructured.Unstructured, error) {
		u := sandboxObj("ssa", nil)
		u.Object["metadata"].(map[string]any)["labels"] = labels
		b, _ := json.Marshal(u.Object)
		return sandboxes(s, "default").Patch(ctx, "ssa", types.ApplyPatchType, b, metav1.PatchOptions{FieldManager: "me"})
	}
	u, err := apply(map[string]any{"team": "a"})
	if err != nil || u.GetLabels()["team"] != "a" || len(u.GetManagedFields()) == 0 {
		t.Fatalf("apply-create = %v, %v", u, err)
	}
	if u, err = apply(map[string]any{"team": "b"}); err != nil || u.GetLabels()["team"] != "b" {
		t.Fatalf("second apply = %v, %v", u, err)
	}
	if u, err = apply(map[string]any{"team": "b", "x": "y"}); err != nil || u.GetLabels()["x"] != "y" {
		t.Fatalf("third apply = %v, %v", u, err)
	}
	got, err := sandboxes(s, "default").Get(ctx, "ssa", metav1.GetOptions{})
	if err != nil || len(got.GetManagedFields()) == 0 || got.GetManagedFields()[0].Manager != "me" {
		t.Fatalf("managedFields not kept: %v %v", got.GetManagedFields(), err)
	}
}

func TestFork_ChildrenHaveValidNamesReadableAtOnce(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 1)
	s := startServer(t, f)
	ctx := context.Background()
	if _, err := sandboxes(s, "default").Create(ctx, sandboxObj("parent", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	body := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "SandboxForkOptions", "count": int64(2)}}
	body.SetName("parent")
	res, err := sandboxes(s, "default").Create(ctx, body, metav1.CreateOptions{}, "fork")
	if err != nil {
		t.Fatal(err)
	}
	kids, _, _ := unstructured.NestedSlice(res.Object, "children")
	if len(kids) != 2 {
		t.Fatalf("fork result %v", res.Object)
	}
	for i, k := range kids {
		name := k.(map[string]any)["name"].(string)
		if want := fmt.Sprintf("parent-fork-%d", i+1); name != want {
			t.Errorf("child %d named %q, want %q", i, name, want)
		}
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("child name %q: %v", name, errs)
		}
		if _, err := sandboxes(s, "default").Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("get child %s: %v", name, err)
		}
	}
}

func TestKubectl_LabelAnnotatePatch(t *testing.T) {
	needKubectl(t)
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 2)
	s := startServer(t, f)
	mustKubectl(t, s, "create", "-f", writeManifest(t, "kb"))
	mustKubectl(t, s, "create", "-f", writeManifest(t, "other"))
	mustKubectl(t, s, "label", "sandbox", "kb", "team=a")
	mustKubectl(t, s, "annotate", "sandbox", "kb", "owner=me")
	if out := mustKubectl(t, s, "get", "sandboxes", "-l", "team=a", "-o", "name"); out != "sandbox.agents.x-k8s.io/kb" {
		t.Fatalf("get -l team=a: %q", out)
	}
	if out := mustKubectl(t, s, "get", "sandbox", "kb", "-o", "jsonpath={.metadata.annotations.owner}"); out != "me" {
		t.Fatalf("annotation: %q", out)
	}
	id := mustKubectl(t, s, "get", "sandbox", "kb", "-o", "jsonpath={.metadata.annotations.sandbox\\.cocoonstack\\.io/claim-id}")
	mustKubectl(t, s, "patch", "sandbox", "kb", "--type=merge", "-p", `{"spec":{"operatingMode":"Suspended"}}`)
	if sb, err := f.Nodes[0].Client.Get(context.Background(), id); err != nil || !sb.Paused {
		t.Fatalf("kubectl patch Suspended: node says %+v %v", sb, err)
	}
	mustKubectl(t, s, "patch", "sandbox", "kb", "--type=merge", "-p", `{"spec":{"operatingMode":"Running"}}`)
	if sb, err := f.Nodes[0].Client.Get(context.Background(), id); err != nil || sb.Paused {
		t.Fatalf("kubectl patch Running: node says %+v %v", sb, err)
	}
	out, err := s.kubectl(t, "patch", "sandbox", "kb", "--type=json", "-p", `[{"op":"replace","path":"/spec/podTemplate/spec/containers/0/image","value":"x:2"}]`)
	if err == nil || !strings.Contains(out, "is invalid") || !strings.Contains(out, "spec.podTemplate") {
		t.Fatalf("kubectl patch image: %v\n%s", err, out)
	}
	if out, err := s.kubectl(t, "create", "-f", writeManifest(t, "kb")); err == nil || !strings.Contains(out, "AlreadyExists") {
		t.Fatalf("second kubectl create: %v\n%s", err, out)
	}
	p := filepath.Join(t.TempDir(), "apply.yaml")
	_ = os.WriteFile(p, []byte(strings.ReplaceAll(manifest, "%s", "kb")+"  operatingMode: Running\n"), 0o600)
	if out, err := s.kubectl(t, "apply", "--server-side", "--force-conflicts", "-f", p); err != nil {
		t.Fatalf("kubectl apply --server-side: %v\n%s", err, out)
	}
	// Client-side apply (last-applied annotation, strategic merge patch).
	ca := filepath.Join(t.TempDir(), "client-apply.yaml")
	_ = os.WriteFile(ca, []byte(strings.Replace(strings.ReplaceAll(manifest, "%s", "other"), "  name: other\n", "  name: other\n  labels: {tier: gold}\n", 1)), 0o600)
	if out, err := s.kubectl(t, "apply", "-f", ca); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	if out := mustKubectl(t, s, "get", "sandbox", "other", "-o", "jsonpath={.metadata.labels.tier}"); out != "gold" {
		t.Fatalf("label after kubectl apply: %q", out)
	}
	mustKubectl(t, s, "delete", "sandbox", "kb", "other", "--timeout=60s")
}
