package stripe

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/hlc"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/topology"
)

// fixture is a Path over six holders reached through the replica seam alone: each a
// store of its own behind a replica.Local, wrapped by replica.Faults. No network, no
// gateway: what the erasure-coded path does is seen in the holders' stores.
type fixture struct {
	path   *Path
	maps   *topology.Maps
	stores map[string]*store.Store
	faults map[string]*replica.Faults
	cls    clustermap.Class
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	cls := clustermap.Class{Name: "EC42", N: 6, W: 5, R: 4, D: 4, K: 4, M: 2, Chunk: 64 << 10}
	m := &clustermap.Map{Epoch: 1, Partitions: 16, Replicas: 3, Classes: map[string]clustermap.Class{
		clustermap.StandardClass: {Name: clustermap.StandardClass, N: 3, W: 2, R: 1, D: 2}, "EC42": cls}}
	f := &fixture{maps: &topology.Maps{}, stores: map[string]*store.Store{}, faults: map[string]*replica.Faults{}, cls: cls}
	clock := new(hlc.Clock)
	for i := range 6 {
		id := "n" + strconv.Itoa(i+1)
		m.Nodes = append(m.Nodes, clustermap.Node{ID: id, Addr: "127.0.0.1:" + strconv.Itoa(7001+i), Zone: "z" + strconv.Itoa(i%3),
			Weight: 1, State: clustermap.StateUp, Roles: []string{clustermap.RoleStorage}})
		st, err := store.Open(store.Config{Dir: t.TempDir(), InlineMax: 1 << 10, ChunkSize: 256 << 10, SegmentSize: 16 << 20, Reserve: 1,
			CompactInterval: time.Hour, Logger: log, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		f.stores[id] = st
		f.faults[id] = replica.NewFaults()
	}
	f.maps.Set(m)
	topo := topology.NewTopology(f.maps, "n1", true, log)
	f.path = New(Config{Self: "n1", Maps: f.maps, Topology: topo, Clock: clock, Timeout: 5 * time.Second, Logger: log,
		Replica: func(t topology.Target) replica.Replica {
			st := f.stores[t.ID]
			ensure := func(b string) error {
				if _, err := st.HeadBucket(b); err == nil {
					return nil
				}
				if err := st.CreateBucket(b); err != nil && !errors.Is(errors.Exist, err) {
					return err
				}
				return nil
			}
			return f.faults[t.ID].Wrap(&replica.Local{Node: t.ID, Store: st, EnsureBucket: ensure})
		}})
	t.Cleanup(f.path.Close)
	return f
}

// put stores body as an erasure-coded object and returns its record.
func (f *fixture) put(t *testing.T, key string, body []byte) *object.Object {
	t.Helper()
	v := f.path.clock.Next()
	n, err := f.path.Put(context.Background(), f.cls, "b/"+key, bytes.NewReader(body), int64(len(body)), func(i int64) string { return Key("b", key, v, i) })
	if err != nil {
		t.Fatal(err)
	}
	return &object.Object{Size: n, HLC: v, StorageClass: f.cls.Name, Striped: true, Stripe: LayoutOf(f.cls)}
}

func (f *fixture) read(o *object.Object, key string, off, n int64) ([]byte, error) {
	rd, err := f.path.Open(o, "b", key)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var b bytes.Buffer
	_, err = rd.WriteRange(context.Background(), &b, off, n)
	return b.Bytes(), err
}

// shards counts the shard records the six stores hold.
func (f *fixture) shards(t *testing.T) int {
	t.Helper()
	n := 0
	for _, st := range f.stores {
		err := st.Scan(func(b, _ string) bool { return b == topology.ShardBucket }, func(e object.VersionEntry) error {
			if !e.Deleted {
				n++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func randBody(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestPath writes, reads, degrades and heals erasure-coded objects through the replica
// seam, with faults injected per holder.
func TestPath(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	body := randBody(1, 5*256<<10+123) // 5 full stripes of 4x64 KiB and a short one
	o := f.put(t, "k", body)
	stripes := len(Names("b", "k", o))
	if stripes != 6 {
		t.Fatalf("%d stripes, want 6", stripes)
	}
	if n := f.shards(t); n != 6*stripes {
		t.Fatalf("%d shards stored, want %d", n, 6*stripes)
	}

	t.Run("ranges", func(t *testing.T) {
		for _, r := range [][2]int64{{0, int64(len(body))}, {1, 10}, {256<<10 - 3, 7}, {int64(len(body)) - 5, 5}} {
			got, err := f.read(o, "k", r[0], r[1])
			if err != nil || !bytes.Equal(got, body[r[0]:r[0]+r[1]]) {
				t.Fatalf("range %v: %d bytes, %v", r, len(got), err)
			}
		}
	})

	t.Run("two holders unreachable", func(t *testing.T) {
		f.faults["n2"].Partition()
		f.faults["n5"].Fail(errors.E(errors.IO, "disk failed"))
		defer f.faults["n2"].Heal()
		defer f.faults["n5"].Heal()
		got, err := f.read(o, "k", 0, int64(len(body)))
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("degraded read: %d bytes, %v", len(got), err)
		}
	})

	t.Run("three holders unreachable", func(t *testing.T) {
		for _, id := range []string{"n1", "n3", "n4"} {
			f.faults[id].Partition()
			defer f.faults[id].Heal()
		}
		if _, err := f.read(o, "k", 0, int64(len(body))); !errors.Is(errors.Transient, err) {
			t.Fatalf("read with three of six holders gone: %v, want a Transient error", err)
		}
	})

	t.Run("write needs W holders", func(t *testing.T) {
		for _, id := range []string{"n2", "n6"} {
			f.faults[id].Partition()
			defer f.faults[id].Heal()
		}
		v := f.path.clock.Next()
		_, err := f.path.Put(ctx, f.cls, "b/w", bytes.NewReader(body[:1000]), 1000, func(i int64) string { return Key("b", "w", v, i) })
		var qe *replica.QuorumError
		if !errors.As(err, &qe) || qe.Got != 4 || qe.Need != 5 {
			t.Fatalf("put with four of six holders (W=5): %v, want a quorum error (4 of 5)", err)
		}
	})

	t.Run("heal rebuilds what a holder lost", func(t *testing.T) {
		lost := f.stores["n3"]
		var keys []object.VersionEntry
		lost.Scan(func(b, _ string) bool { return b == topology.ShardBucket }, func(e object.VersionEntry) error {
			keys = append(keys, e)
			return nil
		})
		for _, e := range keys {
			if _, err := lost.Forget(topology.ShardBucket, e.Key, e.HLC); err != nil {
				t.Fatal(err)
			}
		}
		h := f.path.Heal(ctx, f.maps.Current(), o, "b", "k")
		if h.Stripes != stripes || h.Unhealable != 0 {
			t.Fatalf("heal: %+v", h)
		}
		if f.shards(t) < 6*stripes {
			t.Fatalf("%d shards after the heal, want at least %d (rebuilt %d)", f.shards(t), 6*stripes, h.Rebuilt)
		}
		if h2 := f.path.Heal(ctx, f.maps.Current(), o, "b", "k"); h2.Rebuilt != 0 {
			t.Fatalf("a second heal rebuilt %d shards", h2.Rebuilt)
		}
	})
}

// The body's declared length is checked: a short or long body stores no record's worth
// of stripes as a success.
func TestPathBodyLength(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name string
		body io.Reader
		size int64
	}{
		{"short", bytes.NewReader(make([]byte, 100)), 200},
		{"long", bytes.NewReader(make([]byte, 300<<10)), 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := f.path.clock.Next()
			_, err := f.path.Put(context.Background(), f.cls, "b/x", tc.body, tc.size, func(i int64) string { return Key("b", "x", v, i) })
			if !errors.Is(errors.Invalid, err) {
				t.Fatalf("%v, want an Invalid error", err)
			}
		})
	}
}

// Part stripe names are told from whole-object stripe names.
func TestPartStripeNames(t *testing.T) {
	up := store.NewUploadID()
	for _, tc := range []struct {
		name   string
		upload string
	}{
		{PartKey("b", "k", up, 7, 3), up},
		{PartKey("b", "a/b/c", up, 10000, 0), up},
		{Key("b", "k", 0x18f3a2b4c5d6e7f8, 2), ""},
		{Key("b", "k", 0, 0), ""},
		{"x", ""},
		{"abc/def.1", ""},
		{"abc/def.x/1", ""},
		{"abc/.1/1", ""},
		{"abc/def.1/", ""},
	} {
		got, ok := PartUpload(tc.name)
		if got != tc.upload || ok != (tc.upload != "") {
			t.Errorf("PartUpload(%q) = %q, %v; want %q", tc.name, got, ok, tc.upload)
		}
	}
}

// The stripe-name parser never panics, never takes a whole object's stripe (hash/version/i)
// for a part's, and gives back the upload of every name partStripeKey makes, including
// the tags of policy apply's rewrites.
func FuzzPartStripe(f *testing.F) {
	f.Add("b", "k", store.NewUploadID(), 1, int64(0), "x/y.1/2")
	f.Add("b", "a/b", "relayout-18f3a2b4c5d6e7f8", 3, int64(7), "abc/.1/1")
	f.Fuzz(func(t *testing.T, bucket, key, upload string, n int, i int64, raw string) {
		PartUpload(raw) // no panic on anything
		if v, err := strconv.ParseUint(strings.SplitN(raw+"//", "/", 3)[1], 16, 64); err == nil {
			if _, ok := PartUpload(raw); ok {
				t.Fatalf("%q (version %x) parsed as a part's stripe", raw, v)
			}
		}
		if upload == "" || strings.ContainsAny(upload, "./") || n < 0 || i < 0 {
			return
		}
		got, ok := PartUpload(PartKey(bucket, key, upload, n, i))
		if !ok || got != upload {
			t.Fatalf("PartUpload(PartKey(.., %q, %d, %d)) = %q, %v", upload, n, i, got, ok)
		}
	})
}

// A PUT's tag names its provisional version and parses back from its stripes' names;
// upload ids, rewrites' tags and malformed tags are not PUT tags.
func TestPutTag(t *testing.T) {
	v := uint64(0x18f3a2b4c5d6e7f8)
	tag := PutTag(v)
	if tag2 := PutTag(v); tag2 == tag {
		t.Fatalf("two PUTs at one version got the same tag %q", tag)
	}
	up, ok := PartUpload(PartKey("b", "k", tag, 1, 3))
	if !ok || up != tag {
		t.Fatalf("PartUpload of a PUT's stripe: %q %v", up, ok)
	}
	if got, ok := PutTagVersion(up); !ok || got != v {
		t.Fatalf("PutTagVersion(%q) = %x, %v", up, got, ok)
	}
	for _, bad := range []string{"", "put-", "put-12", "put-12-", "put-xyz-0011223344556677", "put-12-00112233445566", "put-12-001122334455667g",
		"relayout-18f3a2b4c5d6e7f8", store.NewUploadID(), "Put-12-0011223344556677", "put-00-0000000000000000", "put-AB-0011223344556677", "put-ab-00112233445566FF"} {
		if _, ok := PutTagVersion(bad); ok {
			t.Errorf("PutTagVersion(%q) took it for a PUT's tag", bad)
		}
	}
}

// The tag parser never panics, and every tag PutTag makes parses back to its version.
func FuzzPutTag(f *testing.F) {
	f.Add(uint64(1), "put-12-0011223344556677")
	f.Add(uint64(0x18f3a2b4c5d6e7f8), "relayout-18f3a2b4c5d6e7f8")
	f.Add(uint64(0), "put--")
	f.Fuzz(func(t *testing.T, v uint64, raw string) {
		if got, ok := PutTagVersion(raw); ok && !strings.HasPrefix(raw, PutPrefix+strconv.FormatUint(got, 16)+"-") {
			t.Fatalf("PutTagVersion(%q) = %x", raw, got)
		}
		tag := PutTag(v)
		if strings.ContainsAny(tag, "./") {
			t.Fatalf("tag %q cannot name a part's stripe", tag)
		}
		if got, ok := PutTagVersion(tag); !ok || got != v {
			t.Fatalf("PutTagVersion(PutTag(%x)) = %x, %v", v, got, ok)
		}
	})
}
