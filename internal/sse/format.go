// Package sse is the at-rest format of server-side encrypted object bodies and the keys
// behind it (docs/design/sse.md): a streaming encrypting reader that turns a plaintext
// body into a segment of AES-256-GCM packages, range decryption of objects made of one
// segment per part, the sealing of per-object data keys (under a master key, SSE-S3, or
// under the key a client sends, SSE-C) and the master keyring read from
// --master-key-file. It does no I/O of its own beyond reading that file: the S3 layer
// gives it readers and a source of stored ranges. It knows nothing of S3 headers or of
// where bytes are stored.
package sse

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"io"

	"github.com/cairnfs/cairn/internal/errors"
)

// Format constants (format version 1).
const (
	// PackageSize is the plaintext size of every package but a segment's last.
	PackageSize = 64 << 10
	// HeaderSize is the size of a segment's header.
	HeaderSize = 32
	// TagSize is the GCM tag each package carries.
	TagSize = 16
	// KeySize is the size of data keys, master keys and SSE-C keys (AES-256).
	KeySize = 32

	packageShift = 16 // log2(PackageSize), stored in the header
	sealedSize   = PackageSize + TagSize
	saltSize     = 24
	segmentInfo  = "cairn/sse/v1/segment"
)

var magic = [4]byte{'C', 'S', 'E', '1'}

// NewDataKey returns a fresh random data key.
func NewDataKey() []byte {
	k := make([]byte, KeySize)
	rand.Read(k)
	return k
}

// packages returns the number of packages of a segment of p plaintext bytes.
func packages(p int64) int64 {
	if p <= 0 {
		return 1
	}
	return (p + PackageSize - 1) / PackageSize
}

// CipherSize returns the stored size of a segment of plain bytes; -1 (unknown) stays -1.
func CipherSize(plain int64) int64 {
	if plain < 0 {
		return -1
	}
	return HeaderSize + plain + TagSize*packages(plain)
}

// PlainSize returns the plaintext size of a stored segment of c bytes. It fails with
// Corrupt if no plaintext size encrypts to c bytes.
func PlainSize(c int64) (int64, error) {
	body := c - HeaderSize
	if body < TagSize {
		return 0, errors.Errorf("sse.PlainSize", errors.Corrupt, "a segment of %d bytes is too short", c)
	}
	n := (body + sealedSize - 1) / sealedSize
	p := body - TagSize*n
	if CipherSize(p) != c {
		return 0, errors.Errorf("sse.PlainSize", errors.Corrupt, "no plaintext encrypts to a segment of %d bytes", c)
	}
	return p, nil
}

// PlainSizes returns the plaintext sizes of stored segments, and their sum.
func PlainSizes(segs []int64) ([]int64, int64, error) {
	out := make([]int64, len(segs))
	var total int64
	for i, c := range segs {
		p, err := PlainSize(c)
		if err != nil {
			return nil, 0, err
		}
		out[i] = p
		total += p
	}
	return out, total, nil
}

// segmentAEAD derives a segment's cipher from the data key and the header's salt.
func segmentAEAD(dataKey, salt []byte) (cipher.AEAD, error) {
	if len(dataKey) != KeySize {
		return nil, errors.Errorf("sse", errors.Invalid, "a data key is %d bytes, want %d", len(dataKey), KeySize)
	}
	k, err := hkdf.Key(sha256.New, dataKey, salt, segmentInfo, KeySize)
	if err != nil {
		return nil, errors.E(errors.Other, err)
	}
	return newGCM(k)
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, errors.E(errors.Invalid, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, errors.E(errors.Other, err)
	}
	return aead, nil
}

// nonce fills n with the nonce of package i.
func nonce(n *[12]byte, i uint64, final bool) {
	binary.BigEndian.PutUint64(n[:8], i)
	f := uint32(0)
	if final {
		f = 1
	}
	binary.BigEndian.PutUint32(n[8:], f)
}

// parseHeader checks a segment header and returns its cipher.
func parseHeader(hdr []byte, dataKey []byte) (cipher.AEAD, error) {
	if len(hdr) != HeaderSize || [4]byte(hdr[:4]) != magic || hdr[4] != packageShift || hdr[5]|hdr[6]|hdr[7] != 0 {
		return nil, errors.E(errors.Op("sse.decrypt"), errors.Corrupt, "not a segment header of format version 1")
	}
	return segmentAEAD(dataKey, hdr[8:])
}

