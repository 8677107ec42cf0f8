package registry

import (
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/inventory"
)

// resource is one served resource.
type resource struct {
	gvr        schema.GroupVersionResource
	singular   string
	shortNames []string
	categories []string
	newObj     func() runtime.Object
	newList    func() runtime.Object
	kind       kindSpec
	columns    []column
	scale      bool
	// ttl, when set, is how long etcd keeps an object (seconds); attrs
	// the fields it can be selected by (nil: metadata.name and namespace).
	ttl   uint64
	attrs func(runtime.Object) (labels.Set, fields.Set, error)
}

func resources() []resource {
	ext := extv1beta1.GroupVersion
	return []resource{
		{
			gvr:      ext.WithResource("sandboxtemplates"),
			singular: "sandboxtemplate",
			newObj:   func() runtime.Object { return &extv1beta1.SandboxTemplate{} },
			newList:  func() runtime.Object { return &extv1beta1.SandboxTemplateList{} },
			kind: kindSpec{
				namespaced: true,
				apiVersion: ext.String(),
				spec:       func(o runtime.Object) any { return o.(*extv1beta1.SandboxTemplate).Spec },
				validate:   validateTemplate,
			},
		},
		{
			gvr:        ext.WithResource("sandboxwarmpools"),
			singular:   "sandboxwarmpool",
			shortNames: []string{"swp"},
			newObj:     func() runtime.Object { return &extv1beta1.SandboxWarmPool{} },
			newList:    func() runtime.Object { return &extv1beta1.SandboxWarmPoolList{} },
			scale:      true,
			kind: kindSpec{
				namespaced:  true,
				hasStatus:   true,
				apiVersion:  ext.String(),
				spec:        func(o runtime.Object) any { return o.(*extv1beta1.SandboxWarmPool).Spec },
				resetStatus: func(o runtime.Object) { o.(*extv1beta1.SandboxWarmPool).Status = extv1beta1.SandboxWarmPoolStatus{} },
				copyStatus: func(dst, src runtime.Object) {
					dst.(*extv1beta1.SandboxWarmPool).Status = src.(*extv1beta1.SandboxWarmPool).Status
				},
				copySpec: func(dst, src runtime.Object) {
					dst.(*extv1beta1.SandboxWarmPool).Spec = *src.(*extv1beta1.SandboxWarmPool).Spec.DeepCopy()
				},
				defaults: func(o runtime.Object) {
					wp := o.(*extv1beta1.SandboxWarmPool)
					if wp.Spec.Replicas == nil {
						one := int32(1)
						wp.Spec.Replicas = &one
					}
				},
				validate: validateWarmPool,
			},
			columns: []column{
				{metav1.TableColumnDefinition{Name: "Ready", Type: "integer"}, func(o runtime.Object) any {
					return int64(o.(*extv1beta1.SandboxWarmPool).Status.ReadyReplicas)
				}},
				{metav1.TableColumnDefinition{Name: "Desired", Type: "integer"}, func(o runtime.Object) any {
					if r := o.(*extv1beta1.SandboxWarmPool).Spec.Replicas; r != nil {
						return int64(*r)
					}
					return nil
				}},
				{metav1.TableColumnDefinition{Name: "Template", Type: "string"}, func(o runtime.Object) any {
					return o.(*extv1beta1.SandboxWarmPool).Spec.TemplateRef.Name
				}},
			},
		},
		{
			gvr:        ext.WithResource("sandboxclaims"),
			singular:   "sandboxclaim",
			shortNames: []string{"sandboxclaim"},
			newObj:     func() runtime.Object { return &extv1beta1.SandboxClaim{} },
			newList:    func() runtime.Object { return &extv1beta1.SandboxClaimList{} },
			kind: kindSpec{
				namespaced:  true,
				hasStatus:   true,
				apiVersion:  ext.String(),
				spec:        func(o runtime.Object) any { return o.(*extv1beta1.SandboxClaim).Spec },
				resetStatus: func(o runtime.Object) { o.(*extv1beta1.SandboxClaim).Status = extv1beta1.SandboxClaimStatus{} },
				copyStatus: func(dst, src runtime.Object) {
					dst.(*extv1beta1.SandboxClaim).Status = src.(*extv1beta1.SandboxClaim).Status
				},
				copySpec: func(dst, src runtime.Object) {
					dst.(*extv1beta1.SandboxClaim).Spec = *src.(*extv1beta1.SandboxClaim).Spec.DeepCopy()
				},
				validate: validateClaim,
			},
			columns: []column{
				// upstream's additionalPrinterColumns: Ready, Sandbox, Reason (Age last).
				{metav1.TableColumnDefinition{Name: "Ready", Type: "string"}, func(o runtime.Object) any {
					if c := meta.FindStatusCondition(o.(*extv1beta1.SandboxClaim).Status.Conditions, string(sandboxv1beta1.SandboxConditionReady)); c != nil {
						return string(c.Status)
					}
					return ""
				}},
				{metav1.TableColumnDefinition{Name: "Sandbox", Type: "string"}, func(o runtime.Object) any {
					return o.(*extv1beta1.SandboxClaim).Status.SandboxStatus.Name
				}},
				{metav1.TableColumnDefinition{Name: "Reason", Type: "string"}, func(o runtime.Object) any {
					if c := meta.FindStatusCondition(o.(*extv1beta1.SandboxClaim).Status.Conditions, string(sandboxv1beta1.SandboxConditionReady)); c != nil {
						return c.Reason
					}
					return ""
				}},
			},
		},
		{
			gvr:      inventory.GroupVersionResource,
			singular: "nodeinventory",
			newObj:   func() runtime.Object { return &inventory.NodeInventory{} },
			newList:  func() runtime.Object { return &inventory.NodeInventoryList{} },
			kind: kindSpec{
				apiVersion: inventory.SchemeGroupVersion.String(),
				spec: func(o runtime.Object) any {
					ni := o.(*inventory.NodeInventory)
					return []any{ni.Node, ni.Address, ni.Pools, ni.Entries}
				},
				validate: validateNodeInventory,
			},
			columns: []column{
				{metav1.TableColumnDefinition{Name: "Address", Type: "string"}, func(o runtime.Object) any {
					return o.(*inventory.NodeInventory).Address
				}},
				{metav1.TableColumnDefinition{Name: "Warm", Type: "integer", Description: "warm microVMs over all pools"}, func(o runtime.Object) any {
					var n int64
					for _, p := range o.(*inventory.NodeInventory).Pools {
						n += int64(p.Warm)
					}
					return n
				}},
				{metav1.TableColumnDefinition{Name: "Claimed", Type: "integer"}, func(o runtime.Object) any {
					return int64(len(o.(*inventory.NodeInventory).Entries))
				}},
			},
		},
		{
			gvr:      coordinationv1.SchemeGroupVersion.WithResource("leases"),
			singular: "lease",
			newObj:   func() runtime.Object { return &coordinationv1.Lease{} },
			newList:  func() runtime.Object { return &coordinationv1.LeaseList{} },
			kind: kindSpec{
				namespaced: true,
				apiVersion: coordinationv1.SchemeGroupVersion.String(),
				spec:       func(o runtime.Object) any { return o.(*coordinationv1.Lease).Spec },
			},
			columns: []column{
				{metav1.TableColumnDefinition{Name: "Holder", Type: "string"}, func(o runtime.Object) any {
					if h := o.(*coordinationv1.Lease).Spec.HolderIdentity; h != nil {
						return *h
					}
					return ""
				}},
			},
		},
		eventsResource(),
	}
}

