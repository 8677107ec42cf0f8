package stats

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestPercentile_NearestRank(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, ms(i))
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, ms(50)}, {95, ms(95)}, {99, ms(99)}, {100, ms(100)}, {0.1, ms(1)}} {
		if got := Percentile(s, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("empty p50 = %v", got)
	}
}

func TestSummarize_SortsAndReports(t *testing.T) {
	l := Summarize([]time.Duration{3, 1, 2, 4})
	want := Latency{N: 4, P50: 2, P95: 4, P99: 4, Max: 4, Mean: 2}
	if l != want {
		t.Errorf("Summarize = %+v, want %+v", l, want)
	}
	if (Summarize(nil) != Latency{}) {
		t.Error("empty summary not zero")
	}
}

func TestLinearFit(t *testing.T) {
	f, err := LinearFit([]float64{0, 1, 2, 3}, []float64{1, 3, 5, 7})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(f.A-1) > 1e-9 || math.Abs(f.B-2) > 1e-9 || math.Abs(f.R2-1) > 1e-9 {
		t.Errorf("fit = %+v, want A=1 B=2 R2=1", f)
	}
	for _, tc := range []struct{ xs, ys []float64 }{
		{[]float64{1}, []float64{1}},
		{[]float64{2, 2}, []float64{1, 3}},
		{[]float64{1, 2}, []float64{1}},
	} {
		if _, err := LinearFit(tc.xs, tc.ys); err == nil {
			t.Errorf("LinearFit(%v, %v) accepted", tc.xs, tc.ys)
		}
	}
}

func TestFitFillLaw_RecoversLaw(t *testing.T) {
	// T = 2 s + S/(N·250/s)
	law := FillLaw{T0: 2 * time.Second, R: 250}
	S := []int{500, 1000, 2000, 2000}
	N := []int{1, 1, 2, 1}
	var T []time.Duration
	for i := range S {
		T = append(T, law.Predict(S[i], N[i]))
	}
	got, err := FitFillLaw(S, N, T)
	if err != nil {
		t.Fatal(err)
	}
	if d := got.T0 - law.T0; d > time.Millisecond || d < -time.Millisecond {
		t.Errorf("T0 = %v, want %v", got.T0, law.T0)
	}
	if math.Abs(got.R-250) > 0.01 {
		t.Errorf("R = %v, want 250", got.R)
	}
	if _, err := FitFillLaw([]int{1, 2}, []int{1, 1}, []time.Duration{2 * time.Second, time.Second}); err == nil {
		t.Error("a shrinking fill time was accepted")
	}
	if _, err := FitFillLaw([]int{1, 2}, []int{0, 1}, []time.Duration{1, 2}); err == nil {
		t.Error("zero nodes accepted")
	}
}

func TestTable_PrintsMarkdown(t *testing.T) {
	tb := Table{Title: "T", Header: []string{"a", "bb"}}
	tb.Add("x|y", 12)
	tb.Note("n=%d", 1)
	var b strings.Builder
	if err := tb.Print(&b); err != nil {
		t.Fatal(err)
	}
	want := "### T\n\n| a   | bb  |\n| --- | --- |\n| x/y | 12  |\n\nn=1\n\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}
