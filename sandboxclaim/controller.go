package sandboxclaim

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/internal/elect"
	"github.com/hearthvm/hearth/internal/kubeevents"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/sandbox"
)

// Resources the controller reads and writes.
var (
	Claims    = extv1beta1.GroupVersion.WithResource("sandboxclaims")
	WarmPools = extv1beta1.GroupVersion.WithResource("sandboxwarmpools")
	Templates = extv1beta1.GroupVersion.WithResource("sandboxtemplates")
)

// Fleet is what the controller needs of a fleet (*fleet.fleet is one).
type Fleet interface {
	Claim(ctx context.Context, req nodeapi.ClaimRequest) (nodeapi.Sandbox, error)
	Held(ctx context.Context, ref string) (nodeapi.Sandbox, bool)
	AllByRef(ctx context.Context, ref string) ([]nodeapi.Sandbox, error)
	Release(ctx context.Context, s nodeapi.Sandbox) error
}

// Config configures a Controller.
type Config struct {
	// REST reaches the API storing SandboxClaims, pools, templates and the Lease.
	REST  *rest.Config
	Fleet Fleet
	// Resync re-checks every claim against the fleet (default 10s).
	Resync time.Duration
	// Elect runs under leader election (LeaseNamespace/LeaseName, default
	// "sandbox-system"/"hearth-sandboxclaim-controller").
	Elect                     bool
	LeaseNamespace, LeaseName string
	Identity                  string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Events records the claims' Kubernetes Events (Bound, ClaimFailed).
	// Nil: Run starts one writing to REST's events.k8s.io/v1 as
	// "hearth.dev/sandboxclaim-controller"; Reconcile alone records none.
	Events *kubeevents.Recorder
}

// Event reasons on a SandboxClaim.
const (
	// EventBound: the claim took a warm microVM (the note names it and
	// its node).
	EventBound = "Bound"
	// EventClaimFailed (Warning): the claim could not take one; the note
	// starts with the Ready condition's reason (NoWarmCapacity — which a
	// node's quota refusal is too —, WarmPoolNotFound, TemplateNotFound,
	// InvalidClaim, ReconcilerError). Recorded when that reason or
	// message changes, not on every retry.
	EventClaimFailed = "ClaimFailed"
)

// Controller reconciles SandboxClaims.
type Controller struct {
	cfg Config
	dyn dynamic.Interface
}

// New validates cfg and builds a Controller.
func New(cfg Config) (*Controller, error) {
	if cfg.REST == nil || cfg.Fleet == nil {
		return nil, errors.New("sandboxclaim: REST config and fleet are required")
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 10 * time.Second
	}
	if cfg.LeaseName == "" {
		cfg.LeaseName = "hearth-sandboxclaim-controller"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	dyn, err := dynamic.NewForConfig(cfg.REST)
	if err != nil {
		return nil, err
	}
	return &Controller{cfg: cfg, dyn: dyn}, nil
}

// Run reconciles until ctx ends, electing a leader first when cfg.Elect.
func (c *Controller) Run(ctx context.Context) error {
	if c.cfg.Events == nil {
		rec, err := kubeevents.New(ctx, c.cfg.REST, "hearth.dev/sandboxclaim-controller")
		if err != nil {
			return err
		}
		defer rec.Shutdown()
		c.cfg.Events = rec
	}
	if !c.cfg.Elect {
		return c.loop(ctx)
	}
	return elect.Run(ctx, c.cfg.REST, elect.Lease{Namespace: c.cfg.LeaseNamespace, Name: c.cfg.LeaseName,
		Identity: c.cfg.Identity, What: "SandboxClaim controller"}, c.loop)
}

func (c *Controller) loop(ctx context.Context) error {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 5*time.Second))
	defer q.ShutDown()
	f := dynamicinformer.NewDynamicSharedInformerFactory(c.dyn, c.cfg.Resync)
	inf := f.ForResource(Claims).Informer()
	enqueue := func(o any) {
		if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
			q.Add(k)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, n any) { enqueue(n) }, DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	go func() { <-ctx.Done(); q.ShutDown() }()
	for {
		key, quit := q.Get()
		if quit {
			return nil
		}
		obj, exists, err := inf.GetIndexer().GetByKey(key)
		if err == nil && exists {
			var requeue time.Duration
			requeue, err = c.Reconcile(ctx, obj.(*unstructured.Unstructured))
			if err == nil && requeue > 0 {
				q.AddAfter(key, requeue)
			}
		}
		if err != nil && ctx.Err() == nil {
			klog.V(2).InfoS("SandboxClaim reconcile", "claim", key, "err", err)
			q.AddRateLimited(key)
		} else {
			q.Forget(key)
		}
		q.Done(key)
	}
}

