package erasure

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
)

// testCodes are the codes every codec test runs against.
var testCodes = [][2]int{{1, 1}, {2, 1}, {4, 2}, {8, 3}}

func newCode(tb testing.TB, k, m int) *Code {
	tb.Helper()
	c, err := New(k, m)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// chunk returns n pseudo-random bytes, the same for the same seed.
func chunk(seed uint64, n int) []byte {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

func encode(tb testing.TB, c *Code, data []byte) [][]byte {
	tb.Helper()
	shards, err := c.EncodeChunk(data)
	if err != nil {
		tb.Fatal(err)
	}
	return shards
}

func cloneShards(shards [][]byte) [][]byte {
	out := make([][]byte, len(shards))
	for i, b := range shards {
		out[i] = slices.Clone(b)
	}
	return out
}

// combinations calls fn with every r-element subset of 0..n-1, in increasing order.
func combinations(n, r int, fn func([]int)) {
	idx := make([]int, r)
	var rec func(pos, start int)
	rec = func(pos, start int) {
		if pos == r {
			fn(idx)
			return
		}
		for i := start; i <= n-(r-pos); i++ {
			idx[pos] = i
			rec(pos+1, i+1)
		}
	}
	rec(0, 0)
}

// damage flips one random byte of b, in its header or (if it has one) its payload.
func damage(r *rand.Rand, b []byte) {
	var i int
	if len(b) == HeaderSize || r.IntN(2) == 0 {
		i = r.IntN(HeaderSize)
	} else {
		i = HeaderSize + r.IntN(len(b)-HeaderSize)
	}
	b[i] ^= byte(1 + r.IntN(255))
}

// sizes returns chunk lengths around every boundary of code c.
func sizes(c *Code) []int {
	k := c.K()
	out := []int{0, 1, 2, k - 1, k, k + 1, 2*k - 1, 2 * k, 2*k + 1, 4096, 4097}
	s := c.ShardSize(100_000) // a shard size, and lengths around multiples of it
	out = append(out, s*k-1, s*k, s*k+1, (s-1)*k-1, (s-1)*k+1, (s+1)*k-1)
	out = append(out, 1<<20-1, 1<<20, 1<<20+1, 3<<20+5)
	slices.Sort(out)
	return slices.Compact(slices.DeleteFunc(out, func(n int) bool { return n < 0 }))
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		k, m int
		err  string // "" for a valid code
	}{
		{1, 1, ""},
		{1, 0, ""}, // a single checksummed copy
		{4, 2, ""},
		{8, 3, ""},
		{1, 16, ""},
		{32, 16, ""},
		{0, 2, "at least one data shard (k=0)"},
		{-1, 2, "at least one data shard (k=-1)"},
		{4, 0, "at least one parity shard (m=0)"},
		{4, -3, "at least one parity shard (m=-3)"},
		{33, 2, "too many data shards (k=33, at most 32)"},
		{4, 17, "too many parity shards (m=17, at most 16)"},
		{200, 100, "too many data shards"},
	} {
		t.Run(fmt.Sprintf("%d+%d", tc.k, tc.m), func(t *testing.T) {
			c, err := New(tc.k, tc.m)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.K() != tc.k || c.M() != tc.m || c.Shards() != tc.k+tc.m {
					t.Errorf("K, M, Shards = %d, %d, %d", c.K(), c.M(), c.Shards())
				}
				if got, want := c.String(), fmt.Sprintf("%d+%d", tc.k, tc.m); got != want {
					t.Errorf("String() = %q, want %q", got, want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(errors.Invalid, err) {
				t.Fatalf("New(%d, %d) = %v, want an Invalid error containing %q", tc.k, tc.m, err, tc.err)
			}
		})
	}
}

func TestParseSpec(t *testing.T) {
	for _, tc := range []struct {
		in   string
		k, m int
		err  string
	}{
		{"4+2", 4, 2, ""},
		{"8+3", 8, 3, ""},
		{" 1+1\n", 1, 1, ""},
		{"32+16", 32, 16, ""},
		{"", 0, 0, "want data+parity"},
		{"4", 0, 0, "want data+parity"},
		{"4+", 0, 0, "want data+parity"},
		{"+2", 0, 0, "want data+parity"},
		{"4+2+1", 0, 0, "want data+parity"},
		{"4 + 2", 0, 0, "want data+parity"},
		{"+4+2", 0, 0, "want data+parity"},
		{"-4+2", 0, 0, "want data+parity"},
		{"4x2", 0, 0, "want data+parity"},
		{"a+b", 0, 0, "want data+parity"},
		{"4.0+2", 0, 0, "want data+parity"},
		{"1000+2", 0, 0, "want data+parity"},
		{"0+2", 0, 0, "at least one data shard (k=0)"},
		{"4+0", 0, 0, "at least one parity shard (m=0)"},
		{"64+2", 0, 0, "too many data shards"},
		{"4+20", 0, 0, "too many parity shards"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			k, m, err := ParseSpec(tc.in)
			if tc.err == "" {
				if err != nil || k != tc.k || m != tc.m {
					t.Fatalf("ParseSpec(%q) = %d, %d, %v, want %d, %d", tc.in, k, m, err, tc.k, tc.m)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(errors.Invalid, err) {
				t.Fatalf("ParseSpec(%q) = %d, %d, %v, want an Invalid error containing %q", tc.in, k, m, err, tc.err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.in)) {
				t.Errorf("error %q does not quote the input", err)
			}
		})
	}
}

func TestSizes(t *testing.T) {
	c := newCode(t, 4, 2)
	for _, tc := range []struct{ n, shard, stripe int }{
		{0, 0, 0}, {1, 1, 4}, {4, 1, 4}, {5, 2, 8}, {1 << 20, 1 << 18, 1 << 20}, {1<<20 + 1, 1<<18 + 1, 1<<20 + 4},
	} {
		if got := c.ShardSize(tc.n); got != tc.shard {
			t.Errorf("ShardSize(%d) = %d, want %d", tc.n, got, tc.shard)
		}
		if got := c.StripeSize(tc.n); got != tc.stripe {
			t.Errorf("StripeSize(%d) = %d, want %d", tc.n, got, tc.stripe)
		}
	}
}

// TestRoundTrip encodes chunks of every boundary length and checks the shards' headers,
// payloads and padding, and that they decode to the chunk.
func TestRoundTrip(t *testing.T) {
	for _, km := range testCodes {
		c := newCode(t, km[0], km[1])
		for _, n := range sizes(c) {
			t.Run(fmt.Sprintf("%v/%d", c, n), func(t *testing.T) {
				data := chunk(uint64(n), n)
				shards := encode(t, c, data)
				if len(shards) != c.Shards() {
					t.Fatalf("%d shards, want %d", len(shards), c.Shards())
				}
				size := c.ShardSize(n)
				var joined []byte
				var st Stripe
				for i, b := range shards {
					if len(b) != HeaderSize+size {
						t.Fatalf("shard %d: %d bytes, want %d", i, len(b), HeaderSize+size)
					}
					h, p, err := ParseShard(b)
					if err != nil {
						t.Fatalf("shard %d: %v", i, err)
					}
					if i == 0 {
						st = h.Stripe
					}
					if h.K != c.K() || h.M != c.M() || h.Index != i || h.ChunkLen != n || h.Stripe != st ||
						h.ShardSize() != size || h.CRC != crc32.Checksum(p, castagnoli) {
						t.Fatalf("shard %d: header %+v", i, h)
					}
					if i < c.K() {
						joined = append(joined, p...)
					}
				}
				if !bytes.Equal(joined[:n], data) || bytes.ContainsFunc(joined[n:], func(r rune) bool { return r != 0 }) {
					t.Fatal("data shards do not hold the chunk followed by zeros")
				}
				got, err := c.DecodeChunk(shards)
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("DecodeChunk = %d bytes, %v; want the chunk", len(got), err)
				}
			})
		}
	}
}

// TestReuse checks that Encode and Decode reuse the caller's buffers, whatever they held,
// and produce the same bytes.
func TestReuse(t *testing.T) {
	for _, km := range testCodes {
		c := newCode(t, km[0], km[1])
		t.Run(c.String(), func(t *testing.T) {
			const max = 70_000
			dst := make([][]byte, c.Shards())
			for i := range dst {
				dst[i] = bytes.Repeat([]byte{0xA5}, HeaderSize+c.ShardSize(max)+i)
			}
			out := bytes.Repeat([]byte{0x5A}, c.StripeSize(max))
			for _, n := range []int{max, 1, 0, 12_345, max - 1} {
				data := chunk(uint64(n), n)
				shards, err := c.Encode(dst, data)
				if err != nil {
					t.Fatal(err)
				}
				for i := range shards {
					if &shards[i][0] != &dst[i][0] {
						t.Fatalf("n=%d: shard %d not written to dst", n, i)
					}
				}
				if want := encode(t, c, data); !slices.EqualFunc(shards, want, bytes.Equal) {
					t.Fatalf("n=%d: shards in reused buffers differ from fresh ones", n)
				}
				got, err := c.Decode(out, shards)
				if err != nil || !bytes.Equal(got, data) || n > 0 && &got[0] != &out[0] {
					t.Fatalf("n=%d: Decode into dst = %v, equal %v", n, err, bytes.Equal(got, data))
				}
				degraded := slices.Clone(shards)
				degraded[0] = nil
				got, err = c.Decode(out, degraded)
				if err != nil || !bytes.Equal(got, data) || n > 0 && &got[0] != &out[0] {
					t.Fatalf("n=%d: degraded Decode into dst = %v, equal %v", n, err, bytes.Equal(got, data))
				}
			}
		})
	}
}

// TestAllocs bounds the allocations of the hot paths when the caller supplies buffers.
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items at random")
	}
	c := newCode(t, 4, 2)
	// Small enough that the Reed-Solomon library runs on one goroutine: above some 64 KiB
	// per shard it splits the work, at a few allocations per call.
	data := chunk(1, 32<<10)
	shards := encode(t, c, data)
	out := make([]byte, c.StripeSize(len(data)))
	degraded := slices.Clone(shards)
	degraded[1], degraded[2] = nil, nil
	for _, tc := range []struct {
		name string
		max  float64
		fn   func()
	}{
		{"Encode", 1, func() { c.Encode(shards, data) }}, // the library boxes a pooled slice
		{"Decode", 0, func() { c.Decode(out, shards) }},
		{"DecodeDegraded", 4, func() { c.Decode(out, degraded) }}, // the library's working slices
	} {
		got := testing.AllocsPerRun(20, tc.fn)
		t.Logf("%s: %v allocations per run", tc.name, got)
		if got > tc.max {
			t.Errorf("%s: %v allocations per run, want at most %v", tc.name, got, tc.max)
		}
	}
}

// TestLostAndCorrupt loses and damages every combination of up to m shards, in every
// mix of the two, and checks that the chunk decodes and the shards are rebuilt
// byte-identical; then every combination of m+1, which must fail with ErrTooFewShards.
func TestLostAndCorrupt(t *testing.T) {
	for _, km := range testCodes {
		c := newCode(t, km[0], km[1])
		for _, n := range []int{1, c.K() + 1, 4099} {
			t.Run(fmt.Sprintf("%v/%d", c, n), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(n), uint64(c.K())))
				data := chunk(uint64(n), n)
				orig := encode(t, c, data)
				buf := make([]byte, 0, c.StripeSize(n))
				for bad := 0; bad <= c.M()+1; bad++ {
					combinations(c.Shards(), bad, func(idx []int) {
						for mix := 0; mix < 1<<bad; mix++ { // bit j set: idx[j] is corrupt, else lost
							shards := cloneShards(orig)
							for j, i := range idx {
								if mix>>j&1 == 1 {
									damage(r, shards[i])
								} else {
									shards[i] = nil
								}
							}
							what := func() string { return fmt.Sprintf("shards %v (corrupt mask %b)", idx, mix) }
							checkDecode(t, c, shards, data, buf, bad <= c.M(), what)
							checkReconstruct(t, c, shards, orig, idx, bad <= c.M(), what)
						}
					})
				}
			})
		}
	}
}

