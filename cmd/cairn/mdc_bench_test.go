package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// BenchmarkMDC measures, in one run on two single-node clusters on this machine
// (docs/benchmarks.md "Multi-data-center replication"): the PUT rate of 1 KiB objects
// with 16 clients without a link and with a link active (same run, so the ratio holds
// whatever the machine's load), the replication lag (PUT acknowledged on A to the object
// visible on B) at half the single-cluster rate, and the time to drain a backlog
// stacked while the link was paused. Run it once: -benchtime 1x.
//
// Both clusters share this machine's cores, so the CPU each process spent per PUT in
// each window is reported too (cpu-ms/put-a-*: the sender's cost, -b: the receiver's).
// The environment may change the run:
//
//	CAIRN_BENCH_MDC_BACKLOG=N   the backlog drained (default 5,000)
//	CAIRN_BENCH_MDC_BOTH=1      the link both ways (B sends too; A's changes must not
//	                            come back: they carry their origin)
//	CAIRN_BENCH_MDC_PPROF=FILE  A's CPU profile of the window with the link into FILE (and
//	                            of the window without it into FILE.without), B's into
//	                            FILE.b
func BenchmarkMDC(b *testing.B) {
	const (
		clients = 16
		window  = 5 * time.Second
	)
	backlog := 5000
	if v := os.Getenv("CAIRN_BENCH_MDC_BACKLOG"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("CAIRN_BENCH_MDC_BACKLOG=%q: a count of changes", v)
		}
		backlog = n
	}
	profile := os.Getenv("CAIRN_BENCH_MDC_PPROF")
	var aArgs []string
	if profile != "" {
		aArgs = append(aArgs, "--pprof")
	}
	a, bb := startSide(b, "a", nil, aArgs...), startSide(b, "b", nil, aArgs...)
	ca, cb := a.p.client(), bb.p.client()
	for _, s := range []*mdcSide{a, bb} {
		s.bucket("bench", false)
		s.bucket("plain", false)
	}
	body := strings.Repeat("x", 1024)
	ctx := context.Background()
	// rate runs the PUT window, profiling A into file if asked; it returns the PUT rate
	// and the CPU A and B spent per PUT.
	rate := func(bucket, tag, file string) (float64, float64, float64) {
		var n atomic.Int64
		var wg sync.WaitGroup
		if profile != "" {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := fetchProfile(a.p.AdminAddr(), window-time.Second, file); err != nil {
					b.Error(err)
				}
			}()
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := fetchProfile(bb.p.AdminAddr(), window-time.Second, file+".b"); err != nil {
					b.Error(err)
				}
			}()
		}
		cpuA, cpuB := cpuTime(b, a.p.PID()), cpuTime(b, bb.p.PID())
		end := time.Now().Add(window)
		for w := 0; w < clients; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; time.Now().Before(end); i++ {
					if _, err := ca.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(fmt.Sprintf("%s/%d/%d", tag, w, i)), Body: strings.NewReader(body)}); err != nil {
						b.Error(err)
						return
					}
					n.Add(1)
				}
			}()
		}
		wg.Wait()
		puts := float64(n.Load())
		cpuA, cpuB = cpuTime(b, a.p.PID())-cpuA, cpuTime(b, bb.p.PID())-cpuB
		return puts / window.Seconds(), float64(cpuA.Milliseconds()) / puts, float64(cpuB.Milliseconds()) / puts
	}
	without, aWithout, bWithout := rate("plain", "r0", profile+".without")
	// One way, A to B (B --receive-only), or both ways: B then stacks nothing of what it
	// applies from A (docs/design/mdc.md "Loops").
	if os.Getenv("CAIRN_BENCH_MDC_BOTH") == "1" {
		bb.link("ab", a.p.URL(), "--bucket", "bench")
	} else {
		bb.link("ab", a.p.URL(), "--receive-only")
	}
	a.link("ab", bb.p.URL(), "--bucket", "bench")
	with, aWith, bWith := rate("bench", "r1", profile)
	b.ReportMetric(without, "puts/s-without")
	b.ReportMetric(with, "puts/s-with-link")
	b.ReportMetric(with/without, "ratio")
	b.ReportMetric(aWithout, "cpu-ms/put-a-without")
	b.ReportMetric(aWith, "cpu-ms/put-a-with")
	b.ReportMetric(bWithout, "cpu-ms/put-b-without")
	b.ReportMetric(bWith, "cpu-ms/put-b-with")
	// Let the link catch up before measuring lag.
	proctest.WaitFor(b, 5*time.Minute, func() error {
		if n, err := count(cb, "bench", "r1/"); err != nil || float64(n) < with*window.Seconds() {
			return fmt.Errorf("%d on b (%v)", n, err)
		}
		return nil
	})

	// Lag at half the rate: one PUT every 2/without seconds, each polled on B.
	interval := time.Duration(float64(time.Second) * 2 / without)
	var mu sync.Mutex
	var lags []time.Duration
	var wg sync.WaitGroup
	tick := time.NewTicker(interval)
	stop := time.Now().Add(window)
	for i := 0; time.Now().Before(stop); i++ {
		<-tick.C
		k := fmt.Sprintf("lag/%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := ca.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bench"), Key: aws.String(k), Body: strings.NewReader(body)}); err != nil {
				b.Error(err)
				return
			}
			// The lag: HEADs on the remote every 2 ms (the measurement's resolution; a
			// backing-off wait would blur it) until the key is there, for at most a minute.
			acked := time.Now()
			poll := time.NewTicker(2 * time.Millisecond)
			defer poll.Stop()
			deadline := time.After(time.Minute)
			for {
				if _, err := cb.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("bench"), Key: aws.String(k)}); err == nil {
					mu.Lock()
					lags = append(lags, time.Since(acked))
					mu.Unlock()
					return
				}
				select {
				case <-poll.C:
				case <-deadline:
					b.Errorf("%s not on b after a minute", k)
					return
				}
			}
		}()
	}
	tick.Stop()
	wg.Wait()
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	if len(lags) > 0 {
		b.ReportMetric(float64(lags[len(lags)/2].Milliseconds()), "lag-p50-ms")
		b.ReportMetric(float64(lags[len(lags)*99/100].Milliseconds()), "lag-p99-ms")
	}

	// A backlog stacked while paused, then drained.
	a.mustMDC("", "pause", "ab")
	var wg2 sync.WaitGroup
	for w := 0; w < clients; w++ {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			for i := w; i < backlog; i += clients {
				if _, err := ca.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bench"), Key: aws.String(fmt.Sprintf("drain/%d", i)), Body: strings.NewReader(body)}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg2.Wait()
	start := time.Now()
	a.mustMDC("", "resume", "ab")
	proctest.WaitFor(b, 10*time.Minute, func() error {
		if n, err := count(cb, "bench", "drain/"); err != nil || n < backlog {
			return fmt.Errorf("%d of %d on b (%v)", n, backlog, err)
		}
		return nil
	})
	d := time.Since(start)
	b.ReportMetric(d.Seconds(), "drain-s")
	b.ReportMetric(float64(backlog)/d.Seconds(), "drain-changes/s")
	b.ReportMetric(float64(backlog), "backlog")
}

// cpuTime returns the CPU time (user and system) process pid has used so far.
func cpuTime(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// The fields after the command's closing parenthesis: state is field 3, utime 14,
	// stime 15, in clock ticks (100 a second on Linux).
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(f) < 13 {
		tb.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// fetchProfile writes a CPU profile of d of the server at admin (--pprof) to file.
func fetchProfile(admin string, d time.Duration, file string) error {
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", admin, int(d.Seconds())))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile: %s", resp.Status)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(file, data, 0o644)
}
