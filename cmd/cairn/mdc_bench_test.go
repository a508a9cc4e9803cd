package main

import (
	"context"
	"fmt"
	"sort"
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
func BenchmarkMDC(b *testing.B) {
	const (
		clients = 16
		window  = 5 * time.Second
		backlog = 5000
	)
	a, bb := startSide(b, "a", nil), startSide(b, "b", nil)
	ca, cb := a.p.client(), bb.p.client()
	for _, s := range []*mdcSide{a, bb} {
		s.bucket("bench", false)
		s.bucket("plain", false)
	}
	body := strings.Repeat("x", 1024)
	ctx := context.Background()
	rate := func(bucket, tag string) float64 {
		var n atomic.Int64
		var wg sync.WaitGroup
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
		return float64(n.Load()) / window.Seconds()
	}
	without := rate("plain", "r0")
	// One way, A to B (B --receive-only): both ways, B would send every change back
	// for A to drop (docs/design/mdc.md: echoes).
	bb.link("ab", a.p.URL(), "--receive-only")
	a.link("ab", bb.p.URL(), "--bucket", "bench")
	with := rate("bench", "r1")
	b.ReportMetric(without, "puts/s-without")
	b.ReportMetric(with, "puts/s-with-link")
	b.ReportMetric(with/without, "ratio")
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
	b.ReportMetric(backlog/d.Seconds(), "drain-changes/s")
}