// checkDecode decodes shards (with and without a buffer) and checks that the result is
// data if ok, else an ErrTooFewShards error.
func checkDecode(t *testing.T, c *Code, shards [][]byte, data, buf []byte, ok bool, what func() string) {
	t.Helper()
	before := cloneShards(shards)
	for _, dst := range [][]byte{nil, buf} {
		got, err := c.Decode(dst, shards)
		switch {
		case ok && (err != nil || !bytes.Equal(got, data)):
			t.Fatalf("%s: Decode = %d bytes, %v; want the chunk", what(), len(got), err)
		case !ok && (got != nil || !errors.IsErr(err, ErrTooFewShards) || !errors.Is(errors.IO, err)):
			t.Fatalf("%s: Decode = %d bytes, %v; want ErrTooFewShards", what(), len(got), err)
		}
	}
	if !slices.EqualFunc(shards, before, bytes.Equal) {
		t.Fatalf("%s: Decode modified its shards", what())
	}
}

// checkReconstruct rebuilds shards and checks that they equal orig and that exactly the
// damaged ones were replaced (if ok), or that it fails with ErrTooFewShards.
func checkReconstruct(t *testing.T, c *Code, shards, orig [][]byte, damaged []int, ok bool, what func() string) {
	t.Helper()
	shards = slices.Clone(shards)
	before := slices.Clone(shards)
	got, err := c.Reconstruct(shards, nil)
	if !ok {
		if !errors.IsErr(err, ErrTooFewShards) || !slices.EqualFunc(shards, before, bytes.Equal) {
			t.Fatalf("%s: Reconstruct = %v, want ErrTooFewShards and shards unchanged", what(), err)
		}
		return
	}
	if err != nil || !slices.Equal(got, damaged) && (len(got) > 0 || len(damaged) > 0) {
		t.Fatalf("%s: Reconstruct = %v, %v; want %v", what(), got, err, damaged)
	}
	for i := range shards {
		if !bytes.Equal(shards[i], orig[i]) {
			t.Fatalf("%s: rebuilt shard %d differs from the original", what(), i)
		}
	}
}

