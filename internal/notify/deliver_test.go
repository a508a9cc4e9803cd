package notify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/redis/go-redis/v9"

	"github.com/cairnfs/cairn/internal/notify"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// sink counts the events a target received, by stable id and by (event, key).
type sink struct {
	mu    sync.Mutex
	ids   map[string]int
	byKey map[string]bool
}

func newSink() *sink { return &sink{ids: map[string]int{}, byKey: map[string]bool{}} }

func (s *sink) add(t testing.TB, msg []byte) {
	var m notify.Message
	if err := json.Unmarshal(msg, &m); err != nil || len(m.Records) != 1 {
		t.Errorf("bad event message %q: %v", msg, err)
		return
	}
	r := m.Records[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids[r.EventID]++
	s.byKey[r.EventName+" "+r.S3.Object.Key] = true
}

// check reports the changes of want (event name and escaped key) that have no event yet,
// and the number of duplicates.
func (s *sink) missing(want map[string]bool) (missing []string, dups int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range want {
		if !s.byKey[k] {
			missing = append(missing, k)
		}
	}
	for _, n := range s.ids {
		dups += n - 1
	}
	return missing, dups
}

// webhookServer is a webhook on 127.0.0.1 that records into a sink; fail makes it
// answer 503.
func webhookServer(t *testing.T, s *sink, fail *atomic.Bool) string {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if fail != nil && fail.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		s.add(t, b)
	}))
	t.Cleanup(hs.Close)
	return hs.URL
}

// redisEvents reads the whole list into a fresh sink.
func redisEvents(t *testing.T, c *redis.Client, list string) (*sink, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	vals, err := c.LRange(ctx, list, 0, -1).Result()
	if err != nil {
		return nil, err
	}
	s := newSink()
	for _, v := range vals {
		s.add(t, []byte(v))
	}
	return s, nil
}

const bucket = "events"

