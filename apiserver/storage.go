package apiserver

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/klog/v2"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/claim"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/node"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/sandbox"
)

// liveFleet is implemented by fleets that can ask the nodes while ignoring
// the published view (claim.NodeFleet). Without it, ByRef/ByID are used.
type liveFleet interface {
	LiveByRef(ctx context.Context, ref string) (claim.Located, error)
	LiveByID(ctx context.Context, id string) (claim.Located, error)
}

// sandboxStorage is the REST storage of sandboxes: nothing is stored.
type sandboxStorage struct {
	fleet    claim.Fleet
	view     inventory.Viewer
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
	_ rest.TableConvertor       = (*sandboxStorage)(nil)
)

func (s *sandboxStorage) New() runtime.Object     { return &sandboxv1beta1.Sandbox{} }
func (s *sandboxStorage) NewList() runtime.Object { return &sandboxv1beta1.SandboxList{} }
func (s *sandboxStorage) Destroy()                {}
func (s *sandboxStorage) NamespaceScoped() bool   { return true }
func (s *sandboxStorage) GetSingularName() string { return "sandbox" }

func isDryRun(opts []string) bool { return len(opts) > 0 }

// claimTimeout bounds one claim (routing and every node asked).
const claimTimeout = 30 * time.Second

// Create claims a warm microVM (CONTRACT §5). Every 400 (bad body, dry-run,
// bad name, bad key or lease) comes before any node is asked.
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
	if out.Name == "" {
		if out.GenerateName == "" {
			return nil, apierrors.NewBadRequest("Sandbox has neither metadata.name nor metadata.generateName")
		}
		out.Name = names.SimpleNameGenerator.GenerateName(out.GenerateName)
	}
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
	ttl, err := claim.LeaseFor(out, now)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	ref := out.Namespace + "/" + out.Name
	// The claim runs to completion even if the client goes away, so its
	// outcome is known; a delivery nobody will receive is released.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	d, err := s.fleet.Claim(cctx, claim.Request{Key: key, TTLSeconds: ttl, Ref: ref})
	if err != nil {
		return nil, fleetError(err, out.Name, "claim")
	}
	if ctx.Err() != nil {
		loc := claim.Located{Sandbox: node.Sandbox{ID: d.ID, ClaimRef: ref}, Node: d.Node, NodeAddr: d.NodeAddr}
		if rerr := s.fleet.Release(cctx, loc); rerr != nil {
			klog.ErrorS(rerr, "Releasing a claim whose client went away; the node reaps it at its deadline", "ref", ref, "id", d.ID)
		}
		return nil, apierrors.NewTimeoutError(fmt.Sprintf("claim for %s was abandoned by the client and released", ref), 0)
	}
	e := inventory.Entry{Name: ref, ID: d.ID, Phase: sandbox.PhaseRunning, Template: key.Template, ClaimRef: ref, Addr: d.OwnerAddr}
	out.UID = uuid.NewUUID()
	out.CreationTimestamp = metav1.NewTime(now.Truncate(time.Second))
	out.ResourceVersion = ""
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	for k, v := range readLabels(d.Node, &e) {
		out.Labels[k] = v
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[sandbox.AnnotationClaimID] = d.ID
	if d.OwnerAddr != "" {
		out.Annotations[sandbox.AnnotationAddress] = d.OwnerAddr
	}
	if d.Token != "" {
		out.Annotations[sandbox.AnnotationToken] = d.Token
	}
	if !d.Deadline.IsZero() {
		dl := metav1.NewTime(d.Deadline.UTC().Truncate(time.Second))
		e.Deadline = &dl
		out.Annotations[sandbox.AnnotationDeadline] = dl.UTC().Format(sandbox.DeadlineFormat)
	}
	if !d.ClaimedAt.IsZero() {
		at := metav1.NewTime(d.ClaimedAt.UTC().Truncate(time.Second))
		e.ClaimedAt = &at
	}
	out.ResourceVersion = fmt.Sprint(inventory.Hash(d.Node, &e))
	out.Status = status(d.Node, d.OwnerAddr, sandbox.PhaseRunning)
	out.Status.Conditions[0].Reason = "DependenciesReady"
	out.Status.Conditions[0].Message = fmt.Sprintf("warm sandbox %q delivered by node %q", d.ID, d.Node)
	return out, nil
}

func refOf(ctx context.Context, name string) string {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	return ns + "/" + name
}

// Get reads one sandbox by name, asking the nodes live (never waiting for a publish).
func (s *sandboxStorage) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	loc, err := s.fleet.ByRef(ctx, refOf(ctx, name))
	if err != nil {
		return nil, fleetError(err, name, "get")
	}
	return synthesizeLocated(loc), nil
}

