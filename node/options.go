package node

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hearthvm/hearth/internal/serve"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/vmm"
)

// Options are sandboxd's command-line settings (cmd/sandboxd parses them
// and wires a Node from them).
type Options struct {
	NodeName         string
	Listen           string
	AdvertiseAddress string
	TokenFile        string
	NodeTokenFile    string
	// FleetSecretFile and WriteNodeToken make sandboxd a one-shot helper
	// (an init container): derive this node's token from the fleet secret,
	// write it to WriteNodeToken (0600) and exit, so the daemon itself
	// holds only its own token (NodeTokenFile), never the fleet secret.
	FleetSecretFile    string
	WriteNodeToken     string
	DataDir            string
	VMM                string
	AgentBin           string
	DefaultLease       time.Duration
	MaxLease           time.Duration
	MaxBootConcurrency int
	InventoryInterval  time.Duration
	Kubeconfig         string
	// PublishInCluster publishes with the pod's ServiceAccount (in-cluster
	// configuration) instead of Kubeconfig: the DaemonSet's way, whose
	// pod-bound token names the node (see deploy/base/sandboxd-admission.yaml).
	PublishInCluster bool
	// WarmCheckInterval is the warm-pool health sweep's cadence
	// (Config.WarmCheckInterval): 0 = the default, negative = disabled.
	WarmCheckInterval time.Duration
	// Serve bounds the API's clients: per-request read and write
	// timeouts and the idle timeout (--read-timeout, --write-timeout,
	// --idle-timeout).
	Serve serve.Options
	// Conns are the process's connection limits (serve.Shared):
	// --max-connections, --max-connections-per-source,
	// --first-request-timeout.
	Conns serve.Limits
	// Quota bounds what one sandbox tree and the node may create beyond
	// the warm pools (--max-fork-depth, ...).
	Quota Quota
	// VMMOptions are backend-specific settings (backends.Options.Extra),
	// e.g. config=/etc/hearth/qemu.json or accel=tcg for qemu.
	VMMOptions map[string]string
	// DiskSize is every sandbox's disk, its writable root file system
	// (--disk-size, backends.Options.DiskBytes): default 10Gi, e2b's, for
	// every size class.
	DiskSize resource.QuantityValue
}

// DiskSizeFlagHelp is --disk-size's help, shared by sandboxd and sandbox-dev.
const DiskSizeFlagHelp = "size of every sandbox's disk, its writable root file system (a quantity: 10Gi, 64Mi; at least 16Mi), for every size class: the guest's df / shows it and writes past it fail with ENOSPC in the guest. sim: a sparse ext4 image per sandbox; qemu: the ext4 root disk built from each template (image_cache). Snapshots, forks and their clones keep their source's size"

// DiskBytes is --disk-size in bytes.
func (o *Options) DiskBytes() int64 { return o.DiskSize.Value() }

