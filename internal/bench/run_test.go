package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	obj "github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil"
)

// syncBuffer is a bytes.Buffer safe for the progress writer's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testConfig is a small run of workload against srv.
func testConfig(srv *testutil.Server, workload string) Config {
	return Config{Workload: workload, Endpoint: srv.URL, AccessKey: testutil.AccessKey, SecretKey: testutil.SecretKey,
		Bucket: "bench", Seed: 7, Concurrency: 4, ProgressEvery: 200 * time.Millisecond, Version: "test"}
}

// run runs cfg with a deadline and fails the test on an error.
func run(t *testing.T, cfg Config) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var progress syncBuffer
	rep, err := Run(ctx, cfg, &progress)
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatalf("Run(%s): %v", cfg.Workload, err)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", &table)
	checkReport(t, rep)
	return rep
}

// stored lists what the server holds under prefix in bucket: sizes by key.
func stored(t *testing.T, srv *testutil.Server, bucket, prefix string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	after := ""
	for {
		page, err := srv.Store.List(bucket, obj.ListOptions{Prefix: prefix, After: after, Max: 1000})
		if err != nil {
			t.Fatalf("listing %s/%s: %v", bucket, prefix, err)
		}
		for _, e := range page.Objects {
			out[e.Key] = e.Object.Size
		}
		if !page.Truncated {
			return out
		}
		after = page.Next
	}
}

func sum(m map[string]int64) int64 {
	var s int64
	for _, v := range m {
		s += v
	}
	return s
}

// checkReport checks what holds for every report: no errors, plausible latencies, a
// faithful JSON round trip.
func checkReport(t *testing.T, rep *Report) {
	t.Helper()
	if len(rep.Results) == 0 {
		t.Fatal("no results")
	}
	for _, r := range append(append([]OpResult(nil), rep.Results...), rep.Prepare...) {
		if r.Errors != 0 {
			t.Errorf("%s: %d errors: %v", r.Op, r.Errors, r.ErrorsBy)
		}
		if r.Count == 0 {
			t.Errorf("%s: no operations", r.Op)
			continue
		}
		l := r.Latency
		if !(l.Min > 0 && l.Min <= l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.Max && l.Min <= l.Avg && l.Avg <= l.Max) {
			t.Errorf("%s: implausible latencies %+v", r.Op, l)
		}
		if r.OpsPerSec <= 0 || r.Seconds <= 0 {
			t.Errorf("%s: %v ops/s over %v s", r.Op, r.OpsPerSec, r.Seconds)
		}
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, rep) {
		t.Errorf("the report changes in a JSON round trip:\n got %+v\nwant %+v", back, *rep)
	}
	for _, field := range []string{`"op"`, `"count"`, `"errors"`, `"ops_per_sec"`, `"mib_per_sec"`, `"latency_ms"`,
		`"min"`, `"avg"`, `"p50"`, `"p90"`, `"p99"`, `"max"`, `"machine"`, `"cores"`, `"memory_mib"`, `"params"`, `"cairn_version"`} {
		if !bytes.Contains(b, []byte(field)) {
			t.Errorf("JSON lacks %s", field)
		}
	}
}

func result(t *testing.T, rep *Report, op string) OpResult {
	t.Helper()
	for _, r := range rep.Results {
		if r.Op == op {
			return r
		}
	}
	t.Fatalf("no result %q in %+v", op, rep.Results)
	return OpResult{}
}

func TestBenchGet(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{}, nil)
	cfg := testConfig(srv, "get")
	cfg.Keys, cfg.Size, cfg.Ops, cfg.Keep = 50, "1KiB-8KiB:3,12KiB-20KiB:1", 400, true
	rep := run(t, cfg)
	objs := stored(t, srv, "bench", "cairn-bench/")
	prep := rep.Prepare[0]
	if len(objs) != 50 || prep.Count != 50 || sum(objs) != prep.Bytes {
		t.Errorf("prepare: %d objects stored (%d bytes); the report says %d PUTs of %d bytes", len(objs), sum(objs), prep.Count, prep.Bytes)
	}
	get := result(t, rep, "GET")
	if get.Count != 400 || get.Verified != 400 {
		t.Errorf("GET: %d done, %d verified; want 400 each", get.Count, get.Verified)
	}
	for k, size := range objs {
		if size < 1024 || (size >= 8192 && size < 12288) || size >= 20480 {
			t.Errorf("%s: size %d outside the ranges", k, size)
		}
	}
}

