package node

import (
	"math"
	"testing"
	"time"
)

func TestPlanCPURate(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 20, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	s := func(vm string, cpu float64, d time.Duration) cpuSample {
		return cpuSample{VM: vm, CPUSeconds: cpu, At: at(d)}
	}
	for _, tc := range []struct {
		name       string
		prev       []cpuSample
		cur        cpuSample
		wantOK     bool
		wantCores  float64
		wantWindow time.Duration
		wantNext   []cpuSample
	}{
		{name: "first measurement: no rate, kept",
			cur: s("a", 10, 0), wantNext: []cpuSample{s("a", 10, 0)}},
		{name: "a quarter core over 2 s",
			prev: []cpuSample{s("a", 10, 0)}, cur: s("a", 10.5, 2*time.Second),
			wantOK: true, wantCores: 0.25, wantWindow: 2 * time.Second,
			wantNext: []cpuSample{s("a", 10, 0), s("a", 10.5, 2*time.Second)}},
		{name: "two busy cores over a minute, exactly",
			prev: []cpuSample{s("a", 0, 0)}, cur: s("a", 120, time.Minute),
			wantOK: true, wantCores: 2, wantWindow: time.Minute,
			wantNext: []cpuSample{s("a", 0, 0), s("a", 120, time.Minute)}},
		{name: "too soon after the only one: no rate, not kept",
			prev: []cpuSample{s("a", 10, 0)}, cur: s("a", 10.1, 500*time.Millisecond),
			wantNext: []cpuSample{s("a", 10, 0)}},
		{name: "too soon after the newest: the older one answers",
			prev: []cpuSample{s("a", 10, 0), s("a", 11, 2*time.Second)}, cur: s("a", 11.5, 2500*time.Millisecond),
			wantOK: true, wantCores: 0.6, wantWindow: 2500 * time.Millisecond,
			wantNext: []cpuSample{s("a", 10, 0), s("a", 11, 2*time.Second)}},
		{name: "the newest old enough answers and the oldest goes",
			prev: []cpuSample{s("a", 10, 0), s("a", 11, 2*time.Second)}, cur: s("a", 13, 4*time.Second),
			wantOK: true, wantCores: 1, wantWindow: 2 * time.Second,
			wantNext: []cpuSample{s("a", 11, 2*time.Second), s("a", 13, 4*time.Second)}},
		{name: "older than a minute: no rate",
			prev: []cpuSample{s("a", 10, 0)}, cur: s("a", 20, time.Minute+time.Second),
			wantNext: []cpuSample{s("a", 20, time.Minute+time.Second)}},
		{name: "another VM (restarted): no rate",
			prev: []cpuSample{s("a", 1, 0)}, cur: s("b", 30, 5*time.Second),
			wantNext: []cpuSample{s("b", 30, 5*time.Second)}},
		{name: "less CPU time than before: no rate",
			prev: []cpuSample{s("a", 30, 0)}, cur: s("a", 2, 5*time.Second),
			wantNext: []cpuSample{s("a", 2, 5*time.Second)}},
		{name: "a sample from the future is dropped",
			prev: []cpuSample{s("a", 1, 10*time.Second)}, cur: s("a", 2, 5*time.Second),
			wantNext: []cpuSample{s("a", 2, 5*time.Second)}},
		{name: "idle: zero cores is a rate",
			prev: []cpuSample{s("a", 3, 0)}, cur: s("a", 3, 10*time.Second),
			wantOK: true, wantCores: 0, wantWindow: 10 * time.Second,
			wantNext: []cpuSample{s("a", 3, 0), s("a", 3, 10*time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cores, window, ok, next := planCPURate(tc.prev, tc.cur)
			if ok != tc.wantOK || math.Abs(cores-tc.wantCores) > 1e-9 || window != tc.wantWindow {
				t.Errorf("rate = %v cores over %v (ok %v), want %v over %v (ok %v)", cores, window, ok, tc.wantCores, tc.wantWindow, tc.wantOK)
			}
			if len(next) != len(tc.wantNext) {
				t.Fatalf("kept %v, want %v", next, tc.wantNext)
			}
			for i := range next {
				if next[i] != tc.wantNext[i] {
					t.Fatalf("kept %v, want %v", next, tc.wantNext)
				}
			}
		})
	}
}

// A sandbox measured no more for a minute is forgotten at the next
// measurement of any sandbox.
func TestCPURates_ForgetsSandboxesNotMeasuredForAMinute(t *testing.T) {
	var c cpuRates
	t0 := time.Date(2026, 12, 2, 20, 0, 0, 0, time.UTC)
	c.rate("old", cpuSample{VM: "v", CPUSeconds: 1, At: t0})
	if _, _, ok := c.rate("old", cpuSample{VM: "v", CPUSeconds: 2, At: t0.Add(2 * time.Second)}); !ok {
		t.Fatal("no rate 2 s after the first measurement")
	}
	c.rate("new", cpuSample{VM: "w", CPUSeconds: 1, At: t0.Add(2 * time.Minute)})
	if _, kept := c.samples["old"]; kept || len(c.samples) != 1 {
		t.Fatalf("samples %v: want only the new sandbox's", c.samples)
	}
}
