package suite

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestSuite_QuickRunPrintsEveryTable runs every benchmark at quick sizes:
// each must finish without error (a benchmark fails when any claim
// failed) and print its table.
func TestSuite_QuickRunPrintsEveryTable(t *testing.T) {
	names := []string{"nodeclaim", "apiclaim", "lookup", "rederive", "fleetsim", "fleetscale"}
	if !testing.Short() {
		names = append(names, "devclaim", "fill") // sandbox-dev with sim VMs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			var out strings.Builder
			cfg := Config{Out: &out, Quick: true, Concurrency: []int{1, 4}, Claims: 40}
			if err := Run(ctx, cfg, []string{name}); err != nil {
				t.Fatal(err)
			}
			s := out.String()
			if !strings.Contains(s, "### ") || !strings.Contains(s, "| ---") {
				t.Fatalf("no table printed:\n%s", s)
			}
			t.Log("\n" + s)
		})
	}
}

func TestRun_UnknownBenchmark(t *testing.T) {
	if err := Run(context.Background(), Config{}, []string{"nope"}); err == nil || !strings.Contains(err.Error(), "known:") {
		t.Fatalf("Run(nope) = %v, want an error listing the known benchmarks", err)
	}
}
