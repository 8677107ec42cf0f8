package registry

import (
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

	for _, gv := range append(GroupVersions, autoscalingv1.SchemeGroupVersion) {
		if err := s.SetVersionPriority(gv); err != nil {
			return err
		}
	}
	return nil
}
