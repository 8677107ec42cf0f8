package apiserver_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/sandbox"
)

// TestConcurrent_CreateGetListWatchDelete drives the storage from many
// goroutines while the view changes under it (run with -race).
func TestConcurrent_CreateGetListWatchDelete(t *testing.T) {
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 10, 10)
	s := startServer(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := sandboxes(s, "").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range w.ResultChan() {
		}
	}()
	defer w.Stop()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			name := fmt.Sprintf("r%d", i)
			out, err := sandboxes(s, "race").Create(ctx, sandboxObj(name, nil), metav1.CreateOptions{})
			if err != nil {
				errs <- fmt.Errorf("create %s: %w", name, err)
				return
			}
			got, err := sandboxes(s, "race").Get(ctx, name, metav1.GetOptions{})
			if err != nil || got.GetAnnotations()[sandbox.AnnotationClaimID] != out.GetAnnotations()[sandbox.AnnotationClaimID] {
				errs <- fmt.Errorf("get %s: %v", name, err)
				return
			}
			if _, err := sandboxes(s, "race").List(ctx, metav1.ListOptions{}); err != nil {
				errs <- err
				return
			}
			if err := sandboxes(s, "race").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				errs <- fmt.Errorf("delete %s: %w", name, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	list, err := sandboxes(s, "race").List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Fatalf("after deleting everything: %d items, %v", len(list.Items), err)
	}
}
