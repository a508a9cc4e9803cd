package plot

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/cairnfs/cairn/internal/bench"
)

// Figure geometry in pixels.
const (
	figWidth = 900
	panelH   = 330
	panelGap = 14
	margin   = 10
)

// reportTitle is the main title of the figure.
func reportTitle(r *bench.Report) string {
	if r.Workload == "" {
		return "cairn bench"
	}
	return "cairn bench — " + r.Workload
}

// reportSubtitle is the line under the title: where, when and on what.
func reportSubtitle(r *bench.Report) string {
	var parts []string
	if r.Endpoint != "" {
		parts = append(parts, "endpoint "+r.Endpoint)
	}
	if r.Bucket != "" {
		parts = append(parts, "bucket "+r.Bucket)
	}
	if !r.Start.IsZero() {
		parts = append(parts, r.Start.UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	if r.Machine.Cores > 0 {
		m := fmt.Sprintf("%d cores", r.Machine.Cores)
		if r.Machine.CPU != "" {
			m += " (" + r.Machine.CPU + ")"
		}
		parts = append(parts, m)
	}
	if finite(r.Elapsed) && r.Elapsed > 0 {
		parts = append(parts, fmt.Sprintf("%.1f s", r.Elapsed))
	}
	return strings.Join(parts, " · ")
}

// paramsLine lists the workload parameters as sorted key=value pairs.
func paramsLine(r *bench.Report) string {
	keys := make([]string, 0, len(r.Params))
	for k := range r.Params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+paramString(r.Params[k]))
	}
	return strings.Join(parts, ", ")
}

// opOrder returns the operation names in a stable order: as listed in
// Results, then any that only appear in the timeline.
func opOrder(r *bench.Report) []string {
	var ops []string
	seen := map[string]bool{}
	add := func(op string) {
		if !seen[op] {
			seen[op] = true
			ops = append(ops, op)
		}
	}
	for _, res := range r.Results {
		add(res.Op)
	}
	for _, s := range r.Timeline {
		add(s.Op)
	}
	return ops
}

// opLabel names an operation in legends, also when its name is empty.
func opLabel(op string) string {
	if op == "" {
		return "(unnamed)"
	}
	return op
}

// buildFigure lays out every chart that r has data for. With header, the
// title, subtitle and parameters are drawn at the top (the HTML page shows
// them as HTML instead).
func buildFigure(r *bench.Report, fs *fontSet, header bool) *figure {
	f := &figure{w: figWidth, title: reportTitle(r)}
	var panels []panel
	ops := opOrder(r)
	colorOf := map[string]int{}
	for i, op := range ops {
		colorOf[op] = i
	}
	if len(r.Timeline) > 0 {
		panels = append(panels, timelinePanels(r, ops, colorOf)...)
	}
	if len(r.Levels) > 0 {
		panels = append(panels, levelPanels(r)...)
	}
	panels = append(panels, summaryPanels(r, colorOf)...)

	y := float64(margin)
	if header {
		y = drawHeader(f, fs, r)
	}
	for _, p := range panels {
		h := p.height(fs, figWidth-2*margin)
		p.draw(f, fs, margin, y, figWidth-2*margin, h)
		y += h + panelGap
	}
	f.h = math.Ceil(y - panelGap + margin)
	// The background goes first so that everything else is drawn over it.
	f.prims = append([]prim{{kind: primRect, w: f.w, h: f.h, col: colWhite}}, f.prims...)
	return f
}

// drawHeader draws the title block and returns the y where charts start.
func drawHeader(f *figure, fs *fontSet, r *bench.Report) float64 {
	const x, w = margin, figWidth - 2*margin
	lines := 1
	sub, params := reportSubtitle(r), paramsLine(r)
	if sub != "" {
		lines++
	}
	if params != "" {
		lines++
	}
	h := 20 + 24 + 19*float64(lines-1)
	f.fillRect(x, margin, w, h, colHeader)
	y := margin + 32.0
	f.text(x+14, y, fs.truncate(reportTitle(r), sizeTitle, true, w-28), textStyle{size: sizeTitle, bold: true, color: colText})
	if sub != "" {
		y += 21
		f.text(x+14, y, fs.truncate(sub, sizeSub, false, w-28), textStyle{size: sizeSub, color: colText})
	}
	if params != "" {
		y += 19
		f.text(x+14, y, fs.truncate(params, sizeSub, false, w-28), textStyle{size: sizeSub, color: colMuted})
	}
	return margin + h + panelGap
}

