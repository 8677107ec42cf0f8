package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/anonymous"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	genericfeatures "k8s.io/apiserver/pkg/features"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	componenttracing "k8s.io/component-base/tracing"

	"github.com/hearthvm/hearth/apiserver"
	sandboxstore "github.com/hearthvm/hearth/apiserver/registry/sandbox"
	"github.com/hearthvm/hearth/e2b"
	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleetview"
	"github.com/hearthvm/hearth/internal/serve"
	"github.com/hearthvm/hearth/internal/tracing"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool/controller"
	"github.com/hearthvm/hearth/sandboxclaim"
	"github.com/hearthvm/hearth/webhook"
)

// Options are the sandbox-apiserver's flags: the aggregated API server's
// serving and delegated auth, the cluster and node credentials, and the
// components composed around the API server (the e2b gateway, the
// Pod-path webhook, the warm-pool driver). Set Authentication and
// Authorization to nil to serve without a kube-apiserver: then
// Authenticator and Authorizer decide (the embedded default's static
// tokens), or, when those are nil too, nobody is authenticated and
// everything is allowed — tests and benchmarks only, refused on any
// address but loopback.
type Options struct {
	SecureServing  *genericoptions.SecureServingOptionsWithLoopback
	Authentication *genericoptions.DelegatingAuthenticationOptions
	Authorization  *genericoptions.DelegatingAuthorizationOptions
	// Authenticator and Authorizer, set by an embedder with Authentication
	// and Authorization nil, authenticate and authorize every request
	// (the server adds its own loopback client, as system:masters).
	Authenticator authenticator.Request
	Authorizer    authorizer.Authorizer

	// Kubeconfig reaches the cluster holding NodeInventory objects (and,
	// for the warm-pool driver, the pools, templates and its Lease); empty
	// means in-cluster configuration. Unused when Cluster is set, or when
	// Live is set and the driver is off.
	Kubeconfig string
	// Cluster, when set by an embedder, is used instead of Kubeconfig.
	// sandbox-dev points it at its own API server, which works because
	// the informer and the driver start only once that server serves.
	Cluster *rest.Config
	// SandboxdTokenFile holds the fleet secret (whitespace trimmed). It is
	// never sent: the fleet and the warm-pool driver send each sandboxd its
	// own token, nodeapi.NodeToken(secret, node name).
	SandboxdTokenFile string
	// SandboxdToken is the fleet secret itself (set by Complete from the
	// file, or directly by embedders).
	SandboxdToken string

	// EnablePodRuntimeWebhook serves the Pod-path mutating admission
	// webhook (package webhook) at webhook.Path.
	EnablePodRuntimeWebhook bool

	// EnableE2B serves the e2b API (package e2b) beside the Kubernetes API,
	// over the same fleet, on E2B.BindAddress.
	EnableE2B bool
	E2B       *e2b.Options
	// WarmPool runs the warm-pool driver (SandboxWarmPool → node targets),
	// leader-elected; it reads the cluster --kubeconfig names.
	WarmPool *controller.Options

	// Live, when set by an embedder, is a live fleet view it runs itself
	// (fleetview.New over its published inventories, Run, WaitForSync):
	// it replaces the NodeInventory informer and the live view built on
	// it, and is taken as synced. Either way the fleet and the API server
	// read one live view.
	Live *fleetview.Live
	// Fleet, when set by an embedder, replaces the node fleet built over
	// the live view.
	Fleet Fleet

	// Tracing is --tracing-endpoint and --tracing-sampling-rate-per-million
	// (package internal/tracing); TracingConfig is kube-apiserver's
	// --tracing-config-file (a TracingConfiguration). At most one is set;
	// neither: tracing is off, at no cost.
	Tracing       *tracing.Options
	TracingConfig *genericoptions.TracingOptions
	// TracerProvider, when set by an embedder, is used instead of the
	// flags': the API server's, the fleet's calls to the nodes' and the
	// e2b gateway's spans. The API server shuts it down when it stops.
	TracerProvider tracing.TracerProvider
}

// Fleet is what the components composed here consume of one fleet: the
// sandboxes storage, the e2b gateway and the SandboxClaim controller, each
// through its own narrow interface (*fleet.NodeFleet is one).
type Fleet interface {
	sandboxstore.Fleet
	e2b.Fleet
	sandboxclaim.Fleet
}

