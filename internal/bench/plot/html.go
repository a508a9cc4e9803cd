package plot

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"maps"
	"slices"

	"github.com/cairnfs/cairn/internal/bench"
)

// pageTemplate is the self-contained HTML page: inline CSS and SVG only, no
// scripts, fonts, images or style sheets from elsewhere. html/template
// escapes every value; only the SVG (which escapes its own text) is trusted.
var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body { font-family: Go, "DejaVu Sans", Helvetica, Arial, sans-serif; color: #222; margin: 24px auto; max-width: 940px; padding: 0 12px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; }
p.meta { color: #444; margin: 2px 0; font-size: 14px; }
svg { display: block; max-width: 100%; height: auto; margin: 16px 0; }
table { border-collapse: collapse; font-size: 13px; margin: 4px 0 12px; }
th, td { border: 1px solid #ccc; padding: 4px 8px; }
th { background: #f0f2f4; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.err td { color: #b00020; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
{{with .Subtitle}}<p class="meta">{{.}}</p>{{end}}
{{with .Machine}}<p class="meta">{{.}}</p>{{end}}
{{.SVG}}
<h2>Results</h2>
{{if .Results}}<table>
<thead><tr><th>op</th><th>count</th><th>errors</th><th>ops/s</th><th>MiB/s</th><th>min ms</th><th>avg ms</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th></tr></thead>
<tbody>
{{range .Results}}<tr{{if .Errors}} class="err"{{end}}><td>{{.Op}}</td><td class="n">{{.Count}}</td><td class="n">{{.Errors}}</td><td class="n">{{.OpsPerSec}}</td><td class="n">{{.MiBPerSec}}</td><td class="n">{{.Min}}</td><td class="n">{{.Avg}}</td><td class="n">{{.P50}}</td><td class="n">{{.P90}}</td><td class="n">{{.P99}}</td><td class="n">{{.Max}}</td></tr>
{{end}}</tbody>
</table>
{{range .ErrorsBy}}<p class="meta">{{.}}</p>
{{end}}{{else}}<p>No operations were measured.</p>
{{end}}{{if .Levels}}<h2>Rate by concurrency</h2>
<table>
<thead><tr><th>concurrency</th><th>repetitions</th><th>mean ops/s</th><th>stddev</th><th>min ops/s</th><th>max ops/s</th><th>p50 ms</th><th>p99 ms</th><th>rates ops/s</th></tr></thead>
<tbody>
{{range .Levels}}<tr><td class="n">{{.Concurrency}}</td><td class="n">{{.Reps}}</td><td class="n">{{.Mean}}</td><td class="n">{{.Stddev}}</td><td class="n">{{.Min}}</td><td class="n">{{.Max}}</td><td class="n">{{.P50}}</td><td class="n">{{.P99}}</td><td>{{.Rates}}</td></tr>
{{end}}</tbody>
</table>
{{end}}{{if .Params}}<h2>Parameters</h2>
<table>
<tbody>
{{range .Params}}<tr><th>{{.Key}}</th><td>{{.Value}}</td></tr>
{{end}}</tbody>
</table>
{{end}}{{if .Notes}}<h2>Notes</h2>
<ul>
{{range .Notes}}<li>{{.}}</li>
{{end}}</ul>
{{end}}{{if .Extra}}<h2>Extra</h2>
<table>
<tbody>
{{range .Extra}}<tr><th>{{.Key}}</th><td>{{.Value}}</td></tr>
{{end}}</tbody>
</table>
{{end}}</body>
</html>
`))

// Rows of the HTML tables, with numbers already formatted.
type (
	htmlResult struct {
		Op                                                 string
		Count, Errors                                      int64
		OpsPerSec, MiBPerSec, Min, Avg, P50, P90, P99, Max string
	}
	htmlLevel struct {
		Concurrency, Reps                       int
		Mean, Stddev, Min, Max, P50, P99, Rates string
	}
	htmlPair struct{ Key, Value string }
	htmlPage struct {
		Title, Subtitle, Machine string
		SVG                      template.HTML
		Results                  []htmlResult
		ErrorsBy                 []string
		Levels                   []htmlLevel
		Params, Extra            []htmlPair
		Notes                    []string
	}
)

// num2 formats a table number with two decimals (or a dash if not finite).
func num2(v float64) string {
	if !finite(v) {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

// machineLine describes the machine for the HTML page.
func machineLine(r *bench.Report) string {
	m := r.Machine
	var s string
	add := func(label, v string) {
		if v == "" {
			return
		}
		if s != "" {
			s += " · "
		}
		s += label + v
	}
	add("host ", m.Hostname)
	add("", m.OS)
	add("CPU ", m.CPU)
	if m.Cores > 0 {
		add("", fmt.Sprintf("%d cores", m.Cores))
	}
	if m.MemoryMB > 0 {
		add("", fmt.Sprintf("%d MiB RAM", m.MemoryMB))
	}
	add("", m.Go)
	add("cairn ", r.Version)
	return s
}

// writeHTML writes the self-contained HTML page for r.
func writeHTML(w io.Writer, r *bench.Report, fs *fontSet) error {
	var svg bytes.Buffer
	if err := writeSVG(&svg, buildFigure(r, fs, false), false); err != nil {
		return err
	}
	page := htmlPage{
		Title:    reportTitle(r),
		Subtitle: reportSubtitle(r),
		Machine:  machineLine(r),
		SVG:      template.HTML(svg.String()), // built by writeSVG, which escapes all text
		Notes:    r.Notes,
	}
	for _, res := range r.Results {
		l := res.Latency
		page.Results = append(page.Results, htmlResult{
			Op: res.Op, Count: res.Count, Errors: res.Errors,
			OpsPerSec: num2(res.OpsPerSec), MiBPerSec: num2(res.MiBPerSec),
			Min: num2(l.Min), Avg: num2(l.Avg), P50: num2(l.P50), P90: num2(l.P90), P99: num2(l.P99), Max: num2(l.Max),
		})
		if len(res.ErrorsBy) > 0 {
			s := res.Op + " errors by code:"
			for _, code := range slices.Sorted(maps.Keys(res.ErrorsBy)) {
				s += fmt.Sprintf(" %s=%d", code, res.ErrorsBy[code])
			}
			page.ErrorsBy = append(page.ErrorsBy, s)
		}
	}
	for _, l := range r.Levels {
		rates := ""
		for i, v := range l.Rates {
			if i > 0 {
				rates += ", "
			}
			rates += fmtValue(v)
		}
		page.Levels = append(page.Levels, htmlLevel{
			Concurrency: l.Concurrency, Reps: len(l.Rates),
			Mean: num2(l.Mean), Stddev: num2(l.Stddev), Min: num2(l.Min), Max: num2(l.Max),
			P50: num2(l.Latency.P50), P99: num2(l.Latency.P99), Rates: rates,
		})
	}
	for _, k := range slices.Sorted(maps.Keys(r.Params)) {
		page.Params = append(page.Params, htmlPair{k, paramString(r.Params[k])})
	}
	for _, k := range slices.Sorted(maps.Keys(r.Extra)) {
		page.Extra = append(page.Extra, htmlPair{k, r.Extra[k]})
	}
	return pageTemplate.Execute(w, page)
}