// timelinePanels charts the per-second samples: ops/s, MiB/s (if any bytes
// moved), p50/p99 latency and errors (if any).
func timelinePanels(r *bench.Report, ops []string, colorOf map[string]int) []panel {
	byOp := map[string][]bench.Sample{}
	var ts []float64
	for _, s := range r.Timeline {
		byOp[s.Op] = append(byOp[s.Op], s)
		ts = append(ts, s.T)
	}
	anyBytes, anyErrors := false, false
	for _, s := range r.Timeline {
		anyBytes = anyBytes || (finite(s.MiBPerSec) && s.MiBPerSec > 0)
		anyErrors = anyErrors || s.Errors > 0
	}
	xAxis := newLinearAxis("time since start of measurement (s)", ts, true, 0)

	type metric struct {
		title, yTitle string
		get           func(bench.Sample) float64
	}
	metrics := []metric{{"Throughput over time", "throughput (ops/s)", func(s bench.Sample) float64 { return s.OpsPerSec }}}
	if anyBytes {
		metrics = append(metrics, metric{"Bandwidth over time", "bandwidth (MiB/s)", func(s bench.Sample) float64 { return s.MiBPerSec }})
	}
	if anyErrors {
		metrics = append(metrics, metric{"Errors over time", "errors (per s)", func(s bench.Sample) float64 { return float64(s.Errors) }})
	}
	var panels []panel
	for i, m := range metrics {
		c := &xyChart{title: m.title, x: xAxis}
		var vals []float64
		for _, op := range ops {
			samples := byOp[op]
			if len(samples) == 0 {
				continue
			}
			col, dash := seriesColor(colorOf[op])
			s := series{name: opLabel(op), col: col, dash: dash, lines: true, markers: len(samples) <= 40, radius: 2.5, legend: true}
			for _, smp := range sortedSamples(samples) {
				v := m.get(smp)
				s.pts = append(s.pts, xy{x: smp.T, y: v})
				vals = append(vals, v)
			}
			c.series = append(c.series, s)
		}
		c.y = newLinearAxis(m.yTitle, vals, true, 0.05)
		panels = append(panels, c)
		if i == 0 {
			panels = append(panels, latencyTimeline(ops, byOp, colorOf, xAxis))
		}
	}
	return panels
}

// sortedSamples returns the samples of one op ordered by time.
func sortedSamples(ss []bench.Sample) []bench.Sample {
	out := slices.Clone(ss)
	slices.SortStableFunc(out, func(a, b bench.Sample) int { return cmp.Compare(a.T, b.T) })
	return out
}

// latencyTimeline charts p50 (solid) and p99 (dashed) latency per op over
// time. Seconds without a latency (0 ms: no completed operation) are gaps.
func latencyTimeline(ops []string, byOp map[string][]bench.Sample, colorOf map[string]int, xAxis axis) panel {
	c := &xyChart{title: "Latency over time (p50 solid, p99 dashed)", x: xAxis}
	var vals []float64
	gap := func(v float64) float64 {
		if v <= 0 {
			return math.NaN()
		}
		return v
	}
	for _, op := range ops {
		samples := sortedSamples(byOp[op])
		if len(samples) == 0 {
			continue
		}
		col, _ := seriesColor(colorOf[op])
		p50 := series{name: opLabel(op) + " p50", col: col, lines: true, markers: len(samples) <= 40, radius: 2.5, legend: true}
		p99 := series{name: opLabel(op) + " p99", col: col, dash: true, lines: true, legend: true}
		for _, s := range samples {
			p50.pts = append(p50.pts, xy{x: s.T, y: gap(s.P50)})
			p99.pts = append(p99.pts, xy{x: s.T, y: gap(s.P99)})
			vals = append(vals, s.P50, s.P99)
		}
		c.series = append(c.series, p50, p99)
	}
	c.y = newValueAxis("latency (ms)", vals, 0.05)
	return c
}

