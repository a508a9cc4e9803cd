package wire

import (
	"encoding/binary"
	"fmt"

	"github.com/cairnfs/cairn/internal/errors"
)

// An object batch (PathObjectBatch, feature level 12: put batches) carries several
// replica writes of small object versions to one holder in one request: the writes a
// gateway has queued for that holder while its earlier requests to it were in flight.
// The holder applies each one as a lone PathObject PUT (its own version and
// precondition checks, its own sync, shared by the group commit with the others) and
// answers each one's result in a RangeBatchAnswer. The body (version 1), all integers
// big-endian:
//
//	"COB" version (1 byte) | count (4)
//	count times: flags (1: 1 repair, 2 if absent) | bucket length (2) bucket |
//	  key length (2) key | version, mod time (8 each) |
//	  meta length (4) meta | final length (4) final | body length (4) body
//
// meta and final are the record and the coordinator's final metadata as EncodeMeta
// makes them (HdrMeta and HdrFinal of a lone PUT). The request's body is authenticated
// by package rpc as every internode body is; the holder reads it whole, and so checks
// it, before it applies anything.
const (
	// ObjectBatchVersion is the version of the object batch body this build writes and
	// reads.
	ObjectBatchVersion = 1
	// MaxObjectBatchWrites bounds the writes of one object batch.
	MaxObjectBatchWrites = MaxRangeBatchWrites
	// MaxObjectBatchData bounds the bytes of the writes of one batch: their bodies and
	// metadata (a larger write goes alone).
	MaxObjectBatchData = MaxRangeBatchData
	// MaxObjectBatchBody bounds an object batch body: its data and the largest headers.
	MaxObjectBatchBody = MaxObjectBatchData + MaxObjectBatchWrites*(objectHeadFixed+maxBatchBucket+maxBatchKey) + batchHead

	objectHeadFixed = 1 + 2 + 2 + 2*8 + 3*4

	objectFlagRepair   = 1
	objectFlagIfAbsent = 2
)

// ObjectWrite is one write of an object batch.
type ObjectWrite struct {
	Bucket, Key string
	// Version is the HLC of the version (QVersion of a lone PUT); ModTime its time
	// (QModTime).
	Version uint64
	ModTime int64
	// Meta and Final are the encoded record and final metadata (EncodeMeta).
	Meta, Final string
	// Body is the object's bytes (nil: none).
	Body []byte
	// Repair and IfAbsent are QRepair and QIfAbsent of a lone PUT.
	Repair, IfAbsent bool
}

// Data is the bytes w counts against MaxObjectBatchData.
func (w *ObjectWrite) Data() int { return len(w.Meta) + len(w.Final) + len(w.Body) }

// AppendObjectBatchHead appends the start of an object batch body of n writes to dst.
func AppendObjectBatchHead(dst []byte, n int) []byte {
	dst = append(dst, 'C', 'O', 'B', ObjectBatchVersion)
	return binary.BigEndian.AppendUint32(dst, uint32(n))
}

// AppendObjectWrite appends one write of an object batch body to dst.
func AppendObjectWrite(dst []byte, w *ObjectWrite) []byte {
	return append(AppendObjectWriteHead(dst, w, len(w.Body)), w.Body...)
}

// AppendObjectWriteHead appends one write of an object batch body to dst but its body,
// of n bytes, which the caller appends next (w.Body is not used).
func AppendObjectWriteHead(dst []byte, w *ObjectWrite, n int) []byte {
	var flags byte
	if w.Repair {
		flags |= objectFlagRepair
	}
	if w.IfAbsent {
		flags |= objectFlagIfAbsent
	}
	dst = appendNames(append(dst, flags), w.Bucket, w.Key)
	dst = binary.BigEndian.AppendUint64(dst, w.Version)
	dst = binary.BigEndian.AppendUint64(dst, uint64(w.ModTime))
	for _, s := range [...]string{w.Meta, w.Final} {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(s)))
		dst = append(dst, s...)
	}
	return binary.BigEndian.AppendUint32(dst, uint32(n))
}

// appendNames appends a batch write's bucket and key, each after its length (2 bytes).
func appendNames(dst []byte, bucket, key string) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(bucket)))
	dst = append(dst, bucket...)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(key)))
	return append(dst, key...)
}

// checkNames checks a batch write's bucket and key names against their bounds.
func checkNames(op errors.Op, what string, i int, bucket, key string) error {
	if len(bucket) == 0 || len(bucket) > maxBatchBucket || len(key) == 0 || len(key) > maxBatchKey {
		return errors.Errorf(op, errors.Invalid, "write %d of %s: bucket or key name of a wrong length", i, what)
	}
	return nil
}

