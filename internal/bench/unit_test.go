package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

func TestBenchHistogram(t *testing.T) {
	var h Histogram
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	l := h.latency()
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"min", l.Min, 0.001}, {"p50", l.P50, 0.5}, {"p90", l.P90, 0.9}, {"p99", l.P99, 0.99}, {"max", l.Max, 1}, {"avg", l.Avg, 0.5005}} {
		if math.Abs(c.got-c.want) > c.want*0.02 {
			t.Errorf("%s = %v ms, want %v ± 2 %%", c.name, c.got, c.want)
		}
	}
	var other Histogram
	other.Record(5 * time.Millisecond)
	h.Merge(&other)
	if h.n != 1001 || h.latency().Max != 5 {
		t.Errorf("after merge: n %d, max %v", h.n, h.latency().Max)
	}
	h.reset()
	if h.n != 0 || h.latency() != (Latency{}) {
		t.Errorf("reset left %d values", h.n)
	}
}

func TestBenchBodyAndVerifier(t *testing.T) {
	p := newPattern()
	for _, size := range []int64{0, 1, 4096, patternSize + 12345} {
		var viaRead, viaWriteTo bytes.Buffer
		if _, err := io.Copy(&viaRead, struct{ io.Reader }{p.body("k", 3, size)}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.body("k", 3, size).WriteTo(&viaWriteTo); err != nil {
			t.Fatal(err)
		}
		if int64(viaRead.Len()) != size || !bytes.Equal(viaRead.Bytes(), viaWriteTo.Bytes()) {
			t.Fatalf("size %d: Read gave %d bytes, WriteTo %d, equal %v", size, viaRead.Len(), viaWriteTo.Len(),
				bytes.Equal(viaRead.Bytes(), viaWriteTo.Bytes()))
		}
		v := p.verifier("k", 3)
		for b := viaRead.Bytes(); len(b) > 0; b = b[min(len(b), 1000):] {
			v.check(b[:min(len(b), 1000)])
		}
		if !v.ok {
			t.Errorf("size %d: the verifier rejects the body", size)
		}
		if size > 0 {
			other := p.verifier("k", 4) // another version has other content
			other.check(viaRead.Bytes())
			if other.ok && size > 8 {
				t.Errorf("size %d: version 4 accepts version 3's body", size)
			}
			bad := viaRead.Bytes()
			bad[len(bad)-1] ^= 1
			v := p.verifier("k", 3)
			v.check(bad)
			if v.ok {
				t.Errorf("size %d: a flipped last byte passes", size)
			}
		}
	}
}

func TestBenchErrorCode(t *testing.T) {
	_, refused := net.Dial("tcp", "127.0.0.1:1")
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&s3Error{status: 404, code: "NoSuchKey"}, "NoSuchKey"},
		{&s3Error{status: 503}, "HTTP 503"},
		{fmt.Errorf("wrapped: %w", &checkError{"SizeMismatch", "x"}), "SizeMismatch"},
		{context.DeadlineExceeded, "timeout"},
		{os.ErrDeadlineExceeded, "timeout"},
		{refused, "connection"},
		{io.ErrUnexpectedEOF, "connection"},
	} {
		if got := errorCode(tc.err); got != tc.want {
			t.Errorf("errorCode(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	if got := transportMessage(refused); got != "connect: connection refused" {
		t.Errorf("transportMessage = %q", got)
	}
}

func TestBenchResponseError(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "http://x/b/k", nil)
	resp := &http.Response{StatusCode: 404, Request: req, Body: io.NopCloser(strings.NewReader(
		`<?xml version="1.0"?><Error><Code>NoSuchKey</Code><Message>gone &amp; away</Message></Error>`))}
	err := responseError(resp)
	se, ok := errors.AsType[*s3Error](err)
	if !ok || se.code != "NoSuchKey" || se.message != "gone & away" || se.status != 404 {
		t.Fatalf("responseError = %#v", err)
	}
	if s := err.Error(); s != "GET /b/k: HTTP 404 NoSuchKey: gone & away" {
		t.Errorf("Error() = %q", s)
	}
}

func TestBenchIndexKey(t *testing.T) {
	for _, tc := range []struct {
		i    int64
		want string
	}{{0, "p/obj00000000"}, {42, "p/obj00000042"}, {123456789, "p/obj123456789"}} {
		if got := indexKey("p/obj", tc.i); got != tc.want {
			t.Errorf("indexKey(%d) = %q, want %q", tc.i, got, tc.want)
		}
	}
}

// twoReports are hand-made runs of two servers.
func twoReports() (a, b *Report) {
	a = &Report{Workload: "mixed", Endpoint: "http://a", Results: []OpResult{
		{Op: "GET", OpsPerSec: 1000, MiBPerSec: 4, Latency: Latency{P50: 2, P99: 10}},
		{Op: "PUT", OpsPerSec: 100, MiBPerSec: 0.4, Latency: Latency{P50: 5, P99: 50}},
		{Op: "HEAD", OpsPerSec: 0, Latency: Latency{}},
	}}
	b = &Report{Workload: "mixed", Endpoint: "http://b", Results: []OpResult{
		{Op: "PUT", OpsPerSec: 300, MiBPerSec: 1.2, Latency: Latency{P50: 2.5, P99: 25}},
		{Op: "GET", OpsPerSec: 500, MiBPerSec: 2, Latency: Latency{P50: 4, P99: 15}},
		{Op: "LIST", OpsPerSec: 7},
	}}
	return a, b
}

