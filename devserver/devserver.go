// Package devserver is the embedded default (docs/API.md#sandbox-dev): one process, no
// cluster. It reuses package server for the aggregated API server, the
// NodeInventory informer, the warm-pool driver and the e2b gateway, and
// adds only what a cluster would otherwise provide: an embedded etcd
// serving the stored kinds of apiserver/registry (sandboxtemplates,
// sandboxwarmpools, nodeinventories, leases, events — and core/v1 events
// at /api for kubectl describe, with each sandbox's node-recorded ones),
// N in-process node daemons
// publishing their NodeInventory into that API, the default pool
// (defaultpool.yaml, applied at startup) and a kubeconfig, written once
// the API is ready (serving, view synced). Everything is on loopback.
//
// Everything lives under Options.DataDir: etcd/ (pools, templates,
// inventories) and etcd-pki/ (its CA and certificates), nodes/<name>/
// (each node's claim table and VMs), root-token (the fleet secret, also
// the nodes' operator token), admin-token and readonly-token (the API's
// bearer tokens), e2b-api-key, kubeconfig and kubeconfig-readonly. A restart
// on the same directory brings back pools, templates and the nodes'
// claimed sandboxes. Cancelling Run's context shuts everything down: the
// driver and the gateway stop, nodes stop their claimed VMs for restore
// and destroy the warm ones (a pre-shutdown hook), then the API server and
// etcd stop.
//
// It must not re-wire what package server composes, nor import examples/
// (the default pool is its own embedded copy of examples/l3; a test keeps
// them identical).
//
// Security: the API server authenticates every request with one of two
// generated bearer tokens (0600 files in the data directory) and
// authorizes it: admin-token is AdminUser in system:masters (everything;
// the kubeconfig carries it), readonly-token is ReadOnlyUser (get, list
// and watch, and GET of the discovery and health paths — not /metrics,
// /debug/pprof/ or /logs; kubeconfig-readonly carries it, for demos). A
// request without a known token is 401, a read-only user's write or
// profile 403 (see authFor). The embedded etcd serves TLS to holders of its client
// certificate only (etcd-pki/, see package embedetcd); the node daemons
// listen on loopback and accept each its own token
// (nodeapi.NodeToken(root-token, name)) and, for operators, root-token
// itself; the e2b gateway requires the key in e2b-api-key. It binds
// loopback by default; another --bind-address serves the same
// authenticated API. The serving certificate is self-signed, generated
// each run for localhost, 127.0.0.1 and the bind address; the kubeconfigs
// carry it as their certificate authority.
package devserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/apiserver"
	"github.com/hearthvm/hearth/apiserver/registry"
	sandboxstore "github.com/hearthvm/hearth/apiserver/registry/sandbox"
	"github.com/hearthvm/hearth/e2b"
	"github.com/hearthvm/hearth/image"
	"github.com/hearthvm/hearth/internal/embedetcd"
	"github.com/hearthvm/hearth/internal/tracing"
	"github.com/hearthvm/hearth/node"
	"github.com/hearthvm/hearth/server"
	"github.com/hearthvm/hearth/vmm"
	"github.com/hearthvm/hearth/vmm/sim"
)

// Options are sandbox-dev's flags.
type Options struct {
	DataDir     string
	BindAddress string
	SecurePort  int
	// KubeconfigOut defaults to <DataDir>/kubeconfig.
	KubeconfigOut string
	Nodes         int
	VMM           string
	// DefaultPool applies the default pool (defaultpool.yaml, the same
	// manifests as examples/l3: template and warm pool rt) at startup,
	// server-side, never overriding a user's edits.
	DefaultPool bool
	// E2BBindAddress is the e2b gateway's listen address; empty disables it.
	E2BBindAddress string
	// E2BDomain is the gateway's sandbox domain: "<port>-<sandboxId>.<domain>"
	// reaches that port of that sandbox (e2b.Options.Domain).
	E2BDomain string
	// E2BTLSCertFile and E2BTLSKeyFile serve the gateway over TLS
	// (e2b.Options.TLSCertFile): a wildcard certificate for *.E2BDomain and
	// E2BDomain. Both or neither.
	E2BTLSCertFile, E2BTLSKeyFile string
	// WarmPoolSyncInterval is the driver's cadence.
	WarmPoolSyncInterval time.Duration
	// PublishInterval is each node's inventory publish cadence.
	PublishInterval time.Duration
	// EtcdPort is the embedded etcd's loopback client port; 0 picks one.
	EtcdPort int
	// AgentBin is the in-guest agent for the sim backend; empty resolves
	// it (see vmm/sim.ResolveAgent).
	AgentBin string
	// ImageCache is the image cache (package image) the nodes resolve
	// templates through: the default pool's image is the built-in Debian
	// image, built on first use. Empty boots every template on the
	// backend's minimal built-in root (busybox), which tests use for speed.
	ImageCache string
	// VMMOptions are backend-specific settings (backends.Options.Extra).
	VMMOptions map[string]string
	// DiskSize is every sandbox's disk (--disk-size, see sandboxd).
	DiskSize resource.QuantityValue
	// Tracing is --tracing-endpoint and --tracing-sampling-rate-per-million:
	// one provider for the process (service sandbox-dev), traced by the
	// API server, its fleet, the e2b gateway and every node.
	Tracing *tracing.Options
	// TracerProvider, when set, is used instead of Tracing's (tests).
	TracerProvider tracing.TracerProvider

	// Out receives the one ready line (default os.Stdout).
	Out io.Writer
	// OnReady, when set, is called once everything serves.
	OnReady func(Ready)
}