func TestBenchGetFixedSizeBytes(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{}, nil)
	cfg := testConfig(srv, "get")
	cfg.Keys, cfg.Size, cfg.Ops = 20, "4KiB", 300
	rep := run(t, cfg)
	get := result(t, rep, "GET")
	if get.Count != 300 || get.Bytes != 300*4096 || rep.Prepare[0].Bytes != 20*4096 {
		t.Errorf("GET: %d ops, %d bytes; prepare %d bytes", get.Count, get.Bytes, rep.Prepare[0].Bytes)
	}
	// One object of a drawn size: every GET must move exactly its stored size.
	one := testConfig(srv, "get")
	one.Bucket, one.Keys, one.Size, one.Ops, one.Keep = "one", 1, "1KiB-64KiB", 50, true
	rep1 := run(t, one)
	objs := stored(t, srv, "one", "cairn-bench/")
	if g := result(t, rep1, "GET"); len(objs) != 1 || g.Bytes != 50*sum(objs) || rep1.Prepare[0].Bytes != sum(objs) {
		t.Errorf("one object of %d bytes: GET moved %d bytes in %d GETs", sum(objs), g.Bytes, g.Count)
	}
	// Not --keep: the objects and the bucket (created by the run) are gone.
	if _, err := srv.Store.HeadBucket("bench"); err == nil {
		t.Error("the bucket the run created is still there")
	}
}

func TestBenchPut(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{}, nil)
	cfg := testConfig(srv, "put")
	cfg.Size, cfg.Ops, cfg.Keep = "100B-64KiB", 200, true
	rep := run(t, cfg)
	put := result(t, rep, "PUT")
	objs := stored(t, srv, "bench", "cairn-bench/new")
	if put.Count != 200 || len(objs) != 200 || sum(objs) != put.Bytes {
		t.Errorf("PUT: %d ops of %d bytes; stored %d objects of %d bytes", put.Count, put.Bytes, len(objs), sum(objs))
	}
}

func TestBenchMixed(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{}, nil)
	cfg := testConfig(srv, "mixed")
	cfg.Keys, cfg.Size, cfg.Ops, cfg.ReadRatio, cfg.Keep = 30, "1KiB-16KiB", 400, 0.5, true
	rep := run(t, cfg)
	get, put := result(t, rep, "GET"), result(t, rep, "PUT")
	if get.Count+put.Count != 400 || get.Count < 100 || put.Count < 100 {
		t.Errorf("GET %d + PUT %d, want 400 about evenly split", get.Count, put.Count)
	}
	// Overwrites race with GETs of the same keys; the bodies are checked against the
	// version the server returned, so all of them are verified.
	if get.Verified != get.Count {
		t.Errorf("%d of %d GETs verified", get.Verified, get.Count)
	}
	if objs := stored(t, srv, "bench", "cairn-bench/"); len(objs) != 30 {
		t.Errorf("%d objects stored, want 30", len(objs))
	}
}

func TestBenchLeoFS(t *testing.T) {
	for _, tc := range []struct {
		workload string
		ratio    float64
	}{{"leofs-r9w1", 0.9}, {"leofs-r8w2", 0.8}} {
		t.Run(tc.workload, func(t *testing.T) {
			srv := testutil.StartServer(t, store.Config{}, nil)
			cfg := testConfig(srv, tc.workload)
			cfg.Keys, cfg.Concurrency, cfg.Ops, cfg.Keep = 40, 8, 300, true
			rep := run(t, cfg)
			get, put := result(t, rep, "GET"), result(t, rep, "PUT")
			if get.Count+put.Count != 300 {
				t.Errorf("GET %d + PUT %d, want 300", get.Count, put.Count)
			}
			if share := float64(get.Count) / 300; share < tc.ratio-0.1 || share > tc.ratio+0.07 {
				t.Errorf("GET share %.2f, want about %.1f", share, tc.ratio)
			}
			objs := stored(t, srv, "bench", "cairn-bench/")
			if len(objs) != 40 {
				t.Errorf("%d objects stored, want 40", len(objs))
			}
			for k, size := range objs {
				if size < 1024 || size >= 1536*1024 {
					t.Errorf("%s: size %d outside the LeoFS ranges", k, size)
				}
			}
			if rep.Params["read_ratio"] != tc.ratio || rep.Params["keys"] != 40.0 {
				t.Errorf("params %v", rep.Params)
			}
		})
	}
}

