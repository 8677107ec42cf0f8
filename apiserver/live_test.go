package apiserver_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/fleetview"
	"github.com/hearthvm/hearth/nodeapi"
	hearthserver "github.com/hearthvm/hearth/server"
)

// startLive is startServer, with the live fleet view it reads.
func startLive(t *testing.T, f *fleettest.Fleet) (*server, *fleetview.Live) {
	t.Helper()
	s := startServer(t, f)
	return s, s.Live
}

func name(ev watch.Event) string {
	if u, ok := ev.Object.(*unstructured.Unstructured); ok {
		return u.GetName()
	}
	return ""
}

// No Publish anywhere below: the view is the nodes' streams.
func TestLiveWatch_ResumeFromAListGetsOnlyLaterChanges(t *testing.T) {
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 2, 2)
	s, _ := startLive(t, f)
	ctx := context.Background()
	if _, err := sandboxes(s, "default").Create(ctx, sandboxObj("a", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var list *unstructured.UnstructuredList
	fleettest.Eventually(t, 5*time.Second, func() bool {
		var err error
		list, err = sandboxes(s, "default").List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 1
	}, "a not listed")
	w, err := sandboxes(s, "default").Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := sandboxes(s, "default").Create(ctx, sandboxObj("b", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev := next(t, w, 2*time.Second)
	if ev.Type != watch.Added || name(ev) != "b" {
		t.Fatalf("first event after the list: %s %s, want ADDED b only", ev.Type, name(ev))
	}
	// An object's resourceVersion resumes too: from b's, a's delete only.
	bRV := ev.Object.(*unstructured.Unstructured).GetResourceVersion()
	if err := sandboxes(s, "default").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w, 2*time.Second); ev.Type != watch.Deleted || name(ev) != "a" {
		t.Fatalf("after delete: %s %s", ev.Type, name(ev))
	}
	w2, err := sandboxes(s, "default").Watch(ctx, metav1.ListOptions{ResourceVersion: bRV})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	if ev := next(t, w2, 2*time.Second); ev.Type != watch.Deleted || name(ev) != "a" {
		t.Fatalf("resumed from b's resourceVersion: %s %s", ev.Type, name(ev))
	}
	select {
	case ev := <-w2.ResultChan():
		t.Fatalf("unexpected %s %s", ev.Type, name(ev))
	case <-time.After(200 * time.Millisecond):
	}
}

func TestLiveWatch_UnknownResourceVersionIsGone(t *testing.T) {
	f := fleettest.Start(t, 1)
	s, live := startLive(t, f)
	ctx := context.Background()
	for _, rv := range []string{"1", "12345678901234567890", "99"} {
		_, err := sandboxes(s, "default").Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			t.Fatalf("watch from %s: %v, want 410", rv, err)
		}
	}
	// Another replica's revision (or this replica's before a restart).
	other := fleetview.New(f.View, fleetview.Config{})
	if other.Rev() != live.Rev() {
		_, err := sandboxes(s, "default").Watch(ctx, metav1.ListOptions{ResourceVersion: strconv.FormatUint(other.Rev(), 10)})
		if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			t.Fatalf("watch from another replica's revision: %v, want 410", err)
		}
	}
	if _, err := sandboxes(s, "default").Watch(ctx, metav1.ListOptions{ResourceVersion: "x"}); !apierrors.IsBadRequest(err) {
		t.Fatalf("watch from a malformed revision: %v, want 400", err)
	}
}

