package registry

import (
	"context"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// kindSpec describes one stored kind; strategy turns it into the generic
// registry's create/update/delete strategies.
type kindSpec struct {
	namespaced bool
	// hasStatus kinds get a status subresource: the main resource ignores
	// status changes and the status subresource ignores everything else.
	hasStatus bool
	// spec returns what a generation bump compares (spec, or the whole
	// payload for kinds without status).
	spec func(runtime.Object) any
	// resetStatus clears status on create; copyStatus copies src's status
	// into dst; copySpec copies src's spec into dst. Nil unless hasStatus.
	resetStatus          func(runtime.Object)
	copyStatus, copySpec func(dst, src runtime.Object)
	// defaults fills defaults on create and update (may be nil).
	defaults func(runtime.Object)
	// validate checks the payload (metadata is checked by the strategy).
	validate func(runtime.Object) field.ErrorList
	// apiVersion is the served group/version, for the reset-field sets.
	apiVersion string
}

type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
	k      *kindSpec
	status bool
}

func newStrategy(typer runtime.ObjectTyper, k *kindSpec, status bool) *strategy {
	return &strategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator, k: k, status: status}
}

func (s *strategy) NamespaceScoped() bool { return s.k.namespaced }

func (s *strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	if s.k.resetStatus != nil {
		s.k.resetStatus(obj)
	}
	if s.k.defaults != nil {
		s.k.defaults(obj)
	}
	if m, err := meta.Accessor(obj); err == nil {
		m.SetGeneration(1)
	}
}

func (s *strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	if s.status {
		// The status subresource changes status only.
		s.k.copySpec(obj, old)
		if m, err := meta.Accessor(obj); err == nil {
			if om, err := meta.Accessor(old); err == nil {
				m.SetLabels(om.GetLabels())
				m.SetAnnotations(om.GetAnnotations())
				m.SetFinalizers(om.GetFinalizers())
				m.SetOwnerReferences(om.GetOwnerReferences())
			}
		}
		return
	}
	if s.k.copyStatus != nil {
		s.k.copyStatus(obj, old)
	}
	if s.k.defaults != nil {
		s.k.defaults(obj)
	}
	m, err1 := meta.Accessor(obj)
	om, err2 := meta.Accessor(old)
	if err1 != nil || err2 != nil {
		return
	}
	m.SetGeneration(om.GetGeneration())
	if !apiequality.Semantic.DeepEqual(s.k.spec(obj), s.k.spec(old)) {
		m.SetGeneration(om.GetGeneration() + 1)
	}
}

func (s *strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	m, err := meta.Accessor(obj)
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("metadata"), err)}
	}
	errs := apimachineryvalidation.ValidateObjectMetaAccessor(m, s.k.namespaced, path.ValidatePathSegmentName, field.NewPath("metadata"))
	if s.k.validate != nil {
		errs = append(errs, s.k.validate(obj)...)
	}
	return errs
}

func (s *strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	errs := s.Validate(ctx, obj)
	m, err1 := meta.Accessor(obj)
	om, err2 := meta.Accessor(old)
	if err1 == nil && err2 == nil {
		errs = append(errs, apimachineryvalidation.ValidateObjectMetaAccessorUpdate(m, om, field.NewPath("metadata"))...)
	}
	return errs
}

func (s *strategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }
func (s *strategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}
func (s *strategy) Canonicalize(runtime.Object)                   {}
func (s *strategy) AllowCreateOnUpdate(context.Context) bool      { return false }
func (s *strategy) AllowUnconditionalUpdate(context.Context) bool { return true }

// GetResetFields names the fields a request to this endpoint cannot change,
// so server-side apply does not record ownership of them.
func (s *strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	if !s.k.hasStatus {
		return nil
	}
	set := fieldpath.NewSet(fieldpath.MakePathOrDie("status"))
	if s.status {
		set = fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))
	}
	return map[fieldpath.APIVersion]*fieldpath.Set{fieldpath.APIVersion(s.k.apiVersion): set}
}