func TestBenchSpreadshirt(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{}, nil)
	cfg := testConfig(srv, "spreadshirt-4k")
	cfg.Concurrency, cfg.Keys, cfg.Ops = 0, 20, 200
	rep := run(t, cfg)
	for _, op := range []string{"GET@4", "GET@16"} {
		r := result(t, rep, op)
		if r.Count != 200 || r.Bytes != 200*4096 {
			t.Errorf("%s: %d GETs of %d bytes", op, r.Count, r.Bytes)
		}
	}
	if len(rep.Levels) != 2 || rep.Levels[0].Concurrency != 4 || rep.Levels[1].Concurrency != 16 {
		t.Errorf("levels %+v", rep.Levels)
	}
}

func TestBenchClawIO(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{}, nil)
	t.Run("stat", func(t *testing.T) {
		cfg := testConfig(srv, "clawio-stat")
		cfg.Concurrency, cfg.Keys, cfg.Levels, cfg.Reps, cfg.Duration = 0, 30, []int{1, 2, 4}, 2, 300*time.Millisecond
		rep := run(t, cfg)
		checkLevels(t, rep, "HEAD", []int{1, 2, 4}, 2)
	})
	t.Run("upload", func(t *testing.T) {
		cfg := testConfig(srv, "clawio-upload")
		cfg.Concurrency, cfg.Keys, cfg.Levels, cfg.Reps, cfg.Ops = 0, 1000, []int{1, 2, 4}, 2, 20
		cfg.MaxSize, cfg.Keep, cfg.Bucket = 600e3, true, "upload"
		rep := run(t, cfg)
		checkLevels(t, rep, "PUT", []int{1, 2, 4}, 2)
		allowed := map[int64]bool{}
		for _, r := range ClawIO().Ranges {
			allowed[r.Lo] = r.Lo <= 600e3
		}
		var puts int64
		for _, r := range rep.Results {
			puts += r.Count
		}
		objs := stored(t, srv, "upload", "cairn-bench/up")
		if puts != 3*2*20 || len(objs) == 0 || int64(len(objs)) > puts {
			t.Errorf("%d PUTs, %d objects stored", puts, len(objs))
		}
		for k, size := range objs {
			if !allowed[size] {
				t.Errorf("%s: size %d is not a ClawIO file size under the cap", k, size)
			}
		}
		if !strings.Contains(strings.Join(rep.Notes, "\n"), "9 files of the ClawIO set above it are left out") {
			t.Errorf("notes lack the cap: %q", rep.Notes)
		}
	})
}

// checkLevels checks the per-level results and the Levels of a ClawIO run.
func checkLevels(t *testing.T, rep *Report, op string, levels []int, reps int) {
	t.Helper()
	if len(rep.Levels) != len(levels) || len(rep.Results) != len(levels) {
		t.Fatalf("%d levels, %d results; want %d", len(rep.Levels), len(rep.Results), len(levels))
	}
	for i, l := range rep.Levels {
		r := rep.Results[i]
		if l.Concurrency != levels[i] || len(l.Rates) != reps || r.Op != op+"@"+strconv.Itoa(levels[i]) {
			t.Errorf("level %d: %+v, result %s", i, l, r.Op)
		}
		if !(l.Min > 0 && l.Min <= l.Mean && l.Mean <= l.Max && l.Stddev >= 0 && l.Latency.P50 > 0) {
			t.Errorf("level %d: implausible %+v", i, l)
		}
	}
}

