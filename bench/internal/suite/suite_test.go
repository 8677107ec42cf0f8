package suite

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestSuite_QuickRunPrintsEveryTable runs every benchmark at quick sizes:
// each must finish without error (a benchmark fails when any claim
// failed) and print its table.
func TestSuite_QuickRunPrintsEveryTable(t *testing.T) {
	names := []string{"nodeclaim", "nodescale", "apiclaim", "lookup", "rederive", "fleetsim", "fleetscale"}
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
			lines := strings.Split(strings.TrimSpace(s), "\n")
			if last := lines[len(lines)-1]; name == "nodescale" && !nodeScaleLine.MatchString(last) {
				t.Fatalf("last line %q is not the nodescale summary", last)
			}
			t.Log("\n" + s)
		})
	}
}

var nodeScaleLine = regexp.MustCompile(`^nodescale: claim CPU µs at 100 / 1000 / 10000 VMs held: [0-9]+ / [0-9]+ / [0-9]+$`)

func TestRun_UnknownBenchmark(t *testing.T) {
	if err := Run(context.Background(), Config{}, []string{"nope"}); err == nil || !strings.Contains(err.Error(), "known:") {
		t.Fatalf("Run(nope) = %v, want an error listing the known benchmarks", err)
	}
}