// TestForeignShards mixes in valid shards of another stripe, another code or another
// position: they count as missing, and the decoder never returns another chunk.
func TestForeignShards(t *testing.T) {
	c := newCode(t, 4, 2)
	const n = 10_000
	data, other := chunk(1, n), chunk(2, n)
	a, b := encode(t, c, data), encode(t, c, other)
	short := encode(t, c, data[:n-1])
	wide := encode(t, newCode(t, 8, 3), data)
	tests := []struct {
		name   string
		mutate func(s [][]byte)
		ok     bool
	}{
		{"other stripe at 0", func(s [][]byte) { s[0] = b[0] }, true},
		{"other stripe at 0 and 5", func(s [][]byte) { s[0], s[5] = b[0], b[5] }, true},
		{"other stripe at 0, 1, 2", func(s [][]byte) { copy(s, b[:3]) }, false},
		{"shorter chunk at 3", func(s [][]byte) { s[3] = short[3] }, true},
		{"other code at 2", func(s [][]byte) { s[2] = wide[2] }, true},
		{"swapped 0 and 1", func(s [][]byte) { s[0], s[1] = s[1], s[0] }, true},
		{"swapped 0 and 4, lost 5", func(s [][]byte) { s[0], s[4], s[5] = s[4], s[0], nil }, false},
		{"duplicate of 4 at 5", func(s [][]byte) { s[5] = s[4] }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			shards := slices.Clone(a)
			tc.mutate(shards)
			checkDecode(t, c, shards, data, nil, tc.ok, func() string { return tc.name })
			if tc.ok {
				var damaged []int
				for i := range shards {
					if !bytes.Equal(shards[i], a[i]) {
						damaged = append(damaged, i)
					}
				}
				checkReconstruct(t, c, shards, a, damaged, true, func() string { return tc.name })
			}
		})
	}
}

