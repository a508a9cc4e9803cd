package volume

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// Range batches (docs/design/volumes.md, "Range batches"): a node's writes to one remote
// holder, from every device it serves, go through that holder's sender. A write finding
// fewer than maxInFlight requests in flight to the holder is sent at once, alone (no
// added latency); one finding them all busy waits in the sender's queue, and when a
// request ends, what is queued goes as one batch (bounded by replica.MaxBatchWrites
// and replica.MaxBatchData). The holder applies each write with its own order check
// and fence and answers each one's result, so the device's per-write logic (resolve on
// Precondition, Permission, a retry on Transient) is unchanged. Writes of one data object
// are serialized by the device (objState.mu), so a batch never holds two of one object
// from one device.

// maxInFlight is how many requests a node keeps in flight to one holder before the
// writes that follow wait to go together.
const maxInFlight = 2

// sender queues the writes to one holder.
type sender struct {
	mu       sync.Mutex
	inflight int
	queue    []*queued
}

// queued is a write waiting in a sender's queue; done gets its outcome.
type queued struct {
	w    object.RangeWrite
	done chan replica.RangeResult
}

// batching reports whether writes to remote holders may go in range batches (every node
// serves them: Config.Batch).
func (s *Service) batching() bool { return s.cfg.Batch != nil && s.cfg.Batch() }

// sender returns the sender of holder id.
func (s *Service) sender(id string) *sender {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.senders == nil {
		s.senders = map[string]*sender{}
	}
	sd := s.senders[id]
	if sd == nil {
		sd = &sender{}
		s.senders[id] = sd
	}
	return sd
}

// writeTo sends w to holder t (r): through the holder's sender if it is remote and
// batches are on, else as one request.
func (d *Device) writeTo(ctx context.Context, t topology.Target, r replica.Replica, rw replica.RangeWriter, w object.RangeWrite) (*object.Object, error) {
	if rb, ok := r.(replica.RangeBatcher); ok && !t.Local && d.s.batching() {
		return d.s.sender(t.ID).write(ctx, rb, rw, w, d.s)
	}
	return rw.WriteRange(ctx, w)
}

// write sends w through the sender and returns its outcome.
func (sd *sender) write(ctx context.Context, rb replica.RangeBatcher, rw replica.RangeWriter, w object.RangeWrite, s *Service) (*object.Object, error) {
	sd.mu.Lock()
	if sd.inflight < maxInFlight {
		sd.inflight++
		sd.mu.Unlock()
		o, err := rw.WriteRange(ctx, w)
		sd.next(rb, rw, s)
		return o, err
	}
	q := &queued{w: w, done: make(chan replica.RangeResult, 1)}
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
		return nil, errors.E(errors.Transient, fmt.Errorf("the write was sent in a range batch whose answer did not come in time: %w", ctx.Err()))
	}
}

// next is called when a request of the sender ends: the writes queued meanwhile go on in
// a goroutine that keeps the request's slot; with none queued, the slot is free.
func (sd *sender) next(rb replica.RangeBatcher, rw replica.RangeWriter, s *Service) {
	sd.mu.Lock()
	if len(sd.queue) == 0 {
		sd.inflight--
		sd.mu.Unlock()
		return
	}
	batch := sd.take()
	sd.mu.Unlock()
	go sd.send(batch, rb, rw, s)
}

// send sends batch, then what was queued meanwhile, until the queue is empty.
func (sd *sender) send(batch []*queued, rb replica.RangeBatcher, rw replica.RangeWriter, s *Service) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.WriteTimeout)
		if len(batch) == 1 {
			var r replica.RangeResult
			r.Object, r.Err = rw.WriteRange(ctx, batch[0].w)
			batch[0].done <- r
		} else {
			ws := make([]object.RangeWrite, len(batch))
			for i, q := range batch {
				ws[i] = q.w
			}
			res, err := rb.WriteRanges(ctx, ws)
			s.batches.Add(1)
			s.batched.Add(int64(len(ws)))
			for i, q := range batch {
				if err != nil {
					q.done <- replica.RangeResult{Err: err}
				} else {
					q.done <- res[i]
				}
			}
		}
		cancel()
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

// take removes the writes of the next request from the queue: the oldest first, at most
// replica.MaxBatchWrites of them and replica.MaxBatchData bytes (a larger first one
// goes alone). The caller holds sd.mu.
func (sd *sender) take() []*queued {
	n, data := 0, 0
	for _, q := range sd.queue {
		if n == replica.MaxBatchWrites || (n > 0 && data+len(q.w.Data) > replica.MaxBatchData) {
			break
		}
		n++
		data += len(q.w.Data)
	}
	batch := slices.Clone(sd.queue[:n])
	sd.queue = slices.Delete(sd.queue, 0, n)
	return batch
}
