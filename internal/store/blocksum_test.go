package store

import (
	"bytes"
	"context"
	"os"
	"testing"

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

// A mutable object's chunks have block checksums: a read checks the blocks it covers, so a
// flipped byte fails every read that covers it (a whole read, as deep scrub does, too) and
// none that does not. The checksums survive compaction; a chunk with a format-1 location
// (written before format 2) is still read, checked whole.
func TestBlockChecksums(t *testing.T) {
	s := openStore(t, testConfig(t))
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
	put(t, s, "vol", "garbage", randBytes(4, 200<<10))
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
	chunk := func(pos int64) (segment.ID, segment.Loc, []byte) {
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
	for i := range 4 {
		if _, l, sums := chunk(8192 + int64(i)*mutableChunk); len(sums) != 4*blocks(int64(l.Len)) || l.Seg == 1 {
			t.Fatalf("chunk %d: at %+v with %d bytes of checksums", i, l, len(sums))
		}
	}

	// Flip a byte of block 5 of chunk 1: object bytes [8192+64 KiB+20480, +4096).
	id, loc, _ := chunk(8192 + mutableChunk)
	flip := func() {
		t.Helper()
		f, err := os.OpenFile(s.segs.Path(loc.Seg), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var b [1]byte
		at := loc.Off + segment.HeaderSize + 5*blockSize + 7
		if _, err := f.ReadAt(b[:], at); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0x40
		if _, err := f.WriteAt(b[:], at); err != nil {
			t.Fatal(err)
		}
	}
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
	if err := s.db.Set(chunkKey(id), encodeLoc(loc), nil); err != nil {
		t.Fatal(err)
	}
	t.Run("format 1, elsewhere in the chunk", func(t *testing.T) { check(t, 8192+mutableChunk, 4096, true) })
	t.Run("format 1, another chunk", func(t *testing.T) { check(t, 8192, 4096, false) })
	flip() // repaired
	t.Run("format 1, repaired", func(t *testing.T) { check(t, 8192+mutableChunk, 2*mutableChunk, false) })
}
