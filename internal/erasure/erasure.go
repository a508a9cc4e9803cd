// Package erasure is cairn's Reed-Solomon stripe codec for the EC storage classes. A Code
// with k data and m parity shards ("4+2") cuts one chunk of object data into k+m shards,
// any k of which give the chunk back, and rebuilds lost or damaged shards for repair.
//
// Every shard is self-describing: a 36-byte header (the code, the shard's position, the
// chunk length, the CRC32C of the payload, checksums over the whole stripe and a checksum
// of the header itself) followed by the payload. A shard can be checked on its own by the
// node that stores it, shards of different stripes are never mixed, and a decoded chunk is
// checked against the stripe as the encoder saw it, so a decoder returns the chunk's exact
// bytes or an error, never wrong bytes. The format, the limits on k and m and the
// measured speed are described in docs/design/20261123_erasure.md.
//
// The package is pure: []byte in, shards out. It does no I/O, and it does not split
// objects into chunks (gateway), choose the nodes that hold the shards (placement), store
// them (blobstore) or decide when to repair (repair).
package erasure

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/reedsolomon"

	"github.com/cairnfs/cairn/internal/errors"
)

// Limits on a code. The header stores k, m and the shard index in one byte each, and the
// Reed-Solomon code over GF(2^8) allows k+m <= 256; the tighter caps are cairn's choice:
// every shard of a stripe needs its own failure domain, repairing one shard reads k others,
// and beyond 16 parity shards replication is the cheaper way to survive that many losses.
const (
	// MaxDataShards is the largest k a Code accepts.
	MaxDataShards = 32
	// MaxParityShards is the largest m a Code accepts.
	MaxParityShards = 16
	// maxShards bounds k+m, the number of shards of a stripe.
	maxShards = MaxDataShards + MaxParityShards
)

// MaxChunkSize is the largest chunk a Code encodes, far above cairn's chunk size (4 MiB).
// It bounds the memory a shard's header can ask a decoder for.
const MaxChunkSize = 1 << 30

// Sentinel errors, to be tested with errors.Is (the standard library's, or IsErr in
// internal/errors). They are wrapped in an *errors.Error with a kind and an op.
var (
	// ErrCorruptShard reports a shard that fails its checks: a checksum, the header's
	// fields, or its length. Its kind is errors.Corrupt.
	ErrCorruptShard = errors.New("corrupt shard")
	// ErrTooFewShards reports a stripe with fewer than k valid shards of one stripe: the
	// chunk cannot be decoded now, and may come back if missing shards reappear. Its kind
	// is errors.IO.
	ErrTooFewShards = errors.New("too few shards")
)

// Codec is the erasure-coding seam of the gateway and the repair loop. *Code implements it.
type Codec interface {
	// Encode encodes one chunk into k+m shards; see Code.Encode.
	Encode(dst [][]byte, data []byte) ([][]byte, error)
	// Decode returns the chunk a stripe encodes; see Code.Decode.
	Decode(dst []byte, shards [][]byte) ([]byte, error)
	// Reconstruct rebuilds lost or damaged shards; see Code.Reconstruct.
	Reconstruct(shards [][]byte, want []int) ([]int, error)
}

var _ Codec = (*Code)(nil)

// Code is a Reed-Solomon code with k data shards and m parity shards. It is safe for
// concurrent use; create one per EC class and share it.
type Code struct {
	k, m int
	enc  reedsolomon.Encoder
	pool sync.Pool // of *scratch
}

// New returns the code with k data shards and m parity shards. It returns an error of
// kind errors.Invalid unless 1 <= k <= MaxDataShards and 1 <= m <= MaxParityShards, or
// k=1 and m=0. A code with k=1 makes m+1 identical checksummed copies (its parity shards
// equal the data shard): cairn stores replicated classes other than STANDARD that way.
func New(k, m int) (*Code, error) {
	const op errors.Op = "erasure.New"
	if err := validate(k, m); err != nil {
		return nil, errors.E(op, errors.Invalid, err)
	}
	enc, err := reedsolomon.New(k, m)
	if err != nil {
		return nil, errors.E(op, errors.Invalid, err)
	}
	c := &Code{k: k, m: m, enc: enc}
	c.pool.New = func() any { return new(scratch) }
	return c, nil
}

