package registry

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// REST is the main endpoint of a stored kind.
type REST struct {
	*genericregistry.Store
	shortNames, categories []string
}

var (
	_ rest.ShortNamesProvider   = &REST{}
	_ rest.CategoriesProvider   = &REST{}
	_ rest.StandardStorage      = &REST{}
	_ rest.SingularNameProvider = &REST{}
)

// ShortNames implements rest.ShortNamesProvider.
func (r *REST) ShortNames() []string { return r.shortNames }

// Categories implements rest.CategoriesProvider.
func (r *REST) Categories() []string { return r.categories }

// StatusREST is the status subresource: it changes status only.
type StatusREST struct{ store *genericregistry.Store }

func (r *StatusREST) New() runtime.Object { return r.store.New() }
func (r *StatusREST) Destroy()            {}
func (r *StatusREST) Get(ctx context.Context, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, opts)
}
func (r *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, _ bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	// Never create through status.
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}
func (r *StatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}
func (r *StatusREST) ConvertToTable(ctx context.Context, obj, opts runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, obj, opts)
}

// Stores holds what APIGroups built, for callers that want to reach a store
// directly (tests, shutdown).
type Stores map[schema.GroupVersionResource]*REST

// APIGroups builds one APIGroupInfo per served group, every resource backed
// by a generic registry Store over the storage getter yields. The scheme
// must have been through AddToScheme.
func APIGroups(scheme *runtime.Scheme, codecs serializer.CodecFactory, getter generic.RESTOptionsGetter) ([]*genericapiserver.APIGroupInfo, Stores, error) {
	infos := map[string]*genericapiserver.APIGroupInfo{}
	var order []string
	stores := Stores{}
	for _, res := range resources() {
		res := res
		k := &res.kind
		gr := res.gvr.GroupResource()
		main := newStrategy(scheme, k, false)
		store := &genericregistry.Store{
			NewFunc:                   res.newObj,
			NewListFunc:               res.newList,
			DefaultQualifiedResource:  gr,
			SingularQualifiedResource: schema.GroupResource{Group: gr.Group, Resource: res.singular},
			CreateStrategy:            main,
			UpdateStrategy:            main,
			DeleteStrategy:            main,
			ResetFieldsStrategy:       main,
			TableConvertor:            tableConvertor{columns: res.columns},
		}
		if res.ttl > 0 {
			ttl := res.ttl
			store.TTLFunc = func(runtime.Object, uint64, bool) (uint64, error) { return ttl, nil }
		}
		if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: getter, AttrFunc: res.attrs}); err != nil {
			return nil, nil, fmt.Errorf("storage for %s: %w", gr, err)
		}
		r := &REST{Store: store, shortNames: res.shortNames, categories: res.categories}
		stores[res.gvr] = r

		info, ok := infos[gr.Group]
		if !ok {
			i := genericapiserver.NewDefaultAPIGroupInfo(gr.Group, scheme, metav1.ParameterCodec, codecs)
			info = &i
			infos[gr.Group] = info
			order = append(order, gr.Group)
		}
		m := info.VersionedResourcesStorageMap[res.gvr.Version]
		if m == nil {
			m = map[string]rest.Storage{}
			info.VersionedResourcesStorageMap[res.gvr.Version] = m
		}
		m[res.gvr.Resource] = r
		if k.hasStatus {
			statusStore := *store
			ss := newStrategy(scheme, k, true)
			statusStore.UpdateStrategy = ss
			statusStore.ResetFieldsStrategy = ss
			m[res.gvr.Resource+"/status"] = &StatusREST{store: &statusStore}
		}
		if res.scale {
			m[res.gvr.Resource+"/scale"] = &ScaleREST{store: store}
		}
	}
	out := make([]*genericapiserver.APIGroupInfo, 0, len(order))
	for _, g := range order {
		out = append(out, infos[g])
	}
	return out, stores, nil
}
