package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/bench"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil"
)

// runBenchCLI runs "cairn bench args..." in-process with a deadline, and fails the test
// if it hangs.
func runBenchCLI(t *testing.T, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- runBenchContext(ctx, args, &out, &errOut) }()
	select {
	case status = <-done:
	case <-time.After(90 * time.Second):
		t.Fatalf("cairn bench %s hangs", strings.Join(args, " "))
	}
	return status, out.String(), errOut.String()
}

func credArgs(srv *testutil.Server) []string {
	return []string{"--endpoint", srv.URL, "--access-key", testutil.AccessKey, "--secret-key", testutil.SecretKey}
}

func TestBenchCLIBadInput(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{}, nil)
	good := credArgs(srv)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unreachable endpoint", []string{"get", "--endpoint", "http://127.0.0.1:1", "--access-key", "a", "--secret-key", "b"},
			"cannot reach http://127.0.0.1:1"},
		{"wrong secret", []string{"get", "--endpoint", srv.URL, "--access-key", testutil.AccessKey, "--secret-key", "wrong"},
			"rejected the credentials: SignatureDoesNotMatch"},
		{"unknown access key", []string{"get", "--endpoint", srv.URL, "--access-key", "NOPE", "--secret-key", "wrong"},
			"rejected the credentials: InvalidAccessKeyId"},
		{"missing bucket for get", append([]string{"get", "--bucket", "nosuch", "--no-prepare"}, good...),
			`bucket "nosuch" does not exist`},
		{"invalid size", append([]string{"get", "--size", "12x"}, good...), `bad --size "12x"`},
		{"invalid size spec", append([]string{"mixed", "--size", "1KiB-2KiB:x"}, good...), `bad --size`},
		{"invalid max size", append([]string{"afs-sizes", "--max-size", "big"}, good...), `bad --max-size`},
		{"invalid levels", append([]string{"clawio-stat", "--levels", "1,x"}, good...), `bad --levels`},
		{"unknown workload", append([]string{"nosuch"}, good...), `unknown workload "nosuch"`},
		{"unknown flag", []string{"get", "--bogus"}, "flag provided but not defined"},
		{"no workload", good, "no workload"},
		{"duration and ops", append([]string{"put", "--duration", "1s", "--ops", "5"}, good...), "exclude each other"},
		{"compare one file", []string{"compare", "a.json"}, "compare wants two JSON reports"},
		{"compare missing file", []string{"compare", "/nonexistent/a.json", "/nonexistent/b.json"}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, stdout, stderr := runBenchCLI(t, tc.args...)
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			if status == 0 || len(lines) != 1 || !strings.HasPrefix(lines[0], "cairn bench: ") || !strings.Contains(lines[0], tc.want) {
				t.Errorf("exit %d, stderr %q; want a non-zero exit and one line with %q", status, stderr, tc.want)
			}
			if stdout != "" || strings.Contains(stderr, "goroutine") {
				t.Errorf("stdout %q", stdout)
			}
		})
	}
}

func TestBenchCLIRun(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{}, nil)
	dir := t.TempDir()
	jsonPath, plotPath := filepath.Join(dir, "get.json"), filepath.Join(dir, "get.svg")
	args := append([]string{"get", "--keys", "20", "--ops", "300", "--concurrency", "4", "--seed", "9",
		"--json", jsonPath, "--plot", plotPath}, credArgs(srv)...)
	status, stdout, stderr := runBenchCLI(t, args...)
	if status != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", status, stdout, stderr)
	}
	t.Logf("\n%s\nstderr:\n%s", stdout, stderr)
	for _, s := range []string{"cairn bench get", "op", "count", "errors", "ops/s", "MiB/s", "min", "avg", "p50", "p90", "p99", "max", "GET", "seed=9"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("table lacks %q", s)
		}
	}
	if !strings.Contains(stderr, "prepare") || !strings.Contains(stderr, "cleanup") {
		t.Errorf("progress: %q", stderr)
	}
	rep, err := bench.ReadReport(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 1 || rep.Results[0].Count != 300 || rep.Params["seed"] != 9.0 || rep.Version == "" {
		t.Errorf("report %+v", rep)
	}
	if fi, err := os.Stat(plotPath); err != nil || fi.Size() == 0 {
		t.Errorf("plot: %v", err)
	}

	// --json - puts the JSON on stdout and the table on stderr.
	args = append([]string{"head", "--keys", "5", "--ops", "20", "--json", "-", "--quiet"}, credArgs(srv)...)
	status, stdout, stderr = runBenchCLI(t, args...)
	var r bench.Report
	if err := json.Unmarshal([]byte(stdout), &r); status != 0 || err != nil || r.Workload != "head" {
		t.Errorf("--json -: exit %d, %v, stdout %q", status, err, stdout)
	}
	if !strings.Contains(stderr, "HEAD") || strings.Contains(stderr, "prepare ") {
		t.Errorf("--quiet table on stderr: %q", stderr)
	}
}

func TestBenchCLICompare(t *testing.T) {
	dir := t.TempDir()
	a := bench.Report{Workload: "get", Endpoint: "http://a", Results: []bench.OpResult{
		{Op: "GET", OpsPerSec: 2000, MiBPerSec: 8, Latency: bench.Latency{P50: 1, P99: 4}}}}
	b := a
	b.Endpoint = "http://b"
	b.Results = []bench.OpResult{{Op: "GET", OpsPerSec: 3000, MiBPerSec: 12, Latency: bench.Latency{P50: 0.5, P99: 8}}}
	for name, r := range map[string]*bench.Report{"a.json": &a, "b.json": &b} {
		if err := bench.WriteJSON(filepath.Join(dir, name), nil, r); err != nil {
			t.Fatal(err)
		}
	}
	status, stdout, stderr := runBenchCLI(t, "compare", filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json"))
	if status != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", status, stderr)
	}
	t.Logf("\n%s", stdout)
	var row string
	for _, l := range strings.Split(stdout, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "GET") {
			row = l
		}
	}
	if got := strings.Fields(row); len(got) != 13 || got[3] != "1.50" || got[6] != "1.50" || got[9] != "0.50" || got[12] != "2.00" {
		t.Errorf("GET row %q: want ratios 1.50 1.50 0.50 2.00", row)
	}
}

func TestParseBenchArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
		chk  func(bench.Config) bool
	}{
		{[]string{"clawio-stat", "--levels", "1,2,4", "--reps", "2", "--endpoint", "http://h:1", "--access-key", "a", "--secret-key", "b"}, true,
			func(c bench.Config) bool { return len(c.Levels) == 3 && c.Levels[2] == 4 && c.Reps == 2 }},
		{[]string{"--endpoint", "http://h:1", "--access-key", "a", "--secret-key", "b", "afs-sizes", "--max-size", "16MiB"}, true,
			func(c bench.Config) bool { return c.Workload == "afs-sizes" && c.MaxSize == 16<<20 }},
		{[]string{"get", "extra", "--endpoint", "http://h:1", "--access-key", "a", "--secret-key", "b"}, false, nil},
	} {
		cfg, _, err := parseBenchArgs(tc.args)
		if (err == nil) != tc.ok || (tc.chk != nil && !tc.chk(cfg)) {
			t.Errorf("parseBenchArgs(%q) = %+v, %v", tc.args, cfg, err)
		}
	}
}

func TestBenchCLIHelp(t *testing.T) {
	status, stdout, _ := runBenchCLI(t, "-h")
	if status != 0 || !strings.Contains(stdout, "leofs-r9w1") || !strings.Contains(stdout, "-max-size") {
		t.Errorf("help: exit %d\n%s", status, stdout)
	}
}
