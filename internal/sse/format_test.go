package sse

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
)

// memSource serves stored bytes, writing them in pieces of step bytes so that the
// decrypter sees packages split across writes and several packages in one write.
type memSource struct {
	b     []byte
	step  int
	reads int
}

func (m *memSource) WriteRange(_ context.Context, w io.Writer, off, n int64) (int64, error) {
	m.reads++
	if off < 0 || off+n > int64(len(m.b)) {
		return 0, errors.E(errors.Invalid, "range out of bounds")
	}
	var done int64
	for done < n {
		k := min(int64(m.step), n-done)
		if _, err := w.Write(m.b[off+done : off+done+k]); err != nil {
			return done, err
		}
		done += k
	}
	return done, nil
}

func plaintext(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// encrypt returns pt as one stored segment.
func encrypt(t testing.TB, key, pt []byte) []byte {
	t.Helper()
	r, err := NewReader(bytes.NewReader(pt), key)
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(out)) != CipherSize(int64(len(pt))) || r.Plain() != int64(len(pt)) {
		t.Fatalf("segment of %d plaintext bytes is %d bytes (plain %d), want %d", len(pt), len(out), r.Plain(), CipherSize(int64(len(pt))))
	}
	return out
}

var boundarySizes = []int{0, 1, 15, 16, 17, PackageSize - 1, PackageSize, PackageSize + 1, 2*PackageSize - 1, 2 * PackageSize, 3*PackageSize + 17}

func TestSizes(t *testing.T) {
	for p := int64(0); p < 4*PackageSize+100; p += 1 + p/7 {
		c := CipherSize(p)
		got, err := PlainSize(c)
		if err != nil || got != p {
			t.Fatalf("PlainSize(CipherSize(%d) = %d) = %d, %v", p, c, got, err)
		}
	}
	for _, c := range []int64{0, 31, 32, 47, HeaderSize + sealedSize + 1, HeaderSize + sealedSize + 16} {
		if p, err := PlainSize(c); err == nil {
			t.Errorf("PlainSize(%d) = %d, want an error", c, p)
		}
	}
	if CipherSize(-1) != -1 {
		t.Error("CipherSize(-1) != -1")
	}
}

func TestRoundTripRanges(t *testing.T) {
	key := NewDataKey()
	for _, size := range boundarySizes {
		pt := plaintext(uint64(size), size)
		seg := encrypt(t, key, pt)
		if size >= 16 && bytes.Contains(seg, pt[:16]) {
			t.Fatalf("size %d: plaintext visible in the segment", size)
		}
		// Ranges starting and ending at and around every package boundary.
		var cuts []int64
		for b := int64(0); b <= int64(size); b += PackageSize {
			for _, d := range []int64{-1, 0, 1} {
				if v := b + d; v >= 0 && v <= int64(size) {
					cuts = append(cuts, v)
				}
			}
		}
		cuts = append(cuts, int64(size))
		for _, step := range []int{1 << 20, 4096, 7} {
			if step == 7 && size > 2*PackageSize {
				continue // slow, and nothing new
			}
			src := &memSource{b: seg, step: step}
			for _, a := range cuts {
				for _, b := range cuts {
					if b <= a {
						continue
					}
					var out bytes.Buffer
					n, err := WriteRange(context.Background(), src, key, []int64{int64(len(seg))}, &out, a, b-a)
					if err != nil || n != b-a || !bytes.Equal(out.Bytes(), pt[a:b]) {
						t.Fatalf("size %d step %d range [%d,%d): n=%d err=%v equal=%v", size, step, a, b, n, err, bytes.Equal(out.Bytes(), pt[a:b]))
					}
				}
			}
		}
	}
}

func TestMultiSegment(t *testing.T) {
	key := NewDataKey()
	sizes := []int{PackageSize + 5, 0, 3, 2 * PackageSize, 100}
	var all, stored []byte
	var segs []int64
	for i, n := range sizes {
		pt := plaintext(uint64(100+i), n)
		seg := encrypt(t, key, pt)
		all = append(all, pt...)
		stored = append(stored, seg...)
		segs = append(segs, int64(len(seg)))
	}
	_, total, err := PlainSizes(segs)
	if err != nil || total != int64(len(all)) {
		t.Fatalf("PlainSizes = %d, %v; want %d", total, err, len(all))
	}
	src := &memSource{b: stored, step: 5000}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 300; i++ {
		a := r.Int64N(int64(len(all)))
		b := a + 1 + r.Int64N(int64(len(all))-a)
		var out bytes.Buffer
		if n, err := WriteRange(context.Background(), src, key, segs, &out, a, b-a); err != nil || n != b-a || !bytes.Equal(out.Bytes(), all[a:b]) {
			t.Fatalf("range [%d,%d) across parts: n=%d err=%v", a, b, n, err)
		}
	}
	var out bytes.Buffer
	if _, err := WriteRange(context.Background(), src, key, segs, &out, 0, int64(len(all))+1); err == nil {
		t.Fatal("a range beyond the end was served")
	}
	// A read in the third segment starts there.
	if got, want := StoredStart(segs, int64(sizes[0])+1), segs[0]+segs[1]; got != want {
		t.Fatalf("StoredStart = %d, want %d", got, want)
	}
}

