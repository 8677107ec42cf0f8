package apiserver_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/sandbox"
)

var gvr = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}

func sandboxObj(name string, annotations map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agents.x-k8s.io/v1beta1",
		"kind":       "Sandbox",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{"podTemplate": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "main", "image": image}},
		}}},
	}}
	if annotations != nil {
		u.SetAnnotations(annotations)
	}
	return u
}

func sandboxes(s *server, ns string) dynamic.ResourceInterface {
	return s.Dynamic.Resource(gvr).Namespace(ns)
}

func TestCreate_ClaimsAndReadsNeverWaitForAPublish(t *testing.T) {
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 2, 2)
	s1, s2 := startServer(t, f), startServer(t, f)
	ctx := context.Background()

	before := time.Now().Add(-time.Second)
	out, err := sandboxes(s1, "default").Create(ctx, sandboxObj("web", map[string]string{sandbox.AnnotationTTLSeconds: "120"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ann := out.GetAnnotations()
	for _, k := range []string{sandbox.AnnotationClaimID, sandbox.AnnotationAddress, sandbox.AnnotationToken, sandbox.AnnotationDeadline} {
		if ann[k] == "" {
			t.Errorf("create response lacks annotation %s: %v", k, ann)
		}
	}
	dl, err := time.Parse(time.RFC3339, ann[sandbox.AnnotationDeadline])
	if err != nil || !strings.HasSuffix(ann[sandbox.AnnotationDeadline], "Z") || dl.Nanosecond() != 0 {
		t.Errorf("deadline %q is not RFC3339 UTC whole seconds", ann[sandbox.AnnotationDeadline])
	}
	if out.GetUID() == "" || out.GetCreationTimestamp().Time.Before(before) {
		t.Errorf("create response uid=%q creationTimestamp=%v", out.GetUID(), out.GetCreationTimestamp())
	}
	nodeName, _, _ := unstructured.NestedString(out.Object, "status", "nodeName")
	if nodeName == "" {
		t.Error("create response has no status.nodeName")
	}
	conds, _, _ := unstructured.NestedSlice(out.Object, "status", "conditions")
	if len(conds) != 1 || conds[0].(map[string]any)["type"] != "Ready" || conds[0].(map[string]any)["status"] != "True" {
		t.Errorf("create response conditions = %v", conds)
	}

	// Not yet published: Get works on this replica and on a second one.
	for name, s := range map[string]*server{"first": s1, "second (empty claim index)": s2} {
		got, err := sandboxes(s, "default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s replica: get right after create: %v", name, err)
		}
		if got.GetAnnotations()[sandbox.AnnotationClaimID] != ann[sandbox.AnnotationClaimID] {
			t.Fatalf("%s replica: got claim %q, want %q", name, got.GetAnnotations()[sandbox.AnnotationClaimID], ann[sandbox.AnnotationClaimID])
		}
		if l := got.GetLabels(); l[sandbox.LabelNode] != nodeName || l[sandbox.LabelPhase] != "Running" || l[sandbox.LabelClaim] != "web" || l[sandbox.LabelTemplate] != image {
			t.Errorf("%s replica: labels = %v", name, l)
		}
		if got.GetCreationTimestamp().Time.IsZero() || got.GetResourceVersion() == "" {
			t.Errorf("%s replica: creationTimestamp=%v rv=%q", name, got.GetCreationTimestamp(), got.GetResourceVersion())
		}
	}
	// Never published: a name-pinned list and a plain list on the second
	// replica include the claim (its live view follows the node's stream).
	fleettest.Eventually(t, 5*time.Second, func() bool {
		pinned, err := sandboxes(s2, "default").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=web"})
		return err == nil && len(pinned.Items) == 1
	}, "the second replica's pinned list never held the unpublished claim")
	var all *unstructured.UnstructuredList
	fleettest.Eventually(t, 5*time.Second, func() bool {
		all, err = sandboxes(s2, "").List(ctx, metav1.ListOptions{})
		return err == nil && len(all.Items) == 1
	}, "the second replica never listed the unpublished claim")
	if all.Items[0].GetNamespace() != "default" || all.GetResourceVersion() == "0" || all.GetResourceVersion() == "" {
		t.Fatalf("list = %v", all)
	}

	// generateName works; a repeated name is 409 AlreadyExists.
	gen := sandboxObj("", nil)
	gen.SetGenerateName("job-")
	g, err := sandboxes(s1, "default").Create(ctx, gen, metav1.CreateOptions{})
	if err != nil || !strings.HasPrefix(g.GetName(), "job-") || len(g.GetName()) <= len("job-") {
		t.Fatalf("generateName create = %v, %v", g, err)
	}
	if _, err := sandboxes(s1, "default").Create(ctx, sandboxObj("web", nil), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("repeated create = %v; want 409 AlreadyExists", err)
	}
}

func TestCreate_BadRequestsSpendNothing(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 2)
	s := startServer(t, f)
	ctx := context.Background()
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	cases := map[string]func() (*unstructured.Unstructured, metav1.CreateOptions){
		"dry-run": func() (*unstructured.Unstructured, metav1.CreateOptions) {
			return sandboxObj("a", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		},
		"bad ttl": func() (*unstructured.Unstructured, metav1.CreateOptions) {
			return sandboxObj("a", map[string]string{sandbox.AnnotationTTLSeconds: "-3"}), metav1.CreateOptions{}
		},
		"unknown net": func() (*unstructured.Unstructured, metav1.CreateOptions) {
			return sandboxObj("a", map[string]string{sandbox.AnnotationNet: "bogus"}), metav1.CreateOptions{}
		},
		"shutdownTime in the past": func() (*unstructured.Unstructured, metav1.CreateOptions) {
			u := sandboxObj("a", nil)
			_ = unstructured.SetNestedField(u.Object, past, "spec", "shutdownTime")
			return u, metav1.CreateOptions{}
		},
		"invalid name": func() (*unstructured.Unstructured, metav1.CreateOptions) {
			return sandboxObj("Bad_Name", nil), metav1.CreateOptions{}
		},
		"no name": func() (*unstructured.Unstructured, metav1.CreateOptions) {
			return sandboxObj("", nil), metav1.CreateOptions{}
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			obj, opts := mk()
			_, err := sandboxes(s, "default").Create(ctx, obj, opts)
			if !apierrors.IsBadRequest(err) && !apierrors.IsInvalid(err) {
				t.Fatalf("err = %v, want 400", err)
			}
			if w := fleettest.Warm(t, f.Nodes[0], image); w != 2 {
				t.Fatalf("warm count = %d after a rejected create, want 2", w)
			}
		})
	}
}

