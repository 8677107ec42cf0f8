package node

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// Options are sandboxd's command-line settings (cmd/sandboxd parses them
// and wires a Node from them).
type Options struct {
	NodeName           string
	Listen             string
	AdvertiseAddress   string
	TokenFile          string
	DataDir            string
	VMM                string
	AgentBin           string
	DefaultLease       time.Duration
	MaxLease           time.Duration
	MaxBootConcurrency int
	InventoryInterval  time.Duration
	InventoryDebounce  time.Duration
	Kubeconfig         string
	// WarmCheckInterval is the warm-pool health sweep's cadence
	// (Config.WarmCheckInterval): 0 = the default, negative = disabled.
	WarmCheckInterval time.Duration
	// VMMOptions are backend-specific settings (backends.Options.Extra),
	// e.g. config=/etc/hearth/qemu.json or accel=tcg for qemu.
	VMMOptions map[string]string
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
	}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "node name (NodeInventory name); default: the hostname")
	fs.StringVar(&o.Listen, "listen", o.Listen, "host:port to serve the node API on")
	fs.StringVar(&o.AdvertiseAddress, "advertise-address", o.AdvertiseAddress, "host:port other components reach this node at; default: the listen address")
	fs.StringVar(&o.TokenFile, "token-file", o.TokenFile, "file holding the root bearer token; without it root authentication is disabled (development only)")
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "directory for the claim store, checkpoints and VM run directories")
	fs.StringVar(&o.VMM, "vmm", o.VMM, "VMM backend: sim, qemu, firecracker or cloud-hypervisor")
	fs.StringVar(&o.AgentBin, "agent-bin", o.AgentBin, "path to the sandbox-agent binary (default: next to this binary, on PATH, or built from the module source)")
	fs.DurationVar(&o.DefaultLease, "default-lease", o.DefaultLease, "lease granted when a claim asks for none")
	fs.DurationVar(&o.MaxLease, "max-lease", o.MaxLease, "longest lease granted")
	fs.IntVar(&o.MaxBootConcurrency, "max-boot-concurrency", o.MaxBootConcurrency, "concurrent warm VM boots node-wide")
	fs.DurationVar(&o.InventoryInterval, "inventory-interval", o.InventoryInterval, "NodeInventory publish cadence")
	fs.DurationVar(&o.InventoryDebounce, "inventory-debounce", o.InventoryDebounce, "also publish this soon after a claim-table change (0 = only on the cadence)")
	fs.DurationVar(&o.WarmCheckInterval, "warm-check-interval", o.WarmCheckInterval, "cadence of the warm-pool health sweep that probes warm VMs' agents and replaces dead ones (0 = default 10s, negative = disabled)")
	fs.Var(kvFlag{&o.VMMOptions}, "vmm-opt", "backend-specific setting KEY=VALUE (repeatable): qemu: binary, config, accel (auto|kvm|tcg); firecracker: binary, kernel, initrd, rootfs, boot_args; cloud-hypervisor: binary, kernel, initramfs, rootfs, cmdline, memory_restore_mode")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig of the cluster to publish NodeInventory to (server-side apply); empty = no publishing")
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
	if o.InventoryDebounce < 0 {
		errs = append(errs, errors.New("--inventory-debounce must not be negative"))
	}
	return errors.Join(errs...)
}

// RootToken reads --token-file (whitespace-trimmed); empty without one.
func (o *Options) RootToken() (string, error) {
	if o.TokenFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(o.TokenFile)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("--token-file %s is empty", o.TokenFile)
	}
	return tok, nil
}

// Config returns the Node configuration the options describe; the caller
// sets Driver and Publisher.
func (o *Options) Config(rootToken string) Config {
	return Config{
		Name:               o.NodeName,
		AdvertiseAddress:   o.AdvertiseAddress,
		RootToken:          rootToken,
		DataDir:            o.DataDir,
		Limits:             Limits{Default: o.DefaultLease, Max: o.MaxLease},
		MaxBootConcurrency: o.MaxBootConcurrency,
		InventoryInterval:  o.InventoryInterval,
		InventoryDebounce:  o.InventoryDebounce,
		WarmCheckInterval:  o.WarmCheckInterval,
	}
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
