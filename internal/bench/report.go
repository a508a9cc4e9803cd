package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteTable prints a report for people: what ran, a table per operation, the
// concurrency levels, errors and notes.
func WriteTable(w io.Writer, r *Report) error {
	ew := &errWriter{w: w}
	m := r.Machine
	fmt.Fprintf(ew, "cairn bench %s  %s  bucket %s  (%s)\n", r.Workload, r.Endpoint, r.Bucket, paramLine(r.Params))
	fmt.Fprintf(ew, "machine: %d cores, %.1f GiB, %s, %s, %s; bench %s\n", m.Cores, float64(m.MemoryMB)/1024, m.CPU, m.OS, m.Go, r.Version)
	if r.BenchCPU > 0 {
		fmt.Fprintf(ew, "bench client: %.2f of %d cores while measuring\n", r.BenchCPU, m.Cores)
	}
	for _, p := range r.Prepare {
		fmt.Fprintf(ew, "prepare: %d %s (%s) in %.1f s, %.0f ops/s, %.1f MiB/s, %d errors\n",
			p.Count, p.Op, FormatSize(p.Bytes), p.Seconds, p.OpsPerSec, p.MiBPerSec, p.Errors)
	}
	fmt.Fprintln(ew)
	writeResults(ew, r.Results)
	if len(r.Levels) > 0 {
		fmt.Fprintln(ew)
		writeLevels(ew, r.Levels)
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(ew, "\nnotes:")
		for _, n := range r.Notes {
			fmt.Fprintln(ew, "  "+n)
		}
	}
	return ew.err
}

// paramLine renders the main parameters: "concurrency=64 duration_sec=20 keys=5000 ...".
func paramLine(p map[string]any) string {
	var parts []string
	for _, k := range []string{"concurrency", "levels", "reps", "duration_sec", "ops", "keys", "size", "max_size", "read_ratio", "page_size", "seed"} {
		v, ok := p[k]
		if !ok {
			continue
		}
		switch x := v.(type) {
		case []any:
			s := make([]string, len(x))
			for i, e := range x {
				s[i] = fmt.Sprint(e)
			}
			v = strings.Join(s, ",")
		case float64:
			v = formatNumber(x)
		}
		parts = append(parts, fmt.Sprintf("%s=%v", k, v))
	}
	return strings.Join(parts, " ")
}

// formatNumber renders integral values without exponent or decimals.
func formatNumber(x float64) string {
	if x == math.Trunc(x) && math.Abs(x) < 1e15 {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%g", x)
}

// writeResults prints one row per operation.
func writeResults(w io.Writer, results []OpResult) {
	keys := slices.ContainsFunc(results, func(o OpResult) bool { return o.Keys > 0 })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "op\tcount\terrors\tops/s\tMiB/s\t"
	if keys {
		head += "keys/s\t"
	}
	fmt.Fprintln(tw, head+"min\tavg\tp50\tp90\tp99\tmax\t")
	for _, o := range results {
		l := o.Latency
		row := fmt.Sprintf("%s\t%d\t%d\t%.1f\t%.2f\t", o.Op, o.Count, o.Errors, o.OpsPerSec, o.MiBPerSec)
		if keys {
			row += fmt.Sprintf("%.0f\t", o.KeysPerSec)
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t\n", row, fmtMs(l.Min), fmtMs(l.Avg), fmtMs(l.P50), fmtMs(l.P90), fmtMs(l.P99), fmtMs(l.Max))
	}
	tw.Flush()
	for _, o := range results {
		if len(o.ErrorsBy) > 0 {
			codes := make([]string, 0, len(o.ErrorsBy))
			for _, c := range slices.Sorted(maps.Keys(o.ErrorsBy)) {
				codes = append(codes, fmt.Sprintf("%s %d", c, o.ErrorsBy[c]))
			}
			fmt.Fprintf(w, "%s errors: %s\n", o.Op, strings.Join(codes, ", "))
		}
	}
}

// writeLevels prints the rate of each concurrency level over its repetitions.
func writeLevels(w io.Writer, levels []Level) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "concurrency\treps\tmean ops/s\tstddev\tmin\tmax\tp50\tp99\t")
	for _, l := range levels {
		fmt.Fprintf(tw, "%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t%s\t\n", l.Concurrency, len(l.Rates), l.Mean, l.Stddev,
			l.Min, l.Max, fmtMs(l.Latency.P50), fmtMs(l.Latency.P99))
	}
	tw.Flush()
}

// fmtMs renders milliseconds with three significant digits.
func fmtMs(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v < 1:
		return fmt.Sprintf("%.0fµs", v*1000)
	case v < 10:
		return fmt.Sprintf("%.2fms", v)
	case v < 100:
		return fmt.Sprintf("%.1fms", v)
	case v < 1000:
		return fmt.Sprintf("%.0fms", v)
	}
	return fmt.Sprintf("%.2fs", v/1000)
}

// WriteJSON writes the report as indented JSON to path ("-": w).
func WriteJSON(path string, w io.Writer, r *Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "-" {
		_, err = w.Write(b)
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// ReadReport reads a report written by WriteJSON.
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: not a bench report: %v", path, err)
	}
	return &r, nil
}

// errWriter remembers the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
