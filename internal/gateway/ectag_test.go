package gateway

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/stripe"
	"github.com/cairnfs/cairn/internal/topology"
)

// setLevel sets the cluster's feature level (clustermap.Map.Level).
func (c *testCluster) setLevel(l int) {
	c.tb.Helper()
	if _, err := c.maps.Update(func(m *clustermap.Map) error { m.Level = l; return nil }); err != nil {
		c.tb.Fatal(err)
	}
}

// shardCounts returns, per stripe name, how many nodes hold a shard of it.
func (c *testCluster) shardCounts() map[string]int {
	out := map[string]int{}
	for _, nd := range c.nodes {
		nd.store.Scan(func(b, _ string) bool { return b == topology.ShardBucket }, func(e object.VersionEntry) error {
			if !e.Deleted {
				out[e.Key]++
			}
			return nil
		})
	}
	return out
}

// collectAt runs a sync round on every node with the loops' clock at now and returns
// the shards collected.
func (c *testCluster) collectAt(now time.Time) int {
	c.tb.Helper()
	clock := &lcClock{t: now}
	n := 0
	for i, nd := range c.nodes {
		nd.mu.Lock()
		up := nd.srv != nil
		nd.mu.Unlock()
		if !up {
			continue
		}
		st, err := c.lifecycleLoops(i, clock).Sync(context.Background())
		if err != nil {
			c.tb.Fatalf("sync on %s: %v", nd.id, err)
		}
		n += st.Collected
	}
	return n
}

// TestECLastWriterWins: of two overlapping 8 MiB uploads of one key in an erasure-coded
// class, through two gateways, the one that started first but finished last wins: from
// feature level 9 its stripes are named by a tag and its version is taken once its body
// is complete.
func TestECLastWriterWins(t *testing.T) {
	const size = 8 << 20
	ctx := context.Background()
	c := newECCluster(t)
	c.setLevel(LevelTaggedStripes)
	a, b := randBody(61, size), randBody(62, size)
	slow := newGatedReader(a, size/2)
	type result struct {
		o   *object.Object
		err error
	}
	done := make(chan result, 1)
	go func() {
		src, fin := md5Finish(slow)
		o, err := c.nodes[0].gw.PutObject(ctx, "b", "k", &object.Object{StorageClass: "EC42"}, src, size, object.PutOptions{Finish: fin})
		done <- result{o, err}
	}()
	select {
	case <-slow.reached:
	case r := <-done:
		t.Fatalf("the slow upload ended before its gate: %+v", r)
	}
	ob, err := putClass(ctx, c.nodes[3].gw, "b", "k", "EC42", b) // starts later, finishes first
	if err != nil {
		t.Fatal(err)
	}
	close(slow.release)
	ra := <-done
	if ra.err != nil {
		t.Fatalf("slow upload: %v", ra.err)
	}
	if !strings.HasPrefix(ra.o.Stripe.Upload, stripe.PutPrefix) || !strings.HasPrefix(ob.Stripe.Upload, stripe.PutPrefix) {
		t.Fatalf("stripes not named by a tag: %q %q", ra.o.Stripe.Upload, ob.Stripe.Upload)
	}
	if ra.o.HLC <= ob.HLC {
		t.Fatalf("the upload that finished last has version %d, not after %d", ra.o.HLC, ob.HLC)
	}
	for _, nd := range c.nodes {
		got, o, err := get(ctx, nd.gw, "b", "k", 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, a) || o.HLC != ra.o.HLC {
			t.Fatalf("%s read %d bytes at %d; want the upload that finished last (%d)", nd.id, len(got), o.HLC, ra.o.HLC)
		}
	}
	// The loser's stripes go once the grace has passed, the winner's stay.
	now := time.Now()
	if n := c.collectAt(now); n != 0 {
		t.Fatalf("collected %d shards within the grace", n)
	}
	if n := c.collectAt(now.Add(stripe.PutGrace + time.Minute)); n != 12 { // 2 stripes of 6
		t.Fatalf("collected %d shards of the replaced upload after the grace, want 12", n)
	}
	if got, _, err := get(ctx, c.nodes[5].gw, "b", "k", 0, -1); err != nil || !bytes.Equal(got, a) {
		t.Fatalf("read after collection: %v", err)
	}
}