// TestAmbiguous gives shards from which two different stripes could be decoded.
func TestAmbiguous(t *testing.T) {
	for _, km := range [][2]int{{1, 1}, {2, 2}} {
		c := newCode(t, km[0], km[1])
		t.Run(c.String(), func(t *testing.T) {
			a, b := encode(t, c, chunk(1, 100)), encode(t, c, chunk(2, 100))
			shards := slices.Clone(a)
			for i := 1; i < len(shards); i += 2 {
				shards[i] = b[i]
			}
			got, err := c.DecodeChunk(shards)
			if c.K() > 1 && (got != nil || !errors.Is(errors.Corrupt, err) || !strings.Contains(err.Error(), "two different")) {
				t.Fatalf("DecodeChunk = %d bytes, %v; want a Corrupt error", len(got), err)
			}
			if _, err := c.Reconstruct(shards, nil); !errors.Is(errors.Corrupt, err) {
				t.Fatalf("Reconstruct = %v, want a Corrupt error", err)
			}
		})
	}
}

// forge replaces b's payload byte i and rewrites both of its checksums, as only a bug or
// an attacker could: the shard passes ParseShard but does not match its stripe.
func forge(b []byte, i int) []byte {
	b = slices.Clone(b)
	b[HeaderSize+i] ^= 0xFF
	binary.LittleEndian.PutUint32(b[20:], crc32.Checksum(b[HeaderSize:], castagnoli))
	binary.LittleEndian.PutUint32(b[32:], crc32.Checksum(b[:32], castagnoli))
	return b
}

