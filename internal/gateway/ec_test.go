package gateway

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/stripe"
	"github.com/cairnfs/cairn/internal/topology"
)

// newECCluster is a 6-node cluster with the class EC42 (4+2, W=5) beside STANDARD.
func newECCluster(t *testing.T) *testCluster {
	t.Helper()
	c := newCluster(t, 6, clusterConfig{})
	if _, err := c.maps.Update(func(m *clustermap.Map) error {
		m.Classes["EC42"] = clustermap.Class{Name: "EC42", N: 6, W: 5, R: 4, D: 4, K: 4, M: 2, S3Names: []string{"STANDARD_IA"}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.createBucket("b")
	return c
}

func putClass(ctx context.Context, g *Gateway, bucket, key, class string, body []byte) (*object.Object, error) {
	src, fin := md5Finish(bytes.NewReader(body))
	return g.PutObject(ctx, bucket, key, &object.Object{StorageClass: class}, src, int64(len(body)), object.PutOptions{Finish: fin})
}

// shardsOf returns, per node, the shard records stored there.
func (c *testCluster) shardsOf() (records int, bytes int64) {
	for _, nd := range c.nodes {
		nd.store.Scan(func(b, _ string) bool { return b == topology.ShardBucket }, func(e object.VersionEntry) error {
			records++
			bytes += e.Size
			return nil
		})
	}
	return records, bytes
}

// Erasure-coded objects round-trip at every size boundary (empty, one byte, a stripe ± 1,
// several stripes), whole and by ranges, through every gateway; the record carries the
// object's size and class, the shards cost 1.5x the bytes.
func TestECRoundTrip(t *testing.T) {
	ctx := context.Background()
	c := newECCluster(t)
	const stripe = 4 << 20
	sizes := []int{0, 1, 3, 4, 5, clustermap.DefaultChunk - 1, clustermap.DefaultChunk + 1, stripe - 1, stripe, stripe + 1, 2*stripe + 12345}
	var total int64
	for i, size := range sizes {
		key := fmt.Sprintf("obj%02d", i)
		body := randBody(uint64(100+i), size)
		o, err := putClass(ctx, c.nodes[i%6].gw, "b", key, "EC42", body)
		if err != nil {
			t.Fatalf("put %d bytes: %v", size, err)
		}
		if o.Size != int64(size) || !o.Striped || o.Stripe.K != 4 || o.ETag != md5Hex(body) {
			t.Fatalf("put %d bytes returned %+v", size, o)
		}
		total += int64(size)
		for j := range c.nodes {
			got, info, err := get(ctx, c.nodes[j].gw, "b", key, 0, -1)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("%d bytes read via %s: %v (got %d bytes)", size, c.nodes[j].id, err, len(got))
			}
			if info.StorageClass != "EC42" || info.Size != int64(size) {
				t.Fatalf("record %+v", info)
			}
		}
		for _, r := range [][2]int64{{0, 1}, {1, 2}, {int64(size) / 3, int64(size) / 3}, {stripe - 2, 5}, {clustermap.DefaultChunk - 1, 2}, {int64(size) - 1, 1}} {
			off, n := r[0], r[1]
			if off < 0 || n <= 0 || off+n > int64(size) {
				continue
			}
			got, _, err := get(ctx, c.nodes[0].gw, "b", key, off, n)
			if err != nil || !bytes.Equal(got, body[off:off+n]) {
				t.Fatalf("%d bytes: range %d+%d: %v", size, off, n, err)
			}
		}
		st, err := c.nodes[5].gw.StatObject(ctx, "b", key)
		if err != nil || st.Size != int64(size) || st.ETag != md5Hex(body) {
			t.Fatalf("stat: %+v %v", st, err)
		}
	}
	res, err := c.nodes[0].gw.List(ctx, "b", object.ListOptions{Max: 1000})
	if err != nil || len(res.Objects) != len(sizes) {
		t.Fatalf("list: %v %+v", err, res)
	}
	for i, e := range res.Objects {
		if e.Object.Size != int64(sizes[i]) {
			t.Fatalf("listed %s with size %d, want %d", e.Key, e.Object.Size, sizes[i])
		}
	}
	_, raw := c.shardsOf()
	if ratio := float64(raw) / float64(total); ratio < 1.45 || ratio > 1.6 {
		t.Fatalf("shards take %d bytes for %d bytes of objects (%.2fx); want about 1.5x", raw, total, ratio)
	}
}

// With up to M nodes gone, every object still reads back byte-identical; with M+1 the
// read fails with an error, never wrong bytes.
func TestECDegradedReads(t *testing.T) {
	ctx := context.Background()
	c := newECCluster(t)
	bodies := map[string][]byte{}
	for i := range 6 {
		k := fmt.Sprintf("k%d", i)
		bodies[k] = randBody(uint64(i), 3<<20+i*1000003)
		if _, err := putClass(ctx, c.nodes[0].gw, "b", k, "STANDARD_IA", bodies[k]); err != nil {
			t.Fatal(err)
		}
	}
	c.stop(4)
	c.stop(5)
	for k, body := range bodies {
		got, _, err := get(ctx, c.nodes[0].gw, "b", k, 0, -1)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%s with two nodes down: %v", k, err)
		}
	}
	c.stop(3)
	failed := 0
	for k, body := range bodies {
		got, _, err := get(ctx, c.nodes[0].gw, "b", k, 0, -1)
		switch {
		case err == nil && !bytes.Equal(got, body):
			t.Fatalf("%s with three nodes down: wrong bytes", k)
		case err != nil:
			failed++
			// The S3 layer asks for the first stripe before it sends a status: an object
			// whose first stripe cannot be read is an error (503), not a cut-off 200.
			rd, err := c.nodes[0].gw.OpenObject(ctx, "b", k)
			if err != nil {
				break
			}
			p, ok := rd.(replica.Preparer)
			if !ok {
				t.Fatal("an erasure-coded object's reader cannot prepare")
			}
			if perr := p.Prepare(ctx, 0, int64(len(body))); perr == nil {
				// The first stripe is readable; a later one is not: WriteRange fails.
				var buf bytes.Buffer
				if _, err := rd.WriteRange(ctx, &buf, 0, int64(len(body))); err == nil {
					t.Fatalf("%s: prepared and read whole, but the plain read failed", k)
				}
			} else if !errors.Is(errors.Transient, perr) {
				t.Fatalf("%s: Prepare: %v, want a Transient error (503)", k, perr)
			}
			rd.Close()
		}
	}
	if failed == 0 {
		t.Fatal("every object read with three of six nodes down: the shards are not spread")
	}
}

// A damaged or lost shard is read around and rebuilt in place by the read, whether
// the stripes are named by the version (before feature level 9) or by a tag.
func TestECRepairsShards(t *testing.T) {
	for _, level := range []int{0, LevelTaggedStripes} {
		t.Run(fmt.Sprintf("level%d", level), func(t *testing.T) { testECRepairsShards(t, level) })
	}
}

func testECRepairsShards(t *testing.T, level int) {
	ctx := context.Background()
	c := newECCluster(t)
	c.setLevel(level)
	body := randBody(7, 5<<20)
	o, err := putClass(ctx, c.nodes[0].gw, "b", "k", "EC42", body)
	if err != nil {
		t.Fatal(err)
	}
	// Damage one shard of stripe 0 and remove another.
	stripe := stripe.Names("b", "k", o)[0]
	m := c.maps.Current()
	tbl, err := c.nodes[0].gw.topo.ShardTable(m, m.Classes["EC42"], true)
	if err != nil {
		t.Fatal(err)
	}
	ts := c.nodes[0].gw.topo.ShardTargets(m, tbl, stripe)
	bad, gone := c.nodes[c.index(ts[1].ID)].store, c.nodes[c.index(ts[2].ID)].store
	sv, err := bad.StatVersion(topology.ShardBucket, stripe)
	if err != nil {
		t.Fatal(err)
	}
	junk := bytes.Repeat([]byte{0x5a}, int(sv.Size))
	if _, err := bad.PutObject(ctx, topology.ShardBucket, stripe, &object.Object{}, bytes.NewReader(junk), int64(len(junk)), object.PutOptions{Version: sv.HLC, Repair: true}); err != nil {
		t.Fatal(err)
	}
	gv, _ := gone.StatVersion(topology.ShardBucket, stripe)
	if ok, err := gone.Forget(topology.ShardBucket, stripe, gv.HLC); !ok || err != nil {
		t.Fatalf("forget: %v %v", ok, err)
	}
	got, _, err := get(ctx, c.nodes[3].gw, "b", "k", 0, -1)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read with a damaged and a lost shard: %v", err)
	}
	c.nodes[3].gw.Close() // waits for the background rebuild
	shard := func(st *store.Store, j int) []byte {
		rd, err := st.OpenObject(topology.ShardBucket, stripe)
		if err != nil {
			return nil
		}
		defer rd.Close()
		var b bytes.Buffer
		rd.WriteRange(ctx, &b, 0, rd.Object.Size)
		return b.Bytes()
	}
	if bytes.Equal(shard(bad, 1), junk) || shard(bad, 1) == nil || shard(gone, 2) == nil {
		t.Fatal("the damaged and lost shards were not rebuilt")
	}
	// Now the healthy path reads them: stop the parity holders.
	c.stop(c.index(ts[4].ID))
	c.stop(c.index(ts[5].ID))
	got, _, err = get(ctx, c.nodes[0].gw, "b", "k", 0, 1<<20)
	if err != nil || !bytes.Equal(got, body[:1<<20]) {
		t.Fatalf("read of the rebuilt data shards: %v", err)
	}
}