// TestECTaggedCollection: tagged stripes that no record names (a PUT whose coordinator
// died before writing its record, a replaced or deleted version) are kept for the grace
// and collected after it (the loops' clock is moved, not waited for); the stripes of
// current versions, of a versioned key's noncurrent versions (whole PUTs and multipart
// completions), and of objects written before level 9 (named by their version) stay.
func TestECTaggedCollection(t *testing.T) {
	ctx := context.Background()
	c := newECCluster(t)
	g := c.nodes[0].gw
	// Before level 9: stripes named by the version.
	early := randBody(70, 1<<20+1)
	oe, err := putClass(ctx, g, "b", "early", "EC42", early)
	if err != nil || oe.Stripe.Upload != "" {
		t.Fatalf("early put: %+v %v", oe, err)
	}
	c.setLevel(LevelTaggedStripes)
	body := map[string][]byte{"early": early}
	for _, k := range []string{"over", "gone", "keep"} {
		body[k] = randBody(71, 1<<20)
		if _, err := putClass(ctx, g, "b", k, "EC42", body[k]); err != nil {
			t.Fatal(err)
		}
	}
	body["over"] = randBody(72, 1000)
	if _, err := putClass(ctx, c.nodes[2].gw, "b", "over", "EC42", body["over"]); err != nil {
		t.Fatal(err)
	}
	if err := g.DeleteObject(ctx, "b", "gone"); err != nil {
		t.Fatal(err)
	}
	delete(body, "gone")
	// A versioned key: a whole PUT and a multipart completion, both made noncurrent.
	v1 := putVersion(t, g, "b", "ver", "EC42", randBody(73, 1<<20))
	id, list, parts := ecUpload(t, c, "ver", 5<<20, 1000)
	vm, err := g.CompleteUpload(ctx, "b", "ver", id, list, 5<<20, func(o *object.Object, _ []*object.Object) error { o.Versioned = true; return nil })
	if err != nil {
		t.Fatal(err)
	}
	putVersion(t, c.nodes[1].gw, "b", "ver", "EC42", randBody(74, 1000))
	// An orphan: stripes of a PUT whose record was never written.
	if _, err := g.ec.Put(ctx, c.maps.Current().Classes["EC42"], "b/orphan", bytes.NewReader(randBody(75, 1000)), 1000,
		func(i int64) string { return stripe.PartKey("b", "orphan", stripe.PutTag(g.clock.Next()), 1, i) }); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if n := c.collectAt(now); n != 0 {
		t.Fatalf("collected %d tagged shards within the grace", n)
	}
	// After the grace: the replaced "over", the deleted "gone" and the orphan, a stripe
	// of 6 shards each.
	if n := c.collectAt(now.Add(stripe.PutGrace + time.Minute)); n != 18 {
		t.Fatalf("collected %d shards after the grace, want 18", n)
	}
	if n := c.collectAt(now.Add(2 * stripe.PutGrace)); n != 0 {
		t.Fatalf("a second round collected %d more", n)
	}
	for k, b := range body {
		if got, _, err := get(ctx, c.nodes[4].gw, "b", k, 0, -1); err != nil || !bytes.Equal(got, b) {
			t.Fatalf("%s after collection: %v", k, err)
		}
	}
	if got, err := readVersion(c.nodes[5].gw, "b", "ver", v1.HLC); err != nil || !bytes.Equal(got, randBody(73, 1<<20)) {
		t.Fatalf("noncurrent tagged version after collection: %v", err)
	}
	if got, err := readVersion(c.nodes[5].gw, "b", "ver", vm.HLC); err != nil || !bytes.Equal(got, append(append([]byte{}, parts[0]...), parts[1]...)) {
		t.Fatalf("noncurrent multipart version after collection: %v", err)
	}
}

