package fleetview

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
)

// The fleet of the goals: 200 nodes × 5,000 sandboxes.
const (
	benchNodes   = 200
	benchPerNode = 5000
)

func benchSandbox(node, i int) nodeapi.Sandbox {
	return nodeapi.Sandbox{
		ID: fmt.Sprintf("sb_%06x%010x", node, i), ClaimRef: fmt.Sprintf("team-%d/sb-%d-%d", i%50, node, i),
		Template: "ghcr.io/cocoonstack/sandbox/rt:24.04", AgentAddr: fmt.Sprintf("10.%d.%d.%d:49983", node, i/250, i%250),
		Deadline: t0.Add(time.Hour), ClaimedAt: t0,
	}
}

func nodeName(i int) string { return fmt.Sprintf("node-%03d", i) }

// benchFleet returns the snapshots of a synthetic fleet (the stream's
// decoded form, as a subscriber holds it).
func benchFleet(nodes, per int) []nodeapi.WatchEvent {
	out := make([]nodeapi.WatchEvent, nodes)
	for n := 0; n < nodes; n++ {
		sbs := make([]nodeapi.Sandbox, per)
		for i := range sbs {
			sbs[i] = benchSandbox(n, i)
		}
		out[n] = nodeapi.WatchEvent{Type: nodeapi.WatchSnapshot, Epoch: "e", Rev: 1,
			Snapshot: &nodeapi.WatchState{Sandboxes: sbs, Pools: []nodeapi.PoolInfo{{Template: "ghcr.io/cocoonstack/sandbox/rt:24.04", Net: "none", Size: "small", Warm: 10, Target: 10}}}}
	}
	return out
}

func loadStore(tb testing.TB, s *Store, snaps []nodeapi.WatchEvent) {
	for n := range snaps {
		inv := &inventory.NodeInventory{Node: nodeName(n), Address: fmt.Sprintf("10.0.%d.1:7070", n)}
		s.SetPublished(inv, t0)
		if err := s.Apply(nodeName(n), snaps[n], t0); err != nil {
			tb.Fatal(err)
		}
	}
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkStore_Fleet200x5k reports the store's heap per sandbox at
// 200 × 5,000: "B/sandbox" is the store's structure, without the id and
// name strings it shares with the decoded records; "B/sandbox-total"
// is everything the store keeps alive.
func BenchmarkStore_Fleet200x5k(b *testing.B) {
	var overhead, total float64
	for b.Loop() {
		b.StopTimer()
		h0 := heap()
		snaps := benchFleet(benchNodes, benchPerNode)
		// The strings the decoded records hold; the Sandbox structs
		// themselves are dropped by the subscriber after Apply.
		h1 := heap()
		s := NewStore(0)
		b.StartTimer()
		loadStore(b, s, snaps)
		b.StopTimer()
		for i := range snaps {
			snaps[i].Snapshot.Sandboxes = nil // the decoded structs go; their strings stay in the store
		}
		h2 := heap()
		n := float64(benchNodes * benchPerNode)
		strBytes := 0
		for nd := 0; nd < benchNodes; nd++ {
			for i := 0; i < benchPerNode; i++ {
				x := benchSandbox(nd, i)
				// The strings the store keeps: id and name (= claim ref);
				// an IPv4 agent address is packed, the template interned.
				strBytes += len(x.ID) + len(x.ClaimRef) + 8 // + size-class slack
			}
		}
		_ = h1
		total = float64(h2-h0) / n
		overhead = total - float64(strBytes)/n
		runtime.KeepAlive(s)
		runtime.KeepAlive(snaps)
		b.StartTimer()
	}
	b.ReportMetric(overhead, "B/sandbox")
	b.ReportMetric(total, "B/sandbox-total")
}

// benchStore is a loaded 200 × 5k store shared by the benchmarks below.
var (
	benchOnce  sync.Once
	benchS     *Store
	benchSnaps []nodeapi.WatchEvent
)

func loadedStore(b *testing.B) *Store {
	benchOnce.Do(func() {
		benchSnaps = benchFleet(benchNodes, benchPerNode)
		benchS = NewStore(0)
		loadStore(b, benchS, benchSnaps)
	})
	return benchS
}

// churn applies claim/release pairs round-robin over the nodes: op i is a
// PUT (claim) of a new sandbox or the DELETE (release) of the previous one.
type churn struct {
	s    *Store
	revs []uint64
	i    int
}

func newChurn(s *Store) *churn {
	c := &churn{s: s, revs: make([]uint64, benchNodes)}
	for n := range c.revs {
		c.revs[n] = s.Position(nodeName(n)).Rev
	}
	return c
}

func (c *churn) step(tb testing.TB) {
	n := c.i % benchNodes
	k := c.i / benchNodes
	sb := benchSandbox(n, benchPerNode+k/2)
	typ := nodeapi.WatchPut
	if k%2 == 1 {
		typ = nodeapi.WatchDelete
	}
	c.revs[n]++
	if err := c.s.Apply(nodeName(n), nodeapi.WatchEvent{Type: typ, Epoch: "e", Rev: c.revs[n], Sandbox: &sb}, t0); err != nil {
		tb.Fatal(err)
	}
	c.i++
}

// BenchmarkStore_ApplyOneChange: one claim or release applied to the
// 200 × 5k view (O(1): no node re-hash, no rebuild).
func BenchmarkStore_ApplyOneChange(b *testing.B) {
	s := loadedStore(b)
	c := newChurn(s)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		c.step(b)
	}
}

