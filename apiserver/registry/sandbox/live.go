package sandboxstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
)

// LiveSource is the live fleet view (*fleetview.Live is one), the one
// read model of the sandboxes storage (Config.Live, required): every list
// (a name-pinned one included) is at one of its revisions, and a watch from
// a revision gets exactly the later changes, as each arrives; a watch
// pinned to one name is the same watch with the name in its filter (no
// node is asked, at open or after). Every resourceVersion a client sees is
// one of its revisions (read).
//
// Revisions are per API server replica (like metrics-server's, nothing is
// stored): a revision another replica, or an earlier process, handed out
// is unknown here and answered 410 Gone, so clients list again.
type LiveSource interface {
	// List returns the entries keep accepts, each with the revision of its
	// last change, and the revision the list is at.
	List(keep func(inventory.Item) bool) ([]inventory.Versioned, uint64)
	// Since returns up to max changes after rv, the revision they end at
	// and a channel closed at the next change; inventory.ErrExpired for a
	// revision it does not know.
	Since(rv uint64, max int) ([]inventory.Change, uint64, <-chan struct{}, error)
	// Current returns the entry that speaks for name, with the revision
	// of its last change.
	Current(name string) (inventory.Versioned, bool)
	// CurrentByID returns the entry of a claim id.
	CurrentByID(id string) (inventory.Versioned, bool)
	// Rev is the current revision.
	Rev() uint64
	// Streaming reports whether node's change stream is applied (the
	// source follows the node within milliseconds).
	Streaming(node string) bool
}

// revisionWait bounds how long a read waits for the live source to apply
// the change the node just answered with (its stream's latency).
const revisionWait = time.Second

// read renders a record a node answered with (a Get, a Create's or an
// Update's answer, a subresource's) with a resourceVersion of the live
// source, so a Get, a list item and a watch event of one state carry one
// resourceVersion: the revision the source gave this state (revisionOf:
// waiting up to revisionWait while the node's stream is applied). When the
// source does not hold the state in that time (the node's stream is down
// or lags), it is before, the source's revision read before the node was
// asked: a watch from it misses no change since the read (it may repeat
// one), and an Update carrying it is 409 until the source holds the state.
func (s *sandboxStorage) read(ctx context.Context, sb nodeapi.Sandbox, before uint64) *sandboxv1beta1.Sandbox {
	if rv, ok := s.revisionOf(ctx, &sb); ok {
		return synthesize(&sb, rv)
	}
	return synthesize(&sb, before)
}

