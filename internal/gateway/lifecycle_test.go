package gateway

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/repair"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// lcClock is the lifecycle runners' injected clock.
type lcClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *lcClock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *lcClock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// lifecycleLoops returns node i's repair loops with the lifecycle clock injected (a
// node started afresh over the same store, hint queue and gateway).
func (c *testCluster) lifecycleLoops(i int, clock *lcClock) *repair.Loops {
	nd := c.nodes[i]
	return repair.New(repair.Config{NodeID: nd.id, Store: nd.store, Maps: c.maps, Topology: nd.gw.Topology(), Replica: nd.gw.Replica,
		Stripes: nd.gw.Stripes(), Coordinator: nd.gw, Hints: nd.hints, Clock: nd.gw.clock, Logger: testLogger().With("node", nd.id),
		Now: clock.now, LifecycleTick: 10 * time.Millisecond})
}

// settle waits until the store of every node that serves holds as many versions of
// bucket as the most complete one: a write returns once W holders have it, and a round
// decides on the records of its node's store.
func (c *testCluster) settle(t *testing.T, bucket string) {
	t.Helper()
	proctest.WaitFor(t, 20*time.Second, func() error {
		var counts []int
		for _, nd := range c.nodes {
			nd.mu.Lock()
			up := nd.srv != nil
			nd.mu.Unlock()
			if !up {
				continue
			}
			l, err := nd.store.ListVersions(bucket, object.VersionListOptions{Max: 100000})
			if err != nil {
				return err
			}
			counts = append(counts, len(l.Versions))
		}
		for _, n := range counts[1:] {
			if n != counts[0] {
				return fmt.Errorf("the stores hold %v versions", counts)
			}
		}
		return nil
	})
}

// lifecycleRounds runs a round of bucket on each of loops at once and returns what
// they did together.
func lifecycleRounds(t *testing.T, bucket string, loops ...*repair.Loops) repair.LifecycleCounts {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(loops))
	for i, l := range loops {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = l.LifecycleRound(context.Background(), bucket) }()
	}
	wg.Wait()
	var sum repair.LifecycleCounts
	for i, l := range loops {
		if errs[i] != nil {
			t.Fatalf("round %d: %v", i, errs[i])
		}
		for _, p := range l.LifecycleStatus() {
			if p.Bucket == bucket {
				sum.Scanned += p.Last.Scanned
				sum.ExpiredCurrent += p.Last.ExpiredCurrent
				sum.Errors += p.Last.Errors
				sum.Raced += p.Last.Raced
			}
		}
	}
	return sum
}

// expiredEverywhere checks that each key is expired as every gateway sees it: no current
// version, and exactly two versions, the object and one delete marker at its version+1.
func (c *testCluster) expiredEverywhere(t *testing.T, bucket string, keys map[string]uint64) {
	t.Helper()
	ctx := context.Background()
	for i, nd := range c.nodes {
		l, err := nd.gw.ListVersions(ctx, bucket, object.VersionListOptions{Max: 1000})
		if err != nil {
			t.Fatalf("n%d: %v", i+1, err)
		}
		got := map[string][]*object.Object{}
		for _, v := range l.Versions {
			got[v.Key] = append(got[v.Key], v.Object)
		}
		for k, hlc := range keys {
			vs := got[k]
			if len(vs) != 2 || !vs[0].DeleteMarker || vs[0].HLC != hlc+1 || vs[1].HLC != hlc || vs[1].DeleteMarker {
				t.Fatalf("through n%d, %s has %d versions (%+v), want one marker at %d over version %d", i+1, k, len(vs), vs, hlc+1, hlc)
			}
			if _, err := nd.gw.StatObject(ctx, bucket, k); !errors.Is(errors.NotExist, err) {
				t.Fatalf("through n%d, %s is still current: %v", i+1, k, err)
			}
		}
	}
}

