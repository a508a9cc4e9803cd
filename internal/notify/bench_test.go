package notify_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/internal/notify"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// BenchmarkPutNotify: 4 KiB PUTs through the S3 API (aws-sdk-go-v2, 16 clients) to two
// stores in the same process, one without notifications and one whose every PUT is
// matched and sent to a Redis list (a real redis-server, the Deliverer running), in
// alternating chunks of 250 PUTs (each first half the time) so that the machine's load falls on both alike. b.N PUTs
// go to each. Reports both rates, their ratio and the events delivered per second of the whole run (both halves, and until the last event was delivered).
//
//	go test -run '^$' -bench BenchmarkPutNotify -benchtime 8000x -count 3 ./internal/notify/
func BenchmarkPutNotify(b *testing.B) {
	rd := testutil.StartRedis(b)
	doc := `<NotificationConfiguration><QueueConfiguration><Id>all</Id><Queue>` + notify.QueueARN("jobs") +
		`</Queue><Event>s3:ObjectCreated:*</Event></QueueConfiguration></NotificationConfiguration>`
	_, canon, err := notify.Parse([]byte(doc), func(string) bool { return true })
	if err != nil {
		b.Fatal(err)
	}
	// As the server's: the configuration comes from memory (the map), not the index.
	stk := &notify.Stacker{Doc: func(string) string { return string(canon) }}
	var d atomic.Pointer[notify.Deliverer]
	on := store.Config{Reserve: 1, Outbox: func(bk, k string, o *object.Object) [][]byte { return stk.Entries(bk, k, o) },
		OnOutbox: func() {
			if x := d.Load(); x != nil {
				x.Kick()
			}
		}}
	srvOff := testutil.StartServer(b, store.Config{Reserve: 1}, nil)
	srvOn := testutil.StartServer(b, on, nil)
	jobs, err := notify.Open(notify.TargetSpec{Name: "jobs", Redis: rd.Addr, List: "bench-events", Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer jobs.Close()
	d.Store(notify.New(notify.Config{Outbox: srvOn.Store, Target: func(string) (notify.Target, bool) { return jobs, true }, Logger: testutil.NewLogger(b)}))
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Load().Run(rctx); close(done) }()
	defer func() { cancel(); <-done }()

	ctx := context.Background()
	client := func(url string) *s3.Client {
		c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(url), UsePathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider(testutil.AccessKey, testutil.SecretKey, ""), RetryMaxAttempts: 1})
		if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
			b.Fatal(err)
		}
		return c
	}
	cOff, cOn := client(srvOff.URL), client(srvOn.URL)
	body := bytes.Repeat([]byte("x"), 4<<10)
	var seq atomic.Int64
	chunk := func(c *s3.Client, n int) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		var left atomic.Int64
		left.Store(int64(n))
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for left.Add(-1) >= 0 {
					k := fmt.Sprintf("k/%d", seq.Add(1))
					if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(k), Body: bytes.NewReader(body)}); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	chunk(cOff, 200) // warm both up
	chunk(cOn, 200)
	d0 := d.Load().Status().Delivered
	b.ResetTimer()
	var tOff, tOn time.Duration
	t0 := time.Now()
	for i, done := 0, 0; done < b.N; i, done = i+1, done+250 {
		n := min(250, b.N-done)
		if i%2 == 0 { // each goes first half the time
			tOff += chunk(cOff, n)
			tOn += chunk(cOn, n)
		} else {
			tOn += chunk(cOn, n)
			tOff += chunk(cOff, n)
		}
	}
	// The events of the measured PUTs all delivered.
	proctest.WaitFor(b, 2*time.Minute, func() error {
		if n := d.Load().Status().Delivered - d0; n < int64(b.N) {
			return fmt.Errorf("%d of %d events delivered", n, b.N)
		}
		return nil
	})
	all := time.Since(t0)
	b.StopTimer()
	off, onr := float64(b.N)/tOff.Seconds(), float64(b.N)/tOn.Seconds()
	b.ReportMetric(off, "puts/s-off")
	b.ReportMetric(onr, "puts/s-notify")
	b.ReportMetric(100*onr/off, "%-of-off")
	b.ReportMetric(float64(b.N)/all.Seconds(), "events/s-run")
}