func TestBenchCompare(t *testing.T) {
	a, b := twoReports()
	got := Compare(a, b)
	nan := math.NaN()
	want := []struct {
		op                 string
		hasA, hasB         bool
		ops, mib, p50, p99 float64
	}{
		{"GET", true, true, 0.5, 0.5, 2, 1.5},
		{"PUT", true, true, 3, 3, 0.5, 0.5},
		{"HEAD", true, false, nan, nan, nan, nan},
		{"LIST", false, true, nan, nan, nan, nan},
	}
	if len(got) != len(want) {
		t.Fatalf("Compare gave %d rows, want %d", len(got), len(want))
	}
	same := func(x, y float64) bool { return (math.IsNaN(x) && math.IsNaN(y)) || math.Abs(x-y) < 1e-9 }
	for i, w := range want {
		g := got[i]
		if g.Op != w.op || (g.A != nil) != w.hasA || (g.B != nil) != w.hasB ||
			!same(g.OpsRatio, w.ops) || !same(g.MiBRatio, w.mib) || !same(g.P50Ratio, w.p50) || !same(g.P99Ratio, w.p99) {
			t.Errorf("row %d = %+v, want %+v", i, g, w)
		}
	}
	var out bytes.Buffer
	if err := WriteComparison(&out, "a.json", a, "b.json", b); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"A: a.json", "B: b.json", "GET", "0.50", "3.00", "2.00", "1.50", "LIST"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("comparison lacks %q:\n%s", s, &out)
		}
	}
	t.Logf("\n%s", &out)
}

func TestBenchProgressLine(t *testing.T) {
	p := &phase{label: "GET", ops: []string{"GET", "PUT"}, duration: 20 * time.Second}
	rates := []windowStats{{count: 1000, bytes: 4 << 20}, {count: 10, errors: 2}}
	line := progressLine(p, rates, 2, rates, 5*time.Second, false)
	for _, s := range []string{"5.0s/20s", "GET 500/s 2.0 MiB/s", "PUT 5/s", "errors 2", "ETA 15s"} {
		if !strings.Contains(line, s) {
			t.Errorf("progress line %q lacks %q", line, s)
		}
	}
	p = &phase{label: "prepare", ops: []string{"PUT"}, work: 100}
	line = progressLine(p, []windowStats{{count: 25}}, 1, []windowStats{{count: 25}}, time.Second, false)
	if !strings.Contains(line, "25/100") || !strings.Contains(line, "ETA 3.0s") {
		t.Errorf("prepare line %q", line)
	}
}

func TestBenchConfigValidate(t *testing.T) {
	base := func() Config {
		return Config{Workload: "get", Endpoint: "http://127.0.0.1:9000", AccessKey: "a", SecretKey: "s"}
	}
	c := base()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Concurrency != 16 || c.Keys != 1000 || c.Size != "4KiB" || c.Duration != 30*time.Second ||
		c.Seed == 0 || !strings.HasPrefix(c.Bucket, "cairn-bench-") || c.Region != "us-east-1" {
		t.Errorf("defaults: %+v", c)
	}
	c = Config{Workload: "clawio-upload", Endpoint: "http://h:1", AccessKey: "a", SecretKey: "s", Concurrency: 8}
	if err := c.Validate(); err != nil || len(c.Levels) != 1 || c.Levels[0] != 8 || c.Reps != 5 {
		t.Errorf("clawio-upload --concurrency 8: %v, levels %v reps %d", err, c.Levels, c.Reps)
	}
	c = Config{Workload: "afs-sizes", Endpoint: "http://h:1", AccessKey: "a", SecretKey: "s"}
	if err := c.Validate(); err != nil || c.MaxSize != 64<<20 {
		t.Errorf("afs-sizes: %v, max size %d", err, c.MaxSize)
	}
	for name, mod := range map[string]func(*Config){
		"workload":        func(c *Config) { c.Workload = "nope" },
		"endpoint":        func(c *Config) { c.Endpoint = "127.0.0.1:9000" },
		"endpoint path":   func(c *Config) { c.Endpoint = "http://h/x" },
		"credentials":     func(c *Config) { c.SecretKey = "" },
		"size":            func(c *Config) { c.Size = "12x" },
		"both bounds":     func(c *Config) { c.Duration, c.Ops = time.Second, 5 },
		"read ratio":      func(c *Config) { c.ReadRatio = 1.5 },
		"concurrency":     func(c *Config) { c.Concurrency = -1 },
		"keys":            func(c *Config) { c.Keys = -3 },
		"cap leaves none": func(c *Config) { c.Size, c.MaxSize = "1MiB", 1000 },
		"no-prepare put":  func(c *Config) { c.Workload, c.NoPrepare = "put", true },
		"uncapped afs":    func(c *Config) { c.Size = "afs" },
		"page size":       func(c *Config) { c.PageSize = 5000 },
	} {
		c := base()
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
	}
}
