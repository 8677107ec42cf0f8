package registry

import (
	"fmt"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/hearthvm/hearth/inventory"
)

// GroupVersions are the API group versions this package serves.
var GroupVersions = []schema.GroupVersion{
	extv1beta1.GroupVersion,
	inventory.SchemeGroupVersion,
	coordinationv1.SchemeGroupVersion,
	eventsv1.SchemeGroupVersion,
}

// AddToScheme registers the served types under their versions and, as
// identity, under each group's __internal version (the generic apiserver
// decodes to the internal version; these types have no separate internal
// form). autoscaling/v1 Scale is registered the same way for the scale
// subresource.
func AddToScheme(s *runtime.Scheme) error {
	for _, add := range []func(*runtime.Scheme) error{extv1beta1.AddToScheme, inventory.AddToScheme} {
		if err := add(s); err != nil {
			return err
		}
	}
	s.AddKnownTypes(coordinationv1.SchemeGroupVersion, &coordinationv1.Lease{}, &coordinationv1.LeaseList{})
	metav1.AddToGroupVersion(s, coordinationv1.SchemeGroupVersion)
	s.AddKnownTypes(autoscalingv1.SchemeGroupVersion, &autoscalingv1.Scale{})
	metav1.AddToGroupVersion(s, autoscalingv1.SchemeGroupVersion)
	s.AddKnownTypes(eventsv1.SchemeGroupVersion, &eventsv1.Event{}, &eventsv1.EventList{})
	metav1.AddToGroupVersion(s, eventsv1.SchemeGroupVersion)
	s.AddKnownTypes(corev1.SchemeGroupVersion, &corev1.Event{}, &corev1.EventList{})
	if err := addEventFieldLabels(s); err != nil {
		return err
	}

	internal := func(group string, objs ...runtime.Object) {
		s.AddKnownTypes(schema.GroupVersion{Group: group, Version: runtime.APIVersionInternal}, objs...)
	}
	internal(extv1beta1.GroupVersion.Group,
		&extv1beta1.SandboxTemplate{}, &extv1beta1.SandboxTemplateList{},
		&extv1beta1.SandboxWarmPool{}, &extv1beta1.SandboxWarmPoolList{},
		&extv1beta1.SandboxClaim{}, &extv1beta1.SandboxClaimList{})
	internal(inventory.GroupName, &inventory.NodeInventory{}, &inventory.NodeInventoryList{})
	internal(coordinationv1.GroupName, &coordinationv1.Lease{}, &coordinationv1.LeaseList{})
	internal(autoscalingv1.GroupName, &autoscalingv1.Scale{})
	internal(eventsv1.GroupName, &eventsv1.Event{}, &eventsv1.EventList{})
	internal(corev1.GroupName, &corev1.Event{}, &corev1.EventList{})

	for _, gv := range append(GroupVersions, autoscalingv1.SchemeGroupVersion, corev1.SchemeGroupVersion) {
		if err := s.SetVersionPriority(gv); err != nil {
			return err
		}
	}
	return nil
}

// addEventFieldLabels lets events be selected by the fields eventAttrs and
// coreEventFields set (beyond metadata.name and namespace).
func addEventFieldLabels(s *runtime.Scheme) error {
	allow := func(set map[string]bool) runtime.FieldLabelConversionFunc {
		return func(label, value string) (string, string, error) {
			if set[label] {
				return label, value, nil
			}
			return "", "", fmt.Errorf("field label not supported: %s", label)
		}
	}
	evs := map[string]bool{}
	for k := range must(eventAttrs(&eventsv1.Event{})) {
		evs[k] = true
	}
	core := map[string]bool{}
	for k := range coreEventFields(&corev1.Event{}) {
		core[k] = true
	}
	if err := s.AddFieldLabelConversionFunc(eventsv1.SchemeGroupVersion.WithKind("Event"), allow(evs)); err != nil {
		return err
	}
	return s.AddFieldLabelConversionFunc(corev1.SchemeGroupVersion.WithKind("Event"), allow(core))
}

func must(_ labels.Set, f fields.Set, err error) fields.Set {
	if err != nil {
		panic(err)
	}
	return f
}
