package erasure

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/cairnfs/cairn/internal/errors"
)

// Shard header layout, little endian; see docs/design/20261123_erasure.md.
//
//	offset size field
//	0      4    magic 0xCA1FEC5D
//	4      1    format version (1)
//	5      1    algorithm (1: Reed-Solomon over GF(2^8), klauspost/reedsolomon's matrix)
//	6      1    k, data shards
//	7      1    m, parity shards
//	8      1    index of this shard: 0..k-1 data, k..k+m-1 parity
//	9      3    reserved (0)
//	12     4    chunk length n
//	16     4    payload length, n/k rounded up
//	20     4    CRC32C of the payload
//	24     4    data sum: CRC32C of the k data payload CRCs, 4 bytes each, in order
//	28     4    parity sum: CRC32C of the m parity payload CRCs
//	32     4    CRC32C of bytes 0..31
//	36          payload
const (
	// HeaderSize is the length of a shard's header; the payload follows it.
	HeaderSize = 36

	magic        = 0xCA1FEC5D
	version      = 1
	algReedSolGF = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Stripe identifies a stripe: its code, its chunk length, and checksums over its shards'
// payload CRCs, which tell one stripe from another with the same length and check the
// result of a reconstruction. Every shard of a stripe carries the same Stripe.
type Stripe struct {
	K, M      int    // data and parity shards
	ChunkLen  int    // length of the chunk the stripe encodes
	DataSum   uint32 // CRC32C of the data shards' payload CRCs (4 bytes each, little endian)
	ParitySum uint32 // CRC32C of the parity shards' payload CRCs
}

// ShardSize returns the payload length of each of the stripe's shards.
func (s Stripe) ShardSize() int { return shardSize(s.ChunkLen, s.K) }

// Header is a shard's decoded header.
type Header struct {
	Stripe
	Index int    // position in the stripe: 0..K-1 data, K..K+M-1 parity
	CRC   uint32 // CRC32C of the payload
}

// ParseHeader decodes and checks the header at the start of b, which may hold the whole
// shard or just its first HeaderSize bytes. It does not check the payload: ParseShard
// does. An error wraps ErrCorruptShard and has kind errors.Corrupt.
func ParseHeader(b []byte) (Header, error) {
	const op errors.Op = "erasure.ParseHeader"
	h, why := parseHeader(b)
	if why != "" {
		return Header{}, corrupt(op, why, len(b))
	}
	return h, nil
}

// ParseShard decodes and checks a whole shard: its header, its length and its payload's
// checksum. It returns the header and the payload, which is b[HeaderSize:], not a copy.
// An error wraps ErrCorruptShard and has kind errors.Corrupt.
func ParseShard(b []byte) (Header, []byte, error) {
	const op errors.Op = "erasure.ParseShard"
	h, p, why := parseShard(b)
	if why != "" {
		return Header{}, nil, corrupt(op, why, len(b))
	}
	return h, p, nil
}

func corrupt(op errors.Op, why string, n int) error {
	return errors.E(op, errors.Corrupt, fmt.Errorf("%w (%d bytes): %s", ErrCorruptShard, n, why))
}

// parseShard is ParseShard without allocating: a failure is a reason, not an error.
func parseShard(b []byte) (Header, []byte, string) {
	h, why := parseHeader(b)
	if why != "" {
		return Header{}, nil, why
	}
	want := HeaderSize + h.ShardSize()
	switch {
	case len(b) < want:
		return Header{}, nil, "truncated payload"
	case len(b) > want:
		return Header{}, nil, "bytes after the payload"
	}
	p := b[HeaderSize:]
	if crc32.Checksum(p, castagnoli) != h.CRC {
		return Header{}, nil, "payload checksum mismatch"
	}
	return h, p, ""
}

func parseHeader(b []byte) (Header, string) {
	var h Header
	if len(b) < HeaderSize {
		return h, "shorter than a header"
	}
	if binary.LittleEndian.Uint32(b[0:]) != magic {
		return h, "bad magic"
	}
	if crc32.Checksum(b[:32], castagnoli) != binary.LittleEndian.Uint32(b[32:]) {
		return h, "header checksum mismatch"
	}
	if b[4] != version {
		return h, "unknown format version"
	}
	if b[5] != algReedSolGF {
		return h, "unknown coding algorithm"
	}
	if b[9]|b[10]|b[11] != 0 {
		return h, "reserved header bytes are not zero"
	}
	h.K, h.M, h.Index = int(b[6]), int(b[7]), int(b[8])
	if validate(h.K, h.M) != nil {
		return Header{}, "unsupported code in header"
	}
	if h.Index >= h.K+h.M {
		return Header{}, "shard index out of range"
	}
	n := binary.LittleEndian.Uint32(b[12:])
	if n > MaxChunkSize {
		return Header{}, "chunk length too large"
	}
	h.ChunkLen = int(n)
	if int(binary.LittleEndian.Uint32(b[16:])) != h.ShardSize() {
		return Header{}, "payload length does not match chunk length"
	}
	h.CRC = binary.LittleEndian.Uint32(b[20:])
	h.DataSum = binary.LittleEndian.Uint32(b[24:])
	h.ParitySum = binary.LittleEndian.Uint32(b[28:])
	return h, ""
}

// putHeader writes h into b[:HeaderSize].
func putHeader(b []byte, h *Header) {
	_ = b[HeaderSize-1]
	binary.LittleEndian.PutUint32(b[0:], magic)
	b[4] = version
	b[5] = algReedSolGF
	b[6], b[7], b[8] = byte(h.K), byte(h.M), byte(h.Index)
	b[9], b[10], b[11] = 0, 0, 0
	binary.LittleEndian.PutUint32(b[12:], uint32(h.ChunkLen))
	binary.LittleEndian.PutUint32(b[16:], uint32(h.ShardSize()))
	binary.LittleEndian.PutUint32(b[20:], h.CRC)
	binary.LittleEndian.PutUint32(b[24:], h.DataSum)
	binary.LittleEndian.PutUint32(b[28:], h.ParitySum)
	binary.LittleEndian.PutUint32(b[32:], crc32.Checksum(b[:32], castagnoli))
}

// sumCRCs returns the CRC32C of crcs, each as 4 little-endian bytes: a stripe's data or
// parity sum. buf is scratch space (a local array would escape through crc32).
func sumCRCs(buf *[4 * maxShards]byte, crcs []uint32) uint32 {
	for i, c := range crcs {
		binary.LittleEndian.PutUint32(buf[4*i:], c)
	}
	return crc32.Checksum(buf[:4*len(crcs)], castagnoli)
}