// TestTampering: every change of the stored bytes that keeps the segment's length, and
// truncation at a package boundary, is detected; other keys do not open it.
func TestTampering(t *testing.T) {
	key := NewDataKey()
	pt := plaintext(9, 3*PackageSize+100)
	seg := encrypt(t, key, pt)
	read := func(stored []byte, k []byte) error {
		var out bytes.Buffer
		p, err := PlainSize(int64(len(stored)))
		if err != nil {
			return err
		}
		_, err = WriteRange(context.Background(), &memSource{b: stored, step: 1 << 20}, k, []int64{int64(len(stored))}, &out, 0, p)
		return err
	}
	if err := read(seg, key); err != nil {
		t.Fatal(err)
	}
	flip := func(i int) []byte { b := bytes.Clone(seg); b[i] ^= 0x20; return b }
	swap := func() []byte {
		b := bytes.Clone(seg)
		p0 := b[HeaderSize : HeaderSize+sealedSize]
		p1 := bytes.Clone(b[HeaderSize+sealedSize : HeaderSize+2*sealedSize])
		copy(b[HeaderSize+sealedSize:], p0)
		copy(b[HeaderSize:], p1)
		return b
	}
	other := encrypt(t, key, pt) // same key and plaintext, another salt
	mixed := append(bytes.Clone(seg[:HeaderSize+sealedSize]), other[HeaderSize+sealedSize:]...)
	for _, tc := range []struct {
		name   string
		stored []byte
		key    []byte
	}{
		{"magic", flip(0), key},
		{"salt", flip(20), key},
		{"first package", flip(HeaderSize + 5), key},
		{"a tag", flip(HeaderSize + sealedSize - 1), key},
		{"last byte", flip(len(seg) - 1), key},
		{"reordered packages", swap(), key},
		{"truncated at a package boundary", seg[:HeaderSize+3*sealedSize], key},
		{"truncated inside a package", seg[:len(seg)-40], key},
		{"packages of another segment", mixed, key},
		{"another data key", seg, NewDataKey()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := read(tc.stored, tc.key); err == nil {
				t.Fatal("the change was not detected")
			} else if !errors.Is(errors.Corrupt, err) {
				t.Fatalf("error %v, want a Corrupt one", err)
			}
		})
	}
}

// TestNonceUniqueness: the same plaintext under the same data key (a part uploaded
// twice) is sealed under another segment key: no package repeats, no header repeats.
func TestNonceUniqueness(t *testing.T) {
	key := NewDataKey()
	pt := make([]byte, 4*PackageSize) // zeros: equal packages would show
	seen := map[string]bool{}
	for i := 0; i < 20; i++ {
		seg := encrypt(t, key, pt)
		hdr := string(seg[:HeaderSize])
		if seen[hdr] {
			t.Fatal("a segment header repeated")
		}
		seen[hdr] = true
		for off := HeaderSize; off < len(seg); off += sealedSize {
			end := min(off+sealedSize, len(seg))
			pk := string(seg[off:end])
			if seen[pk] {
				t.Fatalf("a sealed package repeated (segment %d, offset %d)", i, off)
			}
			seen[pk] = true
		}
	}
	var n1, n2 [12]byte
	nonce(&n1, 3, false)
	nonce(&n2, 3, true)
	if n1 == n2 {
		t.Fatal("the final flag does not change the nonce")
	}
}

// errAfter fails after n bytes.
type errAfter struct {
	n   int
	err error
}

func (e *errAfter) Read(p []byte) (int, error) {
	if e.n == 0 {
		return 0, e.err
	}
	k := min(len(p), e.n)
	e.n -= k
	return k, nil
}

func TestReaderPassesSourceErrors(t *testing.T) {
	want := errors.E(errors.TooLarge, "too large")
	r, err := NewReader(&errAfter{n: PackageSize + 3, err: want}, NewDataKey())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(r); err != want {
		t.Fatalf("ReadAll: %v, want the source's error", err)
	}
	if _, err := NewReader(bytes.NewReader(nil), []byte("short")); err == nil {
		t.Fatal("a short data key was accepted")
	}
}

func FuzzDecrypt(f *testing.F) {
	key := bytes.Repeat([]byte{7}, KeySize)
	for _, n := range []int{0, 1, 100, PackageSize + 1} {
		seg := encrypt(f, key, plaintext(uint64(n), n))
		f.Add(seg, int64(0), int64(n))
		f.Add(seg[:len(seg)-1], int64(1), int64(n/2))
	}
	f.Fuzz(func(t *testing.T, stored []byte, off, n int64) {
		var out bytes.Buffer
		src := &memSource{b: stored, step: 1000}
		p, err := PlainSize(int64(len(stored)))
		if err != nil {
			return
		}
		if off < 0 || n < 0 || off+n > p || off+n < 0 {
			return
		}
		k, err := WriteRange(context.Background(), src, key, []int64{int64(len(stored))}, &out, off, n)
		if err == nil && (k != n || int64(out.Len()) != n) {
			t.Fatalf("no error but %d bytes of %d", k, n)
		}
	})
}

func BenchmarkEncrypt(b *testing.B) {
	key := NewDataKey()
	pt := plaintext(1, 16<<20)
	b.SetBytes(int64(len(pt)))
	for b.Loop() {
		r, _ := NewReader(bytes.NewReader(pt), key)
		io.Copy(io.Discard, r)
	}
}

func BenchmarkDecrypt(b *testing.B) {
	key := NewDataKey()
	pt := plaintext(1, 16<<20)
	seg := encrypt(b, key, pt)
	src := &memSource{b: seg, step: 256 << 10}
	b.SetBytes(int64(len(pt)))
	for b.Loop() {
		WriteRange(context.Background(), src, key, []int64{int64(len(seg))}, io.Discard, 0, int64(len(pt)))
	}
}