// levelPanels charts a ClawIO run: mean rate per concurrency level with
// min–max error bars and the individual repetitions, and latency per level.
func levelPanels(r *bench.Report) []panel {
	levels := slices.Clone(r.Levels)
	slices.SortStableFunc(levels, func(a, b bench.Level) int { return cmp.Compare(a.Concurrency, b.Concurrency) })
	var xs, rateVals, latVals []float64
	maxReps := 0
	blue, orange, verm := palette[0], palette[1], palette[3]
	mean := series{name: "mean ops/s", col: blue, lines: true, markers: true, radius: 4, legend: true}
	reps := series{name: "repetitions", col: withAlpha(orange, 0xc0), markers: true, radius: 2.5, legend: true, kind: swatchDot, dx: 10}
	p50 := series{name: "p50", col: blue, lines: true, markers: true, radius: 3.5, legend: true}
	avg := series{name: "mean", col: palette[2], lines: true, markers: true, radius: 3, legend: true, dash: true}
	p99 := series{name: "p99", col: verm, lines: true, markers: true, radius: 3.5, legend: true}
	for _, l := range levels {
		x := float64(l.Concurrency)
		xs = append(xs, x)
		lo, hi, ok := levelSpread(l)
		mean.pts = append(mean.pts, xy{x: x, y: l.Mean, lo: lo, hi: hi, err: ok})
		rateVals = append(rateVals, l.Mean, lo, hi)
		for _, v := range l.Rates {
			reps.pts = append(reps.pts, xy{x: x, y: v})
			rateVals = append(rateVals, v)
		}
		maxReps = max(maxReps, len(l.Rates))
		p50.pts = append(p50.pts, xy{x: x, y: l.Latency.P50})
		avg.pts = append(avg.pts, xy{x: x, y: l.Latency.Avg})
		p99.pts = append(p99.pts, xy{x: x, y: l.Latency.P99})
		latVals = append(latVals, l.Latency.P50, l.Latency.Avg, l.Latency.P99)
	}
	xAxis := newLog2Axis("concurrency (clients, log2 scale)", xs)
	title := "Rate vs concurrency"
	if maxReps > 0 {
		title += fmt.Sprintf(" (%d repetitions per level)", maxReps)
	}
	rate := &xyChart{title: title, x: xAxis, y: newLinearAxis("rate (ops/s)", rateVals, true, 0.05)}
	rate.series = []series{mean}
	if len(reps.pts) > 0 {
		rate.series = append(rate.series, reps)
	}
	rate.extra = []legendEntry{{label: "min–max (or ±1 stddev)", col: blue, kind: swatchErrorBar}}
	lat := &xyChart{title: "Latency vs concurrency", x: xAxis, y: newValueAxis("latency (ms)", latVals, 0.05)}
	lat.series = []series{p50, avg, p99}
	return []panel{rate, lat}
}

// levelSpread returns the error bar of a level: min–max when they bracket
// the mean, otherwise mean ± stddev (not below zero).
func levelSpread(l bench.Level) (lo, hi float64, ok bool) {
	if finite(l.Min) && finite(l.Max) && l.Min <= l.Mean && l.Mean <= l.Max && l.Max > l.Min {
		return l.Min, l.Max, true
	}
	if finite(l.Stddev) && l.Stddev > 0 && finite(l.Mean) {
		return math.Max(0, l.Mean-l.Stddev), l.Mean + l.Stddev, true
	}
	return 0, 0, false
}

// summaryPanels charts Results: ops/s per operation and its latency percentiles.
func summaryPanels(r *bench.Report, colorOf map[string]int) []panel {
	if len(r.Results) == 0 {
		return []panel{&messagePanel{title: "Results by operation", msg: "no operations were measured"}}
	}
	var cats, subs []string
	var ops, p50, p90, p99 []float64
	var cols []color.NRGBA
	anyErr := false
	for _, res := range r.Results {
		cats = append(cats, opLabel(res.Op))
		col, _ := seriesColor(colorOf[res.Op])
		cols = append(cols, col)
		var sub []string
		if finite(res.MiBPerSec) && res.MiBPerSec > 0 {
			sub = append(sub, fmtValue(res.MiBPerSec)+" MiB/s")
		}
		if res.Errors > 0 {
			sub = append(sub, fmt.Sprintf("%d errors", res.Errors))
			anyErr = true
		}
		subs = append(subs, strings.Join(sub, " · "))
		ops = append(ops, res.OpsPerSec)
		p50 = append(p50, res.Latency.P50)
		p90 = append(p90, res.Latency.P90)
		p99 = append(p99, res.Latency.P99)
	}
	title := "Throughput by operation"
	if anyErr {
		title += " (successful operations)"
	}
	thr := &barChart{title: title, cats: cats, subs: subs, valueLabels: true,
		y: newLinearAxis("throughput (ops/s)", ops, true, 0.1)}
	thr.groups = []barGroup{{name: "ops/s", col: palette[0], cols: cols, vals: ops}}
	lat := &barChart{title: "Latency percentiles by operation", cats: cats, valueLabels: true,
		y: newValueAxis("latency (ms)", slices.Concat(p50, p90, p99), 0.1)}
	lat.groups = []barGroup{
		{name: "p50", col: palette[5], vals: p50},
		{name: "p90", col: palette[0], vals: p90},
		{name: "p99", col: palette[3], vals: p99},
	}
	return []panel{thr, lat}
}

// paramString formats a parameter value; JSON numbers (float64) print
// without exponent where possible, and non-finite numbers as a dash.
func paramString(v any) string {
	switch x := v.(type) {
	case float64:
		if !finite(x) {
			return "–"
		}
		if x == math.Trunc(x) && math.Abs(x) < 1e15 {
			return strconv.FormatFloat(x, 'f', -1, 64)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case float32:
		return paramString(float64(x))
	}
	return fmt.Sprint(v)
}
