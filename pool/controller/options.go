package controller

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
)

// Options are the warm-pool controller's flags, for the binaries that embed
// it (package server: sandbox-apiserver behind a kube-apiserver, and
// sandbox-dev, which sets its own --warm-pool-sync-interval).
type Options struct {
	// Enabled runs the controller (elected: one replica drives at a time).
	Enabled bool
	// SyncInterval is the controller's cadence.
	SyncInterval time.Duration
	// LeaseNamespace holds the election Lease.
	LeaseNamespace string
}

// NewOptions returns the defaults: enabled, 5s, namespace sandbox-system.
func NewOptions() *Options {
	return &Options{Enabled: true, SyncInterval: 5 * time.Second, LeaseNamespace: "sandbox-system"}
}

// AddFlags registers --enable-warm-pool-driver, --warm-pool-sync-interval
// and --warm-pool-lease-namespace (the flags keep their historical names).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "enable-warm-pool-driver", o.Enabled, "run the warm-pool driver (SandboxWarmPool → node warm targets), leader-elected through a Lease")
	fs.DurationVar(&o.SyncInterval, "warm-pool-sync-interval", o.SyncInterval, "warm-pool driver cadence: targets re-sent and status sampled")
	fs.StringVar(&o.LeaseNamespace, "warm-pool-lease-namespace", o.LeaseNamespace, "namespace of the warm-pool driver's election Lease")
}

// Validate reports invalid options.
func (o *Options) Validate() error {
	if o.Enabled && o.SyncInterval <= 0 {
		return fmt.Errorf("--warm-pool-sync-interval must be positive, got %s", o.SyncInterval)
	}
	return nil
}

// Config is the elected controller's configuration for cfg (the cluster
// holding the pools, templates and NodeInventory objects) and the fleet
// secret (Config.Secret).
func (o *Options) Config(cfg *rest.Config, secret string) Config {
	return Config{REST: cfg, Secret: secret, Interval: o.SyncInterval, Elect: true, LeaseNamespace: o.LeaseNamespace}
}

// NewController builds the elected controller for cfg (the cluster holding the
// pools, templates and NodeInventory objects) and the fleet secret; nil
// when disabled.
func (o *Options) NewController(cfg *rest.Config, secret string) (*Controller, error) {
	if !o.Enabled {
		return nil, nil
	}
	return New(o.Config(cfg, secret))
}