var _ Fleet = (*fleet.NodeFleet)(nil)

// NewOptions returns the defaults: secure port 6443 (a self-signed
// certificate in memory unless --tls-cert-file is given), delegated
// authentication and authorization.
func NewOptions() *Options {
	o := &Options{
		SecureServing:  genericoptions.NewSecureServingOptions().WithLoopback(),
		Authentication: genericoptions.NewDelegatingAuthenticationOptions(),
		Authorization:  genericoptions.NewDelegatingAuthorizationOptions(),
		E2B:            e2b.NewOptions(),
		WarmPool:       controller.NewOptions(),
		Tracing:        tracing.NewOptions(),
		TracingConfig:  genericoptions.NewTracingOptions(),
	}
	o.SecureServing.BindPort = 6443
	o.SecureServing.ServerCert.CertDirectory = ""
	o.SecureServing.ServerCert.PairName = "sandbox-apiserver"
	o.Authentication.RemoteKubeConfigFileOptional = true
	o.Authorization.RemoteKubeConfigFileOptional = true
	return o
}

// NewStandaloneOptions returns Options that serve without a kube-apiserver:
// a self-signed in-memory certificate for localhost/127.0.0.1, and
// Authenticator/Authorizer as the embedder sets them — left nil, anonymous
// authentication and always-allow authorization, which Config refuses on
// a non-loopback address. Call ListenOn to pick the
// address; set View and Fleet (or Cluster and SandboxdToken) before
// Config. The warm-pool driver is off; an embedder may turn it on.
func NewStandaloneOptions() *Options {
	o := NewOptions()
	o.Authentication, o.Authorization = nil, nil
	o.WarmPool.Enabled = false
	return o
}

// ListenOn binds the secure port now (addr "127.0.0.1:0" picks a free
// port) and returns the bound address.
func (o *Options) ListenOn(addr string) (string, error) {
	ln, port, err := genericoptions.CreateListener("tcp", addr, net.ListenConfig{})
	if err != nil {
		return "", err
	}
	host, _, _ := net.SplitHostPort(ln.Addr().String())
	o.SecureServing.Listener, o.SecureServing.BindPort = ln, port
	o.SecureServing.BindAddress = net.ParseIP(host)
	return ln.Addr().String(), nil
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.SecureServing.AddFlags(fs)
	if o.Authentication != nil {
		o.Authentication.AddFlags(fs)
	}
	if o.Authorization != nil {
		o.Authorization.AddFlags(fs)
	}
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig of the cluster holding NodeInventory objects (default: in-cluster)")
	fs.StringVar(&o.SandboxdTokenFile, "sandboxd-token-file", o.SandboxdTokenFile, "file holding the fleet secret; each sandboxd is sent only its own token derived from it (base64url HMAC-SHA256(secret, \"hearth-node:\"+node name)), never the secret")
	fs.BoolVar(&o.EnablePodRuntimeWebhook, "enable-pod-runtime-webhook", o.EnablePodRuntimeWebhook, "serve the Pod-path mutating admission webhook at "+webhook.Path)
	fs.BoolVar(&o.EnableE2B, "enable-e2b-api", o.EnableE2B, "also serve the e2b API (and envd data plane) on --e2b-bind-address")
	o.E2B.AddFlags(fs)
	o.WarmPool.AddFlags(fs)
	o.Tracing.AddFlags(fs)
	o.TracingConfig.AddFlags(fs)
	// Deprecated: watches follow the live fleet view as each change
	// arrives; nothing re-derives on a cadence. Accepted (the Helm chart
	// of earlier releases passes it) and ignored.
	var watchInterval time.Duration
	fs.DurationVar(&watchInterval, "watch-interval", time.Second, "deprecated and ignored: watches follow the nodes' change streams as each change arrives, with no cadence")
	_ = fs.MarkDeprecated("watch-interval", "watches follow the nodes' change streams as each change arrives; the flag is ignored and will be removed")
}

// Complete reads the token file.
func (o *Options) Complete() error {
	if o.SandboxdTokenFile != "" {
		tok, err := readToken(o.SandboxdTokenFile)
		if err != nil {
			return fmt.Errorf("--sandboxd-token-file: %w", err)
		}
		o.SandboxdToken = tok
	}
	return nil
}

