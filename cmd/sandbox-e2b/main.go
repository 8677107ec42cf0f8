// Command sandbox-e2b is the standalone e2b gateway (package e2b, wired by
// package server): e2b's REST API and envd data plane over the fleet of
// sandboxd nodes, found through their NodeInventory objects.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/hearthvm/hearth/server"
)

func main() {
	o := server.NewGatewayOptions()
	fs := pflag.NewFlagSet("sandbox-e2b", pflag.ExitOnError)
	o.AddFlags(fs)
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := server.RunGateway(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-e2b:", err)
		os.Exit(1)
	}
}
