package kubectlsandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/hearthvm/hearth/sandbox"
)

// topConcurrency bounds the stats reads top has in flight.
const topConcurrency = 8

// Top reads the SandboxStats of sandbox name (GET sandboxes/name/stats,
// docs/API.md#sandbox-stats), or, name "", of every sandbox in the
// namespace, topConcurrency at a time, sorted by name. A sandbox deleted
// between the list and its read is left out; any other failed read is in
// the error, beside the stats that were read.
func (p *Plugin) Top(ctx context.Context, name string) ([]sandbox.SandboxStats, error) {
	ns, err := p.namespace()
	if err != nil {
		return nil, err
	}
	res, err := p.dynamic()
	if err != nil {
		return nil, err
	}
	c := res.Namespace(ns)
	read := func(name string) (sandbox.SandboxStats, error) {
		var st sandbox.SandboxStats
		obj, err := c.Get(ctx, name, metav1.GetOptions{}, "stats")
		if err != nil {
			return st, err
		}
		err = runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &st)
		return st, err
	}
	if name != "" {
		st, err := read(name)
		if err != nil {
			return nil, err
		}
		return []sandbox.SandboxStats{st}, nil
	}
	list, err := c.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var (
		mu   sync.Mutex
		out  []sandbox.SandboxStats
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, topConcurrency)
	)
	for _, item := range list.Items {
		wg.Add(1)
		sem <- struct{}{}
		go func(name string) {
			defer func() { <-sem; wg.Done() }()
			st, err := read(name)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			default:
				out = append(out, st)
			}
		}(item.GetName())
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b sandbox.SandboxStats) int { return strings.Compare(a.Name, b.Name) })
	return out, errors.Join(errs...)
}

// writeTop prints stats as top's table: NAME STATUS CPUS CPU-TIME MEMORY
// DISK, memory and disk as used/limit in Mi, "-" for what was not measured.
func writeTop(w io.Writer, stats []sandbox.SandboxStats) error {
	tw := tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATUS\tCPUS\tCPU-TIME\tMEMORY\tDISK")
	for _, st := range stats {
		status := "Running"
		if st.Paused {
			status = "Paused"
		}
		cpuTime := "-"
		if st.CPUUsageCoreNanoSeconds != nil {
			cpuTime = time.Duration(*st.CPUUsageCoreNanoSeconds).Round(10 * time.Millisecond).String()
		}
		disk := "-"
		if st.DiskLimitBytes != nil {
			disk = mebibytes(st.DiskUsedBytes) + "/" + mebibytes(st.DiskLimitBytes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", st.Name, status, st.CPUCount, cpuTime,
			mebibytes(st.MemoryUsedBytes)+"/"+mebibytes(&st.MemoryLimitBytes), disk)
	}
	return tw.Flush()
}

// mebibytes is v in Mi, rounded down as kubectl top's, or "-" for nil.
func mebibytes(v *int64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatInt(*v>>20, 10) + "Mi"
}

func (p *Plugin) topCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "top [NAME]",
		Short: "Show sandboxes' CPU, memory and disk, as their nodes measure them now (all in the namespace, or NAME)",
		Args:  cobra.MaximumNArgs(1),
	}
	out := addOutput(c)
	c.RunE = func(c *cobra.Command, args []string) error {
		if err := out.check(); err != nil {
			return err
		}
		name := ""
		if len(args) == 1 {
			name = args[0]
		}
		stats, readErr := p.Top(c.Context(), name)
		if readErr != nil && len(stats) == 0 {
			return readErr
		}
		var obj *unstructured.Unstructured
		if out.value != "" {
			items := make([]any, 0, len(stats))
			for i := range stats {
				m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&stats[i])
				if err != nil {
					return err
				}
				items = append(items, m)
			}
			obj = &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "List", "items": items}}
			if name != "" {
				obj = &unstructured.Unstructured{Object: items[0].(map[string]any)}
			}
		}
		if err := out.print(p.Out, obj, func(w io.Writer) error { return writeTop(w, stats) }); err != nil {
			return err
		}
		return readErr
	}
	return c
}
