package repair

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/hlc"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// testClock is the injected clock of the lifecycle runner.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// setBuckets puts buckets with their configurations in the cluster's map (and creates
// them in every store), as OpSetBucketConfig would.
func (c *cluster) setBuckets(t *testing.T, cfgs map[string]map[string]string) {
	t.Helper()
	m := c.maps.Current().Clone()
	m.Epoch++
	if m.Buckets == nil {
		m.Buckets = map[string]clustermap.Bucket{}
	}
	for name, cfg := range cfgs {
		m.Buckets[name] = clustermap.Bucket{Name: name, Config: cfg}
		for _, n := range c.nodes {
			if err := n.st.CreateBucket(name); err != nil && !errors.Is(errors.Exist, err) {
				t.Fatal(err)
			}
		}
	}
	c.maps.Set(m)
}

// settle waits until every node's store holds every version and pending upload of
// bucket that the cluster acknowledged: a write returns once W holders have it, and a
// round decides on the records of this node's store.
func (c *cluster) settle(t *testing.T, bucket string) {
	t.Helper()
	count := func(n *node) (int, int) {
		l, err := n.st.ListVersions(bucket, object.VersionListOptions{Max: 100000})
		if err != nil {
			return -1, -1
		}
		ups := 0
		n.st.PendingUploads(func(u object.PendingUpload) error {
			if u.Bucket == bucket {
				ups++
			}
			return nil
		})
		return len(l.Versions), ups
	}
	proctest.WaitFor(t, 20*time.Second, func() error {
		want, wantUps := 0, 0
		for _, n := range c.nodes {
			v, u := count(n)
			want, wantUps = max(want, v), max(wantUps, u)
		}
		for _, n := range c.nodes {
			if v, u := count(n); v != want || u != wantUps {
				return fmt.Errorf("%s holds %d versions and %d uploads of %d and %d", n.id, v, u, want, wantUps)
			}
		}
		return nil
	})
}

// lifecycleRound runs a round of bucket on every node (once their stores hold every
// acknowledged write) and returns the counts summed.
func (c *cluster) lifecycleRound(t *testing.T, bucket string) LifecycleCounts {
	t.Helper()
	c.settle(t, bucket)
	var sum LifecycleCounts
	for _, n := range c.nodes {
		if err := n.loops.LifecycleRound(context.Background(), bucket); err != nil {
			t.Fatalf("%s: %v", n.id, err)
		}
		for _, p := range n.loops.LifecycleStatus() {
			if p.Bucket == bucket {
				sum.add(p.Last)
			}
		}
	}
	return sum
}

