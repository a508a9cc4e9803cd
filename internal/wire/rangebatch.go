package wire

import (
	"encoding/binary"
	"fmt"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// A range batch (PathRangeBatch, feature level 11) carries several in-place writes of
// mutable objects to one holder in one request: the writes a volume's writer has queued
// for that holder while an earlier request to it was in flight. The holder applies each
// one as a lone PathRange write (its own order check and fence) and answers each one's
// result (RangeBatchAnswer). The body (version 1), all integers big-endian:
//
//	"CRB" version (1 byte) | count (4)
//	count times: flags (1: 1 a hole, 2 unsynced) | bucket length (2) bucket |
//	  key length (2) key | size, offset, prev, next, length (8 each) |
//	  the data (length bytes; none for a hole)
//
// The request's body is authenticated by package rpc as every internode body is
// (its hash in the signature, or a trailer MAC checked at its end): the holder reads it
// whole, and so checks it, before it applies anything.
const (
	// RangeBatchVersion is the version of the batch body this build writes and reads.
	RangeBatchVersion = 1
	// MaxRangeBatchWrites bounds the writes of one batch.
	MaxRangeBatchWrites = 64
	// MaxRangeBatchData bounds the data bytes of one batch (a write larger than that goes
	// alone, as a PathRange write).
	MaxRangeBatchData = 8 << 20
	// MaxRangeBatchBody bounds a batch body: its data and the largest headers.
	MaxRangeBatchBody = MaxRangeBatchData + MaxRangeBatchWrites*(rangeHeadFixed+maxBatchBucket+maxBatchKey) + batchHead

	batchHead      = 8
	rangeHeadFixed = 1 + 2 + 2 + 5*8
	maxBatchBucket = 255
	maxBatchKey    = 1024

	rangeFlagHole     = 1
	rangeFlagUnsynced = 2
)

// AppendRangeBatchHead appends the start of a batch body of n writes to dst.
func AppendRangeBatchHead(dst []byte, n int) []byte {
	dst = append(dst, 'C', 'R', 'B', RangeBatchVersion)
	return binary.BigEndian.AppendUint32(dst, uint32(n))
}

// AppendRangeWriteHead appends the header of one write of a batch body to dst; its data
// (w.Data, none for a hole) follows it in the body.
func AppendRangeWriteHead(dst []byte, w *object.RangeWrite) []byte {
	var flags byte
	if w.Data == nil {
		flags |= rangeFlagHole
	}
	if w.Unsynced {
		flags |= rangeFlagUnsynced
	}
	dst = append(dst, flags)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(w.Bucket)))
	dst = append(dst, w.Bucket...)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(w.Key)))
	dst = append(dst, w.Key...)
	for _, v := range [...]uint64{uint64(w.Size), uint64(w.Off), w.Prev, w.Next, uint64(w.Length())} {
		dst = binary.BigEndian.AppendUint64(dst, v)
	}
	return dst
}

// CheckRangeBatch checks that ws can be sent as one batch: 1 to MaxRangeBatchWrites
// writes, at most MaxRangeBatchData bytes of data, bucket and key names within their
// bounds.
func CheckRangeBatch(ws []object.RangeWrite) error {
	if len(ws) == 0 || len(ws) > MaxRangeBatchWrites {
		return errors.Errorf("wire.CheckRangeBatch", errors.Invalid, "a range batch of %d writes (1 to %d)", len(ws), MaxRangeBatchWrites)
	}
	data := 0
	for i := range ws {
		w := &ws[i]
		if len(w.Bucket) == 0 || len(w.Bucket) > maxBatchBucket || len(w.Key) == 0 || len(w.Key) > maxBatchKey {
			return errors.Errorf("wire.CheckRangeBatch", errors.Invalid, "write %d of a range batch: bucket or key name of a wrong length", i)
		}
		if data += len(w.Data); data > MaxRangeBatchData {
			return errors.Errorf("wire.CheckRangeBatch", errors.TooLarge, "a range batch of more than %d bytes of data", MaxRangeBatchData)
		}
	}
	return nil
}

