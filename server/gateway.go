package server

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/e2b"
	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleetview"
	"github.com/hearthvm/hearth/internal/tracing"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
)

// GatewayOptions are sandbox-e2b's flags: the e2b gateway alone, over the
// fleet of sandboxd nodes found through their NodeInventory objects.
type GatewayOptions struct {
	E2B *e2b.Options
	// Kubeconfig reaches the cluster holding NodeInventory objects; empty
	// means in-cluster configuration.
	Kubeconfig string
	// SandboxdTokenFile holds the fleet secret (each sandboxd is sent only
	// its own token derived from it).
	SandboxdTokenFile string
	// Tracing is --tracing-endpoint and --tracing-sampling-rate-per-million.
	Tracing *tracing.Options
}

// NewGatewayOptions returns the defaults.
func NewGatewayOptions() *GatewayOptions {
	return &GatewayOptions{E2B: e2b.NewOptions(), Tracing: tracing.NewOptions()}
}

// AddFlags registers the e2b flags, --kubeconfig, --sandboxd-token-file
// and the tracing flags.
func (o *GatewayOptions) AddFlags(fs *pflag.FlagSet) {
	o.E2B.AddFlags(fs)
	o.Tracing.AddFlags(fs)
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig of the cluster holding the NodeInventory objects (default: in-cluster)")
	fs.StringVar(&o.SandboxdTokenFile, "sandboxd-token-file", o.SandboxdTokenFile, "file holding the fleet secret; each sandboxd is sent only its own token derived from it")
}

// Validate reports flag errors that need no I/O.
func (o *GatewayOptions) Validate() error { return errors.Join(o.E2B.Validate(), o.Tracing.Validate()) }

// RunGateway serves the e2b gateway until ctx ends. It loads the keys
// before any I/O, binds at once, and answers 503 until its live fleet view
// (the NodeInventory informer, then the nodes' change streams) has synced.
func RunGateway(ctx context.Context, o *GatewayOptions) error {
	if err := o.Validate(); err != nil {
		return err
	}
	cfg, err := o.E2B.Config(nil)
	if err != nil {
		return err
	}
	var token string
	if o.SandboxdTokenFile != "" {
		if token, err = readToken(o.SandboxdTokenFile); err != nil {
			return fmt.Errorf("--sandboxd-token-file: %w", err)
		}
	}
	rc, err := clusterConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	src, err := inventory.NewSourceForConfig(rc)
	if err != nil {
		return err
	}
	// As in sandbox-apiserver: the published objects give membership and
	// the fallback, the nodes' change streams the content (fleetview).
	live := fleetview.New(src, fleetview.Config{Secret: token})
	tp, err := o.Tracing.Provider(ctx, "sandbox-e2b")
	if err != nil {
		return fmt.Errorf("--tracing-endpoint: %w", err)
	}
	if tp != nil {
		defer tracing.Shutdown(ctx, tp)
	}
	cfg.Fleet = fleet.New(fleet.Config{View: live, Secret: token, HTTP: tracing.Client(nodeapi.DefaultHTTPClient, tp, "sandboxd")})
	h, err := e2b.New(cfg)
	if err != nil {
		return err
	}
	h = tracing.Handler(h, tp, "e2b", nil)
	ln, err := e2b.Listen(o.E2B.BindAddress, cfg.TLS)
	if err != nil {
		return err
	}
	klog.InfoS("Serving the e2b API", "address", ln.Addr().String(), "tls", cfg.TLS != nil)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	synced := &atomic.Bool{}
	informerDone := make(chan struct{})
	go func() { defer close(informerDone); runInformer(ctx, live, synced) }()
	err = e2b.ServeListener(ctx, ln, untilSynced(h, synced))
	cancel()
	<-informerDone
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
