package gateway

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// setPolicy sets bucket's placement policy and raises its apply generation.
func (c *testCluster) applyPolicy(bucket, rules string) uint64 {
	c.tb.Helper()
	var gen uint64
	if _, err := c.maps.Update(func(m *clustermap.Map) error {
		b := m.Buckets[bucket]
		b.Policy = rules
		b.Apply++
		gen = b.Apply
		m.Buckets[bucket] = b
		return nil
	}); err != nil {
		c.tb.Fatal(err)
	}
	return gen
}

// applyAll runs one apply pass on every node and returns the objects left for later.
func (c *testCluster) applyAll(bucket string, gen uint64) (left int64, moved int64) {
	var wg sync.WaitGroup
	lefts := make([]int64, len(c.nodes))
	for i, nd := range c.nodes {
		if nd.gw == nil {
			continue
		}
		wg.Go(func() { lefts[i] = nd.rep.ApplyPass(context.Background(), bucket, gen) })
	}
	wg.Wait()
	for i, nd := range c.nodes {
		left += lefts[i]
		if nd.gw == nil {
			continue
		}
		for _, p := range nd.rep.ApplyStatus() {
			if p.Bucket == bucket {
				moved += p.Moved
			}
		}
	}
	return left, moved
}

// Applying a policy re-places existing objects: STANDARD objects a rule sends to EC42
// become striped, EC objects a rule sends to STANDARD become whole copies, objects no rule
// matches stay. Versions, ETags and modification times are kept, the bytes read back
// identical through every gateway, and a second pass finds nothing to do.
func TestApplyPolicy(t *testing.T) {
	ctx := context.Background()
	c := newECCluster(t)
	bodies := map[string][]byte{}
	before := map[string]*object.Object{}
	put := func(key, class string, size int) {
		bodies[key] = randBody(uint64(len(key)*size+1), size)
		o, err := putClass(ctx, c.nodes[len(bodies)%6].gw, "b", key, class, bodies[key])
		if err != nil {
			t.Fatal(err)
		}
		before[key] = o
	}
	put("a.log", "", 3<<20+17)
	put("b.log", "", 10)
	put("empty.log", "", 0)
	put("c.txt", "", 2<<20)
	put("d.root", "EC42", 5<<20+3)
	put("e.root", "EC42", 100)
	// A multipart object keeps its parts.
	upID, err := c.nodes[0].gw.CreateUpload(ctx, "b", "mp.log", &object.Object{})
	if err != nil {
		t.Fatal(err)
	}
	var parts []object.CompletePart
	var mp []byte
	for n := 1; n <= 2; n++ {
		body := randBody(uint64(90+n), 5<<20+n)
		src, fin := md5Finish(bytes.NewReader(body))
		p, err := c.nodes[0].gw.PutPart(ctx, "b", "mp.log", upID, n, src, int64(len(body)), fin)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, object.CompletePart{Number: n, ETag: p.ETag})
		mp = append(mp, body...)
	}
	o, err := c.nodes[0].gw.CompleteUpload(ctx, "b", "mp.log", upID, parts, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	bodies["mp.log"], before["mp.log"] = mp, o

	gen := c.applyPolicy("b", "*.log => EC42\n*.root => STANDARD\n")
	left, moved := c.applyAll("b", gen)
	if left != 0 || moved != 6 {
		t.Fatalf("apply pass: %d left, %d moved; want 0 and 6 (4 logs, 2 roots)", left, moved)
	}
	for key, body := range bodies {
		for i := range c.nodes {
			got, info, err := get(ctx, c.nodes[i].gw, "b", key, 0, -1)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("%s through %s after apply: %v", key, c.nodes[i].id, err)
			}
			b := before[key]
			if info.HLC != b.HLC || info.ETag != b.ETag || info.ModTime != b.ModTime || len(info.PartSizes) != len(b.PartSizes) {
				t.Fatalf("%s changed identity: %+v, was %+v", key, info, b)
			}
			wantStriped := strings.HasSuffix(key, ".log")
			if key == "c.txt" {
				wantStriped = false
			}
			if info.Striped != wantStriped {
				t.Fatalf("%s striped=%v after apply", key, info.Striped)
			}
			if wantStriped && info.StorageClass != "EC42" {
				t.Fatalf("%s class %q", key, info.StorageClass)
			}
		}
		// Every holder holds the new layout.
		rss, err := c.nodes[0].gw.Replicas(ctx, "b", key)
		if err != nil {
			t.Fatal(err)
		}
		for _, rs := range rss {
			if rs.HLC != before[key].HLC {
				t.Fatalf("%s on %s: version %d, want %d", key, rs.Node, rs.HLC, before[key].HLC)
			}
		}
	}
	if got, _, _ := get(ctx, c.nodes[3].gw, "b", "mp.log", 5<<20-3, 10); !bytes.Equal(got, mp[5<<20-3:5<<20+7]) {
		t.Fatal("a range across the parts of a re-placed multipart object")
	}
	if left, moved := c.applyAll("b", gen); left != 0 || moved != 0 {
		t.Fatalf("second pass: %d left, %d moved; want nothing", left, moved)
	}
	// The shards of the roots' first layout go once every holder shows them rewritten;
	// the logs' new shards stay: 7 stripes (a, b, empty, and 2 of each part of mp) of 6.
	n0, _ := c.shardsOf()
	t.Logf("%d shard records before collection", n0)
	c.syncAll()
	if n, _ := c.shardsOf(); n != 7*6 {
		t.Fatalf("%d shard records after sync (%d before), want 42", n, n0)
	}
	for key, body := range bodies {
		if got, _, err := get(ctx, c.nodes[1].gw, "b", key, 0, -1); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%s after collection: %v", key, err)
		}
	}
	// Back to STANDARD: the rewrite's shards are young, kept for the grace period.
	gen = c.applyPolicy("b", "* => STANDARD\n")
	if left, _ := c.applyAll("b", gen); left != 0 {
		t.Fatalf("%d left", left)
	}
	c.syncAll()
	if n, _ := c.shardsOf(); n != 7*6 {
		t.Fatalf("%d shard records: the young shards of a rewrite were collected", n)
	}
	for key, body := range bodies {
		if got, info, err := get(ctx, c.nodes[4].gw, "b", key, 0, -1); err != nil || !bytes.Equal(got, body) || info.Striped {
			t.Fatalf("%s back in STANDARD: %v", key, err)
		}
	}
}

