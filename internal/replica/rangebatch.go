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
	byKey(len(ws), func(i int) (string, string) { return ws[i].Bucket, ws[i].Key }, func(i int) {
		res[i].Object, res[i].Err = l.WriteRange(ctx, ws[i])
	})
	return res, nil
}

// byKey calls apply(i) for each of n writes, those of distinct keys (key(i): bucket and
// key) in parallel, those of one key one after the other in their order, and returns
// when all have returned.
func byKey(n int, key func(i int) (bucket, key string), apply func(i int)) {
	if n == 1 {
		apply(0)
		return
	}
	idx := make(map[[2]string][]int, n)
	var keys [][2]string
	for i := range n {
		b, k := key(i)
		bk := [2]string{b, k}
		if _, ok := idx[bk]; !ok {
			keys = append(keys, bk)
		}
		idx[bk] = append(idx[bk], i)
	}
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Add(1)
		go func(is []int) {
			defer wg.Done()
			for _, i := range is {
				apply(i)
			}
		}(idx[k])
	}
	wg.Wait()
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
	return r.batch(ctx, wire.PathRangeBatch, rpc.CapRangeBatch, bucket, body, size, len(ws))
}

// batch sends a batch body of size bytes and n writes to path, within Timeout, and
// returns each write's result from the signed answer.
func (r *Remote) batch(ctx context.Context, path, capOp, bucket string, body io.Reader, size, n int) ([]RangeResult, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	resp, err := r.RPC.Do(ctx, &rpc.Request{Method: http.MethodPost, Addr: r.Addr, Path: path,
		Query: url.Values{wire.QBucket: {bucket}, wire.QLength: {strconv.Itoa(size)}},
		Body:  body, Size: int64(size), Cap: &rpc.Cap{Op: capOp, Bucket: bucket}})
	if err != nil {
		return nil, err
	}
	raw, err := rpc.ReadSignedBody(resp, maxBatchAnswer)
	if err != nil {
		return nil, errors.E(errors.Transient, fmt.Errorf("node %s: the answer of a batch: %w", r.Node, err))
	}
	var ans wire.RangeBatchAnswer
	if err := json.Unmarshal(raw, &ans); err != nil || len(ans.Results) != n {
		return nil, errors.E(errors.Transient, fmt.Errorf("node %s: malformed answer to a batch of %d writes (%d results, %v): their outcome is unknown", r.Node, n, len(ans.Results), err))
	}
	res := make([]RangeResult, n)
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
	bucket, body, err := h.readBatch(r, op, "a range batch", rpc.CapRangeBatch, wire.MaxRangeBatchBody)
	if err != nil {
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
	answerBatch(w, res)
}

// readBatch checks a batch request (a POST with a capability for capOp on its bucket)
// and reads its body whole: exactly QLength bytes, at most maxBody. Reading it to its
// end checks it against its signature (rpc): a body cut, changed or too long is an
// error, and the caller writes nothing.
func (h *Handler) readBatch(r *http.Request, op errors.Op, what, capOp string, maxBody int) (bucket string, body []byte, err error) {
	if r.Method != http.MethodPost {
		return "", nil, errors.Errorf(op, errors.Invalid, "%s must be a POST", what)
	}
	q := r.URL.Query()
	bucket = q.Get(wire.QBucket)
	if err := h.cfg.Secret.CheckCap(r.Header.Get(rpc.HdrCap), capOp, bucket, "", time.Now()); err != nil {
		h.log.Warn("refused an internode request", "path", r.URL.Path, "from", r.Header.Get(rpc.HdrNode), "remote", r.RemoteAddr, "err", err)
		return "", nil, err
	}
	n, err := strconv.Atoi(q.Get(wire.QLength))
	if err != nil || n <= 0 {
		return "", nil, errors.Errorf(op, errors.Invalid, "%s needs its body's length: nothing was written", what)
	}
	if n > maxBody {
		return "", nil, errors.Errorf(op, errors.TooLarge, "%s body of %d bytes (at most %d): nothing was written", what, n, maxBody)
	}
	body = make([]byte, n)
	if _, err := io.ReadFull(r.Body, body); err != nil {
		return "", nil, errors.E(op, errors.Invalid, fmt.Errorf("%s body cut short: nothing was written: %w", what, err))
	}
	if m, err := io.ReadFull(r.Body, make([]byte, 1)); m != 0 || err != io.EOF {
		if err == nil || err == io.ErrUnexpectedEOF {
			err = errors.Errorf(op, errors.Invalid, "%s body longer than its length: nothing was written", what)
		}
		return "", nil, err
	}
	return bucket, body, nil
}

// answerBatch answers a batch's results, in a signed body.
func answerBatch(w http.ResponseWriter, res []RangeResult) {
	ans := wire.RangeBatchAnswer{Results: make([]wire.RangeResult, len(res))}
	for i, x := range res {
		ans.Results[i] = wire.RangeResultOf(x.Object, x.Err)
	}
	b, _ := json.Marshal(ans)
	rpc.WriteSignedBody(w, "application/json", b)
}
