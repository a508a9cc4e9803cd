package erasure

// The figures measured with these benchmarks are in docs/design/20261123_erasure.md.

import (
	"fmt"
	"slices"
	"testing"
)

// benchCases are the codes and chunk sizes benchmarked.
func benchCases(b *testing.B, fn func(b *testing.B, c *Code, data []byte)) {
	for _, km := range [][2]int{{4, 2}, {8, 3}} {
		c := newCode(b, km[0], km[1])
		for _, size := range []int{1 << 20, 4 << 20} {
			data := chunk(uint64(size), size)
			b.Run(fmt.Sprintf("%v/%dMiB", c, size>>20), func(b *testing.B) {
				b.SetBytes(int64(size))
				b.ReportAllocs()
				fn(b, c, data)
			})
		}
	}
}

// BenchmarkEncode encodes a chunk into reused shard buffers: copy, parity and checksums.
func BenchmarkEncode(b *testing.B) {
	benchCases(b, func(b *testing.B, c *Code, data []byte) {
		shards := encode(b, c, data)
		for b.Loop() {
			if _, err := c.Encode(shards, data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecode is the healthy read: checks and copies the k data shards.
func BenchmarkDecode(b *testing.B) {
	benchCases(b, func(b *testing.B, c *Code, data []byte) {
		shards := encode(b, c, data)
		out := make([]byte, c.StripeSize(len(data)))
		for b.Loop() {
			if _, err := c.Decode(out, shards); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecodeDegraded reads with two data shards missing: the parity shards are
// checked and two data shards reconstructed.
func BenchmarkDecodeDegraded(b *testing.B) {
	benchCases(b, func(b *testing.B, c *Code, data []byte) {
		shards := encode(b, c, data)
		shards[0], shards[1] = nil, nil
		out := make([]byte, c.StripeSize(len(data)))
		for b.Loop() {
			if _, err := c.Decode(out, shards); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkReconstruct rebuilds one lost data shard, as repair does for a dead node.
func BenchmarkReconstruct(b *testing.B) {
	benchCases(b, func(b *testing.B, c *Code, data []byte) {
		orig := encode(b, c, data)
		shards := slices.Clone(orig)
		for b.Loop() {
			shards[2] = nil
			if _, err := c.Reconstruct(shards, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
