package sandboxstore

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/sandbox"
)

// fakeLive is a LiveSource of fixed changes at revisions 101…; revisions
// at or below expireBelow are unknown.
type fakeLive struct {
	items       []inventory.Versioned
	changes     []inventory.Change
	expireBelow atomic.Uint64 // the watcher reads it while the test moves it
	wake        chan struct{}
}

func (f *fakeLive) List(keep func(inventory.Item) bool) ([]inventory.Versioned, uint64) {
	var out []inventory.Versioned
	for _, it := range f.items {
		if keep(it.Item) {
			out = append(out, it)
		}
	}
	return out, 100
}

func (f *fakeLive) Since(rv uint64, max int) ([]inventory.Change, uint64, <-chan struct{}, error) {
	last := uint64(100 + len(f.changes))
	if rv < f.expireBelow.Load() || rv < 100 || rv > last {
		return nil, 0, nil, inventory.ErrExpired
	}
	return f.changes[rv-100:], last, f.wake, nil
}

func (f *fakeLive) Current(name string) (inventory.Versioned, bool) {
	for _, it := range f.items {
		if it.Entry.Name == name {
			return it, true
		}
	}
	return inventory.Versioned{}, false
}

func (f *fakeLive) CurrentByID(id string) (inventory.Versioned, bool) {
	for _, it := range f.items {
		if it.Entry.ID == id {
			return it, true
		}
	}
	return inventory.Versioned{}, false
}

func (f *fakeLive) Rev() uint64 { return uint64(100 + len(f.changes)) }

func (f *fakeLive) Streaming(string) bool { return true }

func liveItem(name, phase string) inventory.Item {
	return inventory.Item{Node: &inventory.Node{Name: "n1", Address: "a:1"}, Entry: &inventory.Entry{Name: name, ID: "sb_" + name, Phase: phase, ClaimRef: name}}
}

func liveStorage(src LiveSource) *sandboxStorage {
	return Resources(Config{Live: src, View: inventory.NewStatic()})["sandboxes"].(*sandboxStorage)
}

func events(t *testing.T, w watch.Interface, n int) []string {
	t.Helper()
	var out []string
	for len(out) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return out
			}
			name := ""
			switch o := ev.Object.(type) {
			case *sandboxv1beta1.Sandbox:
				name = o.Name
			case *metav1.Status:
				name = string(o.Reason)
			}
			out = append(out, string(ev.Type)+" "+name)
		case <-time.After(2 * time.Second):
			t.Fatalf("after %v: no event", out)
		}
	}
	return out
}

func TestLiveWatch_SelectorTurnsChangesIntoAddedAndDeleted(t *testing.T) {
	run, paused := liveItem("ns/a", sandbox.PhaseRunning), liveItem("ns/a", sandbox.PhasePaused)
	src := &fakeLive{wake: make(chan struct{}), changes: []inventory.Change{
		{Rev: 101, Type: inventory.Modified, Item: paused, Old: run}, // leaves phase=Running
		{Rev: 102, Type: inventory.Modified, Item: run, Old: paused}, // enters it
		{Rev: 103, Type: inventory.Modified, Item: run, Old: run},
		{Rev: 104, Type: inventory.Deleted, Item: run},
	}}
	s := liveStorage(src)
	sel := labels.SelectorFromSet(labels.Set{sandbox.LabelPhase: sandbox.PhaseRunning})
	ctx := genericapirequest.WithNamespace(context.Background(), "ns")
	w, err := s.Watch(ctx, &metainternalversion.ListOptions{ResourceVersion: "100", LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	got := events(t, w, 4)
	want := []string{"DELETED a", "ADDED a", "MODIFIED a", "DELETED a"}
	if len(got) != 4 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestLiveWatch_UnknownRevisionIs410AndAnOverrunWatcherGetsAn410Event(t *testing.T) {
	src := &fakeLive{wake: make(chan struct{})}
	s := liveStorage(src)
	ctx := genericapirequest.WithNamespace(context.Background(), "ns")
	if _, err := s.Watch(ctx, &metainternalversion.ListOptions{ResourceVersion: "7"}); !apierrors.IsResourceExpired(err) {
		t.Fatalf("watch from an unknown revision: %v, want 410 Expired", err)
	}
	w, err := s.Watch(ctx, &metainternalversion.ListOptions{ResourceVersion: "100"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// The history moves past the watcher's position.
	src.expireBelow.Store(200)
	close(src.wake)
	if got := events(t, w, 1); len(got) != 1 || got[0] != "ERROR Expired" {
		t.Fatalf("overrun watcher: %v", got)
	}
}

func TestLiveList_IsAtOneRevisionWithPerObjectRevisions(t *testing.T) {
	src := &fakeLive{items: []inventory.Versioned{{Item: liveItem("ns/b", sandbox.PhaseRunning), Rev: 99}, {Item: liveItem("ns/a", sandbox.PhaseRunning), Rev: 42}}}
	s := liveStorage(src)
	ctx := genericapirequest.WithNamespace(context.Background(), "ns")
	obj, err := s.List(ctx, &metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l := obj.(*sandboxv1beta1.SandboxList)
	if l.ResourceVersion != "100" || len(l.Items) != 2 || l.Items[0].Name != "a" || l.Items[0].ResourceVersion != "42" || l.Items[1].ResourceVersion != "99" {
		t.Fatalf("list rv %s items %+v", l.ResourceVersion, l.Items)
	}
}
