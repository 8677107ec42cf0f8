package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/compatibility"
	"k8s.io/kube-openapi/pkg/common"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	sandboxstore "github.com/hearthvm/hearth/apiserver/registry/sandbox"
)

// ExtraConfig is what the sandboxes storage needs beyond the generic server.
type ExtraConfig struct {
	// Fleet claims, looks up and acts on sandboxes (*fleet.NodeFleet is
	// one). Required.
	Fleet sandboxstore.Fleet
	// Live is the live fleet view (a *fleetview.Live, the one Fleet
	// locates sandboxes in), the sandboxes' one read model: every list
	// and watch reads it and every resourceVersion is one of its
	// revisions (docs/API.md#list-and-watch). Required. The caller keeps
	// it current (package server runs it); this package only reads it.
	Live sandboxstore.LiveSource
	// ViewSynced reports whether Live reflects the fleet yet; nil means it
	// always does (a static view). Until it does, every sandboxes request
	// is answered 429 with Retry-After (what kube-apiserver answers while
	// its watch cache initializes; client-go retries it) and /readyz fails
	// its "sandbox-view-synced" check. Nothing answers from an empty view.
	ViewSynced func() bool
	// DeleteTimeout bounds how long Delete waits for the node to drop a
	// released sandbox; default 30s.
	DeleteTimeout time.Duration
	// ExtraAPIGroups are installed after agents.x-k8s.io. Their kinds must
	// be registered in Scheme (with identity __internal versions).
	ExtraAPIGroups []*genericapiserver.APIGroupInfo
	// LegacyAPIGroup, when set, is installed at /api (core/v1): sandbox-dev
	// serves its read-only Events there (registry.LegacyEventsGroup), as
	// no kube-apiserver does.
	LegacyAPIGroup *genericapiserver.APIGroupInfo
	// ExtraOpenAPIDefinitions are added to GetOpenAPIDefinitions (keys of
	// types without OpenAPIModelName may be Go type names: the namer makes
	// them REST-friendly).
	ExtraOpenAPIDefinitions []common.GetOpenAPIDefinitions
	// Handlers are served at exact non-resource paths (e.g. the Pod-path
	// admission webhook) beside the API.
	Handlers map[string]http.Handler
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
	// authnLoaded gates serving on the front-proxy CA (authnready.go);
	// nil without requestheader authentication.
	authnLoaded func() bool
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
	if x.DeleteTimeout <= 0 {
		x.DeleteTimeout = 30 * time.Second
	}
	if x.Now == nil {
		x.Now = time.Now
	}
	g := c.GenericConfig
	g.LongRunningFunc = longRunning(g.LongRunningFunc) // longrunning.go
	if g.EffectiveVersion == nil {
		g.EffectiveVersion = compatibility.NewEffectiveVersionFromString("1.36", "", "")
	}
	v2, v3 := OpenAPIConfigs("Hearth sandbox-apiserver", Scheme, x.ExtraOpenAPIDefinitions...)
	if g.OpenAPIConfig != nil {
		v2.SecurityDefinitions = g.OpenAPIConfig.SecurityDefinitions
	}
	g.OpenAPIConfig, g.OpenAPIV3Config = v2, v3
	if x.ViewSynced != nil {
		build := g.BuildHandlerChainFunc
		if build == nil {
			build = genericapiserver.DefaultBuildHandlerChain
		}
		g.BuildHandlerChainFunc = func(h http.Handler, c *genericapiserver.Config) http.Handler {
			return build(withViewSynced(h, x.ViewSynced), c)
		}
	}
	{
		build := g.BuildHandlerChainFunc
		if build == nil {
			build = genericapiserver.DefaultBuildHandlerChain
		}
		g.BuildHandlerChainFunc = func(h http.Handler, c *genericapiserver.Config) http.Handler {
			return build(withQuantityGuard(h, c.MaxRequestBodyBytes), c)
		}
	}
	loaded := authnLoaded(&g.Authentication)
	if loaded != nil {
		build := g.BuildHandlerChainFunc
		if build == nil {
			build = genericapiserver.DefaultBuildHandlerChain
		}
		g.BuildHandlerChainFunc = func(h http.Handler, c *genericapiserver.Config) http.Handler {
			return withAuthnLoaded(build(h, c), loaded)
		}
	}
	return CompletedConfig{&completedConfig{GenericConfig: g.Complete(), ExtraConfig: x, authnLoaded: loaded}}
}

// Server is the running aggregated API server.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
}

// New builds the server and installs agents.x-k8s.io, then the extra groups.
func (c CompletedConfig) New() (*Server, error) {
	x := c.ExtraConfig
	sc := sandboxstore.Config{Fleet: x.Fleet, Live: x.Live, DeleteTimeout: x.DeleteTimeout, Now: x.Now}
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("apiserver: ExtraConfig: %w", err)
	}
	gs, err := c.GenericConfig.New("sandbox-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	resources := sandboxstore.Resources(sc)
	group := genericapiserver.NewDefaultAPIGroupInfo(sandboxv1beta1.GroupVersion.Group, Scheme, sandboxstore.ParameterCodec(metav1.ParameterCodec), Codecs)
	group.VersionedResourcesStorageMap[sandboxv1beta1.GroupVersion.Version] = resources
	if err := gs.InstallAPIGroup(&group); err != nil {
		return nil, fmt.Errorf("installing %s: %w", sandboxv1beta1.GroupVersion, err)
	}
	for _, g := range x.ExtraAPIGroups {
		if err := gs.InstallAPIGroup(g); err != nil {
			return nil, fmt.Errorf("installing an extra API group: %w", err)
		}
	}
	if x.LegacyAPIGroup != nil {
		if err := gs.InstallLegacyAPIGroup(genericapiserver.DefaultLegacyAPIPrefix, x.LegacyAPIGroup); err != nil {
			return nil, fmt.Errorf("installing the core/v1 group: %w", err)
		}
	}
	for path, h := range x.Handlers {
		gs.Handler.NonGoRestfulMux.Handle(path, h)
	}
	if x.ViewSynced != nil {
		if err := gs.AddReadyzChecks(viewSyncedCheck(x.ViewSynced)); err != nil {
			return nil, err
		}
	}
	if c.authnLoaded != nil {
		if err := gs.AddReadyzChecks(authnLoadedCheck(c.authnLoaded)); err != nil {
			return nil, err
		}
	}
	return &Server{GenericAPIServer: gs}, nil
}

// Run serves until ctx ends. It starts nothing else: whoever keeps Live
// current (package server) runs it.
func (s *Server) Run(ctx context.Context) error {
	return s.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}
