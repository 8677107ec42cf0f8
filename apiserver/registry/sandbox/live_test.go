package sandboxstore

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/sandbox"
)

// fakeLive is a LiveSource of fixed changes at revisions 101…; revisions
// at or below expireBelow are unknown.
type fakeLive struct {
	items       []inventory.Versioned
	changes     []inventory.Change
	expireBelow atomic.Uint64 // the watcher reads it while the test moves it
	wake        chan struct{}
	// streaming is what Streaming reports for every node.
	streaming bool
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

func (f *fakeLive) Streaming(string) bool { return f.streaming }

func liveItem(name, phase string) inventory.Item {
	return inventory.Item{Node: &inventory.Node{Name: "n1", Address: "a:1"}, Entry: &inventory.Entry{Name: name, ID: "sb_" + name, Phase: phase, ClaimRef: name}}
}

func liveStorage(src LiveSource) *sandboxStorage {
	return Resources(Config{Live: src, Fleet: &nameFleet{}})["sandboxes"].(*sandboxStorage)
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

// recordFleet answers lookups with rec, as the node holding it would.
type recordFleet struct {
	Fleet
	rec nodeapi.Sandbox
}

func (f recordFleet) ByRef(context.Context, string) (nodeapi.Sandbox, error)     { return f.rec, nil }
func (f recordFleet) LiveByRef(context.Context, string) (nodeapi.Sandbox, error) { return f.rec, nil }

// Every resourceVersion is a revision of the live view: a Get of the state
// the view holds carries the revision the view gave it (what its lists and
// watches carry); a Get of a state the view does not hold (the node's
// stream is down) carries the view's revision from before the node was
// asked, never a content hash, and an Update naming a resourceVersion is
// then 409 rather than checked against nothing.
func TestGet_ResourceVersionIsALiveRevisionNeverAContentHash(t *testing.T) {
	rec := nodeapi.Sandbox{ID: "sb_a", Node: "n1", ClaimRef: "ns/a", Template: "img:1"}
	e := inventory.EntryOf(&rec)
	node := &inventory.Node{Name: "n1", Address: "a:1"}
	ctx := genericapirequest.WithNamespace(context.Background(), "ns")
	get := func(src *fakeLive, rec nodeapi.Sandbox) (*sandboxStorage, string) {
		t.Helper()
		s := Resources(Config{Live: src, Fleet: recordFleet{rec: rec}})["sandboxes"].(*sandboxStorage)
		obj, err := s.Get(ctx, "a", &metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s, obj.(*sandboxv1beta1.Sandbox).ResourceVersion
	}
	held := &fakeLive{items: []inventory.Versioned{{Item: inventory.Item{Node: node, Entry: &e}, Rev: 42}}}
	if _, rv := get(held, rec); rv != "42" {
		t.Fatalf("get of the state the view holds: rv %s, want the view's 42", rv)
	}
	paused := rec
	paused.Paused = true // the node's state is newer than the view's entry
	pe := inventory.EntryOf(&paused)
	s, rv := get(held, paused)
	if rv != "100" || rv == rvString(inventory.Hash("n1", &pe)) {
		t.Fatalf("get of a state the view does not hold: rv %s, want the view's revision before the read (100)", rv)
	}
	for _, stale := range []string{"42", "100"} {
		in := synthesize(&paused, 0)
		in.ResourceVersion = stale
		if _, _, err := s.Update(ctx, "a", rest.DefaultUpdatedObjectInfo(in), nil, nil, false, &metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			t.Fatalf("update with rv %s while the view lags the node: %v, want 409", stale, err)
		}
	}
	// Held: an older revision is 409 before anything is written.
	s, _ = get(held, rec)
	in := synthesize(&rec, 41)
	if _, _, err := s.Update(ctx, "a", rest.DefaultUpdatedObjectInfo(in), nil, nil, false, &metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("update with a stale rv: %v, want 409", err)
	}
}

func TestResources_RequiresTheLiveView(t *testing.T) {
	if err := (Config{Fleet: &nameFleet{}}).Validate(); err == nil || !strings.Contains(err.Error(), "Live") {
		t.Fatalf("Validate without Live = %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Resources without a live view did not panic")
		}
	}()
	Resources(Config{Fleet: &nameFleet{}})
}
