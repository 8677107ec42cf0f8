package registry

import (
	"context"
	"fmt"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
)

// ScaleREST is the scale subresource of sandboxwarmpools: autoscaling/v1
// Scale with spec.replicas ↔ the pool's spec.replicas, status.replicas ↔
// status.replicas and status.selector ↔ status.selector.
type ScaleREST struct{ store *genericregistry.Store }

var (
	_ rest.Getter                   = &ScaleREST{}
	_ rest.Updater                  = &ScaleREST{}
	_ rest.GroupVersionKindProvider = &ScaleREST{}
)

func (r *ScaleREST) New() runtime.Object { return &autoscalingv1.Scale{} }
func (r *ScaleREST) Destroy()            {}

// GroupVersionKind says the subresource speaks autoscaling/v1 Scale.
func (r *ScaleREST) GroupVersionKind(schema.GroupVersion) schema.GroupVersionKind {
	return autoscalingv1.SchemeGroupVersion.WithKind("Scale")
}

func (r *ScaleREST) Get(ctx context.Context, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	obj, err := r.store.Get(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	return scaleOf(obj.(*extv1beta1.SandboxWarmPool)), nil
}

func (r *ScaleREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, _ bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	obj, _, err := r.store.Update(ctx, name, &scaleUpdate{name: name, inner: objInfo},
		scaleCreateValidation(createValidation), scaleUpdateValidation(updateValidation), false, options)
	if err != nil {
		return nil, false, err
	}
	return scaleOf(obj.(*extv1beta1.SandboxWarmPool)), false, nil
}

func (r *ScaleREST) ConvertToTable(ctx context.Context, obj, opts runtime.Object) (*metav1.Table, error) {
	return rest.NewDefaultTableConvertor(schema.GroupResource{Group: extv1beta1.GroupVersion.Group, Resource: "sandboxwarmpools"}).ConvertToTable(ctx, obj, opts)
}

func scaleOf(wp *extv1beta1.SandboxWarmPool) *autoscalingv1.Scale {
	var replicas int32
	if wp.Spec.Replicas != nil {
		replicas = *wp.Spec.Replicas
	}
	return &autoscalingv1.Scale{
		TypeMeta: metav1.TypeMeta{APIVersion: "autoscaling/v1", Kind: "Scale"},
		ObjectMeta: metav1.ObjectMeta{
			Name:              wp.Name,
			Namespace:         wp.Namespace,
			UID:               wp.UID,
			ResourceVersion:   wp.ResourceVersion,
			CreationTimestamp: wp.CreationTimestamp,
		},
		Spec:   autoscalingv1.ScaleSpec{Replicas: replicas},
		Status: autoscalingv1.ScaleStatus{Replicas: wp.Status.Replicas, Selector: wp.Status.Selector},
	}
}

// scaleUpdate applies an updated Scale onto the stored pool.
type scaleUpdate struct {
	name  string
	inner rest.UpdatedObjectInfo
}

func (u *scaleUpdate) Preconditions() *metav1.Preconditions { return u.inner.Preconditions() }

func (u *scaleUpdate) UpdatedObject(ctx context.Context, old runtime.Object) (runtime.Object, error) {
	if old == nil {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: extv1beta1.GroupVersion.Group, Resource: "sandboxwarmpools"}, u.name)
	}
	pool := old.DeepCopyObject().(*extv1beta1.SandboxWarmPool)
	newObj, err := u.inner.UpdatedObject(ctx, scaleOf(pool))
	if err != nil {
		return nil, err
	}
	sc, ok := newObj.(*autoscalingv1.Scale)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected autoscaling/v1 Scale, got %T", newObj))
	}
	if sc.Spec.Replicas < 0 {
		return nil, apierrors.NewInvalid(autoscalingv1.SchemeGroupVersion.WithKind("Scale").GroupKind(), u.name,
			field.ErrorList{field.Invalid(field.NewPath("spec", "replicas"), sc.Spec.Replicas, "must be greater than or equal to 0")})
	}
	if sc.ResourceVersion != "" {
		// A stale Scale must conflict, like a stale pool.
		pool.ResourceVersion = sc.ResourceVersion
	}
	r := sc.Spec.Replicas
	pool.Spec.Replicas = &r
	return pool, nil
}

func scaleCreateValidation(f rest.ValidateObjectFunc) rest.ValidateObjectFunc {
	if f == nil {
		return nil
	}
	return func(ctx context.Context, obj runtime.Object) error {
		return f(ctx, scaleOf(obj.(*extv1beta1.SandboxWarmPool)))
	}
}

func scaleUpdateValidation(f rest.ValidateObjectUpdateFunc) rest.ValidateObjectUpdateFunc {
	if f == nil {
		return nil
	}
	return func(ctx context.Context, obj, old runtime.Object) error {
		return f(ctx, scaleOf(obj.(*extv1beta1.SandboxWarmPool)), scaleOf(old.(*extv1beta1.SandboxWarmPool)))
	}
}