// TestForged checks that the stripe sums catch shards with valid checksums but wrong
// payloads, on the healthy path and through reconstruction.
func TestForged(t *testing.T) {
	c := newCode(t, 4, 2)
	data := chunk(3, 4000)
	orig := encode(t, c, data)
	if _, _, err := ParseShard(forge(orig[1], 7)); err != nil {
		t.Fatalf("forged shard does not parse: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(s [][]byte)
	}{
		{"data shard", func(s [][]byte) { s[1] = forge(s[1], 7) }},
		{"parity shard used for data", func(s [][]byte) { s[0], s[4] = nil, forge(s[4], 7) }},
		{"data shard used for data", func(s [][]byte) { s[0], s[3] = nil, forge(s[3], 999) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shards := slices.Clone(orig)
			tc.mutate(shards)
			got, err := c.DecodeChunk(shards)
			if got != nil || !errors.Is(errors.Corrupt, err) || !strings.Contains(err.Error(), "checksum") {
				t.Fatalf("DecodeChunk = %d bytes, %v; want a Corrupt error", len(got), err)
			}
			if _, err := c.Reconstruct(shards, nil); !errors.Is(errors.Corrupt, err) {
				t.Fatalf("Reconstruct = %v, want a Corrupt error", err)
			}
		})
	}
}

func TestReconstructWant(t *testing.T) {
	c := newCode(t, 8, 3)
	orig := encode(t, c, chunk(4, 50_000))
	shards := slices.Clone(orig)
	shards[2], shards[9] = nil, nil
	shards[5] = slices.Clone(shards[5])
	shards[5][40] ^= 1

	got, err := c.Reconstruct(shards, []int{9, 0, 5})
	if err != nil || !slices.Equal(got, []int{5, 9}) {
		t.Fatalf("Reconstruct(want 9, 0, 5) = %v, %v; want [5 9]", got, err)
	}
	if shards[2] != nil || !bytes.Equal(shards[5], orig[5]) || !bytes.Equal(shards[9], orig[9]) || &shards[0][0] != &orig[0][0] {
		t.Fatal("Reconstruct did not rebuild exactly the wanted shards")
	}
	for _, want := range [][]int{{-1}, {11}} {
		if _, err := c.Reconstruct(shards, want); !errors.Is(errors.Invalid, err) {
			t.Errorf("Reconstruct(want %v) = %v, want an Invalid error", want, err)
		}
	}
	if _, err := c.Reconstruct(shards[:10], nil); !errors.Is(errors.Invalid, err) {
		t.Errorf("Reconstruct of 10 shards = %v, want an Invalid error", err)
	}
	if got, err := c.Reconstruct(orig, nil); err != nil || got != nil {
		t.Errorf("Reconstruct of a healthy stripe = %v, %v; want nothing", got, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	c := newCode(t, 4, 2)
	shards := encode(t, c, chunk(5, 1000))
	if _, err := c.DecodeChunk(shards[:5]); !errors.Is(errors.Invalid, err) {
		t.Errorf("DecodeChunk of 5 shards = %v, want an Invalid error", err)
	}
	if _, err := c.DecodeChunk(append(shards, shards[0])); !errors.Is(errors.Invalid, err) {
		t.Errorf("DecodeChunk of 7 shards = %v, want an Invalid error", err)
	}
	lost := slices.Clone(shards)
	lost[0], lost[3], lost[5] = nil, []byte{}, slices.Clone(lost[5])
	lost[5][HeaderSize] ^= 1
	_, err := c.DecodeChunk(lost)
	const want = "erasure.Decode: too few shards: 3 valid of the 4 needed by 4+2 (2 missing, 1 corrupt)"
	if err == nil || err.Error() != want {
		t.Errorf("DecodeChunk = %v, want %q", err, want)
	}
}

// TestHeaderLayout checks the shard header byte by byte against the documented format.
func TestHeaderLayout(t *testing.T) {
	c := newCode(t, 2, 1)
	data := []byte("hello, world!") // 13 bytes: payloads of 7, the second padded with one zero
	shards := encode(t, c, data)
	var crcs []uint32
	for _, b := range shards {
		crcs = append(crcs, crc32.Checksum(b[HeaderSize:], castagnoli))
	}
	sum := func(cs []uint32) uint32 {
		var b []byte
		for _, c := range cs {
			b = binary.LittleEndian.AppendUint32(b, c)
		}
		return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
	}
	for i, b := range shards {
		le := binary.LittleEndian
		want := []byte{0x5D, 0xEC, 0x1F, 0xCA, 1, 1, 2, 1, byte(i), 0, 0, 0, 13, 0, 0, 0, 7, 0, 0, 0}
		want = le.AppendUint32(want, crcs[i])
		want = le.AppendUint32(want, sum(crcs[:2]))
		want = le.AppendUint32(want, sum(crcs[2:]))
		want = le.AppendUint32(want, crc32.Checksum(want, crc32.MakeTable(crc32.Castagnoli)))
		if !bytes.Equal(b[:HeaderSize], want) {
			t.Errorf("shard %d header\n got %x\nwant %x", i, b[:HeaderSize], want)
		}
	}
	if got := string(shards[0][HeaderSize:]) + string(shards[1][HeaderSize:]); got != "hello, world!\x00" {
		t.Errorf("data payloads %q", got)
	}
}

// TestGolden pins the encoding of fixed chunks, whose headers and parity TestHeaderLayout
// and TestReferenceParity check against the written format: a change here changes the
// stored format (for example a new Reed-Solomon matrix), which needs a new version.
func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		k, m, n int
		sha     string
	}{
		{1, 1, 1000, "1466354ac3c5c991b1b375655de2a60e7306dbd074a880461abd90de2e6ff3ac"},
		{2, 1, 1000, "e9339ebcd46c6584f6b32ee5d172b4f3e73fff4cc7abb3a583b89b2a52874a21"},
		{4, 2, 1000, "b30fd2f5911bfe5556de66092c110c064e5007baf15f2e8f8937c15969f8f923"},
		{8, 3, 1000, "c5ff4c9a1cd9dc141435ed01d1df1ec6e50f575962904c8e5a453864c597706f"},
		{4, 2, 0, "4a8cfa619324a124b7d88f184aa83c8bcd915818e237a772ef38d5aaedc87ede"},
		{32, 16, 5000, "29411c4af526e3858a5cec027056a8e2fefc965c94b8a37e58feaa3641075cdc"},
	} {
		c := newCode(t, tc.k, tc.m)
		h := sha256.New()
		data := make([]byte, tc.n) // a fixed pattern, independent of the test helpers
		for i := range data {
			data[i] = byte(i*7 + i>>8)
		}
		for _, b := range encode(t, c, data) {
			h.Write(b)
		}
		if got := fmt.Sprintf("%x", h.Sum(nil)); got != tc.sha {
			t.Errorf("%v, %d bytes: sha256 of the shards = %s, want %s", c, tc.n, got, tc.sha)
		}
	}
}

// TestConcurrent shares one Code between goroutines (run with -race).
func TestConcurrent(t *testing.T) {
	c := newCode(t, 4, 2)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				data := chunk(uint64(g*100+i), 1000*i)
				shards := encode(t, c, data)
				shards[(g+i)%6] = nil
				got, err := c.DecodeChunk(shards)
				if err != nil || !bytes.Equal(got, data) {
					t.Errorf("goroutine %d, chunk %d: %v", g, i, err)
				}
				if _, err := c.Reconstruct(shards, nil); err != nil {
					t.Errorf("goroutine %d, chunk %d: %v", g, i, err)
				}
			}
		})
	}
	wg.Wait()
}

