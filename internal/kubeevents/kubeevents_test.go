package kubeevents

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

func pool(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("extensions.agents.x-k8s.io/v1beta1")
	u.SetKind("SandboxWarmPool")
	u.SetNamespace("default")
	u.SetName(name)
	u.SetUID("uid-1")
	return u
}

// A repeat of an event is one series: 100 isomorphic events cost two
// writes (the event, then the series' start), never one each.
func TestRecorder_RepeatsBecomeOneSeries(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset()
	r := NewForSink(ctx, cs.EventsV1(), "hearth.dev/test")
	defer r.Shutdown()
	r.burst = 1000
	obj := pool("p")
	for range 100 {
		r.Eventf(obj, Warning, "BootFailed", "Boot", "node %s cannot boot: %s", "n1", "pull img:1: not found")
	}
	require.Eventually(t, func() bool { return r.Writes() >= 2 }, 30*time.Second, 5*time.Millisecond, "two writes")
	l, err := cs.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("events: %d, %v; want 1", len(l.Items), err)
	}
	e := l.Items[0]
	if e.Reason != "BootFailed" || e.Regarding.Kind != "SandboxWarmPool" || e.Regarding.Name != "p" || e.ReportingController != "hearth.dev/test" {
		t.Fatalf("event: %+v", e)
	}
	time.Sleep(100 * time.Millisecond) // a bounded window for a wrong extra write (a negative check)
	if w := r.Writes(); w != 2 {
		t.Fatalf("100 repeats cost %d writes, want 2", w)
	}
}

// The spam filter passes Burst events per object and drops the rest; another
// object has its own bucket.
func TestRecorder_SpamFilterBoundsWritesPerObject(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset()
	r := NewForSink(ctx, cs.EventsV1(), "hearth.dev/test")
	defer r.Shutdown()
	r.burst = 5
	a, b := pool("a"), pool("b")
	b.SetUID("uid-2")
	for i := range 20 {
		r.Eventf(a, Normal, fmt.Sprintf("Reason%d", i), "Fill", "distinct")
	}
	r.Eventf(b, Normal, "FillStarted", "Fill", "b")
	require.Eventually(t, func() bool { return r.Writes() >= 6 }, 30*time.Second, 5*time.Millisecond, "six writes")
	time.Sleep(100 * time.Millisecond) // a bounded window for a wrong extra write
	if w := r.Writes(); w != 6 {
		t.Fatalf("writes %d, want 6 (5 of a's 20, 1 of b)", w)
	}
	var nilRec *Recorder
	nilRec.Eventf(a, Normal, "X", "Y", "nil records nothing")
}

// A note past events.k8s.io's 1 KiB would make the API server refuse the
// event (a node's note can carry a chained driver error): it is cut to
// MaxNote at a character's boundary and written.
func TestRecorder_LongNotesAreCutNotLost(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset()
	r := NewForSink(ctx, cs.EventsV1(), "hearth.dev/test")
	defer r.Shutdown()
	long := strings.Repeat("x", MaxNote-1) + "é and more" // é straddles the bound
	r.Eventf(pool("p"), Warning, "RestoreFailed", "Restore", "resume: %s", long)
	require.Eventually(t, func() bool { return r.Writes() >= 1 }, 30*time.Second, 5*time.Millisecond, "one write")
	l, err := cs.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("events: %d, %v; want 1", len(l.Items), err)
	}
	note := l.Items[0].Note
	if len(note) > MaxNote || !utf8.ValidString(note) || !strings.HasPrefix(note, "resume: xxx") {
		t.Fatalf("note of %d bytes (valid UTF-8 %v): %.40q…", len(note), utf8.ValidString(note), note)
	}
}

// The spam filter forgets the object written to least recently, not every
// object at once: past maxTracked others, an object that keeps writing
// keeps its spent budget.
func TestRecorder_SpamFilterForgetsTheLeastRecentObject(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := NewForSink(ctx, fake.NewClientset().EventsV1(), "hearth.dev/test")
	defer r.Shutdown()
	r.burst = 1
	busy := pool("busy")
	if !r.allow(busy) || r.allow(busy) {
		t.Fatal("a burst of 1 did not pass one event and drop the next")
	}
	for i := range maxTracked {
		other := pool(fmt.Sprintf("other-%d", i))
		other.SetUID(types.UID(fmt.Sprintf("uid-%d", i)))
		r.allow(other)
		if i%100 == 0 && r.allow(busy) {
			t.Fatalf("after %d other objects the busy one got its burst again", i+1)
		}
	}
	if r.allow(busy) {
		t.Fatalf("after %d other objects the busy one got its burst again", maxTracked)
	}
}
