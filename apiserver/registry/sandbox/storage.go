package sandboxstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/klog/v2"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/sandbox"
)

// Fleet is what the sandboxes storage needs from the nodes;
// *fleet.NodeFleet satisfies it. Every not-found is fleet.ErrNotFound and
// every error maps through fleet.HTTPStatus.
type Fleet interface {
	// Claim routes a warm claim; the delivery is visible to ByRef and
	// LiveByRef at once (the fleet's claim-time index).
	Claim(ctx context.Context, req nodeapi.ClaimRequest) (nodeapi.Sandbox, error)
	ByRef(ctx context.Context, ref string) (nodeapi.Sandbox, error)
	// LiveByRef and LiveByID ask the nodes, ignoring the published view.
	LiveByRef(ctx context.Context, ref string) (nodeapi.Sandbox, error)
	LiveByID(ctx context.Context, id string) (nodeapi.Sandbox, error)
	// Held is the name check before a claim: the sandbox the claim-time
	// index or the view names for ref, verified with its one node.
	Held(ctx context.Context, ref string) (nodeapi.Sandbox, bool)
	// AllByRef asks every node for every sandbox recorded under ref.
	AllByRef(ctx context.Context, ref string) ([]nodeapi.Sandbox, error)
	// SetLabels replaces the recorded labels, annotations and managed fields.
	SetLabels(ctx context.Context, s nodeapi.Sandbox, req nodeapi.LabelsRequest) (nodeapi.Sandbox, error)
	Renew(ctx context.Context, s nodeapi.Sandbox, ttlSeconds int64) (time.Time, error)
	Release(ctx context.Context, s nodeapi.Sandbox) error
	Pause(ctx context.Context, s nodeapi.Sandbox) error
	Resume(ctx context.Context, s nodeapi.Sandbox) error
	Fork(ctx context.Context, s nodeapi.Sandbox, count int, ttlSeconds int64) ([]nodeapi.Sandbox, error)
	Snapshot(ctx context.Context, s nodeapi.Sandbox, name string) (nodeapi.Snapshot, error)
}

var _ Fleet = (*fleet.NodeFleet)(nil)

