// Package kubeevents is how Hearth's controllers (the warm-pool controller,
// the SandboxClaim controller) and its nodes (sandboxd: a sandbox's
// lifecycle events but Claimed) write Kubernetes Events: client-go's
// events.k8s.io/v1 broadcaster (k8s.io/client-go/tools/events), whose
// correlation folds an event that repeats one already written (same
// regarding object, type, reason, action and controller: the note is not
// compared, a series keeps its first note) into a series — a repeat
// writes once to start the series and then only at the series' refresh
// (30 minutes) and end (6 minutes quiet) — behind a spam filter of
// our own: each regarding object may write Burst events at once and then
// one per Every (kube's record package's defaults: 25, then one per 5
// minutes); past it an event is dropped (and logged at V(2)).
//
// Writes counts every write the broadcaster sends (create, update or
// patch): what docs/OPERATIONS.md#events measures. A Recorder whose
// writes fail (an API server that does not serve events.k8s.io/v1) only
// logs; no caller waits on an event.
package kubeevents

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedeventsv1 "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	"k8s.io/utils/lru"
)

// Event types.
const (
	Normal  = "Normal"
	Warning = "Warning"
)

// Spam filter defaults (kube's record.EventSourceObjectSpamFilter's).
const (
	Burst = 25
	Every = 5 * time.Minute
)

// maxTracked bounds the objects the spam filter remembers; past it the
// one written to least recently is forgotten (a released sandbox's, on a
// busy node), and would get its burst again.
const maxTracked = 4096

// MaxNote is the longest note events.k8s.io/v1 accepts (its validation's
// 1 KiB): a longer one would make the API server refuse the event, lost;
// Eventf cuts it to this, at a character's boundary.
const MaxNote = 1024

// Recorder records events for one controller. The zero value and nil
// record nothing.
type Recorder struct {
	rec    events.EventRecorder
	stop   func()
	writes *atomic.Int64

	mu     sync.Mutex
	limits *lru.Cache // key → flowcontrol.RateLimiter
	burst  int
	every  time.Duration
}

// New starts a broadcaster writing to the events.k8s.io/v1 API of cfg as
// controller (the events' reportingController, e.g.
// "hearth.dev/warm-pool-controller") until ctx ends.
func New(ctx context.Context, cfg *rest.Config, controller string) (*Recorder, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return NewForSink(ctx, cs.EventsV1(), controller), nil
}

// NewForSink is New over any events.k8s.io/v1 client (a fake in tests).
func NewForSink(ctx context.Context, c typedeventsv1.EventsV1Interface, controller string) *Recorder {
	r := &Recorder{writes: new(atomic.Int64), limits: lru.New(maxTracked), burst: Burst, every: Every}
	b := events.NewBroadcaster(&countingSink{EventSinkImpl: events.EventSinkImpl{Interface: c}, writes: r.writes})
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		klog.ErrorS(err, "Events: cannot start recording", "controller", controller)
	}
	r.rec = b.NewRecorder(scheme.Scheme, controller)
	r.stop = b.Shutdown
	return r
}

// Eventf records an event regarding obj (a typed object of client-go's
// scheme or an *unstructured.Unstructured with its apiVersion and kind).
func (r *Recorder) Eventf(obj runtime.Object, eventtype, reason, action, note string, args ...any) {
	if r == nil || r.rec == nil || obj == nil {
		return
	}
	if !r.allow(obj) {
		klog.V(2).InfoS("Events: dropped by the spam filter", "reason", reason)
		return
	}
	msg := fmt.Sprintf(note, args...)
	if len(msg) > MaxNote {
		msg = strings.ToValidUTF8(msg[:MaxNote], "") // a rune cut in two is dropped
	}
	r.rec.Eventf(obj, nil, eventtype, reason, action, "%s", msg)
}

// allow is the spam filter: a token bucket per regarding object.
func (r *Recorder) allow(obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	if err != nil {
		return true
	}
	key := obj.GetObjectKind().GroupVersionKind().Kind + "/" + m.GetNamespace() + "/" + m.GetName() + "/" + string(m.GetUID())
	r.mu.Lock()
	defer r.mu.Unlock()
	if l, ok := r.limits.Get(key); ok {
		return l.(flowcontrol.RateLimiter).TryAccept()
	}
	l := flowcontrol.NewTokenBucketRateLimiter(float32(1/r.every.Seconds()), r.burst)
	r.limits.Add(key, l)
	return l.TryAccept()
}

// Writes is how many writes (create, update, patch) the broadcaster has
// sent, failed ones included.
func (r *Recorder) Writes() int64 {
	if r == nil || r.writes == nil {
		return 0
	}
	return r.writes.Load()
}

// Shutdown stops the broadcaster (events not yet written are dropped).
func (r *Recorder) Shutdown() {
	if r != nil && r.stop != nil {
		r.stop()
	}
}

// countingSink counts the broadcaster's writes.
type countingSink struct {
	events.EventSinkImpl
	writes *atomic.Int64
}

func (s *countingSink) Create(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	s.writes.Add(1)
	return s.EventSinkImpl.Create(ctx, e)
}

func (s *countingSink) Update(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	s.writes.Add(1)
	return s.EventSinkImpl.Update(ctx, e)
}

func (s *countingSink) Patch(ctx context.Context, e *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	s.writes.Add(1)
	return s.EventSinkImpl.Patch(ctx, e, data)
}
