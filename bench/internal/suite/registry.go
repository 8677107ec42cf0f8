package suite

import (
	"context"
	"fmt"
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
	{"apiclaim", "client-go Create → 201 through the aggregated API; read-after-create", APIClaims},
	{"devclaim", "client-go Create → 201 through sandbox-dev (sim VMs); read-after-create; etcd writes per claim", DevClaims},
	{"lookup", "one-sandbox lookup by id and by name at 1k … 1M entries", Lookup},
	{"rederive", "watch re-derive per tick and heap per entry", ReDerive},
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
	for _, b := range All {
		if len(want) > 0 && !want[b.Name] {
			continue
		}
		start := time.Now()
		cfg.logf("running %s", b.Name)
		if err := b.Run(ctx, cfg); err != nil {
			return fmt.Errorf("%s: %w", b.Name, err)
		}
		cfg.logf("%s done in %s", b.Name, time.Since(start).Round(time.Millisecond))
	}
	return nil
}
