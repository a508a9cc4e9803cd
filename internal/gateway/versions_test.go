package gateway

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/repair"
)

// putVersion writes a version of bucket/key of its own (versioning enabled) in class.
func putVersion(t *testing.T, g *Gateway, bucket, key, class string, body []byte) *object.Object {
	t.Helper()
	src, fin := md5Finish(bytes.NewReader(body))
	o, err := g.PutObject(context.Background(), bucket, key, &object.Object{StorageClass: class, Versioned: true}, src, int64(len(body)), object.PutOptions{Finish: fin})
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return o
}

// readVersion reads version hlc of bucket/key through g.
func readVersion(g *Gateway, bucket, key string, hlc uint64) ([]byte, error) {
	ctx := context.Background()
	rd, err := g.OpenVersion(ctx, bucket, key, hlc)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var buf bytes.Buffer
	if _, err := rd.WriteRange(ctx, &buf, 0, rd.Info().Size); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// versionsOf lists bucket's versions through g as "key@hlc[dm][*]".
func versionsOf(t *testing.T, g *Gateway, bucket string, page int) []string {
	t.Helper()
	var out []string
	opts := object.VersionListOptions{Max: page}
	for {
		res, err := g.ListVersions(context.Background(), bucket, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range res.Versions {
			s := fmt.Sprintf("%s@%d", v.Key, v.Object.HLC)
			if v.Object.DeleteMarker {
				s += "dm"
			}
			if v.Current {
				s += "*"
			}
			out = append(out, s)
		}
		if !res.Truncated {
			return out
		}
		opts.KeyMarker, opts.VersionMarker, opts.AfterNull = res.NextKey, res.NextVersion, res.NextNull
	}
}

// Versions through a 3-node cluster: a node away during overwrites, a delete marker and
// a permanent delete catches up through anti-entropy; every gateway then lists the same
// versions, page by page, and reads every version byte for byte, also with another node
// down; a second round finds nothing to do.
func TestVersionsCluster(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	g0, g1 := c.nodes[0].gw, c.nodes[1].gw
	bodies := map[uint64][]byte{}
	var hlcs []uint64
	write := func(g *Gateway, key string, seed uint64, size int) {
		body := randBody(seed, size)
		o := putVersion(t, g, "b", key, "", body)
		bodies[o.HLC] = body
		hlcs = append(hlcs, o.HLC)
	}
	write(g0, "k", 1, 100)
	write(g0, "k", 2, 3<<20) // chunked
	write(g0, "other", 3, 10)
	c.stop(2)
	write(g1, "k", 4, 200)
	write(g1, "k", 5, 300)
	if _, err := g1.DeleteRecord(ctx, "b", "other", object.Object{DeleteMarker: true, Versioned: true}); err != nil {
		t.Fatal(err)
	}
	// The first version of k, removed for good while node 2 is away.
	if _, err := g0.DeleteRecord(ctx, "b", "k", object.Object{HLC: hlcs[0], Versioned: true, Purged: true}); err != nil {
		t.Fatal(err)
	}
	delete(bodies, hlcs[0])
	c.restart(2)
	st := c.syncAll(2, 0, 1)
	t.Logf("sync on node 2: %+v", st[2])
	want := versionsOf(t, g0, "b", 1000)
	if len(want) != 5 { // k: 3 versions; other: a marker and a version
		t.Fatalf("versions: %q", want)
	}
	for i, nd := range c.nodes {
		for _, page := range []int{1, 2, 1000} {
			if got := versionsOf(t, nd.gw, "b", page); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("node %d, pages of %d:\n got %q\nwant %q", i, page, got, want)
			}
		}
		// Every node's own store holds them all (N=3).
		res, err := nd.store.ListVersions("b", object.VersionListOptions{Max: 1000})
		if err != nil || len(res.Versions) != 5 {
			var got []string
			for _, v := range res.Versions {
				got = append(got, fmt.Sprintf("%s@%d dm=%v cur=%v", v.Key, v.Object.HLC, v.Object.DeleteMarker, v.Current))
			}
			t.Fatalf("node %d store: %q %v", i, got, err)
		}
	}
	if st := c.syncAll(); st[2].Copied+st[2].Deleted != 0 || st[2].Differing != 0 {
		t.Fatalf("second sync: %+v", st[2])
	}
	c.stop(0)
	for h, body := range bodies {
		got, err := readVersion(c.nodes[2].gw, "b", "k", h)
		if h == hlcs[2] {
			got, err = readVersion(c.nodes[2].gw, "b", "other", h)
		}
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("version %d through node 2 with node 0 down: %v", h, err)
		}
	}
	if _, err := readVersion(c.nodes[1].gw, "b", "k", hlcs[0]); !errors.IsErr(err, object.ErrNoSuchVersion) {
		t.Fatalf("the removed version: %v", err)
	}
	var dm *object.DeleteMarkerError
	if _, _, err := get(ctx, c.nodes[1].gw, "b", "other", 0, -1); !errors.As(err, &dm) || !dm.Current {
		t.Fatalf("read of a key whose current version is a delete marker: %v", err)
	}
}

