package apiserver_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hearthvm/hearth/fleet/fleettest"
)

// A Get on another API server replica (its own live view and fleet: an
// empty claim-time index), and after the node restarted, returns what the
// Create stored — spec, managedFields, labels, annotations — as the node
// records it (docs/API.md#get); it was the view's entry, without them.
func TestGet_AnotherReplicaAndARestartedNodeReturnWhatCreateStored(t *testing.T) {
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 1, 1)
	ctx := context.Background()
	s1, _ := startLive(t, f)
	in := sandboxObj("kept", map[string]string{"note": "mine"})
	in.SetLabels(map[string]string{"team": "a"})
	out, err := sandboxes(s1, "default").Create(ctx, in, metav1.CreateOptions{FieldManager: "me"})
	if err != nil {
		t.Fatal(err)
	}
	if mf := out.GetManagedFields(); len(mf) == 0 || mf[0].Manager != "me" {
		t.Fatalf("create answered managedFields %v; want the manager me", mf)
	}
	check := func(when string) {
		t.Helper()
		s, live := startLive(t, f) // another replica
		fleettest.Eventually(t, 5*time.Second, func() bool { _, ok := live.Current("default/kept"); return ok },
			"%s: the sandbox never reached the view", when)
		got, err := sandboxes(s, "default").Get(ctx, "kept", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if mf := got.GetManagedFields(); len(mf) == 0 || mf[0].Manager != "me" {
			t.Errorf("%s: managedFields %v; want the manager me", when, mf)
		}
		if got.GetLabels()["team"] != "a" || got.GetAnnotations()["note"] != "mine" {
			t.Errorf("%s: labels %v, annotations %v; want team=a and note=mine", when, got.GetLabels(), got.GetAnnotations())
		}
		img, _, _ := unstructured.NestedSlice(got.Object, "spec", "podTemplate", "spec", "containers")
		if len(img) != 1 || img[0].(map[string]any)["image"] != image {
			t.Errorf("%s: spec %v; want the created spec (containers %s)", when, got.Object["spec"], image)
		}
	}
	check("another replica")
	node, _, _ := unstructured.NestedString(out.Object, "status", "nodeName")
	restarted := false
	for i, n := range f.Nodes {
		if n.Name == node {
			f.Restart(t, i)
			restarted = true
		}
	}
	if !restarted {
		t.Fatalf("status.nodeName %q names no node", node)
	}
	check("after the node restarted")
}
