package kubectlsandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"

	"github.com/hearthvm/hearth/sandbox"
)

// RouterEnv is the environment variable --router-url defaults to.
const RouterEnv = "HEARTH_ROUTER_URL"

// sandboxes is the Sandbox resource of the aggregated API.
var sandboxes = sandbox.SchemeGroupVersion.WithResource("sandboxes")

// Plugin is the state every command shares: kubectl's connection flags,
// the router's URL and the streams.
type Plugin struct {
	Flags     *genericclioptions.ConfigFlags
	RouterURL string
	genericiooptions.IOStreams
}

// ExitError is a command's non-zero exit status (exec's command's); main
// exits with Code and prints nothing more.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// NewCommand returns kubectl-sandbox's root command.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	p := &Plugin{Flags: genericclioptions.NewConfigFlags(true), IOStreams: streams}
	root := &cobra.Command{
		Use:           "sandbox",
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl sandbox"},
		Short:         "Run commands in, copy files to and from, forward ports of and manage Hearth sandboxes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	p.Flags.AddFlags(root.PersistentFlags())
	root.PersistentFlags().StringVar(&p.RouterURL, "router-url", os.Getenv(RouterEnv),
		"the gateway's router URL for exec, cp and port-forward (default $"+RouterEnv+"); https, or http to a loopback address")
	root.AddCommand(p.execCommand(), p.cpCommand(), p.portForwardCommand(),
		p.verbCommand("pause"), p.verbCommand("resume"), p.forkCommand(), p.snapshotCommand(), p.logsCommand(), p.topCommand())
	return root
}

// Run is the process kubectl-sandbox: Main on os.Args and the standard
// streams, until SIGINT or SIGTERM.
func Run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Main(ctx, os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
}

// Main runs kubectl-sandbox with args and returns the process's exit
// status, having printed any error.
func Main(ctx context.Context, args []string, streams genericiooptions.IOStreams) int {
	cmd := NewCommand(streams)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	var exit *ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.Code
	default:
		fmt.Fprintln(streams.ErrOut, "error:", err)
		return 1
	}
}

// namespace is -n, or the kubeconfig context's namespace, or "default".
func (p *Plugin) namespace() (string, error) {
	ns, _, err := p.Flags.ToRawKubeConfigLoader().Namespace()
	return ns, err
}

func (p *Plugin) dynamic() (dynamic.NamespaceableResourceInterface, error) {
	cfg, err := p.Flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return c.Resource(sandboxes), nil
}

// router returns the router client for sandbox name in the namespace.
func (p *Plugin) router(name string) (*router, error) {
	base, err := routerURL(p.RouterURL)
	if err != nil {
		return nil, err
	}
	cfg, err := p.Flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	ns, err := p.namespace()
	if err != nil {
		return nil, err
	}
	return newRouter(base, cfg, ns, name)
}

// output is -o: empty for the command's own line, else json or yaml.
type output struct {
	flags *genericclioptions.JSONYamlPrintFlags
	value string
}

func addOutput(c *cobra.Command) *output {
	o := &output{flags: genericclioptions.NewJSONYamlPrintFlags()}
	c.Flags().StringVarP(&o.value, "output", "o", "", "Output format. One of: ("+strings.Join(o.flags.AllowedFormats(), ", ")+").")
	return o
}

// check refuses an unknown -o before the command does anything.
func (o *output) check() error {
	if o.value == "" {
		return nil
	}
	if _, err := o.flags.ToPrinter(o.value); err != nil {
		return fmt.Errorf("--output %q: want one of %s", o.value, strings.Join(o.flags.AllowedFormats(), ", "))
	}
	return nil
}

// print writes obj as -o asks, or human's line without -o.
func (o *output) print(w io.Writer, obj *unstructured.Unstructured, human func(io.Writer) error) error {
	if o.value == "" {
		return human(w)
	}
	pr, err := o.flags.ToPrinter(o.value)
	if err != nil {
		return err
	}
	return pr.PrintObj(obj, w)
}
