package suite

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// Benchmark is one named benchmark.
type Benchmark struct {
	Name, Doc string
	Run       func(ctx context.Context, cfg Config) error
}

// All lists the benchmarks in the order Run runs them.
var All = []Benchmark{
	{"nodeclaim", "claim latency: node handler in process, node HTTP API, fleet router", NodeClaims},
	{"nodescale", "claim CPU at the node handler vs node size: 100, 1,000, 10,000 VMs held", NodeScale},
	{"apiclaim", "client-go Create → 201 through the aggregated API; read-after-create", APIClaims},
	{"devclaim", "client-go Create → 201 through sandbox-dev (sim VMs); read-after-create; etcd writes per claim", DevClaims},
	{"fill", "fill rate: patch replicas 0→S on sandbox-dev (sim), scaling-law fit", Fill},
	{"lookup", "one-sandbox lookup by id and by name at 1k … 1M entries", Lookup},
	{"rederive", "watch re-derive per tick and heap per entry", ReDerive},
	{"fleetsim", "real pipeline at 20 nodes: routing, view, client-go watch; CPU and heap per 1k sandboxes", FleetSim},
	{"fleetscale", "apiserver-side memory and CPU per sandbox up to 200 nodes × 5k (1M)", FleetScale},
}

// Run runs the named benchmarks (all when names is empty), in All's order.
func Run(ctx context.Context, cfg Config, names []string) error {
	cfg.defaults()
	want := map[string]bool{}
	for _, n := range names {
		found := false
		for _, b := range All {
			if b.Name == n {
				found = true
			}
		}
		if !found {
			var known []string
			for _, b := range All {
				known = append(known, b.Name)
			}
			return fmt.Errorf("unknown benchmark %q (known: %s)", n, strings.Join(known, ", "))
		}
		want[n] = true
	}
	fmt.Fprintf(cfg.Out, "Machine: %s\n\n", machine())
	for _, b := range All {
		if len(want) > 0 && !want[b.Name] {
			continue
		}
		start := time.Now()
		cfg.logf("running %s", b.Name)
		var last strings.Builder
		cfg.last = &last
		if err := b.Run(ctx, cfg); err != nil {
			return fmt.Errorf("%s: %w", b.Name, err)
		}
		cfg.logf("%s done in %s", b.Name, time.Since(start).Round(time.Millisecond))
		fmt.Fprintf(cfg.Out, "(%s: %s wall; load average after: %s)\n\n", b.Name, time.Since(start).Round(time.Second), loadavg())
		if last.Len() > 0 {
			fmt.Fprintf(cfg.Out, "%s\n", last.String())
		}
	}
	return nil
}

// machine describes the host: CPUs, memory, Go version, load.
func machine() string {
	mem := "?"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "MemTotal:") {
				var kb float64
				if _, err := fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(l, "MemTotal:")), "%f", &kb); err == nil {
					mem = fmt.Sprintf("%.1f GiB", kb/(1<<20))
				}
			}
		}
	}
	return fmt.Sprintf("%d CPUs (GOMAXPROCS %d), %s RAM, %s %s/%s, load average %s", runtime.NumCPU(), runtime.GOMAXPROCS(0), mem,
		runtime.Version(), runtime.GOOS, runtime.GOARCH, loadavg())
}

// loadavg is the 1/5/15-minute load average (other processes share the CPUs).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
