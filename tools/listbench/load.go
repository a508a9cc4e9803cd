package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store"
)

// LoadResult describes the load phase.
type LoadResult struct {
	Objects    int     `json:"objects"`
	BodyBytes  int64   `json:"body_bytes"`
	Workers    int     `json:"workers"`
	Seconds    float64 `json:"seconds"`
	PerSecond  float64 `json:"objects_per_second"`
	CloseSec   float64 `json:"close_seconds"`
	Commits    int64   `json:"index_commits"`
	PerCommit  float64 `json:"writes_per_commit"`
	DiskBytes  int64   `json:"data_dir_bytes"`
	IndexBytes int64   `json:"index_bytes"`
	Skipped    bool    `json:"skipped,omitempty"`
}

// quietLogger drops the store's info chatter; warnings and errors still reach stderr.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// load creates bucketName in a new store in dir and writes n objects with workers
// goroutines, printing progress to stderr every interval. Before closing the store it runs
// the in-process listing measurements (inproc), if not nil.
func load(ctx context.Context, dir string, n, workers int, interval time.Duration, inproc func(*store.Store) error) (*LoadResult, error) {
	var commits, batches atomic.Int64
	s, err := store.Open(store.Config{Dir: dir, Logger: quietLogger(), OnCommit: func(b int) {
		commits.Add(1)
		batches.Add(int64(b))
	}})
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	if err := s.CreateBucket(bucketName); err != nil {
		return nil, fmt.Errorf("create bucket: %w", err)
	}

	// One random buffer; object i's body is a slice of it at an offset derived from i.
	src := make([]byte, 1<<16)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = byte(r.Uint32())
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next, done atomic.Int64
	var bodyBytes atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				size := bodySize(i)
				off := (i * 7919) % (len(src) - 128)
				body := src[off : off+size]
				meta := &object.Object{ContentType: "application/octet-stream"}
				opts := object.PutOptions{Finish: func(o *object.Object) error {
					sum := md5.Sum(body)
					o.ETag = hex.EncodeToString(sum[:])
					return nil
				}}
				if _, err := s.PutObject(ctx, bucketName, keyOf(i), meta, bytes.NewReader(body), int64(size), opts); err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("put %s: %w", keyOf(i), err) })
					cancel()
					return
				}
				bodyBytes.Add(int64(size))
				done.Add(1)
			}
		}()
	}

	// Progress.
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		t := time.NewTicker(interval)
		defer t.Stop()
		last, lastT, lastC, lastB := int64(0), start, int64(0), int64(0)
		for {
			select {
			case <-stopProgress:
				return
			case now := <-t.C:
				d := done.Load()
				c, b := commits.Load(), batches.Load()
				group := 0.0
				if c > lastC {
					group = float64(b-lastB) / float64(c-lastC)
				}
				lastC, lastB = c, b
				rate := float64(d-last) / now.Sub(lastT).Seconds()
				avg := float64(d) / now.Sub(start).Seconds()
				eta := "?"
				if avg > 0 {
					eta = (time.Duration(float64(int64(n)-d)/avg) * time.Second).Round(time.Second).String()
				}
				fmt.Fprintf(os.Stderr, "load: %d/%d objects (%.1f%%)  %.0f obj/s now, %.0f obj/s average, %.1f writes per commit, ETA %s\n",
					d, n, 100*float64(d)/float64(n), rate, avg, group, eta)
				last, lastT = d, now
			}
		}
	}()
	wg.Wait()
	close(stopProgress)
	<-progressDone
	elapsed := time.Since(start)
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("load interrupted after %d objects: %w", done.Load(), err)
	}
	res := &LoadResult{
		Objects:   n,
		BodyBytes: bodyBytes.Load(),
		Workers:   workers,
		Seconds:   elapsed.Seconds(),
		PerSecond: float64(n) / elapsed.Seconds(),
		Commits:   commits.Load(),
	}
	if res.Commits > 0 {
		res.PerCommit = float64(batches.Load()) / float64(res.Commits)
	}
	fmt.Fprintf(os.Stderr, "load: %d objects in %.1fs = %.0f obj/s\n", n, res.Seconds, res.PerSecond)
	if inproc != nil {
		if err := inproc(s); err != nil {
			return nil, err
		}
	}
	t0 := time.Now()
	closed = true
	if err := s.Close(); err != nil {
		return nil, fmt.Errorf("close store: %w", err)
	}
	res.CloseSec = time.Since(t0).Seconds()
	return res, nil
}

