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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/hearthvm/hearth/sandbox"
)

// topConcurrency bounds the stats reads top has in flight.
const topConcurrency = 8

// rateWait is how long after its first answers Top reads a sandbox again
// when its node answered no CPU rate (it had no earlier measurement of
// the sandbox): the node's shortest window (docs/API.md#sandbox-stats).
const rateWait = time.Second

// Top reads the SandboxStats of sandbox name (GET sandboxes/name/stats,
// docs/API.md#sandbox-stats), or, name "", of every sandbox in the
// namespace, topConcurrency at a time, sorted by name. A running sandbox
// whose answer has CPU time but no CPU rate is read once more rateWait
// later, which has one (so a first top takes a second; one repeated
// within a minute, one request). A sandbox deleted between the list and
// its read is left out; any other failed read is in the error, beside the
// stats that were read.
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
	var (
		out  []sandbox.SandboxStats
		errs []error
	)
	if name != "" {
		st, err := read(name)
		if err != nil {
			return nil, err
		}
		out = []sandbox.SandboxStats{st}
	} else {
		list, err := c.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		names := make([]string, 0, len(list.Items))
		for _, item := range list.Items {
			names = append(names, item.GetName())
		}
		out, errs = readAll(names, read)
	}
	var again []string
	for _, st := range out {
		if needsRate(st) {
			again = append(again, st.Name)
		}
	}
	if len(again) > 0 {
		// Every first answer was measured before it arrived: rateWait from
		// now, each sandbox's node has one at least that old.
		t := time.NewTimer(rateWait)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
		// A second read that fails leaves the first's answer.
		second, _ := readAll(again, read)
		for _, st := range second {
			for i := range out {
				if out[i].Name == st.Name {
					out[i] = st
				}
			}
		}
	}
	slices.SortFunc(out, byName)
	return out, errors.Join(errs...)
}

// needsRate reports whether st is a running sandbox's with CPU time but
// no CPU rate: its node had no earlier measurement to average over.
func needsRate(st sandbox.SandboxStats) bool {
	return !st.Paused && st.CPUUsageCoreNanoSeconds != nil && st.CPUUsageNanoCores == nil
}

func byName(a, b sandbox.SandboxStats) int { return strings.Compare(a.Name, b.Name) }

// readAll reads names through read, topConcurrency at a time: a sandbox
// deleted meanwhile (404) is left out, another failure is in errs.
func readAll(names []string, read func(string) (sandbox.SandboxStats, error)) (out []sandbox.SandboxStats, errs []error) {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, topConcurrency)
	)
	for _, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
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
		}()
	}
	wg.Wait()
	return out, errs
}

// writeTop prints stats as top's table: NAME STATUS CPUS CPU MEMORY DISK —
// CPU as kubectl top's, the cores used in millicores averaged over the
// answer's window, memory and disk as used/limit in Mi — "-" for what was
// not measured.
func writeTop(w io.Writer, stats []sandbox.SandboxStats) error {
	tw := tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATUS\tCPUS\tCPU\tMEMORY\tDISK")
	for _, st := range stats {
		status := "Running"
		if st.Paused {
			status = "Paused"
		}
		disk := "-"
		if st.DiskLimitBytes != nil {
			disk = mebibytes(st.DiskUsedBytes) + "/" + mebibytes(st.DiskLimitBytes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", st.Name, status, st.CPUCount, millicores(st.CPUUsageNanoCores),
			mebibytes(st.MemoryUsedBytes)+"/"+mebibytes(&st.MemoryLimitBytes), disk)
	}
	return tw.Flush()
}

// millicores is v nanocores as kubectl top prints cores ("250m", rounded
// up), or "-" for nil.
func millicores(v *int64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatInt(resource.NewScaledQuantity(*v, resource.Nano).MilliValue(), 10) + "m"
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
		Short: "Show sandboxes' CPU (cores, averaged over the last seconds), memory and disk, as their nodes measure them now (all in the namespace, or NAME)",
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
