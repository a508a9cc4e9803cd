package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Names of the HTTP measurements (the same on both servers, so the report lines them up).
const (
	mCold   = "first page, cold (1st request)"
	mFirst  = "first page, max-keys=1000"
	mDelim  = "delimiter, prefix " + delimPrefix
	mTop    = "delimiter, top level"
	mMiddle = "start-after middle key"
	mScan   = "full scan, 1000-key pages"
	mHead   = "HEAD of random keys"
)

// headWorkers is how many HEADs are in flight at once in the HEAD measurement.
const headWorkers = 8

// ServerRun is what one server process did.
type ServerRun struct {
	DataDir      string  `json:"data_dir"`
	Objects      int     `json:"objects"`
	StartupSec   float64 `json:"startup_seconds"`
	SettleCPUSec float64 `json:"settle_cpu_seconds"`
	MemReady     Memory  `json:"memory_ready"`
	MemStartup   Memory  `json:"memory_after_startup"`
	MemAfter     Memory  `json:"memory_after_listing"`
	// MemSteps is VmRSS after each measurement, in order.
	MemSteps       []MemStep `json:"rss_steps"`
	GoMemStartup   GoMemory  `json:"go_memory_after_startup"`
	GoMemAfter     GoMemory  `json:"go_memory_after_listing"`
	DataDirBytes   int64     `json:"data_dir_bytes_after_stop"`
	IndexDirBytes  int64     `json:"index_bytes_after_stop"`
	ListingCPUSec  float64   `json:"listing_cpu_seconds"`
	StopSec        float64   `json:"stop_seconds"`
	StopError      string    `json:"stop_error,omitempty"`
	LogProblems    []string  `json:"log_problems,omitempty"`
	Results        Results   `json:"results"`
	settleDuration time.Duration
}

type benchConfig struct {
	bin     string
	reps    int
	scans   int
	timeout time.Duration
	settle  time.Duration
	ready   time.Duration
	// serverArgs are extra arguments for "cairn server".
	serverArgs []string
	// heads is how many HEADs of random keys to time (0: none).
	heads int
}

