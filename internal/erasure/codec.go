package erasure

import (
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/cairnfs/cairn/internal/errors"
)

// state is what a decoder makes of one shard it was given.
type state uint8

const (
	unparsed  state = iota
	missing         // nil or empty
	corrupted       // fails ParseShard
	foreign         // a valid shard, but of another code, position or stripe
	valid           // a valid shard of the stripe being decoded, at its position
)

// scratch is the per-call working memory of the codec, pooled so that a call allocates
// little beyond its output.
type scratch struct {
	state [maxShards]state
	hdr   [maxShards]Header
	pay   [maxShards][]byte // payloads of the parsed shards
	in    [maxShards][]byte // the Reed-Solomon library's argument
	crc   [maxShards]uint32
	sum   [4 * maxShards]byte // sumCRCs's buffer
}

func (c *Code) get() *scratch {
	s := c.pool.Get().(*scratch)
	clear(s.state[:c.k+c.m])
	return s
}

// put returns s to the pool, dropping its references to the caller's buffers.
func (c *Code) put(s *scratch) {
	clear(s.pay[:c.k+c.m])
	clear(s.in[:c.k+c.m])
	c.pool.Put(s)
}

// Encode encodes an n-byte chunk into k+m shards, each a header followed by a payload of
// ShardSize(n) bytes: the data shards hold the chunk in order, zero-padded to a multiple of
// k bytes, and the parity shards hold the Reed-Solomon parity. An empty chunk gives k+m
// header-only shards.
//
// Encode reuses dst: each of dst[0..k+m-1] with the capacity for HeaderSize+ShardSize(n)
// bytes is overwritten in place, and the other shards are allocated, together in one
// block. The result is dst[:k+m] if cap(dst) >= k+m. dst must not overlap data. Encode
// returns an error of kind errors.TooLarge if n > MaxChunkSize.
func (c *Code) Encode(dst [][]byte, data []byte) ([][]byte, error) {
	const op errors.Op = "erasure.Encode"
	n := len(data)
	if n > MaxChunkSize {
		return nil, errors.Errorf(op, errors.TooLarge, "chunk of %d bytes, at most %d", n, MaxChunkSize)
	}
	total, size := c.k+c.m, shardSize(n, c.k)
	dst = shardBuffers(dst, total, HeaderSize+size)

	s := c.get()
	defer c.put(s)
	in := s.in[:total]
	for i := range in {
		in[i] = dst[i][HeaderSize:]
	}
	for i, p := range in[:c.k] {
		lo := min(i*size, n)
		clear(p[copy(p, data[lo:min(lo+size, n)]):])
	}
	if size > 0 {
		if err := c.enc.Encode(in); err != nil {
			return nil, errors.E(op, err)
		}
	}
	for i, p := range in {
		s.crc[i] = crc32.Checksum(p, castagnoli)
	}
	h := Header{Stripe: Stripe{
		K: c.k, M: c.m, ChunkLen: n,
		DataSum:   sumCRCs(&s.sum, s.crc[:c.k]),
		ParitySum: sumCRCs(&s.sum, s.crc[c.k:total]),
	}}
	for i := range dst {
		h.Index, h.CRC = i, s.crc[i]
		putHeader(dst[i], &h)
	}
	return dst, nil
}

// EncodeChunk is Encode(nil, data): it returns k+m newly allocated shards.
func (c *Code) EncodeChunk(data []byte) ([][]byte, error) {
	return c.Encode(nil, data)
}

// shardBuffers returns dst[:total] with every element of length size, keeping those with
// the capacity and allocating the others in one block.
func shardBuffers(dst [][]byte, total, size int) [][]byte {
	if cap(dst) < total {
		dst = append(dst[:cap(dst)], make([][]byte, total-cap(dst))...)
	}
	dst = dst[:total]
	short := 0
	for _, b := range dst {
		if cap(b) < size {
			short++
		}
	}
	block := make([]byte, short*size)
	for i, b := range dst {
		if cap(b) >= size {
			dst[i] = b[:size]
		} else {
			dst[i], block = block[:size:size], block[size:]
		}
	}
	return dst
}

