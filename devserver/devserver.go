// Package devserver is the embedded default (CONTRACT §8): one process, no
// cluster. It runs an embedded etcd, the aggregated API server (sandboxes)
// plus the stored kinds of apiserver/registry (sandboxtemplates,
// sandboxwarmpools, nodeinventories, leases), N in-process node daemons
// publishing their NodeInventory into that API, the warm-pool driver and
// the e2b gateway, all on loopback. It writes a kubeconfig once the API
// answers.
//
// Everything lives under Options.DataDir: etcd/ (pools, templates,
// inventories), nodes/<name>/ (each node's claim table and VMs),
// root-token (the node root token), e2b-api-key and kubeconfig. A restart
// on the same directory brings back pools, templates and the nodes'
// claimed sandboxes. Cancelling Run's context shuts everything down: the
// driver stops, nodes stop their claimed VMs for restore and destroy the
// warm ones, then the API server and etcd stop.
//
// Security: the API server authenticates nobody (anonymous, always-allow)
// and binds loopback; it is a development server.
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
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/apiserver"
	"github.com/hearthvm/hearth/apiserver/registry"
	"github.com/hearthvm/hearth/claim"
	"github.com/hearthvm/hearth/devserver/embedetcd"
	"github.com/hearthvm/hearth/e2b"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/pool/driver"
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
	// DefaultPool applies examples/l3 (template and warm pool rt) at
	// startup, server-side, never overriding a user's edits.
	DefaultPool bool
	// E2BBindAddress is the e2b gateway's listen address; empty disables it.
	E2BBindAddress string
	// WarmPoolSyncInterval is the driver's cadence.
	WarmPoolSyncInterval time.Duration
	// PublishInterval is each node's inventory publish cadence.
	PublishInterval time.Duration
	// EtcdPort is the embedded etcd's loopback client port; 0 picks one.
	EtcdPort int
	// AgentBin is the in-guest agent for the sim backend; empty resolves
	// it (see vmm/sim.ResolveAgent).
	AgentBin string

	// Out receives the one ready line (default os.Stdout).
	Out io.Writer
	// OnReady, when set, is called once everything serves.
	OnReady func(Ready)
}