// ValidateDiskSize reports a --disk-size below vmm.MinDiskBytes.
func ValidateDiskSize(q resource.Quantity) error {
	if q.Value() < vmm.MinDiskBytes {
		return fmt.Errorf("--disk-size %s is too small: at least 16Mi", q.String())
	}
	return nil
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Listen:             "127.0.0.1:7070",
		DataDir:            "/var/lib/hearth/sandboxd",
		VMM:                "sim",
		DefaultLease:       DefaultLimits.Default,
		MaxLease:           DefaultLimits.Max,
		MaxBootConcurrency: 4,
		InventoryInterval:  30 * time.Second,
		WarmCheckInterval:  DefaultWarmCheckInterval,
		Serve:              serve.Options{Timeouts: serve.DefaultTimeouts},
		Quota:              DefaultQuota,
		// Templates resolve through the host's image cache (the built-in
		// Debian image is built there on first use).
		VMMOptions: map[string]string{"image_cache": "default"},
		DiskSize:   resource.QuantityValue{Quantity: *resource.NewQuantity(vmm.DefaultDiskBytes, resource.BinarySI)},
	}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "node name (NodeInventory name); default: the hostname")
	fs.StringVar(&o.Listen, "listen", o.Listen, "host:port to serve the node API on")
	fs.StringVar(&o.AdvertiseAddress, "advertise-address", o.AdvertiseAddress, "host:port other components reach this node at; default: the listen address")
	fs.StringVar(&o.NodeTokenFile, "node-token-file", o.NodeTokenFile, "file holding this node's own bearer token, the one the fleet sends it (base64url HMAC-SHA256(fleet secret, \"hearth-node:\"+node name); see --write-node-token)")
	fs.StringVar(&o.TokenFile, "token-file", o.TokenFile, "file holding an operator's root bearer token, also accepted (optional; the fleet never sends it); without it and --node-token-file authentication is disabled (development only)")
	fs.StringVar(&o.FleetSecretFile, "fleet-secret-file", o.FleetSecretFile, "with --write-node-token: file holding the fleet secret (the sandbox-apiserver's --sandboxd-token-file)")
	fs.StringVar(&o.WriteNodeToken, "write-node-token", o.WriteNodeToken, "derive this node's token from --fleet-secret-file and --node-name, write it to this file (0600) and exit (an init container's job)")
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "directory for the claim store, snapshots and VM run directories")
	fs.StringVar(&o.VMM, "vmm", o.VMM, "VMM backend: sim, qemu, firecracker or cloud-hypervisor")
	fs.StringVar(&o.AgentBin, "agent-bin", o.AgentBin, "path to the sandbox-agent binary (default: next to this binary, on PATH, or built from the module source)")
	fs.DurationVar(&o.DefaultLease, "default-lease", o.DefaultLease, "lease granted when a claim asks for none")
	fs.DurationVar(&o.MaxLease, "max-lease", o.MaxLease, "longest lease granted")
	fs.IntVar(&o.MaxBootConcurrency, "max-boot-concurrency", o.MaxBootConcurrency, "concurrent warm VM boots node-wide")
	fs.DurationVar(&o.InventoryInterval, "inventory-interval", o.InventoryInterval, "NodeInventory publish cadence")
	fs.DurationVar(&o.WarmCheckInterval, "warm-check-interval", o.WarmCheckInterval, "cadence of the warm-pool health sweep that probes warm VMs' agents and replaces dead ones (0 = default 10s, negative = disabled)")
	fs.DurationVar(&o.Serve.Read, "read-timeout", o.Serve.Read, "how long a client may take to send a request body (a stalled body is answered 400 this late)")
	fs.DurationVar(&o.Serve.Write, "write-timeout", o.Serve.Write, "how long one request may take from its handler's start to its response's last byte")
	fs.DurationVar(&o.Serve.Idle, "idle-timeout", o.Serve.Idle, "how long a keep-alive connection may sit idle between requests")
	fs.IntVar(&o.Conns.MaxConns, "max-connections", o.Conns.MaxConns, "open API connections at most; 0 = the file-descriptor limit less a reserve (1024 or an eighth of the limit, whichever is more), negative = no cap")
	fs.IntVar(&o.Conns.MaxConnsPerSource, "max-connections-per-source", o.Conns.MaxConnsPerSource, "open API connections one source (an IPv4 address, an IPv6 /64) holds at most; at the cap its oldest connection that has not sent a full request gives way to a newcomer; 0 = a quarter of --max-connections, at least 64 and at most 4096; negative = no cap")
	fs.DurationVar(&o.Conns.FirstRequest, "first-request-timeout", o.Conns.FirstRequest, "how long a new connection may take to send its first request's headers (0 = 5s, negative = no bound)")
	o.Quota.AddFlags(fs)
	fs.Var(&o.DiskSize, "disk-size", DiskSizeFlagHelp)
	fs.Var(kvFlag{&o.VMMOptions}, "vmm-opt", "backend-specific setting KEY=VALUE (repeatable): sim and qemu: image_cache (a dir; default: the host's image cache; empty: the backend's minimal busybox root); sim: rootfs, uid_base, cgroup_parent, lower_cache, uplink_netns (the network namespace, a path, the egress lane leaves from), dns (the egress resolvers' upstream servers, comma-separated host[:port]; default that namespace's or the host's resolv.conf); qemu: binary, config, accel (auto|kvm|tcg), disk, egress_uid (the first of the egress VMs' uids, one each), egress_uids (how many; default 512), egress_firewall, dns (as sim's); firecracker: binary, kernel, initrd, rootfs, boot_args; cloud-hypervisor: binary, kernel, initramfs, rootfs, cmdline, memory_restore_mode")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig of the cluster to publish NodeInventory to (server-side apply) and to write the sandboxes' lifecycle events to (events.k8s.io/v1 Events but Claimed); empty = neither unless --publish-in-cluster")
	fs.BoolVar(&o.PublishInCluster, "publish-in-cluster", o.PublishInCluster, "publish NodeInventory and write the sandboxes' lifecycle events with the pod's ServiceAccount (in-cluster configuration) instead of --kubeconfig")
}

// Complete fills in defaults that depend on the environment.
func (o *Options) Complete() error {
	if o.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--node-name is empty and the hostname is unknown: %w", err)
		}
		o.NodeName = strings.ToLower(h)
	}
	if o.AdvertiseAddress == "" {
		o.AdvertiseAddress = o.Listen
	}
	return nil
}

