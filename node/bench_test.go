package node

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"k8s.io/klog/v2/ktesting"

	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/vmm"
)

// benchNode is a node without background loops whose pool holds n warm
// (fake) VMs, so every claim in the benchmark is delivered.
func benchNode(b *testing.B, n int) *Node { return benchNodeSync(b, n, false) }

// benchNodeSync is benchNode with the store's fsync off (noSync) or on.
func benchNodeSync(b *testing.B, n int, noSync bool) *Node {
	b.Helper()
	nd, err := New(Config{Name: "bench", DataDir: b.TempDir(), Driver: newFakeDriver(), RootToken: testRoot,
		Logger: ktesting.NewLogger(b, ktesting.NewConfig()), StoreNoSync: noSync})
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

// benchClaims returns n claims of the bench pool, each under its own claim
// ref (a ref names one sandbox).
func benchClaims(n int) []claimInput {
	ins := make([]claimInput, n)
	for i := range ins {
		ins[i] = claimInput{key: pool.Key{Template: "img", Net: "none", Size: "small"}, ref: fmt.Sprintf("ns/bench-%d", i)}
	}
	return ins
}

// BenchmarkClaim_InProcess is the claim path without HTTP: table transfer
// plus the persisted record.
func BenchmarkClaim_InProcess(b *testing.B) {
	nd := benchNode(b, b.N)
	ins := benchClaims(b.N)
	lat := make([]time.Duration, b.N)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := nd.claim(ctx, ins[i]); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}

// BenchmarkClaim_Durability is the cost of the fsynced claim table in one
// run: claims with the store's fsync off (the old NoSync store) and on
// (group commit), by one caller and by 32 concurrent ones. It reports
// claims/s and the p50/p99 latency of one claim.
func BenchmarkClaim_Durability(b *testing.B) {
	for _, fsync := range []bool{false, true} {
		for _, conc := range []int{1, 32} {
			b.Run(fmt.Sprintf("fsync=%v/callers=%d", fsync, conc), func(b *testing.B) {
				nd := benchNodeSync(b, b.N, !fsync)
				ins := benchClaims(b.N)
				lat := make([]time.Duration, b.N)
				var next atomic.Int64
				var wg sync.WaitGroup
				ctx := context.Background()
				b.ResetTimer()
				start := time.Now()
				for range conc {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							i := next.Add(1) - 1
							if i >= int64(b.N) {
								return
							}
							t0 := time.Now()
							if _, err := nd.claim(ctx, ins[i]); err != nil {
								b.Error(err)
								return
							}
							lat[i] = time.Since(t0)
						}
					}()
				}
				wg.Wait()
				el := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(b.N)/el.Seconds(), "claims/s")
				reportPercentiles(b, lat)
			})
		}
	}
}

// BenchmarkClaim_HTTP is a claim over loopback HTTP with keep-alive.
func BenchmarkClaim_HTTP(b *testing.B) {
	nd := benchNode(b, b.N)
	srv := httptest.NewServer(nd.Handler())
	defer srv.Close()
	c := nodeapi.NewClient(srv.URL, testRoot)
	ctx := context.Background()
	ins := benchClaims(b.N)
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := c.Claim(ctx, nodeapi.ClaimRequest{Template: "img", ClaimRef: ins[i].ref}); err != nil {
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

// BenchmarkStore_GroupCommitVsBolt compares ways to make one claim
// record durable, fsync on, by 1 and by 32 concurrent writers (writes/s,
// p50/p99 of one write): the store's journal with its leader-follower
// group commit (one fdatasync per group; checkpoints included), one bbolt
// transaction per write (two fdatasyncs each; the store's group commit
// before the journal shared them the same way), and bbolt's own DB.Batch
// (default MaxBatchDelay 10 ms, MaxBatchSize 1000).
func BenchmarkStore_GroupCommitVsBolt(b *testing.B) {
	val := make([]byte, 600)
	for _, how := range []string{"journal", "bolt-update", "bolt-batch"} {
		for _, conc := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/writers=%d", how, conc), func(b *testing.B) {
				st, err := openStore(b.TempDir()+"/node.db", false)
				if err != nil {
					b.Fatal(err)
				}
				defer st.close()
				put := func(i int64) error {
					key := []byte(fmt.Sprintf("sb_%016x", i))
					fn := func(tx *bolt.Tx) error { return tx.Bucket(bucketSandboxes).Put(key, val) }
					switch how {
					case "journal":
						return st.commit(journalOp{key: key, val: val})
					case "bolt-update":
						return st.db.Update(fn)
					}
					return st.db.Batch(fn)
				}
				lat := make([]time.Duration, b.N)
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				start := time.Now()
				for range conc {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							i := next.Add(1) - 1
							if i >= int64(b.N) {
								return
							}
							t0 := time.Now()
							if err := put(i); err != nil {
								b.Error(err)
								return
							}
							lat[i] = time.Since(t0)
						}
					}()
				}
				wg.Wait()
				el := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(b.N)/el.Seconds(), "writes/s")
				reportPercentiles(b, lat)
			})
		}
	}
}