// openExisting opens an already loaded store for the in-process measurements.
func openExisting(dir string, inproc func(*store.Store) error) error {
	s, err := store.Open(store.Config{Dir: dir, Logger: quietLogger()})
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	err = inproc(s)
	if cerr := s.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close store: %w", cerr)
	}
	return err
}

// inprocList measures store.List directly (no HTTP, no XML, no signing): the share of the
// HTTP latencies that is the index itself.
func inprocList(s *store.Store, keys []string, reps int, res *Results) error {
	n := len(keys)
	list := func(opts object.ListOptions) (*object.ListResult, time.Duration, error) {
		t := time.Now()
		r, err := s.List(bucketName, opts)
		return r, time.Since(t), err
	}
	var first, delim, mid []time.Duration
	for range reps {
		r, d, err := list(object.ListOptions{Max: 1000})
		if err != nil {
			return fmt.Errorf("in-process list: %w", err)
		}
		if len(r.Objects) != min(n, 1000) {
			return fmt.Errorf("in-process first page: %d keys, want %d", len(r.Objects), min(n, 1000))
		}
		first = append(first, d)
		r, d, err = list(object.ListOptions{Prefix: delimPrefix, Delimiter: "/", Max: 1000})
		if err != nil {
			return fmt.Errorf("in-process list: %w", err)
		}
		if len(r.CommonPrefixes) != expectedDelimCount(n) {
			return fmt.Errorf("in-process delimiter listing: %d common prefixes, want %d", len(r.CommonPrefixes), expectedDelimCount(n))
		}
		delim = append(delim, d)
		r, d, err = list(object.ListOptions{After: keys[n/2], Max: 1000})
		if err != nil {
			return fmt.Errorf("in-process list: %w", err)
		}
		if want := min(1000, n-n/2-1); len(r.Objects) != want {
			return fmt.Errorf("in-process middle listing: %d keys, want %d", len(r.Objects), want)
		}
		mid = append(mid, d)
	}
	res.add(latency("first page, 1000 keys", first))
	res.add(latency(fmt.Sprintf("delimiter %q, %d prefixes", delimPrefix, expectedDelimCount(n)), delim))
	res.add(latency("start-after middle key, 1000 keys", mid))

	// One full scan.
	t := time.Now()
	var pages []time.Duration
	after, count := "", 0
	for {
		r, d, err := list(object.ListOptions{After: after, Max: 1000})
		if err != nil {
			return fmt.Errorf("in-process scan: %w", err)
		}
		pages = append(pages, d)
		for _, e := range r.Objects {
			if count >= n || e.Key != keys[count] {
				return fmt.Errorf("in-process scan: key %d is %q, want %q", count, e.Key, at(keys, count))
			}
			count++
		}
		if !r.Truncated {
			break
		}
		after = r.Next
	}
	if count != n {
		return fmt.Errorf("in-process scan: %d keys, want %d", count, n)
	}
	res.add(scan("full scan (1000-key pages)", count, time.Since(t), pages, 0))
	return nil
}

func at(keys []string, i int) string {
	if i < len(keys) {
		return keys[i]
	}
	return "(end)"
}

// dirSize is the total size of the regular files under dir.
func dirSize(dir string) int64 {
	var total int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				total += fi.Size()
			}
		}
		return nil
	})
	return total
}
