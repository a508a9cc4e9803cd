package gateway

import (
	"context"
	"io"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// ApplyRemote stores a change received from a linked cluster (docs/design/mdc.md): rec
// is the remote's record of bucket/key (its version, flags and metadata; its layout is
// ignored), body its bytes (rec.Size of them; nil for a record without a body). The
// change goes through this cluster's own write path: the class this cluster's policy
// chooses (a replicated one: an erasure-coded choice is stored in STANDARD, and
// `cairn admin policy apply` re-places it), this cluster's quorum. The version is kept,
// so the newest HLC wins on every holder whichever side wrote it, a copy of a version a
// holder has only brings it the metadata changes it lacks, and this node's clock moves
// past the remote's. A version under Object Lock is never removed: the holders refuse it
// (Precondition, object.ErrLocked). rec.Origin, the cluster the change was made in,
// travels with the write to every holder, which stack it with the change's link entries:
// no link sends the change back there (docs/design/mdc.md "Loops").
//
// written is false for a version the first holder already had (nothing was written:
// a retry, or an echo of this cluster's own change).
func (g *Gateway) ApplyRemote(ctx context.Context, bucket, key string, rec *object.Object, body io.Reader) (written bool, err error) {
	const op errors.Op = "gateway.ApplyRemote"
	if rec.HLC == 0 {
		return false, errors.E(op, errors.Invalid, "a replicated change without a version")
	}
	if rec.SSE.Algorithm != "" {
		return false, errors.E(op, errors.Invalid, "objects with server-side encryption are not replicated between clusters")
	}
	g.clock.Observe(rec.HLC)
	g.clock.Observe(rec.MetaHLC)
	if rec.Deleted {
		d := replica.Deletion(rec)
		d.Bypass = false // replication never bypasses a GOVERNANCE retention
		if _, err := g.DeleteRecord(ctx, bucket, key, d); err != nil {
			return false, err
		}
		return true, nil
	}
	defer g.cache.drop(bucket, key)
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return false, errors.E(op, err)
	}
	cls, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return false, errors.E(op, err)
	}
	if g.holds(ctx, ts, bucket, key, rec) {
		return false, nil // an echo of this cluster's own change, or a copy already here
	}
	m := *rec
	m.Body, m.Chunks, m.Inline, m.Embedded = nil, nil, false, false
	m.Striped, m.Stripe, m.Mutable, m.Bypass, m.Restore = false, object.Stripe{}, false, false, ""
	m.StorageClass = g.policyClass(bucket, key, rec.Size, rec.ContentType)
	if m.StorageClass != "" {
		if sc, err := g.classFor(m.StorageClass); err != nil || sc.Sharded() {
			m.StorageClass = ""
		}
	}
	if body == nil {
		body = eofReader{}
	}
	if _, err := g.write(ctx, ts, cls.W, replica.Write{Bucket: bucket, Key: key, Meta: &m, Version: rec.HLC}, body, rec.Size, nil); err != nil {
		return false, errors.E(op, err)
	}
	return true, nil
}

// holds reports whether the first holder of bucket/key that answers already has rec's
// version with its metadata (or, for a key's null version, a newer one): then the write
// would be dropped on every holder that has it, and its body need not be sent. A holder
// that lacks it, or no answer, and the write goes ahead (the newest wins there anyway).
func (g *Gateway) holds(ctx context.Context, ts []topology.Target, bucket, key string, rec *object.Object) bool {
	for _, t := range ts {
		if t.Down {
			continue
		}
		cur, err := g.replica(t).Stat(ctx, bucket, key)
		if err != nil {
			return false
		}
		if cur.HLC == rec.HLC {
			return cur.MetaHLC >= rec.MetaHLC && !cur.Deleted
		}
		return cur.HLC > rec.HLC && !rec.Versioned && !cur.Versioned
	}
	return false
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// NodeID is this node's id.
func (g *Gateway) NodeID() string { return g.cfg.NodeID }