// revisionOf returns the live source's revision of the entry that speaks
// for sb's name once that entry is sb (its claim id and content). The
// source follows the node's stream, so a record the node just changed is
// waited for, up to revisionWait and only while that stream is applied.
func (s *sandboxStorage) revisionOf(ctx context.Context, sb *nodeapi.Sandbox) (uint64, bool) {
	if sb.ID == "" {
		return 0, false
	}
	var deadline <-chan time.Time
	for {
		rv := s.live.Rev()
		if it, ok := s.holds(sb); ok {
			return it, true
		}
		if !s.live.Streaming(sb.Node) {
			return 0, false
		}
		changes, _, wake, err := s.live.Since(rv, 1)
		if err != nil {
			return 0, false
		}
		if len(changes) > 0 {
			continue // a change landed since rv: look again
		}
		if deadline == nil {
			t := time.NewTimer(revisionWait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-wake:
		case <-deadline:
			return 0, false
		case <-ctx.Done():
			return 0, false
		}
	}
}

// holds returns the revision of the entry that speaks for sb's name when
// that entry is sb: its claim id, and its content (inventory.Hash, an
// equality check only, never a resourceVersion).
func (s *sandboxStorage) holds(sb *nodeapi.Sandbox) (uint64, bool) {
	it, ok := s.live.Current(inventory.NameOf(sb))
	if !ok || it.Entry.ID != sb.ID {
		return 0, false
	}
	e := inventory.EntryOf(sb)
	if inventory.Hash(sb.Node, &e) != inventory.Hash(it.Node.Name, it.Entry) {
		return 0, false
	}
	return it.Rev, true
}

// liveBookmarkEvery is the cadence of progress bookmarks on a live watch
// that asked for them.
const liveBookmarkEvery = 30 * time.Second

func rvString(rv uint64) string { return strconv.FormatUint(rv, 10) }

func versionedObject(it inventory.Item, rv uint64) *sandboxv1beta1.Sandbox {
	s := it.Sandbox()
	return synthesize(&s, rv)
}

// listLive is a list at one revision of the live source.
func (s *sandboxStorage) listLive(f filter) *sandboxv1beta1.SandboxList {
	items, rv := s.live.List(f.keep)
	list := &sandboxv1beta1.SandboxList{
		TypeMeta: metav1.TypeMeta{APIVersion: sandboxv1beta1.GroupVersion.String(), Kind: "SandboxList"},
		ListMeta: metav1.ListMeta{ResourceVersion: rvString(rv)},
		Items:    make([]sandboxv1beta1.Sandbox, 0, len(items)),
	}
	for _, it := range items {
		list.Items = append(list.Items, *versionedObject(it.Item, it.Rev))
	}
	sort.Slice(list.Items, func(i, j int) bool {
		a, b := &list.Items[i], &list.Items[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return list
}

// watchLive opens a watch over the live source with the Kubernetes
// resourceVersion semantics: "" or "0" (or sendInitialEvents=true) opens
// with the current state as ADDED events (then the initial-events-end
// BOOKMARK for a watch-list); a revision the source still knows gets only
// the later changes; any other is 410 Gone, before anything is streamed.
func (s *sandboxStorage) watchLive(ctx context.Context, f filter, opts *metainternalversion.ListOptions) (watch.Interface, error) {
	rvs := ""
	sendInitial := false
	bookmarks := false
	if opts != nil {
		rvs = opts.ResourceVersion
		sendInitial = opts.SendInitialEvents != nil && *opts.SendInitialEvents
		bookmarks = opts.AllowWatchBookmarks
	}
	initial := sendInitial || rvs == "" || rvs == "0"
	ref, pinned := f.pinned()
	var from uint64
	resync := false
	if !initial {
		rv, err := strconv.ParseUint(rvs, 10, 64)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q: %v", rvs, err))
		}
		switch _, _, _, err := s.live.Since(rv, 1); {
		case err == nil:
			from = rv
		case pinned:
			resync = true
		default:
			return nil, expired(rvs)
		}
	}
	w := &sandboxWatch{ch: make(chan watch.Event, 64), done: make(chan struct{})}
	go func() {
		defer close(w.ch)
		send := func(e watch.Event) bool {
			select {
			case w.ch <- e:
				return true
			case <-w.done:
			case <-ctx.Done():
			}
			return false
		}
		if initial {
			items, rv := s.live.List(f.keep)
			sort.Slice(items, func(i, j int) bool { return items[i].Entry.Name < items[j].Entry.Name })
			for _, it := range items {
				if !send(watch.Event{Type: watch.Added, Object: versionedObject(it.Item, it.Rev)}) {
					return
				}
			}
			if sendInitial && bookmarks && !send(watch.Event{Type: watch.Bookmark, Object: bookmarkObject(rvString(rv))}) {
				return
			}
			from = rv
		}
		if resync {
			var ok bool
			if from, ok = s.pinnedResync(ref, f, send); !ok {
				return
			}
		}
		s.followLive(ctx, w, f, from, bookmarks, send)
	}()
	return w, nil
}

// pinnedResync opens a watch pinned to ref from a resourceVersion this
// replica does not know (another replica's, an earlier process's, one out
// of the history) with the name's state in the view: ADDED, or DELETED when the
// view does not hold it — the caller saw some state, and without that event
// `kubectl wait --for=delete` would wait forever. It returns the revision
// to follow from (taken before the state is read, so no change is missed),
// false when the watch ended.
func (s *sandboxStorage) pinnedResync(ref string, f filter, send func(watch.Event) bool) (uint64, bool) {
	rv := s.live.Rev()
	ev := watch.Event{Type: watch.Added}
	if it, ok := s.live.Current(ref); ok && f.keep(it.Item) {
		ev.Object = versionedObject(it.Item, it.Rev)
	} else {
		ns, name, _ := strings.Cut(ref, "/")
		ev.Type, ev.Object = watch.Deleted, &sandboxv1beta1.Sandbox{
			TypeMeta:   metav1.TypeMeta{APIVersion: sandboxv1beta1.GroupVersion.String(), Kind: "Sandbox"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rvString(rv)},
		}
	}
	return rv, send(ev)
}

func expired(rv string) error {
	return apierrors.NewResourceExpired(fmt.Sprintf("resourceVersion %s is too old or from another API server replica; list again", rv))
}

// followLive streams the changes after from that the filter sees: a
// change entering the selection is ADDED, one leaving it DELETED. A
// watcher so slow that the source's history overran it gets a 410 Error
// event and ends (the client lists again).
func (s *sandboxStorage) followLive(ctx context.Context, w *sandboxWatch, f filter, from uint64, bookmarks bool, send func(watch.Event) bool) {
	var tick <-chan time.Time
	if bookmarks {
		t := time.NewTicker(liveBookmarkEvery)
		defer t.Stop()
		tick = t.C
	}
	cur := from
	for {
		changes, next, wake, err := s.live.Since(cur, 1024)
		if err != nil {
			if errors.Is(err, inventory.ErrExpired) {
				st := expired(rvString(cur)).(*apierrors.StatusError).ErrStatus
				send(watch.Event{Type: watch.Error, Object: &st})
			}
			return
		}
		for _, c := range changes {
			if ev, ok := liveEvent(c, f); ok && !send(ev) {
				return
			}
		}
		cur = next
		if len(changes) == 1024 {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-w.done:
			return
		case <-wake:
		case <-tick:
			if !send(watch.Event{Type: watch.Bookmark, Object: progressBookmark(rvString(cur))}) {
				return
			}
		}
	}
}

// liveEvent is what a watch with filter f sees of change c.
func liveEvent(c inventory.Change, f filter) (watch.Event, bool) {
	is := f.keep(c.Item)
	switch c.Type {
	case inventory.Added:
		if is {
			return watch.Event{Type: watch.Added, Object: versionedObject(c.Item, c.Rev)}, true
		}
	case inventory.Deleted:
		if is {
			return watch.Event{Type: watch.Deleted, Object: versionedObject(c.Item, c.Rev)}, true
		}
	case inventory.Modified:
		was := c.Old.Entry != nil && f.keep(c.Old)
		switch {
		case was && is:
			return watch.Event{Type: watch.Modified, Object: versionedObject(c.Item, c.Rev)}, true
		case is:
			return watch.Event{Type: watch.Added, Object: versionedObject(c.Item, c.Rev)}, true
		case was:
			return watch.Event{Type: watch.Deleted, Object: versionedObject(c.Item, c.Rev)}, true
		}
	}
	return watch.Event{}, false
}

// progressBookmark is a plain BOOKMARK at rv.
func progressBookmark(rv string) *sandboxv1beta1.Sandbox {
	return &sandboxv1beta1.Sandbox{
		TypeMeta:   metav1.TypeMeta{APIVersion: sandboxv1beta1.GroupVersion.String(), Kind: "Sandbox"},
		ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv},
	}
}