// Validate reports every invalid option.
func (o *Options) Validate() error {
	var errs []error
	errs = append(errs, o.SecureServing.Validate()...)
	if o.Authentication != nil {
		errs = append(errs, o.Authentication.Validate()...)
	}
	if o.Authorization != nil {
		errs = append(errs, o.Authorization.Validate()...)
	}
	if o.EnableE2B {
		if err := o.E2B.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := o.WarmPool.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.validateAnonymous(); err != nil {
		errs = append(errs, err)
	}
	if o.SandboxdTokenFile != "" && o.SandboxdToken == "" {
		errs = append(errs, fmt.Errorf("--sandboxd-token-file %s is empty", o.SandboxdTokenFile))
	}
	if err := o.Tracing.Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, o.TracingConfig.Validate()...)
	if o.Tracing.Enabled() && o.TracingConfig.ConfigFile != "" {
		errs = append(errs, errors.New("--tracing-endpoint and --tracing-config-file are exclusive: set one"))
	}
	return errors.Join(errs...)
}

// Config builds the configuration of every component: the aggregated API
// server (package apiserver) over one fleet and view, and, as enabled, the
// e2b gateway on the same fleet, the Pod-path webhook on the API server's
// port and the warm-pool driver. It binds no port but the one ListenOn or
// the flags name; the e2b port is bound by New.
func (o *Options) Config() (*Config, error) {
	if err := o.validateAnonymous(); err != nil {
		return nil, err
	}
	if err := o.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("self-signed certificate: %w", err)
	}
	rc := apiserver.NewRecommendedConfig()
	if err := o.SecureServing.ApplyTo(&rc.SecureServing, &rc.LoopbackClientConfig); err != nil {
		return nil, err
	}
	// The API server's connections draw from the process's budget, with
	// the e2b gateway's (and sandbox-dev's nodes'): Track, outermost, tells
	// it which connections have sent a full request.
	if rc.SecureServing != nil {
		rc.SecureServing.Listener = serve.Listen(rc.SecureServing.Listener, serve.Options{})
	}
	build := rc.BuildHandlerChainFunc
	rc.BuildHandlerChainFunc = func(h http.Handler, c *genericapiserver.Config) http.Handler { return serve.Track(build(h, c)) }
	if o.Authentication != nil {
		if err := o.Authentication.ApplyTo(&rc.Authentication, rc.SecureServing, rc.OpenAPIConfig); err != nil {
			return nil, err
		}
	} else if o.Authenticator != nil {
		rc.Authentication.Authenticator = o.Authenticator
	} else {
		rc.Authentication.Authenticator = anonymous.NewAuthenticator(nil)
		if err := allowAnonymousHTTP2(); err != nil {
			return nil, err
		}
	}
	if o.Authorization != nil {
		if o.EnablePodRuntimeWebhook {
			// kube-apiserver calls admission webhooks without credentials.
			o.Authorization.AlwaysAllowPaths = append(o.Authorization.AlwaysAllowPaths, webhook.Path)
		}
		if err := o.Authorization.ApplyTo(&rc.Authorization); err != nil {
			return nil, err
		}
	} else if o.Authorizer != nil {
		rc.Authorization.Authorizer = o.Authorizer
	} else {
		rc.Authorization.Authorizer = authorizerfactory.NewAlwaysAllowAuthorizer()
	}
	tp, err := o.tracerProvider(&rc.Config)
	if err != nil {
		return nil, err
	}
	cluster := o.Cluster
	if cluster == nil && (o.Live == nil || o.WarmPool.Enabled) {
		var err error
		if cluster, err = clusterConfig(o.Kubeconfig); err != nil {
			return nil, err
		}
	}
	c := &Config{TracerProvider: tp}
	live := o.Live
	if live == nil {
		src, err := inventory.NewSourceForConfig(cluster)
		if err != nil {
			return nil, err
		}
		// The published objects give membership and the fallback; the
		// nodes' change streams keep the view live (package fleetview).
		live = fleetview.New(src, fleetview.Config{Secret: o.SandboxdToken})
		c.Inventory = live
	}
	fl := o.Fleet
	if fl == nil {
		fl = fleet.New(fleet.Config{View: live, Secret: o.SandboxdToken, HTTP: tracing.Client(nodeapi.DefaultHTTPClient, tp, "sandboxd")})
	}
	c.APIServer = &apiserver.Config{GenericConfig: rc, ExtraConfig: apiserver.ExtraConfig{Fleet: fl, Live: live}}
	if o.EnablePodRuntimeWebhook {
		c.APIServer.ExtraConfig.Handlers = map[string]http.Handler{webhook.Path: webhook.Handler()}
	}
	if o.EnableE2B {
		ecfg, err := o.E2B.Config(fl)
		if err != nil {
			return nil, err
		}
		ecfg.Authorizer = RouterAuthorizer(rc.Authentication.Authenticator, rc.Authorization.Authorizer)
		c.E2B, c.E2BBindAddress = &ecfg, o.E2B.BindAddress
	}
	if o.WarmPool.Enabled {
		dc := o.WarmPool.Config(cluster, o.SandboxdToken)
		c.WarmPool = &dc
		// The SandboxClaim controller runs with the warm-pool driver, under
		// its own Lease in the same namespace.
		ctl, err := sandboxclaim.New(sandboxclaim.Config{REST: cluster, Fleet: fl, Elect: true, LeaseNamespace: o.WarmPool.LeaseNamespace})
		if err != nil {
			return nil, err
		}
		c.Controllers = map[string]Controller{"sandboxclaim-controller": ctl}
	}
	return c, nil
}

