package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/bench"
	"github.com/cairnfs/cairn/internal/bench/plot"
)

// Exit statuses of cairn bench.
const (
	exitOK          = 0
	exitFailed      = 1   // the run could not measure, or its output could not be written
	exitUsage       = 2   // bad arguments
	exitInterrupted = 130 // Ctrl-C; what was measured is still reported
)

const benchUsageHead = `Usage:
  cairn bench WORKLOAD --endpoint URL --access-key K --secret-key S [flags]
  cairn bench compare A.json B.json
  cairn bench plot REPORT.json FILE.svg|.html|.png

Drives any S3 endpoint (cairn, MinIO, Ceph RGW, SeaweedFS, AWS) with path-style SigV4
requests and reports operations/s, MiB/s and latency percentiles per operation: a table
on stdout, all figures as JSON (--json) and a chart (--plot). Objects it writes, and the
bucket if it created it, are deleted at the end unless --keep. Ctrl-C ends the measured
phase early; the figures so far are reported and the objects still cleaned up.

Workloads:
`

const benchUsageTail = `
compare prints two runs' JSON side by side per operation (ops/s, MiB/s, p50, p99 and B/A);
plot draws the chart of a saved run.

Flags:
`

// benchOptions are the flags that are not part of bench.Config.
type benchOptions struct {
	jsonPath string
	plotPath string
	quiet    bool
	maxSize  string // parsed into Config.MaxSize
	levels   string // parsed into Config.Levels
	caFile   string // read into Config.RootCAs
}

// runBench is "cairn bench": it returns the exit status. Ctrl-C (or SIGTERM) ends the
// measured phase; a second one kills the process.
func runBench(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // the next signal kills
	}()
	return runBenchContext(ctx, args, stdout, stderr)
}

// runBenchContext is runBench without the signal handling.
func runBenchContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "compare" {
		return runBenchCompare(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "plot" {
		return runBenchPlot(args[1:], stderr)
	}
	cfg, opts, err := parseBenchArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		benchUsage(stdout)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "cairn bench: %v\n", err)
		return exitUsage
	}
	cfg.Version = versionString()
	if !opts.quiet {
		cfg.Live = isTerminal(stderr)
	}
	var progress io.Writer = stderr
	if opts.quiet {
		progress = nil
	}
	rep, err := bench.Run(ctx, cfg, progress)
	if err != nil {
		fmt.Fprintf(stderr, "cairn bench: %v\n", err)
		if errors.Is(err, bench.ErrInterrupted) {
			return exitInterrupted
		}
		return exitFailed
	}
	return writeBenchOutputs(rep, opts, stdout, stderr)
}

// writeBenchOutputs prints the table and writes the JSON and the plot.
func writeBenchOutputs(rep *bench.Report, opts benchOptions, stdout, stderr io.Writer) int {
	table := stdout
	if opts.jsonPath == "-" {
		table = stderr // stdout carries the JSON
	}
	status := exitOK
	if err := bench.WriteTable(table, rep); err != nil {
		fmt.Fprintf(stderr, "cairn bench: writing the table: %v\n", err)
		status = exitFailed
	}
	if opts.jsonPath != "" {
		if err := bench.WriteJSON(opts.jsonPath, stdout, rep); err != nil {
			fmt.Fprintf(stderr, "cairn bench: writing --json: %v\n", err)
			status = exitFailed
		}
	}
	if opts.plotPath != "" {
		if err := plot.Write(opts.plotPath, rep); err != nil {
			fmt.Fprintf(stderr, "cairn bench: writing --plot: %v\n", err)
			status = exitFailed
		}
	}
	if allFailed(rep) {
		fmt.Fprintln(stderr, "cairn bench: every request of the measured phase failed")
		status = exitFailed
	}
	if rep.Interrupted && status == exitOK {
		status = exitInterrupted
	}
	return status
}

// allFailed says no measured operation succeeded although some were tried.
func allFailed(rep *bench.Report) bool {
	var ok, failed int64
	for _, r := range rep.Results {
		ok += r.Count
		failed += r.Errors
	}
	return ok == 0 && failed > 0
}

// parseBenchArgs parses "WORKLOAD [flags]" (flags may also come first) into a validated
// Config.
func parseBenchArgs(args []string) (bench.Config, benchOptions, error) {
	var cfg bench.Config
	var opts benchOptions
	fs := newBenchFlags(&cfg, &opts)
	var workload string
	rest := args
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		workload, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return cfg, opts, err
	}
	if workload == "" && fs.NArg() > 0 {
		workload = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return cfg, opts, err
		}
	}
	if fs.NArg() > 0 {
		return cfg, opts, fmt.Errorf("unexpected argument %q (flags go after the workload)", fs.Arg(0))
	}
	if workload == "" {
		return cfg, opts, fmt.Errorf("no workload: run \"cairn bench -h\" for the list")
	}
	cfg.Workload = workload
	cfg.AccessKey = firstNonEmpty(cfg.AccessKey, os.Getenv("CAIRN_ACCESS_KEY"), os.Getenv("AWS_ACCESS_KEY_ID"))
	cfg.SecretKey = firstNonEmpty(cfg.SecretKey, os.Getenv("CAIRN_SECRET_KEY"), os.Getenv("AWS_SECRET_ACCESS_KEY"))
	if opts.caFile != "" {
		tc, err := clientTLS(opts.caFile)
		if err != nil {
			return cfg, opts, err
		}
		cfg.RootCAs = tc.RootCAs
	}
	if opts.maxSize != "" {
		n, err := bench.ParseSize(opts.maxSize)
		if err != nil {
			return cfg, opts, fmt.Errorf("bad --max-size: %v", err)
		}
		cfg.MaxSize = n
	}
	if opts.levels != "" {
		levels, err := parseInts(opts.levels)
		if err != nil {
			return cfg, opts, fmt.Errorf("bad --levels %q: want e.g. 1,2,4", opts.levels)
		}
		cfg.Levels = levels
	}
	return cfg, opts, cfg.Validate()
}