// Reconcile acts on one claim; a positive duration asks for another look.
func (c *Controller) Reconcile(ctx context.Context, u *unstructured.Unstructured) (time.Duration, error) {
	claim := &extv1beta1.SandboxClaim{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, claim); err != nil {
		return 0, err
	}
	ref := claim.Namespace + "/" + claim.Name
	held, ok := c.cfg.Fleet.Held(ctx, ref)
	now := c.cfg.Now()
	act := Decide(claim, ok, now)
	klog.V(4).InfoS("SandboxClaim", "claim", ref, "action", act)
	switch act {
	case AddFinalizer:
		claim.Finalizers = append(claim.Finalizers, Finalizer)
		return 0, c.update(ctx, claim)
	case Release:
		all, err := c.cfg.Fleet.AllByRef(ctx, ref)
		if err != nil && !errors.Is(err, fleet.ErrNotFound) {
			return 0, err
		}
		for _, s := range all {
			if err := c.cfg.Fleet.Release(ctx, s); err != nil && !errors.Is(err, fleet.ErrNotFound) {
				return 0, fmt.Errorf("release %s: %w", s.ID, err)
			}
		}
		fs := claim.Finalizers[:0]
		for _, f := range claim.Finalizers {
			if f != Finalizer {
				fs = append(fs, f)
			}
		}
		claim.Finalizers = fs
		return 0, c.update(ctx, claim)
	case Bind:
		return 0, c.bind(ctx, claim, held)
	case Expire:
		if !ok && !lifecycleExpired(claim, now) {
			// Held may miss on a transient node error; only every node
			// answering that it holds nothing under ref expires a claim.
			all, err := c.cfg.Fleet.AllByRef(ctx, ref)
			if err != nil && !errors.Is(err, fleet.ErrNotFound) {
				return 0, err
			}
			if len(all) > 0 {
				return 0, c.bind(ctx, claim, all[0])
			}
		}
		meta.SetStatusCondition(&claim.Status.Conditions, NotReadyCondition(claim, extv1beta1.ClaimExpiredReason, "the claim's sandbox expired or was released"))
		return 0, c.updateStatus(ctx, claim)
	case Delete:
		err := c.dyn.Resource(Claims).Namespace(claim.Namespace).Delete(ctx, claim.Name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			err = nil
		}
		return 0, err
	case Claim:
		return c.claim(ctx, claim, now)
	}
	return 0, nil
}

// claim resolves the pool → template → key (pool.KeyForTemplate, the one
// function every caller uses) and claims a warm microVM under the claim's ref.
func (c *Controller) claim(ctx context.Context, claim *extv1beta1.SandboxClaim, now time.Time) (time.Duration, error) {
	// The claim, checked against the claim rules (docs/API.md#claim-rules)
	// before anything is read or any node asked: a breach is definitive,
	// Ready False with ReasonInvalidClaim until the claim changes.
	ref := claim.Namespace + "/" + claim.Name
	req := nodeapi.ClaimRequest{ClaimRef: ref, TTLSeconds: TTLSeconds(claim, now), Env: Env(claim)}
	if errs := req.Validate(); len(errs) > 0 {
		c.failed(claim, ReasonInvalidClaim, errs.ToAggregate().Error())
		return 0, c.updateStatus(ctx, claim)
	}
	key, pol, reason, err := c.keyOf(ctx, claim)
	if err != nil {
		if reason == "" {
			return 0, err // transient: retried with backoff
		}
		c.failed(claim, reason, err.Error())
		return 5 * time.Second, c.updateStatus(ctx, claim)
	}
	req.Template, req.Net, req.Size = key.Template, key.Net, key.Size
	// The template's policy goes with the claim as its own: the node
	// holds the sandbox to it in addition to the pool's, which is the same
	// policy unless another template holds the key with a different one
	// (pool.ErrEgressConflict) — then the claim is never looser than its
	// own template asked.
	req.Egress = pol
	sb, err := c.cfg.Fleet.Claim(ctx, req)
	var noWarm *fleet.ErrNoWarmCapacity
	switch {
	case errors.Is(err, nodeapi.ErrConflict):
		return time.Second, nil // claimed already (a lost status write): bind on the next look
	case errors.As(err, &noWarm):
		c.failed(claim, ReasonNoWarmCapacity, err.Error())
		return time.Second, c.updateStatus(ctx, claim)
	case err != nil:
		c.failed(claim, ReasonReconcilerError, err.Error())
		if uerr := c.updateStatus(ctx, claim); uerr != nil {
			klog.ErrorS(uerr, "SandboxClaim status", "claim", ref)
		}
		return 0, err
	}
	klog.V(2).InfoS("SandboxClaim bound", "claim", ref, "id", sb.ID, "node", sb.Node)
	c.cfg.Events.Eventf(claim, kubeevents.Normal, EventBound, "Claim", "Bound to sandbox %s (%s) on node %s", claim.Name, sb.ID, sb.Node)
	return 0, c.bind(ctx, claim, sb)
}

