package store

import (
	"bytes"
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
)

// checkExtentMaps fails t unless every extent map the store keeps is the layout of its
// object's extent keys in the index.
func checkExtentMaps(t *testing.T, s *Store) {
	t.Helper()
	s.extMaps.mu.Lock()
	maps := map[[16]byte]*extentMap{}
	held := 0
	for vid, sl := range s.extMaps.slots {
		if sl.taken {
			t.Fatalf("extent map of %x still taken after its write", vid)
		}
		maps[vid] = sl.m
		held += len(sl.m.ext)
	}
	if held != s.extMaps.held {
		t.Fatalf("extent maps hold %d extents, counted %d", held, s.extMaps.held)
	}
	s.extMaps.mu.Unlock()
	for vid, m := range maps {
		want := s.loadExtentMap(vid, m.order)
		if want == nil || !slices.Equal(m.ext, want.ext) {
			t.Fatalf("extent map of %x differs from the index:\n map   %+v\n index %+v", vid, m.ext, want)
		}
	}
}

// The extent map of an object created by a write is kept from its first write; one of an
// object the store did not create since it opened is loaded on its second write; each
// matches the index after every write of random sizes (inline, chunked, holes, pieces of
// both cut at either end), and the object reads back as written.
func TestExtentMapWrites(t *testing.T) {
	cfg := testConfig(t) // InlineMax 1 KiB, chunks of 64 KiB
	s := openStore(t, cfg)
	const size = 256 << 10
	m := newModelObject(t, s, size)
	vid := func() [16]byte {
		o, err := s.StatObject("vol", "o")
		if err != nil {
			t.Fatal(err)
		}
		return o.VersionID
	}
	has := func() bool {
		s.extMaps.mu.Lock()
		defer s.extMaps.mu.Unlock()
		sl := s.extMaps.slots[vid()]
		return sl != nil && sl.m != nil
	}
	rng := rand.New(rand.NewPCG(11, 12))
	writes := func(n int) {
		for range n {
			l := 1 + rng.IntN(3<<10)
			if rng.IntN(4) == 0 {
				l = 1 + rng.IntN(130<<10)
			}
			off := rng.Int64N(size - int64(l) + 1)
			if rng.IntN(6) == 0 {
				o, err := s.WriteRange(context.Background(), object.RangeWrite{Bucket: "vol", Key: "o", Size: size, Off: off, Len: int64(l), Prev: m.order, Next: m.order + 1})
				if err != nil {
					t.Fatal(err)
				}
				m.order = o.HLC
				clear(m.model[off : off+int64(l)])
			} else {
				m.write(t, off, randBytes(rng.Uint64(), l))
			}
			checkExtentMaps(t, s)
		}
		if got, err := m.read(0, size); err != nil || !bytes.Equal(got, m.model) {
			t.Fatalf("the object differs from its model (%v)", err)
		}
	}
	writes(1)
	if !has() {
		t.Fatal("no extent map after the first write of a new object")
	}
	writes(150)
	// Small writes only: the object has more inline bytes than the extent cache keeps,
	// so reads go through its map (span), and read back as written.
	for range 400 {
		l := 1 + rng.IntN(1<<10)
		m.write(t, rng.Int64N(size-int64(l)+1), randBytes(rng.Uint64(), l))
	}
	checkExtentMaps(t, s)
	if _, ok := s.extMaps.span(vid(), m.order, 0, 1, nil); !ok {
		t.Fatal("reads of an object of many small writes do not go through its extent map")
	}
	for range 200 {
		off := rng.Int64N(size)
		n := 1 + rng.Int64N(min(size-off, 4<<10)) // through the map (at most spanMax extents)
		if rng.IntN(4) == 0 {
			n = 1 + rng.Int64N(min(size-off, 64<<10)) // through the index, often
		}
		if got, err := m.read(off, n); err != nil || !bytes.Equal(got, m.model[off:off+n]) {
			t.Fatalf("read [%d, +%d) through the extent map differs from the model (%v)", off, n, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, cfg)
	m.s = s
	writes(1)
	if has() {
		t.Fatal("an extent map after one write of an object not created since the store opened")
	}
	writes(1)
	if !has() {
		t.Fatal("no extent map after the second write")
	}
	writes(150)
	// A whole copy of the object (a replica catching up) replaces its extents: the map goes.
	body := randBytes(5, size)
	if _, err := s.PutObject(context.Background(), "vol", "o", &object.Object{Mutable: true}, bytes.NewReader(body), size, object.PutOptions{Version: m.order + 1, Repair: true}); err != nil {
		t.Fatal(err)
	}
	m.order++
	copy(m.model, body)
	if has() {
		t.Fatal("the extent map outlived a whole copy of its object")
	}
	checkExtentMaps(t, s)
	writes(40)
	// The references the cuts counted are the extents': deleting the object frees all.
	deleteMutable(t, s, "vol", "o")
}

// A map taken by a writer is not installed when another batch changed its object's
// extents meanwhile, or a key range was deleted; maps beyond the bound are evicted, and
// one of too many extents is not kept.
func TestExtentMapInvalidation(t *testing.T) {
	s := openStore(t, testConfig(t))
	c := newExtentMaps()
	a, b := [16]byte{1}, [16]byte{2}
	own, other := s.db.NewBatch(), s.db.NewBatch()
	defer own.Close()
	defer other.Close()
	installed := func(vid [16]byte) bool {
		sl := c.slots[vid]
		return sl != nil && !sl.taken && sl.m != nil
	}
	m, _, tk := c.take(a, 0, true, own)
	m.ext = append(m.ext, extMeta{off: 0, n: 10})
	c.remove(own, [][16]byte{a}) // the taker's own commit
	c.install(a, m, tk)
	if !installed(a) || c.held != 1 {
		t.Fatalf("own commit dropped the map (held %d)", c.held)
	}
	got, load, tk := c.take(a, 7, false, own)
	if got != nil || !load {
		t.Fatalf("a map taken at another order than its own: %v, load %v", got, load)
	}
	c.drop(a, tk)
	if installed(a) || c.held != 0 || c.slots[a] != nil {
		t.Fatalf("a map at another order was kept (held %d)", c.held)
	}

	m, _, tk = c.take(a, 0, true, own)
	c.remove(other, [][16]byte{a})
	c.install(a, m, tk)
	if installed(a) {
		t.Fatal("a map installed after another batch changed its extents")
	}
	// The taker's batch, once its commit is seen, is pooled and may come back as
	// another writer's: a second commit of that batch is another's.
	m, _, tk = c.take(a, 0, true, own)
	c.remove(own, [][16]byte{a})
	c.remove(own, [][16]byte{a})
	c.install(a, m, tk)
	if installed(a) {
		t.Fatal("a map installed after a later batch changed its extents")
	}
	m, _, tk = c.take(b, 0, true, own)
	c.removeAll()
	c.install(b, m, tk)
	if installed(b) {
		t.Fatal("a map installed after every map was dropped")
	}
	// A ticket that is not the holder's neither installs nor drops.
	m, _, tk = c.take(b, 0, true, own)
	c.install(b, &extentMap{}, tk+1)
	c.drop(b, tk+1)
	if sl := c.slots[b]; sl == nil || !sl.taken {
		t.Fatal("another ticket ended a writer's hold")
	}
	c.install(b, m, tk)
	if !installed(b) {
		t.Fatal("the holder's map was not installed")
	}

	// First write of an old object: no map, no load; the second loads.
	if got, load, _ := c.take(a, 5, false, own); got != nil || load {
		t.Fatalf("first write of an old object: %v, load %v", got, load)
	}
	_, load, tk = c.take(a, 5, false, own)
	if !load {
		t.Fatal("second write of an old object does not load its map")
	}
	c.drop(a, tk)

	c.max = 3
	for i := range 5 {
		vid := [16]byte{byte(10 + i)}
		m, _, tk := c.take(vid, 0, true, own)
		m.ext = append(m.ext, extMeta{off: 0, n: 1})
		c.install(vid, m, tk)
		if c.held > c.max {
			t.Fatalf("%d extents held, bound %d", c.held, c.max)
		}
	}
	m, _, tk = c.take(a, 0, true, own)
	m.ext = make([]extMeta, extentMapPerObject+1)
	c.install(a, m, tk)
	if installed(a) {
		t.Fatal("a map of too many extents was kept")
	}
}
