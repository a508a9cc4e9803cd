package gateway

import (
	"context"
	"fmt"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// SetObjectTags replaces the tag set of bucket/key's current version (nil or empty
// removes it) without making a new version: the body, ETag, modification time and
// version stay (docs/design/tagging.md). The current version V is read with the read
// quorum; each holder is then asked to change its record if it is V, with a MetaHLC from
// this gateway's clock. A holder with a newer version or a delete counts as done: the
// change is ordered before that write, which replaced V. A holder that lacks V is queued
// for repair, which copies the winning record with its tags. Fewer than W holders done is
// a QuorumError saying whether any holder may have applied the change. It returns V's
// record as changed.
func (g *Gateway) SetObjectTags(ctx context.Context, bucket, key string, tags [][2]string) (*object.Object, error) {
	const op errors.Op = "gateway.SetObjectTags"
	defer g.cache.drop(bucket, key)
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return nil, errors.E(op, err)
	}
	cls, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return nil, errors.E(op, err)
	}
	cur, _, err := g.versions(ctx, ts, g.readQuorum(cls, ts), bucket, key)
	if err != nil {
		return nil, errors.E(op, err)
	}
	if cur == nil || cur.Deleted {
		return nil, noSuchKey(op)
	}
	if len(tags) == 0 {
		tags = nil
	}
	u := object.MetaUpdate{Bucket: bucket, Key: key, Version: cur.HLC, MetaHLC: g.clock.Next(), Tags: tags}
	ok, failed := g.fanOut(ctx, ts, cls.W, bucket, key, cur.HLC, always, func(ctx context.Context, t topology.Target) (*object.Object, error) {
		ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
		defer cancel()
		rec, err := g.replica(t).UpdateMeta(ctx, u)
		if err != nil && !errors.Is(errors.NotExist, err) {
			return nil, err
		}
		if err != nil {
			rec = nil // no record of the key there
		}
		if replica.UpdateOutcome(u, rec) == replica.MetaMissing {
			// It missed version V: the hint queued for this failure (fanOut) has repair
			// copy it the winning record, tags included.
			return rec, errors.E(errors.Transient, fmt.Errorf("node %s: %w", t.ID, errMissedVersion))
		}
		return rec, nil
	})
	if len(ok) < cls.W {
		return nil, errors.E(op, quorumFailure("tagging update", ok, failed, cls.W, len(ts)))
	}
	o := *cur
	o.Tags, o.MetaHLC = tags, u.MetaHLC
	o.Body = nil
	return &o, nil
}

// errMissedVersion: a holder lacks the version a metadata update is for; it did not
// apply the update (notApplied).
var errMissedVersion = errors.New("the holder lacks the version to change (it missed the write)")
