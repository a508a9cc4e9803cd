package plot

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"image"
	"image/png"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/bench"
)

var testStart = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

// timelineReport is a 30-second run of two operations with per-second samples.
func timelineReport() *bench.Report {
	r := &bench.Report{
		Workload: "spreadshirt",
		Endpoint: "http://127.0.0.1:9000",
		Bucket:   "bench",
		Version:  "v0.1.0",
		Machine:  bench.Machine{Cores: 8, MemoryMB: 16384, CPU: "Test CPU @ 3.0GHz", OS: "linux/amd64", Go: "go1.26", Hostname: "testhost"},
		Start:    testStart,
		Elapsed:  30,
		Params:   map[string]any{"concurrency": 16.0, "size": 1048576.0, "ratio": "90:10", "duration": "30s"},
		Notes:    []string{"sizes capped at 16 MiB", "run disturbed by <backup> & co"},
	}
	for i := 1; i <= 30; i++ {
		t := float64(i)
		get := 900 + 120*math.Sin(t/4)
		put := 100 + 15*math.Cos(t/3)
		var errs int64
		if i == 17 {
			errs = 3
		}
		r.Timeline = append(r.Timeline,
			bench.Sample{T: t, Op: "GET", OpsPerSec: get, MiBPerSec: get, P50: 3 + math.Sin(t), P99: 12 + 4*math.Cos(t/2)},
			bench.Sample{T: t, Op: "PUT", OpsPerSec: put, MiBPerSec: put, P50: 9 + math.Cos(t), P99: 40 + 10*math.Sin(t/5), Errors: errs},
		)
	}
	r.Results = []bench.OpResult{
		{Op: "GET", Count: 27000, OpsPerSec: 900, MiBPerSec: 900, Bytes: 27000 << 20, Latency: bench.Latency{Min: 0.8, Avg: 3.2, P50: 3, P90: 6.5, P99: 12, Max: 80}},
		{Op: "PUT", Count: 3000, Errors: 3, ErrorsBy: map[string]int{"SlowDown": 3}, OpsPerSec: 100, MiBPerSec: 100, Bytes: 3000 << 20, Latency: bench.Latency{Min: 2, Avg: 9.5, P50: 9, P90: 20, P99: 41, Max: 150}},
	}
	return r
}

// clawioReport is a ClawIO rate-versus-concurrency run: levels 1..64, 5 repetitions each.
func clawioReport() *bench.Report {
	r := &bench.Report{
		Workload: "clawio-stat",
		Endpoint: "http://localhost:9000",
		Machine:  bench.Machine{Cores: 4},
		Start:    testStart,
		Params:   map[string]any{"reps": 5.0, "levels": "1,2,4,8,16,32,64"},
	}
	for c := 1; c <= 64; c *= 2 {
		l := bench.Level{Concurrency: c, Min: math.Inf(1)}
		base := 1200 * float64(c) / (1 + float64(c)/8)
		sum := 0.0
		for rep := range 5 {
			v := base * (1 + 0.04*float64(rep-2))
			l.Rates = append(l.Rates, v)
			sum += v
			l.Min, l.Max = math.Min(l.Min, v), math.Max(l.Max, v)
		}
		l.Mean = sum / 5
		for _, v := range l.Rates {
			l.Stddev += (v - l.Mean) * (v - l.Mean)
		}
		l.Stddev = math.Sqrt(l.Stddev / 4)
		lat := float64(c) / l.Mean * 1000
		l.Latency = bench.Latency{Min: lat / 3, Avg: lat, P50: lat * 0.9, P90: lat * 2, P99: lat * 4, Max: lat * 10}
		r.Levels = append(r.Levels, l)
	}
	r.Results = []bench.OpResult{{Op: "STAT", Count: 100000, OpsPerSec: 5000, Latency: bench.Latency{Min: 0.1, Avg: 1, P50: 0.9, P90: 2, P99: 4, Max: 20}}}
	return r
}

// singleReport has no timeline and a single result.
func singleReport() *bench.Report {
	return &bench.Report{
		Workload: "put",
		Results:  []bench.OpResult{{Op: "PUT", Count: 1, OpsPerSec: 1, Latency: bench.Latency{P50: 1, P90: 1, P99: 1}}},
	}
}