// Config configures the sandboxes storage.
type Config struct {
	// Fleet claims, looks up and acts on sandboxes. Required.
	Fleet Fleet
	// View is the published fleet view lists and watches read. Required.
	View inventory.Viewer
	// Live, when set, serves every watch and the lists not pinned to a
	// name (live.go); View still serves lookups.
	Live LiveSource
	// WatchInterval is the re-derive cadence of watches without Live;
	// default 1s. Never backs off.
	WatchInterval time.Duration
	// DeleteTimeout bounds how long Delete waits for the node to drop a
	// released sandbox; default 30s.
	DeleteTimeout time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Resources returns the sandboxes storage and its lifecycle subresources,
// keyed by their path under the group version ("sandboxes",
// "sandboxes/pause", ...), ready for an APIGroupInfo.
func Resources(c Config) map[string]rest.Storage {
	if c.WatchInterval <= 0 {
		c.WatchInterval = time.Second
	}
	if c.DeleteTimeout <= 0 {
		c.DeleteTimeout = 30 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	s := &sandboxStorage{fleet: c.Fleet, view: c.View, live: c.Live, interval: c.WatchInterval, now: c.Now, deleteTimeout: c.DeleteTimeout}
	out := map[string]rest.Storage{"sandboxes": s}
	for verb, v := range s.verbs() {
		out["sandboxes/"+verb] = v
	}
	return out
}

// sandboxStorage is the REST storage of sandboxes: nothing is stored.
type sandboxStorage struct {
	fleet    Fleet
	view     inventory.Viewer
	live     LiveSource
	interval time.Duration
	now      func() time.Time
	// deleteTimeout bounds how long Delete waits for the node to drop the sandbox.
	deleteTimeout time.Duration
}

var (
	_ rest.Storage              = (*sandboxStorage)(nil)
	_ rest.Scoper               = (*sandboxStorage)(nil)
	_ rest.SingularNameProvider = (*sandboxStorage)(nil)
	_ rest.Creater              = (*sandboxStorage)(nil)
	_ rest.Getter               = (*sandboxStorage)(nil)
	_ rest.Lister               = (*sandboxStorage)(nil)
	_ rest.Watcher              = (*sandboxStorage)(nil)
	_ rest.GracefulDeleter      = (*sandboxStorage)(nil)
	_ rest.Updater              = (*sandboxStorage)(nil)
	_ rest.Patcher              = (*sandboxStorage)(nil)
	_ rest.TableConvertor       = (*sandboxStorage)(nil)
)

func (s *sandboxStorage) New() runtime.Object     { return &sandboxv1beta1.Sandbox{} }
func (s *sandboxStorage) NewList() runtime.Object { return &sandboxv1beta1.SandboxList{} }
func (s *sandboxStorage) Destroy()                {}
func (s *sandboxStorage) NamespaceScoped() bool   { return true }
func (s *sandboxStorage) GetSingularName() string { return "sandbox" }

func isDryRun(opts []string) bool { return len(opts) > 0 }

// generateNameTries bounds the names a Create with generateName tries when
// the generated one is held.
const generateNameTries = 5

// Create claims a warm microVM (docs/API.md#create-is-a-claim). Every 400
// and 422 (bad body, dry-run, bad name, labels or annotations, an object
// past nodeapi.MaxObjectBytes, bad key or lease) comes before any node is
// asked. A name a live sandbox holds is 409 AlreadyExists: first from the
// fleet's claim-time index and the view (one node call, no microVM spent),
// then from the node, which refuses a second claim of one claim ref
// atomically. With generateName, a held name is retried with a new one.
func (s *sandboxStorage) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, opts *metav1.CreateOptions) (runtime.Object, error) {
	in, ok := obj.(*sandboxv1beta1.Sandbox)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a Sandbox: %T", obj))
	}
	if opts != nil && isDryRun(opts.DryRun) {
		return nil, errDryRun("create")
	}
	out := in.DeepCopy()
	if ns, ok := genericapirequest.NamespaceFrom(ctx); ok && out.Namespace == "" {
		out.Namespace = ns
	}
	generated := out.Name == ""
	if generated && out.GenerateName == "" {
		return nil, apierrors.NewBadRequest("Sandbox has neither metadata.name nor metadata.generateName")
	}
	for try := 1; ; try++ {
		if generated {
			out.Name = names.SimpleNameGenerator.GenerateName(out.GenerateName)
		}
		res, err := s.create(ctx, out, createValidation)
		if generated && apierrors.IsAlreadyExists(err) && try < generateNameTries {
			continue
		}
		return res, err
	}
}

// create is one claim of Create under out.Name.
func (s *sandboxStorage) create(ctx context.Context, in *sandboxv1beta1.Sandbox, createValidation rest.ValidateObjectFunc) (runtime.Object, error) {
	out := in.DeepCopy()
	out.GenerateName = ""
	if errs := apivalidation.NameIsDNSSubdomain(out.Name, false); len(errs) > 0 {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid sandbox name %q: %s", out.Name, strings.Join(errs, "; ")))
	}
	if createValidation != nil {
		if err := createValidation(ctx, out); err != nil {
			return nil, err
		}
	}
	key, err := pool.KeyForSandbox(out)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	now := s.now()
	ttl, err := fleet.LeaseFor(out, now)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	rec, err := recordOf(out, recordedSpec(out.Spec))
	if err != nil {
		return nil, err
	}
	env, err := envOf(out)
	if err != nil {
		return nil, err
	}
	ref := out.Namespace + "/" + out.Name
	req := nodeapi.ClaimFor(key, ref)
	req.TTLSeconds, req.Env, req.Object = ttl, env, rec
	if errs := req.Validate(); len(errs) > 0 {
		return nil, claimError(out.Name, errs)
	}
	if held, ok := s.fleet.Held(ctx, ref); ok {
		return nil, alreadyExists(out.Name, held)
	}
	// The claim (and a Suspended sandbox's pause) runs to completion even
	// if the client goes away, so its outcome is known; a delivery nobody
	// will receive is released (fleet.Detached).
	sbs, err := fleet.Detached(ctx, s.fleet, func(cctx context.Context) ([]nodeapi.Sandbox, error) {
		sb, err := s.fleet.Claim(cctx, req)
		if err != nil {
			return nil, err
		}
		if out.Spec.OperatingMode == sandboxv1beta1.SandboxOperatingModeSuspended {
			if err := s.fleet.Pause(cctx, sb); err != nil {
				klog.ErrorS(err, "Pausing a sandbox created Suspended; it runs", "ref", ref, "id", sb.ID)
			} else {
				sb.Paused = true
			}
		}
		return []nodeapi.Sandbox{sb}, nil
	})
	switch {
	case errors.Is(err, fleet.ErrAbandoned):
		return nil, apierrors.NewTimeoutError(fmt.Sprintf("claim for %s was abandoned by the client and released", ref), 0)
	case errors.Is(err, nodeapi.ErrConflict):
		return nil, alreadyExists(out.Name, nodeapi.Sandbox{})
	case err != nil:
		return nil, fleetError(err, out.Name, "claim")
	}
	sb := sbs[0]
	// The delivery is rendered like any read (Create, Get, List and Watch
	// agree on uid, labels, annotations and spec), plus the token.
	read := objectOf(sb)
	if read.Annotations == nil {
		read.Annotations = map[string]string{}
	}
	if sb.Token != "" {
		read.Annotations[sandbox.AnnotationToken] = sb.Token
	}
	read.Status.Conditions[0].Message = fmt.Sprintf("warm sandbox %q delivered by node %q", sb.ID, sb.Node)
	return read, nil
}