// config routes r/ keys to the Redis target, w/ keys to the webhook.
func config(t testing.TB) string {
	doc := `<NotificationConfiguration>` +
		`<QueueConfiguration><Id>redis</Id><Queue>` + notify.QueueARN("jobs") + `</Queue><Event>s3:ObjectCreated:*</Event><Event>s3:ObjectRemoved:*</Event>` +
		`<Filter><S3Key><FilterRule><Name>prefix</Name><Value>r/</Value></FilterRule></S3Key></Filter></QueueConfiguration>` +
		`<TopicConfiguration><Id>hook</Id><Topic>` + notify.TopicARN("hook") + `</Topic><Event>s3:ObjectCreated:*</Event><Event>s3:ObjectRemoved:*</Event>` +
		`<Filter><S3Key><FilterRule><Name>prefix</Name><Value>w/</Value></FilterRule></S3Key></Filter></TopicConfiguration>` +
		`</NotificationConfiguration>`
	_, canon, err := notify.Parse([]byte(doc), func(string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	return string(canon)
}

// harness is a store whose outbox a Deliverer sends to a Redis list and a webhook.
type harness struct {
	st      *store.Store
	d       *notify.Deliverer
	rc      *redis.Client
	hook    *sink
	targets map[string]notify.Target
	stacker *notify.Stacker
	cancel  context.CancelFunc
	done    chan error
}

func openStore(t *testing.T, cfg store.Config, d **notify.Deliverer) *store.Store {
	var st *store.Store
	stk := &notify.Stacker{Doc: func(b string) string {
		bk, err := st.HeadBucket(b)
		if err != nil {
			return ""
		}
		return bk.Config["notification"]
	}}
	cfg.Outbox = stk.Entries
	cfg.OnOutbox = func() {
		if *d != nil {
			(*d).Kick()
		}
	}
	cfg.Logger = testutil.NewLogger(t)
	var err error
	if st, err = store.Open(cfg); err != nil {
		t.Fatal(err)
	}
	return st
}

func (h *harness) start(t *testing.T) {
	h.d = notify.New(notify.Config{
		Outbox:     h.st,
		Target:     func(n string) (notify.Target, bool) { tg, ok := h.targets[n]; return tg, ok },
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 300 * time.Millisecond, Interval: 50 * time.Millisecond,
		Logger: testutil.NewLogger(t),
	})
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- h.d.Run(ctx) }()
}

func (h *harness) stop() {
	h.cancel()
	<-h.done
}

func newHarness(t *testing.T, rd *testutil.Redis, fail *atomic.Bool, cfg store.Config) *harness {
	h := &harness{hook: newSink()}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	h.st = openStore(t, cfg, &h.d)
	t.Cleanup(func() { h.st.Close() })
	jobs, err := notify.Open(notify.TargetSpec{Name: "jobs", Redis: rd.Addr, List: "cairn-events", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hook, err := notify.Open(notify.TargetSpec{Name: "hook", Webhook: webhookServer(t, h.hook, fail), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h.targets = map[string]notify.Target{"jobs": jobs, "hook": hook}
	t.Cleanup(func() { jobs.Close(); hook.Close() })
	h.rc = redis.NewClient(&redis.Options{Addr: rd.Addr, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second})
	t.Cleanup(func() { h.rc.Close() })
	return h
}

// waitAll waits until every change in want has its event at its target, and returns the
// duplicates seen.
func (h *harness) waitAll(t *testing.T, want map[string]bool) (redisDups, hookDups int) {
	t.Helper()
	wantR, wantW := map[string]bool{}, map[string]bool{}
	for k := range want {
		if strings.Contains(k, " r/") {
			wantR[k] = true
		} else {
			wantW[k] = true
		}
	}
	proctest.WaitFor(t, 60*time.Second, func() error {
		rs, err := redisEvents(t, h.rc, "cairn-events")
		if err != nil {
			return err
		}
		var m1, m2 []string
		m1, redisDups = rs.missing(wantR)
		m2, hookDups = h.hook.missing(wantW)
		if len(m1)+len(m2) > 0 {
			return fmt.Errorf("%d events missing in redis, %d at the webhook (status %+v)", len(m1), len(m2), h.d.Status())
		}
		return nil
	})
	return redisDups, hookDups
}

// workload puts n keys under each prefix from several goroutines and deletes every third;
// it returns the changes acknowledged, as "EventName key".
func workload(t *testing.T, put func(key string, body []byte) error, del func(key string) error, n int, tag string) map[string]bool {
	var mu sync.Mutex
	want := map[string]bool{}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				for _, p := range []string{"r/", "w/"} {
					key := fmt.Sprintf("%s%s k %d", p, tag, i)
					if err := put(key, []byte(key)); err != nil {
						t.Errorf("put %s: %v", key, err)
						continue
					}
					mu.Lock()
					want["ObjectCreated:Put "+notify.EscapeKey(key)] = true
					mu.Unlock()
					if i%3 == 0 {
						if err := del(key); err != nil {
							t.Errorf("delete %s: %v", key, err)
							continue
						}
						mu.Lock()
						want["ObjectRemoved:Delete "+notify.EscapeKey(key)] = true
						mu.Unlock()
					}
				}
			}
		}()
	}
	wg.Wait()
	return want
}

// TestDeliverS3 drives PUTs and DELETEs through the S3 API (aws-sdk-go-v2, a real socket)
// of a store with a notification configuration: every acknowledged change has its event
// in the Redis list or at the webhook, with no duplicate in this fault-free run.
func TestDeliverS3(t *testing.T) {
	rd := testutil.StartRedis(t)
	var h *harness
	srvCfg := store.Config{Reserve: 1}
	// The S3 server opens its own store: give it the outbox hook through Config.
	srvCfg.Outbox = func(b, k string, o *object.Object) [][]byte { return h.stacker.Entries(b, k, o) }
	srvCfg.OnOutbox = func() { h.d.Kick() }
	srv := testutil.StartServer(t, srvCfg, nil)
	h = newHarnessOn(t, rd, srv.Store)
	c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(testutil.AccessKey, testutil.SecretKey, ""), RetryMaxAttempts: 1})
	ctx := context.Background()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Store.SetBucketConfig(bucket, "notification", []byte(config(t))); err != nil {
		t.Fatal(err)
	}
	h.start(t)
	defer h.stop()
	want := workload(t, func(key string, body []byte) error {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body)})
		return err
	}, func(key string) error {
		_, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		return err
	}, 200, "s3")
	rdups, wdups := h.waitAll(t, want)
	if rdups != 0 || wdups != 0 {
		t.Errorf("duplicates in a fault-free run: redis %d, webhook %d", rdups, wdups)
	}
	proctest.WaitFor(t, 10*time.Second, func() error {
		if p, _ := h.st.OutboxLen(); p != 0 {
			var seqs []uint64
			h.st.ScanOutbox(0, func(seq uint64, e []byte) bool { seqs = append(seqs, seq); return true })
			return fmt.Errorf("%d entries still pending: %v, floor %d", p, seqs, h.st.OutboxFloor())
		}
		return nil
	})
	t.Logf("%d changes, status %+v", len(want), h.d.Status())
}

