package node

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/nodeapi"
)

// BenchmarkClaim_SimEgressPolicy is issue 24's measure: the latency of a
// claim on a real node with the sim driver (egress lane, fsync on) with no
// policy and with a 50-rule one (an e2b allow-list of 45 CIDRs and 5
// domains behind a deny of all traffic), alternating in one run. It
// reports each one's p50 and p99 and the p99 added. Run it with a fixed
// count (each iteration takes two warm VMs): go test ./node -run x -bench
// SimEgressPolicy -benchtime 40x
func BenchmarkClaim_SimEgressPolicy(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("the sim driver needs root")
	}
	var allow []string
	for i := range 45 {
		allow = append(allow, fmt.Sprintf("198.18.%d.0/24", i*3))
	}
	for i := range 5 {
		allow = append(allow, fmt.Sprintf("svc%d.allowed.test", i))
	}
	pol, errs := egress.FromE2B(egress.E2B{AllowOut: allow, DenyOut: []string{egress.AllTraffic}})
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	base := b.TempDir()
	tn := runNode(b, Config{Name: "n1", DataDir: filepath.Join(base, "data"), RootToken: testRoot, Driver: newSim(b, filepath.Join(base, "vms")),
		ReapInterval: time.Hour, RefillInterval: 50 * time.Millisecond, MaxBootConcurrency: 2})
	var none, with []time.Duration
	claim := func(p *egress.Policy) time.Duration {
		t0 := time.Now()
		if _, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Net: "egress", Egress: p}); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	n := 0
	for b.Loop() {
		b.StopTimer()
		if n%10 == 0 { // warm up to ten pairs at a time, off the clock
			if _, err := tn.root.PutPools(bg, []nodeapi.PoolSpec{{Template: "img", Net: "egress", Warm: 20}}); err != nil {
				b.Fatal(err)
			}
			tn.waitWarm(b, "img", 20)
		}
		b.StartTimer()
		none = append(none, claim(nil))
		with = append(with, claim(pol))
		n++
	}
	pct := func(ds []time.Duration, q int) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[(len(s)-1)*q/100].Microseconds()) / 1000
	}
	b.ReportMetric(pct(none, 50), "none-p50-ms")
	b.ReportMetric(pct(none, 99), "none-p99-ms")
	b.ReportMetric(pct(with, 50), "50rules-p50-ms")
	b.ReportMetric(pct(with, 99), "50rules-p99-ms")
	b.ReportMetric(pct(with, 99)-pct(none, 99), "added-p99-ms")
}
