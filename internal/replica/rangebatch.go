package replica

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/wire"
)

// RangeBatcher is a holder that takes several range writes in one call (a range batch,
// wire.PathRangeBatch, feature level 11): Local, Remote, and a Faults wrapper of either.
type RangeBatcher interface {
	// WriteRanges applies each of ws as WriteRange would alone (its own order check
	// and fence; writes of one key in the order given) and returns each one's outcome,
	// in ws's order. An error of the call itself (the holder could not be reached, or
	// refused the batch as a whole) is every write's: the holder may have applied none,
	// some or all of them, as when the answer of a lone WriteRange is lost. The writes
	// must be of one bucket.
	WriteRanges(ctx context.Context, ws []object.RangeWrite) ([]RangeResult, error)
}

// The bounds of one range batch: its writes, and the bytes of their data (a larger
// write goes alone, as a WriteRange).
const (
	MaxBatchWrites = wire.MaxRangeBatchWrites
	MaxBatchData   = wire.MaxRangeBatchData
)

// RangeResult is the outcome of one write of a batch: the record afterwards, or the
// error WriteRange would have returned.
type RangeResult struct {
	Object *object.Object
	Err    error
}

var (
	_ RangeBatcher = (*Local)(nil)
	_ RangeBatcher = (*Remote)(nil)
)

// WriteRanges implements RangeBatcher: the writes of distinct keys are applied in
// parallel (synced ones then share their syncs), those of one key one after the other.
func (l *Local) WriteRanges(ctx context.Context, ws []object.RangeWrite) ([]RangeResult, error) {
	res := make([]RangeResult, len(ws))
	if len(ws) == 1 {
		res[0].Object, res[0].Err = l.WriteRange(ctx, ws[0])
		return res, nil
	}
	byKey := make(map[string][]int, len(ws))
	var keys []string
	for i := range ws {
		k := ws[i].Bucket + "\x00" + ws[i].Key
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], i)
	}
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Add(1)
		go func(idx []int) {
			defer wg.Done()
			for _, i := range idx {
				res[i].Object, res[i].Err = l.WriteRange(ctx, ws[i])
			}
		}(byKey[k])
	}
	wg.Wait()
	return res, nil
}

