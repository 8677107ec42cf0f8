package apiserver_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/sandbox"
)

// next returns the next event or fails after timeout.
func next(t *testing.T, w watch.Interface, timeout time.Duration) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed")
		}
		return ev
	case <-time.After(timeout):
		t.Fatal("no watch event within", timeout)
	}
	return watch.Event{}
}

func TestWatch_InitialEventsBookmarkThenDiffs(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 3)
	s := startServer(t, f)
	ctx := context.Background()
	for _, n := range []string{"a", "b"} {
		if _, err := sandboxes(s, "default").Create(ctx, sandboxObj(n, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	yes := true
	w, err := sandboxes(s, "default").Watch(ctx, metav1.ListOptions{
		SendInitialEvents: &yes, AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	got := map[string]bool{}
	for i := 0; i < 2; i++ {
		ev := next(t, w, 10*time.Second)
		if ev.Type != watch.Added {
			t.Fatalf("initial event %d is %s", i, ev.Type)
		}
		got[ev.Object.(*unstructured.Unstructured).GetName()] = true
	}
	if !got["a"] || !got["b"] {
		t.Fatalf("initial ADDED for %v, want a and b", got)
	}
	ev := next(t, w, 10*time.Second)
	if ev.Type != watch.Bookmark {
		t.Fatalf("after initial events: %s, want BOOKMARK", ev.Type)
	}
	if u := ev.Object.(*unstructured.Unstructured); u.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" || u.GetResourceVersion() == "" {
		t.Fatalf("bookmark = %v", u.Object)
	}

	// Pause a: MODIFIED. Release b: DELETED. Never published: the live
	// view follows the node's stream.
	locA, _ := s.Fleet.ByRef(ctx, "default/a")
	if err := s.Fleet.Pause(ctx, locA); err != nil {
		t.Fatal(err)
	}
	locB, _ := s.Fleet.ByRef(ctx, "default/b")
	if err := s.Fleet.Release(ctx, locB); err != nil {
		t.Fatal(err)
	}
	seen := map[watch.EventType]string{}
	for len(seen) < 2 {
		ev := next(t, w, 10*time.Second)
		u := ev.Object.(*unstructured.Unstructured)
		seen[ev.Type] = u.GetName()
		if ev.Type == watch.Modified && u.GetLabels()[sandbox.LabelPhase] != sandbox.PhasePaused {
			t.Fatalf("MODIFIED a has phase %q", u.GetLabels()[sandbox.LabelPhase])
		}
	}
	if seen[watch.Modified] != "a" || seen[watch.Deleted] != "b" {
		t.Fatalf("events after pause+release: %v", seen)
	}
}

// A watch from "" opens with the current state as ADDED; a watch from a
// list's resourceVersion gets only the changes after that list; an entry
// leaving a label selector is DELETED to that watch.
func TestWatch_FromAListGetsOnlyLaterChangesFromEmptyTheState(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 1)
	s := startServer(t, f)
	ctx := context.Background()
	if _, err := sandboxes(s, "default").Create(ctx, sandboxObj("a", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var list *unstructured.UnstructuredList
	fleettest.Eventually(t, 5*time.Second, func() bool {
		var err error
		list, err = sandboxes(s, "default").List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 1
	}, "a never listed")
	w, err := sandboxes(s, "default").Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// A selector the entry leaves reports DELETED.
	w2, err := sandboxes(s, "default").Watch(ctx, metav1.ListOptions{LabelSelector: sandbox.LabelPhase + "=Running"})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	if ev := next(t, w2, 10*time.Second); ev.Type != watch.Added {
		t.Fatalf("first event from \"\" %s, want ADDED", ev.Type)
	}
	select {
	case ev := <-w.ResultChan():
		t.Fatalf("watch from the list's resourceVersion sent %s before any change", ev.Type)
	case <-time.After(300 * time.Millisecond):
	}
	loc, _ := s.Fleet.ByRef(ctx, "default/a")
	if err := s.Fleet.Pause(ctx, loc); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w2, 10*time.Second); ev.Type != watch.Deleted {
		t.Fatalf("entry leaving the selector: %s, want DELETED", ev.Type)
	}
	if ev := next(t, w, 10*time.Second); ev.Type != watch.Modified || ev.Object.(*unstructured.Unstructured).GetLabels()[sandbox.LabelPhase] != sandbox.PhasePaused {
		t.Fatalf("watch from the list after the pause: %s %v, want MODIFIED Paused", ev.Type, ev.Object)
	}
	if _, err := sandboxes(s, "default").Watch(ctx, metav1.ListOptions{FieldSelector: "spec.x=1"}); !apierrors.IsBadRequest(err) {
		t.Fatalf("watch with an unsupported field selector = %v, want 400", err)
	}
}

func TestWatch_PinnedNameReadsLive(t *testing.T) {
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 1, 1)
	s := startServer(t, f)
	ctx := context.Background()
	w, err := sandboxes(s, "default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=live"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := sandboxes(s, "default").Create(ctx, sandboxObj("live", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Never published: the pinned watch still sees it.
	if ev := next(t, w, 10*time.Second); ev.Type != watch.Added {
		t.Fatalf("pinned watch: %s, want ADDED", ev.Type)
	}
	if err := sandboxes(s, "default").Delete(ctx, "live", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w, 10*time.Second); ev.Type != watch.Deleted {
		t.Fatalf("pinned watch after delete: %s, want DELETED", ev.Type)
	}
}

func TestInformer_WatchListSyncsAndFollows(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 2)
	s := startServer(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := sandboxes(s, "default").Create(ctx, sandboxObj("pre", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	events := []string{}
	record := func(kind string) func(obj any) {
		return func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			mu.Lock()
			events = append(events, kind+" "+obj.(*unstructured.Unstructured).GetName())
			mu.Unlock()
		}
	}
	fac := dynamicinformer.NewDynamicSharedInformerFactory(s.Dynamic, 0)
	inf := fac.ForResource(gvr).Informer()
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: record("ADDED"), DeleteFunc: record("DELETED")})
	if err != nil {
		t.Fatal(err)
	}
	fac.Start(ctx.Done())
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	// The handler's HasSynced, not the informer's: the cache fills before
	// the handlers have been called with what it holds.
	if !cache.WaitForCacheSync(sctx.Done(), reg.HasSynced) {
		t.Fatal("informer never synced (watch-list needs the initial-events-end bookmark)")
	}
	has := func(want string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range events {
			if e == want {
				return true
			}
		}
		return false
	}
	// seen is a copy of the events, read under the handlers' lock.
	seen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(events)
	}
	if !has("ADDED pre") {
		t.Fatalf("after sync: %v", seen())
	}
	if _, err := sandboxes(s, "default").Create(ctx, sandboxObj("post", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, 10*time.Second, func() bool { return has("ADDED post") }, "informer never saw post: %v", seen())
	if err := sandboxes(s, "default").Delete(ctx, "pre", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, 10*time.Second, func() bool { return has("DELETED pre") }, "informer never saw pre deleted: %v", seen())
}

func TestOpenAPI_ServedWithFriendlyNamesAndManagedFields(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 1)
	s := startServer(t, f)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(path string) string {
		resp, err := hc.Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	v2 := get("/openapi/v2")
	if strings.Contains(v2, "~1") {
		t.Fatal("/openapi/v2 has Go-path ($ref ~1) model names")
	}
	if !strings.Contains(v2, "io.k8s.sigs.agent-sandbox.api.v1beta1.Sandbox") {
		t.Fatal("/openapi/v2 lacks the Sandbox model")
	}
	var v3 map[string]any
	if err := json.Unmarshal([]byte(get("/openapi/v3/apis/agents.x-k8s.io/v1beta1")), &v3); err != nil {
		t.Fatal(err)
	}
	out, err := sandboxes(s, "default").Create(context.Background(), sandboxObj("mf", nil), metav1.CreateOptions{FieldManager: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.GetManagedFields()) == 0 {
		t.Fatal("create response has no managedFields (the OpenAPI model lacks its GVK)")
	}
}

func TestSubresources_StatusesComeThrough(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 2)
	s := startServer(t, f)
	ctx := context.Background()
	if _, err := sandboxes(s, "default").Create(ctx, sandboxObj("p", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sub := func(verb string, body map[string]any, opts metav1.CreateOptions) (*unstructured.Unstructured, error) {
		u := &unstructured.Unstructured{Object: body}
		u.SetName("p")
		return sandboxes(s, "default").Create(ctx, u, opts, verb)
	}
	kind := func(k string, extra map[string]any) map[string]any {
		m := map[string]any{"apiVersion": "agents.x-k8s.io/v1beta1", "kind": k}
		for a, b := range extra {
			m[a] = b
		}
		return m
	}
	for _, verb := range []string{"pause", "resume", "fork", "snapshot"} {
		k := map[string]string{"pause": "SandboxPauseOptions", "resume": "SandboxResumeOptions", "fork": "SandboxForkOptions", "snapshot": "SandboxSnapshotOptions"}[verb]
		if _, err := sub(verb, kind(k, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsBadRequest(err) {
			t.Errorf("dry-run %s = %v, want 400", verb, err)
		}
	}
	if _, err := sub("pause", kind("SandboxPauseOptions", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The node refuses to fork a paused parent with 409.
	if _, err := sub("fork", kind("SandboxForkOptions", map[string]any{"count": int64(1)}), metav1.CreateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("fork of a paused sandbox = %v, want the node's 409", err)
	}
	if _, err := sub("fork", kind("SandboxForkOptions", map[string]any{"count": int64(-2)}), metav1.CreateOptions{}); !apierrors.IsBadRequest(err) {
		t.Fatalf("fork count -2 = %v, want 400", err)
	}
	if _, err := sub("resume", kind("SandboxResumeOptions", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := sub("fork", kind("SandboxForkOptions", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kids, _, _ := unstructured.NestedSlice(res.Object, "children")
	if len(kids) != 1 {
		t.Fatalf("fork with count 0 made %d children, want 1", len(kids))
	}
	child := kids[0].(map[string]any)
	name, _ := child["name"].(string)
	if child["nodeName"] != "node-0" || child["address"] == "" || name == "" {
		t.Fatalf("fork child = %v", child)
	}
	// The child is readable by name at once (recorded under <ns>/<child id>).
	if _, err := sandboxes(s, "default").Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatalf("get fork child %s: %v", name, err)
	}
	snap, err := sub("snapshot", kind("SandboxSnapshotOptions", map[string]any{"name": "s"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if id, _, _ := unstructured.NestedString(snap.Object, "snapshotID"); id == "" {
		t.Fatalf("snapshot = %v", snap.Object)
	}
	_ = schema.GroupVersion{}
}

// TestWatch_PinnedResumedAfterGoneReportsDeleted: kubectl delete lists the
// name, then watches from that list's resourceVersion. If that revision is
// one this replica does not know (another replica's, a restart's) and the
// name is gone, the watch must still report DELETED, or kubectl waits
// forever.
func TestWatch_PinnedResumedAfterGoneReportsDeleted(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 1)
	s := startServer(t, f)
	ctx := context.Background()
	// A plain watch of a name nobody holds reports nothing at open.
	plain, err := sandboxes(s, "default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=gone"})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Stop()
	resumed, err := sandboxes(s, "default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=gone", ResourceVersion: "12345"})
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Stop()
	ev := next(t, resumed, 10*time.Second)
	if ev.Type != watch.Deleted {
		t.Fatalf("resumed pinned watch of a gone name: %s, want DELETED", ev.Type)
	}
	if u, ok := ev.Object.(*unstructured.Unstructured); !ok || u.GetName() != "gone" || u.GetNamespace() != "default" {
		t.Fatalf("DELETED object = %#v, want default/gone", ev.Object)
	}
	select {
	case ev := <-plain.ResultChan():
		t.Fatalf("plain pinned watch of a gone name sent %s", ev.Type)
	case <-time.After(300 * time.Millisecond):
	}
}
