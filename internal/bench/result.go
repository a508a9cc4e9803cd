// Package bench runs the seed talks' S3 workloads (LeoFS, Spreadshirt, ClawIO, AFS/OSD) and
// simple building blocks against any S3 endpoint, and reports operations/s, MiB/s and
// latency percentiles as a table, as JSON (the Report type below) and as plots.
package bench

import "time"

// Report is everything one run measured. Its JSON shape is documented in
// docs/benchmarks.md; scripts rely on it: keep fields, add new ones only.
type Report struct {
	Workload string            `json:"workload"`
	Params   map[string]any    `json:"params"` // workload parameters as run (sizes, ratio, keys, concurrency, duration or ops, seed)
	Endpoint string            `json:"endpoint"`
	Bucket   string            `json:"bucket"`
	Version  string            `json:"cairn_version"` // of the bench tool
	Machine  Machine           `json:"machine"`
	Start    time.Time         `json:"start"`
	Elapsed  float64           `json:"elapsed_sec"`
	Results  []OpResult        `json:"results"`            // one entry per operation (PUT, GET, HEAD, ...)
	Levels   []Level           `json:"levels,omitempty"`   // ClawIO workloads: rate by concurrency
	Timeline []Sample          `json:"timeline,omitempty"` // one sample per second of the measured phase
	Notes    []string          `json:"notes,omitempty"`    // anything the reader should know (disturbed runs, capped sizes)
	Extra    map[string]string `json:"extra,omitempty"`

	// Prepare is the unmeasured phase that wrote the objects the workload reads.
	Prepare []OpResult `json:"prepare,omitempty"`
	// Interrupted says the run was stopped (Ctrl-C) before its measured phases ended.
	Interrupted bool `json:"interrupted,omitempty"`
	// BenchCPU is the CPU the bench process used while measuring, in cores: near the
	// machine's core count, the figures are bound by the client, not the server.
	BenchCPU float64 `json:"bench_cpu_cores,omitempty"`
}

// Machine describes where the benchmark ran.
type Machine struct {
	Cores    int    `json:"cores"`
	MemoryMB int64  `json:"memory_mib"`
	CPU      string `json:"cpu"`
	OS       string `json:"os"`
	Go       string `json:"go"`
	Hostname string `json:"hostname"`
}

// OpResult summarises one operation type.
type OpResult struct {
	Op        string         `json:"op"`
	Count     int64          `json:"count"`  // successful operations
	Errors    int64          `json:"errors"` // failed operations
	ErrorsBy  map[string]int `json:"errors_by_code,omitempty"`
	OpsPerSec float64        `json:"ops_per_sec"`
	MiBPerSec float64        `json:"mib_per_sec"`
	Bytes     int64          `json:"bytes"`
	Latency   Latency        `json:"latency_ms"`

	Seconds    float64 `json:"seconds,omitempty"`         // measured time the operation ran in
	Keys       int64   `json:"keys,omitempty"`            // keys listed (LIST)
	KeysPerSec float64 `json:"keys_per_sec,omitempty"`    // keys listed per second (LIST)
	Verified   int64   `json:"verified_bodies,omitempty"` // GET bodies compared byte for byte with what was PUT
}

// Latency percentiles in milliseconds.
type Latency struct {
	Min float64 `json:"min"`
	Avg float64 `json:"avg"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Level is one concurrency level of a ClawIO workload, repeated Reps times.
type Level struct {
	Concurrency int       `json:"concurrency"`
	Rates       []float64 `json:"rates"` // ops/s of each repetition
	Mean        float64   `json:"mean"`
	Stddev      float64   `json:"stddev"`
	Min         float64   `json:"min"`
	Max         float64   `json:"max"`
	Latency     Latency   `json:"latency_ms"` // over all repetitions
}

// Sample is one second of a run, per operation.
type Sample struct {
	T         float64 `json:"t_sec"` // seconds since the measured phase started (end of the interval)
	Op        string  `json:"op"`
	OpsPerSec float64 `json:"ops_per_sec"`
	MiBPerSec float64 `json:"mib_per_sec"`
	P50       float64 `json:"p50_ms"`
	P99       float64 `json:"p99_ms"`
	Errors    int64   `json:"errors"`
}
