// Package suite holds the Hearth benchmarks that bench/hearthbench runs.
// Each benchmark builds the real parts it measures in process (nodes,
// routing, the fleet view, and the aggregated API when it is available),
// drives them, and prints one or more Markdown tables. Every figure in
// docs/PERFORMANCE.md comes from one of these functions.
//
// It owns the temporary directories, listeners and processes it starts and
// stops all of them before returning.
package suite

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hearthvm/hearth/bench/internal/stats"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/sandbox"
)

// Config is shared by every benchmark.
type Config struct {
	// Out receives the tables.
	Out io.Writer
	// Quick shrinks every size (for tests and smoke runs).
	Quick bool
	// Concurrency levels of the latency benchmarks (default 1, 8, 32).
	Concurrency []int
	// Claims per concurrency level (default 4000; quick 200).
	Claims int
	// Log receives progress lines; nil discards them.
	Log io.Writer

	// last, set by Run, receives a benchmark's summary line, which Run
	// prints after the benchmark's wall time: its last line.
	last *strings.Builder
}

func (c *Config) defaults() {
	if len(c.Concurrency) == 0 {
		c.Concurrency = []int{1, 8, 32}
	}
	if c.Claims <= 0 {
		c.Claims = 4000
		if c.Quick {
			c.Claims = 200
		}
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

func (c *Config) logf(format string, args ...any) {
	fmt.Fprintf(c.Log, "# "+format+"\n", args...)
}

// lastf prints a benchmark's summary line: its last line under Run, else
// a line of Out.
func (c *Config) lastf(format string, args ...any) {
	if c.last != nil {
		fmt.Fprintf(c.last, format+"\n", args...)
		return
	}
	fmt.Fprintf(c.Out, format+"\n", args...)
}

// Key is the pool key every benchmark claims from.
var Key = pool.Key{Template: "ghcr.io/hearthvm/bench:1", Net: sandbox.NetNone, Size: sandbox.SizeSmall}

// load is the result of a closed-loop load run.
type load struct {
	lat    stats.Latency
	ok     int
	errs   int
	first  error
	wall   time.Duration
	cpu    time.Duration // process CPU (user+sys) during the run
	allocs uint64        // heap bytes allocated during the run
}

func (l load) rate() float64 { return stats.Rate(l.ok, l.wall) }

// run calls op total times from conc workers (closed loop) and records the
// latency of every successful call. op gets the call's index.
func run(ctx context.Context, total, conc int, op func(ctx context.Context, i int) error) load {
	lats := make([]time.Duration, total)
	okv := make([]bool, total)
	var next atomic.Int64
	var errs atomic.Int64
	var firstMu sync.Mutex
	var first error
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := processCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= total || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				err := op(ctx, i)
				lats[i] = time.Since(t0)
				if err != nil {
					errs.Add(1)
					firstMu.Lock()
					if first == nil {
						first = err
					}
					firstMu.Unlock()
					continue
				}
				okv[i] = true
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	cpu := processCPU() - cpu0
	runtime.ReadMemStats(&ms1)
	good := lats[:0:0]
	for i, ok := range okv {
		if ok {
			good = append(good, lats[i])
		}
	}
	return load{lat: stats.Summarize(good), ok: len(good), errs: int(errs.Load()), first: first, wall: wall, cpu: cpu,
		allocs: ms1.TotalAlloc - ms0.TotalAlloc}
}

// opCost is the cost of one call of an operation.
type opCost struct {
	n           int
	wall, cpu   time.Duration // per op
	bytes, objs float64       // heap bytes and objects allocated per op
}

// measure calls op in doubling batches until the process has spent at
// least minCPU of CPU time on it (and at least 3 calls), then reports the
// per-call wall time, process CPU time (user+sys, all threads: it includes
// GC work and excludes time spent waiting for a CPU on a busy machine) and
// allocations.
func measure(op func(), minCPU time.Duration) opCost {
	op() // warm up
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	cpu0, t0 := processCPU(), time.Now()
	n := 0
	for batch := 1; ; batch *= 2 {
		for i := 0; i < batch; i++ {
			op()
		}
		n += batch
		if n >= 3 && processCPU()-cpu0 >= minCPU {
			break
		}
	}
	wall, cpu := time.Since(t0), processCPU()-cpu0
	runtime.ReadMemStats(&ms1)
	d := time.Duration(n)
	return opCost{n: n, wall: wall / d, cpu: cpu / d,
		bytes: float64(ms1.TotalAlloc-ms0.TotalAlloc) / float64(n), objs: float64(ms1.Mallocs-ms0.Mallocs) / float64(n)}
}