func TestBenchAFS(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{}, nil)
	cfg := testConfig(srv, "afs-sizes")
	cfg.Ops, cfg.MaxSize, cfg.Keep = 150, 1<<20, true
	rep := run(t, cfg)
	put, get := result(t, rep, "PUT"), result(t, rep, "GET")
	objs := stored(t, srv, "bench", "cairn-bench/new")
	if put.Count != 150 || len(objs) != 150 || sum(objs) != put.Bytes {
		t.Errorf("PUT: %d of %d bytes; stored %d objects of %d bytes", put.Count, put.Bytes, len(objs), sum(objs))
	}
	if get.Count != 150 || get.Verified != 150 {
		t.Errorf("GET: %d, %d verified", get.Count, get.Verified)
	}
	for k, size := range objs {
		if size > 1<<20 {
			t.Errorf("%s: size %d above the cap", k, size)
		}
	}
	if !strings.Contains(strings.Join(rep.Notes, "\n"), "redrawn") || rep.Params["max_size"] != float64(1<<20) {
		t.Errorf("notes %q, params %v", rep.Notes, rep.Params)
	}
}

func TestBenchList(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{}, nil)
	cfg := testConfig(srv, "list")
	cfg.Keys, cfg.Size, cfg.PageSize, cfg.Concurrency, cfg.Ops = 95, "10B", 10, 1, 25
	rep := run(t, cfg)
	list := result(t, rep, "LIST")
	// One client: two passes of 10 pages (9 of 10 keys, 1 of 5), then 5 pages of 10.
	if list.Count != 25 || list.Keys != 2*95+50 || list.KeysPerSec <= 0 || list.Bytes == 0 {
		t.Errorf("LIST: %d pages, %d keys, %v keys/s, %d bytes", list.Count, list.Keys, list.KeysPerSec, list.Bytes)
	}
}

func TestBenchDeleteAndHead(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{}, nil)
	cfg := testConfig(srv, "head")
	cfg.Keys, cfg.Ops = 30, 100
	if r := result(t, run(t, cfg), "HEAD"); r.Count != 100 {
		t.Errorf("HEAD: %d", r.Count)
	}
	cfg = testConfig(srv, "delete")
	cfg.Keys, cfg.Keep = 60, true
	rep := run(t, cfg)
	if r := result(t, rep, "DELETE"); r.Count != 60 {
		t.Errorf("DELETE: %d, want 60", r.Count)
	}
	if objs := stored(t, srv, "bench", ""); len(objs) != 0 {
		t.Errorf("%d objects left after delete", len(objs))
	}
}

func TestBenchExistingBucketAndNoPrepare(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{}, nil)
	if err := srv.Store.CreateBucket("mine"); err != nil {
		t.Fatal(err)
	}
	put := func(key string) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/mine/"+key, strings.NewReader("precious"))
		c := &client{base: req.URL, accessKey: testutil.AccessKey, secretKey: testutil.SecretKey, region: "us-east-1", hc: http.DefaultClient}
		resp, err := c.do(req)
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
	}
	put("other/keep-me")

	// Write a set and keep it; then read it with --no-prepare; then clean up a run.
	cfg := testConfig(srv, "get")
	cfg.Bucket, cfg.Keys, cfg.Ops, cfg.Keep = "mine", 25, 50, true
	run(t, cfg)
	cfg.NoPrepare, cfg.Keep = true, false
	rep := run(t, cfg)
	if get := result(t, rep, "GET"); get.Verified != 50 || len(rep.Prepare) != 0 {
		t.Errorf("--no-prepare: %d verified, prepare %v", get.Verified, rep.Prepare)
	}
	// --no-prepare deletes nothing it did not write.
	if objs := stored(t, srv, "mine", ""); len(objs) != 26 {
		t.Errorf("%d objects after --no-prepare, want 26", len(objs))
	}
	cfg.NoPrepare, cfg.Prefix = false, "fresh/"
	run(t, cfg)
	objs := stored(t, srv, "mine", "")
	if _, ok := objs["other/keep-me"]; !ok || len(objs) != 26 {
		t.Errorf("after a run in an existing bucket: %d objects, keep-me there: %v", len(objs), ok)
	}
	if _, err := srv.Store.HeadBucket("mine"); err != nil {
		t.Errorf("the existing bucket was deleted: %v", err)
	}
}