// newHarnessOn is newHarness for a store opened elsewhere.
func newHarnessOn(t *testing.T, rd *testutil.Redis, st *store.Store) *harness {
	h := &harness{hook: newSink(), st: st}
	h.stacker = &notify.Stacker{Doc: func(b string) string {
		bk, err := st.HeadBucket(b)
		if err != nil {
			return ""
		}
		return bk.Config["notification"]
	}}
	jobs, _ := notify.Open(notify.TargetSpec{Name: "jobs", Redis: rd.Addr, List: "cairn-events", Timeout: 2 * time.Second})
	hook, _ := notify.Open(notify.TargetSpec{Name: "hook", Webhook: webhookServer(t, h.hook, nil), Timeout: 2 * time.Second})
	h.targets = map[string]notify.Target{"jobs": jobs, "hook": hook}
	t.Cleanup(func() { jobs.Close(); hook.Close() })
	h.rc = redis.NewClient(&redis.Options{Addr: rd.Addr, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second})
	t.Cleanup(func() { h.rc.Close() })
	return h
}

func storeOps(h *harness) (func(string, []byte) error, func(string) error) {
	put := func(key string, body []byte) error {
		_, err := h.st.PutObject(context.Background(), bucket, key, &object.Object{ETag: "e"}, bytes.NewReader(body), int64(len(body)), object.PutOptions{})
		return err
	}
	del := func(key string) error {
		_, err := h.st.DeleteVersion(bucket, key, 0, 0)
		return err
	}
	return put, del
}

func setupBucket(t *testing.T, st *store.Store) {
	if err := st.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	if err := st.SetBucketConfig(bucket, "notification", []byte(config(t))); err != nil {
		t.Fatal(err)
	}
}

// TestDeliverTargetsDown stops redis-server and fails the webhook while writes go on,
// then brings both back: every event arrives (the outbox kept them, retried with backoff).
func TestDeliverTargetsDown(t *testing.T) {
	rd := testutil.StartRedis(t)
	var fail atomic.Bool
	h := newHarness(t, rd, &fail, store.Config{Reserve: 1})
	setupBucket(t, h.st)
	h.start(t)
	defer h.stop()
	put, del := storeOps(h)
	want := workload(t, put, del, 100, "before")
	rd.Stop()
	fail.Store(true)
	down := workload(t, put, del, 200, "down")
	// Both targets stay down until each has failed a few sends (backoff growing).
	proctest.WaitFor(t, 20*time.Second, func() error {
		if r := h.d.Status().Retries; r < 6 {
			return fmt.Errorf("%d failed sends", r)
		}
		return nil
	})
	if p, _ := h.st.OutboxLen(); p == 0 {
		t.Fatal("nothing pending while both targets are down")
	}
	if err := rd.Start(); err != nil {
		t.Fatal(err)
	}
	fail.Store(false)
	after := workload(t, put, del, 100, "after")
	for _, m := range []map[string]bool{down, after} {
		for k := range m {
			want[k] = true
		}
	}
	rdups, wdups := h.waitAll(t, want)
	st := h.d.Status()
	t.Logf("%d changes; duplicates redis %d webhook %d; status %+v", len(want), rdups, wdups, st)
	if st.DeadTotal != 0 {
		t.Fatalf("dead letters: %d", st.DeadTotal)
	}
}

// TestDeliverPowerCut cuts the power of a node while it writes and delivers (its store on
// a crashable file system: only what was synced survives), then starts it again from what
// survived: every change acknowledged before the cut has its event.
func TestDeliverPowerCut(t *testing.T) {
	rd := testutil.StartRedis(t)
	mem := vfs.NewCrashableMem()
	h := newHarness(t, rd, nil, store.Config{FS: mem, Dir: "/data", Reserve: 1})
	setupBucket(t, h.st)
	h.start(t)
	put, del := storeOps(h)
	want := workload(t, put, del, 150, "cut")
	proctest.WaitFor(t, 20*time.Second, func() error {
		if h.d.Status().Delivered == 0 {
			return fmt.Errorf("nothing delivered yet")
		}
		return nil
	})
	// The cut: every acknowledged change was synced with its entry before it was
	// acknowledged, whatever was delivered by now.
	clone := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	h.stop()

	h2 := &harness{hook: h.hook, targets: h.targets, rc: h.rc}
	h2.st = openStore(t, store.Config{FS: clone, Dir: "/data", Reserve: 1}, &h2.d)
	t.Cleanup(func() { h2.st.Close() })
	p, _ := h2.st.OutboxLen()
	t.Logf("after the cut: %d entries pending", p)
	h2.start(t)
	defer h2.stop()
	more := workload(t, func(k string, b []byte) error {
		_, err := h2.st.PutObject(context.Background(), bucket, k, &object.Object{ETag: "e"}, bytes.NewReader(b), int64(len(b)), object.PutOptions{})
		return err
	}, func(k string) error { _, err := h2.st.DeleteVersion(bucket, k, 0, 0); return err }, 50, "again")
	for k := range more {
		want[k] = true
	}
	rdups, wdups := h2.waitAll(t, want)
	t.Logf("%d changes; duplicates after the cut: redis %d, webhook %d (allowed)", len(want), rdups, wdups)
}

