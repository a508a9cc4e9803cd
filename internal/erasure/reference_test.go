package erasure

import (
	"bytes"
	"testing"
)

// This file computes parity from the definition in docs/design/20261123_erasure.md,
// independently of the Reed-Solomon library, so that algorithm 1 of the shard format is
// pinned to its written definition: arithmetic in GF(2^8) modulo x^8+x^4+x^3+x^2+1
// (0x11D); V is the (k+m)×k Vandermonde matrix V[r][c] = r^c (0^0 = 1); the coding matrix
// is G = V × inverse(V[0:k]), whose top k rows are the identity; parity shard k+j is
// byte by byte row k+j of G times the k data payloads.

func gfMul(a, b byte) byte {
	var p byte
	for b != 0 {
		if b&1 != 0 {
			p ^= a
		}
		carry := a & 0x80
		a <<= 1
		if carry != 0 {
			a ^= 0x1D
		}
		b >>= 1
	}
	return p
}

func gfPow(a byte, n int) byte {
	p := byte(1)
	for range n {
		p = gfMul(p, a)
	}
	return p
}

func gfInv(a byte) byte { return gfPow(a, 254) } // a^255 = 1 for a != 0

// refMatrix returns G for a k+m code.
func refMatrix(k, m int) [][]byte {
	v := make([][]byte, k+m)
	for r := range v {
		v[r] = make([]byte, k)
		for c := range v[r] {
			v[r][c] = gfPow(byte(r), c)
		}
	}
	// Invert the top k×k square by Gauss-Jordan elimination on [top | I].
	a := make([][]byte, k)
	for r := range a {
		a[r] = make([]byte, 2*k)
		copy(a[r], v[r])
		a[r][k+r] = 1
	}
	for col := range k {
		pivot := col
		for a[pivot][col] == 0 {
			pivot++
		}
		a[col], a[pivot] = a[pivot], a[col]
		inv := gfInv(a[col][col])
		for j := range a[col] {
			a[col][j] = gfMul(a[col][j], inv)
		}
		for r := range k {
			if r != col && a[r][col] != 0 {
				f := a[r][col]
				for j := range a[r] {
					a[r][j] ^= gfMul(f, a[col][j])
				}
			}
		}
	}
	g := make([][]byte, k+m)
	for r := range g {
		g[r] = make([]byte, k)
		for c := range k {
			var x byte
			for i := range k {
				x ^= gfMul(v[r][i], a[i][k+c])
			}
			g[r][c] = x
		}
	}
	return g
}

func TestReferenceParity(t *testing.T) {
	for _, km := range [][2]int{{1, 1}, {2, 1}, {3, 2}, {4, 2}, {8, 3}, {10, 4}, {32, 16}} {
		c := newCode(t, km[0], km[1])
		t.Run(c.String(), func(t *testing.T) {
			k, m := km[0], km[1]
			g := refMatrix(k, m)
			for r := range k {
				for col := range k {
					if r == col && g[r][col] != 1 || r != col && g[r][col] != 0 {
						t.Fatalf("G is not systematic: row %d = %x", r, g[r])
					}
				}
			}
			shards := encode(t, c, chunk(9, 777))
			size := c.ShardSize(777)
			for j := range m {
				want := make([]byte, size)
				for b := range size {
					var x byte
					for i := range k {
						x ^= gfMul(g[k+j][i], shards[i][HeaderSize+b])
					}
					want[b] = x
				}
				if got := shards[k+j][HeaderSize:]; !bytes.Equal(got, want) {
					t.Fatalf("parity shard %d differs from the reference:\n got %x\nwant %x", k+j, got[:8], want[:8])
				}
			}
		})
	}
}

func TestGFMul(t *testing.T) {
	// Spot values of GF(2^8) modulo 0x11D: products, and powers of the generator 2.
	for _, tc := range []struct{ a, b, want byte }{
		{0, 7, 0}, {1, 0x53, 0x53}, {2, 0x80, 0x1D}, {3, 7, 9},
	} {
		if got := gfMul(tc.a, tc.b); got != tc.want {
			t.Errorf("%#x * %#x = %#x, want %#x", tc.a, tc.b, got, tc.want)
		}
	}
	for _, tc := range []struct {
		n    int
		want byte
	}{{8, 0x1D}, {9, 0x3A}, {12, 0xCD}, {25, 0x03}, {255, 1}} {
		if got := gfPow(2, tc.n); got != tc.want {
			t.Errorf("2^%d = %#x, want %#x", tc.n, got, tc.want)
		}
	}
	seen := map[byte]bool{}
	for n := range 255 {
		seen[gfPow(2, n)] = true
	}
	if len(seen) != 255 {
		t.Errorf("2 generates %d elements, want 255", len(seen))
	}
	for a := 1; a < 256; a++ {
		if gfMul(byte(a), gfInv(byte(a))) != 1 {
			t.Fatalf("%#x has no inverse", a)
		}
	}
}
