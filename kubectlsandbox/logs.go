package kubectlsandbox

import (
	"context"
	"errors"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/hearthvm/hearth/sandbox"
)

// Logs copies the sandbox log of name (GET sandboxes/name/log,
// docs/API.md#sandbox-logs) to w, as opts select; with opts.Follow it
// copies each line as it comes until ctx ends or the sandbox is paused or
// released (the stream's end is not an error).
func (p *Plugin) Logs(ctx context.Context, name string, opts sandbox.SandboxLogOptions, w io.Writer) error {
	ns, err := p.namespace()
	if err != nil {
		return err
	}
	cfg, err := p.Flags.ToRESTConfig()
	if err != nil {
		return err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.APIPath = "/apis"
	cfg.GroupVersion = &sandbox.SchemeGroupVersion
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	c, err := rest.RESTClientFor(cfg)
	if err != nil {
		return err
	}
	req := c.Get().Namespace(ns).Resource(sandboxes.Resource).Name(name).SubResource("log")
	for k, v := range map[string]*int64{"tailLines": opts.TailLines, "limitBytes": opts.LimitBytes, "sinceSeconds": opts.SinceSeconds} {
		if v != nil {
			req.Param(k, strconv.FormatInt(*v, 10))
		}
	}
	if opts.SinceTime != nil {
		req.Param("sinceTime", opts.SinceTime.UTC().Format(time.RFC3339))
	}
	if opts.Timestamps {
		req.Param("timestamps", "true")
	}
	if opts.Follow {
		req.Param("follow", "true")
	}
	body, err := req.Stream(ctx)
	if err != nil {
		return err
	}
	defer body.Close()
	_, err = io.Copy(w, body)
	return err
}

func (p *Plugin) logsCommand() *cobra.Command {
	var tail, limit int64
	var since time.Duration
	var sinceTime string
	var opts sandbox.SandboxLogOptions
	c := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print a sandbox's log: the processes started through its agent, their output and exit (-f follows it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if tail >= 0 {
				opts.TailLines = &tail
			}
			if limit > 0 {
				opts.LimitBytes = &limit
			}
			if since != 0 && sinceTime != "" {
				return errors.New("--since and --since-time: give one")
			}
			if since != 0 {
				s := int64((since + time.Second - 1) / time.Second)
				opts.SinceSeconds = &s
			}
			if sinceTime != "" {
				t, err := time.Parse(time.RFC3339, sinceTime)
				if err != nil {
					return errors.New("--since-time: want an RFC 3339 time")
				}
				mt := metav1.NewTime(t)
				opts.SinceTime = &mt
			}
			return p.Logs(c.Context(), args[0], opts, p.Out)
		},
	}
	c.Flags().Int64Var(&tail, "tail", -1, "the newest lines to show (-1: all)")
	c.Flags().Int64Var(&limit, "limit-bytes", 0, "the most bytes to show (0: no limit)")
	c.Flags().DurationVar(&since, "since", 0, "only lines newer than this (e.g. 5s, 2m, 3h)")
	c.Flags().StringVar(&sinceTime, "since-time", "", "only lines at or after this RFC 3339 time")
	c.Flags().BoolVar(&opts.Timestamps, "timestamps", false, "start each line with its RFC 3339 time")
	c.Flags().BoolVarP(&opts.Follow, "follow", "f", false, "stream the log: print each line as it is written, until interrupted or the sandbox is paused or deleted")
	return c
}
