package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	benchlib "github.com/cairnfs/cairn/internal/bench"
)

// phaseResult is the figures of one phase.
type phaseResult struct {
	Name       string  `json:"name"`
	Target     string  `json:"target"`
	Clients    int     `json:"clients"`
	SizeBytes  int64   `json:"size_bytes"`
	Seconds    float64 `json:"seconds"`
	Ops        int64   `json:"ops"`
	OpsPerSec  float64 `json:"ops_per_sec"`
	MiBPerSec  float64 `json:"mib_per_sec"`
	MeanMs     float64 `json:"mean_ms"`
	P50Ms      float64 `json:"p50_ms"`
	P90Ms      float64 `json:"p90_ms"`
	P99Ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Verified   int64   `json:"verified_bodies"`
	BenchCPU   float64 `json:"bench_cpu_cores"`
	ServerCPU  float64 `json:"server_cpu_cores"` // -1: unknown
	// OtherCPU is what the rest of the machine used meanwhile (-1: unknown): more than a
	// little means the figures are disturbed.
	OtherCPU float64 `json:"other_cpu_cores"`
	// IrqCPU is the machine's interrupt and softirq time (loopback networking, I/O
	// completions), not charged to any process (-1: unknown).
	IrqCPU float64 `json:"irq_cpu_cores"`
	// TopOthers names the other processes that used the most CPU, with the cores used.
	TopOthers string `json:"top_other_processes,omitempty"`
}

func (p *phase) emptyResult() phaseResult {
	return phaseResult{Name: p.name, Target: p.tgt.name, Clients: p.clients, SizeBytes: p.data.size,
		FirstError: p.firstErr, ServerCPU: -1, OtherCPU: -1, IrqCPU: -1}
}

// result sums up the workers' figures, and the CPU used between two samples.
func (p *phase) result(workers []*worker, before, after cpuSample) phaseResult {
	r := p.emptyResult()
	var h benchlib.Histogram
	for _, w := range workers {
		h.Merge(&w.hist)
		r.Ops += w.ops
		r.Errors += w.errs
	}
	elapsed := after.at.Sub(before.at)
	r.Seconds = elapsed.Seconds()
	r.OpsPerSec = float64(r.Ops) / r.Seconds
	r.MiBPerSec = r.OpsPerSec * float64(p.data.size) / (1 << 20)
	r.MeanMs, r.P50Ms, r.P90Ms = ms(h.Mean()), ms(h.Quantile(0.50)), ms(h.Quantile(0.90))
	r.P99Ms, r.MaxMs = ms(h.Quantile(0.99)), ms(h.Max())
	if workers[0].buf != nil {
		r.Verified = min(p.checked.Load(), int64(p.verify))
	}
	cores := func(d time.Duration) float64 { return d.Seconds() / r.Seconds }
	self, srv := after.self-before.self, delta(after.server, before.server)
	all, irq := delta(after.busy, before.busy), delta(after.irq, before.irq)
	r.BenchCPU = cores(self)
	if srv >= 0 {
		r.ServerCPU = cores(srv)
	}
	// Without the server's figure, a local server's CPU would count as other.
	if all >= 0 && (srv >= 0 || p.tgt.name == "bare") {
		r.OtherCPU = max(0, cores(all-self-max(srv, 0)))
	}
	if irq >= 0 {
		r.IrqCPU = cores(irq)
	}
	r.TopOthers = topOthers(before.procs, after.procs, p.serverPID, elapsed, 3)
	return r
}

// report is everything a run prints.
type report struct {
	Date      string        `json:"date"`
	GoVersion string        `json:"go_version"`
	Machine   machineInfo   `json:"machine"`
	Target    string        `json:"target"`
	Config    reportConfig  `json:"config"`
	Phases    []phaseResult `json:"phases"`
	Ratios    []ratio       `json:"ratios"`
	Server    *serverReport `json:"server,omitempty"`
	ServerTLS *serverReport `json:"server_tls,omitempty"` // --tls: the HTTPS node
	Notes     []string      `json:"notes,omitempty"`
}

type reportConfig struct {
	DurationSec  float64  `json:"duration_seconds"`
	SmallClients int      `json:"small_clients"`
	LargeClients int      `json:"large_clients"`
	SmallSize    int64    `json:"small_size_bytes"`
	LargeSize    int64    `json:"large_size_bytes"`
	Phases       []string `json:"phases"`
}

type ratio struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
}

type machineInfo struct {
	CPUs        int    `json:"cpus"`
	CPUModel    string `json:"cpu_model"`
	MemTotalMiB int64  `json:"mem_total_mib"`
	OS          string `json:"os"`
	Arch        string `json:"arch"`
	Kernel      string `json:"kernel,omitempty"`
}

func newReport(cfg *config, target string, phases []phaseResult, srv *serverReport) *report {
	r := &report{Date: time.Now().UTC().Format(time.RFC3339), GoVersion: runtime.Version(),
		Machine: machine(), Target: target, Phases: phases, Server: srv,
		Config: reportConfig{DurationSec: cfg.duration.Seconds(), SmallClients: cfg.smallClients,
			LargeClients: cfg.largeClients, SmallSize: cfg.smallSize, LargeSize: cfg.largeSize, Phases: cfg.phases}}
	sz := formatSize(cfg.smallSize)
	r.addRatio("cairn "+sz+" GET / bare GET", "get-4k", "bare-get")
	r.addRatio("cairn "+sz+" PUT / bare PUT", "put-4k", "bare-put")
	for _, p := range []string{"get-4k", "put-4k", "get-16m", "put-16m"} {
		r.addRatio("cairn HTTPS / HTTP "+p, p+"-tls", p)
	}
	r.Notes = notes(r)
	return r
}