// Decode returns the chunk encoded by a stripe's shards: shards[i] holds shard i, or is
// nil if it is missing. A shard that fails its checks, or that belongs to another stripe or
// position, counts as missing. When the k data shards are valid, Decode copies their
// payloads out with no Reed-Solomon work; otherwise it reconstructs the missing data from
// any k valid shards and checks the result against the stripe's data sum. It returns the
// exact chunk or an error, never other bytes. Parity shards are not looked at while the
// data shards are valid, so a reader may fetch the data shards first, pass nil for the
// parity shards, and fetch them only if Decode fails with ErrTooFewShards.
//
// The chunk is written to dst's array if it is large enough: cap(dst) >= n when the data
// shards are valid, cap(dst) >= StripeSize(n) when data must be reconstructed; otherwise
// Decode allocates. The shards are not modified.
//
// With fewer than k valid shards of one stripe, the error wraps ErrTooFewShards (kind
// errors.IO) and says how many were missing, corrupt or foreign. If two different stripes
// could each be decoded from the shards, or a reconstruction fails its check, the error
// has kind errors.Corrupt. len(shards) != k+m is an error of kind errors.Invalid.
func (c *Code) Decode(dst []byte, shards [][]byte) ([]byte, error) {
	const op errors.Op = "erasure.Decode"
	if len(shards) != c.k+c.m {
		return nil, errors.Errorf(op, errors.Invalid, "got %d shards, want %d for %v", len(shards), c.k+c.m, c)
	}
	s := c.get()
	defer c.put(s)
	if out, ok := c.decodeData(s, dst, shards); ok {
		return out, nil
	}
	st, err := c.stripe(op, s, shards)
	if err != nil {
		return nil, err
	}
	return c.reconstructData(op, s, st, dst)
}

// DecodeChunk is Decode(nil, shards).
func (c *Code) DecodeChunk(shards [][]byte) ([]byte, error) {
	return c.Decode(nil, shards)
}

// decodeData is the healthy read: it returns the chunk if the k data shards are valid
// shards of one stripe and match its data sum. It records what it parsed in s.
func (c *Code) decodeData(s *scratch, dst []byte, shards [][]byte) ([]byte, bool) {
	for i := 0; i < c.k; i++ {
		if !c.parse(s, shards, i) {
			return nil, false
		}
		if s.hdr[i].Index != i || s.hdr[i].Stripe != s.hdr[0].Stripe {
			return nil, false
		}
		s.crc[i] = s.hdr[i].CRC
	}
	st := &s.hdr[0].Stripe
	if sumCRCs(&s.sum, s.crc[:c.k]) != st.DataSum {
		return nil, false
	}
	n, size := st.ChunkLen, st.ShardSize()
	out := dst[:0]
	if cap(out) < n {
		out = make([]byte, n)
	}
	out = out[:n]
	for i := 0; i < c.k && i*size < n; i++ {
		copy(out[i*size:], s.pay[i])
	}
	return out, true
}

// parse parses shards[i] into s unless it already has, and reports whether it is a valid
// shard of this code (its position and stripe are checked by the caller).
func (c *Code) parse(s *scratch, shards [][]byte, i int) bool {
	if s.state[i] == unparsed {
		b := shards[i]
		switch h, p, why := parseShard(b); {
		case len(b) == 0:
			s.state[i] = missing
		case why != "":
			s.state[i] = corrupted
		case h.K != c.k || h.M != c.m:
			s.state[i] = foreign
		default:
			s.state[i], s.hdr[i], s.pay[i] = valid, h, p
		}
	}
	return s.state[i] == valid
}

