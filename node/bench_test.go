package node

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sort"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/vmm"
)

// benchNode is a node without background loops whose pool holds n warm
// (fake) VMs, so every claim in the benchmark is delivered.
func benchNode(b *testing.B, n int) *Node {
	b.Helper()
	nd, err := New(Config{Name: "bench", DataDir: b.TempDir(), Driver: newFakeDriver(), RootToken: testRoot,
		Logger: ktesting.NewLogger(b, ktesting.NewConfig())})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = nd.Close(context.Background()) })
	p := nd.tab.pool(pool.Key{Template: "img", Net: "none", Size: "small"}, true)
	p.target = int32(n)
	p.warm = make([]vmm.Handle, n)
	for i := range p.warm {
		p.warm[i] = vmm.Handle{ID: fmt.Sprintf("vm-%d", i), Addr: "127.0.0.1:9", Token: fmt.Sprintf("tok-%d", i)}
	}
	return nd
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}

// BenchmarkClaim_InProcess is the claim path without HTTP: table transfer
// plus the persisted record.
func BenchmarkClaim_InProcess(b *testing.B) {
	nd := benchNode(b, b.N)
	in := claimInput{key: pool.Key{Template: "img", Net: "none", Size: "small"}, ref: "ns/bench"}
	lat := make([]time.Duration, b.N)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := nd.claim(ctx, in); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}

// BenchmarkClaim_HTTP is a claim over loopback HTTP with keep-alive.
func BenchmarkClaim_HTTP(b *testing.B) {
	nd := benchNode(b, b.N)
	srv := httptest.NewServer(nd.Handler())
	defer srv.Close()
	c := NewClient(srv.URL, testRoot)
	ctx := context.Background()
	req := ClaimRequest{Template: "img", ClaimRef: "ns/bench"}
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := c.Claim(ctx, req); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}

// BenchmarkTable_TakeInsert is the O(1) in-memory transfer alone.
func BenchmarkTable_TakeInsert(b *testing.B) {
	tab := newTable()
	k := pool.Key{Template: "img", Net: "none", Size: "small"}
	p := tab.pool(k, true)
	p.warm = make([]vmm.Handle, b.N)
	for i := range p.warm {
		p.warm[i] = vmm.Handle{ID: fmt.Sprintf("vm-%d", i), Token: fmt.Sprintf("tok-%d", i)}
	}
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = fmt.Sprintf("sb_%016x", i)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h, _ := tab.take(k)
		tab.insert(&sandbox{rec: record{ID: ids[i], Key: k, Handle: h, ClaimRef: "ns/x"}})
	}
}
