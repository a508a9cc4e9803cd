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
	if len(tags) == 0 {
		tags = nil
	}
	return g.ChangeMeta(ctx, bucket, key, 0, MetaChange{Tags: &tags})
}

// MetaChange names the groups of in-place metadata a ChangeMeta sets (nil: unchanged).
type MetaChange struct {
	Tags      *[][2]string
	Retention *object.Retention
	LegalHold *bool
	ACL       *string // the S3 layer's encoding of an ACL (object.Object.ACL)
}

// ChangeMeta changes groups of in-place metadata (tags, Object Lock retention, legal
// hold, ACL) of version hlc of bucket/key (0: the current version) as SetObjectTags does, and
// returns the version's record as changed. The caller checks that the change is allowed
// (a retention in force: object.RetentionChangeAllowed); the holders merge it so that a
// COMPLIANCE retention is never shortened.
func (g *Gateway) ChangeMeta(ctx context.Context, bucket, key string, hlc uint64, c MetaChange) (*object.Object, error) {
	const op errors.Op = "gateway.ChangeMeta"
	defer g.cache.drop(bucket, key)
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return nil, errors.E(op, err)
	}
	cls, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return nil, errors.E(op, err)
	}
	var cur *object.Object
	if hlc == 0 {
		if cur, _, err = g.versions(ctx, ts, g.readQuorum(cls, ts), bucket, key); err != nil {
			return nil, errors.E(op, err)
		}
		if cur == nil || cur.Deleted {
			return nil, goneErr(op, cur)
		}
	} else {
		rd, err := g.OpenVersion(ctx, bucket, key, hlc)
		if err != nil {
			return nil, errors.E(op, err)
		}
		cur = rd.Info()
		rd.Close()
	}
	h := g.clock.Next()
	u := object.MetaUpdate{Bucket: bucket, Key: key, Version: cur.HLC, MetaHLC: h}
	if c.Tags != nil {
		u.Tags, u.TagsHLC = *c.Tags, h
	}
	if c.Retention != nil {
		u.Retention, u.RetentionHLC = *c.Retention, h
	}
	if c.LegalHold != nil {
		u.LegalHold, u.HoldHLC = *c.LegalHold, h
	}
	if c.ACL != nil {
		u.ACL, u.ACLHLC = *c.ACL, h
	}
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
		outcome := replica.UpdateOutcome(u, rec)
		if outcome == replica.MetaMissing || (cur.Versioned && outcome == replica.MetaSuperseded && (rec == nil || rec.HLC != cur.HLC)) {
			// It missed version V (a version of a versioned key lives beside newer
			// ones): the hint queued for this failure (fanOut) has repair copy it the
			// version with its metadata.
			return rec, errors.E(errors.Transient, fmt.Errorf("node %s: %w", t.ID, errMissedVersion))
		}
		return rec, nil
	})
	if len(ok) < cls.W {
		what := "tagging update"
		switch {
		case c.Retention != nil:
			what = "retention update"
		case c.LegalHold != nil:
			what = "legal hold update"
		case c.ACL != nil:
			what = "ACL update"
		}
		return nil, errors.E(op, quorumFailure(what, ok, failed, cls.W, len(ts)))
	}
	o := *cur
	o.MergeMeta(u.Record())
	o.Body = nil
	return &o, nil
}

// errMissedVersion: a holder lacks the version a metadata update is for; it did not
// apply the update (notApplied).
var errMissedVersion = errors.New("the holder lacks the version to change (it missed the write)")
