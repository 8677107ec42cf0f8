// Package stats turns benchmark samples into the figures the bench tables
// print: latency percentiles and rates, least-squares fits, and aligned
// text tables. It is pure (no I/O beyond the io.Writer a table is printed
// to) and owns nothing else.
package stats

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Latency summarizes a set of latency samples.
type Latency struct {
	N                  int
	P50, P95, P99, Max time.Duration
	Mean               time.Duration
}

// Summarize sorts samples (in place) and returns their nearest-rank
// percentiles. An empty slice gives the zero Latency.
func Summarize(samples []time.Duration) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	return Latency{
		N:    len(samples),
		P50:  Percentile(samples, 50),
		P95:  Percentile(samples, 95),
		P99:  Percentile(samples, 99),
		Max:  samples[len(samples)-1],
		Mean: sum / time.Duration(len(samples)),
	}
}

// Percentile returns the nearest-rank p-th percentile (0 < p ≤ 100) of
// sorted samples: the smallest sample with at least p % of the samples at
// or below it.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	if rank < 1 {
		rank = 1
	}
	if rank > len(sorted) {
		rank = len(sorted)
	}
	return sorted[rank-1]
}

// Rate is n events over d, per second (0 when d is not positive).
func Rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Fit is a least-squares line y = A + B·x.
type Fit struct {
	A, B float64
	// R2 is the coefficient of determination (1 for a perfect fit; 0 when
	// y does not vary).
	R2 float64
}

// LinearFit fits y = A + B·x to the points by least squares. It needs at
// least two distinct x values.
func LinearFit(xs, ys []float64) (Fit, error) {
	if len(xs) != len(ys) {
		return Fit{}, fmt.Errorf("stats: %d x values but %d y values", len(xs), len(ys))
	}
	n := float64(len(xs))
	if len(xs) < 2 {
		return Fit{}, fmt.Errorf("stats: a line needs at least 2 points, have %d", len(xs))
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	den := n*sxx - sx*sx
	if math.Abs(den) < 1e-12*math.Max(1, n*sxx) {
		return Fit{}, fmt.Errorf("stats: a line needs at least 2 distinct x values")
	}
	b := (n*sxy - sx*sy) / den
	a := (sy - b*sx) / n
	mean := sy / n
	var ssTot, ssRes float64
	for i := range xs {
		d := ys[i] - mean
		ssTot += d * d
		r := ys[i] - (a + b*xs[i])
		ssRes += r * r
	}
	r2 := 0.0
	if ssTot > 0 {
		r2 = 1 - ssRes/ssTot
	}
	return Fit{A: a, B: b, R2: r2}, nil
}

// FillLaw is the fleet fill scaling law T(S, N) = T0 + S/(N·R): S warm
// microVMs over N nodes take T0 of fixed cost plus S/N VMs at R VMs/s per node.
type FillLaw struct {
	T0 time.Duration
	// R is the per-node fill rate in VMs/s.
	R  float64
	R2 float64
}

// FitFillLaw fits the law to observed fills: sandboxes[i] VMs over
// nodes[i] nodes took took[i].
func FitFillLaw(sandboxes, nodes []int, took []time.Duration) (FillLaw, error) {
	if len(sandboxes) != len(nodes) || len(nodes) != len(took) {
		return FillLaw{}, fmt.Errorf("stats: mismatched fill observations")
	}
	xs := make([]float64, len(took))
	ys := make([]float64, len(took))
	for i := range took {
		if nodes[i] <= 0 {
			return FillLaw{}, fmt.Errorf("stats: observation %d has %d nodes", i, nodes[i])
		}
		xs[i] = float64(sandboxes[i]) / float64(nodes[i])
		ys[i] = took[i].Seconds()
	}
	f, err := LinearFit(xs, ys)
	if err != nil {
		return FillLaw{}, err
	}
	if f.B <= 0 {
		return FillLaw{}, fmt.Errorf("stats: fill time does not grow with VMs per node (slope %.3g s/VM)", f.B)
	}
	return FillLaw{T0: time.Duration(f.A * float64(time.Second)), R: 1 / f.B, R2: f.R2}, nil
}

// Predict is the law's fill time for s VMs over n nodes.
func (l FillLaw) Predict(s, n int) time.Duration {
	return l.T0 + time.Duration(float64(s)/(float64(n)*l.R)*float64(time.Second))
}

// Table is a titled text table printed with aligned columns.
type Table struct {
	Title  string
	Header []string
	Rows   [][]string
	// Notes are printed under the table, one a line.
	Notes []string
}

// Add appends a row; values are formatted with %v.
func (t *Table) Add(cells ...any) {
	row := make([]string, len(cells))
	for i, c := range cells {
		row[i] = fmt.Sprint(c)
	}
	t.Rows = append(t.Rows, row)
}

// Note appends a note line.
func (t *Table) Note(format string, args ...any) {
	t.Notes = append(t.Notes, fmt.Sprintf(format, args...))
}

// Print writes the table as Markdown (a pipe table), so the output can be
// pasted into docs as is and still reads aligned in a terminal.
func (t *Table) Print(w io.Writer) error {
	var b strings.Builder
	if t.Title != "" {
		fmt.Fprintf(&b, "### %s\n\n", t.Title)
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', 0)
	line := func(cells []string) {
		for _, c := range cells {
			fmt.Fprintf(tw, "| %s\t", strings.ReplaceAll(c, "|", "/"))
		}
		fmt.Fprintln(tw, "|")
	}
	line(t.Header)
	sep := make([]string, len(t.Header))
	for i := range sep {
		sep[i] = "---"
	}
	line(sep)
	for _, r := range t.Rows {
		line(r)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range t.Notes {
		fmt.Fprintf(&b, "\n%s", n)
	}
	b.WriteString("\n\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// Ms renders d in milliseconds with three decimals.
func Ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

// Bytes renders n bytes with a binary unit.
func Bytes(n float64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", n/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", n/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", n/(1<<10))
	}
	return fmt.Sprintf("%.0f B", n)
}
