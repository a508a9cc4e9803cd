package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/redis/go-redis/v9"

	"github.com/cairnfs/cairn/internal/notify"
	"github.com/cairnfs/cairn/internal/testutil"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// eventSet records events by (name, key) and counts each stable id.
type eventSet struct {
	mu    sync.Mutex
	ids   map[string]int
	byKey map[string]bool
}

func newEventSet() *eventSet { return &eventSet{ids: map[string]int{}, byKey: map[string]bool{}} }

func (s *eventSet) add(msg []byte) error {
	var m notify.Message
	if err := json.Unmarshal(msg, &m); err != nil || len(m.Records) != 1 {
		return fmt.Errorf("bad event message %q: %v", msg, err)
	}
	r := m.Records[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids[r.EventID]++
	s.byKey[r.EventName+" "+r.S3.Object.Key] = true
	return nil
}

func (s *eventSet) missing(want map[string]bool) (n, dups int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range want {
		if !s.byKey[k] {
			n++
		}
	}
	for _, c := range s.ids {
		dups += c - 1
	}
	return n, dups
}

// TestNotifyKill: a cairn server process with a Redis target (a real redis-server) and a
// webhook target (signed with a sealed key), defined with cairn admin notify; PUTs and
// DELETEs under load, the server SIGKILLed in the middle of them and started again: every
// acknowledged change has its event in the Redis list or at the webhook.
func TestNotifyKill(t *testing.T) {
	skipShort(t)
	rd := testutil.StartRedis(t)
	const key = "webhook-signing-key-0123"
	hook := newEventSet()
	var badSig atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mac := hmac.New(sha256.New, []byte(key))
		mac.Write(b)
		if r.Header.Get("X-Cairn-Signature") != "sha256="+hex.EncodeToString(mac.Sum(nil)) {
			badSig.Add(1)
			w.WriteHeader(http.StatusForbidden)
			return
		}
		if err := hook.add(b); err != nil {
			t.Error(err)
		}
	}))
	defer hs.Close()

	dir := t.TempDir()
	p := startProc(t, dir)
	admin := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(proctest.Bin(t), append([]string{"admin", "--admin", p.AdminAddr(), "--data", dir}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("cairn admin %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	keyFile := filepath.Join(t.TempDir(), "hook-key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	admin("notify", "target", "add", "jobs", "--redis", rd.Addr, "--list", "cairn-events")
	admin("notify", "target", "add", "hook", "--webhook", hs.URL, "--secret-file", keyFile)
	if out := admin("notify", "target", "list"); strings.Contains(out, key) || !strings.Contains(out, "sealed") || !strings.Contains(out, "arn:cairn:sqs:::jobs") {
		t.Fatalf("target list:\n%s", out)
	}

	c := p.client()
	ctx := context.Background()
	const bucket = "events"
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
	filter := func(prefix string) *types.NotificationConfigurationFilter {
		return &types.NotificationConfigurationFilter{Key: &types.S3KeyFilter{FilterRules: []types.FilterRule{{Name: types.FilterRuleNamePrefix, Value: aws.String(prefix)}}}}
	}
	events := []types.Event{"s3:ObjectCreated:*", "s3:ObjectRemoved:*"}
	if _, err := c.PutBucketNotificationConfiguration(ctx, &s3.PutBucketNotificationConfigurationInput{Bucket: aws.String(bucket),
		NotificationConfiguration: &types.NotificationConfiguration{
			QueueConfigurations: []types.QueueConfiguration{{Id: aws.String("redis"), QueueArn: aws.String("arn:cairn:sqs:::jobs"), Events: events, Filter: filter("r/")}},
			TopicConfigurations: []types.TopicConfiguration{{Id: aws.String("hook"), TopicArn: aws.String("arn:cairn:sns:::hook"), Events: events, Filter: filter("w/")}},
		}}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	want := map[string]bool{}
	load := func(c *s3.Client, tag string, stop <-chan struct{}, max int) {
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < max; i++ {
					select {
					case <-stop:
						return
					default:
					}
					for _, pfx := range []string{"r/", "w/"} {
						k := fmt.Sprintf("%s%s-%d-%d", pfx, tag, w, i)
						if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(k), Body: bytes.NewReader([]byte(k))}); err != nil {
							return // the server is gone: this one's outcome is unknown
						}
						mu.Lock()
						want["ObjectCreated:Put "+notify.EscapeKey(k)] = true
						mu.Unlock()
						if i%3 == 0 {
							if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(k)}); err != nil {
								return
							}
							mu.Lock()
							want["ObjectRemoved:Delete "+notify.EscapeKey(k)] = true
							mu.Unlock()
						}
					}
				}
			}()
		}
		wg.Wait()
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { load(c, "kill", stop, 1<<30); close(done) }()
	proctest.WaitFor(t, 60*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(want) < 400 {
			return fmt.Errorf("%d changes acknowledged", len(want))
		}
		return nil
	})
	p.Kill() // SIGKILL, under load
	close(stop)
	<-done
	p.Restart()
	load(p.client(), "after", nil, 25)

	rc := redis.NewClient(&redis.Options{Addr: rd.Addr, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second})
	defer rc.Close()
	wantR, wantW := map[string]bool{}, map[string]bool{}
	for k := range want {
		if strings.Contains(k, " r/") {
			wantR[k] = true
		} else {
			wantW[k] = true
		}
	}
	var rdups, wdups int
	proctest.WaitFor(t, 60*time.Second, func() error {
		vals, err := rc.LRange(ctx, "cairn-events", 0, -1).Result()
		if err != nil {
			return err
		}
		rs := newEventSet()
		for _, v := range vals {
			if err := rs.add([]byte(v)); err != nil {
				return err
			}
		}
		var m1, m2 int
		m1, rdups = rs.missing(wantR)
		m2, wdups = hook.missing(wantW)
		if m1+m2 > 0 {
			return fmt.Errorf("missing: %d in redis, %d at the webhook", m1, m2)
		}
		return nil
	})
	if n := badSig.Load(); n != 0 {
		t.Fatalf("%d webhook requests with a bad signature", n)
	}
	status := admin("--json", "notify", "status")
	var v struct {
		Nodes []struct {
			Dead      int64 `json:"dead"`
			DeadTotal int64 `json:"dead_total"`
			Pending   int64 `json:"pending"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(status), &v); err != nil || len(v.Nodes) != 1 {
		t.Fatalf("notify status: %v\n%s", err, status)
	}
	if v.Nodes[0].Dead != 0 {
		t.Fatalf("dead letters without a failing target:\n%s", status)
	}
	t.Logf("%d acknowledged changes all delivered; duplicates after the kill: redis %d, webhook %d\n%s", len(want), rdups, wdups, status)
}

// TestNotifyProcCluster: three server processes; every acknowledged change through any
// of them reaches the webhook, the holders that are not a key's first live holder drop
// their copies once it says it sent them (the signed internode question), and every
// outbox empties.
func TestNotifyProcCluster(t *testing.T) {
	tc := startCluster(t, 3, "--notify-hold", "1s")
	tc.waitVoters(3)
	hook := newEventSet()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if err := hook.add(b); err != nil {
			t.Error(err)
		}
	}))
	defer hs.Close()
	if out, err := tc.admin(0, "notify", "target", "add", "hook", "--webhook", hs.URL); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	ctx := context.Background()
	tc.createBucket(0, "events")
	c0 := tc.procs[0].client()
	if _, err := c0.PutBucketNotificationConfiguration(ctx, &s3.PutBucketNotificationConfigurationInput{Bucket: aws.String("events"),
		NotificationConfiguration: &types.NotificationConfiguration{TopicConfigurations: []types.TopicConfiguration{{
			TopicArn: aws.String("arn:cairn:sns:::hook"), Events: []types.Event{"s3:ObjectCreated:*", "s3:ObjectRemoved:*"}}}}}); err != nil {
		t.Fatal(err)
	}
	// The configuration reaches every node's map.
	proctest.WaitFor(t, 20*time.Second, func() error {
		for i, p := range tc.procs {
			out, err := p.client().GetBucketNotificationConfiguration(ctx, &s3.GetBucketNotificationConfigurationInput{Bucket: aws.String("events")})
			if err != nil {
				return err
			}
			if len(out.TopicConfigurations) == 0 {
				return fmt.Errorf("node %d has no configuration yet", i)
			}
		}
		return nil
	})
	want := map[string]bool{}
	for i := 0; i < 90; i++ {
		c := tc.procs[i%3].client()
		k := fmt.Sprintf("k/%d", i)
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("events"), Key: aws.String(k), Body: bytes.NewReader([]byte(k))}); err != nil {
			t.Fatal(err)
		}
		want["ObjectCreated:Put "+k] = true
		if i%3 == 0 {
			if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("events"), Key: aws.String(k)}); err != nil {
				t.Fatal(err)
			}
			want["ObjectRemoved:Delete "+k] = true
		}
	}
	proctest.WaitFor(t, 60*time.Second, func() error {
		if n, _ := hook.missing(want); n > 0 {
			return fmt.Errorf("%d of %d events missing", n, len(want))
		}
		return nil
	})
	var v struct {
		Nodes []struct {
			Node      string `json:"node"`
			Pending   int64  `json:"pending"`
			Delivered int64  `json:"delivered"`
			Dropped   int64  `json:"dropped"`
			Error     string `json:"error"`
		} `json:"nodes"`
	}
	proctest.WaitFor(t, 60*time.Second, func() error {
		out, err := tc.admin(0, "--json", "notify", "status")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			return err
		}
		for _, n := range v.Nodes {
			if n.Error != "" || n.Pending != 0 {
				return fmt.Errorf("node %s: pending %d %s", n.Node, n.Pending, n.Error)
			}
		}
		return nil
	})
	var dropped, delivered int64
	for _, n := range v.Nodes {
		dropped += n.Dropped
		delivered += n.Delivered
	}
	_, dups := hook.missing(want)
	t.Logf("%d changes, %d events delivered, %d copies dropped by other holders, %d duplicates; %+v", len(want), delivered, dropped, dups, v.Nodes)
	if dropped == 0 {
		t.Fatal("no holder dropped a copy: the first holders' answers were not used")
	}
	// cairn admin status carries each node's figures too.
	for _, n := range tc.status(1).Nodes {
		if n.Stats == nil || n.Stats.Notify == nil || n.Stats.Notify.Delivered == 0 {
			t.Fatalf("admin status of node %s has no notification figures: %+v", n.ID, n.Stats)
		}
	}
}