// Class names are checked: an unknown one is refused, an S3 name maps to its class or to
// STANDARD, a multipart upload into an erasure-coded class is refused for now.
func TestECClassSelection(t *testing.T) {
	ctx := context.Background()
	c := newECCluster(t)
	g := c.nodes[0].gw
	if _, err := putClass(ctx, g, "b", "x", "PLATINUM", []byte("x")); !errors.IsErr(err, ErrInvalidStorageClass) {
		t.Fatalf("unknown class: %v", err)
	}
	o, err := putClass(ctx, g, "b", "glacier", "GLACIER", []byte("cold"))
	if err != nil || o.Striped {
		t.Fatalf("GLACIER (mapped to nothing) is STANDARD: %+v %v", o, err)
	}
	o, err = putClass(ctx, g, "b", "ia", "STANDARD_IA", []byte("mapped to EC42"))
	if err != nil || !o.Striped {
		t.Fatalf("STANDARD_IA is mapped to EC42: %+v %v", o, err)
	}
	if _, err := g.CreateUpload(ctx, "b", "mp", &object.Object{StorageClass: "PLATINUM"}); !errors.IsErr(err, ErrInvalidStorageClass) {
		t.Fatalf("multipart upload in an unknown class: %v", err)
	}
	// An EC object copied keeps nothing of the source's layout when stored in STANDARD.
	rd, err := g.OpenObject(ctx, "b", "ia")
	if err != nil {
		t.Fatal(err)
	}
	src := *rd.Info()
	var buf bytes.Buffer
	rd.WriteRange(ctx, &buf, 0, src.Size)
	rd.Close()
	src.StorageClass = ""
	cp, err := g.PutObject(ctx, "b", "copy", &src, bytes.NewReader(buf.Bytes()), int64(buf.Len()), object.PutOptions{})
	if err != nil || cp.Striped {
		t.Fatalf("copy to STANDARD: %+v %v", cp, err)
	}
	got, _, err := get(ctx, c.nodes[2].gw, "b", "copy", 0, -1)
	if err != nil || string(got) != "mapped to EC42" {
		t.Fatalf("copy reads %q %v", got, err)
	}
}