func (r *report) phase(name string) *phaseResult {
	for i := range r.Phases {
		if r.Phases[i].Name == name {
			return &r.Phases[i]
		}
	}
	return nil
}

func (r *report) addRatio(name, num, den string) {
	a, b := r.phase(num), r.phase(den)
	if a != nil && b != nil && b.OpsPerSec > 0 {
		r.Ratios = append(r.Ratios, ratio{name, a.OpsPerSec / b.OpsPerSec})
	}
}

// notes points out what makes figures doubtful.
func notes(r *report) []string {
	var out []string
	cpus := float64(r.Machine.CPUs)
	for _, p := range r.Phases {
		if strings.HasPrefix(p.Target, "cairn") && p.BenchCPU > 0.5*cpus {
			out = append(out, fmt.Sprintf("%s: the bench client used %.2f of %d cores; the figure may be client-bound",
				p.Name, p.BenchCPU, r.Machine.CPUs))
		}
		if p.OtherCPU > 0.2 {
			out = append(out, fmt.Sprintf("%s: other processes used %.2f cores meanwhile (biggest still running: %s); the figures may be disturbed",
				p.Name, p.OtherCPU, cmp.Or(p.TopOthers, "none, so short-lived ones")))
		}
		if p.Errors > 0 {
			out = append(out, fmt.Sprintf("%s: %d errors, first: %s", p.Name, p.Errors, p.FirstError))
		}
		if p.P50Ms > 0 && p.MaxMs > 50*p.P99Ms && p.MaxMs > 100 {
			out = append(out, fmt.Sprintf("%s: latency outlier: max %s vs p99 %s", p.Name, fmtMs(p.MaxMs), fmtMs(p.P99Ms)))
		}
	}
	for _, s := range []*serverReport{r.Server, r.ServerTLS} {
		if s == nil {
			continue
		}
		if s.ExitStatus != "0" || s.StopError != "" {
			out = append(out, fmt.Sprintf("cairn exit: %s %s", s.ExitStatus, s.StopError))
		}
		for _, l := range s.LogSamples {
			out = append(out, "cairn log: "+l)
		}
	}
	return out
}

func machine() machineInfo {
	m := machineInfo{CPUs: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	m.CPUModel = procField("/proc/cpuinfo", "model name")
	if kb, err := strconv.ParseInt(strings.TrimSuffix(procField("/proc/meminfo", "MemTotal"), " kB"), 10, 64); err == nil {
		m.MemTotalMiB = kb >> 10
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// procField is the value of the first "name: value" line of a /proc file.
func procField(path, name string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func fmtMs(v float64) string {
	switch {
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

func fmtCores(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func printReport(w io.Writer, r *report) {
	m := r.Machine
	fmt.Fprintf(w, "s3bench %s  %s %s/%s\n", r.Date, r.GoVersion, m.OS, m.Arch)
	fmt.Fprintf(w, "machine: %d cores, %s, %.1f GiB RAM, kernel %s\n", m.CPUs, m.CPUModel, float64(m.MemTotalMiB)/1024, m.Kernel)
	fmt.Fprintf(w, "target:  %s, %gs per phase\n\n", r.Target, r.Config.DurationSec)
	printTable(w, r.Phases)
	fmt.Fprintf(w, "\nCPU columns: cores used on average (of %d); the bare server runs inside the bench process;\n", m.CPUs)
	fmt.Fprintln(w, "other CPU is every other process, kernel threads included; interrupt/softirq time is in the JSON only.")
	if len(r.Ratios) > 0 {
		fmt.Fprintln(w)
	}
	for _, x := range r.Ratios {
		fmt.Fprintf(w, "%s: %.3f\n", x.Name, x.Value)
	}
	for _, s := range []*serverReport{r.Server, r.ServerTLS} {
		if s == nil {
			continue
		}
		fmt.Fprintf(w, "\ncairn: startup %s, shutdown %s, exit %s, max RSS %d MiB, CPU %.1fs, data on %s, log: %d warnings, %d errors\n",
			fmtMs(s.StartupMs), fmtMs(s.ShutdownMs), s.ExitStatus, s.MaxRSSKiB>>10, s.ServerCPUSecs, s.DataFS, s.LogWarnings, s.LogErrors)
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(w, "\nnotes:")
		for _, n := range r.Notes {
			fmt.Fprintln(w, "  "+n)
		}
	}
}

func printTable(w io.Writer, phases []phaseResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase   \tclients\tsize\tops\tops/s\tMiB/s\tp50\tp90\tp99\tmax\terrors\tverified\tbench CPU\tserver CPU\tother CPU\t")
	for _, p := range phases {
		fmt.Fprintf(tw, "%-8s\t%d\t%s\t%d\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t\n",
			p.Name, p.Clients, formatSize(p.SizeBytes), p.Ops, p.OpsPerSec, p.MiBPerSec,
			fmtMs(p.P50Ms), fmtMs(p.P90Ms), fmtMs(p.P99Ms), fmtMs(p.MaxMs),
			p.Errors, p.Verified, fmtCores(p.BenchCPU), fmtCores(p.ServerCPU), fmtCores(p.OtherCPU))
	}
	tw.Flush()
}

func writeJSON(path string, r *report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