// WriteRanges implements RangeBatcher: one signed request, whose answer's body is signed
// too (each result is bound to the request).
func (r *Remote) WriteRanges(ctx context.Context, ws []object.RangeWrite) ([]RangeResult, error) {
	if err := wire.CheckRangeBatch(ws); err != nil {
		return nil, err
	}
	bucket := ws[0].Bucket
	total := 0
	for i := range ws {
		if ws[i].Bucket != bucket {
			return nil, errors.E(errors.Invalid, "a range batch's writes must be of one bucket")
		}
		total += len(ws[i].Data)
	}
	// The headers in one buffer; the data, if large, is sent from the writes' own
	// buffers (no copy).
	heads := wire.AppendRangeBatchHead(make([]byte, 0, 8+len(ws)*128+inlineBody(total)), len(ws))
	var body io.Reader
	size := 0
	if total <= smallBatch {
		for i := range ws {
			heads = wire.AppendRangeWriteHead(heads, &ws[i])
			heads = append(heads, ws[i].Data...)
		}
		body, size = bytes.NewReader(heads), len(heads)
	} else {
		ends := make([]int, len(ws))
		for i := range ws {
			heads = wire.AppendRangeWriteHead(heads, &ws[i])
			ends[i] = len(heads)
		}
		bufs := make(net.Buffers, 0, 2*len(ws)+1)
		start := 0
		for i := range ws {
			bufs = append(bufs, heads[start:ends[i]])
			if len(ws[i].Data) > 0 {
				bufs = append(bufs, ws[i].Data)
			}
			start = ends[i]
		}
		size = len(heads) + total
		body = &bufs
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	resp, err := r.RPC.Do(ctx, &rpc.Request{Method: http.MethodPost, Addr: r.Addr, Path: wire.PathRangeBatch,
		Query: url.Values{wire.QBucket: {bucket}, wire.QLength: {strconv.Itoa(size)}},
		Body:  body, Size: int64(size), Cap: &rpc.Cap{Op: rpc.CapRangeBatch, Bucket: bucket}})
	if err != nil {
		return nil, err
	}
	raw, err := rpc.ReadSignedBody(resp, maxBatchAnswer)
	if err != nil {
		return nil, errors.E(errors.Transient, fmt.Errorf("node %s: the answer of a range batch: %w", r.Node, err))
	}
	var ans wire.RangeBatchAnswer
	if err := json.Unmarshal(raw, &ans); err != nil || len(ans.Results) != len(ws) {
		return nil, errors.E(errors.Transient, fmt.Errorf("node %s: malformed answer to a range batch of %d writes (%d results, %v): their outcome is unknown", r.Node, len(ws), len(ans.Results), err))
	}
	res := make([]RangeResult, len(ws))
	for i, a := range ans.Results {
		res[i].Object, res[i].Err = a.Outcome()
	}
	return res, nil
}

// smallBatch is the largest data of a batch sent from one buffer (a body the rpc layer
// signs by its hash, held in memory anyway).
const smallBatch = 60 << 10

func inlineBody(total int) int {
	if total <= smallBatch {
		return total
	}
	return 0
}

// maxBatchAnswer bounds the answer of a range batch: a record or an error per write.
const maxBatchAnswer = wire.MaxRangeBatchWrites * 8 << 10

// WriteRanges implements RangeBatcher: the faults apply to the call as to every call; a
// wrapped holder that takes no batches is an Invalid error.
func (x *faulty) WriteRanges(ctx context.Context, ws []object.RangeWrite) ([]RangeResult, error) {
	s, err := x.before(ctx)
	if err != nil {
		return nil, err
	}
	rb, ok := x.r.(RangeBatcher)
	if !ok {
		return nil, errors.E(errors.Invalid, "the holder takes no range batches")
	}
	if s.cutAfter >= 0 || s.hangAfter >= 0 {
		total := int64(0)
		for i := range ws {
			total += int64(len(ws[i].Data))
		}
		// A body that stops part way: nothing of the batch reaches the holder.
		if total > max(s.cutAfter, s.hangAfter) {
			return nil, errors.E(errors.Transient, "body cut (injected fault)")
		}
	}
	res, err := rb.WriteRanges(ctx, ws)
	return after(s, x.r.ID(), res, err)
}

// rangeBatch serves PathRangeBatch: the body is read whole (which checks it against
// its signature) and decoded before any write is applied, so a cut, forged, malformed or
// oversized batch writes nothing.
func (h *Handler) rangeBatch(w http.ResponseWriter, r *http.Request) {
	const op errors.Op = "replica.rangeBatch"
	if r.Method != http.MethodPost {
		wire.WriteError(w, errors.E(op, errors.Invalid, "range batches are POSTs"))
		return
	}
	q := r.URL.Query()
	bucket := q.Get(wire.QBucket)
	if err := h.cfg.Secret.CheckCap(r.Header.Get(rpc.HdrCap), rpc.CapRangeBatch, bucket, "", time.Now()); err != nil {
		h.log.Warn("refused an internode request", "path", r.URL.Path, "from", r.Header.Get(rpc.HdrNode), "remote", r.RemoteAddr, "err", err)
		wire.WriteError(w, err)
		return
	}
	n, err := strconv.Atoi(q.Get(wire.QLength))
	if err != nil || n <= 0 {
		wire.WriteError(w, errors.E(op, errors.Invalid, "a range batch needs its body's length: nothing was written"))
		return
	}
	if n > wire.MaxRangeBatchBody {
		wire.WriteError(w, errors.Errorf(op, errors.TooLarge, "a range batch body of %d bytes (at most %d): nothing was written", n, wire.MaxRangeBatchBody))
		return
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r.Body, body); err != nil {
		wire.WriteError(w, errors.E(op, errors.Invalid, fmt.Errorf("range batch body cut short: nothing was written: %w", err)))
		return
	}
	// Reading to the end checks a streamed body against its signature (rpc).
	if m, err := io.ReadFull(r.Body, make([]byte, 1)); m != 0 || err != io.EOF {
		if err == nil || err == io.ErrUnexpectedEOF {
			err = errors.E(op, errors.Invalid, "range batch body longer than its length: nothing was written")
		}
		wire.WriteError(w, err)
		return
	}
	ws, err := wire.DecodeRangeBatch(body)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	for i := range ws {
		if ws[i].Bucket != bucket {
			wire.WriteError(w, errors.Errorf(op, errors.Permission, "write %d of a range batch of bucket %s is of bucket %s: nothing was written", i, bucket, ws[i].Bucket))
			return
		}
	}
	res, err := h.local.WriteRanges(r.Context(), ws)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	ans := wire.RangeBatchAnswer{Results: make([]wire.RangeResult, len(res))}
	for i, x := range res {
		ans.Results[i] = wire.RangeResultOf(x.Object, x.Err)
	}
	b, _ := json.Marshal(ans)
	rpc.WriteSignedBody(w, "application/json", b)
}
