// Package controller is the warm-pool controller (docs/API.md#warm-capacity):
// it turns SandboxWarmPool objects and the SandboxTemplates they name into
// each node's warm targets (PUT /v1/pools, the whole set) and writes the warm
// microVMs the fleet actually holds back into each pool's status. It never
// creates per-sandbox objects. (It is not a vmm.Driver; its flags, Lease
// and field manager keep the historical names "warm-pool driver",
// "hearth-warmpool-driver".)
//
// Decisions are the pure pool.MakePlan; this package only reads (LISTs
// through the API), PUTs and writes status. The same code runs in the
// embedded default and behind a kube-apiserver. Only one controller acts at
// a time: a coordination.k8s.io/v1 Lease elects the leader (the embedded
// default serves leases too).
//
// Failure semantics:
//   - a failed pool or inventory LIST skips the tick: no PUT, nothing drains;
//   - a failed template LIST is transient: every pool keeps the key and
//     targets of the last tick;
//   - a template that does not exist (or derives no valid key, or no valid
//     egress policy) drains its key (unless another pool provisions it)
//     and its pool reports 0;
//   - each pool's egress policy (egress.FromTemplate of its template; none
//     on the none lane, which has no network) goes to the nodes with its
//     key (nodeapi.PoolSpec.Egress). A key carries one policy: when two
//     templates map to one key with different policies, the older template
//     holds it and the other's pools provision nothing and report 0, the
//     conflict logged like any template problem (pool.MakePlan);
//   - each PUT has a 10 s deadline and runs concurrently (at most
//     PutConcurrency at a time): one slow or failing node does not stall
//     the others; its counts come from its inventory instead;
//   - without the fleet secret no PUT is sent (fail closed); status is still
//     written.
//
// Events (events.go; docs/OPERATIONS.md#events): each tick records
// changes, never states, as events.k8s.io/v1 Events through
// internal/kubeevents (series for repeats, a per-object spam filter): on a
// SandboxWarmPool FillStarted and FillFinished (its ready count fell below
// replicas, reached them again), BootFailed (a node's PUT answer reports
// more boots failed in a row than last tick, with its last error — also on
// the pool's SandboxTemplate), Evicted (the node's health sweep evicted
// warm microVMs) and NodeGone (a node it had targets on left). A claim
// records nothing here; only its refill's fill can.
package controller

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/internal/elect"
	"github.com/hearthvm/hearth/internal/kubeevents"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/sandbox"
)

// Resources the controller reads and writes.
var (
	WarmPools = extv1beta1.GroupVersion.WithResource("sandboxwarmpools")
	Templates = extv1beta1.GroupVersion.WithResource("sandboxtemplates")
)

// SelectorLabel is the label key of status.selector: "<key>=<pool name>".
const SelectorLabel = "agents.x-k8s.io/warm-pool"

// PutTimeout bounds each PUT /v1/pools.
const PutTimeout = 10 * time.Second

// PutConcurrency bounds the PUTs of one tick in flight at once (the
// fleet's live lookups use the same bound).
const PutConcurrency = 16

// Config configures a Controller.
type Config struct {
	// REST reaches the API that stores the pools, templates, inventories
	// and the Lease.
	REST *rest.Config
	// Secret is the fleet secret. It is never sent: each node's PUT
	// carries that node's own token, nodeapi.NodeToken(Secret, name), the
	// name being its NodeInventory's. Empty sends nothing (fail closed).
	Secret string
	// Interval is the sync and status sampling period (default 5s).
	Interval time.Duration
	// Elect enables leader election (default off: the caller decides; the
	// embedded default and the apiserver both turn it on).
	Elect bool
	// LeaseNamespace/LeaseName name the Lease (default
	// "sandbox-system"/"hearth-warmpool-driver").
	LeaseNamespace, LeaseName string
	// Identity is this candidate's name (default hostname + random suffix).
	Identity string
	// HTTP is the client for node calls (default nodeapi.DefaultHTTPClient).
	HTTP *http.Client
	// Events records the controller's Kubernetes Events (events.go:
	// FillStarted, FillFinished, BootFailed, Evicted, NodeGone). Nil: Run
	// starts one writing to REST's events.k8s.io/v1 as
	// "hearth.dev/warm-pool-controller"; Tick alone records none.
	Events *kubeevents.Recorder
}

// Controller runs the warm-pool loop.
type Controller struct {
	cfg  Config
	dyn  dynamic.Interface
	kick chan struct{}

	mu       sync.Mutex
	last     pool.Plan
	sent     map[string]sentTargets // node → last successful PUT
	lastTick Tick
	events   eventState
}

type sentTargets struct {
	addr  string
	specs []nodeapi.PoolSpec
	at    time.Time
}

