package server

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/apiserver"
	"github.com/hearthvm/hearth/e2b"
	"github.com/hearthvm/hearth/internal/tracing"
	"github.com/hearthvm/hearth/pool/controller"
)

// An Informer keeps a view current. Run runs it until ctx ends;
// WaitForSync returns nil once the view reflects a full sync.
// *inventory.Source is one.
type Informer interface {
	Run(ctx context.Context)
	WaitForSync(ctx context.Context) error
}

// A Controller runs beside the API server for its lifetime. *controller.Controller
// is one.
type Controller interface {
	Run(ctx context.Context) error
}

// Config is every component's configuration; Options.Config builds it.
// Embedders adjust it (e.g. add API groups to APIServer.ExtraConfig)
// before Complete.
type Config struct {
	// APIServer is the aggregated API server (package apiserver), already
	// holding the fleet and view it serves from.
	APIServer *apiserver.Config
	// Inventory keeps APIServer's view current (the NodeInventory
	// informer); nil when an embedder handed in a view it keeps itself.
	// It starts in a post-start hook; until it syncs, /readyz fails and
	// sandboxes requests are answered 429 (package apiserver).
	Inventory Informer
	// E2B, when set, is the e2b gateway, served on E2BBindAddress over the
	// API server's fleet. Until Inventory syncs it answers 503.
	E2B            *e2b.Config
	E2BBindAddress string
	// WarmPool, when set, is the warm-pool driver (leader-elected).
	WarmPool *controller.Config
	// Controllers are further controllers run like the warm-pool driver,
	// by name. Options.Config puts the SandboxClaim controller (package
	// sandboxclaim) here beside the driver: it claims through the API
	// server's fleet and writes claim status through the cluster.
	Controllers map[string]Controller
	// TracerProvider, when set, traces the e2b gateway's requests (the
	// API server's is APIServer.GenericConfig.TracerProvider); nil: off.
	TracerProvider tracing.TracerProvider
}

type completedConfig struct {
	api         apiserver.CompletedConfig
	inventory   Informer
	synced      *atomic.Bool
	e2b         *e2b.Config
	e2bAddr     string
	warmPool    *controller.Config
	controllers map[string]Controller
	tp          tracing.TracerProvider
}

// CompletedConfig is a Config with defaults filled in; build a Server with
// New.
type CompletedConfig struct {
	*completedConfig
}

// Complete fills in defaults and ties the API server's readiness to the
// informer's sync.
func (c *Config) Complete() CompletedConfig {
	synced := &atomic.Bool{}
	if c.Inventory == nil {
		synced.Store(true)
	} else if c.APIServer.ExtraConfig.ViewSynced == nil {
		c.APIServer.ExtraConfig.ViewSynced = synced.Load
	}
	return CompletedConfig{&completedConfig{
		api: c.APIServer.Complete(), inventory: c.Inventory, synced: synced,
		e2b: c.E2B, e2bAddr: c.E2BBindAddress, warmPool: c.WarmPool, controllers: c.Controllers, tp: c.TracerProvider,
	}}
}

// New builds the API server and the components, binds the e2b port, and
// registers one post-start hook per component: nothing runs before the API
// server serves.
func (c CompletedConfig) New() (*Server, error) {
	api, err := c.api.New()
	if err != nil {
		return nil, err
	}
	s := &Server{API: api}
	type component struct {
		hook string
		run  func(ctx context.Context) error
	}
	var comps []component
	if c.inventory != nil {
		comps = append(comps, component{"start-sandbox-inventory-informer", func(ctx context.Context) error {
			runInformer(ctx, c.inventory, c.synced)
			return nil
		}})
	}
	if c.warmPool != nil {
		if s.warmPool, err = controller.New(*c.warmPool); err != nil {
			return nil, err
		}
		comps = append(comps, component{"start-warm-pool-driver", s.warmPool.Run})
	}
	names := make([]string, 0, len(c.controllers))
	for name := range c.controllers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		comps = append(comps, component{"start-" + name, c.controllers[name].Run})
	}
	if c.e2b != nil {
		h, err := e2b.New(*c.e2b)
		if err != nil {
			return nil, err
		}
		h = tracing.Handler(h, c.tp, "e2b", nil)
		if s.e2bLn, err = e2b.Listen(c.e2bAddr, c.e2b.TLS); err != nil {
			return nil, fmt.Errorf("e2b gateway: %w", err)
		}
		ln := s.e2bLn
		comps = append(comps, component{"start-e2b-gateway", func(ctx context.Context) error {
			klog.InfoS("Serving the e2b API", "address", ln.Addr().String())
			return e2b.ServeListener(ctx, ln, untilSynced(h, c.synced))
		}})
	}
	for _, comp := range comps {
		err := api.GenericAPIServer.AddPostStartHook(comp.hook, func(genericapiserver.PostStartHookContext) error {
			s.start(comp.hook, comp.run)
			return nil
		})
		if err != nil {
			if s.e2bLn != nil {
				s.e2bLn.Close()
			}
			return nil, err
		}
	}
	return s, nil
}
