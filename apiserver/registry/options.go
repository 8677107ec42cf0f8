package registry

import (
	"fmt"
	"path"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage/storagebackend"
)

// DefaultPrefix is the etcd key prefix of every object this package stores.
const DefaultPrefix = "/hearth"

// StorageOptions point the registry at an etcd.
type StorageOptions struct {
	// Endpoints are etcd client URLs ("https://127.0.0.1:2379").
	Endpoints []string
	// CAFile verifies etcd's serving certificate; CertFile and KeyFile are
	// the client certificate etcd requires (all PEM; empty for none).
	CAFile, CertFile, KeyFile string
	// Prefix is the etcd key prefix; DefaultPrefix when empty. Objects live
	// under <prefix>/<group>/<resource>/[<namespace>/]<name>.
	Prefix string
	// NoCache disables the watch cache (each read and watch goes to etcd).
	NoCache bool
}

type restOptionsGetter struct {
	opts   StorageOptions
	scheme *runtime.Scheme
	codecs serializer.CodecFactory
}

// NewRESTOptionsGetter returns a generic.RESTOptionsGetter over etcd3: JSON
// in etcd, encoded in each group's preferred version.
func NewRESTOptionsGetter(opts StorageOptions, scheme *runtime.Scheme, codecs serializer.CodecFactory) generic.RESTOptionsGetter {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	return &restOptionsGetter{opts: opts, scheme: scheme, codecs: codecs}
}

func (g *restOptionsGetter) GetRESTOptions(gr schema.GroupResource, _ runtime.Object) (generic.RESTOptions, error) {
	versions := g.scheme.PrioritizedVersionsForGroup(gr.Group)
	if len(versions) == 0 {
		return generic.RESTOptions{}, fmt.Errorf("group %q is not registered in the scheme", gr.Group)
	}
	gv := versions[0]
	cfg := storagebackend.NewDefaultConfig(g.opts.Prefix, g.codecs.LegacyCodec(gv))
	cfg.EncodeVersioner = gv
	cfg.Transport.ServerList = g.opts.Endpoints
	cfg.Transport.TrustedCAFile = g.opts.CAFile
	cfg.Transport.CertFile = g.opts.CertFile
	cfg.Transport.KeyFile = g.opts.KeyFile
	cfg.CountMetricPollPeriod = time.Minute
	decorator := genericregistry.StorageWithCacher()
	if g.opts.NoCache {
		decorator = generic.UndecoratedStorage
	}
	return generic.RESTOptions{
		StorageConfig:           cfg.ForResource(gr),
		Decorator:               decorator,
		DeleteCollectionWorkers: 1,
		ResourcePrefix:          path.Join(gr.Group, gr.Resource),
		CountMetricPollPeriod:   time.Minute,
	}, nil
}