func TestLiveWatch_WatchListGetsAddedThenInitialEventsEndBookmark(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 2)
	s, _ := startLive(t, f)
	ctx := context.Background()
	for _, n := range []string{"x", "y"} {
		if _, err := sandboxes(s, "default").Create(ctx, sandboxObj(n, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	yes := true
	fleettest.Eventually(t, 5*time.Second, func() bool {
		l, err := sandboxes(s, "default").List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 2
	}, "x and y not listed")
	w, err := sandboxes(s, "default").Watch(ctx, metav1.ListOptions{SendInitialEvents: &yes, AllowWatchBookmarks: true,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	got := []string{}
	for {
		ev := next(t, w, 2*time.Second)
		if ev.Type == watch.Bookmark {
			u := ev.Object.(*unstructured.Unstructured)
			if u.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" || u.GetResourceVersion() == "" {
				t.Fatalf("bookmark %v", u)
			}
			break
		}
		got = append(got, string(ev.Type)+" "+name(ev))
	}
	if strings.Join(got, ",") != "ADDED x,ADDED y" {
		t.Fatalf("initial events %v", got)
	}
}

// kubectl get -w lists, then watches from the list's resourceVersion:
// every existing sandbox is printed once, a new one once more.
func TestLiveWatch_KubectlGetWatchPrintsEachSandboxOnce(t *testing.T) {
	needKubectl(t)
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 3)
	s, _ := startLive(t, f)
	ctx := context.Background()
	for _, n := range []string{"one", "two"} {
		if _, err := sandboxes(s, "default").Create(ctx, sandboxObj(n, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(kctx, "kubectl", "--kubeconfig", s.Kubeconfig, "get", "sandboxes", "-w", "-o", "name")
	cmd.Env = append(os.Environ(), "KUBECACHEDIR="+t.TempDir())
	var mu sync.Mutex
	var out strings.Builder
	w := writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return out.Write(p)
	})
	printed := func() string {
		mu.Lock()
		defer mu.Unlock()
		return out.String()
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The list printed (kubectl then watches from its resourceVersion, so
	// a create after it arrives as an event however late the watch starts).
	fleettest.Eventually(t, 30*time.Second, func() bool {
		p := printed()
		return strings.Contains(p, "/one") && strings.Contains(p, "/two")
	}, "kubectl get -w never listed: %q", printed())
	if _, err := sandboxes(s, "default").Create(ctx, sandboxObj("three", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, 30*time.Second, func() bool { return strings.Contains(printed(), "/three") }, "kubectl get -w never printed three: %q", printed())
	time.Sleep(200 * time.Millisecond) // a bounded window for a wrong repeat (a negative check)
	cancel()
	_ = cmd.Wait()
	lines := strings.Fields(printed())
	count := map[string]int{}
	for _, l := range lines {
		count[l]++
	}
	for _, n := range []string{"one", "two", "three"} {
		if count["sandbox.agents.x-k8s.io/"+n] != 1 {
			t.Fatalf("kubectl get -w printed %s %d times:\n%s", n, count["sandbox.agents.x-k8s.io/"+n], printed())
		}
	}
}

// A controller that lists (or watches) and then updates passes the
// resourceVersion the list gave the object: accepted while current, 409
// once the object changed.
func TestLiveUpdate_AcceptsTheListRevisionWhileCurrent(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 1)
	s, _ := startLive(t, f)
	ctx := context.Background()
	if _, err := sandboxes(s, "default").Create(ctx, sandboxObj("u", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var item unstructured.Unstructured
	fleettest.Eventually(t, 5*time.Second, func() bool {
		l, err := sandboxes(s, "default").List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 1 {
			return false
		}
		item = l.Items[0]
		return true
	}, "u not listed")
	// The object as read (a list item carries no spec), with the list's
	// resourceVersion set by hand: what a controller holding the list item sends.
	got, err := sandboxes(s, "default").Get(ctx, "u", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.SetResourceVersion(item.GetResourceVersion())
	stale := got.DeepCopy()
	got.SetLabels(map[string]string{"team": "a"})
	if _, err := sandboxes(s, "default").Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update with the list's resourceVersion: %v", err)
	}
	stale.SetLabels(map[string]string{"team": "b"})
	fleettest.Eventually(t, 5*time.Second, func() bool {
		_, err := sandboxes(s, "default").Update(ctx, stale, metav1.UpdateOptions{})
		return apierrors.IsConflict(err)
	}, "update with a stale list resourceVersion is not 409")
}

// Get renders the resourceVersion the list and the watch give the same
// state (a revision of the replica's live view, not a content hash), so
// `kubectl get -o yaml` then `kubectl replace` is optimistic concurrency
// against the same counter, and a watch may resume from a Get.
func TestLiveGet_ResourceVersionIsTheListAndWatchRevision(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 1)
	s, live := startLive(t, f)
	ctx := context.Background()
	rc := sandboxes(s, "default")
	list0, err := rc.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := rc.Watch(ctx, metav1.ListOptions{ResourceVersion: list0.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	created, err := rc.Create(ctx, sandboxObj("g", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// next returns the next watch event about g, waiting at most 5 s.
	next := func() watch.Event {
		t.Helper()
		for {
			select {
			case ev := <-w.ResultChan():
				if name(ev) == "g" {
					return ev
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no watch event for g within 5s")
			}
		}
	}

	// get, list and the last watch event agree on the resourceVersion.
	agree := func(step string, ev watch.Event) *unstructured.Unstructured {
		t.Helper()
		got, err := rc.Get(ctx, "g", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l, err := rc.List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 1 {
			t.Fatalf("%s: list %v %v", step, l, err)
		}
		evRV := ev.Object.(*unstructured.Unstructured).GetResourceVersion()
		if got.GetResourceVersion() != l.Items[0].GetResourceVersion() || got.GetResourceVersion() != evRV {
			t.Fatalf("%s: get resourceVersion %s, list %s, watch %s; want one", step, got.GetResourceVersion(), l.Items[0].GetResourceVersion(), evRV)
		}
		if rv, _ := strconv.ParseUint(got.GetResourceVersion(), 10, 64); rv > live.Rev() || rv == 0 {
			t.Fatalf("%s: resourceVersion %s is not a revision of the live view (at %d)", step, got.GetResourceVersion(), live.Rev())
		}
		return got
	}
	if ev := next(); ev.Type != watch.Added {
		t.Fatalf("first event %s", ev.Type)
	} else {
		agree("after create", ev)
	}
	if created.GetResourceVersion() == "" {
		t.Fatal("create answered no resourceVersion")
	}

	// kubectl get -o yaml, edit, kubectl replace: accepted, and the
	// answer carries the new revision the watch reports.
	got, err := rc.Get(ctx, "g", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stale := got.DeepCopy()
	got.SetLabels(map[string]string{"team": "a"})
	replaced, err := rc.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("replace with the Get's resourceVersion: %v", err)
	}
	ev := next()
	if ev.Type != watch.Modified {
		t.Fatalf("after replace: %s", ev.Type)
	}
	now := agree("after replace", ev)
	if replaced.GetResourceVersion() != now.GetResourceVersion() {
		t.Fatalf("replace answered resourceVersion %s, get says %s", replaced.GetResourceVersion(), now.GetResourceVersion())
	}
	// The Get before the change is stale now: 409.
	stale.SetLabels(map[string]string{"team": "b"})
	if _, err := rc.Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("replace with a stale Get's resourceVersion: %v, want 409", err)
	}
	// A watch may resume from a Get's resourceVersion: no 410.
	w2, err := rc.Watch(ctx, metav1.ListOptions{ResourceVersion: now.GetResourceVersion()})
	if err != nil {
		t.Fatalf("watch from a Get's resourceVersion: %v", err)
	}
	w2.Stop()
}

// lookupCounter is a fleet that counts the live lookups by name (each one
// a request to the owning node, or to every node when this replica's
// claim-time index does not hold the name).
type lookupCounter struct {
	hearthserver.Fleet
	n atomic.Int64
}

func (c *lookupCounter) LiveByRef(ctx context.Context, ref string) (nodeapi.Sandbox, error) {
	c.n.Add(1)
	return c.Fleet.LiveByRef(ctx, ref)
}

// A watch or list pinned to one name (`kubectl get sandbox NAME -w`,
// kubectl wait and delete) reads the live view like any other: an idle
// watch and a list ask no node, and the watch still sees the name claimed
// and released on another replica, as it happens.
func TestLiveWatch_PinnedNameAsksNoNode(t *testing.T) {
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 1, 1)
	var lookups *lookupCounter
	s := startServerWith(t, f, func(o *hearthserver.Options) {
		lookups = &lookupCounter{Fleet: o.Fleet}
		o.Fleet = lookups
	})
	other, _ := startLive(t, f)
	ctx := context.Background()
	pinned := metav1.ListOptions{FieldSelector: "metadata.name=pin"}
	w, err := sandboxes(s, "default").Watch(ctx, pinned)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// Idle for a second: a polling watch (the old one asked the nodes every
	// second, the tests' harness every 50 ms) would have asked.
	select {
	case ev := <-w.ResultChan():
		t.Fatalf("idle pinned watch of a name nobody holds sent %s", ev.Type)
	case <-time.After(time.Second):
	}
	if n := lookups.n.Load(); n != 0 {
		t.Fatalf("an idle pinned watch made %d live lookups, want 0", n)
	}
	// A pinned list (kubectl wait, kubectl delete) reads the view too.
	if l, err := sandboxes(s, "default").List(ctx, pinned); err != nil || len(l.Items) != 0 {
		t.Fatalf("pinned list of a name nobody holds = %v, %v", l, err)
	}
	if n := lookups.n.Load(); n != 0 {
		t.Fatalf("a pinned list made %d live lookups, want 0", n)
	}
	if _, err := sandboxes(other, "default").Create(ctx, sandboxObj("pin", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev := next(t, w, 2*time.Second)
	if ev.Type != watch.Added || name(ev) != "pin" {
		t.Fatalf("after the claim: %s %s, want ADDED pin", ev.Type, name(ev))
	}
	addedRV := ev.Object.(*unstructured.Unstructured).GetResourceVersion()
	if err := sandboxes(other, "default").Delete(ctx, "pin", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w, 2*time.Second); ev.Type != watch.Deleted || name(ev) != "pin" {
		t.Fatalf("after the release: %s %s, want DELETED pin", ev.Type, name(ev))
	}
	if n := lookups.n.Load(); n != 0 {
		t.Fatalf("the pinned watch made %d live lookups, want 0", n)
	}
	// Resumed from the ADDED event's resourceVersion: exactly the release.
	w2, err := sandboxes(s, "default").Watch(ctx, metav1.ListOptions{FieldSelector: pinned.FieldSelector, ResourceVersion: addedRV})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	if ev := next(t, w2, 2*time.Second); ev.Type != watch.Deleted || name(ev) != "pin" {
		t.Fatalf("resumed from ADDED: %s %s, want DELETED pin", ev.Type, name(ev))
	}
}

// A pinned watch from a resourceVersion this replica does not know (a
// content hash, another replica's) is not a 410 — kubectl get NAME -w
// does not relist — but opens with the name's state: DELETED when gone, so
// kubectl wait --for=delete ends.
func TestLiveWatch_PinnedFromAnUnknownRevisionOpensWithTheState(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 1)
	s, _ := startLive(t, f)
	ctx := context.Background()
	if _, err := sandboxes(s, "default").Create(ctx, sandboxObj("here", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, 5*time.Second, func() bool {
		l, err := sandboxes(s, "default").List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 1
	}, "here not in the view")
	for _, c := range []struct {
		name string
		want watch.EventType
	}{{"gone", watch.Deleted}, {"here", watch.Added}} {
		w, err := sandboxes(s, "default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + c.name, ResourceVersion: "12345"})
		if err != nil {
			t.Fatalf("pinned watch of %s from an unknown revision: %v", c.name, err)
		}
		ev := next(t, w, 2*time.Second)
		w.Stop()
		if ev.Type != c.want || name(ev) != c.name {
			t.Fatalf("pinned watch of %s opened with %s %s, want %s", c.name, ev.Type, name(ev), c.want)
		}
	}
	// An unpinned one is 410.
	if _, err := sandboxes(s, "default").Watch(ctx, metav1.ListOptions{ResourceVersion: "12345"}); !apierrors.IsResourceExpired(err) {
		t.Fatalf("unpinned watch from an unknown revision: %v, want 410", err)
	}
}

// writerFunc is an io.Writer of a function.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
