package replica

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// Batches of writes to one holder (range batches, wire.PathRangeBatch; put batches,
// wire.PathObjectBatch): a node's writes to one remote holder go through that holder's
// Sender. A write finding fewer than MaxInFlight requests in flight to the holder is
// sent at once, alone (no added latency); one finding them all busy waits in the
// sender's queue, and when a request ends (answered, failed or timed out) what is
// queued goes as one batch, bounded by MaxBatchWrites and MaxBatchData. No timer is
// involved: a write waits only while MaxInFlight requests to its holder are in flight,
// and every request's end takes the queue (so nothing waits while nothing is in flight).
// Each holder has its own Sender: a slow holder holds up only the writes to it.

// DefaultMaxInFlight is how many requests a Sender keeps in flight to its holder before
// the writes that follow wait to go together.
const DefaultMaxInFlight = 2

// Sink sends writes of type W to one holder: one alone, or several as one batch.
type Sink[W any] interface {
	// One sends w alone.
	One(ctx context.Context, w W) (*object.Object, error)
	// Many sends ws in one request and returns each one's outcome, in ws's order; an
	// error of the call is every write's (the holder may have applied some).
	Many(ctx context.Context, ws []W) ([]RangeResult, error)
}

// SinkFuncs is a Sink made of two functions (method values of a holder, typically).
type SinkFuncs[W any] struct {
	OneFunc  func(ctx context.Context, w W) (*object.Object, error)
	ManyFunc func(ctx context.Context, ws []W) ([]RangeResult, error)
}

// One implements Sink.
func (s SinkFuncs[W]) One(ctx context.Context, w W) (*object.Object, error) { return s.OneFunc(ctx, w) }

// Many implements Sink.
func (s SinkFuncs[W]) Many(ctx context.Context, ws []W) ([]RangeResult, error) {
	return s.ManyFunc(ctx, ws)
}

// SenderConfig configures a Sender.
type SenderConfig[W any] struct {
	// MaxInFlight is how many requests may be in flight to the holder before writes wait
	// to go together (default DefaultMaxInFlight).
	MaxInFlight int
	// Size is the bytes a write counts against MaxBatchData.
	Size func(W) int
	// Group, if set, says which writes may share a batch: a batch holds the oldest
	// queued write and the queued writes of its group (nil: any writes).
	Group func(W) string
	// Timeout bounds each request made for queued writes (their callers' contexts are
	// theirs: a caller that gives up gets an error, the request goes on for the others).
	Timeout time.Duration
}

// Sender queues the writes to one holder (see above). The zero value is not usable:
// NewSender makes one.
type Sender[W any] struct {
	cfg SenderConfig[W]

	mu       sync.Mutex
	inflight int
	queue    []*queued[W]

	// batches and batched count the batches of two writes or more sent and the writes
	// they carried.
	batches, batched atomic.Int64
}

// queued is a write waiting in a sender's queue; done gets its outcome.
type queued[W any] struct {
	w    W
	done chan RangeResult
}

// NewSender returns a Sender.
func NewSender[W any](cfg SenderConfig[W]) *Sender[W] {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	return &Sender[W]{cfg: cfg}
}

// Stats returns how many batches (of two writes or more) the sender sent and how many
// writes they carried.
func (sd *Sender[W]) Stats() (batches, writes int64) { return sd.batches.Load(), sd.batched.Load() }

