package volume

import (
	"context"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// Range batches (docs/design/volumes.md, "Range batches"): a node's writes to one remote
// holder, from every device it serves, go through that holder's replica.Sender. A write
// finding fewer than maxInFlight requests in flight to the holder is sent at once, alone
// (no added latency); one finding them all busy waits in the sender's queue, and when a
// request ends, what is queued goes as one batch (bounded by replica.MaxBatchWrites
// and replica.MaxBatchData). The holder applies each write with its own order check
// and fence and answers each one's result, so the device's per-write logic (resolve on
// Precondition, Permission, a retry on Transient) is unchanged. Writes of one data object
// are serialized by the device (objState.mu), so a batch never holds two of one object
// from one device.

// maxInFlight is how many requests a node keeps in flight to one holder before the
// writes that follow wait to go together.
const maxInFlight = replica.DefaultMaxInFlight

// sender queues the range writes to one holder.
type sender = replica.Sender[object.RangeWrite]

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
		sd = replica.NewSender(replica.SenderConfig[object.RangeWrite]{MaxInFlight: maxInFlight, Timeout: s.cfg.WriteTimeout,
			Size: func(w object.RangeWrite) int { return len(w.Data) }})
		s.senders[id] = sd
	}
	return sd
}

// BatchStats returns how many range batches this node's devices sent and how many writes
// they carried (writes sent alone are not counted).
func (s *Service) BatchStats() (batches, writes int64) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	for _, sd := range s.senders {
		b, w := sd.Stats()
		batches, writes = batches+b, writes+w
	}
	return batches, writes
}

// writeTo sends w to holder t (r): through the holder's sender if it is remote and
// batches are on, else as one request.
func (d *Device) writeTo(ctx context.Context, t topology.Target, r replica.Replica, rw replica.RangeWriter, w object.RangeWrite) (*object.Object, error) {
	if rb, ok := r.(replica.RangeBatcher); ok && !t.Local && d.s.batching() {
		return d.s.sender(t.ID).Write(ctx, w, replica.SinkFuncs[object.RangeWrite]{OneFunc: rw.WriteRange, ManyFunc: rb.WriteRanges})
	}
	return rw.WriteRange(ctx, w)
}
