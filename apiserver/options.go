package apiserver

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
	"k8s.io/apiserver/pkg/authentication/request/anonymous"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	genericfeatures "k8s.io/apiserver/pkg/features"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/claim"
	"github.com/hearthvm/hearth/e2b"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/pool/driver"
	"github.com/hearthvm/hearth/webhook"
)

// Options are the sandbox-apiserver's flags. Set Authentication and
// Authorization to nil to serve without a kube-apiserver (anonymous
// authentication, always-allow authorization): the embedded default does.
type Options struct {
	SecureServing  *genericoptions.SecureServingOptionsWithLoopback
	Authentication *genericoptions.DelegatingAuthenticationOptions
	Authorization  *genericoptions.DelegatingAuthorizationOptions

	// Kubeconfig reaches the cluster holding NodeInventory objects; empty
	// means in-cluster configuration. Unused when View is set.
	Kubeconfig string
	// SandboxdTokenFile holds the node/fleet root token (whitespace trimmed).
	SandboxdTokenFile string
	// SandboxdToken is the token itself (set by Complete from the file, or
	// directly by embedders).
	SandboxdToken string
	// WatchInterval is the watch re-derive cadence.
	WatchInterval time.Duration

	// EnablePodRuntimeWebhook serves the Pod-path mutating admission
	// webhook (package webhook) at webhook.Path.
	EnablePodRuntimeWebhook bool

	// EnableE2B serves the e2b API (package e2b) beside the Kubernetes API,
	// over the same fleet, on E2B.BindAddress.
	EnableE2B bool
	E2B       *e2b.Options
	// WarmPool runs the warm-pool driver (SandboxWarmPool → node targets),
	// leader-elected; it reads the cluster --kubeconfig names.
	WarmPool *driver.Options

	// View and Fleet, when set by an embedder, replace the NodeInventory
	// informer and the node fleet built from it.
	View  inventory.Viewer
	Fleet claim.Fleet
}

// NewOptions returns the defaults: secure port 6443 (a self-signed
// certificate in memory unless --tls-cert-file is given), delegated
// authentication and authorization, a 1 s watch interval.
func NewOptions() *Options {
	o := &Options{
		SecureServing:  genericoptions.NewSecureServingOptions().WithLoopback(),
		Authentication: genericoptions.NewDelegatingAuthenticationOptions(),
		Authorization:  genericoptions.NewDelegatingAuthorizationOptions(),
		WatchInterval:  DefaultWatchInterval,
		E2B:            e2b.NewOptions(),
		WarmPool:       driver.NewOptions(),
	}
	o.SecureServing.BindPort = 6443
	o.SecureServing.ServerCert.CertDirectory = ""
	o.SecureServing.ServerCert.PairName = "sandbox-apiserver"
	o.Authentication.RemoteKubeConfigFileOptional = true
	o.Authorization.RemoteKubeConfigFileOptional = true
	return o
}

// NewStandaloneOptions returns Options that serve without a kube-apiserver:
// anonymous authentication, always-allow authorization and a self-signed
// in-memory certificate for localhost/127.0.0.1. Call ListenOn to pick the
// address; set View, Fleet (or SandboxdToken) before Config.
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
	fs.StringVar(&o.SandboxdTokenFile, "sandboxd-token-file", o.SandboxdTokenFile, "file holding the node/fleet root token sent to every sandboxd")
	fs.BoolVar(&o.EnablePodRuntimeWebhook, "enable-pod-runtime-webhook", o.EnablePodRuntimeWebhook, "serve the Pod-path mutating admission webhook at "+webhook.Path)
	fs.BoolVar(&o.EnableE2B, "enable-e2b-api", o.EnableE2B, "also serve the e2b API (and envd data plane) on --e2b-bind-address")
	o.E2B.AddFlags(fs)
	o.WarmPool.AddFlags(fs)
	fs.DurationVar(&o.WatchInterval, "watch-interval", o.WatchInterval, "fixed cadence at which watches re-derive the sandbox view")
}

// Complete reads the token file.
func (o *Options) Complete() error {
	if o.SandboxdTokenFile != "" {
		b, err := os.ReadFile(o.SandboxdTokenFile)
		if err != nil {
			return fmt.Errorf("--sandboxd-token-file: %w", err)
		}
		o.SandboxdToken = strings.TrimSpace(string(b))
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
	if o.WatchInterval <= 0 {
		errs = append(errs, fmt.Errorf("--watch-interval must be positive, got %s", o.WatchInterval))
	}
	if o.EnableE2B {
		if err := o.E2B.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := o.WarmPool.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.SandboxdTokenFile != "" && o.SandboxdToken == "" {
		errs = append(errs, fmt.Errorf("--sandboxd-token-file %s is empty", o.SandboxdTokenFile))
	}
	return errors.Join(errs...)
}

// Config builds the server configuration.
func (o *Options) Config() (*Config, error) {
	if err := o.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("self-signed certificate: %w", err)
	}
	rc := NewRecommendedConfig()
	if err := o.SecureServing.ApplyTo(&rc.SecureServing, &rc.LoopbackClientConfig); err != nil {
		return nil, err
	}
	if o.Authentication != nil {
		if err := o.Authentication.ApplyTo(&rc.Authentication, rc.SecureServing, rc.OpenAPIConfig); err != nil {
			return nil, err
		}
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
	} else {
		rc.Authorization.Authorizer = authorizerfactory.NewAlwaysAllowAuthorizer()
	}
	var cluster *rest.Config
	if o.View == nil || o.WarmPool.Enabled {
		var err error
		if cluster, err = o.restConfig(); err != nil {
			return nil, err
		}
	}
	view := o.View
	if view == nil {
		src, err := inventory.NewSourceForConfig(cluster)
		if err != nil {
			return nil, err
		}
		view = src
	}
	fleet := o.Fleet
	if fleet == nil {
		fleet = claim.NewFleet(claim.FleetConfig{View: view, Token: o.SandboxdToken})
	}
	x := ExtraConfig{Fleet: fleet, View: view, WatchInterval: o.WatchInterval}
	if o.EnablePodRuntimeWebhook {
		x.Handlers = map[string]http.Handler{webhook.Path: webhook.Handler()}
	}
	if o.EnableE2B {
		ecfg, err := o.E2B.Config(e2b.WithPools(fleet, view))
		if err != nil {
			return nil, err
		}
		h, err := e2b.New(ecfg)
		if err != nil {
			return nil, err
		}
		x.Sidecars = append(x.Sidecars, func(ctx context.Context) error {
			return e2b.Serve(ctx, o.E2B.BindAddress, h, func(a net.Addr) { klog.InfoS("Serving the e2b API", "address", a.String()) })
		})
	}
	if o.WarmPool.Enabled {
		d, err := o.WarmPool.NewDriver(cluster, o.SandboxdToken)
		if err != nil {
			return nil, err
		}
		x.Sidecars = append(x.Sidecars, d.Run)
	}
	return &Config{GenericConfig: rc, ExtraConfig: x}, nil
}

func (o *Options) restConfig() (*rest.Config, error) {
	if o.Kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
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