// A rewrite never undoes a client write: an object overwritten after the pass read it
// keeps the client's bytes, and an object with a holder down is left for a later pass,
// still readable, and moved once the holder is back.
func TestApplyPolicyRaces(t *testing.T) {
	ctx := context.Background()
	c := newECCluster(t)
	old := randBody(1, 2<<20)
	o, err := putClass(ctx, c.nodes[0].gw, "b", "x.log", "", old)
	if err != nil {
		t.Fatal(err)
	}
	c.applyPolicy("b", "*.log => EC42\n")
	newer := randBody(2, 1<<20)
	if _, err := putClass(ctx, c.nodes[1].gw, "b", "x.log", "", newer); err != nil {
		t.Fatal(err)
	}
	cls, _ := c.maps.Current().ResolveClass("EC42")
	_, ts, err := c.nodes[0].gw.topo.Replicas("b", "x.log")
	if err != nil {
		t.Fatal(err)
	}
	ok, err := c.nodes[0].gw.Rewrite(ctx, "b", "x.log", o.HLC, cls, ts)
	if err != nil || ok {
		t.Fatalf("rewrite of a superseded version: %v %v, want false, nil", ok, err)
	}
	got, _, err := get(ctx, c.nodes[2].gw, "b", "x.log", 0, -1)
	if err != nil || !bytes.Equal(got, newer) {
		t.Fatalf("the client's newer write is not what reads return: %v", err)
	}

	// A holder down: the object is left as it is, then moved.
	key := c.keyWhere("b", "y", func(r []int) bool { return r[0] != 5 })
	body := randBody(3, 3<<20)
	if _, err := putClass(ctx, c.nodes[0].gw, "b", key, "", body); err != nil {
		t.Fatal(err)
	}
	reps, _ := c.replicaSet("b", key)
	c.stop(reps[len(reps)-1])
	c.setNode(c.nodes[reps[len(reps)-1]].id, func(n *clustermap.Node) { n.State = clustermap.StateDown })
	gen := c.applyPolicy("b", "* => EC42\n")
	if left, _ := c.applyAll("b", gen); left == 0 {
		t.Fatal("a pass with a holder down left nothing for later")
	}
	if got, info, err := get(ctx, c.nodes[0].gw, "b", key, 0, -1); err != nil || !bytes.Equal(got, body) || info.Striped {
		t.Fatalf("deferred object: %v striped=%v", err, info != nil && info.Striped)
	}
	c.restart(reps[len(reps)-1])
	c.setNode(c.nodes[reps[len(reps)-1]].id, func(n *clustermap.Node) { n.State = clustermap.StateUp })
	if left, _ := c.applyAll("b", gen); left != 0 {
		t.Fatalf("%d objects left with every holder up", left)
	}
	for i := range c.nodes {
		if got, info, err := get(ctx, c.nodes[i].gw, "b", key, 0, -1); err != nil || !bytes.Equal(got, body) || !info.Striped {
			t.Fatalf("through %s after the holder came back: %v", c.nodes[i].id, err)
		}
	}

	// A rewrite that reached only some holders (here: the last holder put back to its old,
	// whole copy of the same version) is finished by the next pass.
	o, err = c.nodes[reps[0]].store.StatVersion("b", key)
	if err != nil {
		t.Fatal(err)
	}
	last := c.nodes[reps[len(reps)-1]].store
	if _, err := last.PutObject(ctx, "b", key, &object.Object{ETag: o.ETag, ModTime: o.ModTime}, bytes.NewReader(body), int64(len(body)),
		object.PutOptions{Version: o.HLC, Repair: true}); err != nil {
		t.Fatal(err)
	}
	if got, _ := last.StatVersion("b", key); got.Striped {
		t.Fatal("the holder's record was not put back")
	}
	gen = c.applyPolicy("b", "* => EC42\n")
	if left, moved := c.applyAll("b", gen); left != 0 || moved != 1 {
		t.Fatalf("finishing a partial rewrite: %d left, %d moved; want 0, 1", left, moved)
	}
	if got, _ := last.StatVersion("b", key); !got.Striped || got.HLC != o.HLC {
		t.Fatalf("the holder left behind still has %+v", got)
	}
}