// alreadyExists is the 409 of a Create whose name a live sandbox holds.
func alreadyExists(name string, held nodeapi.Sandbox) error {
	err := apierrors.NewAlreadyExists(sandboxesResource, name)
	if held.ID != "" {
		err.ErrStatus.Message += fmt.Sprintf(" (claim %s on node %s)", held.ID, held.Node)
	}
	return err
}

func isZeroSpec(sp sandboxv1beta1.SandboxSpec) bool {
	return apiequality.Semantic.DeepEqual(sp, sandboxv1beta1.SandboxSpec{})
}

var sandboxKind = sandboxv1beta1.GroupVersion.WithKind("Sandbox").GroupKind()

func refOf(ctx context.Context, name string) string {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	return ns + "/" + name
}

// Get reads one sandbox by name, asking the nodes live (never waiting for
// a publish), with the resourceVersion lists and watches give it (read).
func (s *sandboxStorage) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	sb, err := s.fleet.ByRef(ctx, refOf(ctx, name))
	if err != nil {
		return nil, fleetError(err, name, "get")
	}
	return s.read(ctx, sb), nil
}

// List reads the view; a list pinned to one name in a namespace also asks
// the nodes live, so it includes an unpublished claim (at the live source's
// revision, when there is one, so a pinned watch resumes from it).
func (s *sandboxStorage) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	f, err := newFilter(ns, opts)
	if err != nil {
		return nil, err
	}
	if _, pinned := f.pinned(); !pinned && s.live != nil {
		return s.listLive(f), nil
	}
	v := s.view.View()
	list := &sandboxv1beta1.SandboxList{
		TypeMeta: metav1.TypeMeta{APIVersion: sandboxv1beta1.GroupVersion.String(), Kind: "SandboxList"},
		ListMeta: metav1.ListMeta{ResourceVersion: fmt.Sprint(v.Sum())},
		Items:    []sandboxv1beta1.Sandbox{},
	}
	if s.live != nil {
		// Taken before the nodes answer: a watch from it misses no change.
		list.ResourceVersion = rvString(s.live.Rev())
	}
	if ref, ok := f.pinned(); ok {
		if obj, err := s.pinnedObject(ctx, ref, v, f); err != nil {
			return nil, err
		} else if obj != nil {
			list.Items = append(list.Items, *obj)
		}
		return list, nil
	}
	for i := 0; i < v.Len(); i++ {
		if it := v.At(i); f.keep(it) {
			list.Items = append(list.Items, *itemObject(it))
		}
	}
	sort.SliceStable(list.Items, func(i, j int) bool {
		a, b := &list.Items[i], &list.Items[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return list, nil
}

// pinnedObject reads the one sandbox a name-pinned list or watch selects:
// live from the nodes, else the published entry; nil when neither has it
// or the selectors reject it.
func (s *sandboxStorage) pinnedObject(ctx context.Context, ref string, v *inventory.View, f filter) (*sandboxv1beta1.Sandbox, error) {
	sb, err := s.fleet.LiveByRef(ctx, ref)
	switch {
	case err == nil:
		if !f.matches(&sb) {
			return nil, nil
		}
		return s.read(ctx, sb), nil
	case !errors.Is(err, fleet.ErrNotFound):
		return nil, fleetError(err, ref, "get")
	}
	if s.live != nil {
		if it, ok := s.live.Current(ref); ok && f.keep(it.Item) {
			return versionedObject(it.Item, it.Rev), nil
		}
		return nil, nil
	}
	if it, ok := v.ByName(ref); ok && f.keep(it) {
		return itemObject(it), nil
	}
	return nil, nil
}

// Delete releases, by claim id, every microVM any node records under the
// name (a node refuses a second claim of one name, but two nodes may each
// hold one: see the package doc), so `kubectl delete` always completes,
// and answers once no node holds them (or the view drops them). When no
// node answers for the name, the index's or view's record is released.
func (s *sandboxStorage) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, opts *metav1.DeleteOptions) (runtime.Object, bool, error) {
	if opts != nil && isDryRun(opts.DryRun) {
		return nil, false, errDryRun("delete")
	}
	ref := refOf(ctx, name)
	all, err := s.fleet.AllByRef(ctx, ref)
	if errors.Is(err, fleet.ErrNotFound) {
		var sb nodeapi.Sandbox
		if sb, err = s.fleet.ByRef(ctx, ref); err == nil {
			all = []nodeapi.Sandbox{sb}
		}
	}
	if err != nil {
		return nil, false, fleetError(err, name, "get")
	}
	obj := objectOf(all[len(all)-1])
	if deleteValidation != nil {
		if err := deleteValidation(ctx, obj); err != nil {
			return nil, false, err
		}
	}
	for _, sb := range all {
		if sb.ID == "" {
			return nil, false, apierrors.NewInternalError(fmt.Errorf("sandbox %s on node %q carries no claim id; refusing to release by name", ref, sb.Node))
		}
	}
	for _, sb := range all {
		if err := s.fleet.Release(ctx, sb); err != nil && !errors.Is(err, fleet.ErrNotFound) {
			return nil, false, fleetError(err, name, "release")
		}
	}
	for _, sb := range all {
		if err := s.waitGone(ctx, sb); err != nil {
			return nil, false, err
		}
	}
	return obj, true, nil
}

// waitGone polls until no node holds sb's claim id, or the view no longer
// lists it.
func (s *sandboxStorage) waitGone(ctx context.Context, sb nodeapi.Sandbox) error {
	ctx, cancel := context.WithTimeout(ctx, s.deleteTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := s.fleet.LiveByID(ctx, sb.ID)
		if errors.Is(err, fleet.ErrNotFound) {
			return nil
		}
		if !s.inView(sb.ID) && err != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return apierrors.NewTimeoutError(fmt.Sprintf("sandbox %s (claim %s) was released but node %q still lists it", sb.ClaimRef, sb.ID, sb.Node), 1)
		case <-tick.C:
		}
	}
}

// inView reports whether the view (the live source when there is one)
// lists claim id id.
func (s *sandboxStorage) inView(id string) bool {
	if s.live != nil {
		_, ok := s.live.CurrentByID(id)
		return ok
	}
	_, ok := s.view.View().ByID(id)
	return ok
}

// Watch streams the live source's changes (watchLive), a watch pinned to
// one name included; without a live source, the view's (newWatch).
func (s *sandboxStorage) Watch(ctx context.Context, opts *metainternalversion.ListOptions) (watch.Interface, error) {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	f, err := newFilter(ns, opts)
	if err != nil {
		return nil, err
	}
	if s.live != nil {
		return s.watchLive(ctx, f, opts)
	}
	bookmark := opts != nil && opts.SendInitialEvents != nil && *opts.SendInitialEvents && opts.AllowWatchBookmarks
	// A watch resuming from a list (a resourceVersion other than "" or "0")
	// has seen some state: see watchPinned.
	resumed := opts != nil && opts.ResourceVersion != "" && opts.ResourceVersion != "0"
	return s.newWatch(ctx, f, bookmark, resumed), nil
}
