package kubectlsandbox

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/hearthvm/hearth/sandbox"
)

// payloads knows the lifecycle payload kinds.
var payloads = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := sandbox.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// Verb POSTs body (a lifecycle options object: SandboxPauseOptions, ...)
// to sandboxes/name/verb in the namespace and returns the answer
// (docs/API.md#subresources): the Sandbox for pause and resume, a
// SandboxForkResult or SandboxSnapshotResult.
func (p *Plugin) Verb(ctx context.Context, name, verb string, body runtime.Object) (*unstructured.Unstructured, error) {
	ns, err := p.namespace()
	if err != nil {
		return nil, err
	}
	res, err := p.dynamic()
	if err != nil {
		return nil, err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(body)
	if err != nil {
		return nil, err
	}
	kinds, _, err := payloads.ObjectKinds(body)
	if err != nil {
		return nil, err
	}
	obj := &unstructured.Unstructured{Object: m}
	obj.SetGroupVersionKind(kinds[0])
	obj.SetName(name) // the dynamic client's sandbox name for a subresource
	return res.Namespace(ns).Create(ctx, obj, metav1.CreateOptions{}, verb)
}

// verbCommand is pause or resume: one call, the Sandbox back.
func (p *Plugin) verbCommand(verb string) *cobra.Command {
	var body runtime.Object = &sandbox.SandboxPauseOptions{}
	past, what := "paused", "Pause a sandbox: its memory and file system are kept, its processes stop"
	if verb == "resume" {
		body, past, what = &sandbox.SandboxResumeOptions{}, "resumed", "Resume a paused sandbox"
	}
	c := &cobra.Command{
		Use:   verb + " NAME",
		Short: what,
		Args:  cobra.ExactArgs(1),
	}
	out := addOutput(c)
	c.RunE = func(c *cobra.Command, args []string) error {
		if err := out.check(); err != nil {
			return err
		}
		obj, err := p.Verb(c.Context(), args[0], verb, body)
		if err != nil {
			return err
		}
		return out.print(p.Out, obj, func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "sandbox.%s/%s %s\n", sandbox.GroupName, obj.GetName(), past)
			return err
		})
	}
	return c
}

func (p *Plugin) forkCommand() *cobra.Command {
	opts := &sandbox.SandboxForkOptions{}
	c := &cobra.Command{
		Use:   "fork NAME",
		Short: "Fork a running sandbox into children named NAME-fork-N, on its node: all of them or none",
		Args:  cobra.ExactArgs(1),
	}
	c.Flags().Int32Var(&opts.Count, "count", 1, "how many children (1 to 16)")
	c.Flags().Int32Var(&opts.TTLSeconds, "ttl-seconds", 0, "each child's lease in seconds (0: the node's default)")
	out := addOutput(c)
	c.RunE = func(c *cobra.Command, args []string) error {
		if err := out.check(); err != nil {
			return err
		}
		obj, err := p.Verb(c.Context(), args[0], "fork", opts)
		if err != nil {
			return err
		}
		return out.print(p.Out, obj, func(w io.Writer) error {
			var r sandbox.SandboxForkResult
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &r); err != nil {
				return err
			}
			for _, ch := range r.Children {
				if _, err := fmt.Fprintf(w, "sandbox.%s/%s forked (node %s)\n", sandbox.GroupName, ch.Name, ch.NodeName); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return c
}

func (p *Plugin) snapshotCommand() *cobra.Command {
	opts := &sandbox.SandboxSnapshotOptions{}
	c := &cobra.Command{
		Use:   "snapshot NAME",
		Short: "Snapshot a sandbox on its node; the e2b API or the node API starts sandboxes from it",
		Args:  cobra.ExactArgs(1),
	}
	c.Flags().StringVar(&opts.Name, "name", "", "the snapshot's name (optional)")
	out := addOutput(c)
	c.RunE = func(c *cobra.Command, args []string) error {
		if err := out.check(); err != nil {
			return err
		}
		obj, err := p.Verb(c.Context(), args[0], "snapshot", opts)
		if err != nil {
			return err
		}
		return out.print(p.Out, obj, func(w io.Writer) error {
			var r sandbox.SandboxSnapshotResult
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &r); err != nil {
				return err
			}
			_, err := fmt.Fprintf(w, "snapshot %s of %s taken (node %s)\n", r.SnapshotID, args[0], r.NodeName)
			return err
		})
	}
	return c
}