// New validates cfg and builds a Controller.
func New(cfg Config) (*Controller, error) {
	if cfg.REST == nil {
		return nil, fmt.Errorf("warm-pool controller: REST config is required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.LeaseName == "" {
		cfg.LeaseName = "hearth-warmpool-driver"
	}
	dyn, err := dynamic.NewForConfig(cfg.REST)
	if err != nil {
		return nil, err
	}
	return &Controller{cfg: cfg, dyn: dyn, kick: make(chan struct{}, 1),
		sent: map[string]sentTargets{}}, nil
}

// Run acts until ctx ends, electing a leader first when cfg.Elect.
func (c *Controller) Run(ctx context.Context) error {
	if c.cfg.Events == nil {
		rec, err := kubeevents.New(ctx, c.cfg.REST, "hearth.dev/warm-pool-controller")
		if err != nil {
			return err
		}
		defer rec.Shutdown()
		c.mu.Lock()
		c.cfg.Events = rec
		c.mu.Unlock()
	}
	if !c.cfg.Elect {
		return c.loop(ctx)
	}
	return elect.Run(ctx, c.cfg.REST, elect.Lease{Namespace: c.cfg.LeaseNamespace, Name: c.cfg.LeaseName,
		Identity: c.cfg.Identity, What: "warm-pool controller"}, c.loop)
}

// Kick asks for a tick as soon as possible.
func (c *Controller) Kick() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *Controller) loop(ctx context.Context) error {
	// Watches only trigger ticks; every tick LISTs (a tick must see a
	// template read error, not a stale cache).
	f := dynamicinformer.NewDynamicSharedInformerFactory(c.dyn, 0)
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.Kick() },
		UpdateFunc: func(o, n any) { c.kickOnChange(o, n) },
		DeleteFunc: func(any) { c.Kick() },
	}
	for _, gvr := range []schema.GroupVersionResource{WarmPools, Templates, inventory.GroupVersionResource} {
		if _, err := f.ForResource(gvr).Informer().AddEventHandler(h); err != nil {
			return err
		}
	}
	f.Start(ctx.Done())
	defer f.Shutdown()

	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	const minGap = 200 * time.Millisecond // coalesce bursts of events
	for {
		if _, err := c.Tick(ctx); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "warm-pool tick")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-c.kick:
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(minGap):
			}
		}
	}
}

// kickOnChange ignores the controller's own status writes (generation unchanged
// on a pool) but reacts to every other change.
func (c *Controller) kickOnChange(o, n any) {
	ou, ok1 := o.(*unstructured.Unstructured)
	nu, ok2 := n.(*unstructured.Unstructured)
	if ok1 && ok2 && nu.GetKind() == "SandboxWarmPool" && ou.GetGeneration() == nu.GetGeneration() {
		return
	}
	if ok1 && ok2 && ou.GetResourceVersion() == nu.GetResourceVersion() {
		return // resync
	}
	c.Kick()
}

// Tick is what one pass decided and observed (for tests and logs).
type Tick struct {
	Plan pool.Plan
	// Nodes are the schedulable nodes, by name.
	Nodes []string
	// Observed is each pool's warm total written to status.
	Observed map[pool.Ref]int32
	// PutErrors holds the nodes whose PUT failed.
	PutErrors map[string]error
}

type schedNode struct {
	name, addr string
	warm       map[pool.Key]int32
}

// Tick runs one pass: read, plan, PUT, status.
func (c *Controller) Tick(ctx context.Context) (Tick, error) {
	c.mu.Lock()
	defer c.mu.Unlock()

	pools, err := c.listPools(ctx)
	if err != nil {
		return Tick{}, fmt.Errorf("list sandboxwarmpools: %w", err)
	}
	nodes, err := c.listNodes(ctx)
	if err != nil {
		return Tick{}, fmt.Errorf("list nodeinventories: %w", err)
	}
	templates, templateObjs := c.readTemplates(ctx, pools)

	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		names = append(names, n.name)
	}
	wps := make([]pool.WarmPool, 0, len(pools))
	for _, p := range pools {
		wps = append(wps, p.wp)
	}
	plan := pool.MakePlan(wps, templates, c.last, names)
	for ref, perr := range plan.Problems {
		klog.V(2).InfoS("warm pool not fully resolved", "pool", ref, "err", perr)
	}
	c.last = plan

	putErrs, answers, gone := c.apply(ctx, nodes, plan)
	warm := map[string]map[pool.Key]int32{}
	for _, n := range nodes {
		warm[n.name] = n.warm
	}
	observed := pool.Observed(wps, plan.Keys, warm)
	for _, p := range pools {
		c.writeStatus(ctx, p, observed[p.wp.Ref])
	}
	c.record(c.events.next(tickView{pools: wps, keys: plan.Keys, observed: observed, answers: answers, gone: gone}), pools, templateObjs)
	c.lastTick = Tick{Plan: plan, Nodes: names, Observed: observed, PutErrors: putErrs}
	return c.lastTick, nil
}