func validate(k, m int) error {
	switch {
	case k < 1:
		return fmt.Errorf("EC class needs at least one data shard (k=%d)", k)
	case m < 1 && !(k == 1 && m == 0):
		return fmt.Errorf("EC class needs at least one parity shard (m=%d)", m)
	case k > MaxDataShards:
		return fmt.Errorf("EC class has too many data shards (k=%d, at most %d)", k, MaxDataShards)
	case m > MaxParityShards:
		return fmt.Errorf("EC class has too many parity shards (m=%d, at most %d)", m, MaxParityShards)
	}
	return nil
}

// ParseSpec parses an EC class as written on a command line, data shards "+" parity
// shards, for example "4+2" or "8+3", and checks it as New does. Surrounding spaces are
// ignored; anything else is an error of kind errors.Invalid.
func ParseSpec(s string) (k, m int, err error) {
	const op errors.Op = "erasure.ParseSpec"
	ks, ms, ok := strings.Cut(strings.TrimSpace(s), "+")
	k, okK := parseCount(ks)
	m, okM := parseCount(ms)
	if !ok || !okK || !okM {
		return 0, 0, errors.Errorf(op, errors.Invalid,
			"bad EC class %q: want data+parity shard counts, like 4+2", s)
	}
	if err := validate(k, m); err != nil {
		return 0, 0, errors.Errorf(op, errors.Invalid, "bad EC class %q: %w", s, err)
	}
	return k, m, nil
}

// parseCount parses a shard count: one to three decimal digits, nothing else (no sign).
func parseCount(s string) (int, bool) {
	if len(s) < 1 || len(s) > 3 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// K returns the number of data shards.
func (c *Code) K() int { return c.k }

// M returns the number of parity shards: how many shards of a stripe may be lost.
func (c *Code) M() int { return c.m }

// Shards returns k+m, the number of shards of a stripe.
func (c *Code) Shards() int { return c.k + c.m }

// String returns the code as ParseSpec reads it, for example "4+2".
func (c *Code) String() string { return strconv.Itoa(c.k) + "+" + strconv.Itoa(c.m) }

// ShardSize returns the payload length of each shard of an n-byte chunk: n/k rounded up.
func (c *Code) ShardSize(n int) int { return shardSize(n, c.k) }

// StripeSize returns the length of the k data payloads of an n-byte chunk: n rounded up to
// a multiple of k. A Decode buffer of StripeSize(max) bytes serves every chunk up to max.
func (c *Code) StripeSize(n int) int { return c.k * shardSize(n, c.k) }

func shardSize(n, k int) int { return (n + k - 1) / k }

// EncodeRaw computes the m parity shards of shards[k:] from the k data shards of
// shards[:k], in place, with no header: every shard has the same length, and byte x of
// each shard is one codeword. Block volumes (internal/volume) keep each shard as a
// mutable object of its own and range-write it in place, so a range [a, b) of the k data
// shards is encoded on its own into the same range of the parity shards.
func (c *Code) EncodeRaw(shards [][]byte) error {
	const op errors.Op = "erasure.EncodeRaw"
	if len(shards) != c.k+c.m {
		return errors.Errorf(op, errors.Invalid, "got %d shards, want %d for %v", len(shards), c.k+c.m, c)
	}
	if len(shards[0]) == 0 {
		return nil
	}
	if err := c.enc.Encode(shards); err != nil {
		return errors.E(op, errors.Invalid, err)
	}
	return nil
}

// ReconstructRaw rebuilds the shards of shards that are nil (of a length set by the
// others) from any k present ones, as EncodeRaw laid them out. Fewer than k present
// shards is ErrTooFewShards (kind IO).
func (c *Code) ReconstructRaw(shards [][]byte) error {
	const op errors.Op = "erasure.ReconstructRaw"
	if len(shards) != c.k+c.m {
		return errors.Errorf(op, errors.Invalid, "got %d shards, want %d for %v", len(shards), c.k+c.m, c)
	}
	have, size := 0, -1
	for _, s := range shards {
		if s != nil {
			have++
			size = len(s)
		}
	}
	if have < c.k {
		return errors.E(op, errors.IO, fmt.Errorf("%w: %d of %v", ErrTooFewShards, have, c))
	}
	if size == 0 {
		for i := range shards {
			if shards[i] == nil {
				shards[i] = []byte{}
			}
		}
		return nil
	}
	if err := c.enc.Reconstruct(shards); err != nil {
		return errors.E(op, errors.IO, err)
	}
	return nil
}
