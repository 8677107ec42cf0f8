package registry

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
)

// EventTTLSeconds is how long a stored event lives (kube-apiserver's
// --event-ttl default): etcd forgets it after, whatever wrote it.
const EventTTLSeconds = 3600

// Events are what this package serves of Kubernetes Events in dev mode,
// where no kube-apiserver serves them (docs/OPERATIONS.md#events):
// events.k8s.io/v1 events, stored in etcd with a TTL (resources(): the
// controllers write them through client-go), and core/v1 events, a
// read-only view of the same for kubectl describe and kubectl events
// (LegacyEvents), which also shows each sandbox's node-recorded events.

// eventAttrs are the fields an events.k8s.io/v1 event can be selected by.
func eventAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	e, ok := obj.(*eventsv1.Event)
	if !ok {
		return nil, nil, fmt.Errorf("not an event: %T", obj)
	}
	return e.Labels, fields.Set{
		"metadata.name": e.Name, "metadata.namespace": e.Namespace,
		"regarding.kind": e.Regarding.Kind, "regarding.name": e.Regarding.Name,
		"regarding.namespace": e.Regarding.Namespace, "regarding.uid": string(e.Regarding.UID),
		"reason": e.Reason, "type": e.Type, "reportingController": e.ReportingController,
	}, nil
}

// CoreEvent is e as a core/v1 event (what kube-apiserver serves of one
// events.k8s.io/v1 event at /api/v1).
func CoreEvent(e *eventsv1.Event) corev1.Event {
	out := corev1.Event{
		TypeMeta:            metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
		ObjectMeta:          e.ObjectMeta,
		InvolvedObject:      e.Regarding,
		Reason:              e.Reason,
		Message:             e.Note,
		Type:                e.Type,
		Action:              e.Action,
		Related:             e.Related,
		EventTime:           e.EventTime,
		ReportingController: e.ReportingController,
		ReportingInstance:   e.ReportingInstance,
		Source:              corev1.EventSource{Component: e.DeprecatedSource.Component, Host: e.DeprecatedSource.Host},
		FirstTimestamp:      e.DeprecatedFirstTimestamp,
		LastTimestamp:       e.DeprecatedLastTimestamp,
		Count:               e.DeprecatedCount,
	}
	if out.Source.Component == "" {
		out.Source.Component = e.ReportingController
	}
	if e.Series != nil {
		out.Series = &corev1.EventSeries{Count: e.Series.Count, LastObservedTime: e.Series.LastObservedTime}
		out.Count = e.Series.Count
		out.LastTimestamp = metav1.NewTime(e.Series.LastObservedTime.Time)
	}
	if out.Count == 0 {
		out.Count = 1
	}
	if out.FirstTimestamp.IsZero() {
		out.FirstTimestamp = metav1.NewTime(e.EventTime.Time)
	}
	if out.LastTimestamp.IsZero() {
		out.LastTimestamp = out.FirstTimestamp
	}
	return out
}

// coreEventFields are the fields a core/v1 event is selected by
// (kube-apiserver's: kubectl describe selects involvedObject.*).
func coreEventFields(e *corev1.Event) fields.Set {
	return fields.Set{
		"metadata.name": e.Name, "metadata.namespace": e.Namespace,
		"involvedObject.kind": e.InvolvedObject.Kind, "involvedObject.namespace": e.InvolvedObject.Namespace,
		"involvedObject.name": e.InvolvedObject.Name, "involvedObject.uid": string(e.InvolvedObject.UID),
		"involvedObject.apiVersion": e.InvolvedObject.APIVersion, "involvedObject.resourceVersion": e.InvolvedObject.ResourceVersion,
		"involvedObject.fieldPath": e.InvolvedObject.FieldPath,
		"reason":                   e.Reason, "reportingComponent": e.ReportingController, "source": e.Source.Component, "type": e.Type,
	}
}

// SandboxEvents returns the events of sandbox name in namespace ns, as its
// node recorded them (none, not an error, when it does not exist).
type SandboxEvents func(ctx context.Context, ns, name string) ([]corev1.Event, error)

// LegacyEvents is core/v1 events, read-only: the stored events.k8s.io/v1
// events converted (CoreEvent), and a sandbox's node-recorded events when
// the field selector names one (involvedObject.kind=Sandbox and its name),
// as kubectl describe sandbox asks.
type LegacyEvents struct {
	store    rest.Lister
	sandbox  SandboxEvents
	tableGen rest.TableConvertor
}

var (
	_ rest.Lister               = &LegacyEvents{}
	_ rest.Scoper               = &LegacyEvents{}
	_ rest.Storage              = &LegacyEvents{}
	_ rest.SingularNameProvider = &LegacyEvents{}
)