// A code with one data shard makes identical copies, each of which decodes the chunk
// alone and rebuilds the others; 1+0 is a single checksummed copy.
func TestCopies(t *testing.T) {
	for _, m := range []int{0, 1, 2} {
		c := newCode(t, 1, m)
		for _, n := range []int{0, 1, 4096, 100003} {
			data := chunk(uint64(n+m), n)
			shards := encode(t, c, data)
			for j := range shards {
				_, p, err := ParseShard(shards[j])
				if err != nil || !bytes.Equal(p, data) {
					t.Fatalf("1+%d, %d bytes: shard %d is not a copy (%v)", m, n, j, err)
				}
				alone := make([][]byte, len(shards))
				alone[j] = shards[j]
				got, err := c.Decode(nil, alone)
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("1+%d, %d bytes: shard %d alone: %v", m, n, j, err)
				}
				if m > 0 {
					if _, err := c.Reconstruct(alone, nil); err != nil {
						t.Fatalf("1+%d: rebuild from shard %d: %v", m, j, err)
					}
					for i := range alone {
						if !bytes.Equal(alone[i], shards[i]) {
							t.Fatalf("1+%d: rebuilt shard %d differs", m, i)
						}
					}
				}
			}
			if _, err := c.Decode(nil, make([][]byte, len(shards))); err == nil {
				t.Fatalf("1+%d: decoded with no shard", m)
			}
		}
	}
}

