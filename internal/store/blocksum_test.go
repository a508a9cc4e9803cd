package store

import (
	"bytes"
	"context"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store/segment"
)

// chunkLocCases are the table of TestChunkLocationFormats and the seeds of FuzzChunkLocation.
var chunkLocCases = []struct {
	name string
	b    []byte
	ok   bool
	sums int // number of block checksums, -1 for format 1
}{
	{"format 1", encodeLoc(segment.Loc{Seg: 3, Off: 4096, Len: 65536}), true, -1},
	{"format 2, whole blocks", encodeChunkAt(segment.Loc{Seg: 3, Off: 4096, Len: 65536}, blockSums(make([]byte, 65536))), true, 16},
	{"format 2, a short last block", encodeChunkAt(segment.Loc{Seg: 1, Len: 5000}, blockSums(make([]byte, 5000))), true, 2},
	{"format 2, empty", encodeChunkAt(segment.Loc{Seg: 1}, []byte{}), true, 0},
	{"short", make([]byte, 15), false, 0},
	{"unknown block shift", append(encodeLoc(segment.Loc{Len: 4096}), 13, 0, 0, 0, 0), false, 0},
	{"a checksum missing", append(encodeLoc(segment.Loc{Len: 4097}), blockShift, 0, 0, 0, 0), false, 0},
	{"a checksum too many", append(encodeLoc(segment.Loc{Len: 4096}), blockShift, 0, 0, 0, 0, 1, 2, 3, 4), false, 0},
	{"a torn checksum", append(encodeLoc(segment.Loc{Len: 4096}), blockShift, 0, 0, 0), false, 0},
}