// Write sends w to the holder through the sender and returns its outcome: at once if a
// request slot is free, else in the batch of the next request that ends. to is the
// holder (the same holder for every write of a sender).
func (sd *Sender[W]) Write(ctx context.Context, w W, to Sink[W]) (*object.Object, error) {
	sd.mu.Lock()
	if sd.inflight < sd.cfg.MaxInFlight {
		sd.inflight++
		sd.mu.Unlock()
		defer sd.next(to) // also if One panics: the slot and the queue are never left behind
		return to.One(ctx, w)
	}
	q := &queued[W]{w: w, done: make(chan RangeResult, 1)}
	sd.queue = append(sd.queue, q)
	sd.mu.Unlock()
	select {
	case r := <-q.done:
		return r.Object, r.Err
	case <-ctx.Done():
		sd.mu.Lock()
		i := slices.Index(sd.queue, q)
		if i >= 0 {
			sd.queue = slices.Delete(sd.queue, i, i+1)
		}
		sd.mu.Unlock()
		if i >= 0 {
			return nil, errors.E(errors.Transient, fmt.Errorf("the write waited for the holder's earlier requests until it gave up (nothing was sent): %w", ctx.Err()))
		}
		return nil, errors.E(errors.Transient, fmt.Errorf("the write was sent in a batch whose answer did not come in time: %w", ctx.Err()))
	}
}

// next is called when a request of the sender ends: the writes queued meanwhile go on in
// a goroutine that keeps the request's slot; with none queued, the slot is free.
func (sd *Sender[W]) next(to Sink[W]) {
	sd.mu.Lock()
	if len(sd.queue) == 0 {
		sd.inflight--
		sd.mu.Unlock()
		return
	}
	batch := sd.take()
	sd.mu.Unlock()
	go sd.send(batch, to)
}

// send sends batch, then what was queued meanwhile, until the queue is empty; then the
// slot is free.
func (sd *Sender[W]) send(batch []*queued[W], to Sink[W]) {
	for {
		sd.sendOne(batch, to)
		sd.mu.Lock()
		if len(sd.queue) == 0 {
			sd.inflight--
			sd.mu.Unlock()
			return
		}
		batch = sd.take()
		sd.mu.Unlock()
	}
}

// sendOne sends one request for batch and gives each write its outcome. Every write of
// batch is answered, whatever happens to the request.
func (sd *Sender[W]) sendOne(batch []*queued[W], to Sink[W]) {
	ctx, cancel := context.WithTimeout(context.Background(), sd.cfg.Timeout)
	defer cancel()
	if len(batch) == 1 {
		var r RangeResult
		r.Object, r.Err = to.One(ctx, batch[0].w)
		batch[0].done <- r
		return
	}
	ws := make([]W, len(batch))
	for i, q := range batch {
		ws[i] = q.w
	}
	res, err := to.Many(ctx, ws)
	sd.batches.Add(1)
	sd.batched.Add(int64(len(ws)))
	if err == nil && len(res) != len(ws) {
		err = errors.E(errors.Transient, fmt.Sprintf("a batch of %d writes answered with %d results: their outcome is unknown", len(ws), len(res)))
	}
	for i, q := range batch {
		if err != nil {
			q.done <- RangeResult{Err: err}
		} else {
			q.done <- res[i]
		}
	}
}

// take removes the writes of the next request from the queue: the oldest first, then
// the later ones of its group, at most MaxBatchWrites of them and MaxBatchData bytes (a
// larger first one goes alone). The caller holds sd.mu.
func (sd *Sender[W]) take() []*queued[W] {
	group := ""
	if sd.cfg.Group != nil {
		group = sd.cfg.Group(sd.queue[0].w)
	}
	var batch, rest []*queued[W]
	data, full := 0, false
	for _, q := range sd.queue {
		if full || sd.cfg.Group != nil && sd.cfg.Group(q.w) != group {
			rest = append(rest, q)
			continue
		}
		size := sd.cfg.Size(q.w)
		if len(batch) == MaxBatchWrites || len(batch) > 0 && data+size > MaxBatchData {
			full = true // the rest of the group keeps its order for the next request
			rest = append(rest, q)
			continue
		}
		batch = append(batch, q)
		data += size
	}
	sd.queue = rest
	return batch
}

// Queued returns how many writes wait in the sender's queue.
func (sd *Sender[W]) Queued() int {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	return len(sd.queue)
}