// liveByRef asks the nodes only, when the fleet can.
func (s *sandboxStorage) liveByRef(ctx context.Context, ref string) (claim.Located, error) {
	if lf, ok := s.fleet.(liveFleet); ok {
		return lf.LiveByRef(ctx, ref)
	}
	return s.fleet.ByRef(ctx, ref)
}

// List reads the view; a list pinned to one name in a namespace also asks
// the nodes live, so it includes an unpublished claim.
func (s *sandboxStorage) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	f, err := newFilter(ns, opts)
	if err != nil {
		return nil, err
	}
	v := s.view.View()
	list := &sandboxv1beta1.SandboxList{
		TypeMeta: metav1.TypeMeta{APIVersion: sandboxv1beta1.GroupVersion.String(), Kind: "SandboxList"},
		ListMeta: metav1.ListMeta{ResourceVersion: fmt.Sprint(v.Sum())},
		Items:    []sandboxv1beta1.Sandbox{},
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
			list.Items = append(list.Items, *synthesizeItem(it))
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
	loc, err := s.liveByRef(ctx, ref)
	switch {
	case err == nil:
		e := entryOf(loc)
		if !f.matches(loc.Node, &e) {
			return nil, nil
		}
		return synthesizeLocated(loc), nil
	case !errors.Is(err, claim.ErrNotFound):
		return nil, fleetError(err, ref, "get")
	}
	if it, ok := v.ByName(ref); ok && f.keep(it) {
		return synthesizeItem(it), nil
	}
	return nil, nil
}

// Delete releases the sandbox by claim id (never by name) and answers once
// its node no longer holds it (or the view drops it).
func (s *sandboxStorage) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, opts *metav1.DeleteOptions) (runtime.Object, bool, error) {
	if opts != nil && isDryRun(opts.DryRun) {
		return nil, false, errDryRun("delete")
	}
	ref := refOf(ctx, name)
	loc, err := s.fleet.ByRef(ctx, ref)
	if err != nil {
		return nil, false, fleetError(err, name, "get")
	}
	obj := synthesizeLocated(loc)
	if deleteValidation != nil {
		if err := deleteValidation(ctx, obj); err != nil {
			return nil, false, err
		}
	}
	if loc.ID == "" {
		return nil, false, apierrors.NewInternalError(fmt.Errorf("sandbox %s on node %q carries no claim id; refusing to release by name", ref, loc.Node))
	}
	if err := s.fleet.Release(ctx, loc); err != nil && !isNotFound(err) {
		return nil, false, fleetError(err, name, "release")
	}
	if err := s.waitGone(ctx, loc); err != nil {
		return nil, false, err
	}
	return obj, true, nil
}

func isNotFound(err error) bool {
	return errors.Is(err, claim.ErrNotFound) || fleetStatus(err) == 404
}

func fleetStatus(err error) int32 {
	if se, ok := fleetError(err, "", "").(apierrors.APIStatus); ok {
		return se.Status().Code
	}
	return 0
}

// waitGone polls until no node holds loc's claim id, or the view no longer
// lists it.
func (s *sandboxStorage) waitGone(ctx context.Context, loc claim.Located) error {
	ctx, cancel := context.WithTimeout(ctx, s.deleteTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var err error
		if lf, ok := s.fleet.(liveFleet); ok {
			_, err = lf.LiveByID(ctx, loc.ID)
		} else {
			_, err = s.fleet.ByID(ctx, loc.ID)
		}
		if errors.Is(err, claim.ErrNotFound) {
			return nil
		}
		if _, ok := s.view.View().ByID(loc.ID); !ok && err != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return apierrors.NewTimeoutError(fmt.Sprintf("sandbox %s (claim %s) was released but node %q still lists it", loc.ClaimRef, loc.ID, loc.Node), 1)
		case <-tick.C:
		}
	}
}

// Watch streams the view's changes (see newWatch).
func (s *sandboxStorage) Watch(ctx context.Context, opts *metainternalversion.ListOptions) (watch.Interface, error) {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	f, err := newFilter(ns, opts)
	if err != nil {
		return nil, err
	}
	bookmark := opts != nil && opts.SendInitialEvents != nil && *opts.SendInitialEvents && opts.AllowWatchBookmarks
	// A watch resuming from a list (a resourceVersion other than "" or "0")
	// has seen some state: see watchPinned.
	resumed := opts != nil && opts.ResourceVersion != "" && opts.ResourceVersion != "0"
	return s.newWatch(ctx, f, bookmark, resumed), nil
}