func TestBenchBadInput(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{}, nil)
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"unreachable", func(c *Config) { c.Endpoint = "http://127.0.0.1:1" }, "cannot reach http://127.0.0.1:1: connect: connection refused"},
		{"wrong secret", func(c *Config) { c.SecretKey = "wrong" }, "rejected the credentials: SignatureDoesNotMatch"},
		{"unknown key", func(c *Config) { c.AccessKey = "NOSUCHKEY" }, "rejected the credentials: InvalidAccessKeyId"},
		{"missing bucket", func(c *Config) { c.Bucket, c.NoPrepare = "nosuch", true }, `bucket "nosuch" does not exist`},
		{"empty prefix", func(c *Config) { c.Bucket, c.NoPrepare = "empty", true }, `has no objects under prefix`},
		{"bad size", func(c *Config) { c.Size = "12x" }, `bad --size "12x"`},
		{"bad bucket name", func(c *Config) { c.Bucket = "Bad_Name" }, "InvalidBucketName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "empty prefix" {
				if err := srv.Store.CreateBucket("empty"); err != nil {
					t.Fatal(err)
				}
			}
			cfg := testConfig(srv, "get")
			cfg.Keys, cfg.Ops = 5, 10
			tc.mod(&cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			rep, err := Run(ctx, cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) || rep != nil {
				t.Fatalf("Run = %v, %v; want an error with %q", rep, err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") || time.Since(start) > 10*time.Second {
				t.Errorf("error %q after %v: want one line, quickly", err, time.Since(start))
			}
		})
	}
}

func TestBenchInterrupt(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{}, nil)
	cfg := testConfig(srv, "get")
	cfg.Keys, cfg.Duration = 20, 30*time.Second
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(1500*time.Millisecond, cancel)
	start := time.Now()
	rep, err := Run(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the run went on for %v after the interrupt", d)
	}
	get := result(t, rep, "GET")
	if !rep.Interrupted || get.Count == 0 || get.Errors != 0 || !strings.Contains(rep.Notes[0], "interrupted") {
		t.Errorf("interrupted run: %v, %d GETs, %d errors, notes %q", rep.Interrupted, get.Count, get.Errors, rep.Notes)
	}
	if len(rep.Timeline) == 0 {
		t.Error("no timeline")
	}
	if _, err := srv.Store.HeadBucket("bench"); err == nil {
		t.Error("no cleanup after the interrupt")
	}
}

func TestBenchTimelineAndLiveProgress(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{}, nil)
	cfg := testConfig(srv, "mixed")
	cfg.Keys, cfg.Duration, cfg.ReadRatio, cfg.Live = 20, 2500*time.Millisecond, 0.8, true
	var progress syncBuffer
	rep, err := Run(context.Background(), cfg, &progress)
	if err != nil {
		t.Fatal(err)
	}
	// Two full seconds and the last half, for each of GET and PUT.
	if len(rep.Timeline) != 6 {
		t.Errorf("timeline has %d samples, want 6: %+v", len(rep.Timeline), rep.Timeline)
	}
	var gets float64
	for _, s := range rep.Timeline {
		if s.Op == "GET" && s.T <= 2.01 {
			gets += s.OpsPerSec
			if s.P50 <= 0 || s.P99 < s.P50 {
				t.Errorf("sample %+v", s)
			}
		}
	}
	get := result(t, rep, "GET")
	if gets <= 0 || gets > float64(get.Count) {
		t.Errorf("timeline GETs %v, total %d", gets, get.Count)
	}
	out := progress.String()
	if !strings.Contains(out, "\r") || !strings.Contains(out, "\033[K") || !strings.Contains(out, "ETA") {
		t.Errorf("live progress lacks in-place rewrites: %q", out)
	}
}