// nastyReport uses markup characters in names and strings.
func nastyReport() *bench.Report {
	r := timelineReport()
	r.Workload = `mix <&> "quoted"`
	for i := range r.Timeline {
		if r.Timeline[i].Op == "PUT" {
			r.Timeline[i].Op = "PUT<&>"
		}
	}
	r.Results[1].Op = "PUT<&>"
	r.Params["note"] = "</svg><script>alert(1)</script>"
	r.Extra = map[string]string{"<k>": "<v>&"}
	return r
}

// degenerateReports are edge cases that must neither panic nor produce NaN or Inf.
func degenerateReports() map[string]*bench.Report {
	return map[string]*bench.Report{
		"empty":      {},
		"single":     singleReport(),
		"one sample": {Timeline: []bench.Sample{{T: 1, Op: "GET", OpsPerSec: 5, P50: 1, P99: 2}}, Results: []bench.OpResult{{Op: "GET", OpsPerSec: 5}}},
		"all zeros": {
			Timeline: []bench.Sample{{T: 0, Op: "GET"}, {T: 0, Op: "GET"}, {T: 0, Op: "PUT"}},
			Results:  []bench.OpResult{{Op: "GET"}, {Op: "PUT"}},
			Levels:   []bench.Level{{Concurrency: 1}, {Concurrency: 1}},
		},
		"one level":       {Levels: []bench.Level{{Concurrency: 3, Rates: []float64{10}, Mean: 10, Min: 10, Max: 10}}},
		"zero concurrent": {Levels: []bench.Level{{Concurrency: 0, Mean: 5}, {Concurrency: -2, Mean: 7}}},
		"non-finite": {
			Timeline: []bench.Sample{{T: math.NaN(), Op: "GET", OpsPerSec: math.Inf(1)}, {T: 2, Op: "GET", OpsPerSec: math.NaN(), P50: math.Inf(-1)}},
			Results:  []bench.OpResult{{Op: "GET", OpsPerSec: math.NaN(), MiBPerSec: math.Inf(1), Latency: bench.Latency{P50: math.NaN(), P99: math.Inf(1)}}},
			Levels:   []bench.Level{{Concurrency: 2, Mean: math.NaN(), Stddev: math.Inf(1), Rates: []float64{math.NaN()}}},
			Params:   map[string]any{"x": math.NaN()},
			Elapsed:  math.Inf(1),
		},
		"huge": {
			Timeline: []bench.Sample{{T: 1, Op: "GET", OpsPerSec: 1e300, P50: 1e-300, P99: 1e300}, {T: 1e9, Op: "GET", OpsPerSec: -1e300}},
			Results:  []bench.OpResult{{Op: "GET", OpsPerSec: math.MaxFloat64, Latency: bench.Latency{P50: math.SmallestNonzeroFloat64, P99: math.MaxFloat64}}},
		},
	}
}

func render(t testing.TB, format string, r *bench.Report) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Render(&buf, format, r); err != nil {
		t.Fatalf("Render(%s): %v", format, err)
	}
	return buf.Bytes()
}

// checkXML fails unless b is well-formed XML.
func checkXML(t testing.TB, b []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
	}
}

// checkFinite fails if the output mentions NaN or Inf (a sign of unguarded arithmetic).
func checkFinite(t testing.TB, what string, b []byte) {
	t.Helper()
	for _, bad := range []string{"NaN", "Inf"} {
		if i := bytes.Index(b, []byte(bad)); i >= 0 {
			t.Errorf("%s contains %q: …%s…", what, bad, b[max(0, i-80):min(len(b), i+40)])
		}
	}
}