// tracerProvider sets the API server's TracerProvider (and traces its
// loopback client) from TracerProvider, --tracing-endpoint or
// --tracing-config-file, and returns it; nil when tracing is off.
func (o *Options) tracerProvider(gc *genericapiserver.Config) (tracing.TracerProvider, error) {
	tp := o.TracerProvider
	if tp == nil && o.Tracing.Enabled() {
		var err error
		if tp, err = o.Tracing.Provider(context.Background(), "sandbox-apiserver"); err != nil {
			return nil, fmt.Errorf("--tracing-endpoint: %w", err)
		}
	}
	if tp == nil {
		// --tracing-config-file, if set, sets the provider (and traces the
		// loopback client) itself.
		if err := o.TracingConfig.ApplyTo(nil, gc); err != nil {
			return nil, err
		}
		if tracing.Off(gc.TracerProvider) {
			return nil, nil
		}
		return gc.TracerProvider, nil
	}
	gc.TracerProvider = tp
	if gc.LoopbackClientConfig != nil {
		gc.LoopbackClientConfig.Wrap(componenttracing.WrapperFor(tp))
	}
	return tp, nil
}

// anonymous reports whether the server would authenticate nobody or
// allow everything.
func (o *Options) anonymous() bool {
	return (o.Authentication == nil && o.Authenticator == nil) || (o.Authorization == nil && o.Authorizer == nil)
}

// validateAnonymous refuses to serve anonymously (or always-allow) on
// anything but loopback.
func (o *Options) validateAnonymous() error {
	if !o.anonymous() {
		return nil
	}
	ip := o.SecureServing.BindAddress
	if ln := o.SecureServing.Listener; ln != nil {
		if a, ok := ln.Addr().(*net.TCPAddr); ok {
			ip = a.IP
		}
	}
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("refusing to serve without authentication or authorization on %v: only loopback may be anonymous", ip)
	}
	return nil
}

// clusterConfig reaches the cluster through kubeconfig, or in-cluster
// configuration when it is empty.
func clusterConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
	}
	return cfg, nil
}

// readToken reads a token file, whitespace trimmed.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// allowAnonymousHTTP2 turns off the generic server's mitigation that limits
// an unauthenticated HTTP/2 connection to one request. Without a
// kube-apiserver every caller is anonymous, so the mitigation would cost
// every request a new connection and TLS handshake (measured: ~2.5 ms of
// CPU per Create, 300 connections for 300 Creates; bench/hearthbench
// apiclaim). The feature gate is process-wide: use this mode only for the
// embedded default and tests, never next to a server exposed to untrusted
// clients.
func allowAnonymousHTTP2() error {
	return utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{
		string(genericfeatures.UnauthenticatedHTTP2DOSMitigation): false,
	})
}