func TestBenchErrorsCounted(t *testing.T) {
	var n int64
	var mu sync.Mutex
	fake := &fakeS3{body: make([]byte, 4096), fail: func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodGet || strings.Contains(r.URL.RawQuery, "list-type") {
			return false
		}
		mu.Lock()
		n++
		i := n
		mu.Unlock()
		switch i % 10 {
		case 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 2:
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte("<Error><Code>InternalError</Code><Message>boom</Message></Error>"))
		case 3:
			w.Write(make([]byte, 100)) // a body of the wrong size
		default:
			return false
		}
		return true
	}}
	cfg := Config{Workload: "get", Endpoint: startFakeS3(t, fake), AccessKey: "a", SecretKey: "b", Bucket: "b",
		Keys: 10, Ops: 100, Concurrency: 1, Size: "4KiB"}
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	get := result(t, rep, "GET")
	want := map[string]int{"HTTP 503": 10, "InternalError": 10, "SizeMismatch": 10}
	if get.Count != 70 || get.Errors != 30 || !reflect.DeepEqual(get.ErrorsBy, want) {
		t.Errorf("GET: %d ok, %d errors %v; want 70, 30 %v", get.Count, get.Errors, get.ErrorsBy, want)
	}
	if notes := strings.Join(rep.Notes, "\n"); !strings.Contains(notes, "GET: 30 errors") || !strings.Contains(notes, "length only") {
		t.Errorf("notes %q", notes)
	}
	var table bytes.Buffer
	WriteTable(&table, rep)
	if !strings.Contains(table.String(), "GET errors: HTTP 503 10, InternalError 10, SizeMismatch 10") {
		t.Errorf("table:\n%s", &table)
	}
}

func TestBenchGetDetectsWrongContent(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{}, nil)
	if err := srv.Store.CreateBucket("bkt"); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Endpoint: srv.URL, Bucket: "bkt", AccessKey: testutil.AccessKey, SecretKey: testutil.SecretKey, Region: "us-east-1", Timeout: time.Minute}
	c, err := newClient(&cfg, 1, newPattern())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.put(ctx, "k", 1, 10000); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, readBufSize)
	if res, err := c.get(ctx, "k", 10000, true, buf); err != nil || !res.verified || res.n != 10000 {
		t.Fatalf("get = %+v, %v", res, err)
	}
	if _, err := c.get(ctx, "k", 9999, true, buf); errorCode(err) != "SizeMismatch" {
		t.Errorf("wrong size: %v", err)
	}
	// Version 2's header on version 1's body: the content check must fail.
	req, _ := c.request(ctx, http.MethodPut, "k", "")
	req.Body, req.ContentLength = c.pat.body("k", 1, 10000), 10000
	req.Header.Set(verHeader, "2")
	resp, err := c.do(req)
	if err != nil {
		t.Fatal(err)
	}
	drain(resp)
	if _, err := c.get(ctx, "k", 10000, true, buf); errorCode(err) != "ContentMismatch" {
		t.Errorf("wrong content: %v", err)
	}
	if _, err := c.get(ctx, "k", 10000, false, buf); err != nil {
		t.Errorf("wrong content, not verifying: %v", err)
	}
	if _, err := c.get(ctx, "nokey", -1, true, buf); errorCode(err) != "NoSuchKey" {
		t.Errorf("missing key: %v", err)
	}
}

func TestBenchCleanupFallsBackToSingleDeletes(t *testing.T) {
	var mu sync.Mutex
	deleted := map[string]bool{}
	fake := &fakeS3{body: make([]byte, 4096), fail: func(w http.ResponseWriter, r *http.Request) bool {
		switch r.Method {
		case http.MethodPost: // no DeleteObjects here
			w.WriteHeader(http.StatusNotImplemented)
			w.Write([]byte("<Error><Code>NotImplemented</Code></Error>"))
			return true
		case http.MethodDelete:
			mu.Lock()
			deleted[r.URL.Path] = true
			mu.Unlock()
		}
		return false
	}}
	cfg := Config{Workload: "get", Endpoint: startFakeS3(t, fake), AccessKey: "a", SecretKey: "b", Bucket: "bkt",
		Keys: 30, Ops: 10, Concurrency: 2, Size: "4KiB"}
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(deleted) != 30 || !deleted["/bkt/cairn-bench/obj00000029"] {
		t.Errorf("%d keys deleted one by one, want 30", len(deleted))
	}
	if strings.Contains(strings.Join(rep.Notes, "\n"), "cleanup") {
		t.Errorf("notes %q", rep.Notes)
	}
}