// runServer starts the server on dataDir, measures the listings of an n-object bucket
// whose keys in order are keys (creating the bucket first if create), and stops it.
func runServer(ctx context.Context, cfg benchConfig, dataDir string, keys []string, create bool) (*ServerRun, error) {
	run := &ServerRun{DataDir: dataDir, Objects: len(keys), settleDuration: cfg.settle}
	p, startup, err := startServer(ctx, cfg.bin, dataDir, cfg.ready, cfg.serverArgs)
	if err != nil {
		return nil, err
	}
	defer p.Kill()
	run.StartupSec = startup.Seconds()
	pid := p.PID()
	if run.MemReady, err = procMemory(pid); err != nil {
		return nil, err
	}
	// Let the server settle (background index compactions after a bulk load, ...) and see
	// whether it is busy meanwhile.
	cpu0 := procCPU(pid)
	select {
	case <-time.After(cfg.settle):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	run.SettleCPUSec = (procCPU(pid) - cpu0).Seconds()
	if run.MemStartup, err = procMemory(pid); err != nil {
		return nil, err
	}
	if run.GoMemStartup, err = p.goMemory(ctx, cfg.timeout); err != nil {
		return nil, fmt.Errorf("server metrics: %w", err)
	}
	fmt.Fprintf(os.Stderr, "server on %s: ready in %.2fs, RSS %.1f MiB\n", dataDir, run.StartupSec, float64(run.MemStartup.RSSKiB)/1024)

	c := newClient(p.S3Addr(), cfg.timeout)
	defer c.close()
	if create {
		if err := c.createBucket(ctx, bucketName); err != nil {
			return nil, fmt.Errorf("create bucket: %w", err)
		}
	}
	cpu1 := procCPU(pid)
	step := func(after string) {
		if m, err := procMemory(pid); err == nil {
			run.MemSteps = append(run.MemSteps, MemStep{After: after, RSSKiB: m.RSSKiB})
		}
	}
	if err := measureHTTP(ctx, c, cfg, pid, keys, &run.Results, step); err != nil {
		p.stop()
		return nil, fmt.Errorf("%w\nserver log (tail):\n%s", err, p.LogTail(20))
	}
	run.ListingCPUSec = (procCPU(pid) - cpu1).Seconds()
	if run.MemAfter, err = procMemory(pid); err != nil {
		return nil, err
	}
	if run.GoMemAfter, err = p.goMemory(ctx, cfg.timeout); err != nil {
		return nil, fmt.Errorf("server metrics: %w", err)
	}
	c.close()
	d, err := p.stop()
	run.StopSec = d.Seconds()
	if err != nil {
		run.StopError = err.Error()
	}
	run.LogProblems = p.problems()
	run.DataDirBytes = dirSize(dataDir)
	run.IndexDirBytes = dirSize(filepath.Join(dataDir, "index"))
	return run, nil
}

// MemStep is the server's VmRSS after a measurement.
type MemStep struct {
	After  string `json:"after"`
	RSSKiB int64  `json:"vm_rss_kib"`
}

// measureHTTP runs the HTTP measurements, calling step with each one's name after it.
func measureHTTP(ctx context.Context, c *client, cfg benchConfig, pid int, keys []string, res *Results, step func(string)) error {
	n := len(keys)
	progress := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "  http (%d objects): "+format+"\n", append([]any{n}, args...)...)
	}

	// The first request of each kind is also decoded with encoding/xml (strict), to check
	// the fast decoder; the timing never includes decoding.
	firstPage := func(strict bool) (time.Duration, error) {
		page, d, err := c.list(ctx, bucketName, listParams{maxKeys: 1000}, strict)
		if err != nil {
			return 0, err
		}
		if err := checkKeys("first page", page, keys, 0, min(n, 1000), n > 1000); err != nil {
			return 0, err
		}
		return d, nil
	}

	// The very first listing of the process: nothing of the bucket in its caches yet.
	d, err := firstPage(true)
	if err != nil {
		return err
	}
	res.add(latency(mCold, []time.Duration{d}))
	step(mCold)

	var ds []time.Duration
	for i := range cfg.reps {
		d, err := firstPage(i == 0)
		if err != nil {
			return err
		}
		ds = append(ds, d)
	}
	res.add(latency(mFirst, ds))
	step(mFirst)
	progress("first page: median %.2f ms", res.get(mFirst).MedianMs)

	// Delimiter listing of one dir: its subs as common prefixes, exactly.
	ds = ds[:0]
	for i := range cfg.reps {
		page, d, err := c.list(ctx, bucketName, listParams{prefix: delimPrefix, delimiter: "/", maxKeys: 1000}, i == 0)
		if err != nil {
			return err
		}
		want := expectedDelimCount(n)
		if len(page.CommonPrefixes) != want || len(page.Contents) != 0 || page.IsTruncated {
			return fmt.Errorf("delimiter listing of %q: %d common prefixes and %d keys (truncated %v), want %d prefixes",
				delimPrefix, len(page.CommonPrefixes), len(page.Contents), page.IsTruncated, want)
		}
		for i, cp := range page.CommonPrefixes {
			if w := fmt.Sprintf("%ssub%02d/", delimPrefix, i); cp.Prefix != w {
				return fmt.Errorf("delimiter listing of %q: prefix %d is %q, want %q", delimPrefix, i, cp.Prefix, w)
			}
		}
		ds = append(ds, d)
	}
	res.add(latency(mDelim, ds))
	step(mDelim)
	progress("delimiter %s: median %.2f ms", delimPrefix, res.get(mDelim).MedianMs)

	// Delimiter listing at the top: one seek per top-level dir.
	ds = ds[:0]
	for i := range cfg.reps {
		page, d, err := c.list(ctx, bucketName, listParams{delimiter: "/", maxKeys: 1000}, i == 0)
		if err != nil {
			return err
		}
		want := expectedTopDirs(n)
		if len(page.CommonPrefixes) != want || len(page.Contents) != 0 || page.IsTruncated {
			return fmt.Errorf("top-level delimiter listing: %d common prefixes and %d keys (truncated %v), want %d prefixes",
				len(page.CommonPrefixes), len(page.Contents), page.IsTruncated, want)
		}
		ds = append(ds, d)
	}
	res.add(latency(mTop, ds))
	step(mTop)
	progress("top-level delimiter: median %.2f ms", res.get(mTop).MedianMs)

	// A page from the middle.
	after, from := "dir500/", 0
	if n > 0 {
		after, from = keys[n/2], n/2+1
	}
	ds = ds[:0]
	for i := range cfg.reps {
		page, d, err := c.list(ctx, bucketName, listParams{startAfter: after, maxKeys: 1000}, i == 0)
		if err != nil {
			return err
		}
		to := min(n, from+1000)
		if err := checkKeys("start-after "+after, page, keys, from, to, to < n); err != nil {
			return err
		}
		ds = append(ds, d)
	}
	res.add(latency(mMiddle, ds))
	step(mMiddle)
	progress("start-after middle: median %.2f ms", res.get(mMiddle).MedianMs)

	// Full scans following continuation tokens.
	var walls, cpus []time.Duration
	var pages [][]time.Duration
	for s := range cfg.scans {
		cpu0 := procCPU(pid)
		start := time.Now()
		var pds []time.Duration
		token, count := "", 0
		for {
			page, d, err := c.list(ctx, bucketName, listParams{token: token, maxKeys: 1000}, token == "")
			if err != nil {
				return fmt.Errorf("scan after %d keys: %w", count, err)
			}
			pds = append(pds, d)
			if err := checkKeys(fmt.Sprintf("scan page %d", len(pds)), page, keys, count, min(n, count+1000), count+1000 < n); err != nil {
				return err
			}
			count += len(page.Contents)
			if !page.IsTruncated {
				break
			}
			token = page.NextContinuationToken
		}
		wall := time.Since(start)
		if count != n {
			return fmt.Errorf("full scan listed %d keys, want %d", count, n)
		}
		walls, pages, cpus = append(walls, wall), append(pages, pds), append(cpus, procCPU(pid)-cpu0)
		step(fmt.Sprintf("%s %d", mScan, s+1))
		progress("full scan %d/%d: %d keys in %.2fs = %.0f keys/s", s+1, cfg.scans, count, wall.Seconds(), float64(count)/wall.Seconds())
	}
	res.add(mergeScans(mScan, n, walls, pages, cpus))
	if n == 0 || cfg.heads == 0 {
		return nil
	}

	// HEADs of random keys, headWorkers at a time: the metadata lookup rate with the
	// index far larger than its cache (each key is read once or not at all).
	var mu sync.Mutex
	var hds []time.Duration
	var failed error
	next := atomic.Int64{}
	start := time.Now()
	var wg sync.WaitGroup
	for w := range headWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 0x68656164))
			var mine []time.Duration
			for next.Add(1) <= int64(cfg.heads) {
				key := keys[r.IntN(n)]
				size, d, err := c.head(ctx, bucketName, key)
				if err == nil && size != int64(bodySize(fileNum(key))) {
					err = fmt.Errorf("HEAD %s: size %d, want %d", key, size, bodySize(fileNum(key)))
				}
				if err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
					return
				}
				mine = append(mine, d)
			}
			mu.Lock()
			hds = append(hds, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if failed != nil {
		return failed
	}
	m := latency(mHead, hds)
	m.OpsPerSec = float64(len(hds)) / wall.Seconds()
	res.add(m)
	step(mHead)
	progress("%d HEADs of random keys, %d at a time: %.0f/s, median %.2f ms", len(hds), headWorkers, m.OpsPerSec, m.MedianMs)
	return nil
}

// checkKeys checks that page holds exactly keys[from:to] and no common prefixes, and
// whether it says it is truncated.
func checkKeys(what string, page *listPage, keys []string, from, to int, truncated bool) error {
	if len(page.CommonPrefixes) != 0 {
		return fmt.Errorf("%s: %d unexpected common prefixes", what, len(page.CommonPrefixes))
	}
	if len(page.Contents) != to-from {
		return fmt.Errorf("%s: %d keys, want %d", what, len(page.Contents), to-from)
	}
	for i, e := range page.Contents {
		if e.Key != keys[from+i] {
			return fmt.Errorf("%s: key %d is %q, want %q", what, from+i, e.Key, keys[from+i])
		}
		if want := bodySize(fileNum(e.Key)); e.Size != int64(want) {
			return fmt.Errorf("%s: %s has size %d, want %d", what, e.Key, e.Size, want)
		}
	}
	if page.IsTruncated != truncated {
		return fmt.Errorf("%s: IsTruncated %v, want %v", what, page.IsTruncated, truncated)
	}
	return nil
}
