package bench

import (
	"context"
	"testing"
	"time"
)

// overheadConfig GETs 4 KiB objects from a trivial in-process server that answers from
// memory: the rate is the bench client's own ceiling on this machine (the server shares it).
func overheadConfig(tb testing.TB) Config {
	url := startFakeS3(tb, &fakeS3{body: make([]byte, 4096)})
	return Config{Workload: "get", Endpoint: url, AccessKey: "a", SecretKey: "b", Bucket: "overhead",
		Keys: 100, Size: "4KiB", Concurrency: 16, Seed: 1}
}

// TestBenchOverhead measures the client's ceiling for two seconds. It asserts only a very
// loose floor, to catch gross breakage; the figure is in the log (go test -v).
func TestBenchOverhead(t *testing.T) {
	if testing.Short() {
		t.Skip("takes two seconds")
	}
	cfg := overheadConfig(t)
	cfg.Duration = 2 * time.Second
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	get := result(t, rep, "GET")
	t.Logf("bench overhead: %.0f GET/s of 4 KiB against a trivial server (16 clients, %d cores, bench client %.2f cores, race detector %v)",
		get.OpsPerSec, rep.Machine.Cores, rep.BenchCPU, raceEnabled)
	if get.Errors != 0 {
		t.Errorf("%d errors: %v", get.Errors, get.ErrorsBy)
	}
	if !raceEnabled && get.OpsPerSec < 2000 {
		t.Errorf("only %.0f GET/s against a trivial server", get.OpsPerSec)
	}
}

// BenchmarkGet4KiBOverhead runs b.N GETs through the whole bench machinery and reports
// the rate as GET/s.
func BenchmarkGet4KiBOverhead(b *testing.B) {
	cfg := overheadConfig(b)
	cfg.Ops = int64(b.N)
	b.ResetTimer()
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	get := rep.Results[0]
	if get.Errors != 0 {
		b.Fatalf("%d errors: %v", get.Errors, get.ErrorsBy)
	}
	b.ReportMetric(get.OpsPerSec, "GET/s")
}