// Validate reports every invalid option.
func (o *Options) Validate() error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("--node-name is required"))
	}
	if _, _, err := net.SplitHostPort(o.Listen); err != nil {
		errs = append(errs, fmt.Errorf("--listen %q: %w", o.Listen, err))
	}
	if o.DataDir == "" {
		errs = append(errs, errors.New("--data-dir is required"))
	}
	if o.PublishInCluster && o.Kubeconfig != "" {
		errs = append(errs, errors.New("--publish-in-cluster and --kubeconfig are exclusive"))
	}
	if (o.WriteNodeToken == "") != (o.FleetSecretFile == "") {
		errs = append(errs, errors.New("--write-node-token and --fleet-secret-file go together"))
	}
	if o.DefaultLease <= 0 {
		errs = append(errs, errors.New("--default-lease must be positive"))
	}
	if o.MaxLease < o.DefaultLease {
		errs = append(errs, errors.New("--max-lease must not be shorter than --default-lease"))
	}
	if o.MaxBootConcurrency <= 0 {
		errs = append(errs, errors.New("--max-boot-concurrency must be positive"))
	}
	if o.InventoryInterval <= 0 {
		errs = append(errs, errors.New("--inventory-interval must be positive"))
	}
	if o.Serve.Read < 0 || o.Serve.Write < 0 || o.Serve.Idle < 0 {
		errs = append(errs, errors.New("--read-timeout, --write-timeout and --idle-timeout must not be negative"))
	}
	if o.Serve.Read > 0 && o.Serve.Write > 0 && o.Serve.Write <= o.Serve.Read {
		errs = append(errs, errors.New("--write-timeout must be longer than --read-timeout (a stalled body is answered within the write timeout)"))
	}
	errs = append(errs, o.Quota.Validate()...)
	if err := ValidateDiskSize(o.DiskSize.Quantity); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// RootToken reads --token-file (whitespace-trimmed); empty without one.
func (o *Options) RootToken() (string, error) { return readTokenFile("--token-file", o.TokenFile) }

// NodeToken reads --node-token-file (whitespace-trimmed); empty without one.
func (o *Options) NodeToken() (string, error) {
	return readTokenFile("--node-token-file", o.NodeTokenFile)
}

// WriteDerivedNodeToken writes nodeapi.NodeToken(fleet secret, NodeName)
// to --write-node-token (0600, replaced atomically). Call it after
// Complete when WriteNodeToken is set, instead of running the daemon.
func (o *Options) WriteDerivedNodeToken() error {
	secret, err := readTokenFile("--fleet-secret-file", o.FleetSecretFile)
	if err != nil {
		return err
	}
	if secret == "" {
		return errors.New("--fleet-secret-file is required with --write-node-token")
	}
	tmp := o.WriteNodeToken + ".tmp"
	if err := os.WriteFile(tmp, []byte(nodeapi.NodeToken(secret, o.NodeName)+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, o.WriteNodeToken)
}

func readTokenFile(flag, path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%s %s is empty", flag, path)
	}
	return tok, nil
}

// Config returns the Node configuration the options describe; the caller
// sets Driver, Publisher and Events (from PublishConfig).
func (o *Options) Config(nodeToken, rootToken string) Config {
	return Config{
		Name:               o.NodeName,
		AdvertiseAddress:   o.AdvertiseAddress,
		NodeToken:          nodeToken,
		RootToken:          rootToken,
		DataDir:            o.DataDir,
		Limits:             Limits{Default: o.DefaultLease, Max: o.MaxLease},
		MaxBootConcurrency: o.MaxBootConcurrency,
		InventoryInterval:  o.InventoryInterval,
		WarmCheckInterval:  o.WarmCheckInterval,
		Timeouts:           o.Serve.Timeouts,
		Quota:              o.Quota,
	}
}

// PublishConfig is the client configuration NodeInventory is published
// and the sandboxes' lifecycle events written (Config.Events) with:
// --kubeconfig's, the pod's ServiceAccount with --publish-in-cluster, or
// nil (neither).
func (o *Options) PublishConfig() (*rest.Config, error) {
	switch {
	case o.PublishInCluster:
		return rest.InClusterConfig()
	case o.Kubeconfig != "":
		return clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	}
	return nil, nil
}

// kvFlag is a repeatable KEY=VALUE flag.
type kvFlag struct{ m *map[string]string }

func (f kvFlag) String() string {
	if f.m == nil || *f.m == nil {
		return ""
	}
	parts := make([]string, 0, len(*f.m))
	for k, v := range *f.m {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

func (f kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	if *f.m == nil {
		*f.m = map[string]string{}
	}
	(*f.m)[k] = v
	return nil
}
