package erasure

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"slices"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
)

// reseal rewrites b's header checksum, so that a test reaches the checks behind it.
func reseal(b []byte) []byte {
	binary.LittleEndian.PutUint32(b[32:], crc32.Checksum(b[:32], castagnoli))
	return b
}

// badShards are damaged variants of a valid 4+2 shard and the reason ParseShard gives.
func badShards(tb testing.TB) []struct {
	name, why string
	b         []byte
} {
	good := encode(tb, newCode(tb, 4, 2), chunk(1, 1000))[1]
	edit := func(f func(b []byte) []byte) []byte { return f(slices.Clone(good)) }
	return []struct {
		name, why string
		b         []byte
	}{
		{"nil", "shorter than a header", nil},
		{"35 bytes", "shorter than a header", good[:HeaderSize-1]},
		{"bad magic", "bad magic", edit(func(b []byte) []byte { b[0] ^= 1; return b })},
		{"header bit flip", "header checksum mismatch", edit(func(b []byte) []byte { b[13] ^= 4; return b })},
		{"header checksum flip", "header checksum mismatch", edit(func(b []byte) []byte { b[35] ^= 0x80; return b })},
		{"version 2", "unknown format version", edit(func(b []byte) []byte { b[4] = 2; return reseal(b) })},
		{"algorithm 2", "unknown coding algorithm", edit(func(b []byte) []byte { b[5] = 2; return reseal(b) })},
		{"reserved", "reserved header bytes", edit(func(b []byte) []byte { b[10] = 1; return reseal(b) })},
		{"k=0", "unsupported code", edit(func(b []byte) []byte { b[6] = 0; return reseal(b) })},
		{"m=0", "unsupported code", edit(func(b []byte) []byte { b[7] = 0; return reseal(b) })},
		{"k=33", "unsupported code", edit(func(b []byte) []byte { b[6] = 33; return reseal(b) })},
		{"m=17", "unsupported code", edit(func(b []byte) []byte { b[7] = 17; return reseal(b) })},
		{"index 6", "index out of range", edit(func(b []byte) []byte { b[8] = 6; return reseal(b) })},
		{"huge chunk", "chunk length too large", edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[12:], MaxChunkSize+1)
			return reseal(b)
		})},
		{"payload length", "payload length does not match", edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[16:], 249)
			return reseal(b)
		})},
		{"chunk length", "payload length does not match", edit(func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[12:], 1001)
			return reseal(b)
		})},
		{"truncated", "truncated payload", good[:len(good)-1]},
		{"header only", "truncated payload", good[:HeaderSize]},
		{"trailing byte", "bytes after the payload", append(slices.Clone(good), 0)},
		{"payload bit flip", "payload checksum mismatch", edit(func(b []byte) []byte { b[HeaderSize+100] ^= 1; return b })},
		{"payload crc", "payload checksum mismatch", edit(func(b []byte) []byte { b[20] ^= 1; return reseal(b) })},
	}
}

func TestParseShardErrors(t *testing.T) {
	for _, tc := range badShards(t) {
		t.Run(tc.name, func(t *testing.T) {
			h, p, err := ParseShard(tc.b)
			if err == nil || !errors.IsErr(err, ErrCorruptShard) || !errors.Is(errors.Corrupt, err) ||
				!strings.Contains(err.Error(), tc.why) || h != (Header{}) || p != nil {
				t.Fatalf("ParseShard = %+v, %d bytes, %v; want a Corrupt error with %q", h, len(p), err, tc.why)
			}
			if !strings.HasPrefix(err.Error(), "erasure.ParseShard: corrupt shard (") {
				t.Errorf("error %q", err)
			}
			// ParseHeader fails for the same reason, unless the damage is past the header.
			_, herr := ParseHeader(tc.b)
			if header := len(tc.b) < HeaderSize || !strings.Contains(tc.why, "payload") || strings.Contains(tc.why, "length"); header {
				if herr == nil || !strings.Contains(herr.Error(), tc.why) || !errors.IsErr(herr, ErrCorruptShard) {
					t.Errorf("ParseHeader = %v, want %q", herr, tc.why)
				}
			} else if herr != nil {
				t.Errorf("ParseHeader = %v, want no error", herr)
			}
		})
	}
}

func TestParseHeader(t *testing.T) {
	shards := encode(t, newCode(t, 8, 3), chunk(2, 3000))
	for i, b := range shards {
		full, _, err := ParseShard(b)
		if err != nil {
			t.Fatal(err)
		}
		h, err := ParseHeader(b[:HeaderSize])
		if err != nil || h != full || h.Index != i {
			t.Fatalf("ParseHeader(shard %d) = %+v, %v; want %+v", i, h, err, full)
		}
	}
}