// Policy apply under load: clients overwrite and delete keys while passes flip the
// bucket's objects between STANDARD and EC42. Every key ends with what its last
// acknowledged write put there (or deleted), through every gateway.
func TestApplyPolicyUnderWrites(t *testing.T) {
	ctx := context.Background()
	c := newECCluster(t)
	const keys = 24
	var mu sync.Mutex
	last := map[string][]byte{} // nil: deleted
	for i := range keys {
		k := "k" + strconv.Itoa(i)
		body := randBody(uint64(i), 100+i*50000)
		if _, err := putClass(ctx, c.nodes[i%6].gw, "b", k, "", body); err != nil {
			t.Fatal(err)
		}
		last[k] = body
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				k := "k" + strconv.Itoa((n*7+w*5)%keys)
				gw := c.nodes[(n+w)%6].gw
				// One writer per key at a time, so "last acknowledged" is well defined.
				mu.Lock()
				if n%5 == 4 {
					if err := gw.DeleteObject(ctx, "b", k); err == nil {
						last[k] = nil
					}
				} else {
					body := randBody(uint64(w*100000+n), 1000+n*9973%3000000)
					if _, err := putClass(ctx, gw, "b", k, "", body); err == nil {
						last[k] = body
					}
				}
				mu.Unlock()
			}
		})
	}
	for round := range 4 {
		gen := c.applyPolicy("b", []string{"* => EC42\n", "* => STANDARD\n"}[round%2])
		left, moved := c.applyAll("b", gen)
		var raced int64
		for _, nd := range c.nodes {
			for _, p := range nd.rep.ApplyStatus() {
				raced += p.Raced
			}
		}
		t.Logf("pass %d: %d moved, %d raced with a client write, %d left", round, moved, raced, left)
		if moved == 0 {
			t.Fatalf("pass %d moved nothing: the test does not test apply", round)
		}
	}
	close(stop)
	wg.Wait()
	for k, want := range last {
		for i := range c.nodes {
			got, _, err := get(ctx, c.nodes[i].gw, "b", k, 0, -1)
			switch {
			case want == nil && !errors.Is(errors.NotExist, err):
				t.Fatalf("%s was deleted last, reads %d bytes via %s (%v)", k, len(got), c.nodes[i].id, err)
			case want != nil && (err != nil || !bytes.Equal(got, want)):
				t.Fatalf("%s via %s: %v (%d bytes, want the last acknowledged write of %d)", k, c.nodes[i].id, err, len(got), len(want))
			}
		}
	}
}

// Changing a class changes new writes only; apply rewrites the objects stored under its
// old layout (here a new chunk size) into the new one.
func TestApplyClassChange(t *testing.T) {
	ctx := context.Background()
	c := newECCluster(t)
	body := randBody(9, 3<<20+5)
	if _, err := putClass(ctx, c.nodes[0].gw, "b", "x", "EC42", body); err != nil {
		t.Fatal(err)
	}
	if _, err := c.maps.Update(func(m *clustermap.Map) error {
		m.Classes["EC42"] = clustermap.Class{Name: "EC42", N: 6, W: 5, R: 4, D: 4, K: 4, M: 2, Chunk: 256 << 10}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if o, _ := c.nodes[0].gw.StatObject(ctx, "b", "x"); o.Stripe.Size != 4<<20 {
		t.Fatalf("the stored object changed with its class: %+v", o.Stripe)
	}
	gen := c.applyPolicy("b", "* => EC42\n")
	if left, moved := c.applyAll("b", gen); left != 0 || moved != 1 {
		t.Fatalf("apply after a class change: %d left, %d moved", left, moved)
	}
	got, info, err := get(ctx, c.nodes[3].gw, "b", "x", 0, -1)
	if err != nil || !bytes.Equal(got, body) || info.Stripe.Size != 1<<20 {
		t.Fatalf("after apply: %v, layout %+v (want stripes of 4 chunks of 256 KiB)", err, info.Stripe)
	}
	if _, moved := c.applyAll("b", gen); moved != 0 {
		t.Fatal("a second pass rewrote an object already in its class's layout")
	}
}
