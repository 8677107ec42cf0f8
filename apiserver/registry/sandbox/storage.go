package sandboxstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/klog/v2"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/fleet"
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
	// LiveByRef and LiveByID ask the nodes (an Update's current state, a
	// Delete's wait), not the live view.
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
	// Logs reads s's log (the log subresource, log.go).
	Logs(ctx context.Context, s nodeapi.Sandbox, q agentapi.LogsQuery) (agentapi.Logs, error)
	// FollowLogs follows s's log (the log subresource with follow=true).
	FollowLogs(ctx context.Context, s nodeapi.Sandbox, q agentapi.LogsQuery) (*agentapi.LogStream, error)
	// Stats measures s (the stats subresource, stats.go).
	Stats(ctx context.Context, s nodeapi.Sandbox) (nodeapi.Stats, error)
}

var _ Fleet = (*fleet.NodeFleet)(nil)

// Config configures the sandboxes storage.
type Config struct {
	// Fleet claims, looks up and acts on sandboxes. Required.
	Fleet Fleet
	// Live is the live fleet view (a *fleetview.Live, the one the fleet
	// locates sandboxes in): every list and watch reads it, and every
	// resourceVersion is one of its revisions (live.go). Required.
	Live LiveSource
	// DeleteTimeout bounds how long Delete waits for the node to drop a
	// released sandbox; default 30s.
	DeleteTimeout time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Validate reports a Config the storage cannot serve from: Fleet and Live
// are required.
func (c Config) Validate() error {
	var missing []string
	if c.Fleet == nil {
		missing = append(missing, "Fleet")
	}
	if c.Live == nil {
		missing = append(missing, "Live (the live fleet view, *fleetview.Live)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("sandboxstore: Config.%s required", strings.Join(missing, " and Config."))
	}
	return nil
}

// Resources returns the sandboxes storage, its lifecycle subresources,
// its log (log.go) and its stats (stats.go), keyed by their path under the
// group version ("sandboxes", "sandboxes/pause", ..., "sandboxes/stats"), ready for an
// APIGroupInfo. It panics on a Config that Validate refuses (a wiring
// error).
func Resources(c Config) map[string]rest.Storage {
	if err := c.Validate(); err != nil {
		panic(err)
	}
	if c.DeleteTimeout <= 0 {
		c.DeleteTimeout = 30 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	s := &sandboxStorage{fleet: c.Fleet, live: c.Live, now: c.Now, deleteTimeout: c.DeleteTimeout}
	out := map[string]rest.Storage{"sandboxes": s}
	for verb, v := range s.verbs() {
		out["sandboxes/"+verb] = v
	}
	out["sandboxes/log"] = &logStorage{s: s}
	out["sandboxes/stats"] = &statsStorage{s: s}
	return out
}

// sandboxStorage is the REST storage of sandboxes: nothing is stored.
type sandboxStorage struct {
	fleet Fleet
	live  LiveSource
	now   func() time.Time
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
	before := s.live.Rev()
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
	// agree on uid, labels, annotations, spec and resourceVersion), plus
	// the token.
	read := s.read(ctx, sb, before)
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

// Get reads one sandbox by name: the record of the node the live view
// (or this replica's claim-time index) names, never waiting for a publish,
// with the resourceVersion lists and watches give it (read).
func (s *sandboxStorage) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	before := s.live.Rev()
	sb, err := s.fleet.ByRef(ctx, refOf(ctx, name))
	if err != nil {
		return nil, fleetError(err, name, "get")
	}
	return s.read(ctx, sb, before), nil
}

// List reads the live view at one revision; a list pinned to one name is
// the same list with the name in its filter (no node is asked).
func (s *sandboxStorage) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	f, err := newFilter(ns, opts)
	if err != nil {
		return nil, err
	}
	return s.listLive(f), nil
}

// Delete releases, by claim id, every microVM any node records under the
// name (a node refuses a second claim of one name, but two nodes may each
// hold one: see the package doc), so `kubectl delete` always completes,
// and answers once no node holds them and the live view has dropped them
// (read your writes: a list after the answer does not show them; a node
// whose stream is down is not waited for). When no node answers for the
// name, the index's or view's record is released.
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
	last := all[len(all)-1]
	rv, ok := s.holds(&last)
	if !ok {
		rv = s.live.Rev()
	}
	obj := synthesize(&last, rv)
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

// waitGone polls until no node holds sb's claim id and the live view no
// longer lists it (unless its node's stream is down), or, when no node
// answers, until the view no longer lists it.
func (s *sandboxStorage) waitGone(ctx context.Context, sb nodeapi.Sandbox) error {
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, s.deleteTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := s.fleet.LiveByID(ctx, sb.ID)
		_, listed := s.live.CurrentByID(sb.ID)
		switch {
		case errors.Is(err, fleet.ErrNotFound) && (!listed || !s.live.Streaming(sb.Node)):
			return true, nil
		case err != nil && !listed:
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return apierrors.NewTimeoutError(fmt.Sprintf("sandbox %s (claim %s) was released but node %q still lists it", sb.ClaimRef, sb.ID, sb.Node), 1)
	}
	return nil
}

// Watch streams the live view's changes (watchLive), a watch pinned to
// one name included.
func (s *sandboxStorage) Watch(ctx context.Context, opts *metainternalversion.ListOptions) (watch.Interface, error) {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	f, err := newFilter(ns, opts)
	if err != nil {
		return nil, err
	}
	return s.watchLive(ctx, f, opts)
}