// DecodeRangeBatch parses a batch body. The writes' Data alias b. A body that is not
// whole, holds bytes after its last write, or breaks a bound is refused (Invalid,
// TooLarge) as a whole: the caller applies nothing of it.
func DecodeRangeBatch(b []byte) ([]object.RangeWrite, error) {
	const op errors.Op = "wire.DecodeRangeBatch"
	if len(b) > MaxRangeBatchBody {
		return nil, errors.Errorf(op, errors.TooLarge, "a range batch body of %d bytes (at most %d)", len(b), MaxRangeBatchBody)
	}
	if len(b) < batchHead || string(b[:3]) != "CRB" {
		return nil, errors.E(op, errors.Invalid, "not a range batch body")
	}
	if b[3] != RangeBatchVersion {
		return nil, errors.Errorf(op, errors.Invalid, "range batch version %d; this node reads version %d", b[3], RangeBatchVersion)
	}
	n := binary.BigEndian.Uint32(b[4:8])
	if n == 0 || n > MaxRangeBatchWrites {
		return nil, errors.Errorf(op, errors.Invalid, "a range batch of %d writes (1 to %d)", n, MaxRangeBatchWrites)
	}
	ws := make([]object.RangeWrite, n)
	p := b[batchHead:]
	short := func(i int) error {
		return errors.Errorf(op, errors.Invalid, "range batch cut short in write %d of %d", i, n)
	}
	data := 0
	for i := range ws {
		if len(p) < 1+2 {
			return nil, short(i)
		}
		flags := p[0]
		if flags&^(rangeFlagHole|rangeFlagUnsynced) != 0 {
			return nil, errors.Errorf(op, errors.Invalid, "write %d of a range batch: unknown flags %#x", i, flags)
		}
		bl := int(binary.BigEndian.Uint16(p[1:3]))
		p = p[3:]
		if bl == 0 || bl > maxBatchBucket || len(p) < bl+2 {
			return nil, short(i)
		}
		bucket := string(p[:bl])
		p = p[bl:]
		kl := int(binary.BigEndian.Uint16(p[:2]))
		p = p[2:]
		if kl == 0 || kl > maxBatchKey || len(p) < kl+5*8 {
			return nil, short(i)
		}
		w := object.RangeWrite{Bucket: bucket, Key: string(p[:kl]), Unsynced: flags&rangeFlagUnsynced != 0}
		p = p[kl:]
		var v [5]uint64
		for j := range v {
			v[j] = binary.BigEndian.Uint64(p[8*j:])
		}
		p = p[5*8:]
		w.Size, w.Off, w.Prev, w.Next = int64(v[0]), int64(v[1]), v[2], v[3]
		length := v[4]
		if length == 0 || length > MaxRangeBatchData || w.Size <= 0 || w.Off < 0 {
			return nil, errors.Errorf(op, errors.Invalid, "write %d of a range batch: length %d at offset %d of an object of %d bytes", i, length, w.Off, w.Size)
		}
		if flags&rangeFlagHole != 0 {
			w.Len = int64(length)
		} else {
			if data += int(length); data > MaxRangeBatchData {
				return nil, errors.Errorf(op, errors.TooLarge, "a range batch of more than %d bytes of data", MaxRangeBatchData)
			}
			if uint64(len(p)) < length {
				return nil, short(i)
			}
			w.Data = p[:length:length]
			p = p[length:]
		}
		ws[i] = w
	}
	if len(p) != 0 {
		return nil, errors.E(op, errors.Invalid, fmt.Sprintf("%d bytes after the last write of a range batch", len(p)))
	}
	return ws, nil
}

// RangeBatchAnswer answers a range batch: one result per write, in the batch's order.
// Its body is bound to the signed answer (HdrBodySum): a result cannot be changed in
// transit.
type RangeBatchAnswer struct {
	Results []RangeResult `json:"results"`
}

// RangeResult is one write's outcome: the record afterwards (EncodeMeta), or its error's
// code (Code), sentinel name and message, as WriteError would have answered it alone.
type RangeResult struct {
	Meta  string `json:"meta,omitempty"`
	Code  Code   `json:"code,omitempty"`
	Name  string `json:"name,omitempty"`
	Error string `json:"error,omitempty"`
}

// RangeResultOf is the result of a write that returned o, err.
func RangeResultOf(o *object.Object, err error) RangeResult {
	if err != nil {
		return RangeResult{Code: CodeOf(errors.KindOf(err)), Name: sentinelName(err), Error: err.Error()}
	}
	return RangeResult{Meta: EncodeMeta(o)}
}

// Outcome rebuilds the record or the error of a result.
func (r RangeResult) Outcome() (*object.Object, error) {
	if r.Error == "" && r.Code == 0 {
		if r.Meta == "" {
			return nil, errors.E(errors.Invalid, "a range batch result with neither a record nor an error")
		}
		return DecodeMeta(r.Meta)
	}
	k, known := r.Code.Kind()
	if !known {
		k = errors.IO // a newer node's new kind: the outcome is unknown to this node
	}
	text := r.Error
	if text == "" {
		text = "range write failed"
	}
	if s, ok := sentinels[r.Name]; ok {
		return nil, errors.E(k, fmt.Errorf("%s: %w", text, s))
	}
	return nil, errors.E(k, text)
}
