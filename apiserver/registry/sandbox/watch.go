package sandboxstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/inventory"
)

// sandboxWatch re-derives what its filter selects at a fixed cadence (never
// backing off, so a sandbox that lives for one tick is still seen) and
// sends the differences. It opens with the current state as ADDED events
// whatever resourceVersion was asked for, then, for a watch-list request,
// a BOOKMARK annotated k8s.io/initial-events-end.
type sandboxWatch struct {
	ch   chan watch.Event
	done chan struct{}
	once sync.Once
}

func (w *sandboxWatch) Stop()                          { w.once.Do(func() { close(w.done) }) }
func (w *sandboxWatch) ResultChan() <-chan watch.Event { return w.ch }

func (s *sandboxStorage) newWatch(ctx context.Context, f filter, bookmark, resumed bool) watch.Interface {
	w := &sandboxWatch{ch: make(chan watch.Event, 64), done: make(chan struct{})}
	go func() {
		defer close(w.ch)
		send := func(t watch.EventType, obj *sandboxv1beta1.Sandbox) bool {
			select {
			case w.ch <- watch.Event{Type: t, Object: obj}:
				return true
			case <-w.done:
			case <-ctx.Done():
			}
			return false
		}
		if ref, ok := f.pinned(); ok {
			s.watchPinned(ctx, w, ref, f, bookmark, resumed, send)
			return
		}
		s.watchView(ctx, w, f, bookmark, send)
	}()
	return w
}

type sendFunc func(watch.EventType, *sandboxv1beta1.Sandbox) bool

func bookmarkObject(rv string) *sandboxv1beta1.Sandbox {
	return &sandboxv1beta1.Sandbox{
		TypeMeta: metav1.TypeMeta{APIVersion: sandboxv1beta1.GroupVersion.String(), Kind: "Sandbox"},
		ObjectMeta: metav1.ObjectMeta{
			ResourceVersion: rv,
			Annotations:     map[string]string{metav1.InitialEventsAnnotationKey: "true"},
		},
	}
}

func (s *sandboxStorage) watchView(ctx context.Context, w *sandboxWatch, f filter, bookmark bool, send sendFunc) {
	prev := s.view.View()
	for i := 0; i < prev.Len(); i++ {
		if it := prev.At(i); f.keep(it) && !send(watch.Added, itemObject(it)) {
			return
		}
	}
	if bookmark && !send(watch.Bookmark, bookmarkObject(fmt.Sprint(prev.Sum()))) {
		return
	}
	s.everyTick(ctx, w, func() bool {
		cur := s.view.View()
		if cur == prev {
			return true
		}
		for _, ev := range inventory.Diff(prev, cur, f.keep) {
			if !send(watch.EventType(ev.Type), itemObject(ev.Item)) {
				return false
			}
		}
		prev = cur
		return true
	})
}

// everyTick calls step every s.interval until ctx ends, the watch is
// stopped or step returns false.
func (s *sandboxStorage) everyTick(ctx context.Context, w *sandboxWatch, step func() bool) {
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.done:
			return
		case <-tick.C:
		}
		if !step() {
			return
		}
	}
}

// watchPinned follows one name live: each tick asks the nodes, and reports
// DELETED only once no node holds it. A resumed watch (one that names the
// resourceVersion of a list the caller read) that finds the name already
// gone when it opens reports it DELETED at once: the caller's list may have
// shown it just before its node's publish dropped it, and without that event
// `kubectl delete`/`kubectl wait --for=delete` would wait forever.
func (s *sandboxStorage) watchPinned(ctx context.Context, w *sandboxWatch, ref string, f filter, bookmark, resumed bool, send sendFunc) {
	prev, _ := s.pinnedObject(ctx, ref, s.view.View(), f)
	rv := fmt.Sprint(s.view.View().Sum())
	switch {
	case prev != nil:
		rv = prev.ResourceVersion
		if !send(watch.Added, prev) {
			return
		}
	case resumed:
		ns, name, _ := strings.Cut(ref, "/")
		gone := &sandboxv1beta1.Sandbox{
			TypeMeta:   metav1.TypeMeta{APIVersion: sandboxv1beta1.GroupVersion.String(), Kind: "Sandbox"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv},
		}
		if !send(watch.Deleted, gone) {
			return
		}
	}
	if bookmark && !send(watch.Bookmark, bookmarkObject(rv)) {
		return
	}
	s.everyTick(ctx, w, func() bool {
		var cur *sandboxv1beta1.Sandbox
		sb, err := s.fleet.LiveByRef(ctx, ref)
		switch {
		case err == nil:
			if f.matches(&sb) {
				cur = s.read(ctx, sb)
			}
		case !errors.Is(err, fleet.ErrNotFound) || errors.Is(err, fleet.ErrIncomplete):
			return true // a node did not answer: keep the last state
		}
		ok := true
		switch {
		case prev == nil && cur != nil:
			ok = send(watch.Added, cur)
		case prev != nil && cur == nil:
			ok = send(watch.Deleted, prev)
		case prev != nil && cur != nil && prev.ResourceVersion != cur.ResourceVersion:
			ok = send(watch.Modified, cur)
		}
		prev = cur
		return ok
	})
}