// CheckObjectBatch checks that ws can be sent as one object batch: 1 to
// MaxObjectBatchWrites writes, at most MaxObjectBatchData bytes of data, names within
// their bounds, each with its record and final metadata.
func CheckObjectBatch(ws []ObjectWrite) error {
	const op errors.Op = "wire.CheckObjectBatch"
	if len(ws) == 0 || len(ws) > MaxObjectBatchWrites {
		return errors.Errorf(op, errors.Invalid, "an object batch of %d writes (1 to %d)", len(ws), MaxObjectBatchWrites)
	}
	data := 0
	for i := range ws {
		w := &ws[i]
		if err := checkNames(op, "an object batch", i, w.Bucket, w.Key); err != nil {
			return err
		}
		if w.Meta == "" || w.Final == "" {
			return errors.Errorf(op, errors.Invalid, "write %d of an object batch without its record or final metadata", i)
		}
		if data += w.Data(); data > MaxObjectBatchData {
			return errors.Errorf(op, errors.TooLarge, "an object batch of more than %d bytes of data", MaxObjectBatchData)
		}
	}
	return nil
}

// batchReader reads a batch body front to back; a read past its end sets short.
type batchReader struct {
	p     []byte
	short bool
}

func (r *batchReader) next(n int) []byte {
	if r.short || n < 0 || len(r.p) < n {
		r.short = true
		return nil
	}
	b := r.p[:n:n]
	r.p = r.p[n:]
	return b
}

func (r *batchReader) u8() byte {
	if b := r.next(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *batchReader) u16() int {
	if b := r.next(2); b != nil {
		return int(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (r *batchReader) u32() int {
	if b := r.next(4); b != nil {
		return int(binary.BigEndian.Uint32(b))
	}
	return 0
}

func (r *batchReader) u64() uint64 {
	if b := r.next(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

// batchHeadOf checks a batch body's size, magic and version and returns its count of
// writes (1 to max).
func batchHeadOf(op errors.Op, what string, b []byte, magic string, version byte, maxBody int, max uint32) (uint32, error) {
	if len(b) > maxBody {
		return 0, errors.Errorf(op, errors.TooLarge, "%s body of %d bytes (at most %d)", what, len(b), maxBody)
	}
	if len(b) < batchHead || string(b[:3]) != magic {
		return 0, errors.Errorf(op, errors.Invalid, "not %s body", what)
	}
	if b[3] != version {
		return 0, errors.Errorf(op, errors.Invalid, "%s of version %d; this node reads version %d", what, b[3], version)
	}
	n := binary.BigEndian.Uint32(b[4:8])
	if n == 0 || n > max {
		return 0, errors.Errorf(op, errors.Invalid, "%s of %d writes (1 to %d)", what, n, max)
	}
	return n, nil
}

// DecodeObjectBatch parses an object batch body. The writes' Body alias b. A body that
// is not whole, holds bytes after its last write, or breaks a bound is refused
// (Invalid, TooLarge) as a whole: the caller applies nothing of it.
func DecodeObjectBatch(b []byte) ([]ObjectWrite, error) {
	const op errors.Op = "wire.DecodeObjectBatch"
	n, err := batchHeadOf(op, "an object batch", b, "COB", ObjectBatchVersion, MaxObjectBatchBody, MaxObjectBatchWrites)
	if err != nil {
		return nil, err
	}
	ws := make([]ObjectWrite, n)
	r := &batchReader{p: b[batchHead:]}
	data := 0
	for i := range ws {
		flags := r.u8()
		if flags&^(objectFlagRepair|objectFlagIfAbsent) != 0 {
			return nil, errors.Errorf(op, errors.Invalid, "write %d of an object batch: unknown flags %#x", i, flags)
		}
		w := ObjectWrite{Repair: flags&objectFlagRepair != 0, IfAbsent: flags&objectFlagIfAbsent != 0}
		w.Bucket = string(r.next(r.u16()))
		w.Key = string(r.next(r.u16()))
		w.Version, w.ModTime = r.u64(), int64(r.u64())
		w.Meta = string(r.next(r.u32()))
		w.Final = string(r.next(r.u32()))
		if body := r.next(r.u32()); len(body) > 0 {
			w.Body = body
		}
		if r.short {
			return nil, errors.Errorf(op, errors.Invalid, "object batch cut short in write %d of %d", i, n)
		}
		if err := checkNames(op, "an object batch", i, w.Bucket, w.Key); err != nil {
			return nil, err
		}
		if w.Meta == "" || w.Final == "" {
			return nil, errors.Errorf(op, errors.Invalid, "write %d of an object batch without its record or final metadata", i)
		}
		if data += w.Data(); data > MaxObjectBatchData {
			return nil, errors.Errorf(op, errors.TooLarge, "an object batch of more than %d bytes of data", MaxObjectBatchData)
		}
		ws[i] = w
	}
	if len(r.p) != 0 {
		return nil, errors.E(op, errors.Invalid, fmt.Sprintf("%d bytes after the last write of an object batch", len(r.p)))
	}
	return ws, nil
}