func putMeta(t *testing.T, c *cluster, bucket, key string, body []byte, meta object.Object) *object.Object {
	t.Helper()
	o, err := c.nodes[0].gw.PutObject(context.Background(), bucket, key, &meta, bytes.NewReader(body), int64(len(body)), object.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// exists reports whether bucket/key has a current version, as a quorum read through
// every gateway sees it (all must agree).
func (c *cluster) exists(t *testing.T, bucket, key string) bool {
	t.Helper()
	var got []bool
	for _, n := range c.nodes {
		_, err := n.gw.StatObject(context.Background(), bucket, key)
		if err != nil && !errors.Is(errors.NotExist, err) {
			t.Fatalf("%s: stat %s: %v", n.id, key, err)
		}
		got = append(got, err == nil)
	}
	for _, g := range got[1:] {
		if g != got[0] {
			t.Fatalf("%s/%s: gateways disagree: %v", bucket, key, got)
		}
	}
	return got[0]
}

// versionsOf lists bucket/key's versions through node 0's gateway, newest first, as
// "o" (object) or "m" (marker) followed by the version's HLC.
func (c *cluster) versionsOf(t *testing.T, bucket, key string) []uint64 {
	t.Helper()
	l, err := c.nodes[0].gw.ListVersions(context.Background(), bucket, object.VersionListOptions{Prefix: key, Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, v := range l.Versions {
		if v.Key == key {
			out = append(out, v.Object.HLC)
		}
	}
	return out
}

func newLifecycleCluster(t *testing.T) (*cluster, *testClock) {
	c := newCluster(t, 3)
	clock := &testClock{t: time.Now()}
	for _, n := range c.nodes {
		n.loops.now = clock.now
	}
	return c, clock
}

const lcDoc = `<LifecycleConfiguration>` +
	`<Rule><ID>tmp</ID><Filter><Tag><Key>tmp</Key><Value>yes</Value></Tag></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>` +
	`<Rule><ID>logs</ID><Filter><Prefix>logs/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>3</Days></Expiration></Rule>` +
	`<Rule><ID>big</ID><Filter><And><Prefix>data/</Prefix><ObjectSizeGreaterThan>1000</ObjectSizeGreaterThan></And></Filter><Status>Enabled</Status><Expiration><Days>10</Days></Expiration></Rule>` +
	`<Rule><ID>dated</ID><Filter><Prefix>dated/</Prefix></Filter><Status>Enabled</Status><Expiration><Date>%s</Date></Expiration></Rule>` +
	`<Rule><ID>off</ID><Filter><Prefix>data/</Prefix></Filter><Status>Disabled</Status><Expiration><Days>1</Days></Expiration></Rule>` +
	`<Rule><ID>uploads</ID><Filter><Prefix>up/</Prefix></Filter><Status>Enabled</Status><AbortIncompleteMultipartUpload><DaysAfterInitiation>2</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>` +
	`</LifecycleConfiguration>`

// TestLifecycleExpiration: expiration by days (tag, prefix, size filters) and by date,
// stale uploads aborted, in a bucket without versioning, with the clock moved forward;
// each action once over the three nodes, the same result through every gateway, and a
// round run again does nothing.
func TestLifecycleExpiration(t *testing.T) {
	c, clock := newLifecycleCluster(t)
	start := clock.now()
	day := func(n int) time.Time { return start.Add(time.Duration(n) * 24 * time.Hour) }
	date := day(8).UTC().Truncate(24 * time.Hour).Format(time.RFC3339)
	c.setBuckets(t, map[string]map[string]string{"lc": {lifecycleKind: fmt.Sprintf(lcDoc, date)}})

	putMeta(t, c, "lc", "tagged", []byte("x"), object.Object{Tags: [][2]string{{"tmp", "yes"}}})
	putMeta(t, c, "lc", "untagged", []byte("x"), object.Object{Tags: [][2]string{{"tmp", "no"}}})
	for i := range 5 {
		putMeta(t, c, "lc", fmt.Sprintf("logs/%d", i), []byte("log line"), object.Object{})
	}
	putMeta(t, c, "lc", "data/small", bytes.Repeat([]byte("s"), 1000), object.Object{})
	putMeta(t, c, "lc", "data/big", bytes.Repeat([]byte("b"), 1001), object.Object{})
	putMeta(t, c, "lc", "dated/x", []byte("x"), object.Object{})
	up, err := c.nodes[1].gw.CreateUpload(context.Background(), "lc", "up/file", &object.Object{})
	if err != nil {
		t.Fatal(err)
	}
	keep, err := c.nodes[1].gw.CreateUpload(context.Background(), "lc", "other/file", &object.Object{})
	if err != nil {
		t.Fatal(err)
	}
	want := func(when string, present ...string) {
		t.Helper()
		all := []string{"tagged", "untagged", "logs/0", "logs/4", "data/small", "data/big", "dated/x"}
		for _, k := range all {
			if got, w := c.exists(t, "lc", k), contains(present, k); got != w {
				t.Fatalf("%s: %s exists %v, want %v", when, k, got, w)
			}
		}
	}

	if n := c.lifecycleRound(t, "lc"); n.ExpiredCurrent != 0 || n.AbortedUploads != 0 || n.Errors != 0 {
		t.Fatalf("day 0: %+v", n)
	}
	want("day 0", "tagged", "untagged", "logs/0", "logs/4", "data/small", "data/big", "dated/x")
	clock.set(day(2))
	if n := c.lifecycleRound(t, "lc"); n.ExpiredCurrent != 1 || n.Errors != 0 {
		t.Fatalf("day 2: %+v; want the tagged object expired", n)
	}
	want("day 2", "untagged", "logs/0", "logs/4", "data/small", "data/big", "dated/x")
	clock.set(day(5))
	if n := c.lifecycleRound(t, "lc"); n.ExpiredCurrent != 5 || n.AbortedUploads != 1 || n.Errors != 0 {
		t.Fatalf("day 5: %+v; want 5 logs expired and 1 upload aborted", n)
	}
	want("day 5", "untagged", "data/small", "data/big", "dated/x")
	if _, err := c.nodes[0].gw.StatUpload(context.Background(), "lc", "up/file", up); err == nil {
		t.Fatal("the stale upload is still pending")
	}
	if _, err := c.nodes[0].gw.StatUpload(context.Background(), "lc", "other/file", keep); err != nil {
		t.Fatalf("an upload no rule covers: %v", err)
	}
	clock.set(day(12))
	if n := c.lifecycleRound(t, "lc"); n.ExpiredCurrent != 2 || n.Errors != 0 {
		t.Fatalf("day 12: %+v; want data/big and dated/x expired", n)
	}
	want("day 12", "untagged", "data/small")
	if n := c.lifecycleRound(t, "lc"); n.ExpiredCurrent+n.AbortedUploads+n.Errors != 0 {
		t.Fatalf("a round run again: %+v; want nothing to do", n)
	}
	for _, n := range c.nodes {
		if s := n.loops.LifecycleStatus(); len(s) != 1 || s[0].Finished.IsZero() || !s[0].Next.Equal(s[0].Finished.Add(DefaultLifecycleInterval)) {
			t.Fatalf("%s: status %+v", n.id, s)
		}
	}
}

func contains(s []string, k string) bool {
	for _, x := range s {
		if x == k {
			return true
		}
	}
	return false
}

const lcVersionedDoc = `<LifecycleConfiguration>` +
	`<Rule><ID>cur</ID><Filter><Prefix>cur/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>3</Days></Expiration></Rule>` +
	`<Rule><ID>nc</ID><Filter/><Status>Enabled</Status><NoncurrentVersionExpiration><NoncurrentDays>2</NoncurrentDays><NewerNoncurrentVersions>1</NewerNoncurrentVersions></NoncurrentVersionExpiration></Rule>` +
	`<Rule><ID>markers</ID><Filter><Prefix>gone/</Prefix></Filter><Status>Enabled</Status><Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration></Rule>` +
	`</LifecycleConfiguration>`

// TestLifecycleVersioned: in a versioned bucket a current version that expires gets a
// delete marker; noncurrent versions go NoncurrentDays after they became noncurrent
// except the NewerNoncurrentVersions newest; a delete marker that is the last version
// goes; noncurrent versions under a legal hold or a retention are skipped and counted.
func TestLifecycleVersioned(t *testing.T) {
	c, clock := newLifecycleCluster(t)
	ctx := context.Background()
	start := clock.now()
	day := func(n int) time.Time { return start.Add(time.Duration(n) * 24 * time.Hour) }
	c.setBuckets(t, map[string]map[string]string{"ver": {lifecycleKind: lcVersionedDoc, "versioning": "Enabled"}})
	v := object.Object{Versioned: true}

	null := putMeta(t, c, "ver", "nc/null", []byte("null"), object.Object{}) // written before versioning: the null version
	putMeta(t, c, "ver", "nc/null", []byte("v1"), v)
	nv2 := putMeta(t, c, "ver", "nc/null", []byte("v2"), v)
	cur := putMeta(t, c, "ver", "cur/a", []byte("1"), v)
	var nc []*object.Object
	for i := range 4 {
		nc = append(nc, putMeta(t, c, "ver", "nc/k", []byte{byte(i)}, v))
	}
	g1 := putMeta(t, c, "ver", "gone/k", []byte("x"), v)
	if _, err := c.nodes[0].gw.DeleteRecord(ctx, "ver", "gone/k", object.Object{DeleteMarker: true, Versioned: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.nodes[0].gw.DeleteRecord(ctx, "ver", "gone/k", object.Object{HLC: g1.HLC, Versioned: true, Purged: true}); err != nil {
		t.Fatal(err)
	}
	held := v
	held.LegalHold = true
	h1 := putMeta(t, c, "ver", "locked/hold", []byte("held"), held)
	putMeta(t, c, "ver", "locked/hold", []byte("next"), v)
	putMeta(t, c, "ver", "locked/hold", []byte("last"), v)
	retained := v
	retained.Retention = object.Retention{Mode: object.LockCompliance, Until: day(100).UnixNano()}
	r1 := putMeta(t, c, "ver", "locked/ret", []byte("kept"), retained)
	putMeta(t, c, "ver", "locked/ret", []byte("next"), v)
	putMeta(t, c, "ver", "locked/ret", []byte("last"), v)

	clock.set(day(5))
	n := c.lifecycleRound(t, "ver")
	// cur/a: a marker; nc/k: the two oldest of three noncurrent versions (one kept);
	// nc/null: its null version (a null tombstone); gone/k: its marker; locked/*: both
	// skipped.
	if n.ExpiredCurrent != 1 || n.ExpiredNoncurrent != 3 || n.RemovedMarkers != 1 || n.SkippedLocked != 2 || n.Errors != 0 {
		t.Fatalf("day 5: %+v", n)
	}
	if c.exists(t, "ver", "cur/a") {
		t.Fatal("cur/a still current")
	}
	if vs := c.versionsOf(t, "ver", "cur/a"); len(vs) != 2 || vs[0] != cur.HLC+1 || vs[1] != cur.HLC {
		t.Fatalf("cur/a versions %v, want the marker (%d) and the version (%d)", vs, cur.HLC+1, cur.HLC)
	}
	if vs := c.versionsOf(t, "ver", "nc/k"); len(vs) != 2 || vs[0] != nc[3].HLC || vs[1] != nc[2].HLC {
		t.Fatalf("nc/k versions %v, want %d %d", vs, nc[3].HLC, nc[2].HLC)
	}
	if vs := c.versionsOf(t, "ver", "nc/null"); len(vs) != 2 || vs[0] != nv2.HLC || vs[1] == null.HLC {
		t.Fatalf("nc/null versions %v: want two versioned ones, the null version (%d) gone", vs, null.HLC)
	}
	if vs := c.versionsOf(t, "ver", "gone/k"); len(vs) != 0 {
		t.Fatalf("gone/k versions %v, want none", vs)
	}
	if vs := c.versionsOf(t, "ver", "locked/hold"); len(vs) != 3 || vs[2] != h1.HLC {
		t.Fatalf("the held version went: %v", vs)
	}
	if vs := c.versionsOf(t, "ver", "locked/ret"); len(vs) != 3 || vs[2] != r1.HLC {
		t.Fatalf("the retained version went: %v", vs)
	}

	// The marker on cur/a is the current version now; the version behind it became
	// noncurrent on day 5 and is the newest noncurrent one: kept.
	clock.set(day(9))
	n = c.lifecycleRound(t, "ver")
	if n.ExpiredCurrent+n.ExpiredNoncurrent+n.RemovedMarkers != 0 || n.SkippedLocked != 2 || n.Errors != 0 {
		t.Fatalf("day 9: %+v", n)
	}
	if vs := c.versionsOf(t, "ver", "cur/a"); len(vs) != 2 {
		t.Fatalf("cur/a versions %v", vs)
	}
}

// TestLifecycleResumesAfterStop: a round cut short (its context ends after a few
// actions) is not recorded as finished but its progress is (after each page, here of 3
// records); the node's runner, started again over the same store, goes on after the last
// key recorded, with the round's own time, and the bucket ends as one uninterrupted
// round leaves it, each object expired once.
func TestLifecycleResumesAfterStop(t *testing.T) {
	c, clock := newLifecycleCluster(t)
	c.setBuckets(t, map[string]map[string]string{"lc": {lifecycleKind: fmt.Sprintf(lcDoc, "2020-01-01T00:00:00Z")}})
	var keys []string
	for i := range 30 {
		keys = append(keys, fmt.Sprintf("logs/%02d", i))
		putMeta(t, c, "lc", keys[i], []byte("x"), object.Object{})
	}
	clock.set(clock.now().Add(5 * 24 * time.Hour))
	c.settle(t, "lc")
	n1 := c.nodes[0]
	n1.loops.lcPage = 3
	ctx, cancel := context.WithCancel(context.Background())
	n1.loops.coord = &cutCoordinator{Coordinator: n1.gw, after: 6, cancel: cancel}
	if err := n1.loops.LifecycleRound(ctx, "lc"); err == nil {
		t.Fatal("a round cut short reported success")
	}
	rec := n1.loops.lifecycleRecord("lc")
	if !rec.At.IsZero() || !rec.Round.Equal(clock.now()) || rec.After == "" {
		t.Fatalf("the record of a round cut short: %+v; want no finished round, the round's time and its progress", rec)
	}
	first := n1.loops.LifecycleStatus()[0].Last.ExpiredCurrent
	// What the resumed round has left: the keys after the recorded one that n1 holds
	// first and that are still there.
	tc, err := n1.gw.Topology().Layout(c.maps.Current())
	if err != nil {
		t.Fatal(err)
	}
	left, mine := 0, 0
	for _, k := range keys {
		if tc.Table.Lookup("lc", k)[0] != n1.id {
			continue
		}
		mine++
		if o, err := n1.st.StatVersion("lc", k); k > rec.After && err == nil && !o.Deleted {
			left++
		}
	}
	t.Logf("n1 holds %d keys first; the cut round expired %d and recorded progress up to %q; %d left", mine, first, rec.After, left)
	// The node restarts: new loops over the same store, whose runner finds the round due.
	clock.set(clock.now().Add(time.Hour)) // the resumed round keeps its own time
	restarted := New(Config{NodeID: n1.id, Store: n1.st, Maps: c.maps, Topology: n1.gw.Topology(), Replica: n1.gw.Replica,
		Stripes: n1.gw.Stripes(), Coordinator: n1.gw, Clock: new(hlc.Clock), Now: clock.now, LifecycleTick: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	restarted.lcPage = 3
	rctx, rcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); restarted.RunLifecycle(rctx) }()
	proctest.WaitFor(t, 20*time.Second, func() error {
		if s := restarted.LifecycleStatus(); len(s) != 1 || s[0].Finished.IsZero() {
			return fmt.Errorf("the round has not run again: %+v", s)
		}
		return nil
	})
	rcancel()
	<-done
	st := restarted.LifecycleStatus()[0]
	second := st.Last
	if second.Errors != 0 || st.ResumedAfter != rec.After || second.Scanned != int64(left) || !st.Finished.Equal(rec.Round) {
		t.Fatalf("the resumed round: %+v; want it to go on after %q (%d keys left) at %v", st, rec.After, left, rec.Round)
	}
	for _, n := range c.nodes[1:] {
		if err := n.loops.LifecycleRound(context.Background(), "lc"); err != nil {
			t.Fatal(err)
		}
		first += n.loops.LifecycleStatus()[0].Last.ExpiredCurrent
	}
	if total := first + second.ExpiredCurrent; total != 30 {
		t.Fatalf("expired %d (cut round and others %d, resumed %d), want 30 once each", total, first, second.ExpiredCurrent)
	}
	for _, k := range keys {
		if c.exists(t, "lc", k) {
			t.Fatalf("%s not expired", k)
		}
	}
}

// TestLifecycleStopsOnNewConfig: a configuration deleted during a round (its rule was
// wrong, say) stops the round's deletions at once. The round went on to its end with the
// rules it started with, expiring every key of the bucket this node holds first.
func TestLifecycleStopsOnNewConfig(t *testing.T) {
	c, clock := newLifecycleCluster(t)
	c.setBuckets(t, map[string]map[string]string{"lc": {lifecycleKind: fmt.Sprintf(lcDoc, "2020-01-01T00:00:00Z")}})
	for i := range 40 {
		putMeta(t, c, "lc", fmt.Sprintf("logs/%02d", i), []byte("x"), object.Object{})
	}
	clock.set(clock.now().Add(5 * 24 * time.Hour))
	c.settle(t, "lc")
	n1 := c.nodes[0]
	n1.loops.lcPage = 3
	n1.loops.coord = &hookCoordinator{Coordinator: n1.gw, after: 2, hook: func() {
		c.setBuckets(t, map[string]map[string]string{"lc": {}}) // DeleteBucketLifecycle
	}}
	if err := n1.loops.LifecycleRound(context.Background(), "lc"); !errors.IsErr(err, errLifecycleChanged) {
		t.Fatalf("a round whose configuration was deleted: %v", err)
	}
	if got := n1.loops.LifecycleStatus(); len(got) != 0 {
		t.Fatalf("status of a bucket without rules: %+v", got)
	}
	if n := n1.loops.LifecycleTotals().ExpiredCurrent; n != 2 {
		t.Fatalf("%d keys expired, want the 2 expired before the configuration was deleted", n)
	}
}

// TestLifecycleStopsOnVersioning: versioning enabled during a round stops it: the round
// went on expiring current versions as deletes (the bucket was unversioned when it
// started), where they must now stay as noncurrent versions under a delete marker.
func TestLifecycleStopsOnVersioning(t *testing.T) {
	c, clock := newLifecycleCluster(t)
	doc := fmt.Sprintf(lcDoc, "2020-01-01T00:00:00Z")
	c.setBuckets(t, map[string]map[string]string{"lc": {lifecycleKind: doc}})
	for i := range 40 {
		putMeta(t, c, "lc", fmt.Sprintf("logs/%02d", i), []byte("x"), object.Object{})
	}
	clock.set(clock.now().Add(5 * 24 * time.Hour))
	c.settle(t, "lc")
	n1 := c.nodes[0]
	n1.loops.lcPage = 3
	n1.loops.coord = &hookCoordinator{Coordinator: n1.gw, after: 2, hook: func() {
		c.setBuckets(t, map[string]map[string]string{"lc": {lifecycleKind: doc, "versioning": "Enabled"}})
	}}
	if err := n1.loops.LifecycleRound(context.Background(), "lc"); !errors.IsErr(err, errLifecycleChanged) {
		t.Fatalf("a round whose bucket's versioning was enabled: %v", err)
	}
	if n := n1.loops.LifecycleTotals().ExpiredCurrent; n != 2 {
		t.Fatalf("%d keys expired as deletes, want the 2 expired before versioning was enabled", n)
	}
}

// hookCoordinator calls hook after a number of deletions.
type hookCoordinator struct {
	Coordinator
	after int
	hook  func()
}

func (c *hookCoordinator) DeleteRecord(ctx context.Context, bucket, key string, d object.Object) (*object.Object, error) {
	o, err := c.Coordinator.DeleteRecord(ctx, bucket, key, d)
	if c.after--; c.after == 0 {
		c.hook()
	}
	return o, err
}

// cutCoordinator ends its round's context after a number of deletions (a node stopped
// mid-round).
type cutCoordinator struct {
	Coordinator
	mu     sync.Mutex
	after  int
	cancel func()
}

func (c *cutCoordinator) DeleteRecord(ctx context.Context, bucket, key string, d object.Object) (*object.Object, error) {
	c.mu.Lock()
	c.after--
	stop := c.after < 0
	c.mu.Unlock()
	if stop {
		c.cancel()
		return nil, ctx.Err()
	}
	return c.Coordinator.DeleteRecord(ctx, bucket, key, d)
}

// BenchmarkLifecycleScan is the runner's scan rate on one node: a round over a bucket of
// benchObjects small objects held by this node (no rule due, so no action: the cost of
// reading the records, deciding who holds each first and evaluating 10 rules on this
// node's third). Reported as records/s (every local record read) and evaluated/s.
func BenchmarkLifecycleScan(b *testing.B) {
	const benchObjects = 100_000
	c := newCluster(b, 3)
	var rules strings.Builder
	for i := range 9 {
		fmt.Fprintf(&rules, `<Rule><ID>p%d</ID><Filter><Prefix>logs%d/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>30</Days></Expiration></Rule>`, i, i)
	}
	rules.WriteString(`<Rule><ID>all</ID><Filter/><Status>Enabled</Status><Expiration><Days>3650</Days></Expiration><NoncurrentVersionExpiration><NoncurrentDays>30</NoncurrentDays></NoncurrentVersionExpiration></Rule>`)
	m := c.maps.Current().Clone()
	m.Epoch++
	m.Buckets = map[string]clustermap.Bucket{"b": {Name: "b", Config: map[string]string{lifecycleKind: "<LifecycleConfiguration>" + rules.String() + "</LifecycleConfiguration>"}}}
	c.maps.Set(m)
	n1 := c.nodes[0]
	var wg sync.WaitGroup
	work := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				body := []byte("x")
				if _, err := n1.st.PutObject(context.Background(), "b", fmt.Sprintf("data/%08d", i), &object.Object{ModTime: time.Now().UnixNano()},
					bytes.NewReader(body), 1, object.PutOptions{}); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	for i := range benchObjects {
		work <- i
	}
	close(work)
	wg.Wait()
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		if err := n1.loops.LifecycleRound(context.Background(), "b"); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start).Seconds()
	b.ReportMetric(float64(benchObjects)*float64(b.N)/el, "records/s")
	b.ReportMetric(float64(n1.loops.LifecycleTotals().Scanned)/el, "evaluated/s")
}

// TestLifecycleSuspended: in a bucket whose versioning is Suspended an expired null
// version is replaced by a null delete marker (as S3 does), which a later round removes
// as a lone marker.
func TestLifecycleSuspended(t *testing.T) {
	c, clock := newLifecycleCluster(t)
	doc := `<LifecycleConfiguration>` +
		`<Rule><ID>days</ID><Filter><Prefix>s/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>3</Days></Expiration></Rule>` +
		`<Rule><ID>markers</ID><Filter><Prefix>s/</Prefix></Filter><Status>Enabled</Status><Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration></Rule>` +
		`</LifecycleConfiguration>`
	c.setBuckets(t, map[string]map[string]string{"sus": {lifecycleKind: doc, "versioning": "Suspended"}})
	o := putMeta(t, c, "sus", "s/a", []byte("x"), object.Object{})
	clock.set(clock.now().Add(5 * 24 * time.Hour))
	if n := c.lifecycleRound(t, "sus"); n.ExpiredCurrent != 1 || n.Errors != 0 {
		t.Fatalf("first round: %+v", n)
	}
	if vs := c.versionsOf(t, "sus", "s/a"); len(vs) != 1 || vs[0] != o.HLC+1 {
		t.Fatalf("versions %v, want the null marker %d alone", vs, o.HLC+1)
	}
	if n := c.lifecycleRound(t, "sus"); n.RemovedMarkers != 1 || n.Errors != 0 {
		t.Fatalf("second round: %+v", n)
	}
	if vs := c.versionsOf(t, "sus", "s/a"); len(vs) != 0 {
		t.Fatalf("versions %v, want none", vs)
	}
}

// TestLifecycleSchedule: the runner runs a new configuration at its first tick, not again
// before the interval has passed by its clock, again once it has, at once after the
// configuration changed, and on RunLifecycleNow; a round that fails (a holder cut off:
// no delete quorum) is not recorded and is counted.
func TestLifecycleSchedule(t *testing.T) {
	c, clock := newLifecycleCluster(t)
	doc := func(days int) string {
		return fmt.Sprintf(`<LifecycleConfiguration><Rule><ID>r</ID><Filter/><Status>Enabled</Status><Expiration><Days>%d</Days></Expiration></Rule></LifecycleConfiguration>`, days)
	}
	c.setBuckets(t, map[string]map[string]string{"lc": {lifecycleKind: doc(30)}})
	n1 := c.nodes[0]
	l := New(Config{NodeID: n1.id, Store: n1.st, Maps: c.maps, Topology: n1.gw.Topology(), Replica: n1.gw.Replica,
		Stripes: n1.gw.Stripes(), Coordinator: n1.gw, Clock: new(hlc.Clock), Now: clock.now, LifecycleTick: 5 * time.Millisecond,
		LifecycleInterval: 24 * time.Hour, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.RunLifecycle(ctx) }()
	stop := func() { cancel(); <-done }
	rounds := func(want int64) func() error {
		return func() error {
			if got := l.LifecycleTotals().Rounds; got != want {
				return fmt.Errorf("%d rounds, want %d", got, want)
			}
			return nil
		}
	}
	proctest.WaitFor(t, 20*time.Second, rounds(1))
	proctest.Holds(t, 200*time.Millisecond, rounds(1)) // not due again by the clock
	clock.set(clock.now().Add(25 * time.Hour))
	proctest.WaitFor(t, 20*time.Second, rounds(2))
	c.setBuckets(t, map[string]map[string]string{"lc": {lifecycleKind: doc(31)}})
	proctest.WaitFor(t, 20*time.Second, rounds(3))
	l.RunLifecycleNow()
	proctest.WaitFor(t, 20*time.Second, rounds(4))

	stop()

	// An object due that n1 holds first, with every other holder cut off from n1: no
	// delete quorum.
	key := ""
	tc, err := n1.gw.Topology().Layout(c.maps.Current())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("k%d", i); tc.Table.Lookup("lc", k)[0] == n1.id {
			key = k
		}
	}
	putMeta(t, c, "lc", key, []byte("x"), object.Object{})
	c.settle(t, "lc")
	clock.set(clock.now().Add(40 * 24 * time.Hour))
	var heal []func()
	for _, n := range c.nodes[1:] {
		f := c.faults(n1.id, n.id)
		f.Partition()
		heal = append(heal, f.Heal)
	}
	if err := l.LifecycleRound(context.Background(), "lc"); err == nil {
		t.Fatal("a round whose action failed reported success")
	}
	st := l.LifecycleStatus()
	if len(st) != 1 || st[0].Err == "" || st[0].Last.Errors == 0 || !st[0].Finished.Before(clock.now()) {
		t.Fatalf("status after a failed round %+v", st)
	}
	for _, h := range heal {
		h()
	}
}

// newTierCluster is four nodes, two of device class archive with the class COLD on them,
// the class tier "cold" of that class with the given recall mode, the map at feature
// level 9 with the tier bucket, and every node holding every record; the loops use the
// returned clock.
func newTierCluster(t *testing.T, recall string) (*cluster, *testClock) {
	t.Helper()
	c := newCluster(t, 4)
	clock := &testClock{t: time.Now()}
	for _, n := range c.nodes {
		n.loops.now = clock.now
	}
	m := c.maps.Current().Clone()
	m.Epoch++
	m.Level = clustermap.TierBucketLevel
	m.Replicas = 4 // every node holds every record (settle compares the stores)
	m.Classes[clustermap.StandardClass] = clustermap.Class{Name: clustermap.StandardClass, N: 4, W: 2, R: 1, D: 2}
	m.Nodes[2].DeviceClass, m.Nodes[3].DeviceClass = "archive", "archive"
	m.Classes["COLD"] = clustermap.Class{Name: "COLD", N: 2, W: 2, R: 1, D: 2, DeviceClass: "archive", Chunk: 64 << 10}
	m.Tiers = map[string]clustermap.Tier{"cold": {Name: "cold", Kind: clustermap.TierClass, Class: "COLD", Recall: recall}}
	c.maps.Set(m)
	c.setBuckets(t, map[string]map[string]string{clustermap.TierBucket: nil})
	return c, clock
}

// TestLifecycleTransition: Transition rules (Days, and Date) move current versions to a
// class tier through the tiers' migration, with the clock moved forward: due versions
// only, once over the four nodes (a second round finds them archived), each archived on
// every holder with its metadata and read back identical (a recall); a rule naming a
// tier the map lacks fails its action and archives nothing.
func TestLifecycleTransition(t *testing.T) {
	c, clock := newTierCluster(t, clustermap.RecallTransparent)
	start := clock.now()
	day := func(n int) time.Time { return start.Add(time.Duration(n) * 24 * time.Hour) }
	date := day(10).UTC().Truncate(24 * time.Hour).Format(time.RFC3339)
	doc := `<LifecycleConfiguration>` +
		`<Rule><ID>old</ID><Filter><Prefix>old/</Prefix></Filter><Status>Enabled</Status><Transition><Days>30</Days><StorageClass>COLD</StorageClass></Transition></Rule>` +
		`<Rule><ID>dated</ID><Filter><Prefix>dated/</Prefix></Filter><Status>Enabled</Status><Transition><Date>` + date + `</Date><StorageClass>cold</StorageClass></Transition></Rule>` +
		`</LifecycleConfiguration>`
	c.setBuckets(t, map[string]map[string]string{"lt": {lifecycleKind: doc}, clustermap.TierBucket: nil})
	bodies := map[string][]byte{}
	for i, k := range []string{"old/a", "old/b", "dated/c", "other/d"} {
		bodies[k] = bytes.Repeat([]byte{byte('a' + i)}, 200<<10+i)
		putMeta(t, c, "lt", k, bodies[k], object.Object{ContentType: "text/x-lt", UserMeta: [][2]string{{"n", k}}})
	}
	archived := func(key string) bool {
		_, ts, err := c.nodes[0].gw.Topology().Replicas("lt", key)
		if err != nil {
			t.Fatal(err)
		}
		all := true
		for _, tg := range ts {
			for _, n := range c.nodes {
				if n.id == tg.ID {
					o, err := n.st.StatVersion("lt", key)
					all = all && err == nil && o.Tiered()
				}
			}
		}
		return all
	}
	want := func(when string, arch ...string) {
		t.Helper()
		for k := range bodies {
			if got, w := archived(k), contains(arch, k); got != w {
				t.Fatalf("%s: %s archived %v, want %v", when, k, got, w)
			}
		}
	}
	if got := c.lifecycleRound(t, "lt"); got.Transitioned != 0 || got.Errors != 0 {
		t.Fatalf("round at the start: %+v", got)
	}
	want("at the start")
	clock.set(day(11))
	if got := c.lifecycleRound(t, "lt"); got.Transitioned != 1 || got.Errors != 0 {
		t.Fatalf("round after the date: %+v, want 1 transition", got)
	}
	want("after the date", "dated/c")
	clock.set(day(31))
	if got := c.lifecycleRound(t, "lt"); got.Transitioned != 2 || got.TransitionedBytes != int64(len(bodies["old/a"])+len(bodies["old/b"])) || got.Errors != 0 {
		t.Fatalf("round after 30 days: %+v, want 2 transitions", got)
	}
	want("after 30 days", "dated/c", "old/a", "old/b")
	if got := c.lifecycleRound(t, "lt"); got.Transitioned != 0 || got.Errors != 0 {
		t.Fatalf("round again: %+v, want nothing to do", got)
	}
	// The metadata stays in the record; a read recalls the bytes.
	ctx := context.Background()
	for _, k := range []string{"old/a", "dated/c"} {
		o, err := c.nodes[1].gw.StatObject(ctx, "lt", k)
		if err != nil || o.ContentType != "text/x-lt" || len(o.UserMeta) != 1 || o.UserMeta[0] != [2]string{"n", k} || o.Size != int64(len(bodies[k])) {
			t.Fatalf("stat %s: %+v, %v", k, o, err)
		}
		rd, err := c.nodes[1].gw.OpenObject(ctx, "lt", k)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		_, err = rd.WriteRange(ctx, &buf, 0, rd.Info().Size)
		rd.Close()
		if err != nil || !bytes.Equal(buf.Bytes(), bodies[k]) {
			t.Fatalf("read %s: %d bytes, %v; want the %d written", k, buf.Len(), err, len(bodies[k]))
		}
	}
	proctest.WaitFor(t, 20*time.Second, func() error { // the reads streamed; the recalls run behind them
		if archived("old/a") || archived("dated/c") {
			return fmt.Errorf("old/a or dated/c still archived")
		}
		return nil
	})
	want("after the reads", "old/b")
	// A rule naming a tier the map does not have: the action fails, nothing is archived.
	m := c.maps.Current().Clone()
	m.Epoch++
	delete(m.Tiers, "cold")
	m.Tiers["gone"] = clustermap.Tier{Name: "gone", Kind: clustermap.TierClass, Class: "COLD"}
	c.maps.Set(m)
	c.setBuckets(t, map[string]map[string]string{"lt": {lifecycleKind: strings.ReplaceAll(doc, "<StorageClass>COLD<", "<StorageClass>nowhere<")}})
	putMeta(t, c, "lt", "old/e", []byte("e"), object.Object{})
	clock.set(day(62))
	c.settle(t, "lt")
	var errs int64
	for _, n := range c.nodes {
		n.loops.LifecycleRound(ctx, "lt")
		for _, p := range n.loops.LifecycleStatus() {
			if p.Bucket == "lt" {
				errs += p.Last.Errors
				if p.Last.Errors > 0 && !strings.Contains(p.Err, `no archive tier "`) {
					t.Fatalf("%s: the failed round says %q", n.id, p.Err)
				}
			}
		}
	}
	if errs != 3 { // old/a (recalled) and old/e to "nowhere", dated/c (recalled) to "cold", gone
		t.Fatalf("%d failed actions, want 3", errs)
	}
	if archived("old/e") || archived("old/a") || archived("dated/c") {
		t.Fatal("archived in a tier the map lacks")
	}
}

// TestLifecycleNoncurrentTransition: a NoncurrentVersionTransition moves noncurrent
// versions to a class tier NoncurrentDays after their successor was written (the clock
// moved forward), beyond the NewerNoncurrentVersions newest, once over the four nodes;
// the current version stays local; a version under a retention goes too (a class tier
// keeps the lock's guarantee) and keeps its lock; the archived versions read back
// identical by their id; a later round finds nothing to do.
func TestLifecycleNoncurrentTransition(t *testing.T) {
	c, clock := newTierCluster(t, clustermap.RecallTransparent)
	ctx := context.Background()
	start := clock.now()
	day := func(n int) time.Time { return start.Add(time.Duration(n) * 24 * time.Hour) }
	doc := `<LifecycleConfiguration><Rule><ID>nt</ID><Filter/><Status>Enabled</Status>` +
		`<NoncurrentVersionTransition><NoncurrentDays>10</NoncurrentDays><StorageClass>COLD</StorageClass><NewerNoncurrentVersions>1</NewerNoncurrentVersions></NoncurrentVersionTransition>` +
		`</Rule></LifecycleConfiguration>`
	c.setBuckets(t, map[string]map[string]string{"nt": {lifecycleKind: doc, "versioning": "Enabled"}, clustermap.TierBucket: nil})
	v := object.Object{Versioned: true, ContentType: "text/x-nt"}
	retained := v
	retained.Retention = object.Retention{Mode: object.LockCompliance, Until: day(400).UnixNano()}
	bodies := map[uint64][]byte{}
	put := func(key string, i int, meta object.Object) *object.Object {
		b := bytes.Repeat([]byte{byte('a' + i)}, 100<<10+i)
		o := putMeta(t, c, "nt", key, b, meta)
		bodies[o.HLC] = b
		return o
	}
	k1, k2, k3 := put("k", 0, v), put("k", 1, v), put("k", 2, v) // k1 and k2 noncurrent, k2 the newest of them
	l1 := put("locked", 3, retained)
	l2, l3 := put("locked", 4, v), put("locked", 5, v)
	keyOf := map[*object.Object]string{k1: "k", k2: "k", k3: "k", l1: "locked", l2: "locked", l3: "locked"}
	archived := func(key string, hlc uint64) bool {
		_, ts, err := c.nodes[0].gw.Topology().Replicas("nt", key)
		if err != nil {
			t.Fatal(err)
		}
		all := true
		for _, tg := range ts {
			for _, n := range c.nodes {
				if n.id == tg.ID {
					o, err := n.st.StatAt("nt", key, hlc)
					all = all && err == nil && o.Tiered()
				}
			}
		}
		return all
	}
	want := func(when string, arch ...*object.Object) {
		t.Helper()
		for _, o := range []*object.Object{k1, k2, k3, l1, l2, l3} {
			w := false
			for _, a := range arch {
				w = w || a == o
			}
			if got := archived(keyOf[o], o.HLC); got != w {
				t.Fatalf("%s: version %x archived %v, want %v", when, o.HLC, got, w)
			}
		}
	}
	clock.set(day(10)) // due at the midnight after day 10
	if got := c.lifecycleRound(t, "nt"); got.TransitionedNoncurrent != 0 || got.Errors != 0 {
		t.Fatalf("round at day 10: %+v", got)
	}
	want("at day 10")
	clock.set(day(12))
	got := c.lifecycleRound(t, "nt")
	if got.TransitionedNoncurrent != 2 || got.Transitioned != 0 || got.TransitionedBytes != int64(len(bodies[k1.HLC])+len(bodies[l1.HLC])) || got.Errors != 0 {
		t.Fatalf("round at day 12: %+v, want k1 and l1 moved", got)
	}
	want("at day 12", k1, l1)
	if got := c.lifecycleRound(t, "nt"); got.TransitionedNoncurrent != 0 || got.Errors != 0 {
		t.Fatalf("round again: %+v, want nothing to do", got)
	}
	for _, n := range c.nodes {
		if o, err := n.st.StatAt("nt", "locked", l1.HLC); err == nil && (o.Retention != retained.Retention || !o.Locked(day(12).UnixNano(), false)) {
			t.Fatalf("%s: the archived locked version lost its lock: %+v", n.id, o.Retention)
		}
	}
	if _, err := c.nodes[0].gw.DeleteRecord(ctx, "nt", "locked", object.Object{HLC: l1.HLC, Versioned: true, Purged: true}); err == nil {
		t.Fatal("the archived locked version was purged")
	}
	for _, o := range []*object.Object{k1, l1} {
		rd, err := c.nodes[1].gw.OpenVersion(ctx, "nt", keyOf[o], o.HLC)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		_, err = rd.WriteRange(ctx, &buf, 0, rd.Info().Size)
		info := rd.Info()
		rd.Close()
		if err != nil || !bytes.Equal(buf.Bytes(), bodies[o.HLC]) || info.ContentType != "text/x-nt" {
			t.Fatalf("read %x: %d bytes, %v, %q; want the %d written", o.HLC, buf.Len(), err, info.ContentType, len(bodies[o.HLC]))
		}
	}
}