// Noncurrent versions of an erasure-coded class keep their shards: the shard collection
// of the sync removes only the shards no holder's version needs.
func TestVersionsECShardsKept(t *testing.T) {
	c := newECCluster(t)
	g := c.nodes[0].gw
	old := randBody(10, 5<<20+3)
	o1 := putVersion(t, g, "b", "k", "EC42", old)
	o2 := putVersion(t, c.nodes[3].gw, "b", "k", "EC42", randBody(11, 1000))
	if !o1.Striped || !o2.Striped {
		t.Fatalf("not striped: %+v %+v", o1, o2)
	}
	if n := c.collectAll(); n != 0 {
		t.Fatalf("collected %d shards of kept versions", n)
	}
	for _, i := range []int{1, 4} {
		if got, err := readVersion(c.nodes[i].gw, "b", "k", o1.HLC); err != nil || !bytes.Equal(got, old) {
			t.Fatalf("noncurrent EC version through node %d: %v", i, err)
		}
	}
	// Removed for good: now its shards go.
	if _, err := g.DeleteRecord(context.Background(), "b", "k", object.Object{HLC: o1.HLC, Versioned: true, Purged: true}); err != nil {
		t.Fatal(err)
	}
	if n := c.collectAll(); n != 12 {
		t.Fatalf("collected %d shards of the removed version, want 12", n)
	}
	// A version whose shards are written but whose record no holder has yet (a PUT in
	// flight, older than a newer version that landed meanwhile): its shards stay for the
	// in-flight grace (a day), then go.
	o3 := putVersion(t, c.nodes[2].gw, "b", "k", "EC42", randBody(12, 1000))
	putVersion(t, c.nodes[4].gw, "b", "k", "EC42", randBody(13, 1000))
	for _, nd := range c.nodes {
		if _, err := nd.store.ForgetVersion("b", "k", o3.HLC, o3.MetaHLC); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.collectAll(); n != 0 {
		t.Fatalf("collected %d shards of a version in flight", n)
	}
	defer repair.SetInflightGrace(repair.SetInflightGrace(0))
	if n := c.collectAll(); n != 6 {
		t.Fatalf("collected %d shards of a version that never landed, want 6", n)
	}
}

// The deep scrub reads noncurrent versions too: bit rot in one node's copy of an older
// version is found by that node's pass and repaired from another holder's copy of the
// version (not from the current one).
func TestVersionsScrubbed(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	old := randBody(21, 300<<10)
	o1 := putVersion(t, c.nodes[0].gw, "b", "k", "", old)
	putVersion(t, c.nodes[1].gw, "b", "k", "", randBody(22, 1000))
	// Flip a bit of the old version's bytes in one segment file (one node's copy).
	needle := old[200<<10 : 200<<10+64]
	segs, _ := filepath.Glob(filepath.Join(filepath.Dir(t.TempDir()), "*", "segments", "*.seg"))
	flipped := false
	for _, s := range segs {
		data, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		i := bytes.Index(data, needle)
		if i < 0 || flipped {
			continue
		}
		f, err := os.OpenFile(s, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte{data[i+10] ^ 0x10}, int64(i+10)); err != nil {
			t.Fatal(err)
		}
		f.Close()
		flipped = true
	}
	if !flipped {
		t.Fatal("the old version's bytes are in no segment file")
	}
	var corrupt, repaired int64
	for _, nd := range c.nodes {
		s := nd.rep.NewScrub(time.Hour, 0)
		s.Pass(ctx)
		st := s.Status()
		corrupt += st.Corrupt
		repaired += st.Repaired
		if st.Objects != 2 || st.Errors != 0 {
			t.Fatalf("scrub of %s: %+v; want 2 versions checked", nd.id, st)
		}
	}
	if corrupt != 1 || repaired != 1 {
		t.Fatalf("scrub found %d damaged copies and repaired %d; want 1 and 1", corrupt, repaired)
	}
	for _, nd := range c.nodes {
		rd, err := nd.store.OpenVersion("b", "k", o1.HLC)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		_, err = rd.WriteRange(ctx, &buf, 0, rd.Object.Size)
		rd.Close()
		if err != nil || !bytes.Equal(buf.Bytes(), old) {
			t.Fatalf("%s's copy of the old version after the scrub: %v", nd.id, err)
		}
	}
}

// A version under COMPLIANCE retention or a legal hold survives permanent deletes through
// every gateway (each holder refuses), also with a holder away, and a drain of one of its
// holders; the retention reaches every holder and cannot be shortened by any of them.
func TestObjectLockCluster(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	body := randBody(31, 5000)
	src, fin := md5Finish(bytes.NewReader(body))
	until := time.Now().Add(time.Hour).UnixNano()
	o, err := c.nodes[0].gw.PutObject(ctx, "b", "k", &object.Object{Versioned: true, Retention: object.Retention{Mode: object.LockCompliance, Until: until}},
		src, int64(len(body)), object.PutOptions{Finish: fin})
	if err != nil {
		t.Fatal(err)
	}
	purge := object.Object{HLC: o.HLC, Versioned: true, Purged: true, Bypass: true}
	for i, nd := range c.nodes {
		if _, err := nd.gw.DeleteRecord(ctx, "b", "k", purge); !errors.IsErr(err, object.ErrLocked) {
			t.Fatalf("purge through node %d: %v", i, err)
		}
	}
	// A shorter COMPLIANCE retention sent to the holders is merged into the longer one.
	short := object.Retention{Mode: object.LockCompliance, Until: until - int64(30*time.Minute)}
	if _, err := c.nodes[1].gw.ChangeMeta(ctx, "b", "k", o.HLC, MetaChange{Retention: &short}); err != nil {
		t.Fatal(err)
	}
	for i, nd := range c.nodes {
		rec, err := nd.store.StatAt("b", "k", o.HLC)
		if err != nil || rec.Retention.Until != until || rec.Retention.Mode != object.LockCompliance {
			t.Fatalf("node %d's retention: %+v %v", i, rec, err)
		}
	}
	// A legal hold on an unlocked version, with one holder away.
	o2 := putVersion(t, c.nodes[0].gw, "b", "held", "", []byte("held"))
	c.stop(2)
	on := true
	if _, err := c.nodes[0].gw.ChangeMeta(ctx, "b", "held", o2.HLC, MetaChange{LegalHold: &on}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.nodes[1].gw.DeleteRecord(ctx, "b", "held", object.Object{HLC: o2.HLC, Versioned: true, Purged: true}); err == nil {
		t.Fatal("purge of a version under a legal hold succeeded")
	}
	c.restart(2)
	c.syncAll(2, 0, 1)
	for i, nd := range c.nodes {
		rec, err := nd.store.StatAt("b", "held", o2.HLC)
		if err != nil || !rec.LegalHold {
			t.Fatalf("node %d's copy of the held version: %+v %v", i, rec, err)
		}
		if got, err := readVersion(nd.gw, "b", "k", o.HLC); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("the locked version through node %d: %v", i, err)
		}
	}
}

// A drain moves every version of versioned keys, locked ones included, to the remaining
// holders with their locks, and the draining node gives up its copies (current and
// noncurrent) only once they are confirmed; locked versions stay locked there.
func TestVersionsDrain(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 4, clusterConfig{})
	c.createBucket("b")
	type ver struct {
		key    string
		hlc    uint64
		body   []byte
		locked bool
	}
	var vs []ver
	until := time.Now().Add(time.Hour).UnixNano()
	for i := range 12 {
		key := fmt.Sprintf("k%02d", i)
		for v := range 3 {
			body := randBody(uint64(i*10+v), 500+v*3000)
			meta := &object.Object{Versioned: true}
			if v == 0 {
				meta.Retention = object.Retention{Mode: object.LockCompliance, Until: until}
			}
			src, fin := md5Finish(bytes.NewReader(body))
			o, err := c.nodes[(i+v)%4].gw.PutObject(ctx, "b", key, meta, src, int64(len(body)), object.PutOptions{Finish: fin})
			if err != nil {
				t.Fatal(err)
			}
			vs = append(vs, ver{key, o.HLC, body, v == 0})
		}
	}
	noncurrent := func(i int) int {
		n := 0
		c.nodes[i].store.ScanVersions(nil, func(object.VersionEntry) error { n++; return nil })
		return n
	}
	if c.records(3) == 0 || noncurrent(3) == 0 {
		t.Fatal("n4 holds nothing before the drain")
	}
	c.setNode("n4", func(n *clustermap.Node) { n.State = clustermap.StateDraining })
	c.syncAll(0, 1, 2, 3)
	c.syncAll(0, 1, 2, 3)
	if n, nc := c.records(3), noncurrent(3); n != 0 || nc != 0 {
		t.Fatalf("n4 still holds %d current and %d noncurrent records after the drain", n, nc)
	}
	for _, v := range vs {
		for i := range 3 {
			got, err := readVersion(c.nodes[i].gw, "b", v.key, v.hlc)
			if err != nil || !bytes.Equal(got, v.body) {
				t.Fatalf("%s@%d through %s after the drain: %v", v.key, v.hlc, c.nodes[i].id, err)
			}
		}
		ids, _, _ := c.nodes[0].gw.topo.Placement("b", v.key)
		for _, id := range ids {
			rec, err := c.nodes[c.index(id)].store.StatAt("b", v.key, v.hlc)
			if err != nil {
				t.Fatalf("%s@%d on its holder %s: %v", v.key, v.hlc, id, err)
			}
			if locked := rec.Retention.Mode == object.LockCompliance; locked != v.locked {
				t.Fatalf("%s@%d on %s: retention %+v", v.key, v.hlc, id, rec.Retention)
			}
		}
	}
	// Still locked after the move: a purge is refused by the new holders.
	if _, err := c.nodes[1].gw.DeleteRecord(ctx, "b", vs[0].key, object.Object{HLC: vs[0].hlc, Versioned: true, Purged: true}); !errors.IsErr(err, object.ErrLocked) {
		t.Fatalf("purge of a locked version after the drain: %v", err)
	}
}