type listedPool struct {
	wp     pool.WarmPool
	status extv1beta1.SandboxWarmPoolStatus
	// obj is the pool as listed: what its events regard.
	obj *unstructured.Unstructured
}

func (c *Controller) listPools(ctx context.Context) ([]listedPool, error) {
	l, err := c.dyn.Resource(WarmPools).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]listedPool, 0, len(l.Items))
	for i := range l.Items {
		var wp extv1beta1.SandboxWarmPool
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(l.Items[i].Object, &wp); err != nil {
			klog.ErrorS(err, "decode sandboxwarmpool", "name", l.Items[i].GetName())
			continue
		}
		replicas := int32(1)
		if wp.Spec.Replicas != nil {
			replicas = *wp.Spec.Replicas
		}
		out = append(out, listedPool{
			wp:     pool.WarmPool{Ref: pool.Ref{Namespace: wp.Namespace, Name: wp.Name}, Replicas: replicas, Template: wp.Spec.TemplateRef.Name},
			status: wp.Status,
			obj:    &l.Items[i],
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].wp.Ref.String() < out[j].wp.Ref.String() })
	return out, nil
}

func (c *Controller) readTemplates(ctx context.Context, pools []listedPool) (map[pool.Ref]pool.TemplateRead, map[pool.Ref]*unstructured.Unstructured) {
	out := map[pool.Ref]pool.TemplateRead{}
	objs := map[pool.Ref]*unstructured.Unstructured{}
	l, err := c.dyn.Resource(Templates).List(ctx, metav1.ListOptions{})
	if err != nil {
		// Transient: every pool keeps its last key.
		for _, p := range pools {
			out[pool.Ref{Namespace: p.wp.Ref.Namespace, Name: p.wp.Template}] = pool.TemplateRead{Err: fmt.Errorf("list sandboxtemplates: %w", err)}
		}
		return out, objs
	}
	for i := range l.Items {
		var t extv1beta1.SandboxTemplate
		ref := pool.Ref{Namespace: l.Items[i].GetNamespace(), Name: l.Items[i].GetName()}
		objs[ref] = &l.Items[i]
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(l.Items[i].Object, &t); err != nil {
			out[ref] = pool.TemplateRead{Err: fmt.Errorf("%w: decode: %v", pool.ErrInvalidKey, err)}
			continue
		}
		k, err := pool.KeyForTemplate(&t)
		if err != nil {
			out[ref] = pool.TemplateRead{Err: err}
			continue
		}
		pol, errs := egress.FromTemplate(&t.Spec)
		if len(errs) > 0 {
			out[ref] = pool.TemplateRead{Err: fmt.Errorf("%w: %v", pool.ErrInvalidEgress, errs.ToAggregate())}
			continue
		}
		if k.Net != sandbox.NetEgress {
			pol = nil // the none lane has no network to filter
		}
		out[ref] = pool.TemplateRead{Key: k, Egress: pol, Created: t.CreationTimestamp.Time}
	}
	return out, objs
}