func TestChunkLocationFormats(t *testing.T) {
	for _, tc := range chunkLocCases {
		t.Run(tc.name, func(t *testing.T) {
			l, sums, err := decodeChunkAt(tc.b)
			if !tc.ok {
				if !errors.Is(errors.Corrupt, err) {
					t.Fatalf("decode gave %v, want Corrupt", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.sums < 0 && sums != nil || tc.sums >= 0 && len(sums) != 4*tc.sums {
				t.Fatalf("%d bytes of checksums, want %d checksums", len(sums), tc.sums)
			}
			if re := encodeChunkAt(l, sums); !bytes.Equal(re, tc.b) {
				t.Fatalf("re-encoded as %x, want %x", re, tc.b)
			}
		})
	}
}

// FuzzChunkLocation checks the chunk location decoder on arbitrary bytes: what it accepts
// encodes back to the same bytes, with one checksum per block of the payload.
func FuzzChunkLocation(f *testing.F) {
	for _, tc := range chunkLocCases {
		f.Add(tc.b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		l, sums, err := decodeChunkAt(b)
		if err != nil {
			return
		}
		if sums != nil && len(sums) != 4*blocks(int64(l.Len)) {
			t.Fatalf("%d bytes of checksums for a payload of %d bytes", len(sums), l.Len)
		}
		if re := encodeChunkAt(l, sums); !bytes.Equal(re, b) {
			t.Fatalf("re-encoded as %x, want %x", re, b)
		}
	})
}

// The CRC-32C of whole blocks folded from their block checksums is the CRC-32C of the
// bytes (a mutable chunk's record checksum is made that way).
func TestWholeSum(t *testing.T) {
	for _, n := range []int{1, 2, 3, 16, mutableChunk / blockSize} {
		for seed, data := range [][]byte{make([]byte, n*blockSize), randBytes(uint64(n), n*blockSize), bytes.Repeat([]byte{0xff}, n*blockSize)} {
			if got, want := wholeSum(blockSums(data)), crc32.Checksum(data, crcTable); got != want {
				t.Errorf("%d blocks, data %d: folded %08x, CRC-32C %08x", n, seed, got, want)
			}
		}
	}
}

// A mutable object's chunks have block checksums: a read checks the blocks it covers, so a
// flipped byte fails every read that covers it (a whole read, as deep scrub does, too) and
// none that does not. The checksums survive compaction; a chunk with a format-1 location
// (written before format 2) is still read, checked whole.
func TestBlockChecksums(t *testing.T) {
	cfg := testConfig(t)
	cfg.SegmentSize = 4 << 20 // the chunks and the garbage below in one segment
	s := openStore(t, cfg)
	ctx := context.Background()
	if err := s.CreateBucket("vol"); err != nil {
		t.Fatal(err)
	}
	const size = 1 << 20
	data := randBytes(3, 3*mutableChunk+100) // 4 chunks, the last of 100 bytes
	w := object.RangeWrite{Bucket: "vol", Key: "o", Size: size, Off: 8192, Data: data, Prev: 0, Next: 1}
	if _, err := s.WriteRange(ctx, w); err != nil {
		t.Fatal(err)
	}
	// Compaction moves the chunks: their checksums go with them.
	put(t, s, "vol", "garbage", randBytes(4, 4*mutableChunk))
	if err := s.DeleteObject("vol", "garbage"); err != nil {
		t.Fatal(err)
	}
	moved := false
	for {
		did, err := s.CompactOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !did {
			break
		}
		moved = true
	}
	if !moved {
		t.Fatal("nothing compacted")
	}
	r, err := s.OpenObject("vol", "o")
	if err != nil {
		t.Fatal(err)
	}
	vid := r.Object.VersionID
	r.Close()
	chunk := func(pos int64) (segment.ID, segment.Loc, []byte) { return chunkOfExtent(t, s, vid, pos) }
	for i := range 4 {
		if _, l, sums := chunk(8192 + int64(i)*mutableChunk); len(sums) != 4*blocks(int64(l.Len)) || l.Seg == 1 {
			t.Fatalf("chunk %d: at %+v with %d bytes of checksums", i, l, len(sums))
		}
	}

	// Flip a byte of block 5 of chunk 1: object bytes [8192+mutableChunk+20480, +4096).
	id, loc, _ := chunk(8192 + mutableChunk)
	flip := func() { flipPayloadBit(t, s, loc, 5*blockSize+7, 0x40) }
	flip()
	bad := int64(8192 + mutableChunk + 5*blockSize)
	model := make([]byte, size)
	copy(model[8192:], data)
	reads := []struct {
		name    string
		off, n  int64
		corrupt bool
	}{
		{"the flipped block", bad, 4096, true},
		{"one byte of it", bad + 7, 1, true},
		{"across its start", bad - 100, 200, true},
		{"across its end", bad + 4000, 200, true},
		{"the whole object (deep scrub)", 0, size, true},
		{"the block before", bad - 4096, 4096, false},
		{"the block after", bad + 4096, 4096, false},
		{"the same chunk, elsewhere", 8192 + mutableChunk, 5 * 4096, false},
		{"another chunk", 8192, 4096, false},
		{"the short last chunk", 8192 + 3*mutableChunk, 100, false},
		{"a hole and a chunk", 0, 8192 + 10, false},
	}
	check := func(t *testing.T, off, n int64, corrupt bool) {
		r, err := s.OpenObject("vol", "o")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var buf bytes.Buffer
		_, err = r.WriteRange(ctx, &buf, off, n)
		switch {
		case corrupt && !errors.Is(errors.Corrupt, err):
			t.Fatalf("read gave %v, want Corrupt", err)
		case corrupt && !bytes.Equal(buf.Bytes(), model[off:off+int64(buf.Len())]):
			t.Fatal("bytes of the corrupt block served")
		case corrupt && buf.Len() > 0 && off+int64(buf.Len()) > bad:
			t.Fatalf("%d bytes served, into the corrupt block", buf.Len())
		case !corrupt && err != nil:
			t.Fatal(err)
		case !corrupt && !bytes.Equal(buf.Bytes(), model[off:off+n]):
			t.Fatal("read differs")
		}
	}
	for _, tc := range reads {
		t.Run(tc.name, func(t *testing.T) { check(t, tc.off, tc.n, tc.corrupt) })
	}

	// The same chunk with a format-1 location is checked whole: every read of it fails.
	if err := s.db.Set(chunkKey(id), encodeLoc(loc), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // a new process: nothing cached
		t.Fatal(err)
	}
	s = openStore(t, cfg)
	t.Run("format 1, elsewhere in the chunk", func(t *testing.T) { check(t, 8192+mutableChunk, 4096, true) })
	t.Run("format 1, another chunk", func(t *testing.T) { check(t, 8192, 4096, false) })
	flip() // repaired
	t.Run("format 1, repaired", func(t *testing.T) { check(t, 8192+mutableChunk, 2*mutableChunk, false) })
}

// cachedEntry returns the extent cache's entry for vid, whatever its order (nil if none).
func cachedEntry(s *Store, vid [16]byte) *extentEntry {
	s.extents.mu.Lock()
	defer s.extents.mu.Unlock()
	if sl := s.extents.slots[vid]; sl != nil {
		return sl.entry
	}
	return nil
}

// Every path that changes a mutable object's extents or its chunks' locations drops the
// extent cache's entry of the object, and reads then see the change; a reader holding an
// older snapshot reads the old bytes and does not put them back in the cache.
func TestExtentCacheInvalidation(t *testing.T) {
	const size = 1 << 20
	ctx := context.Background()
	type env struct {
		s     *Store
		model []byte
		order uint64
		vid   [16]byte
	}
	write := func(t *testing.T, e *env, w object.RangeWrite) {
		t.Helper()
		w.Bucket, w.Key, w.Size, w.Prev, w.Next = "vol", "o", size, e.order, e.order+1
		o, err := e.s.WriteRange(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		if w.Data != nil {
			copy(e.model[w.Off:], w.Data)
		} else {
			clear(e.model[w.Off : w.Off+w.Len])
		}
		e.order = o.HLC
	}
	cases := []struct {
		name    string
		journal bool
		op      func(t *testing.T, e *env)
		gone    bool // the object no longer exists
	}{
		{"a chunked write", false, func(t *testing.T, e *env) {
			write(t, e, object.RangeWrite{Off: 50 << 10, Data: randBytes(11, 100<<10)})
		}, false},
		{"an inline write", false, func(t *testing.T, e *env) {
			write(t, e, object.RangeWrite{Off: 70 << 10, Data: randBytes(12, 4096)})
		}, false},
		{"a trim", false, func(t *testing.T, e *env) { write(t, e, object.RangeWrite{Off: 60 << 10, Len: 8192}) }, false},
		{"a journaled write", true, func(t *testing.T, e *env) {
			write(t, e, object.RangeWrite{Off: 10 << 10, Data: randBytes(13, 200<<10), Unsynced: true})
			if _, err := e.s.StatObject("vol", "o"); err != nil { // applies the journaled write
				t.Fatal(err)
			}
		}, false},
		{"a whole copy (recovery, resync)", false, func(t *testing.T, e *env) {
			e.model = randBytes(14, size)
			e.order++
			if _, err := e.s.PutObject(ctx, "vol", "o", &object.Object{Mutable: true}, bytes.NewReader(e.model), size,
				object.PutOptions{Version: e.order, Repair: true}); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"a delete", false, func(t *testing.T, e *env) {
			if err := e.s.DeleteObject("vol", "o"); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"a compaction", false, func(t *testing.T, e *env) {
			put(t, e.s, "vol", "garbage", randBytes(15, 300<<10))
			if err := e.s.DeleteObject("vol", "garbage"); err != nil {
				t.Fatal(err)
			}
			for {
				did, err := e.s.CompactOnce(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if !did {
					break
				}
			}
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			if tc.journal {
				cfg.JournalSize = 8 << 20
			}
			e := &env{s: openStore(t, cfg), model: make([]byte, size)}
			if err := e.s.CreateBucket("vol"); err != nil {
				t.Fatal(err)
			}
			write(t, e, object.RangeWrite{Off: 0, Data: randBytes(10, 256<<10)})
			write(t, e, object.RangeWrite{Off: 300 << 10, Data: randBytes(16, 2048)})
			old, err := e.s.OpenObject("vol", "o") // a reader of the version before the op
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			oldModel := bytes.Clone(e.model)
			e.vid = old.Object.VersionID
			if !bytes.Equal(readAll(t, e.s, "vol", "o"), e.model) {
				t.Fatal("first read differs")
			}
			if c := cachedEntry(e.s, e.vid); c == nil || !c.ok || c.order != e.order {
				t.Fatalf("nothing cached after a read: %+v", c)
			}
			compaction := tc.name == "a compaction"
			if compaction { // it waits for the readers of the segments it moves from
				old.Close()
			}
			tc.op(t, e)
			if c := cachedEntry(e.s, e.vid); c != nil {
				t.Fatalf("the entry of order %d is still cached after the change", c.order)
			}
			r, err := e.s.OpenObject("vol", "o")
			if tc.gone {
				if !errors.Is(errors.NotExist, err) {
					t.Fatalf("open after a delete: %v", err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				for _, rg := range [][2]int64{{0, size}, {0, size}, {64 << 10, 4096}, {300 << 10, 4096}} { // twice: filled, then from the cache
					var buf bytes.Buffer
					if _, err := r.WriteRange(ctx, &buf, rg[0], rg[1]); err != nil || !bytes.Equal(buf.Bytes(), e.model[rg[0]:rg[0]+rg[1]]) {
						t.Fatalf("read [%d, +%d) after the change differs (%v)", rg[0], rg[1], err)
					}
				}
				r.Close()
			}
			if compaction {
				return
			}
			// The old reader sees the old version, and caches nothing of it.
			var buf bytes.Buffer
			if _, err := old.WriteRange(ctx, &buf, 0, size); err != nil || !bytes.Equal(buf.Bytes(), oldModel) {
				t.Fatalf("the old reader read %d bytes (%v), not the old version", buf.Len(), err)
			}
			if c := cachedEntry(e.s, e.vid); c != nil && c.order != e.order {
				t.Fatalf("the old reader put order %d back in the cache (the object is at %d)", c.order, e.order)
			}
		})
	}
}

// The extent cache keeps within its bounds, and a reader that began before a removal
// (of its object, or of an evicted slot) stores nothing.
func TestExtentCacheBounds(t *testing.T) {
	c := newExtentCache(4)
	vid := func(i int) [16]byte { return [16]byte{byte(i)} }
	big := &extentEntry{ok: true, cost: extentCacheBytes / 3}
	for i := range 10 {
		c.put(vid(i), c.begin(), big)
		if len(c.slots) > 4 || c.bytes > extentCacheBytes {
			t.Fatalf("after %d entries: %d slots, %d bytes", i+1, len(c.slots), c.bytes)
		}
	}
	if n := c.bytes / big.cost; n != 3 {
		t.Fatalf("%d entries held, want 3", n)
	}
	before := c.begin()
	c.remove([][16]byte{vid(20)})
	c.put(vid(20), before, big)
	if c.get(vid(20), 0) != nil {
		t.Fatal("an entry read before its removal was stored")
	}
	c.put(vid(21), before, big)
	if c.get(vid(21), 0) == nil {
		t.Fatal("another object's removal kept an entry out")
	}
	for i := 30; c.slots[vid(20)] != nil; i++ { // until vid(20)'s slot is evicted (at random)
		if i == 10000 {
			t.Fatal("slot never evicted")
		}
		c.remove([][16]byte{{byte(i), byte(i >> 8), 1}})
	}
	c.put(vid(20), before, big)
	if c.get(vid(20), 0) != nil {
		t.Fatal("an entry read before its evicted removal was stored")
	}
	c.removeAll()
	if len(c.slots) != 0 || c.bytes != 0 {
		t.Fatalf("after removeAll: %d slots, %d bytes", len(c.slots), c.bytes)
	}
	c.put(vid(21), before, big)
	if c.get(vid(21), 0) != nil {
		t.Fatal("an entry read before removeAll was stored")
	}
}

// A chunked object that small writes cut into many pieces, too many inline bytes for the
// extent cache, reads back as the model says in whole and in part (a read looks each
// chunk's location up once for all its pieces); a flipped byte in a block of a chunk
// whose earlier pieces the same read already served still fails the read at that block.
func TestFragmentedChunkReads(t *testing.T) {
	s := openStore(t, testConfig(t)) // InlineMax 1 KiB
	const size = 4 * mutableChunk
	m := newModelObject(t, s, size)
	model, read := m.model, m.read
	m.write(t, 0, randBytes(1, 4*mutableChunk))
	const gap = 12 << 10 // 80 KiB inline over 960 KiB, in 1 KiB pieces 12 KiB apart
	for i := range 80 {
		m.write(t, int64(i)*gap, randBytes(uint64(100+i), 1<<10))
	}
	open := func() *Reader {
		t.Helper()
		r, err := s.OpenObject("vol", "o")
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if got, err := read(0, size); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("whole read: %v, equal %v", err, bytes.Equal(got, model))
	}
	r := open()
	if e := cachedEntry(s, r.Object.VersionID); e != nil && e.ok {
		t.Fatal("the fragmented object is in the extent cache: the test reads nothing from the index")
	}
	vid := r.Object.VersionID
	r.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		off := rng.Int64N(size)
		n := 1 + rng.Int64N(size-off)
		if got, err := read(off, n); err != nil || !bytes.Equal(got, model[off:off+n]) {
			t.Fatalf("read [%d, +%d): %v", off, n, err)
		}
	}

	// Flip a byte in block 9 of chunk 2 (object bytes [548 KiB, 552 KiB), inside the piece
	// [541 KiB, 552 KiB) between two inline writes), which comes after several other
	// pieces of that chunk.
	at := int64(2*mutableChunk + 9*blockSize)
	if (at+3000)%gap < 1<<10 || (at+2048)%gap < 1<<10 {
		t.Fatal("the flipped byte or the piece looked up is under an inline write: change gap")
	}
	piece := (at+2048)/gap*gap + 1<<10 // where the piece starts: its extent's key
	_, loc, _ := chunkOfExtent(t, s, vid, piece)
	flipPayloadBit(t, s, loc, 9*blockSize+3000, 1)
	got, err := read(0, size)
	if !errors.Is(errors.Corrupt, err) {
		t.Fatalf("whole read over the flipped block: %v, want Corrupt", err)
	}
	if int64(len(got)) > at || !bytes.Equal(got, model[:len(got)]) {
		t.Fatalf("%d bytes served (the bad block starts at %d), equal %v", len(got), at, bytes.Equal(got, model[:len(got)]))
	}
	if got, err := read(2*mutableChunk, 9*blockSize); err != nil || !bytes.Equal(got, model[2*mutableChunk:at]) {
		t.Fatalf("the chunk's blocks before the flipped one: %v", err)
	}
}

// modelObject is the mutable object vol/o of a test, written through the store, and the
// bytes it must hold.
type modelObject struct {
	s     *Store
	size  int64
	model []byte
	order uint64
}

// newModelObject creates bucket vol for a mutable object of size bytes, not yet written.
func newModelObject(t *testing.T, s *Store, size int64) *modelObject {
	t.Helper()
	if err := s.CreateBucket("vol"); err != nil {
		t.Fatal(err)
	}
	return &modelObject{s: s, size: size, model: make([]byte, size)}
}

// write writes data at off, at the next order, and into the model.
func (m *modelObject) write(t *testing.T, off int64, data []byte) {
	t.Helper()
	o, err := m.s.WriteRange(context.Background(), object.RangeWrite{Bucket: "vol", Key: "o", Size: m.size, Off: off, Data: data, Prev: m.order, Next: m.order + 1})
	if err != nil {
		t.Fatalf("write [%d, +%d): %v", off, len(data), err)
	}
	m.order = o.HLC
	copy(m.model[off:], data)
}

// read reads n bytes from off through a new reader of the object's current version: what
// it served, and its error.
func (m *modelObject) read(off, n int64) ([]byte, error) {
	r, err := m.s.OpenObject("vol", "o")
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var buf bytes.Buffer
	_, err = r.WriteRange(context.Background(), &buf, off, n)
	return buf.Bytes(), err
}

// chunkOfExtent returns the chunk the extent of object vid at pos references, with its
// location and block checksums.
func chunkOfExtent(t *testing.T, s *Store, vid [16]byte, pos int64) (segment.ID, segment.Loc, []byte) {
	t.Helper()
	v, c, err := s.db.Get(extentKey(vid, pos))
	if err != nil {
		t.Fatal(err)
	}
	e, err := decodeExtent(extentKey(vid, pos), v)
	c.Close()
	if err != nil || !e.inChunk {
		t.Fatalf("extent at %d: %+v, %v", pos, e, err)
	}
	l, sums, err := s.chunkAt(s.db, e.chunk, nil)
	if err != nil {
		t.Fatal(err)
	}
	return e.chunk, l, sums
}

// flipPayloadBit flips the bits mask of the byte at off in the payload of the chunk
// record at loc, on disk.
func flipPayloadBit(t *testing.T, s *Store, loc segment.Loc, off int64, mask byte) {
	t.Helper()
	f, err := os.OpenFile(s.segs.Path(loc.Seg), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	at := loc.Off + segment.HeaderSize + off
	if _, err := f.ReadAt(b[:], at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= mask
	if _, err := f.WriteAt(b[:], at); err != nil {
		t.Fatal(err)
	}
}
