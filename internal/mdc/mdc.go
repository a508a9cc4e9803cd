// Package mdc is the format of multi-data-center replication between linked cairn
// clusters (docs/design/mdc.md): the frames a batch of changes travels in (a record and
// its body each), and what an investigation compares, per-partition digests of the
// linked buckets' records and the records that differ. Who sends, signs, applies and
// repairs is package server's.
package mdc

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"io"
	"strconv"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// Limits of a batch: a frame header's size, and the changes of one batch.
const (
	MaxHeader  = 1 << 20
	MaxChanges = 10_000
	// MaxBody bounds one change's body (S3's largest object).
	MaxBody = 5 << 40
)

// magic starts every batch: the format and its version.
const magic = "cairn-mdc/1\n"

// Change is one replicated change: the origin's record of Bucket/Key (its version,
// flags and in-place metadata; Size bytes of body follow it in a batch unless it is a
// record without a body).
type Change struct {
	Bucket string        `json:"b"`
	Key    string        `json:"k"`
	Rec    object.Object `json:"r"`
	// Origin is the id of the cluster the change was made in, if not the sender's (a
	// change the sender received over another link); "" for the sender's own. A reader
	// before it ignores it.
	Origin string `json:"o,omitempty"`
}

// HasBody reports whether a body follows the change's header.
func (c *Change) HasBody() bool { return !c.Rec.Deleted }

// Writer writes a batch.
type Writer struct {
	w     io.Writer
	began bool
	n     int
}

// NewWriter returns a Writer of a batch to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes one change and, if it has one, its body (exactly c.Rec.Size bytes read
// from body).
func (bw *Writer) Write(c *Change, body io.Reader) error {
	const op errors.Op = "mdc.Write"
	if bw.n >= MaxChanges {
		return errors.E(op, errors.TooLarge, "too many changes in one batch")
	}
	if !bw.began {
		if _, err := io.WriteString(bw.w, magic); err != nil {
			return errors.E(op, errors.Transient, err)
		}
		bw.began = true
	}
	rec := c.Rec
	rec.Body, rec.Chunks = nil, nil
	hdr, err := json.Marshal(Change{Bucket: c.Bucket, Key: c.Key, Rec: rec, Origin: c.Origin})
	if err != nil {
		return errors.E(op, errors.Invalid, err)
	}
	if len(hdr) > MaxHeader {
		return errors.E(op, errors.TooLarge, "a change's header is too large")
	}
	var lb [binary.MaxVarintLen64]byte
	if _, err := bw.w.Write(lb[:binary.PutUvarint(lb[:], uint64(len(hdr)))]); err != nil {
		return errors.E(op, errors.Transient, err)
	}
	if _, err := bw.w.Write(hdr); err != nil {
		return errors.E(op, errors.Transient, err)
	}
	bw.n++
	if !c.HasBody() {
		return nil
	}
	if body == nil {
		if c.Rec.Size == 0 {
			return nil
		}
		return errors.E(op, errors.Invalid, "a change with a body needs one")
	}
	n, err := io.Copy(bw.w, io.LimitReader(body, c.Rec.Size))
	if err != nil {
		return errors.E(op, errors.Transient, err)
	}
	if n != c.Rec.Size {
		return errors.Errorf(op, errors.Transient, "the body of %s/%s ended after %d of %d bytes", c.Bucket, c.Key, n, c.Rec.Size)
	}
	return nil
}

// Reader reads a batch.
type Reader struct {
	r     *bufio.Reader
	began bool
	n     int
	body  *io.LimitedReader // the last change's body, until read
}

// NewReader returns a Reader of the batch in r.
func NewReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReaderSize(r, 64<<10)} }

// Next returns the next change and its body (nil for a record without one; read it
// before calling Next again: what is left of it is skipped), or io.EOF after the last.
// A malformed batch is an error of kind Invalid.
func (br *Reader) Next() (*Change, io.Reader, error) {
	const op errors.Op = "mdc.Next"
	if br.body != nil {
		if _, err := io.Copy(io.Discard, br.body); err != nil {
			return nil, nil, errors.E(op, errors.Transient, err)
		}
		if br.body.N > 0 {
			return nil, nil, errors.E(op, errors.Invalid, "a batch cut inside a body")
		}
		br.body = nil
	}
	if !br.began {
		m := make([]byte, len(magic))
		if _, err := io.ReadFull(br.r, m); err != nil {
			if err == io.EOF {
				return nil, nil, io.EOF // an empty batch
			}
			return nil, nil, errors.E(op, errors.Invalid, "not a replication batch")
		}
		if string(m) != magic {
			return nil, nil, errors.E(op, errors.Invalid, "not a replication batch (or another version of the format)")
		}
		br.began = true
	}
	n, err := binary.ReadUvarint(br.r)
	if err == io.EOF {
		return nil, nil, io.EOF
	}
	if err != nil {
		return nil, nil, errors.E(op, errors.Invalid, "a batch cut inside a header's length")
	}
	if n == 0 || n > MaxHeader {
		return nil, nil, errors.E(op, errors.Invalid, "a change header of "+strconv.FormatUint(n, 10)+" bytes")
	}
	if br.n++; br.n > MaxChanges {
		return nil, nil, errors.E(op, errors.Invalid, "too many changes in one batch")
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(br.r, hdr); err != nil {
		return nil, nil, errors.E(op, errors.Invalid, "a batch cut inside a header")
	}
	var c Change
	if err := json.Unmarshal(hdr, &c); err != nil {
		return nil, nil, errors.E(op, errors.Invalid, "a change header that does not decode: "+err.Error())
	}
	if err := c.check(); err != nil {
		return nil, nil, errors.E(op, err)
	}
	if !c.HasBody() {
		return &c, nil, nil
	}
	br.body = &io.LimitedReader{R: br.r, N: c.Rec.Size}
	return &c, br.body, nil
}

// check refuses a change no cluster could have sent.
func (c *Change) check() error {
	switch {
	case c.Bucket == "" || len(c.Bucket) > 63:
		return errors.E(errors.Invalid, "a change without a valid bucket name")
	case c.Key == "" || len(c.Key) > 1024:
		return errors.E(errors.Invalid, "a change without a valid key")
	case c.Rec.HLC == 0:
		return errors.E(errors.Invalid, "a change without a version")
	case c.Rec.Size < 0 || c.Rec.Size > MaxBody:
		return errors.E(errors.Invalid, "a change with an impossible size")
	case c.Rec.Deleted && c.Rec.Size != 0:
		return errors.E(errors.Invalid, "a record without a body that has a size")
	case c.Rec.Purged && !c.Rec.Versioned:
		return errors.E(errors.Invalid, "a purge of an unversioned key")
	case len(c.Rec.Body) > 0 || len(c.Rec.Chunks) > 0:
		return errors.E(errors.Invalid, "a change header that carries a layout")
	case len(c.Origin) > 64:
		return errors.E(errors.Invalid, "a change with an impossible origin")
	}
	return nil
}
