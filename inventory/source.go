package inventory

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Viewer hands out the current View. Implementations return an immutable
// View; callers may keep it as long as they like.
type Viewer interface {
	View() *View
}

// Static is a Viewer whose View is set by hand (tests, embedders that
// assemble inventories themselves): what a live fleet view takes its
// membership from (fleetview.New) instead of Source's informer. It is no
// read model of sandboxes: the fleet and the sandboxes storage read the
// live view. The zero value holds an empty View.
type Static struct {
	v atomic.Pointer[View]
}

// NewStatic returns a Static holding a View of invs.
func NewStatic(invs ...*NodeInventory) *Static {
	s := &Static{}
	s.Set(invs...)
	return s
}

// Set replaces the View with one built from invs.
func (s *Static) Set(invs ...*NodeInventory) {
	s.v.Store(s.v.Load().Next(invs))
}

// View returns the current View (never nil).
func (s *Static) View() *View {
	if v := s.v.Load(); v != nil {
		return v
	}
	return NewView(nil)
}

// DefaultCoalesce is the minimum time between two rebuilds of a Source's View.
const DefaultCoalesce = 100 * time.Millisecond

// Source keeps the current View from an informer on nodeinventories. It
// rebuilds the View after changes, at most once per Coalesce interval, and
// converts only objects whose resourceVersion changed.
type Source struct {
	informer cache.SharedIndexInformer
	coalesce time.Duration

	view  atomic.Pointer[View]
	dirty chan struct{}

	mu    sync.Mutex
	typed map[string]typedInv // object name → converted object
}

type typedInv struct {
	rv  string
	inv *NodeInventory
}

// NewSourceForConfig returns a Source reading nodeinventories from the
// cluster behind cfg.
func NewSourceForConfig(cfg *rest.Config) (*Source, error) {
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("nodeinventory client: %w", err)
	}
	return NewSource(dc, 0), nil
}

// NewSource returns a Source over client. resync 0 disables periodic resync.
func NewSource(client dynamic.Interface, resync time.Duration) *Source {
	f := dynamicinformer.NewDynamicSharedInformerFactory(client, resync)
	s := &Source{
		informer: f.ForResource(GroupVersionResource).Informer(),
		coalesce: DefaultCoalesce,
		dirty:    make(chan struct{}, 1),
		typed:    map[string]typedInv{},
	}
	s.view.Store(NewView(nil))
	mark := func(any) {
		select {
		case s.dirty <- struct{}{}:
		default:
		}
	}
	_, _ = s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    mark,
		UpdateFunc: func(_, o any) { mark(o) },
		DeleteFunc: mark,
	})
	return s
}

// View returns the latest View (never nil).
func (s *Source) View() *View { return s.view.Load() }

// Run starts the informer and rebuilds the View until ctx ends. It returns
// once the informer has stopped.
func (s *Source) Run(ctx context.Context) {
	go s.informer.RunWithContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.dirty:
		}
		s.rebuild()
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.coalesce):
		}
	}
}

// WaitForSync blocks until the informer has synced and the View reflects
// it, or ctx ends.
func (s *Source) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), s.informer.HasSynced) {
		return fmt.Errorf("nodeinventories informer did not sync (is the %s CRD installed?): %w", GroupVersionResource.GroupResource(), ctx.Err())
	}
	s.rebuild()
	return nil
}

// rebuild converts the informer's objects and swaps in a new View.
func (s *Source) rebuild() {
	objs := s.informer.GetStore().List()
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[string]bool, len(objs))
	invs := make([]*NodeInventory, 0, len(objs))
	for _, o := range objs {
		inv, name, ok := s.convert(o)
		if !ok {
			continue
		}
		seen[name] = true
		invs = append(invs, inv)
	}
	for name := range s.typed {
		if !seen[name] {
			delete(s.typed, name)
		}
	}
	sort.Slice(invs, func(i, j int) bool { return invs[i].Name < invs[j].Name })
	s.view.Store(s.view.Load().Next(invs))
}

func (s *Source) convert(o any) (*NodeInventory, string, bool) {
	switch obj := o.(type) {
	case *NodeInventory:
		return obj, obj.Name, true
	case *unstructured.Unstructured:
		name, rv := obj.GetName(), obj.GetResourceVersion()
		if c, ok := s.typed[name]; ok && c.rv == rv && rv != "" {
			return c.inv, name, true
		}
		inv := &NodeInventory{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, inv); err != nil {
			klog.ErrorS(err, "skipping undecodable NodeInventory", "name", name)
			return nil, "", false
		}
		s.typed[name] = typedInv{rv: rv, inv: inv}
		return inv, name, true
	}
	return nil, "", false
}
