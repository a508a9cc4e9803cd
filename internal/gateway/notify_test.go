package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/notify"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// TestNotifyCluster: a 3-node cluster (N=3, W=2) whose nodes each run a Deliverer over
// their own outbox to one webhook. Fault-free, every acknowledged change arrives once:
// only the first live holder sends, the other holders drop their copies once it holds the
// version. Then the first holder of many keys stops (marked down, its deliverer stopped
// with its outbox full): the new first holders send, and every change still arrives.
func TestNotifyCluster(t *testing.T) {
	var mu sync.Mutex
	ids := map[string]int{}
	byKey := map[string]bool{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m notify.Message
		if err := json.Unmarshal(b, &m); err != nil || len(m.Records) != 1 {
			t.Errorf("bad message %q", b)
			return
		}
		rec := m.Records[0]
		mu.Lock()
		ids[rec.EventID]++
		byKey[rec.EventName+" "+rec.S3.Object.Key] = true
		mu.Unlock()
	}))
	defer hs.Close()
	hook, err := notify.Open(notify.TargetSpec{Name: "hook", Webhook: hs.URL, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer hook.Close()

	var c *testCluster
	stackers := make([]*notify.Stacker, 3)
	for i := range stackers {
		stackers[i] = &notify.Stacker{Doc: func(b string) string { return c.maps.Current().Buckets[b].Config["notification"] }}
	}
	ds := make([]*notify.Deliverer, 3)
	var dmu sync.Mutex
	c = newCluster(t, 3, clusterConfig{store: func(i int, sc *store.Config) {
		sc.Outbox = stackers[i].Entries
		sc.OnOutbox = func() {
			dmu.Lock()
			d := ds[i]
			dmu.Unlock()
			if d != nil {
				d.Kick()
			}
		}
	}})
	stops := make([]func(), 3)
	for i, nd := range c.nodes {
		d := notify.New(notify.Config{Outbox: nd.store, Target: func(string) (notify.Target, bool) { return hook, true },
			Mine: nd.gw.FirstHolder, FirstHolds: func(ctx context.Context, b, k string, h uint64) (bool, bool, error) {
				// The server asks the first holder over the internode protocol
				// (wire.PathNotifyHeld); in process, its store.
				id, _, _, err := nd.gw.FirstHolderOf(b, k)
				if err != nil {
					return false, false, err
				}
				return c.nodes[c.index(id)].store.OutboxHeld(b, k, h)
			}, Hold: time.Second,
			MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Interval: 100 * time.Millisecond, Logger: testLogger()})
		dmu.Lock()
		ds[i] = d
		dmu.Unlock()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { d.Run(ctx); close(done) }()
		stops[i] = func() { cancel(); <-done }
		defer stops[i]()
	}
	ctx := context.Background()
	c.createBucket("ev")
	doc := `<NotificationConfiguration><TopicConfiguration><Id>all</Id><Topic>` + notify.TopicARN("hook") +
		`</Topic><Event>s3:ObjectCreated:*</Event><Event>s3:ObjectRemoved:*</Event></TopicConfiguration></NotificationConfiguration>`
	_, canon, err := notify.Parse([]byte(doc), func(string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[0].gw.SetBucketConfig(ctx, "ev", "notification", canon); err != nil {
		t.Fatal(err)
	}

	want := map[string]bool{}
	load := func(tag string, n int) {
		for i := 0; i < n; i++ {
			g := c.nodes[i%3].gw
			if c.nodes[i%3].srv == nil {
				g = c.nodes[(i+1)%3].gw
			}
			key := fmt.Sprintf("%s/%d", tag, i)
			mustPut(t, g, "ev", key, []byte(key))
			want["ObjectCreated:Put "+key] = true
			if i%4 == 0 {
				if err := g.DeleteObject(ctx, "ev", key); err != nil {
					t.Fatal(err)
				}
				want["ObjectRemoved:Delete "+key] = true
			}
		}
	}
	arrived := func() error {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for k := range want {
			if !byKey[k] {
				n++
			}
		}
		if n > 0 {
			return fmt.Errorf("%d of %d events missing", n, len(want))
		}
		return nil
	}
	dups := func() int {
		mu.Lock()
		defer mu.Unlock()
		d := 0
		for id, n := range ids {
			d += n - 1
			if n > 1 && d < 5 {
				t.Logf("dup %s x%d", id, n)
			}
		}
		return d
	}
	load("calm", 120)
	proctest.WaitFor(t, 30*time.Second, arrived)
	// The other holders' copies go once they see the first holder has the versions.
	proctest.WaitFor(t, 30*time.Second, func() error {
		for i, nd := range c.nodes {
			if p, _ := nd.store.OutboxLen(); p != 0 {
				return fmt.Errorf("node %d: %d entries pending", i, p)
			}
		}
		return nil
	})
	if d := dups(); d != 0 {
		t.Errorf("%d duplicates in a fault-free run", d)
	}

	// n1 stops with whatever its outbox holds; it is marked down.
	stops[0]()
	c.stop(0)
	c.setNode("n1", func(n *clustermap.Node) { n.State = clustermap.StateDown })
	load("n1down", 120)
	proctest.WaitFor(t, 60*time.Second, arrived)
	var dropped int64
	for _, d := range ds[1:] {
		dropped += d.Status().Dropped
	}
	t.Logf("%d changes delivered; duplicates %d; dropped by non-first holders %d", len(want), dups(), dropped)
	_ = object.Object{}
}
