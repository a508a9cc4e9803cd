package gateway

import (
	"context"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// Put batches (docs/design/20261123_cluster.md, "Put batches"): the replica writes of
// small object versions (a body of at most replica.MaxBatchedBody, held in memory) this
// gateway sends to one remote holder go through that holder's replica.Sender: a write
// finding fewer than replica.DefaultMaxInFlight requests in flight to the holder goes at
// once, alone, as a Put; the writes finding them all busy wait and go together, in one
// signed request (wire.PathObjectBatch), when one of them ends. The holder applies each
// write as a lone Put (its own checks and sync, the group commit shared) and answers
// each one's result, so fanOut, the quorum, the hints and the conditional writes'
// leases see each write as before.

// LevelPutBatches is the cluster feature level (clustermap.Map.Level) from which the
// gateway sends put batches: every node serves wire.PathObjectBatch.
const LevelPutBatches = 12

// putBatching reports whether put batches may be sent (the map's level).
func (g *Gateway) putBatching() bool { return g.cfg.Maps.Current().Level >= LevelPutBatches }

// putTo writes w, whose body of w.Size bytes is in memory, to holder t: through the
// holder's sender when it is remote, the write fits a batch and the map's level allows
// them; otherwise as one Put.
func (g *Gateway) putTo(ctx context.Context, t topology.Target, w replica.Write) (*object.Object, error) {
	r := g.replica(t)
	if pb, ok := r.(replica.PutBatcher); ok && !t.Local && w.Part == 0 && w.FinalNow != nil &&
		w.Size >= 0 && w.Size <= replica.MaxBatchedBody && g.putBatching() {
		return g.putSender(t.ID).Write(ctx, w, replica.SinkFuncs[replica.Write]{OneFunc: r.Put, ManyFunc: pb.PutBatch})
	}
	return r.Put(ctx, w)
}

// putSender returns the sender of holder id.
func (g *Gateway) putSender(id string) *replica.Sender[replica.Write] {
	if sd, ok := g.putSenders.Load(id); ok {
		return sd.(*replica.Sender[replica.Write])
	}
	sd, _ := g.putSenders.LoadOrStore(id, replica.NewSender(replica.SenderConfig[replica.Write]{
		Timeout: g.cfg.Timeout,
		Size:    func(w replica.Write) int { return w.BatchSize() },
		Group:   func(w replica.Write) string { return w.Bucket },
	}))
	return sd.(*replica.Sender[replica.Write])
}

// PutBatchStats returns how many put batches (two writes or more) this gateway sent and
// how many writes they carried (writes sent alone are not counted).
func (g *Gateway) PutBatchStats() (batches, writes int64) {
	g.putSenders.Range(func(_, v any) bool {
		b, w := v.(*replica.Sender[replica.Write]).Stats()
		batches, writes = batches+b, writes+w
		return true
	})
	return batches, writes
}