// newBenchFlags defines the flags that map directly onto cfg and opts.
func newBenchFlags(cfg *bench.Config, opts *benchOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("cairn bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in one line by the caller
	fs.StringVar(&cfg.Endpoint, "endpoint", firstNonEmpty(os.Getenv("CAIRN_ENDPOINT"), "http://127.0.0.1:9000"), "S3 endpoint URL ($CAIRN_ENDPOINT)")
	fs.StringVar(&cfg.AccessKey, "access-key", "", "access key ($CAIRN_ACCESS_KEY or $AWS_ACCESS_KEY_ID)")
	fs.StringVar(&cfg.SecretKey, "secret-key", "", "secret key ($CAIRN_SECRET_KEY or $AWS_SECRET_ACCESS_KEY)")
	fs.StringVar(&cfg.Region, "region", "us-east-1", "SigV4 region")
	fs.StringVar(&cfg.Bucket, "bucket", "", "bucket to use; created (and deleted afterwards) if missing (default: a new cairn-bench-* bucket)")
	fs.StringVar(&cfg.Prefix, "prefix", "cairn-bench/", "prefix of every key written or read")
	fs.DurationVar(&cfg.Duration, "duration", 0, "length of each measured phase (each level or repetition for spreadshirt-4k and clawio-*)")
	fs.Int64Var(&cfg.Ops, "ops", 0, "operations per measured phase, instead of --duration")
	fs.IntVar(&cfg.Concurrency, "concurrency", 0, "concurrent clients (default: the workload's)")
	fs.IntVar(&cfg.Reps, "reps", 0, "repetitions of each level (clawio-* default 5)")
	fs.IntVar(&cfg.Keys, "keys", 0, "objects prepared, or target keys of clawio-upload (default: the workload's)")
	fs.StringVar(&opts.maxSize, "max-size", "", "cap on object sizes; larger draws are redrawn (afs-sizes default 64MiB)")
	fs.StringVar(&opts.levels, "levels", "", "concurrency levels, e.g. 1,2,4 (spreadshirt-4k, clawio-*)")
	fs.StringVar(&cfg.Size, "size", "", "object size or distribution: 4KiB, 16MiB, leofs, afs, clawio, or 1KiB-10KiB:24,10KiB-100KiB:30,...")
	fs.Float64Var(&cfg.ReadRatio, "read-ratio", 0.9, "share of GETs in mixed")
	fs.IntVar(&cfg.PageSize, "page-size", 1000, "max-keys of each list page")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "random seed for keys and sizes (default: chosen, and reported)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the objects (and a created bucket)")
	fs.BoolVar(&cfg.NoPrepare, "no-prepare", false, "read the objects already under --prefix instead of writing a set first")
	fs.BoolVar(&cfg.NoVerify, "no-verify", false, "do not compare GET bodies with what was written (lengths are still checked)")
	fs.DurationVar(&cfg.Timeout, "timeout", 5*time.Minute, "limit for each request")
	fs.BoolVar(&cfg.Insecure, "insecure", false, "skip TLS certificate verification")
	fs.StringVar(&opts.caFile, "ca-file", os.Getenv("CAIRN_CA_FILE"), "PEM CA certificates to trust for an https endpoint, instead of the system's ($CAIRN_CA_FILE)")
	fs.StringVar(&opts.jsonPath, "json", "", "write all figures as JSON to this file (- for stdout)")
	fs.StringVar(&opts.plotPath, "plot", "", "write a chart: FILE.svg, FILE.html or FILE.png")
	fs.BoolVar(&opts.quiet, "quiet", false, "no progress output")
	return fs
}

// benchUsage prints the help text.
func benchUsage(w io.Writer) {
	fmt.Fprint(w, benchUsageHead, bench.WorkloadHelp(), benchUsageTail)
	var cfg bench.Config
	var opts benchOptions
	fs := newBenchFlags(&cfg, &opts)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// runBenchCompare is "cairn bench compare A.json B.json".
func runBenchCompare(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintln(stderr, "cairn bench: compare wants two JSON reports: cairn bench compare A.json B.json")
		return exitUsage
	}
	var reps [2]*bench.Report
	for i, path := range args {
		r, err := bench.ReadReport(path)
		if err != nil {
			fmt.Fprintf(stderr, "cairn bench: %v\n", err)
			return exitFailed
		}
		reps[i] = r
	}
	if err := bench.WriteComparison(stdout, args[0], reps[0], args[1], reps[1]); err != nil {
		fmt.Fprintf(stderr, "cairn bench: %v\n", err)
		return exitFailed
	}
	return exitOK
}

// runBenchPlot is "cairn bench plot REPORT.json FILE": the chart of a saved run.
func runBenchPlot(args []string, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintln(stderr, "cairn bench: plot wants a JSON report and an output file: cairn bench plot A.json A.svg")
		return exitUsage
	}
	r, err := bench.ReadReport(args[0])
	if err == nil {
		err = plot.Write(args[1], r)
	}
	if err != nil {
		fmt.Fprintf(stderr, "cairn bench: %v\n", err)
		return exitFailed
	}
	return exitOK
}

// parseInts parses "1,2,4".
func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// isTerminal says whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