// failed sets the claim's Ready condition False with reason and msg and,
// when either changed, records a ClaimFailed event: a claim retried every
// second for want of a warm microVM records one, not one per retry.
func (c *Controller) failed(claim *extv1beta1.SandboxClaim, reason, msg string) {
	cond := NotReadyCondition(claim, reason, msg)
	old := meta.FindStatusCondition(claim.Status.Conditions, cond.Type)
	if old == nil || old.Status != cond.Status || old.Reason != cond.Reason || old.Message != cond.Message {
		c.cfg.Events.Eventf(claim, kubeevents.Warning, EventClaimFailed, "Claim", "%s: %s", reason, msg)
	}
	meta.SetStatusCondition(&claim.Status.Conditions, cond)
}

func (c *Controller) bind(ctx context.Context, claim *extv1beta1.SandboxClaim, sb nodeapi.Sandbox) error {
	claim.Status.SandboxStatus.Name = claim.Name
	meta.SetStatusCondition(&claim.Status.Conditions, ReadyCondition(claim, sb.ID, sb.Node))
	return c.updateStatus(ctx, claim)
}

// keyOf resolves the claim's warm pool to its template's key and egress
// policy (egress.FromTemplate; none on the none lane). A definitive
// problem returns its condition reason; a transient one none.
func (c *Controller) keyOf(ctx context.Context, claim *extv1beta1.SandboxClaim) (pool.Key, *egress.Policy, string, error) {
	pu, err := c.dyn.Resource(WarmPools).Namespace(claim.Namespace).Get(ctx, claim.Spec.WarmPoolRef.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return pool.Key{}, nil, ReasonWarmPoolNotFound, fmt.Errorf("SandboxWarmPool %q not found", claim.Spec.WarmPoolRef.Name)
	}
	if err != nil {
		return pool.Key{}, nil, "", err
	}
	var wp extv1beta1.SandboxWarmPool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(pu.Object, &wp); err != nil {
		return pool.Key{}, nil, ReasonReconcilerError, err
	}
	tu, err := c.dyn.Resource(Templates).Namespace(claim.Namespace).Get(ctx, wp.Spec.TemplateRef.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return pool.Key{}, nil, ReasonTemplateNotFound, fmt.Errorf("SandboxTemplate %q of SandboxWarmPool %q not found", wp.Spec.TemplateRef.Name, wp.Name)
	}
	if err != nil {
		return pool.Key{}, nil, "", err
	}
	var t extv1beta1.SandboxTemplate
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tu.Object, &t); err != nil {
		return pool.Key{}, nil, ReasonReconcilerError, err
	}
	k, err := pool.KeyForTemplate(&t)
	if err != nil {
		return pool.Key{}, nil, ReasonReconcilerError, err
	}
	pol, errs := egress.FromTemplate(&t.Spec)
	if len(errs) > 0 {
		return pool.Key{}, nil, ReasonReconcilerError, fmt.Errorf("SandboxTemplate %q: %w", t.Name, errs.ToAggregate())
	}
	if k.Net != sandbox.NetEgress {
		pol = nil // the none lane has no network to filter
	}
	return k, pol, "", nil
}

func (c *Controller) update(ctx context.Context, claim *extv1beta1.SandboxClaim) error {
	u, err := toUnstructured(claim)
	if err != nil {
		return err
	}
	_, err = c.dyn.Resource(Claims).Namespace(claim.Namespace).Update(ctx, u, metav1.UpdateOptions{})
	return ignoreGone(err)
}

func (c *Controller) updateStatus(ctx context.Context, claim *extv1beta1.SandboxClaim) error {
	u, err := toUnstructured(claim)
	if err != nil {
		return err
	}
	_, err = c.dyn.Resource(Claims).Namespace(claim.Namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{})
	return ignoreGone(err)
}

func toUnstructured(claim *extv1beta1.SandboxClaim) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(claim)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(extv1beta1.GroupVersion.String())
	u.SetKind("SandboxClaim")
	return u, nil
}

func ignoreGone(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
