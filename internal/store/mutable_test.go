package store

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// countKeys counts the index keys with a prefix.
func countKeys(t *testing.T, s *Store, prefix string) int {
	t.Helper()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: append([]byte(prefix[:len(prefix)-1]), prefix[len(prefix)-1]+1)})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n
}

// Random in-place writes (inline, chunked, holes), whole replacements and reopenings
// read back as a byte-array model says; reads of random ranges too; deleting the objects
// leaves no extent, reference count or chunk behind.
func TestMutableModel(t *testing.T) {
	cfg := testConfig(t) // InlineMax 1 KiB, chunks of 64 KiB
	s := openStore(t, cfg)
	ctx := context.Background()
	if err := s.CreateBucket("vol"); err != nil {
		t.Fatal(err)
	}
	const size = 512 << 10
	rng := rand.New(rand.NewPCG(7, 8))
	type model struct {
		b     []byte
		order uint64
	}
	objs := map[string]*model{"a": {b: make([]byte, size)}, "b": {b: make([]byte, size)}}
	check := func(when string) {
		t.Helper()
		for key, m := range objs {
			if m.order == 0 {
				continue
			}
			if got := readAll(t, s, "vol", key); !bytes.Equal(got, m.b) {
				t.Fatalf("%s: %s differs from the model", when, key)
			}
			r, err := s.OpenObject("vol", key)
			if err != nil {
				t.Fatal(err)
			}
			for range 5 {
				off := rng.Int64N(size)
				n := rng.Int64N(size - off + 1)
				var buf bytes.Buffer
				if _, err := r.WriteRange(ctx, &buf, off, n); err != nil || !bytes.Equal(buf.Bytes(), m.b[off:off+n]) {
					t.Fatalf("%s: %s range [%d, +%d) differs (%v)", when, key, off, n, err)
				}
			}
			if r.Object.HLC != m.order || !r.Object.Mutable || r.Object.Size != size {
				t.Fatalf("%s: record %+v", when, r.Object)
			}
			r.Close()
		}
	}
	for i := range 400 {
		key := []string{"a", "b"}[rng.IntN(2)]
		m := objs[key]
		switch p := rng.IntN(100); {
		case p < 5 && m.order > 0:
			next := randBytes(uint64(i), size)
			if _, err := s.PutObject(ctx, "vol", key, &object.Object{Mutable: true}, bytes.NewReader(next), size,
				object.PutOptions{Version: m.order + 1, Repair: true}); err != nil {
				t.Fatal(err)
			}
			m.b, m.order = next, m.order+1
		case p < 10:
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openStore(t, cfg)
		case p < 15:
			for {
				did, err := s.CompactOnce(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if !did {
					break
				}
			}
		default:
			var n int
			switch q := rng.IntN(10); {
			case q < 5:
				n = 1 + rng.IntN(1<<10) // inline
			case q < 8:
				n = 1<<10 + rng.IntN(200<<10) // chunks
			default:
				n = 1 + rng.IntN(size)
			}
			off := rng.IntN(size - n + 1)
			w := object.RangeWrite{Bucket: "vol", Key: key, Size: size, Off: int64(off), Prev: m.order, Next: m.order + 1}
			if rng.IntN(5) == 0 {
				w.Len = int64(n)
				clear(m.b[off : off+n])
			} else {
				w.Data = randBytes(uint64(i)<<8, n)
				copy(m.b[off:], w.Data)
			}
			o, err := s.WriteRange(ctx, w)
			if err != nil {
				t.Fatalf("write %d: %v", i, err)
			}
			m.order = o.HLC
			checkExtentMaps(t, s)
		}
		if i%40 == 0 {
			check("after op " + string(rune('0'+i/40)))
		}
	}
	check("at the end")
	deleteMutable(t, s, "vol", slices.Collect(maps.Keys(objs))...)
}

// deleteMutable deletes mutable objects and fails t if any extent, reference count or
// chunk of the store is left: each must have been referenced by them alone, and
// referenced as many times as counted.
func deleteMutable(t *testing.T, s *Store, bucket string, keys ...string) {
	t.Helper()
	for _, key := range keys {
		if err := s.DeleteObject(bucket, key); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{pfxExtent, pfxChunkRef, pfxChunk, pfxSeg} {
		if n := countKeys(t, s, p); n != 0 {
			t.Errorf("%d %s keys left after the objects were deleted", n, p)
		}
	}
}

// A write that does not follow the object's order is refused with the object as it is;
// so is one that would change its size or address a normal object.
func TestMutableOrder(t *testing.T) {
	s := openStore(t, testConfig(t))
	ctx := context.Background()
	if err := s.CreateBucket("vol"); err != nil {
		t.Fatal(err)
	}
	w := object.RangeWrite{Bucket: "vol", Key: "o", Size: 4096, Off: 0, Data: []byte("abc"), Prev: 0, Next: 5}
	if _, err := s.WriteRange(ctx, w); err != nil {
		t.Fatal(err)
	}
	put(t, s, "vol", "plain", []byte("x"))
	for _, tc := range []struct {
		name string
		w    object.RangeWrite
		kind errors.Kind
	}{
		{"missed a write", object.RangeWrite{Bucket: "vol", Key: "o", Size: 4096, Data: []byte("d"), Prev: 6, Next: 7}, errors.Precondition},
		{"stale writer", object.RangeWrite{Bucket: "vol", Key: "o", Size: 4096, Data: []byte("d"), Prev: 4, Next: 5}, errors.Precondition},
		{"create again", object.RangeWrite{Bucket: "vol", Key: "o", Size: 4096, Data: []byte("d"), Prev: 0, Next: 9}, errors.Precondition},
		{"other size", object.RangeWrite{Bucket: "vol", Key: "o", Size: 8192, Data: []byte("d"), Prev: 5, Next: 6}, errors.Invalid},
		{"beyond the end", object.RangeWrite{Bucket: "vol", Key: "o", Size: 4096, Off: 4095, Data: []byte("de"), Prev: 5, Next: 6}, errors.Invalid},
		{"normal object", object.RangeWrite{Bucket: "vol", Key: "plain", Size: 4096, Data: []byte("d"), Prev: 0, Next: 1 << 62}, errors.Precondition},
		{"no bucket", object.RangeWrite{Bucket: "none", Key: "o", Size: 4096, Data: []byte("d"), Prev: 5, Next: 6}, errors.NotExist},
	} {
		o, err := s.WriteRange(ctx, tc.w)
		if !errors.Is(tc.kind, err) {
			t.Errorf("%s: %v, want kind %v", tc.name, err, tc.kind)
		}
		if tc.kind == errors.Precondition && tc.w.Key == "o" && (o == nil || o.HLC != 5) {
			t.Errorf("%s: the refusal returned %+v, want the object at order 5", tc.name, o)
		}
	}
	if got := readAll(t, s, "vol", "o"); !bytes.Equal(got, append([]byte("abc"), make([]byte, 4093)...)) {
		t.Errorf("refused writes changed the object")
	}
	// A newer whole copy (a replica catching up) replaces it; an older one does not.
	body := slices.Repeat([]byte("z"), 4096)
	if _, err := s.PutObject(ctx, "vol", "o", &object.Object{Mutable: true}, bytes.NewReader(body), 4096, object.PutOptions{Version: 3, Repair: true}); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, s, "vol", "o"); got[0] != 'a' {
		t.Error("an older copy replaced the object")
	}
	if _, err := s.PutObject(ctx, "vol", "o", &object.Object{Mutable: true}, bytes.NewReader(body), 4096, object.PutOptions{Version: 9, Repair: true}); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, s, "vol", "o"); !bytes.Equal(got, body) {
		t.Error("a newer copy did not replace the object")
	}
	if _, err := s.WriteRange(ctx, object.RangeWrite{Bucket: "vol", Key: "o", Size: 4096, Off: 1, Data: []byte("q"), Prev: 9, Next: 10}); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, s, "vol", "o"); got[1] != 'q' || got[0] != 'z' {
		t.Error("a write after the copy was lost")
	}
}

