// Command sandboxd is the node daemon: warm microVM pools, O(1) claims and
// the node HTTP API (package node).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/internal/kubeevents"
	"github.com/hearthvm/hearth/internal/serve"
	"github.com/hearthvm/hearth/internal/tracing"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/node"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/vmm/backends"
	"github.com/hearthvm/hearth/vmm/sim"
)

func main() {
	o := node.NewOptions()
	o.AddFlags(flag.CommandLine)
	to := tracing.NewOptions()
	to.AddGoFlags(flag.CommandLine)
	klog.InitFlags(flag.CommandLine)
	flag.Parse()
	if err := run(o, to); err != nil {
		klog.ErrorS(err, "sandboxd failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func run(o *node.Options, to *tracing.Options) error {
	if err := o.Complete(); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return err
	}
	if err := to.Validate(); err != nil {
		return err
	}
	if o.WriteNodeToken != "" {
		return o.WriteDerivedNodeToken()
	}
	nodeToken, err := o.NodeToken()
	if err != nil {
		return err
	}
	rootToken, err := o.RootToken()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return err
	}
	agent, err := sim.ResolveAgent(o.AgentBin, o.DataDir)
	if err != nil && o.VMM == sim.Name {
		return err
	}
	driver, err := backends.Open(o.VMM, backends.Options{RootDir: filepath.Join(o.DataDir, "vms"), AgentCommand: agent, Extra: o.VMMOptions, DiskBytes: o.DiskBytes()})
	if err != nil {
		return err
	}
	cfg := o.Config(nodeToken, rootToken)
	cfg.Driver = driver
	tp, err := to.Provider(context.Background(), "sandboxd", attribute.String("k8s.node.name", o.NodeName))
	if err != nil {
		return fmt.Errorf("--tracing-endpoint: %w", err)
	}
	defer tracing.Shutdown(context.Background(), tp)
	cfg.TracerProvider = tp
	rc, err := o.PublishConfig()
	if err != nil {
		return err
	}
	if rc != nil {
		if cfg.Publisher, err = inventory.NewApplyPublisher(rc, inventory.DefaultFieldManager); err != nil {
			return err
		}
		// The same client writes the sandboxes' lifecycle events as
		// events.k8s.io/v1 Events (node/kubeevents.go).
		ectx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if cfg.Events, err = kubeevents.New(ectx, rc, nodeapi.EventsController); err != nil {
			return err
		}
		defer cfg.Events.Shutdown()
	}
	n, err := node.New(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		_ = n.Close(context.Background())
		return err
	}
	serve.Shared().SetLimits(o.Conns)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	klog.InfoS("sandboxd serving", "listen", ln.Addr().String(), "node", o.NodeName, "vmm", o.VMM)
	return node.Serve(ctx, n, ln, node.ServeOptions{Serve: o.Serve, Grace: 5 * time.Second})
}