// BenchmarkStore_NodeJoinLeave: a 5,000-sandbox node leaves and joins
// again (published object, then its stream's SNAPSHOT) in the 200-node view.
func BenchmarkStore_NodeJoinLeave(b *testing.B) {
	s := loadedStore(b)
	name := nodeName(7)
	inv := &inventory.NodeInventory{Node: name, Address: "10.0.7.1:7070"}
	snap := benchFleet(8, benchPerNode)[7]
	b.ReportAllocs()
	for b.Loop() {
		s.RemoveNode(name)
		s.SetPublished(inv, t0)
		if err := s.Apply(name, snap, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStore_ResyncOneNode: a reconnect that needs a SNAPSHOT (the
// node's ring moved on): decoding the 5,000-sandbox line and applying it
// (nothing changed, so no Changes).
func BenchmarkStore_ResyncOneNode(b *testing.B) {
	s := loadedStore(b)
	name := nodeName(9)
	snap := benchFleet(10, benchPerNode)[9]
	line, err := json.Marshal(snap)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var ev nodeapi.WatchEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			b.Fatal(err)
		}
		if err := s.Apply(name, ev, t0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(line)), "B/snapshot")
}

// BenchmarkStore_Lookup: the fleet's single-sandbox lookups against the
// 200 × 5k store, by name and by claim id, as of now (no rebuilt copy).
func BenchmarkStore_Lookup(b *testing.B) {
	s := loadedStore(b)
	// The keys are made before the clock starts: a lookup's own cost only.
	const keys = 4096
	refs, ids := make([]string, keys), make([]string, keys)
	for k := range keys {
		i := k * 7919
		x := benchSandbox(i%benchNodes, i%benchPerNode)
		refs[k], ids[k] = x.ClaimRef, x.ID
	}
	for _, by := range []struct {
		name string
		find func(i int) bool
	}{
		{"ByName", func(i int) bool {
			_, ok := s.Current(refs[i%keys])
			return ok
		}},
		{"ByID", func(i int) bool {
			_, ok := s.CurrentByID(ids[i%keys])
			return ok
		}},
	} {
		b.Run(by.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if !by.find(i) {
					b.Fatalf("sandbox %d not found", i)
				}
				i++
			}
		})
	}
}

// BenchmarkLive_NodesView: the router's View (addresses and warm pools of
// 200 nodes) after a POOL event — what every claim routes on.
func BenchmarkLive_NodesView(b *testing.B) {
	s := loadedStore(b)
	l := &Live{store: s}
	v0 := inventory.NewView(nil)
	l.cur.Store(&viewCache{base: v0, v: v0, nodeGen: ^uint64(0), setGen: ^uint64(0)})
	c := newChurn(s)
	warm := int32(0)
	b.ReportAllocs()
	for b.Loop() {
		n := c.i % benchNodes
		c.revs[n]++
		c.i++
		warm = (warm + 1) % 10
		if err := s.Apply(nodeName(n), nodeapi.WatchEvent{Type: nodeapi.WatchPool, Epoch: "e", Rev: c.revs[n],
			Pool: &nodeapi.PoolInfo{Template: "ghcr.io/cocoonstack/sandbox/rt:24.04", Net: "none", Size: "small", Warm: warm, Target: 10}}, t0); err != nil {
			b.Fatal(err)
		}
		if len(l.View().Nodes()) != benchNodes {
			b.Fatal("nodes")
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStore_Churn1000PerSecond runs the goal's load for 2 s per op —
// 1,000 changes/s against 200 × 5k, with 10 watchers (one per namespace
// of 50 → a filter each) following every change — and reports the CPU it
// took (cores) and the change → watcher latency (p50, p99).
func BenchmarkStore_Churn1000PerSecond(b *testing.B) {
	s := loadedStore(b)
	c := newChurn(s)
	const rate, watchers = 1000, 10
	var cores, p50, p99 float64
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		var mu sync.Mutex
		var lats []time.Duration
		applied := make(map[uint64]time.Time, 2*rate)
		var wg sync.WaitGroup
		for w := 0; w < watchers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ns := fmt.Sprintf("team-%d/", w)
				cur := s.Rev()
				for {
					cs, next, wake, err := s.Since(cur, 1024)
					if err != nil {
						panic(err)
					}
					now := time.Now()
					for _, ch := range cs {
						if w == 0 {
							mu.Lock()
							if at, ok := applied[ch.Rev]; ok {
								lats = append(lats, now.Sub(at))
							}
							mu.Unlock()
						}
						_ = len(ch.Item.Entry.Name) >= len(ns) && ch.Item.Entry.Name[:len(ns)] == ns // the filter
					}
					cur = next
					select {
					case <-ctx.Done():
						return
					case <-wake:
					}
				}
			}()
		}
		start, cpu0 := time.Now(), cpuTime()
		tick := time.NewTicker(time.Second / rate)
		for i := 0; i < 2*rate; i++ {
			<-tick.C
			mu.Lock()
			c.step(b)
			applied[s.Rev()] = time.Now()
			mu.Unlock()
		}
		tick.Stop()
		wall, cpu := time.Since(start), cpuTime()-cpu0
		time.Sleep(10 * time.Millisecond)
		cancel()
		s.mu.Lock()
		s.publishChanges(s.seq - 1) // wake the watchers to exit
		s.mu.Unlock()
		wg.Wait()
		cores = float64(cpu) / float64(wall)
		sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
		if len(lats) > 0 {
			p50 = float64(lats[len(lats)/2].Microseconds())
			p99 = float64(lats[len(lats)*99/100].Microseconds())
		}
	}
	b.ReportMetric(cores, "cores")
	b.ReportMetric(p50, "µs-p50")
	b.ReportMetric(p99, "µs-p99")
}