// Reader encrypts a plaintext stream into one segment: a header and packages, sealed as
// they are read. It holds one package of plaintext and one of ciphertext.
type Reader struct {
	src    io.Reader
	aead   cipher.AEAD
	hdr    [HeaderSize]byte
	hdrOff int // header bytes already returned
	pt     []byte
	have   int // plaintext bytes in pt
	out    []byte
	outOff int
	idx    uint64
	done   bool // the final package was sealed
	plain  int64
}

// NewReader returns a Reader of src's bytes as a new segment under dataKey (a fresh
// salt, hence a fresh segment key, every time). Errors of src are returned as they are.
func NewReader(src io.Reader, dataKey []byte) (*Reader, error) {
	r := &Reader{src: src, pt: make([]byte, PackageSize+1), out: make([]byte, 0, sealedSize)}
	copy(r.hdr[:4], magic[:])
	r.hdr[4] = packageShift
	rand.Read(r.hdr[8:])
	aead, err := segmentAEAD(dataKey, r.hdr[8:])
	if err != nil {
		return nil, err
	}
	r.aead = aead
	return r, nil
}

// Plain returns the number of plaintext bytes read from the source so far.
func (r *Reader) Plain() int64 { return r.plain }

func (r *Reader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if r.hdrOff < HeaderSize {
			k := copy(p[n:], r.hdr[r.hdrOff:])
			r.hdrOff += k
			n += k
			continue
		}
		if r.outOff < len(r.out) {
			k := copy(p[n:], r.out[r.outOff:])
			r.outOff += k
			n += k
			continue
		}
		if r.done {
			if n > 0 {
				return n, nil
			}
			return 0, io.EOF
		}
		if n > 0 {
			return n, nil // do not block on the source with bytes in hand
		}
		if err := r.seal(); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// seal reads the next package of plaintext (one byte more, to know whether it is the
// last) and seals it into out.
func (r *Reader) seal() error {
	for r.have < len(r.pt) {
		k, err := r.src.Read(r.pt[r.have:])
		r.have += k
		r.plain += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	var nc [12]byte
	if r.have == len(r.pt) {
		nonce(&nc, r.idx, false)
		r.out = r.aead.Seal(r.out[:0], nc[:], r.pt[:PackageSize], nil)
		r.pt[0] = r.pt[PackageSize]
		r.have = 1
	} else {
		nonce(&nc, r.idx, true)
		r.out = r.aead.Seal(r.out[:0], nc[:], r.pt[:r.have], nil)
		r.have = 0
		r.done = true
	}
	r.outOff = 0
	r.idx++
	return nil
}

// Source reads stored bytes of an object: [off, off+n) written to w.
// gateway.ObjectReader is one.
type Source interface {
	WriteRange(ctx context.Context, w io.Writer, off, n int64) (int64, error)
}

// WriteRange writes the plaintext bytes [off, off+n) of an object stored as the
// segments of sizes segs (a single-part object: one, its size; a multipart object: its
// part sizes) under dataKey to w, reading from src only the headers and packages the
// range needs and holding one package at a time. It fails with Corrupt if a package does
// not authenticate; bytes already written to w stay written.
func WriteRange(ctx context.Context, src Source, dataKey []byte, segs []int64, w io.Writer, off, n int64) (int64, error) {
	const op errors.Op = "sse.WriteRange"
	var written, soff, poff int64
	var d *decrypter
	for _, c := range segs {
		if n <= 0 || poff >= off+n {
			break
		}
		p, err := PlainSize(c)
		if err != nil {
			return written, errors.E(op, err)
		}
		if off < poff+p {
			a := max(off, poff) - poff
			b := min(off+n, poff+p) - poff
			if d == nil {
				d = &decrypter{buf: make([]byte, 0, sealedSize), w: w}
			}
			k, err := d.segment(ctx, src, dataKey, soff, c, p, a, b)
			written += k
			if err != nil {
				return written, errors.E(op, err)
			}
		}
		soff += c
		poff += p
	}
	if written != n && n > 0 {
		return written, errors.Errorf(op, errors.Invalid, "range [%d, %d) is beyond the object's %d bytes", off, off+n, poff)
	}
	return written, nil
}

// StoredStart returns the stored offset of the first segment a read at plaintext offset
// off touches (where WriteRange reads first), for readers that fetch ahead.
func StoredStart(segs []int64, off int64) int64 {
	var soff, poff int64
	for _, c := range segs {
		p, err := PlainSize(c)
		if err != nil || off < poff+p {
			return soff
		}
		soff += c
		poff += p
	}
	return soff
}

// decrypter is the writer WriteRange has a source write a segment's stored bytes to:
// the header, then whole packages, decrypted one at a time.
type decrypter struct {
	w       io.Writer
	buf     []byte
	key     []byte
	hdr     [HeaderSize]byte
	hn      int
	aead    cipher.AEAD
	idx     uint64 // the package being received
	last    uint64 // the segment's last package
	lastLen int    // its stored length
	skip    int    // plaintext bytes of the first package not asked for
	remain  int64  // plaintext bytes still to write
	written int64
	err     error // a failed write to w
}

// segment decrypts plaintext [a, b) of the segment of c stored (p plain) bytes at stored
// offset soff.
func (d *decrypter) segment(ctx context.Context, src Source, dataKey []byte, soff, c, p, a, b int64) (int64, error) {
	first, lastNeeded := a/PackageSize, (b-1)/PackageSize
	count := packages(p)
	d.key, d.hn, d.aead, d.buf = dataKey, 0, nil, d.buf[:0]
	d.idx, d.last = uint64(first), uint64(count-1)
	d.lastLen = int(c - HeaderSize - (count-1)*sealedSize)
	d.skip, d.remain, d.written, d.err = int(a-first*PackageSize), b-a, 0, nil
	start := soff + HeaderSize + first*sealedSize
	end := min(soff+HeaderSize+(lastNeeded+1)*sealedSize, soff+c)
	if first == 0 {
		start = soff // header and packages in one read
	} else if err := d.read(ctx, src, soff, HeaderSize); err != nil {
		return 0, err
	}
	if err := d.read(ctx, src, start, end-start); err != nil {
		return d.written, err
	}
	if d.remain != 0 || len(d.buf) != 0 {
		return d.written, errors.E(errors.Corrupt, "a segment ended inside a package")
	}
	return d.written, nil
}

func (d *decrypter) read(ctx context.Context, src Source, off, n int64) error {
	k, err := src.WriteRange(ctx, d, off, n)
	if d.err != nil {
		return d.err
	}
	if err != nil {
		return err
	}
	if k != n {
		return errors.Errorf("sse.decrypt", errors.Corrupt, "read %d stored bytes of %d", k, n)
	}
	return nil
}

func (d *decrypter) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		if d.aead == nil {
			k := copy(d.hdr[d.hn:], p)
			d.hn += k
			p = p[k:]
			if d.hn == HeaderSize {
				aead, err := parseHeader(d.hdr[:], d.key)
				if err != nil {
					d.err = err
					return 0, err
				}
				d.aead = aead
			}
			continue
		}
		if d.idx > d.last {
			d.err = errors.E(errors.Corrupt, "bytes past a segment's last package")
			return 0, d.err
		}
		want := sealedSize
		if d.idx == d.last {
			want = d.lastLen
		}
		var sealed []byte
		if len(d.buf) == 0 && len(p) >= want {
			sealed, p = p[:want], p[want:]
		} else {
			k := min(want-len(d.buf), len(p))
			d.buf = append(d.buf, p[:k]...)
			p = p[k:]
			if len(d.buf) < want {
				continue
			}
			sealed = d.buf
		}
		if err := d.open(sealed); err != nil {
			d.err = err
			return 0, err
		}
	}
	return total, nil
}

// open decrypts one whole package and writes the part of it asked for.
func (d *decrypter) open(sealed []byte) error {
	var nc [12]byte
	nonce(&nc, d.idx, d.idx == d.last)
	// sealed is d.buf (decrypted in place, which GCM allows) or the source's bytes.
	pt, err := d.aead.Open(d.buf[:0], nc[:], sealed, nil)
	if err != nil {
		return errors.Errorf("sse.decrypt", errors.Corrupt, "package %d of a segment does not authenticate (changed, reordered, truncated, or another key)", d.idx)
	}
	d.idx++
	if d.skip > 0 {
		pt = pt[min(d.skip, len(pt)):]
		d.skip = 0
	}
	if int64(len(pt)) > d.remain {
		pt = pt[:d.remain]
	}
	if len(pt) > 0 {
		k, err := d.w.Write(pt)
		d.written += int64(k)
		d.remain -= int64(k)
		if err != nil {
			return err
		}
	}
	d.buf = d.buf[:0]
	return nil
}