// TestLifecycleCluster: three nodes on real sockets run their lifecycle rounds at once
// on a versioned bucket; each expiry happens once (one delete marker per object, the same
// through every gateway), a round run again does nothing, and with a node down the
// others take its keys; when it comes back (a new runner over its old store, which
// missed the markers) its round is due at once, and the markers it writes again for the
// keys it holds first are the same records: after anti-entropy every gateway sees one
// marker per object.
func TestLifecycleCluster(t *testing.T) {
	c := newCluster(t, 3, clusterConfig{timeout: 5 * time.Second})
	ctx := context.Background()
	c.createBucket("lcv")
	g := c.nodes[0].gw
	if err := g.SetBucketConfig(ctx, "lcv", "versioning", []byte("Enabled")); err != nil {
		t.Fatal(err)
	}
	doc := `<LifecycleConfiguration><Rule><ID>all</ID><Filter/><Status>Enabled</Status><Expiration><Days>3</Days></Expiration></Rule></LifecycleConfiguration>`
	if err := g.SetBucketConfig(ctx, "lcv", "lifecycle", []byte(doc)); err != nil {
		t.Fatal(err)
	}
	clock := &lcClock{t: time.Now()}
	loops := []*repair.Loops{c.lifecycleLoops(0, clock), c.lifecycleLoops(1, clock), c.lifecycleLoops(2, clock)}
	put := func(prefix string, n int) map[string]uint64 {
		keys := map[string]uint64{}
		for i := range n {
			k := fmt.Sprintf("%s%02d", prefix, i)
			o, err := c.nodes[i%3].gw.PutObject(ctx, "lcv", k, &object.Object{Versioned: true}, bytes.NewReader([]byte(k)), int64(len(k)), object.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			keys[k] = o.HLC
		}
		return keys
	}
	first := put("k", 40)
	c.settle(t, "lcv")
	if n := lifecycleRounds(t, "lcv", loops...); n.ExpiredCurrent != 0 || n.Scanned != 40 {
		t.Fatalf("day 0: %+v; want 40 evaluated (each by one node), none expired", n)
	}
	clock.set(clock.now().Add(5 * 24 * time.Hour))
	c.settle(t, "lcv")
	if n := lifecycleRounds(t, "lcv", loops...); n.ExpiredCurrent != 40 || n.Errors != 0 {
		t.Fatalf("day 5: %+v; want 40 expired, once each", n)
	}
	c.expiredEverywhere(t, "lcv", first)
	c.settle(t, "lcv")
	if n := lifecycleRounds(t, "lcv", loops...); n.ExpiredCurrent != 0 || n.Errors != 0 {
		t.Fatalf("a round run again: %+v; want nothing to do", n)
	}

	// Node 2 goes down: nodes 1 and 3 take its keys.
	second := put("r", 30)
	c.settle(t, "lcv")
	clock.set(clock.now().Add(5 * 24 * time.Hour))
	c.stop(1)
	c.setNode("n2", func(n *clustermap.Node) { n.State = clustermap.StateDown })
	if n := lifecycleRounds(t, "lcv", loops[0], loops[2]); n.ExpiredCurrent != 30 || n.Errors != 0 {
		t.Fatalf("with n2 down: %+v; want the 30 new objects expired by the others", n)
	}
	// It comes back as a new process over its store: its runner finds the round due
	// (none recorded for this configuration since day 5) and runs it on keys whose
	// markers it missed: the markers it writes are the ones already written.
	c.restart(1)
	c.setNode("n2", func(n *clustermap.Node) { n.State = clustermap.StateUp })
	restarted := c.lifecycleLoops(1, clock)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); restarted.RunLifecycle(rctx) }()
	proctest.WaitFor(t, 20*time.Second, func() error {
		if s := restarted.LifecycleStatus(); len(s) != 1 || !s[0].Finished.Equal(clock.now()) {
			return fmt.Errorf("n2's round has not run: %+v", s)
		}
		return nil
	})
	cancel()
	<-done
	if s := restarted.LifecycleStatus()[0].Last; s.Errors != 0 || s.ExpiredCurrent == 0 {
		t.Fatalf("n2's round: %+v; want markers written again for the keys it holds first, without errors", s)
	}
	// Anti-entropy brings n2 the markers of the keys others hold first.
	if _, err := c.nodes[1].rep.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	all := first
	for k, v := range second {
		all[k] = v
	}
	c.expiredEverywhere(t, "lcv", all)
}

// TestLifecycleStaleFirstHolder: the first holder of a key missed the permanent delete of
// its current version (the other holders took it), so its own store still shows the
// older version as noncurrent and due. Its round reads the key as the cluster has it
// before it purges anything: there the older version is the current one, and it stays.
func TestLifecycleStaleFirstHolder(t *testing.T) {
	c := newCluster(t, 3, clusterConfig{timeout: 5 * time.Second})
	ctx := context.Background()
	c.createBucket("lcs")
	g := c.nodes[0].gw
	if err := g.SetBucketConfig(ctx, "lcs", "versioning", []byte("Enabled")); err != nil {
		t.Fatal(err)
	}
	doc := `<LifecycleConfiguration><Rule><ID>nc</ID><Filter/><Status>Enabled</Status>` +
		`<NoncurrentVersionExpiration><NoncurrentDays>2</NoncurrentDays></NoncurrentVersionExpiration></Rule></LifecycleConfiguration>`
	if err := g.SetBucketConfig(ctx, "lcs", "lifecycle", []byte(doc)); err != nil {
		t.Fatal(err)
	}
	var vs []*object.Object
	for _, body := range []string{"one", "two"} {
		o, err := g.PutObject(ctx, "lcs", "k", &object.Object{Versioned: true}, bytes.NewReader([]byte(body)), int64(len(body)), object.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		vs = append(vs, o)
	}
	c.settle(t, "lcs")
	tc, err := g.Topology().Layout(c.maps.Current())
	if err != nil {
		t.Fatal(err)
	}
	first := -1
	for i, nd := range c.nodes {
		if nd.id == tc.Table.Lookup("lcs", "k")[0] {
			first = i
			continue
		}
		// The permanent delete of the current version reaches every holder but the first.
		if _, err := nd.store.DeleteRecord("lcs", "k", object.Object{HLC: vs[1].HLC, Versioned: true, Purged: true}); err != nil {
			t.Fatal(err)
		}
	}
	clock := &lcClock{t: time.Now().Add(5 * 24 * time.Hour)}
	l := c.lifecycleLoops(first, clock)
	if err := l.LifecycleRound(ctx, "lcs"); err != nil {
		t.Fatal(err)
	}
	for _, p := range l.LifecycleStatus() {
		if p.Bucket == "lcs" && (p.Last.ExpiredNoncurrent != 0 || p.Last.Raced != 1 || p.Last.Errors != 0) {
			t.Fatalf("round on the stale first holder: %+v; want the purge found not due (raced 1)", p.Last)
		}
	}
	for i, nd := range c.nodes {
		l, err := nd.gw.ListVersions(ctx, "lcs", object.VersionListOptions{Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Versions) != 1 || l.Versions[0].Object.HLC != vs[0].HLC {
			t.Fatalf("through n%d: versions %+v, want only the first version (%d)", i+1, l.Versions, vs[0].HLC)
		}
	}
}