// Ready describes a running dev system.
type Ready struct {
	Kubeconfig string
	// APIServer is the API's https URL; Etcd the etcd client URL.
	APIServer, Etcd string
	// E2B is the e2b gateway's http URL (empty when disabled).
	E2B string
	// E2BKeyFile holds the e2b API key.
	E2BKeyFile string
	// Nodes maps node name to its daemon address.
	Nodes map[string]string
	// RootToken is the node root token.
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
	}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "directory holding etcd, the nodes' state, the kubeconfig and generated credentials")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "address the API server listens on")
	fs.IntVar(&o.SecurePort, "secure-port", o.SecurePort, "port the API server listens on (0 picks one)")
	fs.StringVar(&o.KubeconfigOut, "kubeconfig-out", o.KubeconfigOut, "where to write the kubeconfig (default <data-dir>/kubeconfig)")
	fs.IntVar(&o.Nodes, "nodes", o.Nodes, "number of in-process node daemons")
	fs.StringVar(&o.VMM, "vmm", o.VMM, "VMM backend of the nodes: sim (no KVM needed), qemu, firecracker, cloudhypervisor")
	fs.BoolVar(&o.DefaultPool, "default-pool", o.DefaultPool, "apply examples/l3 (SandboxTemplate and SandboxWarmPool rt) at startup")
	fs.StringVar(&o.E2BBindAddress, "e2b-bind-address", o.E2BBindAddress, "address of the e2b gateway (empty disables it)")
	fs.DurationVar(&o.WarmPoolSyncInterval, "warm-pool-sync-interval", o.WarmPoolSyncInterval, "warm-pool driver cadence (targets and status)")
	fs.DurationVar(&o.PublishInterval, "inventory-interval", o.PublishInterval, "node inventory publish cadence")
	fs.IntVar(&o.EtcdPort, "etcd-port", o.EtcdPort, "embedded etcd client port on 127.0.0.1 (0 picks one)")
	fs.StringVar(&o.AgentBin, "agent-bin", o.AgentBin, "in-guest agent binary for the sim backend (default: resolved automatically)")
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

	// Teardown runs in reverse start order.
	var teardown []func()
	defer func() {
		for i := len(teardown) - 1; i >= 0; i-- {
			teardown[i]()
		}
	}()

	etcd, err := embedetcd.Start(embedetcd.Options{Dir: filepath.Join(dataDir, "etcd"), ClientPort: o.EtcdPort})
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
	apiURL := "https://" + ln.Addr().String()
	self := &rest.Config{
		Host:            apiURL,
		BearerToken:     "sandbox-dev",
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             -1,
		UserAgent:       "sandbox-dev",
	}

	// The inventory view reads NodeInventory through this very server, so
	// it is started once the server answers (it must not gate serving).
	dyn, err := dynamic.NewForConfig(self)
	if err != nil {
		ln.Close()
		return err
	}
	src := inventory.NewSource(dyn, 0)
	view := viewOnly{src}
	fleet := claim.NewFleet(claim.FleetConfig{View: view, Token: token})

	getter := registry.NewRESTOptionsGetter(registry.StorageOptions{Endpoints: etcd.Endpoints}, apiserver.Scheme, apiserver.Codecs)
	groups, _, err := registry.APIGroups(apiserver.Scheme, apiserver.Codecs, getter)
	if err != nil {
		ln.Close()
		return err
	}
	// Anonymous, always-allow, self-signed; the dev server runs its own
	// warm-pool driver (below), so the apiserver's is off.
	aopts := apiserver.NewStandaloneOptions()
	aopts.SecureServing.Listener = ln
	aopts.SecureServing.BindAddress = net.ParseIP(o.BindAddress)
	aopts.SecureServing.BindPort = ln.Addr().(*net.TCPAddr).Port
	aopts.SandboxdToken = token
	aopts.View, aopts.Fleet = view, fleet
	acfg, err := aopts.Config()
	if err != nil {
		ln.Close()
		return err
	}
	acfg.ExtraConfig.ExtraAPIGroups = groups
	acfg.ExtraConfig.ExtraOpenAPIDefinitions = append(acfg.ExtraConfig.ExtraOpenAPIDefinitions, registry.GetOpenAPIDefinitions)
	srv, err := acfg.Complete().New()
	if err != nil {
		ln.Close()
		return err
	}
	apiCtx, apiCancel := context.WithCancel(context.WithoutCancel(ctx))
	apiDone := make(chan error, 1)
	go func() { apiDone <- srv.Run(apiCtx) }()
	teardown = append(teardown, func() {
		apiCancel()
		select {
		case <-apiDone:
		case <-time.After(30 * time.Second):
			klog.InfoS("API server did not stop within 30s")
		}
	})
	if err := waitReady(ctx, self, apiDone); err != nil {
		return err
	}
	if err := writeKubeconfig(kubeconfig, apiURL); err != nil {
		return err
	}

	go src.Run(apiCtx)
	if err := src.WaitForSync(ctx); err != nil {
		return fmt.Errorf("inventory view: %w", err)
	}

	nodes, err := startNodes(ctx, nodesConfig{
		count: o.Nodes, dataDir: filepath.Join(dataDir, "nodes"), vmm: o.VMM, agentBin: o.AgentBin,
		token: token, rest: self, publishInterval: o.PublishInterval,
	})
	teardown = append(teardown, nodes.close)
	if err != nil {
		return err
	}

	drv, err := driver.New(driver.Config{
		REST: self, Token: token, Interval: o.WarmPoolSyncInterval,
		Elect: true, LeaseNamespace: "sandbox-system", LeaseName: "hearth-warmpool-driver",
	})
	if err != nil {
		return err
	}
	drvCtx, drvCancel := context.WithCancel(context.WithoutCancel(ctx))
	drvDone := make(chan struct{})
	go func() {
		defer close(drvDone)
		if err := drv.Run(drvCtx); err != nil {
			klog.ErrorS(err, "warm-pool driver")
		}
	}()
	teardown = append(teardown, func() { drvCancel(); <-drvDone })

	if o.DefaultPool {
		if err := applyDefaultPool(ctx, dyn); err != nil {
			return err
		}
		drv.Kick()
	}

	var e2bURL, keyFile string
	if o.E2BBindAddress != "" {
		keyFile = filepath.Join(dataDir, "e2b-api-key")
		key, err := loadOrCreateSecret(keyFile)
		if err != nil {
			return err
		}
		h, err := e2b.New(e2b.Config{Fleet: fleet, Namespace: "default", APIKeys: []string{key}})
		if err != nil {
			return err
		}
		el, err := net.Listen("tcp", o.E2BBindAddress)
		if err != nil {
			return fmt.Errorf("e2b listener: %w", err)
		}
		e2bURL = "http://" + el.Addr().String()
		hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(el) }()
		teardown = append(teardown, func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = hs.Shutdown(sctx)
		})
	}

	ready := Ready{
		Kubeconfig: kubeconfig, APIServer: apiURL, Etcd: etcd.Endpoints[0], E2B: e2bURL, E2BKeyFile: keyFile,
		Nodes: nodes.addrs(), RootToken: token, Startup: time.Since(start),
	}
	e2bHint := ""
	if e2bURL != "" {
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

// viewOnly hides the Source's Run/WaitForSync from the API server, which
// would otherwise wait for a sync through itself before serving.
type viewOnly struct{ s *inventory.Source }

func (v viewOnly) View() *inventory.View { return v.s.View() }

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