func TestCreate_NoWarmCapacityIs503(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 1)
	s := startServer(t, f)
	ctx := context.Background()
	if _, err := sandboxes(s, "default").Create(ctx, sandboxObj("a", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.SetWarm(t, spec, 0) // drained
	_, err := sandboxes(s, "default").Create(ctx, sandboxObj("b", nil), metav1.CreateOptions{})
	if !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("create on a drained pool = %v, want 503", err)
	}
	if !strings.Contains(err.Error(), image) {
		t.Errorf("503 message %q does not name the template", err)
	}
	other := sandboxObj("c", nil)
	_ = unstructured.SetNestedField(other.Object, []any{map[string]any{"name": "m", "image": "never/warm:1"}}, "spec", "podTemplate", "spec", "containers")
	if _, err := sandboxes(s, "default").Create(ctx, other, metav1.CreateOptions{}); !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("create for an unknown pool = %v, want 503", err)
	}
}

func TestDelete_ReleasesByClaimIDAndAnswersWhenGone(t *testing.T) {
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 1, 1)
	s1, s2 := startServer(t, f), startServer(t, f)
	ctx := context.Background()
	out, err := sandboxes(s1, "ns1").Create(ctx, sandboxObj("gone", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := out.GetAnnotations()[sandbox.AnnotationClaimID]
	if err := sandboxes(s2, "ns1").Delete(ctx, "gone", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsBadRequest(err) {
		t.Fatalf("dry-run delete = %v, want 400", err)
	}
	if _, err := s1.Fleet.LiveByID(ctx, id); err != nil {
		t.Fatalf("dry-run delete released the sandbox: %v", err)
	}
	if err := sandboxes(s2, "ns1").Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range f.Nodes {
		if _, err := n.Client.Get(ctx, id); err == nil {
			t.Fatalf("node %s still holds %s after delete returned", n.Name, id)
		}
	}
	if _, err := sandboxes(s1, "ns1").Get(ctx, "gone", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete = %v, want 404", err)
	}
	if err := sandboxes(s1, "ns1").Delete(ctx, "gone", metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("second delete = %v, want 404", err)
	}
}

func TestDeleteCollectionIs405(t *testing.T) {
	f := fleettest.Start(t, 1)
	s := startServer(t, f)
	ctx := context.Background()
	_, err := sandboxes(s, "default").Update(ctx, sandboxObj("x", nil), metav1.UpdateOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("update of a missing sandbox = %v, want 404", err)
	}
	_, err = sandboxes(s, "default").Patch(ctx, "x", "application/merge-patch+json", []byte(`{}`), metav1.PatchOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("patch of a missing sandbox = %v, want 404", err)
	}
	err = sandboxes(s, "default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	if !apierrors.IsMethodNotSupported(err) {
		t.Errorf("deletecollection = %v, want 405", err)
	}
	_ = http.StatusMethodNotAllowed
}
