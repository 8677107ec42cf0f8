package registry

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
)

// storedEvents is a rest.Lister of fixed events.k8s.io/v1 events.
type storedEvents struct {
	rest.Lister
	items []eventsv1.Event
}

func (s storedEvents) List(context.Context, *metainternalversion.ListOptions) (runtime.Object, error) {
	return &eventsv1.EventList{Items: s.items}, nil
}

func TestCoreEvent_ASeriesIsItsCountAndLastTime(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)
	e := eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "rt.1", Namespace: "default"},
		Regarding: corev1.ObjectReference{Kind: "SandboxWarmPool", Name: "rt", Namespace: "default"},
		Reason:    "BootFailed", Note: "node n1: pull failed", Type: "Warning", Action: "Boot",
		EventTime: metav1.NewMicroTime(t0), ReportingController: "hearth.dev/warm-pool-controller"}
	c := CoreEvent(&e)
	require.Equal(t, int32(1), c.Count)
	require.Equal(t, t0, c.FirstTimestamp.Time)
	require.Equal(t, t0, c.LastTimestamp.Time)
	require.Equal(t, "hearth.dev/warm-pool-controller", c.Source.Component)
	require.Equal(t, "node n1: pull failed", c.Message)
	e.Series = &eventsv1.EventSeries{Count: 7, LastObservedTime: metav1.NewMicroTime(t0.Add(time.Minute))}
	c = CoreEvent(&e)
	require.Equal(t, int32(7), c.Count)
	require.Equal(t, t0.Add(time.Minute), c.LastTimestamp.Time)
}

// core/v1 events are the stored ones filtered by kubectl describe's field
// selector, plus a sandbox's node-recorded ones when it names a Sandbox.
func TestLegacyEvents_FilterByInvolvedObjectAndAskForASandbox(t *testing.T) {
	ev := func(kind, name string) eventsv1.Event {
		return eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: name + ".x", Namespace: "default"},
			Regarding: corev1.ObjectReference{Kind: kind, Name: name, Namespace: "default", UID: "u-" + "1"}, Reason: "R" + kind}
	}
	var asked []string
	l := &LegacyEvents{store: storedEvents{items: []eventsv1.Event{ev("SandboxWarmPool", "rt"), ev("SandboxClaim", "job")}},
		sandbox: func(_ context.Context, ns, name string) ([]corev1.Event, error) {
			asked = append(asked, ns+"/"+name)
			return []corev1.Event{{ObjectMeta: metav1.ObjectMeta{Name: "demo.sb.0", Namespace: ns}, Reason: "Claimed",
				InvolvedObject: corev1.ObjectReference{Kind: "Sandbox", Name: name, Namespace: ns, UID: "u-demo"}}}, nil
		}}
	ctx := genericapirequest.WithNamespace(context.Background(), "default")
	list := func(sel string) []string {
		t.Helper()
		fs, err := fields.ParseSelector(sel)
		require.NoError(t, err)
		got, err := l.List(ctx, &metainternalversion.ListOptions{FieldSelector: fs})
		require.NoError(t, err)
		var out []string
		for _, e := range got.(*corev1.EventList).Items {
			out = append(out, e.Reason)
		}
		return out
	}
	require.Equal(t, []string{"RSandboxWarmPool", "RSandboxClaim"}, list(""))
	require.Equal(t, []string{"RSandboxWarmPool"}, list("involvedObject.kind=SandboxWarmPool,involvedObject.name=rt,involvedObject.namespace=default"))
	require.Empty(t, asked, "no sandbox named: no node asked")
	require.Equal(t, []string{"Claimed"}, list("involvedObject.kind=Sandbox,involvedObject.name=demo,involvedObject.namespace=default,involvedObject.uid=u-demo"))
	require.Equal(t, []string{"default/demo"}, asked)
	require.Empty(t, list("involvedObject.kind=Sandbox,involvedObject.name=demo,involvedObject.uid=another"), "another object of that name (its uid): none")
}

func TestEventsStore_HasATTLAndSelectsByRegarding(t *testing.T) {
	r := eventsResource()
	require.Equal(t, uint64(EventTTLSeconds), r.ttl)
	_, fs, err := r.attrs(&eventsv1.Event{Regarding: corev1.ObjectReference{Kind: "SandboxClaim", Name: "job"}})
	require.NoError(t, err)
	require.Equal(t, "SandboxClaim", fs["regarding.kind"])
	require.Equal(t, "job", fs["regarding.name"])
}