// FuzzParseShard checks that ParseShard never panics and that what it accepts is
// consistent: its payload, its checksum, and a header that encodes back to the same bytes.
func FuzzParseShard(f *testing.F) {
	for _, km := range testCodes {
		c := newCode(f, km[0], km[1])
		for _, n := range []int{0, 1, c.K() + 1, 100} {
			for _, b := range encode(f, c, chunk(uint64(n), n)) {
				f.Add(b)
			}
		}
	}
	for _, tc := range badShards(f) {
		f.Add(tc.b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, p, err := ParseShard(b)
		hh, herr := ParseHeader(b)
		if err != nil {
			if !errors.IsErr(err, ErrCorruptShard) || !errors.Is(errors.Corrupt, err) {
				t.Fatalf("error %v is not a corrupt shard", err)
			}
			if herr == nil && hh.Index >= hh.K+hh.M {
				t.Fatalf("ParseHeader accepted %+v", hh)
			}
			return
		}
		if herr != nil || hh != h {
			t.Fatalf("ParseHeader = %+v, %v; ParseShard = %+v", hh, herr, h)
		}
		if h.K < 1 || h.K > MaxDataShards || h.M < 1 || h.M > MaxParityShards || h.Index >= h.K+h.M ||
			h.ChunkLen > MaxChunkSize || len(b) != HeaderSize+h.ShardSize() || h.ShardSize()*h.K < h.ChunkLen {
			t.Fatalf("accepted an impossible header %+v for %d bytes", h, len(b))
		}
		if !bytes.Equal(p, b[HeaderSize:]) || crc32.Checksum(p, castagnoli) != h.CRC {
			t.Fatal("payload is not the checked rest of the shard")
		}
		var again [HeaderSize]byte
		putHeader(again[:], &h)
		if !bytes.Equal(again[:], b[:HeaderSize]) {
			t.Fatalf("header does not encode back:\n got %x\nwant %x", again, b[:HeaderSize])
		}
	})
}

// edit applies fuzzer-chosen edits to a stripe's shards, in groups of five bytes:
// shard, kind, two bytes of position and a value. The kinds flip bits, drop the shard,
// truncate it, put a copy of another shard in its place, or append a byte.
func edit(shards [][]byte, edits []byte) {
	for ; len(edits) >= 5; edits = edits[5:] {
		i := int(edits[0]) % len(shards)
		pos, val := int(edits[2])<<8|int(edits[3]), edits[4]
		b := slices.Clone(shards[i])
		switch edits[1] % 5 {
		case 0:
			if len(b) > 0 {
				b[pos%len(b)] ^= val
			}
		case 1:
			b = nil
		case 2:
			if len(b) > 0 {
				b = b[:pos%len(b)]
			}
		case 3:
			b = slices.Clone(shards[int(val)%len(shards)])
		case 4:
			b = append(b, val)
		}
		shards[i] = b
	}
}

// FuzzDecodeChunk damages a stripe's shards as the fuzzer likes: Decode and Reconstruct
// must give back the exact chunk and shards or fail, and must succeed while k shards are
// untouched.
func FuzzDecodeChunk(f *testing.F) {
	for ci := range testCodes {
		for _, n := range []int{0, 1, 5, 100, 4099} {
			f.Add(chunk(uint64(n), n), uint8(ci), []byte{})
			f.Add(chunk(uint64(n), n), uint8(ci), []byte{0, 0, 0, 40, 0xFF})
			f.Add(chunk(uint64(n), n), uint8(ci), []byte{1, 1, 0, 0, 0, 2, 0, 0, 7, 1})
			f.Add(chunk(uint64(n), n), uint8(ci), []byte{0, 3, 0, 0, 1, 2, 2, 0, 30, 0})
			f.Add(chunk(uint64(n), n), uint8(ci), []byte{0, 4, 0, 0, 0, 1, 0, 0, 3, 0x10, 2, 1, 0, 0, 0})
		}
	}
	codes := make([]*Code, len(testCodes))
	for i, km := range testCodes {
		codes[i] = newCode(f, km[0], km[1])
	}
	f.Fuzz(func(t *testing.T, data []byte, ci uint8, edits []byte) {
		if len(data) > 64<<10 {
			data = data[:64<<10]
		}
		c := codes[int(ci)%len(codes)]
		orig := encode(t, c, data)
		shards := slices.Clone(orig)
		edit(shards, edits)
		untouched := 0
		for i := range shards {
			if bytes.Equal(shards[i], orig[i]) && shards[i] != nil {
				untouched++
			}
		}
		got, err := c.DecodeChunk(shards)
		if err == nil && !bytes.Equal(got, data) {
			t.Fatalf("DecodeChunk returned %d wrong bytes", len(got))
		}
		if err != nil && untouched >= c.K() {
			t.Fatalf("DecodeChunk with %d untouched shards: %v", untouched, err)
		}
		rebuilt, err := c.Reconstruct(shards, nil)
		if err != nil {
			if untouched >= c.K() {
				t.Fatalf("Reconstruct with %d untouched shards: %v", untouched, err)
			}
			return
		}
		for i := range shards {
			if !bytes.Equal(shards[i], orig[i]) {
				t.Fatalf("shard %d differs from the original after Reconstruct (rebuilt %v)", i, rebuilt)
			}
		}
	})
}