// newJoiningCluster is a 10-node cluster with class cls and bucket b, where n7-n10 are
// out (not yet in the cluster: set them up to have them join).
func newJoiningCluster(t *testing.T, cls clustermap.Class) *testCluster {
	t.Helper()
	c := newCluster(t, 10, clusterConfig{})
	if _, err := c.maps.Update(func(m *clustermap.Map) error {
		m.Classes[cls.Name] = cls
		for i, n := range m.Nodes {
			if n.ID == "n7" || n.ID == "n8" || n.ID == "n9" || n.ID == "n10" {
				m.Nodes[i].State = clustermap.StateOut
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.createBucket("b")
	return c
}

// Shards stay readable where they were written when placement changes: nodes joining
// shift shard positions and push holders out of a stripe's list, nodes leaving take
// their shards with them; reads find K shards wherever they are and rebuild the rest on
// the stripe's current nodes. Half the objects have stripes named by their version (as
// before feature level 9), half by a tag.
func TestECSurvivesPlacementChanges(t *testing.T) {
	ctx := context.Background()
	c := newJoiningCluster(t, clustermap.Class{Name: "EC42", N: 6, W: 5, R: 4, D: 4, K: 4, M: 2})
	bodies := map[string][]byte{}
	for i := range 8 {
		if i == 4 { // k0-k3 named by their version, k4-k7 by a tag (feature level 9)
			c.setLevel(LevelTaggedStripes)
		}
		k := fmt.Sprintf("k%d", i)
		bodies[k] = randBody(uint64(50+i), 2<<20+i*333333)
		if _, err := putClass(ctx, c.nodes[0].gw, "b", k, "EC42", bodies[k]); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		// The records move with the sync (the shards do not: reads find them).
		for _, nd := range c.nodes {
			if n, _ := c.maps.Current().Node(nd.id); nd.srv != nil && n.State == clustermap.StateUp {
				if _, err := nd.rep.Sync(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		for k, body := range bodies {
			got, _, err := get(ctx, c.nodes[0].gw, "b", k, 0, -1)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("%s: %s: %v", when, k, err)
			}
		}
		c.nodes[0].gw.Close() // let the rebuilds finish
	}
	// Four nodes join at once.
	for _, id := range []string{"n7", "n8", "n9", "n10"} {
		c.setNode(id, func(n *clustermap.Node) { n.State = clustermap.StateUp })
	}
	check("after four nodes joined")
	// Two of the original nodes leave for good (their shards with them).
	c.setNode("n2", func(n *clustermap.Node) { n.State = clustermap.StateOut })
	c.setNode("n3", func(n *clustermap.Node) { n.State = clustermap.StateOut })
	c.stop(1)
	c.stop(2)
	check("after two nodes left")
	// Sync rounds rebuild every stripe's lost shards on live nodes, until a round finds
	// nothing to do (usually the first; a shard rebuilt onto a node that held a second copy
	// of another index can take one more).
	for round := 1; ; round++ {
		rebuilt := 0
		for _, nd := range c.nodes {
			if n, _ := c.maps.Current().Node(nd.id); nd.srv != nil && n.State == clustermap.StateUp {
				st, _ := nd.rep.Sync(ctx)
				rebuilt += st.Rebuilt
				if st.Unhealable != 0 {
					t.Fatalf("%s: %d stripes cannot be healed", nd.id, st.Unhealable)
				}
			}
		}
		if rebuilt == 0 {
			break
		}
		if round == 3 {
			t.Fatalf("sync round %d still rebuilt %d shards", round, rebuilt)
		}
	}
	// The rebuilds put every stripe back to six shards on live nodes: two more can go.
	c.setNode("n4", func(n *clustermap.Node) { n.State = clustermap.StateOut })
	c.setNode("n5", func(n *clustermap.Node) { n.State = clustermap.StateOut })
	c.stop(3)
	c.stop(4)
	check("after two more nodes left")
}

// Shards of replaced versions (an overwrite, a delete) are collected by the sync; the
// current version's shards stay.
func TestECCollectsReplacedShards(t *testing.T) {
	ctx := context.Background()
	c := newECCluster(t)
	g := c.nodes[0].gw
	body := randBody(1, 6<<20)
	for _, k := range []string{"over", "gone", "keep"} {
		if _, err := putClass(ctx, g, "b", k, "EC42", randBody(2, 5<<20)); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := c.shardsOf()
	if _, err := putClass(ctx, g, "b", "over", "EC42", body); err != nil {
		t.Fatal(err)
	}
	if err := g.DeleteObject(ctx, "b", "gone"); err != nil {
		t.Fatal(err)
	}
	collected := 0
	for _, nd := range c.nodes {
		st, err := nd.rep.Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		collected += st.Collected
	}
	after, _ := c.shardsOf()
	// Each version has 2 stripes of 6 shards: the old "over" and "gone" go, the new
	// "over" and "keep" stay.
	if collected != 24 || after != before-12 {
		t.Fatalf("collected %d shards, %d left (%d before the overwrite and delete); want 24 collected and %d left", collected, after, before, before-12)
	}
	got, _, err := get(ctx, c.nodes[3].gw, "b", "over", 0, -1)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read after collection: %v", err)
	}
	if _, _, err := get(ctx, c.nodes[3].gw, "b", "keep", 0, -1); err != nil {
		t.Fatalf("read of an untouched object after collection: %v", err)
	}
}

// A multipart upload into an erasure-coded class stripes each part as it arrives; the
// completed object's record lists the parts' stripes, nothing is copied again, and the
// object reads back whole and by ranges across part boundaries.
func TestECMultipart(t *testing.T) {
	ctx := context.Background()
	c := newECCluster(t)
	g := c.nodes[0].gw
	id, err := g.CreateUpload(ctx, "b", "mp", &object.Object{StorageClass: "EC42"})
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{5<<20 + 3, 5 << 20, 6 << 20, 1000}
	var whole []byte
	var list []object.CompletePart
	raw0, _ := c.shardsOf()
	for i, size := range sizes {
		body := randBody(uint64(70+i), size)
		whole = append(whole, body...)
		src, fin := md5Finish(bytes.NewReader(body))
		// Parts 1, 3, 5, 7: numbers need not be consecutive.
		p, err := c.nodes[i%6].gw.PutPart(ctx, "b", "mp", id, 2*i+1, src, int64(size), fin)
		if err != nil {
			t.Fatalf("part %d: %v", 2*i+1, err)
		}
		if !p.Striped || p.Size != int64(size) {
			t.Fatalf("part %d returned %+v", 2*i+1, p)
		}
		list = append(list, object.CompletePart{Number: 2*i + 1, ETag: p.ETag})
	}
	raw1, _ := c.shardsOf()
	o, err := c.nodes[2].gw.CompleteUpload(ctx, "b", "mp", id, list, 5<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if raw2, _ := c.shardsOf(); raw2 != raw1 || raw1 == raw0 {
		t.Fatalf("shards: %d before the parts, %d after, %d after completing; the completion must copy nothing", raw0, raw1, raw2)
	}
	if !o.Striped || o.Size != int64(len(whole)) || len(o.Stripe.Parts) != len(sizes) {
		t.Fatalf("completed record %+v", o)
	}
	for _, nd := range c.nodes {
		got, info, err := get(ctx, nd.gw, "b", "mp", 0, -1)
		if err != nil || !bytes.Equal(got, whole) || info.StorageClass != "EC42" {
			t.Fatalf("read via %s: %v", nd.id, err)
		}
	}
	for _, r := range [][2]int64{{5<<20 - 10, 20}, {5<<20 + 3 - 1, 2}, {10<<20 + 3 - 5, 4<<20 + 10}, {int64(len(whole)) - 1000, 1000}, {0, int64(len(whole))}} {
		got, _, err := get(ctx, c.nodes[1].gw, "b", "mp", r[0], r[1])
		if err != nil || !bytes.Equal(got, whole[r[0]:r[0]+r[1]]) {
			t.Fatalf("range %d+%d: %v", r[0], r[1], err)
		}
	}
	// Two nodes down: still readable.
	c.stop(4)
	c.stop(5)
	got, _, err := get(ctx, c.nodes[0].gw, "b", "mp", 0, -1)
	if err != nil || !bytes.Equal(got, whole) {
		t.Fatalf("read with two nodes down: %v", err)
	}
}

// With fewer placement nodes than K+M (a node out for good), erasure-coded objects stay
// readable from the shards that are left; new EC writes are refused with a clear error.
func TestECFewerNodesThanShards(t *testing.T) {
	ctx := context.Background()
	c := newECCluster(t)
	body := randBody(3, 9<<20)
	if _, err := putClass(ctx, c.nodes[0].gw, "b", "k", "EC42", body); err != nil {
		t.Fatal(err)
	}
	c.setNode("n6", func(n *clustermap.Node) { n.State = clustermap.StateOut })
	c.stop(5)
	for _, i := range []int{0, 3} {
		got, _, err := get(ctx, c.nodes[i].gw, "b", "k", 0, -1)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("read via %s with 5 of 6 nodes: %v", c.nodes[i].id, err)
		}
	}
	_, err := putClass(ctx, c.nodes[0].gw, "b", "new", "EC42", []byte("x"))
	if !errors.Is(errors.Transient, err) || !strings.Contains(err.Error(), "needs 6 storage nodes") {
		t.Fatalf("EC write with 5 nodes: %v", err)
	}
	// With nowhere to put them, shards stay where they are: none is counted as waiting to
	// be handed off, and sync rounds move nothing.
	for i := range 5 {
		if objs, _, err := c.nodes[i].rep.HeldElsewhere(); err != nil || objs != 0 {
			t.Fatalf("%s holds %d records or shards to hand off with 5 of 6 nodes (%v)", c.nodes[i].id, objs, err)
		}
		if st, err := c.nodes[i].rep.Sync(ctx); err != nil || st.ShardsMoved != 0 {
			t.Fatalf("sync on %s: %+v %v", c.nodes[i].id, st, err)
		}
	}
}
