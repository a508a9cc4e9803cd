// Command listbench measures listing at scale on a cairn server: it loads a bucket of many
// small objects shaped like a directory tree straight through the store API, then starts the
// cairn binary on that data (and on an empty data directory, for comparison) and times
// ListObjectsV2 over HTTP: the first page, a delimiter listing, a page from the middle and a
// full paged scan, checking every answer. It also reports the server's memory. See README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/bench"
	"github.com/cairnfs/cairn/internal/store"
)

// Report is everything a run measured; --json writes it.
type Report struct {
	Date         string   `json:"date"`
	Args         []string `json:"args"`
	CairnBin     string   `json:"cairn_bin"`
	CairnVersion string   `json:"cairn_version"`
	Machine      Machine  `json:"machine"`
	Objects      int      `json:"objects"`
	// CacheBytes is the server's index block cache (--cache-size): the memory listing may
	// fill, which the RSS goal allows for.
	CacheBytes int64        `json:"cache_bytes"`
	Load       *LoadResult  `json:"load"`
	InProcess  Results      `json:"in_process"`
	Full       *ServerRun   `json:"server_with_objects"`
	Empty      *ServerRun   `json:"server_empty"`
	RSSRatio   RSSRatio     `json:"rss_ratio"`
	Goals      []GoalResult `json:"goals"`
	// MetaBytesPerObject is the data directory's size after the server stopped, less the
	// bodies (stored inline in the index), per object.
	MetaBytesPerObject float64 `json:"meta_bytes_per_object"`
}

// RSSRatio is VmRSS with N objects over VmRSS of the empty server.
type RSSRatio struct {
	Startup float64 `json:"after_startup"`
	After   float64 `json:"after_listing"`
	Peak    float64 `json:"peak"`
}