// On a full disk a range write is refused with NoSpace and changes nothing; a hole (which
// frees space) still goes through.
func TestMutableDiskFull(t *testing.T) {
	var free atomic.Int64
	free.Store(1 << 40)
	cfg := testConfig(t)
	cfg.FreeSpace = func() (int64, error) { return free.Load(), nil }
	cfg.Reserve = 1 << 20
	s := openStore(t, cfg)
	ctx := context.Background()
	if err := s.CreateBucket("vol"); err != nil {
		t.Fatal(err)
	}
	const size = 256 << 10
	w := object.RangeWrite{Bucket: "vol", Key: "o", Size: size, Data: bytes.Repeat([]byte("a"), size), Prev: 0, Next: 1}
	if _, err := s.WriteRange(ctx, w); err != nil {
		t.Fatal(err)
	}
	free.Store(1 << 20)                       // at the reserve
	for _, n := range []int{100, 200 << 10} { // inline, chunked
		_, err := s.WriteRange(ctx, object.RangeWrite{Bucket: "vol", Key: "o", Size: size, Data: bytes.Repeat([]byte("b"), n), Prev: 1, Next: 2})
		if !errors.Is(errors.NoSpace, err) {
			t.Fatalf("a %d-byte write on a full disk: %v", n, err)
		}
	}
	if got := readAll(t, s, "vol", "o"); !bytes.Equal(got, bytes.Repeat([]byte("a"), size)) {
		t.Fatal("refused writes changed the object")
	}
	if _, err := s.WriteRange(ctx, object.RangeWrite{Bucket: "vol", Key: "o", Size: size, Len: 4096, Prev: 1, Next: 2}); err != nil {
		t.Fatalf("a hole on a full disk: %v", err)
	}
}

