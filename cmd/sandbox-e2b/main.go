// Command sandbox-e2b is the standalone e2b gateway (package e2b): e2b's
// REST API and envd data plane over the fleet of sandboxd nodes, found
// through their NodeInventory objects.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/claim"
	"github.com/hearthvm/hearth/e2b"
	"github.com/hearthvm/hearth/inventory"
)

func main() {
	o := e2b.NewOptions()
	fs := pflag.NewFlagSet("sandbox-e2b", pflag.ExitOnError)
	o.AddFlags(fs)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster holding the NodeInventory objects (default: in-cluster)")
	tokenFile := fs.String("sandboxd-token-file", "", "file holding the sandboxd root token")
	_ = fs.Parse(os.Args[1:])
	if err := run(o, *kubeconfig, *tokenFile); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-e2b:", err)
		os.Exit(1)
	}
}

func run(o *e2b.Options, kubeconfig, tokenFile string) error {
	if err := o.Validate(); err != nil {
		return err
	}
	cfg, err := o.Config(nil) // load and check the keys before any I/O
	if err != nil {
		return err
	}
	var token string
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return fmt.Errorf("--sandboxd-token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	src, err := inventory.NewSourceForConfig(rc)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go src.Run(ctx)
	if err := src.WaitForSync(ctx); err != nil {
		return fmt.Errorf("syncing NodeInventory: %w", err)
	}
	cfg.Fleet = e2b.WithPools(claim.NewFleet(claim.FleetConfig{View: src, Token: token}), src)
	h, err := e2b.New(cfg)
	if err != nil {
		return err
	}
	err = e2b.Serve(ctx, o.BindAddress, h, func(a net.Addr) { klog.InfoS("serving the e2b API", "address", a.String()) })
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