// stripe parses every shard, chooses the stripe to decode and marks the shards that are
// valid members of it at their positions. The chosen stripe is the one with the most such
// shards; it is an error if it has fewer than k, or if another stripe has k or more too
// (the shards could decode to two different chunks).
func (c *Code) stripe(op errors.Op, s *scratch, shards [][]byte) (Stripe, error) {
	total := c.k + c.m
	for i := range total {
		if c.parse(s, shards, i) && s.hdr[i].Index != i {
			s.state[i] = foreign
		}
	}
	// Group the valid shards by stripe; usually they are all of one, found in one pass.
	best, bestN, rival, mixed := -1, 0, -1, false
	for i := range total {
		if s.state[i] != valid {
			continue
		}
		if best < 0 {
			best = i
		}
		if s.hdr[i].Stripe != s.hdr[best].Stripe {
			mixed = true
			break
		}
		bestN++
	}
	if mixed {
		best, bestN = -1, 0
		for i := range total {
			if s.state[i] != valid {
				continue
			}
			n := 0
			for j := range total {
				if s.state[j] == valid && s.hdr[j].Stripe == s.hdr[i].Stripe {
					n++
				}
			}
			switch {
			case n > bestN:
				if bestN >= c.k {
					rival = best
				}
				best, bestN = i, n
			case n >= c.k && s.hdr[i].Stripe != s.hdr[best].Stripe:
				rival = i
			}
		}
	}
	if rival >= 0 {
		return Stripe{}, errors.Errorf(op, errors.Corrupt,
			"shards of two different %v stripes, of %d and %d bytes, could each be decoded",
			c, s.hdr[best].ChunkLen, s.hdr[rival].ChunkLen)
	}
	var st Stripe
	if best >= 0 {
		st = s.hdr[best].Stripe
	}
	var count [valid + 1]int
	for i := range total {
		if s.state[i] == valid && s.hdr[i].Stripe != st {
			s.state[i] = foreign
		}
		count[s.state[i]]++
	}
	if count[valid] < c.k {
		return Stripe{}, errors.E(op, errors.IO, fmt.Errorf("%w: %d valid of the %d needed by %v (%s)",
			ErrTooFewShards, count[valid], c.k, c, describe(count[missing], count[corrupted], count[foreign])))
	}
	return st, nil
}

func describe(missing, corrupted, foreign int) string {
	var parts []string
	for _, p := range []struct {
		n    int
		what string
	}{{missing, "missing"}, {corrupted, "corrupt"}, {foreign, "of another stripe or position"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.what))
		}
	}
	return strings.Join(parts, ", ")
}

// reconstructData is the degraded read: it rebuilds the missing data shards of stripe st
// from the valid shards marked in s, straight into the output, and checks the data sum.
func (c *Code) reconstructData(op errors.Op, s *scratch, st Stripe, dst []byte) ([]byte, error) {
	total, size := c.k+c.m, st.ShardSize()
	out := dst[:0]
	if cap(out) < c.k*size {
		out = make([]byte, c.k*size)
	}
	out = out[:c.k*size]
	in := s.in[:total]
	for i := range in {
		switch {
		case s.state[i] == valid:
			in[i] = s.pay[i]
			if i < c.k {
				copy(out[i*size:], s.pay[i])
			}
		case i < c.k:
			in[i] = out[i*size : i*size : (i+1)*size]
		default:
			in[i] = nil
		}
	}
	if size > 0 {
		if err := c.enc.ReconstructData(in); err != nil {
			return nil, errors.E(op, err)
		}
	}
	for i := 0; i < c.k; i++ {
		if s.state[i] == valid {
			s.crc[i] = s.hdr[i].CRC
			continue
		}
		p := out[i*size : (i+1)*size]
		if size > 0 && &in[i][0] != &p[0] {
			copy(p, in[i])
		}
		s.crc[i] = crc32.Checksum(p, castagnoli)
	}
	if sumCRCs(&s.sum, s.crc[:c.k]) != st.DataSum {
		return nil, errors.Errorf(op, errors.Corrupt,
			"data reconstructed from %v shards does not match the stripe's checksum", c)
	}
	return out[:st.ChunkLen], nil
}

