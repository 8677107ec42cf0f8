package nft

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hearthvm/hearth/egress"
)

// fiftyRules is the measured policy: an e2b allow-list of 45
// addresses and CIDRs and 5 domains behind a deny of all traffic (52
// rules after translation).
func fiftyRules(b testing.TB) *egress.Policy {
	var allow []string
	for i := range 45 {
		allow = append(allow, fmt.Sprintf("198.18.%d.0/24", i*3))
	}
	for i := range 5 {
		allow = append(allow, fmt.Sprintf("svc%d.allowed.test", i))
	}
	p, errs := egress.FromE2B(egress.E2B{AllowOut: allow, DenyOut: []string{egress.AllTraffic}})
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	return p
}

// BenchmarkApply_50Rules is the claim-time cost of a 50-rule policy on a
// prepared namespace over its filter's lasting connection (Prepare runs
// outside the timer, as a warm VM's boot does): ns/op and the p99 of the
// runs.
func BenchmarkApply_50Rules(b *testing.B) { benchApply(b, fiftyRules(b)) }

// BenchmarkApply_OneRule is BenchmarkApply_50Rules for a policy of one
// CIDR (no set): the commit's own cost, against which the 50 rules' is
// read.
func BenchmarkApply_OneRule(b *testing.B) {
	benchApply(b, &egress.Policy{Otherwise: egress.Deny, Rules: []egress.Rule{{Action: egress.Allow, CIDR: "198.18.0.0/24"}}})
}

func benchApply(b *testing.B, p *egress.Policy) {
	n := startTestNet(b)
	ns := n.filter(b)
	var runs []time.Duration
	for b.Loop() {
		b.StopTimer()
		if err := ns.Prepare(Options{}); err != nil {
			b.Fatal(err)
		}
		// A warm VM waits in its pool between its boot's Prepare and its
		// claim: the table replacement's RCU work is done by then.
		time.Sleep(20 * time.Millisecond)
		b.StartTimer()
		t0 := time.Now()
		if err := ns.Apply(p); err != nil {
			b.Fatal(err)
		}
		runs = append(runs, time.Since(t0))
	}
	slices.Sort(runs)
	b.ReportMetric(float64(runs[len(runs)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(runs[len(runs)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkApplyOwner_50Rules is BenchmarkApply_50Rules for an owner
// filter (qemu's: chains of one uid in the shared OwnerTable) beside 100
// other uids' filters, each holding the pool policy egress.Default.
func BenchmarkApplyOwner_50Rules(b *testing.B) {
	n := startTestNet(b)
	nsfd, err := unix.Open("/run/netns/"+n.sbx, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(nsfd)
	for u := range 100 {
		f, err := OpenOwner(nsfd, uint32(61000+u))
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Prepare(Options{Pool: egress.Default()}); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	f, err := OpenOwner(nsfd, 60999)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	p := fiftyRules(b)
	var runs []time.Duration
	for b.Loop() {
		b.StopTimer()
		if err := f.Prepare(Options{Pool: egress.Default()}); err != nil {
			b.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		b.StartTimer()
		t0 := time.Now()
		if err := f.Apply(p); err != nil {
			b.Fatal(err)
		}
		runs = append(runs, time.Since(t0))
	}
	slices.Sort(runs)
	b.ReportMetric(float64(runs[len(runs)*99/100].Microseconds()), "p99-µs")
}