// BenchmarkLive_ClaimToWatcher measures change → visible to a watcher of
// the live view, end to end: a claim on a real node (HTTP), its change
// stream, the Store, a waiting Since. "at-rest": nothing else happens;
// "under-load": the view also holds 200 × 5k synthetic sandboxes churning
// at 1,000 changes/s, and a second real node claims and releases as fast
// as it can. ms-p50/ms-p99 are from the claim's request to the watcher;
// the claim's own round trip is part of it.
func BenchmarkLive_ClaimToWatcher(b *testing.B) {
	for _, load := range []bool{false, true} {
		name := "at-rest"
		if load {
			name = "under-load"
		}
		b.Run(name, func(b *testing.B) {
			a, busy := startLiveNode(b, "n1"), startLiveNode(b, "n2")
			a.fill(b, 64)
			busy.fill(b, 64)
			l := runLive(b, inventory.NewStatic(a.n.Inventory(), busy.n.Inventory()))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if load {
				s := l.Store()
				for n := range benchSnaps0() {
					s.SetPublished(&inventory.NodeInventory{Node: nodeName(n), Address: "x:1"}, t0)
					_ = s.Apply(nodeName(n), benchSnaps0()[n], t0)
				}
				c := newChurn(s)
				go func() {
					tick := time.NewTicker(time.Millisecond)
					defer tick.Stop()
					for ctx.Err() == nil {
						<-tick.C
						c.step(b)
					}
				}()
				go func() {
					for i := 0; ctx.Err() == nil; i++ {
						sb, err := busy.client.Claim(ctx, nodeapi.ClaimRequest{Template: "img", ClaimRef: fmt.Sprintf("load/%d", i)})
						if err == nil {
							_ = busy.client.Release(ctx, sb.ID)
						}
					}
				}()
			}
			seen := make(chan string, 1<<16)
			go func() {
				cur := l.Rev()
				for ctx.Err() == nil {
					cs, next, wake, err := l.Since(cur, 0)
					if err != nil {
						cur = l.Rev()
						continue
					}
					for _, c := range cs {
						if c.Item.Node.Name == "n1" {
							seen <- string(c.Type) + " " + c.Item.Entry.Name
						}
					}
					cur = next
					select {
					case <-ctx.Done():
					case <-wake:
					}
				}
			}()
			var lats []time.Duration
			i := 0
			for b.Loop() {
				ref := fmt.Sprintf("ns/b-%d", i)
				i++
				start := time.Now()
				sb, err := a.client.Claim(ctx, nodeapi.ClaimRequest{Template: "img", ClaimRef: ref})
				if err != nil {
					b.Fatal(err)
				}
				for ev := range seen {
					if ev == "ADDED "+ref {
						break
					}
				}
				lats = append(lats, time.Since(start))
				if err := a.client.Release(ctx, sb.ID); err != nil {
					b.Fatal(err)
				}
				for ev := range seen {
					if ev == "DELETED "+ref {
						break
					}
				}
			}
			sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
			b.ReportMetric(float64(lats[len(lats)/2].Microseconds())/1000, "ms-p50")
			b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds())/1000, "ms-p99")
		})
	}
}

var (
	snaps0Once sync.Once
	snaps0     []nodeapi.WatchEvent
)

func benchSnaps0() []nodeapi.WatchEvent {
	snaps0Once.Do(func() { snaps0 = benchFleet(benchNodes, benchPerNode) })
	return snaps0
}