// Inline bytes of small writes go to blob files once flushed, and a write that covers
// such an extent whole deletes it without reading it (cutExtents): writes that cover
// extents whole, trim them at either end or split them, over extents in blob files, in
// tables and in the memtable, read back as the model says and leave no extent behind
// when the object is deleted.
func TestMutableBlobExtents(t *testing.T) {
	s := openStore(t, testConfig(t)) // InlineMax 1 KiB: a 1 KiB write's value is 1,025 bytes
	const size = 1 << 20
	m := newModelObject(t, s, size)
	write := func(off int64, data []byte) { t.Helper(); m.write(t, off, data) }
	check := func(what string) {
		t.Helper()
		if got, err := m.read(0, size); err != nil || !bytes.Equal(got, m.model) {
			t.Fatalf("%s: read %v, equal %v", what, err, bytes.Equal(got, m.model))
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 256 { // 1 KiB inline writes, 4 KiB apart
		write(int64(i)*4096, randBytes(uint64(i), 1<<10))
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	separated := 0
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxExtent), UpperBound: prefixEnd([]byte(pfxExtent))})
	if err != nil {
		t.Fatal(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		lv := it.LazyValue()
		if _, ok := lv.TryGetShortAttribute(); ok {
			separated++
		}
	}
	it.Close()
	if separated < 200 {
		t.Fatalf("%d of 256 inline extents in blob files after a flush: the test would not reach the unread delete", separated)
	}
	check("after the flush")
	for round := range 40 {
		off := rng.Int64N(size - 64<<10)
		var data []byte
		switch round % 3 {
		case 0: // covers several whole extents and trims two (chunked: above InlineMax)
			data = randBytes(uint64(1000+round), int(16<<10+rng.Int64N(48<<10)))
		case 1: // inside one extent or across one end
			data = randBytes(uint64(1000+round), int(1+rng.Int64N(1<<10)))
		default: // exactly one extent, whole
			off = rng.Int64N(256) * 4096
			data = randBytes(uint64(1000+round), 1<<10)
		}
		write(off, data)
		if round%10 == 9 {
			if err := s.db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		check(fmt.Sprintf("round %d", round))
	}
	write(0, randBytes(7, size)) // covers everything
	check("after a whole overwrite")
	if n := countKeys(t, s, pfxExtent); n != size/mutableChunk {
		t.Fatalf("%d extents after a whole overwrite, want %d", n, size/mutableChunk)
	}
	if err := s.DeleteObject("vol", "o"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{pfxExtent, pfxChunkRef, pfxChunk} {
		if n := countKeys(t, s, p); n != 0 {
			t.Errorf("%d keys under %s after the delete", n, p)
		}
	}
}
