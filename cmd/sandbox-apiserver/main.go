// Command sandbox-apiserver is the aggregated API server serving
// agents.x-k8s.io/v1beta1 sandboxes over warm microVMs, with the
// components package server composes around it (the e2b gateway with
// --enable-e2b-api, the Pod-path webhook, the warm-pool driver).
package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/server"
)

func main() {
	opts := server.NewOptions()
	logCfg := logsapi.NewLoggingConfiguration()
	fs := pflag.NewFlagSet("sandbox-apiserver", pflag.ExitOnError)
	opts.AddFlags(fs)
	logsapi.AddFlags(logCfg, fs)
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
	if err := srv.Run(genericapiserver.SetupSignalContext()); err != nil {
		fail(err)
	}
}

func fail(err error) {
	klog.ErrorS(err, "sandbox-apiserver")
	fmt.Fprintln(os.Stderr, "sandbox-apiserver:", err)
	os.Exit(1)
}