// validateTemplate refuses a template whose egress policy (spec.networkPolicy
// with networkPolicyManagement) Hearth cannot enforce as written: pod and
// namespace selectors, named ports, invalid CIDRs or ports, more than
// egress.MaxRules rules. Stored, such a template would give its pools no
// policy to hold their sandboxes to (docs/API.md#egress-policy-kubernetes).
func validateTemplate(o runtime.Object) field.ErrorList {
	_, errs := egress.FromTemplate(&o.(*extv1beta1.SandboxTemplate).Spec)
	return errs
}

func validateWarmPool(o runtime.Object) field.ErrorList {
	wp := o.(*extv1beta1.SandboxWarmPool)
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if r := wp.Spec.Replicas; r != nil && *r < 0 {
		errs = append(errs, field.Invalid(spec.Child("replicas"), *r, "must be greater than or equal to 0"))
	}
	if wp.Spec.TemplateRef.Name == "" {
		errs = append(errs, field.Required(spec.Child("sandboxTemplateRef", "name"), "names the SandboxTemplate of this pool"))
	}
	return errs
}

func validateNodeInventory(o runtime.Object) field.ErrorList {
	ni := o.(*inventory.NodeInventory)
	var errs field.ErrorList
	switch {
	case ni.Node == "":
		errs = append(errs, field.Required(field.NewPath("node"), "the node's name"))
	case ni.Node != ni.Name:
		errs = append(errs, field.Invalid(field.NewPath("node"), ni.Node, fmt.Sprintf("must equal metadata.name %q", ni.Name)))
	}
	for i, p := range ni.Pools {
		if p.Warm < 0 || p.Target < 0 {
			errs = append(errs, field.Invalid(field.NewPath("pools").Index(i), p, "warm and target must be >= 0"))
		}
	}
	return errs
}

// validateClaim is what the upstream CRD's schema requires of a claim:
// a warm pool to claim from, and env entries with names.
func validateClaim(o runtime.Object) field.ErrorList {
	c := o.(*extv1beta1.SandboxClaim)
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if c.Spec.WarmPoolRef.Name == "" {
		errs = append(errs, field.Required(spec.Child("warmPoolRef", "name"), "names the SandboxWarmPool to claim from"))
	}
	for i, e := range c.Spec.Env {
		if e.Name == "" {
			errs = append(errs, field.Required(spec.Child("env").Index(i).Child("name"), ""))
		}
	}
	return errs
}