// TestECNodeKilledMidUpload: a shard and record holder stops (its listener and
// connections closed, as a crash would) while an erasure-coded upload sends its body:
// the upload completes on the others (W=5 of 6 shards) and reads back; nothing
// acknowledged before or during it is lost, and collection rounds past the grace, with
// the node away and after it returns, remove none of the acknowledged objects' shards.
func TestECNodeKilledMidUpload(t *testing.T) {
	ctx := context.Background()
	c := newECCluster(t)
	c.setLevel(LevelTaggedStripes)
	acked := map[string][]byte{}
	objs := map[string]*object.Object{}
	for _, k := range []string{"a", "b", "c"} {
		acked[k] = randBody(uint64(80+len(acked)), 1<<20)
		o, err := putClass(ctx, c.nodes[0].gw, "b", k, "EC42", acked[k])
		if err != nil {
			t.Fatal(err)
		}
		objs[k] = o
	}
	const size = 6 << 20 // two stripes
	body := randBody(90, size)
	slow := newGatedReader(body, 4<<20+1) // the first stripe sent, the second being read
	type result struct {
		o   *object.Object
		err error
	}
	done := make(chan result, 1)
	go func() {
		src, fin := md5Finish(slow)
		o, err := c.nodes[0].gw.PutObject(ctx, "b", "slow", &object.Object{StorageClass: "EC42"}, src, size, object.PutOptions{Finish: fin})
		done <- result{o, err}
	}()
	<-slow.reached
	// Stop a holder of the key's record other than the coordinator.
	_, ts, err := c.nodes[0].gw.topo.Replicas("b", "slow")
	if err != nil {
		t.Fatal(err)
	}
	victim := -1
	for _, tg := range ts {
		if i := c.index(tg.ID); i != 0 {
			victim = i
			break
		}
	}
	c.stop(victim)
	close(slow.release)
	r := <-done
	if r.err != nil {
		t.Fatalf("upload with %s stopped: %v", c.nodes[victim].id, r.err)
	}
	acked["slow"], objs["slow"] = body, r.o
	check := func(when string) {
		t.Helper()
		for k, b := range acked {
			if got, _, err := get(ctx, c.nodes[0].gw, "b", k, 0, -1); err != nil || !bytes.Equal(got, b) {
				t.Fatalf("%s: %s: %v", when, k, err)
			}
		}
	}
	check("node away")
	later := time.Now().Add(stripe.PutGrace + time.Minute)
	if n := c.collectAt(later); n != 0 {
		t.Fatalf("node away: collected %d shards of acknowledged objects", n)
	}
	c.restart(victim)
	if n := c.collectAt(later); n != 0 {
		t.Fatalf("node back: collected %d shards of acknowledged objects", n)
	}
	check("node back")
	counts := c.shardCounts()
	for k, o := range objs {
		for _, name := range stripe.Names("b", k, o) {
			if counts[name] < 5 {
				t.Fatalf("%s: stripe %s has %d shards, fewer than the write quorum", k, name, counts[name])
			}
		}
	}
}

// TestECSlowBodyRefused: a PUT whose body took more than half of stripe.PutGrace to
// arrive (the gateway's clock moved, not waited for) writes no record and says so
// (Transient: 503, nothing written); the key keeps its acknowledged version, and the
// refused PUT's stripes are collected once the grace has passed.
func TestECSlowBodyRefused(t *testing.T) {
	ctx := context.Background()
	c := newECCluster(t)
	c.setLevel(LevelTaggedStripes)
	old := randBody(95, 1<<20)
	if _, err := putClass(ctx, c.nodes[1].gw, "b", "k", "EC42", old); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ahead time.Duration
	c.nodes[0].gw.clock.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(ahead) }
	const size = 5 << 20
	slow := newGatedReader(randBody(96, size), 4<<20+1)
	done := make(chan error, 1)
	go func() {
		src, fin := md5Finish(slow)
		_, err := c.nodes[0].gw.PutObject(ctx, "b", "k", &object.Object{StorageClass: "EC42"}, src, size, object.PutOptions{Finish: fin})
		done <- err
	}()
	<-slow.reached
	mu.Lock()
	ahead = stripe.PutGrace/2 + time.Minute
	mu.Unlock()
	close(slow.release)
	err := <-done
	if !errors.Is(errors.Transient, err) || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("a body that took %s: %v; want a Transient error saying nothing was written", stripe.PutGrace/2+time.Minute, err)
	}
	for _, nd := range c.nodes {
		if got, _, err := get(ctx, nd.gw, "b", "k", 0, -1); err != nil || !bytes.Equal(got, old) {
			t.Fatalf("%s after the refused PUT: %v", nd.id, err)
		}
	}
	now := time.Now()
	if n := c.collectAt(now.Add(stripe.PutGrace / 2)); n != 0 {
		t.Fatalf("collected %d shards within the grace", n)
	}
	if n := c.collectAt(now.Add(stripe.PutGrace + time.Minute)); n != 12 { // 2 stripes of 6
		t.Fatalf("collected %d shards of the refused PUT after the grace, want 12", n)
	}
	if got, _, err := get(ctx, c.nodes[2].gw, "b", "k", 0, -1); err != nil || !bytes.Equal(got, old) {
		t.Fatalf("after collection: %v", err)
	}
}