// TestEventKinds: through the S3 API, a multipart completion is
// ObjectCreated:CompleteMultipartUpload, a DELETE in a versioned bucket
// ObjectRemoved:DeleteMarkerCreated (with the marker's version id), the permanent delete
// of a version ObjectRemoved:Delete; a PUT's record carries its size, ETag and version id.
func TestEventKinds(t *testing.T) {
	var h *harness
	srvCfg := store.Config{Reserve: 1}
	srvCfg.Outbox = func(b, k string, o *object.Object) [][]byte { return h.stacker.Entries(b, k, o) }
	srvCfg.OnOutbox = func() { h.d.Kick() }
	srv := testutil.StartServer(t, srvCfg, nil)
	var mu sync.Mutex
	var recs []notify.Record
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m notify.Message
		if err := json.Unmarshal(b, &m); err != nil {
			t.Error(err)
		}
		mu.Lock()
		recs = append(recs, m.Records...)
		mu.Unlock()
	}))
	defer hs.Close()
	hook, _ := notify.Open(notify.TargetSpec{Name: "hook", Webhook: hs.URL})
	defer hook.Close()
	h = &harness{st: srv.Store, targets: map[string]notify.Target{"hook": hook}, stacker: &notify.Stacker{Doc: func(b string) string {
		bk, err := srv.Store.HeadBucket(b)
		if err != nil {
			return ""
		}
		return bk.Config["notification"]
	}}}
	c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(testutil.AccessKey, testutil.SecretKey, ""), RetryMaxAttempts: 1})
	ctx := context.Background()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String(bucket),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}); err != nil {
		t.Fatal(err)
	}
	doc := `<NotificationConfiguration><QueueConfiguration><Id>all</Id><Queue>` + notify.QueueARN("hook") +
		`</Queue><Event>s3:ObjectCreated:*</Event><Event>s3:ObjectRemoved:*</Event></QueueConfiguration></NotificationConfiguration>`
	if err := srv.Store.SetBucketConfig(bucket, "notification", []byte(doc)); err != nil {
		t.Fatal(err)
	}
	h.start(t)
	defer h.stop()

	put, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("a b.txt"), Body: bytes.NewReader([]byte("hello"))})
	if err != nil {
		t.Fatal(err)
	}
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String("big")})
	if err != nil {
		t.Fatal(err)
	}
	part, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String("big"), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("part one"))})
	if err != nil {
		t.Fatal(err)
	}
	done, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String("big"), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: part.ETag}}}})
	if err != nil {
		t.Fatal(err)
	}
	del, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String("a b.txt")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String("big"), VersionId: done.VersionId}); err != nil {
		t.Fatal(err)
	}
	proctest.WaitFor(t, 20*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(recs) < 4 {
			return fmt.Errorf("%d records", len(recs))
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	byName := map[string]notify.Record{}
	for _, r := range recs {
		byName[r.EventName+" "+r.S3.Object.Key] = r
	}
	p, ok := byName["ObjectCreated:Put a+b.txt"]
	if !ok || p.S3.Object.Size == nil || *p.S3.Object.Size != 5 || `"`+p.S3.Object.ETag+`"` != aws.ToString(put.ETag) ||
		p.S3.Object.VersionID != aws.ToString(put.VersionId) || p.S3.Bucket.Name != bucket || p.EventSource != "aws:s3" {
		t.Errorf("put record %+v (put answered etag %s version %s)", p, aws.ToString(put.ETag), aws.ToString(put.VersionId))
	}
	if _, ok := byName["ObjectCreated:CompleteMultipartUpload big"]; !ok {
		t.Errorf("no CompleteMultipartUpload record: %+v", recs)
	}
	m, ok := byName["ObjectRemoved:DeleteMarkerCreated a+b.txt"]
	if !ok || m.S3.Object.VersionID != aws.ToString(del.VersionId) || m.S3.Object.Size != nil {
		t.Errorf("delete marker record %+v (delete answered version %s)", m, aws.ToString(del.VersionId))
	}
	if d, ok := byName["ObjectRemoved:Delete big"]; !ok || d.S3.Object.VersionID != aws.ToString(done.VersionId) {
		t.Errorf("permanent delete record %+v (version %s)", d, aws.ToString(done.VersionId))
	}
}