// GoalResult is one target and whether the run met it.
type GoalResult struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Goal  float64 `json:"goal"`
	Unit  string  `json:"unit"`
	Met   bool    `json:"met"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "listbench:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("listbench", flag.ContinueOnError)
	objects := fs.Int("objects", 1_000_000, "number of objects to load")
	dir := fs.String("dir", "", "working directory for the data (default: a new temporary directory)")
	bin := fs.String("cairn", "bin/cairn", "cairn binary (go build -o bin/cairn ./cmd/cairn)")
	jsonOut := fs.String("json", "", "also write the results as JSON to this file")
	workers := fs.Int("workers", 64, "concurrent writers in the load phase")
	reps := fs.Int("reps", 20, "repetitions of each latency measurement")
	scans := fs.Int("scans", 3, "full scans of the bucket per server")
	timeout := fs.Duration("timeout", 30*time.Second, "timeout of every HTTP request")
	readyTimeout := fs.Duration("ready-timeout", 5*time.Minute, "longest wait for the server to start")
	serverArgs := fs.String("server-args", "", "extra arguments for cairn server, e.g. \"--cache-size 8MiB\"")
	settle := fs.Duration("settle", 2*time.Second, "idle time after the server starts, before measuring")
	progress := fs.Duration("progress", 5*time.Second, "load progress interval")
	heads := fs.Int("heads", 20000, "HEADs of random keys to time on the server with objects (0: none)")
	keep := fs.Bool("keep", false, "keep the data directories at the end")
	reuse := fs.Bool("reuse", false, "reuse a bucket loaded by an earlier run with --keep and the same --dir and --objects")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./tools/listbench [flags]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *objects < 1 || *workers < 1 || *reps < 1 || *scans < 1 || *heads < 0 {
		return errors.New("--objects, --workers, --reps and --scans must be at least 1, --heads at least 0")
	}
	caches, err := configuredCaches(strings.Fields(*serverArgs))
	if err != nil {
		return err
	}
	if *reuse && *dir == "" {
		return errors.New("--reuse needs --dir")
	}
	binPath, err := filepath.Abs(*bin)
	if err != nil {
		return err
	}
	if st, err := os.Stat(binPath); err != nil || st.IsDir() {
		return fmt.Errorf("no cairn binary at %s: build it with `go build -o bin/cairn ./cmd/cairn` or pass --cairn", binPath)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// Working directories.
	base := *dir
	if base == "" {
		if base, err = os.MkdirTemp("", "listbench-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(base, 0o755); err != nil {
		return err
	}
	fullDir, emptyDir := filepath.Join(base, "objects"), filepath.Join(base, "empty")
	marker := filepath.Join(base, "objects.loaded")
	if !*keep {
		defer func() {
			os.RemoveAll(fullDir)
			os.RemoveAll(emptyDir)
			os.Remove(marker)
			if *dir == "" {
				os.Remove(base)
			}
		}()
	}
	if err := os.RemoveAll(emptyDir); err != nil {
		return err
	}

	rep := &Report{
		Date:         time.Now().UTC().Format(time.RFC3339),
		Args:         os.Args[1:],
		CairnBin:     binPath,
		CairnVersion: cairnVersion(binPath),
		Machine:      machine(base),
		Objects:      *objects,
		CacheBytes:   caches,
	}
	n := *objects
	fmt.Fprintf(os.Stderr, "listbench: %d objects in %s\n", n, fullDir)
	keys := sortedKeys(n)

	inproc := func(s *store.Store) error {
		fmt.Fprintln(os.Stderr, "in-process store.List measurements")
		return inprocList(s, keys, *reps, &rep.InProcess)
	}
	loaded := false
	if *reuse {
		if data, err := os.ReadFile(marker); err == nil {
			if strings.TrimSpace(string(data)) != strconv.Itoa(n) {
				return fmt.Errorf("%s holds a load of %s objects, not %d", fullDir, strings.TrimSpace(string(data)), n)
			}
			loaded = true
		}
	}
	if loaded {
		fmt.Fprintf(os.Stderr, "reusing the bucket loaded in %s\n", fullDir)
		rep.Load = &LoadResult{Objects: n, Skipped: true}
		if err := openExisting(fullDir, inproc); err != nil {
			return err
		}
	} else {
		if _, err := os.Stat(fullDir); err == nil {
			return fmt.Errorf("%s exists from an earlier run: remove it, or pass --reuse if that run loaded --objects %d", fullDir, n)
		}
		if rep.Load, err = load(ctx, fullDir, n, *workers, *progress, inproc); err != nil {
			return err
		}
		if err := os.WriteFile(marker, []byte(strconv.Itoa(n)+"\n"), 0o644); err != nil {
			return err
		}
	}
	rep.Load.DiskBytes = dirSize(fullDir)
	rep.Load.IndexBytes = dirSize(filepath.Join(fullDir, "index"))

	cfg := benchConfig{bin: binPath, reps: *reps, scans: *scans, timeout: *timeout, settle: *settle, ready: *readyTimeout, serverArgs: strings.Fields(*serverArgs), heads: *heads}
	if rep.Full, err = runServer(ctx, cfg, fullDir, keys, false); err != nil {
		return fmt.Errorf("server with %d objects: %w", n, err)
	}
	if rep.Empty, err = runServer(ctx, cfg, emptyDir, nil, true); err != nil {
		return fmt.Errorf("server with an empty data dir: %w", err)
	}
	rep.evaluate()
	rep.print(os.Stdout)
	if *jsonOut != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	if *keep {
		fmt.Fprintf(os.Stderr, "data kept in %s (rerun with --dir %s --reuse to skip the load)\n", base, base)
	}
	return nil
}

func cairnVersion(bin string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "version").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "cairn"))
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// evaluate computes the RSS ratios and checks the goals. Latency goals are judged on p90.
func (r *Report) evaluate() {
	f, e := r.Full, r.Empty
	r.RSSRatio = RSSRatio{
		Startup: ratio(f.MemStartup.RSSKiB, e.MemStartup.RSSKiB),
		After:   ratio(f.MemAfter.RSSKiB, e.MemAfter.RSSKiB),
		Peak:    ratio(f.MemAfter.PeakKiB, e.MemAfter.PeakKiB),
	}
	lat := func(name, label string, goal float64) {
		if m := f.Results.get(name); m != nil {
			r.Goals = append(r.Goals, GoalResult{Name: label, Value: m.P90Ms, Goal: goal, Unit: "ms", Met: m.P90Ms < goal})
		}
	}
	lat(mFirst, "first page (max-keys=1000), p90 <", 50)
	lat(mDelim, fmt.Sprintf("delimiter listing of %s (%d prefixes), p90 <", delimPrefix, expectedDelimCount(r.Objects)), 20)
	if m := f.Results.get(mScan); m != nil {
		r.Goals = append(r.Goals, GoalResult{Name: "full scan, keys/s >=", Value: m.KeysPerSec, Goal: 50000, Unit: "keys/s", Met: m.KeysPerSec >= 50000})
	}
	r.Goals = append(r.Goals, GoalResult{Name: "RSS with objects / RSS empty (after listing) <=", Value: r.RSSRatio.After, Goal: 1.5, Unit: "x", Met: r.RSSRatio.After <= 1.5})
	// Issue 22's form of the memory goal: what listing adds to the settled server is at
	// most the index block cache plus 32 MiB.
	grown := float64(f.MemAfter.RSSKiB-f.MemStartup.RSSKiB) / 1024
	budget := float64(r.CacheBytes)/(1<<20) + 32
	r.Goals = append(r.Goals, GoalResult{Name: fmt.Sprintf("RSS growth from settled to after listing (block cache %.0f MiB + 32 MiB) <=", float64(r.CacheBytes)/(1<<20)), Value: grown, Goal: budget, Unit: "MiB", Met: grown <= budget})
	if r.Objects > 0 && f.DataDirBytes > 0 {
		var bodies int64
		for i := range r.Objects {
			bodies += int64(bodySize(i))
		}
		per := float64(f.DataDirBytes-bodies) / float64(r.Objects)
		r.MetaBytesPerObject = per
		r.Goals = append(r.Goals, GoalResult{Name: "data dir bytes per object, less the inline bodies, <=", Value: per, Goal: 200, Unit: "B", Met: per <= 200})
	}
}

// configuredCaches returns the index block cache size the server runs with: the
// --cache-size among args, or cairn's default (64 MiB).
func configuredCaches(args []string) (int64, error) {
	v := "64MiB"
	for i, a := range args {
		switch {
		case a == "--cache-size" || a == "-cache-size":
			if i+1 < len(args) {
				v = args[i+1]
			}
		case strings.HasPrefix(a, "--cache-size="):
			v = strings.TrimPrefix(a, "--cache-size=")
		}
	}
	n, err := bench.ParseSize(v)
	if err != nil {
		return 0, fmt.Errorf("--server-args: --cache-size: %w", err)
	}
	return n, nil
}
