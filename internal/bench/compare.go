package bench

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
)

// Comparison is one operation of two runs side by side. The ratios are B/A (NaN when A's
// figure is zero or either run lacks the operation): above 1 means B did more operations
// or bytes per second, or (for the latencies) took longer.
type Comparison struct {
	Op                                     string
	A, B                                   *OpResult // nil: that run has no such operation
	OpsRatio, MiBRatio, P50Ratio, P99Ratio float64
}

// Compare pairs the operations of two reports by name: A's in its order, then those only
// B has.
func Compare(a, b *Report) []Comparison {
	var out []Comparison
	find := func(r *Report, op string) *OpResult {
		for i := range r.Results {
			if r.Results[i].Op == op {
				return &r.Results[i]
			}
		}
		return nil
	}
	for i := range a.Results {
		out = append(out, pair(a.Results[i].Op, &a.Results[i], find(b, a.Results[i].Op)))
	}
	for i := range b.Results {
		if find(a, b.Results[i].Op) == nil {
			out = append(out, pair(b.Results[i].Op, nil, &b.Results[i]))
		}
	}
	return out
}

func pair(op string, a, b *OpResult) Comparison {
	c := Comparison{Op: op, A: a, B: b, OpsRatio: math.NaN(), MiBRatio: math.NaN(), P50Ratio: math.NaN(), P99Ratio: math.NaN()}
	if a == nil || b == nil {
		return c
	}
	c.OpsRatio = ratio(b.OpsPerSec, a.OpsPerSec)
	c.MiBRatio = ratio(b.MiBPerSec, a.MiBPerSec)
	c.P50Ratio = ratio(b.Latency.P50, a.Latency.P50)
	c.P99Ratio = ratio(b.Latency.P99, a.Latency.P99)
	return c
}

func ratio(b, a float64) float64 {
	if a == 0 {
		return math.NaN()
	}
	return b / a
}

// WriteComparison prints two reports side by side, per operation: ops/s, MiB/s, p50 and
// p99 of each, and the ratio B/A. nameA and nameB label the runs (e.g. their files).
func WriteComparison(w io.Writer, nameA string, a *Report, nameB string, b *Report) error {
	ew := &errWriter{w: w}
	for _, x := range []struct {
		tag, name string
		r         *Report
	}{{"A", nameA, a}, {"B", nameB, b}} {
		fmt.Fprintf(ew, "%s: %s  %s\n", x.tag, x.name, describeRun(x.r))
	}
	if a.Workload != b.Workload {
		fmt.Fprintf(ew, "warning: the runs are of different workloads (%s, %s)\n", a.Workload, b.Workload)
	}
	fmt.Fprintln(ew)
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tA ops/s\tB ops/s\tB/A\tA MiB/s\tB MiB/s\tB/A\tA p50\tB p50\tB/A\tA p99\tB p99\tB/A\t")
	for _, c := range Compare(a, b) {
		var ra, rb OpResult
		if c.A != nil {
			ra = *c.A
		}
		if c.B != nil {
			rb = *c.B
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", c.Op,
			num(c.A, ra.OpsPerSec, 1), num(c.B, rb.OpsPerSec, 1), fmtRatio(c.OpsRatio),
			num(c.A, ra.MiBPerSec, 2), num(c.B, rb.MiBPerSec, 2), fmtRatio(c.MiBRatio),
			lat(c.A, ra.Latency.P50), lat(c.B, rb.Latency.P50), fmtRatio(c.P50Ratio),
			lat(c.A, ra.Latency.P99), lat(c.B, rb.Latency.P99), fmtRatio(c.P99Ratio))
	}
	tw.Flush()
	fmt.Fprintln(ew, "\nB/A above 1: B had more ops/s or MiB/s, or higher (slower) latencies.")
	return ew.err
}

// describeRun is "get at http://host, 2026-11-22 05:40 UTC, bench v1 (concurrency=16 ...)".
func describeRun(r *Report) string {
	s := r.Workload + " at " + r.Endpoint
	if !r.Start.IsZero() {
		s += ", " + r.Start.Format("2006-01-02 15:04 MST")
	}
	if r.Version != "" {
		s += ", bench " + r.Version
	}
	if p := paramLine(r.Params); p != "" {
		s += " (" + p + ")"
	}
	return s
}

func num(r *OpResult, v float64, prec int) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

func lat(r *OpResult, v float64) string {
	if r == nil {
		return "-"
	}
	return fmtMs(v)
}

func fmtRatio(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "-"
	}
	return fmt.Sprintf("%.2f", x)
}