// Reconstruct rebuilds shards of a stripe for repair: shards[i] holds shard i, or is nil if
// it is missing, and may be corrupt or belong to another stripe, as for Decode. It rebuilds
// every shard listed in want, or if want is nil every shard that is not a valid member of
// the stripe, from any k valid ones, checks the rebuilt shards against the stripe's sums,
// and stores each in shards[i], byte-identical to what Encode produced. It returns the
// indices it replaced, in increasing order; a wanted shard that is already valid is left
// as it is and not listed.
//
// Rebuilt shards are newly allocated (one block for all), never written over the caller's
// buffers. On error, shards is unchanged. The errors are those of Decode, and an error of
// kind errors.Invalid for an index in want out of range.
func (c *Code) Reconstruct(shards [][]byte, want []int) ([]int, error) {
	const op errors.Op = "erasure.Reconstruct"
	total := c.k + c.m
	if len(shards) != total {
		return nil, errors.Errorf(op, errors.Invalid, "got %d shards, want %d for %v", len(shards), total, c)
	}
	for _, i := range want {
		if i < 0 || i >= total {
			return nil, errors.Errorf(op, errors.Invalid, "shard index %d out of range for %v", i, c)
		}
	}
	s := c.get()
	defer c.put(s)
	st, err := c.stripe(op, s, shards)
	if err != nil {
		return nil, err
	}
	var wanted [maxShards]bool
	for _, i := range want {
		wanted[i] = true
	}
	var rebuilt []int
	lost := 0
	for i := range total {
		if s.state[i] != valid {
			lost++
			if want == nil || wanted[i] {
				rebuilt = append(rebuilt, i)
			}
		}
	}
	if lost == 0 {
		// Nothing to rebuild; the sums still catch a valid-looking shard that does not
		// belong (its header's CRC is not the one the encoder computed).
		for i := range total {
			s.crc[i] = s.hdr[i].CRC
		}
		if sumCRCs(&s.sum, s.crc[:c.k]) != st.DataSum || sumCRCs(&s.sum, s.crc[c.k:total]) != st.ParitySum {
			return nil, errors.Errorf(op, errors.Corrupt, "%v shards do not match the stripe's checksums", c)
		}
	}
	if len(rebuilt) == 0 {
		return nil, nil
	}

	// Rebuild every lost shard, wanted or not, so that both sums can be checked.
	size := st.ShardSize()
	block := make([]byte, lost*(HeaderSize+size))
	var bufs [maxShards][]byte
	in := s.in[:total]
	for i := range in {
		if s.state[i] == valid {
			in[i] = s.pay[i]
			continue
		}
		bufs[i], block = block[:HeaderSize+size:HeaderSize+size], block[HeaderSize+size:]
		in[i] = bufs[i][HeaderSize:HeaderSize]
	}
	if size > 0 {
		if err := c.enc.Reconstruct(in); err != nil {
			return nil, errors.E(op, err)
		}
	}
	for i := range in {
		if s.state[i] == valid {
			s.crc[i] = s.hdr[i].CRC
			continue
		}
		p := bufs[i][HeaderSize:]
		if size > 0 && &in[i][0] != &p[0] {
			copy(p, in[i])
		}
		s.crc[i] = crc32.Checksum(p, castagnoli)
	}
	if sumCRCs(&s.sum, s.crc[:c.k]) != st.DataSum || sumCRCs(&s.sum, s.crc[c.k:total]) != st.ParitySum {
		return nil, errors.Errorf(op, errors.Corrupt,
			"shards reconstructed from %v shards do not match the stripe's checksums", c)
	}
	h := Header{Stripe: st}
	for _, i := range rebuilt {
		h.Index, h.CRC = i, s.crc[i]
		putHeader(bufs[i], &h)
		shards[i] = bufs[i]
	}
	return rebuilt, nil
}