// Ready describes a running dev system.
type Ready struct {
	// Kubeconfig carries the admin token; ReadOnlyKubeconfig the
	// read-only one.
	Kubeconfig, ReadOnlyKubeconfig string
	// APIServer is the API's https URL; Etcd the etcd client URL.
	APIServer, Etcd string
	// EtcdCA, EtcdCert and EtcdKey are what an etcd client needs
	// (etcd-pki/); without the client certificate etcd refuses it.
	EtcdCA, EtcdCert, EtcdKey string
	// E2B is the e2b gateway's http URL (empty when disabled).
	E2B string
	// E2BKeyFile holds the e2b API key.
	E2BKeyFile string
	// Nodes maps node name to its daemon address.
	Nodes map[string]string
	// RootToken is the fleet secret (root-token): every node accepts it
	// (operators), and its own token derived from it
	// (nodeapi.NodeToken(RootToken, name)), which is all the fleet sends.
	RootToken string
	// Startup is the time from Run to ready.
	Startup time.Duration
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		DataDir:              "./.sandbox-dev",
		BindAddress:          "127.0.0.1",
		SecurePort:           6443,
		Nodes:                2,
		VMM:                  "sim",
		DefaultPool:          true,
		E2BBindAddress:       "127.0.0.1:3000",
		WarmPoolSyncInterval: 5 * time.Second,
		PublishInterval:      5 * time.Second,
		ImageCache:           image.DefaultRoot(),
		DiskSize:             resource.QuantityValue{Quantity: *resource.NewQuantity(vmm.DefaultDiskBytes, resource.BinarySI)},
		Tracing:              tracing.NewOptions(),
	}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "directory holding etcd, the nodes' state, the kubeconfig and generated credentials")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "address the API server listens on (it always requires the kubeconfig's token)")
	fs.IntVar(&o.SecurePort, "secure-port", o.SecurePort, "port the API server listens on (0 picks one)")
	fs.StringVar(&o.KubeconfigOut, "kubeconfig-out", o.KubeconfigOut, "where to write the kubeconfig (default <data-dir>/kubeconfig)")
	fs.IntVar(&o.Nodes, "nodes", o.Nodes, "number of in-process node daemons")
	fs.StringVar(&o.VMM, "vmm", o.VMM, "VMM backend of the nodes: sim (no KVM needed), qemu, firecracker, cloudhypervisor")
	fs.BoolVar(&o.DefaultPool, "default-pool", o.DefaultPool, "apply examples/l3 (SandboxTemplate and SandboxWarmPool rt) at startup")
	fs.StringVar(&o.E2BBindAddress, "e2b-bind-address", o.E2BBindAddress, "address of the e2b gateway (empty disables it)")
	fs.StringVar(&o.E2BDomain, "e2b-domain", o.E2BDomain, "the e2b gateway's sandbox domain: <port>-<sandboxId>.<domain> (pointed at the gateway) reaches any port of a sandbox")
	fs.StringVar(&o.E2BTLSCertFile, "e2b-tls-cert-file", o.E2BTLSCertFile, "PEM certificate the e2b gateway serves TLS with (a wildcard for *.<e2b-domain> and <e2b-domain>); without it, plain HTTP")
	fs.StringVar(&o.E2BTLSKeyFile, "e2b-tls-key-file", o.E2BTLSKeyFile, "PEM private key of --e2b-tls-cert-file")
	fs.DurationVar(&o.WarmPoolSyncInterval, "warm-pool-sync-interval", o.WarmPoolSyncInterval, "warm-pool driver cadence (targets and status)")
	fs.DurationVar(&o.PublishInterval, "inventory-interval", o.PublishInterval, "node inventory publish cadence")
	fs.IntVar(&o.EtcdPort, "etcd-port", o.EtcdPort, "embedded etcd client port on 127.0.0.1 (0 picks one); TLS, client certificates in <data-dir>/etcd-pki only")
	fs.StringVar(&o.AgentBin, "agent-bin", o.AgentBin, "in-guest agent binary for the sim backend (default: resolved automatically)")
	fs.StringVar(&o.ImageCache, "image-cache", o.ImageCache, "image cache the nodes resolve templates through (the built-in Debian image is built there on first use); empty boots the backend's minimal busybox root")
	fs.StringToStringVar(&o.VMMOptions, "vmm-opt", o.VMMOptions, "backend-specific setting KEY=VALUE (repeatable; see sandboxd --help)")
	fs.Var(&o.DiskSize, "disk-size", node.DiskSizeFlagHelp)
	o.Tracing.AddFlags(fs)
}

