package replica

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/wire"
)

// PutBatcher is a holder that takes several object writes in one call (a put batch,
// wire.PathObjectBatch, feature level 12): Local, Remote, and a Faults wrapper of either.
type PutBatcher interface {
	// PutBatch applies each of ws as Put would alone (its own version and precondition
	// checks, synced before it is answered; the writes of distinct keys share the group
	// commit) and returns each one's outcome, in ws's order. An error of the call itself
	// (the holder could not be reached, or refused the batch as a whole) is every
	// write's: the holder may have applied none, some or all of them, as when the answer
	// of a lone Put is lost. The writes must be of one bucket, object writes (Part 0)
	// with their final metadata known (FinalNow) and a body of Size bytes held in memory
	// (at most MaxBatchedBody).
	PutBatch(ctx context.Context, ws []Write) ([]RangeResult, error)
}

// MaxBatchedBody is the largest body a write may have to go in a put batch: a larger
// one goes alone, as a Put. It is the bound of the bodies the gateway hashes in memory
// and the rpc layer signs by their hash (smallBatch).
const MaxBatchedBody = 60 << 10

var (
	_ PutBatcher = (*Local)(nil)
	_ PutBatcher = (*Remote)(nil)
)

// PutBatch implements PutBatcher: the writes of distinct keys are applied in parallel
// (their syncs then share the group commit), those of one key one after the other.
func (l *Local) PutBatch(ctx context.Context, ws []Write) ([]RangeResult, error) {
	res := make([]RangeResult, len(ws))
	byKey(len(ws), func(i int) (string, string) { return ws[i].Bucket, ws[i].Key }, func(i int) {
		res[i].Object, res[i].Err = l.Put(ctx, ws[i])
	})
	return res, nil
}

// PutBatch implements PutBatcher: one signed request, whose answer's body is signed too
// (each result is bound to the request).
func (r *Remote) PutBatch(ctx context.Context, ws []Write) ([]RangeResult, error) {
	const op errors.Op = "replica.PutBatch"
	if len(ws) == 0 {
		return nil, errors.E(op, errors.Invalid, "an empty put batch")
	}
	bucket := ws[0].Bucket
	ows := make([]wire.ObjectWrite, len(ws))
	total := 0
	for i := range ws {
		w := &ws[i]
		if w.Bucket != bucket {
			return nil, errors.E(op, errors.Invalid, "a put batch's writes must be of one bucket")
		}
		if w.Part != 0 || w.Meta == nil || w.FinalNow == nil || w.Size < 0 || w.Size > MaxBatchedBody {
			return nil, errors.Errorf(op, errors.Invalid, "write %d cannot go in a put batch (a part, no final metadata, or a body of %d bytes)", i, w.Size)
		}
		meta, final := w.encoded()
		ows[i] = wire.ObjectWrite{Bucket: w.Bucket, Key: w.Key, Version: w.Version, ModTime: w.Meta.ModTime, Meta: meta, Final: final,
			Repair: w.Repair, IfAbsent: w.IfAbsent && !w.Repair}
		total += ows[i].Data() + int(w.Size)
	}
	if err := wire.CheckObjectBatch(ows); err != nil {
		return nil, err
	}
	if total > wire.MaxObjectBatchData {
		return nil, errors.Errorf(op, errors.TooLarge, "a put batch of more than %d bytes of data", wire.MaxObjectBatchData)
	}
	body := wire.AppendObjectBatchHead(make([]byte, 0, 8+len(ws)*96+total), len(ws))
	for i := range ows {
		w := &ws[i]
		// The body is read into the batch's buffer, after its header.
		body = wire.AppendObjectWriteHead(body, &ows[i], int(w.Size))
		if w.Size == 0 {
			continue
		}
		if w.Body == nil {
			return nil, errors.Errorf(op, errors.Invalid, "write %d of a put batch without its body", i)
		}
		n := len(body)
		body = body[:n+int(w.Size)]
		if _, err := io.ReadFull(w.Body, body[n:]); err != nil {
			return nil, BodyErr(err)
		}
	}
	return r.batch(ctx, wire.PathObjectBatch, rpc.CapObjectBatch, bucket, bytes.NewReader(body), len(body), len(ws))
}

// PutBatch implements PutBatcher: the faults apply to the call as to every call; a
// wrapped holder that takes no batches is an Invalid error.
func (x *faulty) PutBatch(ctx context.Context, ws []Write) ([]RangeResult, error) {
	s, err := x.before(ctx)
	if err != nil {
		return nil, err
	}
	pb, ok := x.r.(PutBatcher)
	if !ok {
		return nil, errors.E(errors.Invalid, "the holder takes no put batches")
	}
	if s.cutAfter >= 0 || s.hangAfter >= 0 {
		// A body that stops part way: nothing of the batch reaches the holder.
		total := int64(0)
		for i := range ws {
			total += ws[i].Size
		}
		if total > max(s.cutAfter, s.hangAfter) {
			return nil, errors.E(errors.Transient, "body cut (injected fault)")
		}
	}
	res, err := pb.PutBatch(ctx, ws)
	return after(s, x.r.ID(), res, err)
}

// objectBatch serves PathObjectBatch: the body is read whole (which checks it against
// its signature) and decoded, and every write's metadata parsed, before any write is
// applied, so a cut, forged, malformed or oversized batch writes nothing.
func (h *Handler) objectBatch(w http.ResponseWriter, r *http.Request) {
	const op errors.Op = "replica.objectBatch"
	bucket, body, err := h.readBatch(r, op, "an object batch", rpc.CapObjectBatch, wire.MaxObjectBatchBody)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	ows, err := wire.DecodeObjectBatch(body)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	ws := make([]Write, len(ows))
	for i := range ows {
		o := &ows[i]
		if o.Bucket != bucket {
			wire.WriteError(w, errors.Errorf(op, errors.Permission, "write %d of an object batch of bucket %s is of bucket %s: nothing was written", i, bucket, o.Bucket))
			return
		}
		meta, err := wire.DecodeMeta(o.Meta)
		var final *object.Object
		if err == nil {
			final, err = wire.DecodeMeta(o.Final)
		}
		if err != nil {
			wire.WriteError(w, errors.E(op, errors.Invalid, fmt.Errorf("write %d of an object batch: nothing was written: %w", i, err)))
			return
		}
		meta.ModTime = o.ModTime
		ws[i] = Write{Bucket: o.Bucket, Key: o.Key, Meta: meta, Body: bytes.NewReader(o.Body), Size: int64(len(o.Body)),
			Version: o.Version, FinalNow: final, Repair: o.Repair, IfAbsent: o.IfAbsent}
	}
	res, err := h.local.PutBatch(r.Context(), ws)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	answerBatch(w, res)
}
