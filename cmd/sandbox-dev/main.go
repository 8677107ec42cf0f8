// Command sandbox-dev is the embedded default: the API server, an embedded
// etcd, N in-process node daemons, the warm-pool driver and the e2b
// gateway in one process (package devserver).
package main

import (
	"context"
	goflag "flag"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"google.golang.org/grpc/grpclog"
	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/devserver"
)

func main() {
	o := devserver.NewOptions()
	fs := pflag.CommandLine
	o.AddFlags(fs)
	kfs := goflag.NewFlagSet("klog", goflag.ExitOnError)
	klog.InitFlags(kfs)
	fs.AddGoFlagSet(kfs)
	pflag.Parse()
	// etcd's gRPC clients log every cancelled dial at startup; keep errors.
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, os.Stderr))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := devserver.Run(ctx, o); err != nil {
		klog.ErrorS(err, "sandbox-dev failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}
