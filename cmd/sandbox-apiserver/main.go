// Command sandbox-apiserver is the aggregated API server serving
// agents.x-k8s.io/v1beta1 sandboxes over warm microVMs (package apiserver).
package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/apiserver"
)

func main() {
	opts := apiserver.NewOptions()
	logCfg := logsapi.NewLoggingConfiguration()
	fs := pflag.NewFlagSet("sandbox-apiserver", pflag.ExitOnError)
	opts.AddFlags(fs)
	logsapi.AddFlags(logCfg, fs)
	// The e2b surface's flags (--enable-e2b-api, …) are registered here.
	_ = fs.Parse(os.Args[1:])

	logs.InitLogs()
	defer logs.FlushLogs()
	if err := logsapi.ValidateAndApply(logCfg, nil); err != nil {
		fail(err)
	}
	if err := opts.Complete(); err != nil {
		fail(err)
	}
	if err := opts.Validate(); err != nil {
		fail(err)
	}
	cfg, err := opts.Config()
	if err != nil {
		fail(err)
	}
	srv, err := cfg.Complete().New()
	if err != nil {
		fail(err)
	}
	// The e2b gateway, when enabled, is started alongside srv here.
	if err := srv.Run(genericapiserver.SetupSignalContext()); err != nil {
		fail(err)
	}
}

func fail(err error) {
	klog.ErrorS(err, "sandbox-apiserver")
	fmt.Fprintln(os.Stderr, "sandbox-apiserver:", err)
	os.Exit(1)
}