// EncodeRaw's parity of a byte range is the same range of the whole shards' parity (what
// block volumes rely on to write one range of each shard), and ReconstructRaw rebuilds
// any m lost shards.
func TestRawRanges(t *testing.T) {
	c, err := New(4, 2)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	whole := make([][]byte, 6)
	for j := range whole {
		whole[j] = make([]byte, 4096)
		if j < 4 {
			for x := range whole[j] {
				whole[j][x] = byte(rng.Uint32())
			}
		}
	}
	if err := c.EncodeRaw(whole); err != nil {
		t.Fatal(err)
	}
	part := make([][]byte, 6)
	for j := range part {
		part[j] = make([]byte, 1000)
		if j < 4 {
			copy(part[j], whole[j][1024:])
		}
	}
	if err := c.EncodeRaw(part); err != nil {
		t.Fatal(err)
	}
	for j := 4; j < 6; j++ {
		if !bytes.Equal(part[j], whole[j][1024:2024]) {
			t.Fatalf("parity shard %d of a range differs from the range of the whole's", j)
		}
	}
	for a := range 6 {
		for b := a + 1; b < 6; b++ {
			got := append([][]byte(nil), whole...)
			got[a], got[b] = nil, nil
			if err := c.ReconstructRaw(got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[a], whole[a]) || !bytes.Equal(got[b], whole[b]) {
				t.Fatalf("shards %d and %d rebuilt wrong", a, b)
			}
		}
	}
	got := append([][]byte(nil), whole...)
	got[0], got[1], got[2] = nil, nil, nil
	if err := c.ReconstructRaw(got); !errors.IsErr(err, ErrTooFewShards) {
		t.Fatalf("three of six lost: %v", err)
	}
}
