package bench

import (
	"bytes"
	"io"
	"math/rand/v2"
)

// patternSize is the period of the object contents: every body is the endless repetition
// of one random pattern, entered at an offset derived from the object's key and version.
// Bodies of any size cost no memory, and a GET can be checked byte for byte.
const patternSize = 4 << 20

// pattern is the random content all bodies are cut from. It is read-only once made.
type pattern struct {
	data []byte
}

func newPattern() *pattern {
	p := &pattern{data: make([]byte, patternSize)}
	rand.NewChaCha8([32]byte{'c', 'a', 'i', 'r', 'n', ' ', 'b', 'e', 'n', 'c', 'h'}).Read(p.data)
	return p
}

// offset is where the body of version ver of key starts in the pattern (FNV-1a of the key,
// mixed with the version by a splitmix64 step).
func (p *pattern) offset(key string, ver uint32) int {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	h ^= uint64(ver) * 0x9e3779b97f4a7c15
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return int(h % uint64(len(p.data)))
}

// body returns a reader of size bytes of version ver of key.
func (p *pattern) body(key string, ver uint32, size int64) *bodyReader {
	return &bodyReader{p: p, start: p.offset(key, ver), size: size}
}

// bodyReader streams an object body from the pattern. It implements io.WriterTo so that
// net/http writes the pattern's bytes straight to the connection.
type bodyReader struct {
	p     *pattern
	start int   // offset of byte 0 in the pattern
	size  int64 // body length
	pos   int64 // bytes already read
}

// Read implements io.Reader.
func (b *bodyReader) Read(buf []byte) (int, error) {
	if b.pos >= b.size {
		return 0, io.EOF
	}
	chunk := b.next(int64(len(buf)))
	n := copy(buf, chunk)
	b.pos += int64(n)
	return n, nil
}

// WriteTo implements io.WriterTo.
func (b *bodyReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for b.pos < b.size {
		n, err := w.Write(b.next(1 << 20))
		b.pos += int64(n)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// Close implements io.Closer.
func (b *bodyReader) Close() error { return nil }

// next is the next at most limit bytes of the body, without advancing.
func (b *bodyReader) next(limit int64) []byte {
	off := (int64(b.start) + b.pos) % int64(len(b.p.data))
	n := min(limit, b.size-b.pos, int64(len(b.p.data))-off)
	return b.p.data[off : off+n]
}

// verifier compares a body read piecewise with what version ver of key should hold.
type verifier struct {
	p   *pattern
	off int // pattern offset of the next byte expected
	ok  bool
}

func (p *pattern) verifier(key string, ver uint32) verifier {
	return verifier{p: p, off: p.offset(key, ver), ok: true}
}

// check compares the next bytes of the body.
func (v *verifier) check(got []byte) {
	for len(got) > 0 && v.ok {
		want := v.p.data[v.off:]
		n := min(len(got), len(want))
		v.ok = bytes.Equal(got[:n], want[:n])
		got = got[n:]
		v.off = (v.off + n) % len(v.p.data)
	}
}