func TestSVGTimeline(t *testing.T) {
	out := string(render(t, "svg", timelineReport()))
	checkXML(t, []byte(out))
	checkFinite(t, "svg", []byte(out))
	for _, want := range []string{
		`<svg xmlns="http://www.w3.org/2000/svg"`, ">GET<", ">PUT<", "GET p99", "PUT p50",
		"Throughput over time", "Bandwidth over time", "Latency over time", "Errors over time",
		"throughput (ops/s)", "bandwidth (MiB/s)", "latency (ms)", "time since start of measurement (s)",
		"Throughput by operation", "Latency percentiles by operation",
		"cairn bench — spreadshirt", "8 cores", "2026-03-14 09:26:53 UTC", "http://127.0.0.1:9000",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	if strings.Contains(out, "log scale") {
		t.Error("latency range is narrow, but a log scale was used")
	}
}

func TestSVGLevels(t *testing.T) {
	out := string(render(t, "svg", clawioReport()))
	checkXML(t, []byte(out))
	checkFinite(t, "svg", []byte(out))
	for _, want := range []string{
		"Rate vs concurrency (5 repetitions per level)", "Latency vs concurrency",
		"concurrency (clients, log2 scale)", "rate (ops/s)", "mean ops/s", "repetitions",
		">64<", ">32<", ">1<", "4 cores", ">STAT<",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	if strings.Contains(out, "Throughput over time") {
		t.Error("chart over time drawn without a timeline")
	}
}

func TestSVGEscapesNames(t *testing.T) {
	out := string(render(t, "svg", nastyReport()))
	checkXML(t, []byte(out))
	if !strings.Contains(out, "PUT&lt;&amp;&gt;") {
		t.Error("escaped op name missing from SVG")
	}
	if strings.Contains(out, "PUT<&>") || strings.Contains(out, "<script") {
		t.Error("unescaped text in SVG")
	}
}

func TestLogScaleLatency(t *testing.T) {
	r := timelineReport()
	for i := range r.Timeline {
		r.Timeline[i].P99 *= 1000
	}
	r.Results[1].Latency.P99 = 50000
	out := string(render(t, "svg", r))
	if n := strings.Count(out, "latency (ms) — log scale"); n != 2 {
		t.Errorf("want log-scale latency axes on 2 charts, got %d", n)
	}
	checkFinite(t, "svg", []byte(out))
}

func TestHTML(t *testing.T) {
	for name, r := range map[string]*bench.Report{"timeline": timelineReport(), "clawio": clawioReport(), "nasty": nastyReport()} {
		t.Run(name, func(t *testing.T) {
			out := string(render(t, "html", r))
			checkFinite(t, "html", []byte(out))
			for _, want := range []string{"<!DOCTYPE html>", "<svg", "</svg>", "<table", "<th>p99 ms</th>"} {
				if !strings.Contains(out, want) {
					t.Errorf("HTML lacks %q", want)
				}
			}
			lower := strings.ToLower(out)
			for _, bad := range []string{"<script", "<link", "src=", "href=", "@import", "url(", `="http`, "xmlns="} {
				if strings.Contains(lower, bad) {
					t.Errorf("HTML contains %q: not self-contained", bad)
				}
			}
			if strings.Count(out, "<svg") != 1 || strings.Count(out, "</svg>") != 1 {
				t.Error("HTML should contain exactly one inline SVG")
			}
		})
	}
	out := string(render(t, "html", timelineReport()))
	for _, want := range []string{"Notes", "run disturbed by &lt;backup&gt; &amp; co", "Parameters", "1048576", "SlowDown=3"} {
		if !strings.Contains(out, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	out = string(render(t, "html", clawioReport()))
	if !strings.Contains(out, "Rate by concurrency") || !strings.Contains(out, "<td class=\"n\">64</td>") {
		t.Error("HTML lacks the levels table")
	}
	out = string(render(t, "html", nastyReport()))
	if !strings.Contains(out, "PUT&lt;&amp;&gt;") || strings.Contains(out, "PUT<&>") {
		t.Error("op name not escaped in HTML")
	}
}

// nonWhite counts pixels that are not pure white.
func nonWhite(img image.Image) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r != 0xffff || g != 0xffff || bl != 0xffff {
				n++
			}
		}
	}
	return n
}

func TestPNG(t *testing.T) {
	for name, r := range map[string]*bench.Report{"timeline": timelineReport(), "clawio": clawioReport(), "single": singleReport()} {
		t.Run(name, func(t *testing.T) {
			out := render(t, "png", r)
			img, err := png.Decode(bytes.NewReader(out))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			fs, err := newFontSet()
			if err != nil {
				t.Fatal(err)
			}
			f := buildFigure(r, fs, true)
			if got, want := img.Bounds().Size(), image.Pt(900, int(math.Ceil(f.h))); got != want {
				t.Errorf("size %v, want %v", got, want)
			}
			total := img.Bounds().Dx() * img.Bounds().Dy()
			frac := float64(nonWhite(img)) / float64(total)
			if frac < 0.02 || frac > 0.5 {
				t.Errorf("%.1f%% of pixels are not white; want a chart, not a blank or a blot", 100*frac)
			}
			if c := img.At(0, 0); c != (image.White.C) {
				r, g, b, _ := c.RGBA()
				if r != 0xffff || g != 0xffff || b != 0xffff {
					t.Errorf("corner pixel %v, want a white background", c)
				}
			}
		})
	}
}

func TestDegenerate(t *testing.T) {
	for name, r := range degenerateReports() {
		t.Run(name, func(t *testing.T) {
			svg := render(t, "svg", r)
			checkXML(t, svg)
			checkFinite(t, "svg", svg)
			checkFinite(t, "html", render(t, "html", r))
			if _, err := png.Decode(bytes.NewReader(render(t, "png", r))); err != nil {
				t.Fatalf("png: %v", err)
			}
		})
	}
	if !strings.Contains(string(render(t, "svg", &bench.Report{})), "no operations were measured") {
		t.Error("empty report should say that nothing was measured")
	}
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	r := timelineReport()
	for _, tc := range []struct{ name, prefix string }{
		{"a.svg", "<?xml"}, {"b.html", "<!DOCTYPE html>"}, {"c.HTM", "<!DOCTYPE html>"}, {"d.png", "\x89PNG"},
	} {
		p := filepath.Join(dir, tc.name)
		if err := Write(p, r); err != nil {
			t.Fatalf("Write(%s): %v", tc.name, err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte(tc.prefix)) {
			t.Errorf("%s starts with %q, want %q", tc.name, b[:min(len(b), 16)], tc.prefix)
		}
	}
	for _, name := range []string{"e.gif", "noext"} {
		p := filepath.Join(dir, name)
		err := Write(p, r)
		if err == nil {
			t.Fatalf("Write(%s) succeeded", name)
		}
		for _, want := range []string{".svg", ".html", ".png"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %s", err, want)
			}
		}
		if _, serr := os.Stat(p); serr == nil {
			t.Errorf("Write(%s) left a file behind", name)
		}
	}
	if err := Write(filepath.Join(dir, "x.svg"), nil); err == nil {
		t.Error("Write accepted a nil report")
	}
	if err := Render(io.Discard, "gif", r); err == nil || !strings.Contains(err.Error(), "svg") {
		t.Errorf("Render(gif) = %v, want an error naming the formats", err)
	}
}

// randomReport builds an arbitrary report, including invalid numbers.
func randomReport(rng *rand.Rand) *bench.Report {
	num := func() float64 {
		switch rng.IntN(10) {
		case 0:
			return 0
		case 1:
			return -rng.Float64() * 100
		case 2:
			return []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.MaxFloat64, math.SmallestNonzeroFloat64}[rng.IntN(5)]
		case 3:
			return rng.Float64() * math.Pow(10, float64(rng.IntN(40)-20))
		}
		return rng.Float64() * 1000
	}
	names := []string{"GET", "PUT", "HEAD", "DELETE", "", "<&>", "LIST \"x\"", "ünïcødé", "a-very-long-operation-name-that-goes-on-and-on", "\x00\x01\ttab"}
	op := func() string { return names[rng.IntN(len(names))] }
	r := &bench.Report{Workload: op(), Endpoint: op(), Elapsed: num(), Machine: bench.Machine{Cores: rng.IntN(3) * 16}}
	if rng.IntN(2) == 0 {
		r.Start = testStart
	}
	for range rng.IntN(6) {
		r.Results = append(r.Results, bench.OpResult{Op: op(), Count: rng.Int64N(1000), Errors: rng.Int64N(3), OpsPerSec: num(), MiBPerSec: num(),
			Latency: bench.Latency{Min: num(), Avg: num(), P50: num(), P90: num(), P99: num(), Max: num()}})
	}
	for range rng.IntN(3) * rng.IntN(40) {
		r.Timeline = append(r.Timeline, bench.Sample{T: num(), Op: op(), OpsPerSec: num(), MiBPerSec: num(), P50: num(), P99: num(), Errors: rng.Int64N(2)})
	}
	for range rng.IntN(3) * rng.IntN(8) {
		l := bench.Level{Concurrency: rng.IntN(200) - 10, Mean: num(), Stddev: num(), Min: num(), Max: num(),
			Latency: bench.Latency{P50: num(), Avg: num(), P99: num()}}
		for range rng.IntN(6) {
			l.Rates = append(l.Rates, num())
		}
		r.Levels = append(r.Levels, l)
	}
	if rng.IntN(3) == 0 {
		r.Notes = []string{op()}
		r.Params = map[string]any{op(): num(), "s": op()}
	}
	return r
}

