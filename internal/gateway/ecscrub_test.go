package gateway

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/erasure"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/stripe"
	"github.com/cairnfs/cairn/internal/topology"
)

// readShard returns st's shard of stripe, read through the store (its chunk checksums
// checked), and the record.
func readShard(t *testing.T, st *store.Store, stripe string) ([]byte, *object.Object, error) {
	t.Helper()
	rd, err := st.OpenObject(topology.ShardBucket, stripe)
	if err != nil {
		return nil, nil, err
	}
	defer rd.Close()
	var b bytes.Buffer
	_, err = rd.WriteRange(context.Background(), &b, 0, rd.Object.Size)
	return b.Bytes(), rd.Object, err
}

// flipOnDisk flips one bit of byte off of a node's shard of stripe in its segment file
// (bit rot under the store). The node is found by the shard's bytes: the segment files
// of every node of the cluster t made are searched, and exactly one must hold them.
func flipOnDisk(t *testing.T, st *store.Store, stripe string, off int) {
	t.Helper()
	shard, _, err := readShard(t, st, stripe)
	if err != nil {
		t.Fatal(err)
	}
	lo := max(off-32, 0)
	needle := shard[lo : lo+64]
	// t.TempDir makes a new directory beside the ones the cluster's stores were given.
	segs, _ := filepath.Glob(filepath.Join(filepath.Dir(t.TempDir()), "*", "segments", "*.seg"))
	found := 0
	for _, s := range segs {
		data, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		i := bytes.Index(data, needle)
		if i < 0 {
			continue
		}
		if bytes.Contains(data[i+1:], needle) {
			t.Fatalf("%s holds the shard's bytes twice", s)
		}
		found++
		f, err := os.OpenFile(s, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := []byte{data[i+off-lo] ^ 0x08}
		if _, err := f.WriteAt(b, int64(i+off-lo)); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if found != 1 {
		t.Fatalf("the shard's bytes are in %d segment files of %d, want 1", found, len(segs))
	}
}

// rewriteShard replaces a node's shard of stripe with fn(shard) at the same version,
// owner kept: the store's checksums are those of the new bytes, only the shard's own
// checks can tell (a shard damaged before it was stored).
func rewriteShard(t *testing.T, st *store.Store, stripe string, fn func([]byte) []byte) {
	t.Helper()
	shard, o, err := readShard(t, st, stripe)
	if err != nil {
		t.Fatal(err)
	}
	b := fn(bytes.Clone(shard))
	if _, err := st.PutObject(context.Background(), topology.ShardBucket, stripe, &object.Object{UserMeta: o.UserMeta}, bytes.NewReader(b), int64(len(b)),
		object.PutOptions{Version: o.HLC, Repair: true}); err != nil {
		t.Fatal(err)
	}
}

// The deep scrub reads shards too: a shard damaged on disk (in its payload, or in its
// header so that neither its code nor its index can be read), or stored damaged (its own
// CRC fails, or it is cut short), is found by its node's scrub pass, rebuilt from the
// other shards of its stripe and put back; the object then reads back byte-identical from
// that shard and the other data shards alone. With fewer than K sound shards left, the
// damaged shard is counted as unrepairable and nothing is written. Every other case
// names its stripes by a tag (feature level 9), the others by the version.
func TestECScrubRebuildsDamagedShards(t *testing.T) {
	for i, tc := range []struct {
		name   string
		damage func(t *testing.T, st *store.Store, stripe string)
		remove int // shards of other nodes removed besides
	}{
		{"payload bit rot", func(t *testing.T, st *store.Store, stripe string) { flipOnDisk(t, st, stripe, 600<<10) }, 0},
		{"header bit rot", func(t *testing.T, st *store.Store, stripe string) { flipOnDisk(t, st, stripe, 10) }, 0},
		{"stored with a bad CRC", func(t *testing.T, st *store.Store, stripe string) {
			rewriteShard(t, st, stripe, func(b []byte) []byte { b[len(b)/2] ^= 1; return b })
		}, 0},
		{"stored cut short", func(t *testing.T, st *store.Store, stripe string) {
			rewriteShard(t, st, stripe, func(b []byte) []byte { return b[:len(b)-100] })
		}, 0},
		{"too few shards left", func(t *testing.T, st *store.Store, stripe string) { flipOnDisk(t, st, stripe, 600<<10) }, 2},
		{"too few shards left, header lost", func(t *testing.T, st *store.Store, stripe string) { flipOnDisk(t, st, stripe, 10) }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := newECCluster(t)
			if i%2 == 1 { // stripes named by a tag; the others by the version, as before level 9
				c.setLevel(LevelTaggedStripes)
			}
			body := randBody(11, 3<<20+12345) // one stripe: four data shards of 772 KiB
			o, err := putClass(ctx, c.nodes[0].gw, "b", "k", "EC42", body)
			if err != nil {
				t.Fatal(err)
			}
			stripe := stripe.Names("b", "k", o)[0]
			m := c.maps.Current()
			tbl, err := c.nodes[0].gw.topo.ShardTable(m, m.Classes["EC42"], true)
			if err != nil {
				t.Fatal(err)
			}
			ts := c.nodes[0].gw.topo.ShardTargets(m, tbl, stripe)
			victim := c.nodes[c.index(ts[1].ID)] // holds data shard 1
			tc.damage(t, victim.store, stripe)
			if b, _, err := readShard(t, victim.store, stripe); err == nil {
				if _, _, err := erasure.ParseShard(b); err == nil {
					t.Fatal("the shard is not damaged")
				}
			}
			for _, tg := range ts[len(ts)-tc.remove:] { // parity shards
				st := c.nodes[c.index(tg.ID)].store
				sv, _ := st.StatVersion(topology.ShardBucket, stripe)
				if ok, err := st.Forget(topology.ShardBucket, stripe, sv.HLC); !ok || err != nil {
					t.Fatalf("forget: %v %v", ok, err)
				}
			}
			before, err := victim.store.StatVersion(topology.ShardBucket, stripe)
			if err != nil {
				t.Fatal(err)
			}
			s := victim.rep.NewScrub(time.Hour, 0)
			s.Pass(ctx)
			st := s.Status()
			if st.Shards != 1 || st.Corrupt != 1 || st.Errors != 0 {
				t.Fatalf("scrub figures %+v; want 1 shard checked, found damaged", st)
			}

			if tc.remove > 0 {
				// Three sound shards of four needed: nothing can be rebuilt, nothing is written.
				if st.Repaired != 0 || st.Unrepairable != 1 {
					t.Fatalf("scrub figures %+v; want the damaged shard counted as unrepairable", st)
				}
				after, err := victim.store.StatVersion(topology.ShardBucket, stripe)
				if err != nil || after.HLC != before.HLC {
					t.Fatalf("the damaged shard was replaced (version %d, was %d): %v", after.HLC, before.HLC, err)
				}
				if n, _ := c.shardsOf(); n != 6-tc.remove {
					t.Fatalf("%d shards stored, want %d: the scrub wrote some", n, 6-tc.remove)
				}
				got, _, err := get(ctx, c.nodes[0].gw, "b", "k", 0, -1)
				if err == nil || bytes.Equal(got, body) {
					t.Fatalf("read with three sound shards of four: %v", err)
				}
				return
			}
			if st.Repaired != 1 || st.Unrepairable != 0 {
				t.Fatalf("scrub figures %+v; want the damaged shard rebuilt", st)
			}
			b, _, err := readShard(t, victim.store, stripe)
			if err != nil {
				t.Fatalf("the rebuilt shard does not read back: %v", err)
			}
			if h, _, err := erasure.ParseShard(b); err != nil || h.Index != 1 {
				t.Fatalf("the rebuilt shard: index %d, %v; want a sound shard 1", h.Index, err)
			}
			again := victim.rep.NewScrub(time.Hour, 0)
			again.Pass(ctx)
			if st := again.Status(); st.Shards != 1 || st.Corrupt != 0 {
				t.Fatalf("second pass %+v; want a sound shard", st)
			}
			// The parity shards' nodes gone: the object needs the rebuilt shard.
			c.stop(c.index(ts[4].ID))
			c.stop(c.index(ts[5].ID))
			got, _, err := get(ctx, c.nodes[c.index(ts[0].ID)].gw, "b", "k", 0, -1)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("read from the data shards alone after the scrub: %v", err)
			}
		})
	}
}

// A scrub pass checks every shard its node holds and rewrites none that is sound.
func TestECScrubLeavesSoundShards(t *testing.T) {
	ctx := context.Background()
	c := newECCluster(t)
	if _, err := putClass(ctx, c.nodes[0].gw, "b", "k", "EC42", randBody(12, 9<<20)); err != nil {
		t.Fatal(err)
	}
	for _, nd := range c.nodes {
		var before []object.VersionEntry
		nd.store.Scan(func(b, _ string) bool { return b == topology.ShardBucket }, func(e object.VersionEntry) error {
			before = append(before, e)
			return nil
		})
		s := nd.rep.NewScrub(time.Hour, 0)
		s.Pass(ctx)
		st := s.Status()
		if st.Shards != int64(len(before)) || st.Corrupt != 0 || st.Errors != 0 || st.Bytes == 0 {
			t.Fatalf("%s: scrub figures %+v; want %d sound shards", nd.id, st, len(before))
		}
		for _, e := range before {
			if o, err := nd.store.StatVersion(e.Bucket, e.Key); err != nil || o.HLC != e.HLC {
				t.Fatalf("%s: shard %s rewritten by a scrub that found it sound: %v", nd.id, e.Key, err)
			}
		}
	}
}
