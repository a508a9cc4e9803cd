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
	"github.com/cairnfs/cairn/internal/replica"
)

// Sync copies to a node what it missed while it was away (newer versions and tombstones),
// without the hint queue, and a second round finds nothing to do. Versions that reach the
// node while the round runs, between its comparison with the peers and the copies (a read
// repair under client load, a client's overwrite), are neither copied nor errors, and
// nothing is lost: before this was handled, every recovery under read load counted tens of
// copy errors (docs/benchmarks.md, "With the background budget").
func TestSyncRecoversMissedWrites(t *testing.T) {
	ctx := context.Background()
	var hook scanHook
	c := newCluster(t, 3, clusterConfig{wrap: func(from string, r replica.Replica) replica.Replica {
		if from != "n3" {
			return r
		}
		return hookedScans{Replica: r, hook: &hook}
	}})
	c.createBucket("b")
	g := c.nodes[0].gw
	for i := 0; i < 6; i++ {
		mustPut(t, g, "b", fmt.Sprintf("gone%d", i), []byte("to be deleted"))
	}
	c.stop(2)
	want := map[string]uint64{}
	for i := 0; i < 10; i++ {
		size := 100 + i
		if i == 3 {
			size = 3 << 20 // streamed, chunked
		}
		k := fmt.Sprintf("k%d", i)
		want[k] = mustPut(t, g, "b", k, randBody(uint64(i), size)).HLC
	}
	for i := 0; i < 6; i++ {
		if err := g.DeleteObject(ctx, "b", fmt.Sprintf("gone%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	c.restart(2)
	// Once n3 has compared records with both peers: k0 and k1 reach it as a read repair
	// does (the hint queue's copy), and k2 is overwritten by a client (all three holders
	// take the new version; the sources no longer have the one the round wants).
	hook.arm(2, func() {
		src := &replica.Local{Node: "n1", Store: c.nodes[0].store}
		dst := &replica.Local{Node: "n3", Store: c.nodes[2].store}
		for _, k := range []string{"k0", "k1"} {
			if _, err := replica.Copy(ctx, src, dst, "b", k, want[k], false); err != nil {
				t.Errorf("read repair of %s: %v", k, err)
			}
		}
		want["k2"] = mustPut(t, g, "b", "k2", randBody(99, 200)).HLC
		if !waitFor(10*time.Second, func() bool {
			o, err := c.nodes[2].store.StatVersion("b", "k2")
			return err == nil && o.HLC == want["k2"]
		}) {
			t.Errorf("the overwrite of k2 did not reach n3")
		}
	})
	st, err := c.nodes[2].rep.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !hook.fired() {
		t.Fatal("the round did not compare records with two peers")
	}
	if st.Copied != 7 || st.Present != 3 || st.Deleted != 6 || st.Errors != 0 || st.Peers != 2 {
		t.Fatalf("sync: %+v; want 7 copied, 3 present, 6 deleted from 2 peers, no errors", st)
	}
	for k, v := range want {
		if rs := c.replicaStates(0, "b", k); !converged(rs, v, false) {
			t.Fatalf("%s after sync: %+v", k, rs)
		}
	}
	for i := 0; i < 6; i++ {
		if o, err := c.nodes[2].store.StatVersion("b", fmt.Sprintf("gone%d", i)); err != nil || !o.Deleted {
			t.Fatalf("gone%d on the returning node: %+v %v; want its tombstone", i, o, err)
		}
	}
	st, err = c.nodes[2].rep.Sync(ctx)
	if err != nil || st.Copied+st.Deleted != 0 {
		t.Fatalf("second sync: %+v %v; want nothing to do", st, err)
	}
	// Converged replicas have equal digests: nothing is compared record by record.
	if st.Differing != 0 || st.Compared != 0 {
		t.Fatalf("second sync compared %d records in %d partitions; want digests equal everywhere", st.Compared, st.Differing)
	}
	// A round with nothing to copy still shows in the progress (recoverybench and
	// operators wait for a round that started after a change to end).
	if p := c.nodes[2].rep.Progress(); p.Running || !p.Started.Equal(st.Start) || p.ObjectsToDo != 0 {
		t.Fatalf("progress after a round with nothing to copy: %+v; want it started at %v, not running", p, st.Start)
	}
}

// scanHook runs a function once, when the nth Scan through hookedScans has returned: a
// point inside a sync round after it compared records with its peers, before it copies.
type scanHook struct {
	mu   sync.Mutex
	n    int
	fn   func()
	done bool
}

func (h *scanHook) arm(n int, fn func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n, h.fn, h.done = n, fn, false
}

func (h *scanHook) scanned() {
	h.mu.Lock()
	var fn func()
	if h.fn != nil {
		if h.n--; h.n == 0 {
			fn, h.fn, h.done = h.fn, nil, true
		}
	}
	h.mu.Unlock()
	if fn != nil {
		fn()
	}
}

func (h *scanHook) fired() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.done
}

// hookedScans is a Replica whose Scans count towards a scanHook.
type hookedScans struct {
	replica.Replica
	hook *scanHook
}

func (r hookedScans) Scan(ctx context.Context, partitions int, parts []int, fn func(object.VersionEntry)) error {
	err := r.Replica.Scan(ctx, partitions, parts, fn)
	r.hook.scanned()
	return err
}

// syncAll runs one sync round on every node, in order, and fails on errors.
func (c *testCluster) syncAll(order ...int) []repair.SyncStats {
	c.tb.Helper()
	if len(order) == 0 {
		for i := range c.nodes {
			order = append(order, i)
		}
	}
	out := make([]repair.SyncStats, len(c.nodes))
	for _, i := range order {
		st, err := c.nodes[i].rep.Sync(context.Background())
		if err != nil || st.Errors != 0 {
			c.tb.Fatalf("sync on %s: %+v %v", c.nodes[i].id, st, err)
		}
		out[i] = st
	}
	return out
}

// records counts the object records (tombstones included) in node i's store.
func (c *testCluster) records(i int) int {
	n := 0
	c.nodes[i].store.Scan(nil, func(object.VersionEntry) error { n++; return nil })
	return n
}

// A draining node's partitions move to the others: reads stay correct throughout, the
// new holders copy the data, and the draining node removes its copies only once every
// holder of each partition confirmed it (hand-off) — not while one of them is down.
func TestSyncDrainHandsOff(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 4, clusterConfig{})
	c.createBucket("b")
	want := map[string][]byte{}
	for i := range 40 {
		k := fmt.Sprintf("k%02d", i)
		want[k] = randBody(uint64(i), 1000+i*100)
		mustPut(t, c.nodes[i%4].gw, "b", k, want[k])
	}
	mustPut(t, c.nodes[0].gw, "b", "dead", []byte("x"))
	if err := c.nodes[0].gw.DeleteObject(ctx, "b", "dead"); err != nil {
		t.Fatal(err)
	}
	held := c.records(3)
	if held == 0 {
		t.Fatal("n4 holds nothing before the drain")
	}
	c.setNode("n4", func(n *clustermap.Node) { n.State = clustermap.StateDraining })
	checkReads := func(when string) {
		t.Helper()
		for k, body := range want {
			for i := range c.nodes {
				got, _, err := get(ctx, c.nodes[i].gw, "b", k, 0, -1)
				if err != nil || !bytes.Equal(got, body) {
					t.Fatalf("%s: read %s via %s: %v", when, k, c.nodes[i].id, err)
				}
			}
			if ids, _, _ := c.nodes[0].gw.topo.Placement("b", k); len(ids) != 3 || contains(ids, "n4") {
				t.Fatalf("%s: %s placed on %v; want 3 nodes without the draining n4", when, k, ids)
			}
		}
	}
	checkReads("before any sync")

	// A holder down: n4 must keep every copy whose partition that holder holds.
	c.setNode("n1", func(n *clustermap.Node) { n.State = clustermap.StateDown })
	sts := c.syncAll(1, 2, 3)
	if sts[3].HandedOff >= held || sts[3].Foreign != held {
		t.Fatalf("n4 with n1 down: %+v; want some of its %d records kept", sts[3], held)
	}
	if p := c.nodes[3].rep.Progress(); p.HandoffObjects != int64(held-sts[3].HandedOff) {
		t.Fatalf("progress shows %d records to hand off; want %d", p.HandoffObjects, held-sts[3].HandedOff)
	}
	c.setNode("n1", func(n *clustermap.Node) { n.State = clustermap.StateUp })
	c.syncAll(0, 1, 2, 3)
	if n := c.records(3); n != 0 {
		t.Fatalf("n4 still holds %d records after the holders confirmed", n)
	}
	if p := c.nodes[3].rep.Progress(); p.HandoffObjects != 0 {
		t.Fatalf("progress shows %d records to hand off after the drain", p.HandoffObjects)
	}
	for k := range want {
		for _, r := range c.replicaStates(0, "b", k) {
			if r.Missing || r.Error != "" {
				t.Fatalf("%s after the drain: %+v", k, c.replicaStates(0, "b", k))
			}
		}
	}
	if rs := c.replicaStates(0, "b", "dead"); !converged(rs, rs[0].HLC, true) {
		t.Fatalf("tombstone after the drain: %+v", rs)
	}
	checkReads("after the drain")
}

// With one copy per object (N = 1), draining moves every copy: until the new holder has
// it, reads find the object on its former holder.
func TestReadsFindFormerHolders(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, clusterConfig{class: clustermap.Class{Name: clustermap.StandardClass, N: 1, W: 1, R: 1, D: 1}})
	c.createBucket("b")
	k := c.keyWhere("b", "k", func(r []int) bool { return r[0] == 2 })
	body := randBody(9, 5000)
	mustPut(t, c.nodes[0].gw, "b", k, body)
	c.setNode("n3", func(n *clustermap.Node) { n.State = clustermap.StateDraining })
	for i := range c.nodes {
		got, _, err := get(ctx, c.nodes[i].gw, "b", k, 0, -1)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("read via %s before the new holder copied it: %v", c.nodes[i].id, err)
		}
		if o, err := c.nodes[i].gw.StatObject(ctx, "b", k); err != nil || o.Size != int64(len(body)) {
			t.Fatalf("stat via %s: %+v %v", c.nodes[i].id, o, err)
		}
	}
	if _, _, err := get(ctx, c.nodes[0].gw, "b", "never-written", 0, -1); err == nil {
		t.Fatal("a missing object was found")
	}
	c.syncAll(0, 1, 2)
	if n := c.records(2); n != 0 {
		t.Fatalf("drained n3 holds %d records", n)
	}
	got, _, err := get(ctx, c.nodes[2].gw, "b", k, 0, -1)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read after the hand-off: %v", err)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// A bucket missing from a node's map is NoSuchBucket only if the map could be brought up
// to date; otherwise (a node just restarted, no leader yet) the answer is to retry.
func TestUnknownBucketNeedsCurrentMap(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, clusterConfig{})
	g := c.nodes[0].gw
	g.cfg.Refresh = func(context.Context) error { return errors.E(errors.Transient, "no raft leader") }
	if _, err := g.StatObject(ctx, "nobucket", "k"); !errors.Is(errors.Transient, err) {
		t.Fatalf("unknown bucket with a map that cannot be refreshed: %v, want a Transient error", err)
	}
	g.cfg.Refresh = func(context.Context) error { return nil }
	if _, err := g.StatObject(ctx, "nobucket", "k"); !errors.IsErr(err, object.ErrNoSuchBucket) {
		t.Fatalf("unknown bucket with a current map: %v, want NoSuchBucket", err)
	}
}
