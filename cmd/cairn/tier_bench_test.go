package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/internal/sigv4"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// BenchmarkTier measures, in one run on this machine (docs/benchmarks.md "Tiering"):
// the disk's sequential write rate (a file written and fsynced in the test's directory),
// the migration rate of a node past its high mark to a second cairn on the same disk,
// and the first-byte latency of a GET that recalls an archived object against a GET of a
// local one. It writes a few hundred MiB and takes a minute: run it once, with
// -benchtime 1x (a larger b.N would only repeat the same measurement).
func BenchmarkTier(b *testing.B) {
	t := b
	const (
		objSize = 4 << 20
		objects = 48 // 192 MiB
	)
	dir := t.TempDir()
	// The disk's sequential write rate: 192 MiB in 4 MiB writes, then fsync.
	buf := bytes.Repeat([]byte("0123456789abcdef"), objSize/16)
	f, err := os.Create(filepath.Join(dir, "seq"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for range objects {
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	seq := float64(objects*objSize) / time.Since(start).Seconds()
	f.Close()
	os.Remove(f.Name())

	remote := startProc(t, t.TempDir())
	ctx := context.Background()
	if _, err := remote.client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("archive")}); err != nil {
		t.Fatal(err)
	}
	tc := startCluster(t, 1, "--device-class", "ssd", "--capacity", fmt.Sprintf("%dMiB", objects*4*2), "--tier-check", "100ms", "--recovery-rate", "0")
	if out, err := tc.tierAdmin(0, testSecret, "tier", "add", "remote", "--endpoint", remote.URL(), "--bucket", "archive", "--access-key", testAccess, "--recall", "transparent"); err != nil {
		t.Fatalf("tier add: %v\n%s", err, out)
	}
	tc.createBucket(0, "data")
	c := tc.procs[0].client()
	for i := range objects {
		buf[0] = byte(i)
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("data"), Key: aws.String(fmt.Sprintf("k%03d", i)), Body: bytes.NewReader(buf)}); err != nil {
			t.Fatal(err)
		}
	}
	// 50 % used: marks 40/5 move about 90 % of it.
	start = time.Now()
	if out, err := tc.tierAdmin(0, "", "tier", "marks", "ssd", "--high", "40", "--low", "5", "--tier", "remote"); err != nil {
		t.Fatalf("tier marks: %v\n%s", err, out)
	}
	var done int64
	proctest.WaitFor(t, 5*time.Minute, func() error {
		st, err := tc.tierStatus(0)
		if err != nil {
			return err
		}
		if st.Migrating || st.OverHigh || st.BytesDone == 0 {
			return fmt.Errorf("migrating: %+v", st)
		}
		done = st.BytesDone
		return nil
	})
	took := time.Since(start)
	if out, err := tc.tierAdmin(0, "", "tier", "marks", "ssd", "--high", "40", "--low", "5", "--tier", "remote", "--pause"); err != nil {
		t.Fatalf("pause: %v\n%s", err, out)
	}
	mig := float64(done) / took.Seconds()
	b.ReportMetric(seq/(1<<20), "disk-MiB/s")
	b.ReportMetric(mig/(1<<20), "migration-MiB/s")
	b.ReportMetric(100*mig/seq, "%-of-disk")
	t.Logf("disk sequential write: %.0f MiB/s; migration: %d MiB in %s = %.0f MiB/s (%.0f %% of the disk's rate; the time includes up to one --tier-check tick)",
		seq/(1<<20), done>>20, took.Round(time.Millisecond), mig/(1<<20), 100*mig/seq)

	// First byte: a GET that recalls (the oldest objects are archived) against a GET of a
	// local object (the newest are local, and so are the recalled ones afterwards).
	firstByte := func(key string) time.Duration {
		req, _ := http.NewRequest(http.MethodGet, tc.procs[0].URL()+"/data/"+key, nil)
		sigv4.SignRequest(req, testAccess, testSecret, "us-east-1", "UNSIGNED-PAYLOAD", time.Now())
		t0 := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var one [1]byte
		if _, err := io.ReadFull(resp.Body, one[:]); err != nil || resp.StatusCode != 200 {
			t.Fatalf("get %s: %s %v", key, resp.Status, err)
		}
		d := time.Since(t0)
		io.Copy(io.Discard, resp.Body)
		return d
	}
	var recalled, local []time.Duration
	for i := range 10 {
		recalled = append(recalled, firstByte(fmt.Sprintf("k%03d", i)))
		local = append(local, firstByte(fmt.Sprintf("k%03d", objects-1-i%2)))
	}
	med := func(d []time.Duration) time.Duration {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	b.ReportMetric(float64(med(recalled).Microseconds())/1000, "recall-first-byte-ms")
	b.ReportMetric(float64(med(local).Microseconds())/1000, "local-first-byte-ms")
	t.Logf("first byte of a 4 MiB GET: recall from the tier median %s (max %s), local median %s (max %s)",
		med(recalled), recalled[len(recalled)-1], med(local), local[len(local)-1])
}