func (c *Controller) listNodes(ctx context.Context) ([]schedNode, error) {
	l, err := c.dyn.Resource(inventory.GroupVersionResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []schedNode
	for i := range l.Items {
		var ni inventory.NodeInventory
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(l.Items[i].Object, &ni); err != nil {
			klog.ErrorS(err, "decode nodeinventory", "name", l.Items[i].GetName())
			continue
		}
		if ni.Address == "" {
			continue
		}
		w := map[pool.Key]int32{}
		for _, p := range ni.Pools {
			w[pool.Key{Template: p.Template, Net: p.Net, Size: p.Size}] += p.Warm
		}
		out = append(out, schedNode{name: ni.Name, addr: ni.Address, warm: w})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// apply PUTs each node's targets when they changed or the last PUT is
// older than the interval, concurrently (at most PutConcurrency at a
// time), each under PutTimeout. A node answering replaces its warm counts
// with the answer. It returns the failed PUTs, the answers' pools by node
// and the nodes gone since the last tick with the keys they were sent
// warm targets for.
func (c *Controller) apply(ctx context.Context, nodes []schedNode, plan pool.Plan) (map[string]error, map[string][]nodeapi.PoolInfo, map[string][]pool.Key) {
	errs := map[string]error{}
	answers := map[string][]nodeapi.PoolInfo{}
	gone := map[string][]pool.Key{}
	if c.cfg.Secret == "" {
		klog.V(1).InfoS("no fleet secret: warm targets not sent (fail closed)")
		return errs, answers, gone
	}
	var mu sync.Mutex
	now := time.Now()
	type put struct {
		n     *schedNode
		specs []nodeapi.PoolSpec
	}
	var due []put
	for i := range nodes {
		n := &nodes[i]
		specs := make([]nodeapi.PoolSpec, 0, len(plan.Targets[n.name]))
		for _, t := range plan.Targets[n.name] {
			specs = append(specs, nodeapi.PoolSpec{Template: t.Key.Template, Net: t.Key.Net, Size: t.Key.Size, Warm: t.Warm, Egress: plan.Egress[t.Key]})
		}
		prev, ok := c.sent[n.name]
		if ok && prev.addr != n.addr {
			klog.InfoS("Node address changed; it gets only its own token at the new address", "node", n.name, "old", prev.addr, "new", n.addr)
		}
		if ok && prev.addr == n.addr && reflect.DeepEqual(prev.specs, specs) && now.Sub(prev.at) < c.cfg.Interval-c.cfg.Interval/4 {
			continue
		}
		due = append(due, put{n, specs})
	}
	var g errgroup.Group // errors stay per node in errs; g never fails
	g.SetLimit(PutConcurrency)
	for _, d := range due {
		n, specs := d.n, d.specs
		g.Go(func() error {
			cctx, cancel := context.WithTimeout(ctx, PutTimeout)
			defer cancel()
			nc := &nodeapi.Client{Addr: n.addr, Token: nodeapi.NodeToken(c.cfg.Secret, n.name), HTTP: c.cfg.HTTP}
			info, err := nc.PutPools(cctx, specs)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[n.name] = err
				delete(c.sent, n.name)
				klog.ErrorS(err, "PUT /v1/pools", "node", n.name, "addr", n.addr)
				return nil
			}
			c.sent[n.name] = sentTargets{addr: n.addr, specs: specs, at: now}
			answers[n.name] = info.Pools
			w := map[pool.Key]int32{}
			for _, p := range info.Pools {
				w[pool.Key{Template: p.Template, Net: p.Net, Size: p.Size}] += p.Warm
			}
			n.warm = w
			return nil
		})
	}
	_ = g.Wait()
	for name, sent := range c.sent {
		if _, ok := plan.Targets[name]; !ok {
			for _, s := range sent.specs {
				if s.Warm > 0 {
					gone[name] = append(gone[name], pool.Key{Template: s.Template, Net: s.Net, Size: s.Size})
				}
			}
			delete(c.sent, name) // node gone
		}
	}
	return errs, answers, gone
}

// record writes evs as Kubernetes Events on their pools (and templates).
func (c *Controller) record(evs []poolEvent, pools []listedPool, templates map[pool.Ref]*unstructured.Unstructured) {
	if c.cfg.Events == nil {
		return
	}
	byRef := make(map[pool.Ref]*listedPool, len(pools))
	for i := range pools {
		byRef[pools[i].wp.Ref] = &pools[i]
	}
	for _, e := range evs {
		p := byRef[e.Pool]
		if p == nil {
			continue
		}
		action := eventAction[e.Reason]
		c.cfg.Events.Eventf(p.obj, e.Type, e.Reason, action, "%s", e.Note)
		if e.OnTemplate {
			if t := templates[pool.Ref{Namespace: e.Pool.Namespace, Name: p.wp.Template}]; t != nil {
				c.cfg.Events.Eventf(t, e.Type, e.Reason, action, "Pool %s: %s", e.Pool.Name, e.Note)
			}
		}
	}
}

// eventAction is each reason's action (events.k8s.io/v1 requires one).
var eventAction = map[string]string{
	ReasonFillStarted: "Fill", ReasonFillFinished: "Fill", ReasonBootFailed: "Boot",
	ReasonEvicted: "Evict", ReasonNodeGone: "Schedule",
}

func (c *Controller) writeStatus(ctx context.Context, p listedPool, total int32) {
	want := extv1beta1.SandboxWarmPoolStatus{Replicas: total, ReadyReplicas: total, Selector: SelectorLabel + "=" + p.wp.Ref.Name}
	if p.status == want {
		return
	}
	body := fmt.Sprintf(`{"status":{"replicas":%d,"readyReplicas":%d,"selector":%q}}`, want.Replicas, want.ReadyReplicas, want.Selector)
	_, err := c.dyn.Resource(WarmPools).Namespace(p.wp.Ref.Namespace).Patch(ctx, p.wp.Ref.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{FieldManager: "hearth-warmpool-driver"}, "status")
	if err != nil && !apierrors.IsNotFound(err) {
		klog.ErrorS(err, "write sandboxwarmpool status", "pool", p.wp.Ref)
	}
}
