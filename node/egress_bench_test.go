package node

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/internal/testagent"
	"github.com/hearthvm/hearth/internal/testnet"
	"github.com/hearthvm/hearth/nodeapi"
)

// BenchmarkClaim_SimEgressPolicy is issue 24's measure: the latency of a
// claim on a real node with the sim driver (egress lane, fsync on) with no
// policy and with a 50-rule one (an e2b allow-list of 45 CIDRs and 5
// domains behind a deny of all traffic), alternating in one run. It
// reports each one's p50 and p99 and the p99 added. Each claim starts on
// a full pool of four and waits, off the clock, for it to refill, so the
// sim boots of earlier claims do not land in its tail. Run it with a fixed
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
	if _, err := tn.root.PutPools(bg, []nodeapi.PoolSpec{{Template: "img", Net: "egress", Warm: 4}}); err != nil {
		b.Fatal(err)
	}
	tn.waitWarm(b, "img", 4)
	// Each claim starts on a full pool and the pool is full again before
	// the next (off the clock): a claim competes only with the boot its
	// own claim started, the same for both, not with the refills of the
	// claims before it. The order alternates.
	measure := func(p *egress.Policy) time.Duration {
		d := claim(p)
		b.StopTimer()
		tn.waitWarm(b, "img", 4)
		b.StartTimer()
		return d
	}
	n := 0
	for b.Loop() {
		if n%2 == 0 {
			none = append(none, measure(nil))
			with = append(with, measure(pol))
		} else {
			with = append(with, measure(pol))
			none = append(none, measure(nil))
		}
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

// BenchmarkResume_SimEgressFirstAllowedConnection is issue 24's second
// measure: from a resume's call to the first connection its policy allows
// answering from inside the sandbox (sim, egress lane, a 2-rule policy),
// for a pause with memory (the filter stays) and one without (a new boot:
// the node applies the policy again). The figure includes one process
// start through the agent, which polls the connection. go test ./node
// -run x -bench Resume_SimEgress -benchtime 10x
func BenchmarkResume_SimEgressFirstAllowedConnection(b *testing.B) {
	net := testnet.Start(b, testnet.Host{Addr: "198.18.0.10", Names: []string{"allowed.test"}})
	base := b.TempDir()
	root := filepath.Join(base, "vms")
	d := newSimOn(b, root, net.UplinkPath)
	tn := runNode(b, Config{Name: "n1", DataDir: filepath.Join(base, "data"), RootToken: testRoot, Driver: d,
		ReapInterval: time.Hour, RefillInterval: 50 * time.Millisecond})
	if _, err := tn.root.PutPools(bg, []nodeapi.PoolSpec{{Template: "img", Net: "egress", Warm: 1}}); err != nil {
		b.Fatal(err)
	}
	tn.waitWarm(b, "img", 1)
	pol, _ := egress.FromE2B(egress.E2B{DenyOut: []string{egress.AllTraffic}, AllowOut: []string{"allowed.test"}})
	sb, err := tn.root.Claim(bg, nodeapi.ClaimRequest{Template: "img", Net: "egress", Egress: pol, TTLSeconds: 3600})
	if err != nil {
		b.Fatal(err)
	}
	probe := "until printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 1 allowed.test 80 | grep -q 'hello from'; do :; done"
	for _, mode := range []struct {
		name   string
		memory bool
	}{{"with-memory", true}, {"without-memory", false}} {
		b.Run(mode.name, func(b *testing.B) {
			var ds []time.Duration
			for b.Loop() {
				b.StopTimer()
				if err := tn.root.PauseWith(bg, sb.ID, nodeapi.PauseRequest{Memory: &mode.memory}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				t0 := time.Now()
				if err := tn.root.Resume(bg, sb.ID); err != nil {
					b.Fatal(err)
				}
				g, err := tn.root.Get(bg, sb.ID)
				if err != nil {
					b.Fatal(err)
				}
				if r := testagent.Run(b, g.AgentAddr, sb.Token, "root", probe); r.Exit != 0 {
					b.Fatalf("probe: %v", r)
				}
				ds = append(ds, time.Since(t0))
			}
			slices.Sort(ds)
			b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(ds[len(ds)-1].Microseconds())/1000, "max-ms")
		})
	}
}
