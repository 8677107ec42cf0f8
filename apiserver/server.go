package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/compatibility"
	"k8s.io/kube-openapi/pkg/common"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/claim"
	"github.com/hearthvm/hearth/inventory"
)

// DefaultWatchInterval is the fixed cadence at which watches re-derive the view.
const DefaultWatchInterval = time.Second

// ExtraConfig is what the sandboxes storage needs beyond the generic server.
type ExtraConfig struct {
	// Fleet claims, looks up and acts on sandboxes. Required.
	Fleet claim.Fleet
	// View is the published fleet view lists and watches read. Required. If
	// it also has Run(ctx) and WaitForSync(ctx) error (inventory.Source),
	// Server.Run runs it and waits for its first sync before serving.
	View inventory.Viewer
	// WatchInterval is the watch re-derive cadence; default 1s. Never backs off.
	WatchInterval time.Duration
	// DeleteTimeout bounds how long Delete waits for the node to drop a
	// released sandbox; default 30s.
	DeleteTimeout time.Duration
	// ExtraAPIGroups are installed after agents.x-k8s.io. Their kinds must
	// be registered in Scheme (with identity __internal versions).
	ExtraAPIGroups []*genericapiserver.APIGroupInfo
	// ExtraOpenAPIDefinitions are added to GetOpenAPIDefinitions (keys of
	// types without OpenAPIModelName may be Go type names: the namer makes
	// them REST-friendly).
	ExtraOpenAPIDefinitions []common.GetOpenAPIDefinitions
	// Handlers are served at exact non-resource paths (e.g. the Pod-path
	// admission webhook) beside the API.
	Handlers map[string]http.Handler
	// Sidecars run beside the server for its lifetime (the e2b gateway, the
	// warm-pool driver); one returning an error other than a cancellation
	// stops the server.
	Sidecars []func(context.Context) error
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Config is the server configuration.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
	ExtraConfig   ExtraConfig
}

type completedConfig struct {
	GenericConfig genericapiserver.CompletedConfig
	ExtraConfig   *ExtraConfig
}

// CompletedConfig is a Config with defaults filled in; build a Server with New.
type CompletedConfig struct {
	*completedConfig
}

// NewRecommendedConfig returns a generic config over Codecs with the
// effective version and the OpenAPI configs of this package set.
func NewRecommendedConfig() *genericapiserver.RecommendedConfig {
	rc := genericapiserver.NewRecommendedConfig(Codecs)
	rc.EffectiveVersion = compatibility.NewEffectiveVersionFromString("1.36", "", "")
	rc.OpenAPIConfig, rc.OpenAPIV3Config = OpenAPIConfigs("Hearth sandbox-apiserver", Scheme)
	return rc
}

// Complete fills in defaults. The OpenAPI definitions are recomputed so
// that ExtraOpenAPIDefinitions (and kinds registered in Scheme since the
// generic config was made) are included.
func (c *Config) Complete() CompletedConfig {
	x := &c.ExtraConfig
	if x.WatchInterval <= 0 {
		x.WatchInterval = DefaultWatchInterval
	}
	if x.DeleteTimeout <= 0 {
		x.DeleteTimeout = 30 * time.Second
	}
	if x.Now == nil {
		x.Now = time.Now
	}
	g := c.GenericConfig
	if g.EffectiveVersion == nil {
		g.EffectiveVersion = compatibility.NewEffectiveVersionFromString("1.36", "", "")
	}
	v2, v3 := OpenAPIConfigs("Hearth sandbox-apiserver", Scheme, x.ExtraOpenAPIDefinitions...)
	if g.OpenAPIConfig != nil {
		v2.SecurityDefinitions = g.OpenAPIConfig.SecurityDefinitions
	}
	g.OpenAPIConfig, g.OpenAPIV3Config = v2, v3
	return CompletedConfig{&completedConfig{GenericConfig: g.Complete(), ExtraConfig: x}}
}

// Server is the running aggregated API server.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
	view             inventory.Viewer
	sidecars         []func(context.Context) error
}

// New builds the server and installs agents.x-k8s.io, then the extra groups.
func (c CompletedConfig) New() (*Server, error) {
	x := c.ExtraConfig
	if x.Fleet == nil || x.View == nil {
		return nil, fmt.Errorf("apiserver: ExtraConfig.Fleet and ExtraConfig.View are required")
	}
	gs, err := c.GenericConfig.New("sandbox-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	store := &sandboxStorage{fleet: x.Fleet, view: x.View, interval: x.WatchInterval, now: x.Now, deleteTimeout: x.DeleteTimeout}
	resources := map[string]rest.Storage{"sandboxes": store}
	for verb, v := range store.verbs() {
		resources["sandboxes/"+verb] = v
	}
	group := genericapiserver.NewDefaultAPIGroupInfo(sandboxv1beta1.GroupVersion.Group, Scheme, metav1.ParameterCodec, Codecs)
	group.VersionedResourcesStorageMap[sandboxv1beta1.GroupVersion.Version] = resources
	if err := gs.InstallAPIGroup(&group); err != nil {
		return nil, fmt.Errorf("installing %s: %w", sandboxv1beta1.GroupVersion, err)
	}
	for _, g := range x.ExtraAPIGroups {
		if err := gs.InstallAPIGroup(g); err != nil {
			return nil, fmt.Errorf("installing an extra API group: %w", err)
		}
	}
	for path, h := range x.Handlers {
		gs.Handler.NonGoRestfulMux.Handle(path, h)
	}
	return &Server{GenericAPIServer: gs, view: x.View, sidecars: x.Sidecars}, nil
}

type runnableView interface {
	Run(ctx context.Context)
	WaitForSync(ctx context.Context) error
}

// Run serves until ctx ends. A runnable view (inventory.Source) is started
// first and must sync within two minutes.
func (s *Server) Run(ctx context.Context) error {
	if rv, ok := s.view.(runnableView); ok {
		go rv.Run(ctx)
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := rv.WaitForSync(sctx)
		cancel()
		if err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(nil); wg.Wait() }()
	for _, run := range s.sidecars {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				cancel(err)
			}
		}()
	}
	err := s.GenericAPIServer.PrepareRun().RunWithContext(ctx)
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}