func TestRandomReports(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 150
	if testing.Short() {
		n = 40
	}
	for i := range n {
		r := randomReport(rng)
		svg := render(t, "svg", r)
		checkXML(t, svg)
		checkFinite(t, "svg", svg)
		render(t, "html", r)
		if i%10 == 0 {
			if _, err := png.Decode(bytes.NewReader(render(t, "png", r))); err != nil {
				t.Fatalf("report %d: png: %v", i, err)
			}
		}
		if t.Failed() {
			b, _ := json.Marshal(r)
			t.Fatalf("report %d failed: %s", i, b)
		}
	}
}

// FuzzRender renders reports decoded from JSON; it must never panic and the
// SVG must stay well-formed.
func FuzzRender(f *testing.F) {
	for _, r := range []*bench.Report{timelineReport(), clawioReport(), singleReport(), {}} {
		b, err := json.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r bench.Report
		if json.Unmarshal(data, &r) != nil || len(r.Timeline) > 5000 || len(r.Levels) > 500 || len(r.Results) > 200 {
			return
		}
		checkXML(t, render(t, "svg", &r))
		render(t, "html", &r)
	})
}

// TestExamples writes one example of each format to the directory named by
// PLOT_EXAMPLE_DIR (for looking at them); it is skipped otherwise.
func TestExamples(t *testing.T) {
	dir := os.Getenv("PLOT_EXAMPLE_DIR")
	if dir == "" {
		t.Skip("set PLOT_EXAMPLE_DIR to write example plots")
	}
	r := timelineReport()
	c := clawioReport()
	r.Levels = c.Levels
	for _, ext := range []string{"svg", "html", "png"} {
		if err := Write(filepath.Join(dir, "plot-example."+ext), r); err != nil {
			t.Fatal(err)
		}
	}
	logLat := timelineReport()
	for i := range logLat.Timeline {
		logLat.Timeline[i].P99 *= 300
	}
	many := &bench.Report{Workload: "many ops, long run"}
	for i, op := range []string{"PUT", "GET", "HEAD", "DELETE", "LIST", "COPY", "MPU", "STAT", "RANGE", "TAGS"} {
		for t := 1; t <= 600; t++ {
			v := float64(100*(i+1)) + 30*math.Sin(float64(t)/20+float64(i))
			many.Timeline = append(many.Timeline, bench.Sample{T: float64(t), Op: op, OpsPerSec: v, P50: 1 + float64(i), P99: 5 + float64(i)*3})
		}
		many.Results = append(many.Results, bench.OpResult{Op: op, OpsPerSec: float64(100 * (i + 1)), Latency: bench.Latency{P50: 1 + float64(i), P90: 3 + float64(i), P99: 5 + float64(i)*3}})
	}
	for name, r := range map[string]*bench.Report{"clawio": c, "single": singleReport(), "empty": {}, "nasty": nastyReport(), "loglat": logLat, "many": many} {
		if err := Write(filepath.Join(dir, "plot-example-"+name+".png"), r); err != nil {
			t.Fatal(err)
		}
	}
}

func BenchmarkRenderPNGLongRun(b *testing.B) {
	r := &bench.Report{Workload: "long"}
	for i, op := range []string{"PUT", "GET", "HEAD", "DELETE"} {
		for t := 1; t <= 3600; t++ {
			v := float64(100*(i+1)) + 30*math.Sin(float64(t)/20+float64(i))
			r.Timeline = append(r.Timeline, bench.Sample{T: float64(t), Op: op, OpsPerSec: v, MiBPerSec: v, P50: 1 + float64(i), P99: 5 + float64(i)*3 + math.Sin(float64(t))})
		}
		r.Results = append(r.Results, bench.OpResult{Op: op, OpsPerSec: float64(100 * (i + 1))})
	}
	for b.Loop() {
		if err := Render(io.Discard, "png", r); err != nil {
			b.Fatal(err)
		}
	}
}
