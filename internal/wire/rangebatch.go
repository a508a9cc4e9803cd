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
	dst = appendNames(append(dst, flags), w.Bucket, w.Key)
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
		if err := checkNames("wire.CheckRangeBatch", "a range batch", i, w.Bucket, w.Key); err != nil {
			return err
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
	n, err := batchHeadOf(op, "a range batch", b, "CRB", RangeBatchVersion, MaxRangeBatchBody, MaxRangeBatchWrites)
	if err != nil {
		return nil, err
	}
	ws := make([]object.RangeWrite, n)
	r := &batchReader{p: b[batchHead:]}
	short := func(i int) error {
		return errors.Errorf(op, errors.Invalid, "range batch cut short in write %d of %d", i, n)
	}
	data := 0
	for i := range ws {
		flags := r.u8()
		if flags&^(rangeFlagHole|rangeFlagUnsynced) != 0 {
			return nil, errors.Errorf(op, errors.Invalid, "write %d of a range batch: unknown flags %#x", i, flags)
		}
		w := object.RangeWrite{Unsynced: flags&rangeFlagUnsynced != 0}
		w.Bucket = string(r.next(r.u16()))
		w.Key = string(r.next(r.u16()))
		w.Size, w.Off, w.Prev, w.Next = int64(r.u64()), int64(r.u64()), r.u64(), r.u64()
		length := r.u64()
		if r.short {
			return nil, short(i)
		}
		if err := checkNames(op, "a range batch", i, w.Bucket, w.Key); err != nil {
			return nil, err
		}
		if length == 0 || length > MaxRangeBatchData || w.Size <= 0 || w.Off < 0 {
			return nil, errors.Errorf(op, errors.Invalid, "write %d of a range batch: length %d at offset %d of an object of %d bytes", i, length, w.Off, w.Size)
		}
		if flags&rangeFlagHole != 0 {
			w.Len = int64(length)
		} else {
			if data += int(length); data > MaxRangeBatchData {
				return nil, errors.Errorf(op, errors.TooLarge, "a range batch of more than %d bytes of data", MaxRangeBatchData)
			}
			if w.Data = r.next(int(length)); r.short {
				return nil, short(i)
			}
		}
		ws[i] = w
	}
	if len(r.p) != 0 {
		return nil, errors.E(op, errors.Invalid, fmt.Sprintf("%d bytes after the last write of a range batch", len(r.p)))
	}
	return ws, nil
}

// RangeBatchAnswer answers a range batch or an object batch: one result per write, in the batch's order.
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
