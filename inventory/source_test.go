package inventory

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
)

func unstructuredOf(t *testing.T, in *NodeInventory) *unstructured.Unstructured {
	t.Helper()
	in.APIVersion, in.Kind = SchemeGroupVersion.String(), "NodeInventory"
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(in)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func TestSource_FollowsInventories(t *testing.T) {
	scheme := runtime.NewScheme()
	client := dynfake.NewSimpleDynamicClientWithCustomListKinds(scheme,
		map[schema.GroupVersionResource]string{GroupVersionResource: "NodeInventoryList"},
		unstructuredOf(t, inv("n1", "10.0.0.1:7000", Entry{Name: "ns/a", ID: "sb_1", Phase: "Running"})))
	src := NewSource(client, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { src.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if err := src.WaitForSync(sctx); err != nil {
		t.Fatal(err)
	}
	if it, ok := src.View().ByName("ns/a"); !ok || it.Node.Address != "10.0.0.1:7000" {
		t.Fatalf("after sync ByName(ns/a) = %+v, %v", it, ok)
	}

	n2 := unstructuredOf(t, inv("n2", "10.0.0.2:7000", Entry{Name: "ns/b", ID: "sb_2", Phase: "Running"}))
	if _, err := client.Resource(GroupVersionResource).Create(ctx, n2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool { _, ok := src.View().ByID("sb_2"); return ok }, 10*time.Second, 10*time.Millisecond)

	if err := client.Resource(GroupVersionResource).Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool { _, ok := src.View().ByName("ns/a"); return !ok }, 10*time.Second, 10*time.Millisecond)
	if got := len(src.View().Nodes()); got != 1 {
		t.Fatalf("nodes after delete = %d, want 1", got)
	}
}

func TestStatic(t *testing.T) {
	var s Static
	if s.View().Len() != 0 {
		t.Fatal("zero Static not empty")
	}
	s.Set(inv("n1", "", Entry{Name: "ns/a"}))
	if s.View().Len() != 1 {
		t.Fatal("Set not visible")
	}
}