// Validate reports invalid options.
func (o *Options) Validate() error {
	var errs []error
	if o.DataDir == "" {
		errs = append(errs, errors.New("--data-dir is required"))
	}
	if o.Nodes < 1 {
		errs = append(errs, fmt.Errorf("--nodes must be at least 1, got %d", o.Nodes))
	}
	if o.SecurePort < 0 || o.SecurePort > 65535 {
		errs = append(errs, fmt.Errorf("--secure-port %d out of range", o.SecurePort))
	}
	if o.WarmPoolSyncInterval <= 0 || o.PublishInterval <= 0 {
		errs = append(errs, errors.New("--warm-pool-sync-interval and --inventory-interval must be positive"))
	}
	if net.ParseIP(o.BindAddress) == nil {
		errs = append(errs, fmt.Errorf("--bind-address %q is not an IP address", o.BindAddress))
	}
	if err := node.ValidateDiskSize(o.DiskSize.Quantity); err != nil {
		errs = append(errs, err)
	}
	if o.Tracing != nil {
		if err := o.Tracing.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

var schemeOnce sync.Once
var schemeErr error

// Run starts the dev system, prints the ready line and serves until ctx
// ends, then shuts down in order. It returns the first fatal error.
func Run(ctx context.Context, o *Options) (err error) {
	start := time.Now()
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	dataDir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	kubeconfig := o.KubeconfigOut
	if kubeconfig == "" {
		kubeconfig = filepath.Join(dataDir, "kubeconfig")
	}
	token, err := loadOrCreateSecret(filepath.Join(dataDir, "root-token"))
	if err != nil {
		return err
	}
	adminToken, err := loadOrCreateSecret(filepath.Join(dataDir, "admin-token"))
	if err != nil {
		return err
	}
	readOnlyToken, err := loadOrCreateSecret(filepath.Join(dataDir, "readonly-token"))
	if err != nil {
		return err
	}
	if adminToken == readOnlyToken {
		return fmt.Errorf("%s and %s hold the same token", filepath.Join(dataDir, "admin-token"), filepath.Join(dataDir, "readonly-token"))
	}
	readOnlyKubeconfig := filepath.Join(dataDir, "kubeconfig-readonly")

	// Teardown runs in reverse start order.
	var teardown []func()
	defer func() {
		for i := len(teardown) - 1; i >= 0; i-- {
			teardown[i]()
		}
	}()

	etcd, err := embedetcd.Start(embedetcd.Options{Dir: filepath.Join(dataDir, "etcd"), PKIDir: filepath.Join(dataDir, "etcd-pki"), ClientPort: o.EtcdPort})
	if err != nil {
		return err
	}
	teardown = append(teardown, etcd.Close)

	schemeOnce.Do(func() { schemeErr = registry.AddToScheme(apiserver.Scheme) })
	if schemeErr != nil {
		return schemeErr
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(o.BindAddress, strconv.Itoa(o.SecurePort)))
	if err != nil {
		return fmt.Errorf("API server listener: %w", err)
	}
	apiAddr := ln.Addr().(*net.TCPAddr)
	apiHost := apiAddr.IP.String()
	if apiAddr.IP.IsUnspecified() {
		apiHost = "127.0.0.1" // in the serving certificate, unlike 0.0.0.0
	}
	apiURL := "https://" + net.JoinHostPort(apiHost, strconv.Itoa(apiAddr.Port))
	self := &rest.Config{
		Host:            apiURL,
		BearerToken:     adminToken,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             -1,
		UserAgent:       "sandbox-dev",
	}
	// The server layer composes everything but etcd and the nodes. It is
	// its own cluster: the NodeInventory informer and the warm-pool driver
	// read through this very server, which is why they start in post-start
	// hooks. Token-authenticated (authFor), self-signed.
	sopts := server.NewStandaloneOptions()
	sopts.Authenticator, sopts.Authorizer = authFor(adminToken, readOnlyToken)
	sopts.SecureServing.Listener = ln
	sopts.SecureServing.BindAddress = net.ParseIP(o.BindAddress)
	sopts.SecureServing.BindPort = ln.Addr().(*net.TCPAddr).Port
	sopts.Cluster = self
	sopts.SandboxdToken = token
	sopts.WarmPool.Enabled = true
	sopts.WarmPool.SyncInterval = o.WarmPoolSyncInterval
	tp := o.TracerProvider
	if tp == nil && o.Tracing != nil {
		if tp, err = o.Tracing.Provider(ctx, "sandbox-dev"); err != nil {
			ln.Close()
			return fmt.Errorf("--tracing-endpoint: %w", err)
		}
	}
	if tp != nil {
		// The API server shuts it down (flushing) when it stops; the
		// nodes stop before it.
		sopts.TracerProvider = tp
	}
	var keyFile string
	if o.E2BBindAddress != "" {
		keyFile = filepath.Join(dataDir, "e2b-api-key")
		// e2b's format ("e2b_" + hex): e2b's Python SDK refuses other keys.
		if _, err := loadOrCreate(keyFile, func() (string, error) { return e2b.NewAPIKey(), nil }); err != nil {
			ln.Close()
			return err
		}
		sopts.EnableE2B = true
		sopts.E2B.BindAddress = o.E2BBindAddress
		sopts.E2B.APIKeyFile = keyFile
		sopts.E2B.Domain = o.E2BDomain
		sopts.E2B.TLSCertFile, sopts.E2B.TLSKeyFile = o.E2BTLSCertFile, o.E2BTLSKeyFile
	}
	cfg, err := sopts.Config()
	if err != nil {
		ln.Close()
		return err
	}
	// The kubeconfigs trust the serving certificate generated for this
	// run (its CA is in the chain) instead of skipping verification.
	var servingCA []byte
	if gc := sopts.SecureServing.ServerCert.GeneratedCert; gc != nil {
		servingCA, _ = gc.CurrentCertKeyContent()
	}
	getter := registry.NewRESTOptionsGetter(registry.StorageOptions{Endpoints: etcd.Endpoints,
		CAFile: etcd.ClientTLS.CAFile, CertFile: etcd.ClientTLS.CertFile, KeyFile: etcd.ClientTLS.KeyFile}, apiserver.Scheme, apiserver.Codecs)
	groups, stores, err := registry.APIGroups(apiserver.Scheme, apiserver.Codecs, getter)
	if err != nil {
		ln.Close()
		return err
	}
	cfg.APIServer.ExtraConfig.ExtraAPIGroups = groups
	// Events: the controllers write events.k8s.io/v1 (stored, with a
	// TTL); kubectl describe reads core/v1, which shows those and each
	// sandbox's node-recorded ones.
	legacy, err := registry.LegacyEventsGroup(apiserver.Scheme, apiserver.Codecs, stores, sandboxstore.NodeEvents(cfg.APIServer.ExtraConfig.Fleet))
	if err != nil {
		ln.Close()
		return err
	}
	cfg.APIServer.ExtraConfig.LegacyAPIGroup = legacy
	cfg.APIServer.ExtraConfig.ExtraOpenAPIDefinitions = append(cfg.APIServer.ExtraConfig.ExtraOpenAPIDefinitions, registry.GetOpenAPIDefinitions)
	srv, err := cfg.Complete().New()
	if err != nil {
		ln.Close()
		return err
	}
	// The nodes stop after the components (the driver no longer sends
	// them targets) and before the API server (they may still publish).
	var nodes fleetNodes
	var nodesMu sync.Mutex
	closeNodes := func() {
		nodesMu.Lock()
		defer nodesMu.Unlock()
		nodes.close()
		nodes = nil
	}
	srv.API.GenericAPIServer.AddPreShutdownHook("sandbox-dev-stop-nodes", func() error { closeNodes(); return nil })
	teardown = append(teardown, closeNodes) // a no-op unless the server stopped without its hooks
	apiCtx, apiCancel := context.WithCancel(context.WithoutCancel(ctx))
	apiDone := make(chan error, 1)
	go func() { apiDone <- srv.Run(apiCtx) }()
	teardown = append(teardown, func() {
		apiCancel()
		select {
		case <-apiDone:
		case <-time.After(3 * time.Minute): // includes stopping the nodes
			klog.InfoS("API server did not stop within 3m")
		}
	})
	// Ready means serving with the fleet view synced (readyz).
	if err := waitReady(ctx, self, apiDone); err != nil {
		return err
	}
	if err := writeKubeconfig(kubeconfig, apiURL, servingCA, "sandbox-dev", adminToken); err != nil {
		return err
	}
	if err := writeKubeconfig(readOnlyKubeconfig, apiURL, servingCA, "sandbox-dev-readonly", readOnlyToken); err != nil {
		return err
	}
	started, err := startNodes(ctx, nodesConfig{
		count: o.Nodes, dataDir: filepath.Join(dataDir, "nodes"), vmm: o.VMM, agentBin: o.AgentBin,
		token: token, rest: self, publishInterval: o.PublishInterval, extra: vmmExtra(o),
		diskBytes: o.DiskSize.Value(), tracerProvider: tp,
	})
	nodesMu.Lock()
	nodes = started
	nodesMu.Unlock()
	if err != nil {
		return err
	}
	if o.DefaultPool {
		dyn, err := dynamic.NewForConfig(self)
		if err != nil {
			return err
		}
		if err := applyDefaultPool(ctx, dyn); err != nil {
			return err
		}
		srv.WarmPool().Kick()
	}
	var e2bURL string
	if a := srv.E2BAddr(); a != nil {
		e2bURL = "http://" + a.String()
		if o.E2BTLSCertFile != "" {
			e2bURL = "https://" + a.String()
		}
	}
	ready := Ready{
		Kubeconfig: kubeconfig, ReadOnlyKubeconfig: readOnlyKubeconfig, APIServer: apiURL, E2B: e2bURL, E2BKeyFile: keyFile,
		Etcd: etcd.Endpoints[0], EtcdCA: etcd.ClientTLS.CAFile, EtcdCert: etcd.ClientTLS.CertFile, EtcdKey: etcd.ClientTLS.KeyFile,
		Nodes: started.addrs(), RootToken: token, Startup: time.Since(start),
	}
	e2bHint := ""
	switch {
	case e2bURL != "" && o.E2BTLSCertFile != "":
		// Addressed by name, as e2b's cloud: the SDK reaches
		// https://api.<domain> and https://<port>-<id>.<domain>.
		e2bHint = fmt.Sprintf("; e2b: E2B_DOMAIN=%s E2B_API_KEY=$(cat %s) (TLS on %s: point %[1]s and *.%[1]s at it, on port 443)", o.E2BDomain, keyFile, e2bURL)
	case e2bURL != "":
		e2bHint = fmt.Sprintf("; e2b: E2B_API_URL=%[1]s E2B_SANDBOX_URL=%[1]s E2B_API_KEY=$(cat %[2]s)", e2bURL, keyFile)
	}
	fmt.Fprintf(o.Out, "sandbox-dev ready in %s: export KUBECONFIG=%s; kubectl get sandboxwarmpools,sandboxes%s\n",
		ready.Startup.Round(time.Millisecond), kubeconfig, e2bHint)
	if o.OnReady != nil {
		o.OnReady(ready)
	}

	select {
	case <-ctx.Done():
		klog.InfoS("sandbox-dev shutting down")
		return nil
	case err := <-apiDone:
		apiDone <- err // let the teardown see it finished
		if err == nil {
			err = errors.New("API server stopped")
		}
		return err
	case err := <-etcd.Err():
		return fmt.Errorf("etcd: %w", err)
	}
}

func waitReady(ctx context.Context, cfg *rest.Config, apiDone chan error) error {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/readyz", nil)
		resp, err := hc.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("readyz answered %d", resp.StatusCode)
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-apiDone:
			apiDone <- err
			return fmt.Errorf("API server stopped before ready: %v", err)
		case <-time.After(50 * time.Millisecond): // poll interval
		}
	}
	return fmt.Errorf("API server not ready within 60s: %v", last)
}

// vmmExtra is the nodes' backend settings: the image cache, and for sim a
// cache of id-shifted template copies beside it that every node (and every
// sandbox-dev on this host) shares, so the first boot of a template pays
// for the copy once. Explicit --vmm-opt values win.
func vmmExtra(o *Options) map[string]string {
	extra := map[string]string{}
	if o.ImageCache != "" {
		extra["image_cache"] = o.ImageCache
		if o.VMM == sim.Name {
			extra["lower_cache"] = filepath.Join(filepath.Dir(filepath.Clean(o.ImageCache)), "sim-lower")
		}
	}
	for k, v := range o.VMMOptions {
		extra[k] = v
	}
	return extra
}