func (l *LegacyEvents) New() runtime.Object     { return &corev1.Event{} }
func (l *LegacyEvents) NewList() runtime.Object { return &corev1.EventList{} }
func (l *LegacyEvents) Destroy()                {}
func (l *LegacyEvents) NamespaceScoped() bool   { return true }
func (l *LegacyEvents) GetSingularName() string { return "event" }
func (l *LegacyEvents) ConvertToTable(ctx context.Context, obj, opts runtime.Object) (*metav1.Table, error) {
	return l.tableGen.ConvertToTable(ctx, obj, opts)
}

// List lists the stored events of the request's namespace (all of them
// for a cluster-wide list), converted, then filters them by opts.
func (l *LegacyEvents) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	inner := &metainternalversion.ListOptions{LabelSelector: labels.Everything(), FieldSelector: fields.Everything()}
	if opts != nil && opts.LabelSelector != nil {
		inner.LabelSelector = opts.LabelSelector
	}
	got, err := l.store.List(ctx, inner)
	if err != nil {
		return nil, err
	}
	sel := fields.Everything()
	if opts != nil && opts.FieldSelector != nil {
		sel = opts.FieldSelector
	}
	out := &corev1.EventList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "EventList"}}
	if el, ok := got.(*eventsv1.EventList); ok {
		out.ResourceVersion = el.ResourceVersion
		for i := range el.Items {
			ce := CoreEvent(&el.Items[i])
			if sel.Matches(coreEventFields(&ce)) {
				out.Items = append(out.Items, ce)
			}
		}
	}
	kind, _ := sel.RequiresExactMatch("involvedObject.kind")
	name, _ := sel.RequiresExactMatch("involvedObject.name")
	if l.sandbox != nil && kind == "Sandbox" && name != "" {
		ns, _ := genericapirequest.NamespaceFrom(ctx)
		if n, ok := sel.RequiresExactMatch("involvedObject.namespace"); ok && ns == "" {
			ns = n
		}
		evs, err := l.sandbox(ctx, ns, name)
		if err != nil {
			return nil, err
		}
		for i := range evs {
			if sel.Matches(coreEventFields(&evs[i])) {
				out.Items = append(out.Items, evs[i])
			}
		}
	}
	return out, nil
}

// eventsResource is events.k8s.io/v1 events in resources().
func eventsResource() resource {
	return resource{
		gvr:        eventsv1.SchemeGroupVersion.WithResource("events"),
		singular:   "event",
		shortNames: []string{"ev"},
		newObj:     func() runtime.Object { return &eventsv1.Event{} },
		newList:    func() runtime.Object { return &eventsv1.EventList{} },
		ttl:        EventTTLSeconds,
		attrs:      eventAttrs,
		kind: kindSpec{
			namespaced: true,
			apiVersion: eventsv1.SchemeGroupVersion.String(),
			// An event has no spec: every write is its whole payload.
			spec: func(o runtime.Object) any {
				e := *o.(*eventsv1.Event)
				e.ObjectMeta = metav1.ObjectMeta{}
				return e
			},
		},
		columns: []column{
			{metav1.TableColumnDefinition{Name: "Type", Type: "string"}, func(o runtime.Object) any { return o.(*eventsv1.Event).Type }},
			{metav1.TableColumnDefinition{Name: "Reason", Type: "string"}, func(o runtime.Object) any { return o.(*eventsv1.Event).Reason }},
			{metav1.TableColumnDefinition{Name: "Object", Type: "string"}, func(o runtime.Object) any {
				r := o.(*eventsv1.Event).Regarding
				return strings.ToLower(r.Kind) + "/" + r.Name
			}},
			{metav1.TableColumnDefinition{Name: "Message", Type: "string"}, func(o runtime.Object) any { return o.(*eventsv1.Event).Note }},
		},
	}
}

// LegacyEventsGroup is the core/v1 API group serving only LegacyEvents
// over stores' events.k8s.io/v1 events (install it at /api with
// GenericAPIServer.InstallLegacyAPIGroup); sandbox may be nil.
func LegacyEventsGroup(scheme *runtime.Scheme, codecs serializer.CodecFactory, stores Stores, sandbox SandboxEvents) (*genericapiserver.APIGroupInfo, error) {
	st := stores[eventsv1.SchemeGroupVersion.WithResource("events")]
	if st == nil {
		return nil, fmt.Errorf("no events.k8s.io/v1 events store")
	}
	info := genericapiserver.NewDefaultAPIGroupInfo("", scheme, metav1.ParameterCodec, codecs)
	info.VersionedResourcesStorageMap["v1"] = map[string]rest.Storage{
		"events": &LegacyEvents{store: st, sandbox: sandbox, tableGen: rest.NewDefaultTableConvertor(schema.GroupResource{Resource: "events"})},
	}
	return &info, nil
}
