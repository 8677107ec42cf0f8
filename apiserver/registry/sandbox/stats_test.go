package sandboxstore

import (
	"math"
	"testing"
	"time"

	"github.com/hearthvm/hearth/nodeapi"
)

// TestStatsOf_UnmeasuredIsAbsentNeverZero: what the node could not
// measure (mem_used_measured false, a disk of 0, no or a nonsense CPU
// time) is absent from SandboxStats, not a 0; negative figures are not
// passed on.
func TestStatsOf_UnmeasuredIsAbsentNeverZero(t *testing.T) {
	at := time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)
	now := at.Add(time.Minute)
	for _, tc := range []struct {
		name                    string
		in                      nodeapi.Stats
		cpuNS, memUsed, dLim, d *int64
		memLimit                int64
		when                    time.Time
	}{
		{name: "measured", in: nodeapi.Stats{CPUCount: 2, CPUSeconds: 1.5, MemTotalBytes: 512 << 20, MemUsedBytes: 100 << 20, MemUsedMeasured: true,
			DiskTotalBytes: 1 << 30, DiskUsedBytes: 3 << 20, MeasuredAt: at},
			cpuNS: i64p(int64(1_500_000_000)), memUsed: i64p(int64(100 << 20)), memLimit: 512 << 20, dLim: i64p(int64(1 << 30)), d: i64p(int64(3 << 20)), when: at},
		{name: "paused: memory use not measured", in: nodeapi.Stats{CPUCount: 2, MemTotalBytes: 512 << 20, MemUsedBytes: 7, Paused: true, MeasuredAt: at},
			memLimit: 512 << 20, when: at},
		{name: "no disk, no time", in: nodeapi.Stats{MemTotalBytes: -1, DiskUsedBytes: 5},
			when: now},
		{name: "nonsense cpu time", in: nodeapi.Stats{CPUSeconds: math.NaN()}, when: now},
		{name: "negative cpu time", in: nodeapi.Stats{CPUSeconds: -3}, when: now},
		{name: "overflowing cpu time", in: nodeapi.Stats{CPUSeconds: math.Inf(1)}, when: now},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := statsOf("demo", "default", tc.in, now)
			if got.Name != "demo" || got.Namespace != "default" || got.Kind != "SandboxStats" || !got.Timestamp.Time.Equal(tc.when) ||
				got.Paused != tc.in.Paused || got.MemoryLimitBytes != tc.memLimit ||
				!eqPtr(got.CPUUsageCoreNanoSeconds, tc.cpuNS) || !eqPtr(got.MemoryUsedBytes, tc.memUsed) ||
				!eqPtr(got.DiskLimitBytes, tc.dLim) || !eqPtr(got.DiskUsedBytes, tc.d) {
				t.Fatalf("statsOf(%+v) = %+v", tc.in, got)
			}
		})
	}
}

func eqPtr(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
func i64p(v int64) *int64    { return &v }

// TestStatsOf_CPURateIsNanoCoresOverItsWindow: the node's CPU rate is
// kubelet's usageNanoCores with the window it is averaged over; a rate
// the node did not answer, or a nonsense one, is absent with its window.
func TestStatsOf_CPURateIsNanoCoresOverItsWindow(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name   string
		rate   *float64
		window float64
		nano   *int64
		want   time.Duration
	}{
		{"a quarter core over 2.5 s", f(0.25), 2.5, i64p(250_000_000), 2500 * time.Millisecond},
		{"idle", f(0), 10, i64p(0), 10 * time.Second},
		{"no rate", nil, 0, nil, 0},
		{"no window", f(1), 0, nil, 0},
		{"negative", f(-1), 2, nil, 0},
		{"nonsense", f(math.NaN()), 2, nil, 0},
		{"overflowing", f(math.Inf(1)), 2, nil, 0},
		{"nonsense window", f(1), math.NaN(), nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := statsOf("demo", "default", nodeapi.Stats{CPUSeconds: 3, CPURateCores: tc.rate, CPURateWindowSeconds: tc.window}, time.Now())
			if !eqPtr(got.CPUUsageNanoCores, tc.nano) || (got.Window == nil) != (tc.nano == nil) || (got.Window != nil && got.Window.Duration != tc.want) {
				t.Fatalf("rate %v over %v s: nanocores %v, window %v; want %v over %v", tc.rate, tc.window, got.CPUUsageNanoCores, got.Window, tc.nano, tc.want)
			}
		})
	}
}
