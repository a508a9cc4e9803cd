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

	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// cairnBinary returns $CAIRN_BIN, or a cairn built from ./cmd/cairn once per test binary.
func cairnBinary(t *testing.T) string {
	t.Helper()
	return proctest.Bin(t)
}

func TestBenchAllPhases(t *testing.T) {
	proctest.SkipIfShort(t)
	bin := cairnBinary(t)
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	args := []string{"--cairn", bin, "--dir", t.TempDir(), "--duration", "300ms",
		"--small-clients", "4", "--large-clients", "2", "--large-size", "256KiB", "--json", jsonPath}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := run(ctx, args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
	}
	t.Logf("\n%s", &stdout)
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Phases) != len(allPhases) {
		t.Fatalf("got %d phases, want %d", len(rep.Phases), len(allPhases))
	}
	for _, p := range rep.Phases {
		checkPhase(t, p)
	}
	if len(rep.Ratios) != 2 || rep.Server == nil || rep.Server.ExitStatus != "0" {
		t.Errorf("ratios %v, server %+v", rep.Ratios, rep.Server)
	}
}

func checkPhase(t *testing.T, p phaseResult) {
	t.Helper()
	if p.Ops <= 0 || p.Errors != 0 {
		t.Errorf("%s: %d ops, %d errors (%s)", p.Name, p.Ops, p.Errors, p.FirstError)
	}
	if !(p.P50Ms <= p.P99Ms && p.P99Ms <= p.MaxMs) || p.MaxMs <= 0 {
		t.Errorf("%s: p50 %v, p99 %v, max %v ms", p.Name, p.P50Ms, p.P99Ms, p.MaxMs)
	}
	if strings.HasPrefix(p.Name, "get-") && p.Verified == 0 {
		t.Errorf("%s: no body verified", p.Name)
	}
}

// TestGetSeedsObjects runs a GET phase alone: the harness must write objects first.
func TestGetSeedsObjects(t *testing.T) {
	proctest.SkipIfShort(t)
	args := []string{"--cairn", cairnBinary(t), "--dir", t.TempDir(), "--duration", "200ms",
		"--small-clients", "2", "--phases", "get-4k"}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, &stderr)
	}
	if !strings.Contains(stderr.String(), "writing 64 objects for get-4k") {
		t.Errorf("no seeding in:\n%s", &stderr)
	}
}

// TestTLSPhases: --tls runs each cairn phase again, right after it, against a node
// serving HTTPS, and reports the HTTPS/HTTP ratios.
func TestTLSPhases(t *testing.T) {
	proctest.SkipIfShort(t)
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	args := []string{"--cairn", cairnBinary(t), "--dir", t.TempDir(), "--duration", "200ms", "--tls",
		"--small-clients", "2", "--large-clients", "1", "--large-size", "256KiB", "--phases", "put-4k,get-4k,put-16m,get-16m", "--json", jsonPath}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
	}
	t.Logf("\n%s", &stdout)
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range rep.Phases {
		checkPhase(t, p)
		names = append(names, p.Name+"@"+p.Target)
	}
	if got := strings.Join(names, " "); got != "put-4k@cairn put-4k-tls@cairn-tls get-4k@cairn get-4k-tls@cairn-tls put-16m@cairn put-16m-tls@cairn-tls get-16m@cairn get-16m-tls@cairn-tls" {
		t.Errorf("phases %s", got)
	}
	if len(rep.Ratios) != 4 || !strings.HasPrefix(rep.Ratios[0].Name, "cairn HTTPS / HTTP") || rep.ServerTLS == nil || rep.ServerTLS.ExitStatus != "0" {
		t.Errorf("ratios %v, TLS server %+v", rep.Ratios, rep.ServerTLS)
	}
	if !strings.Contains(stderr.String(), "at https://127.0.0.1:") {
		t.Errorf("no HTTPS node started:\n%s", &stderr)
	}
}

func TestStartFailures(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cairn", "/nonexistent/cairn"}, "not found"},
		{[]string{"--cairn", "/bin/false"}, "exited before it was ready"},
		{[]string{"--endpoint", "http://127.0.0.1:1", "--access-key", "a", "--secret-key", "b"}, "cannot create bucket"},
		{[]string{"--phases", "get-1g"}, "unknown phase"},
		{[]string{"--endpoint", "http://127.0.0.1:1"}, "needs --access-key"},
		{[]string{"--endpoint", "http://127.0.0.1:1", "--tls"}, "not with --endpoint"},
	} {
		start := time.Now()
		err := run(context.Background(), append(tc.args, "--dir", t.TempDir()), &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error with %q", tc.args, err, tc.want)
		}
		if time.Since(start) > 10*time.Second {
			t.Errorf("%v: took %v", tc.args, time.Since(start))
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "4KiB": 4096, "4k": 4096, "16MiB": 16 << 20, "1g": 1 << 30} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1", "4XB", "0"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q): no error", in)
		}
	}
}
