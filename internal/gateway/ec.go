package gateway

import (
	"bytes"
	"context"
	"io"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/stripe"
	"github.com/cairnfs/cairn/internal/topology"
)

// Erasure-coded objects (classes with K > 0): package stripe stores the bytes as shards;
// the coordinator's share is the object's record, written like any other on the key's
// holders with their write quorum, marked striped and without a body, once every stripe
// is stored.

// LevelTaggedStripes is the cluster feature level (clustermap.Map.Level) from which
// erasure-coded PUTs name their stripes by a tag and take their version once the body is
// complete: every node's shard collection then keeps a tag's stripes for
// stripe.PutGrace while no record names them (an older node's would collect a PUT's
// stripes while it is still sending them).
const LevelTaggedStripes = 9

// putStriped stores src as an erasure-coded object of class cls: its stripes (stripe.Path.Put),
// then the record on the key's holders (the write quorum of STANDARD). cw, if set, is the
// write's condition, evaluated once the stripes are stored.
//
// From LevelTaggedStripes the stripes are named by a tag (stripe.PutTag) and the version
// is taken once the body is complete, as for replicated writes (the last-writer rule,
// late.go); before, the version is taken first and names the stripes (stripe.Key).
func (g *Gateway) putStriped(ctx context.Context, cls clustermap.Class, holders []topology.Target, recW int, bucket, key string, meta *object.Object,
	src io.Reader, size int64, finish func(*object.Object) error, cw *condWrite) (*object.Object, error) {
	if g.cfg.Maps.Current().Level < LevelTaggedStripes {
		return g.putStripedEarly(ctx, cls, holders, recW, bucket, key, meta, src, size, finish, cw)
	}
	began := g.clock.Wall()
	provisional, final := g.lateVersion(cw.finish(ctx, finish))
	tag := stripe.PutTag(provisional)
	total, err := g.ec.Put(ctx, cls, bucket+"/"+key, src, size, func(i int64) string { return stripe.PartKey(bucket, key, tag, 1, i) })
	if err != nil {
		return nil, err
	}
	if d := g.clock.Wall().Sub(began); d > stripe.PutGrace/2 {
		// Shard collection may take the stripes of a tag no record names after stripe.PutGrace.
		return nil, errors.Errorf("", errors.Transient, "the body took %s to arrive: its stripes may be collected before a record names them; nothing was written, send it again (or as a multipart upload)", d.Round(time.Second))
	}
	rec := *meta
	rec.Size = total
	if err := final(&rec); err != nil { // the checksums, the condition, then the version
		return nil, err
	}
	rec.Size = total
	rec.ModTime = time.Now().UnixNano()
	rec.Striped, rec.Stripe = true, stripe.LayoutOf(cls)
	rec.Stripe.Upload, rec.Stripe.Parts = tag, []int{1}
	return g.putStripedRecord(ctx, holders, recW, bucket, key, &rec)
}

// putStripedEarly is putStriped in a cluster below LevelTaggedStripes: the version is
// taken before the body (it names the stripes), so such a write does not follow the
// last-writer rule.
func (g *Gateway) putStripedEarly(ctx context.Context, cls clustermap.Class, holders []topology.Target, recW int, bucket, key string, meta *object.Object,
	src io.Reader, size int64, finish func(*object.Object) error, cw *condWrite) (*object.Object, error) {
	version := g.clock.Next()
	total, err := g.ec.Put(ctx, cls, bucket+"/"+key, src, size, func(i int64) string { return stripe.Key(bucket, key, version, i) })
	if err != nil {
		return nil, err
	}
	rec := *meta
	rec.Size = total
	if finish != nil {
		if err := finish(&rec); err != nil {
			return nil, err
		}
	}
	if err := cw.stampAt(ctx, &rec, version); err != nil {
		return nil, err
	}
	rec.Size = total
	rec.ModTime = time.Now().UnixNano()
	rec.HLC = version
	rec.Striped, rec.Stripe = true, stripe.LayoutOf(cls)
	return g.putStripedRecord(ctx, holders, recW, bucket, key, &rec)
}

// putStripedRecord writes the record of an erasure-coded object whose stripes are stored
// on the key's holders, with the write quorum recW.
func (g *Gateway) putStripedRecord(ctx context.Context, holders []topology.Target, recW int, bucket, key string, rec *object.Object) (*object.Object, error) {
	version := rec.HLC
	ok, failed := g.fanOut(ctx, holders, recW, bucket, key, version, always, func(ctx context.Context, t topology.Target) (*object.Object, error) {
		return g.replica(t).Put(ctx, replica.Write{Bucket: bucket, Key: key, Meta: rec, Body: bytes.NewReader(nil), Version: version, FinalNow: rec})
	})
	if len(ok) < recW {
		return nil, quorumFailure("write", ok, failed, recW, len(holders))
	}
	out := *rec
	return &out, nil
}

// putStripedPart stores part n of an erasure-coded upload: its stripes, then the part's
// record (striped, no body) on the key's holders.
func (g *Gateway) putStripedPart(ctx context.Context, cls clustermap.Class, holders []topology.Target, recW int, bucket, key, uploadID string, n int,
	src io.Reader, size int64, finish func(*object.Object) error) (*object.Object, error) {
	total, err := g.ec.Put(ctx, cls, bucket+"/"+key, src, size, func(i int64) string { return stripe.PartKey(bucket, key, uploadID, n, i) })
	if err != nil {
		return nil, err
	}
	fin := &object.Object{Size: total, ModTime: time.Now().UnixNano()}
	if finish != nil {
		if err := finish(fin); err != nil {
			return nil, err
		}
	}
	fin.Size = total
	fin.Striped, fin.Stripe = true, stripe.LayoutOf(cls)
	ok, failed := g.fanOut(ctx, holders, recW, bucket, key, 0, never, func(ctx context.Context, t topology.Target) (*object.Object, error) {
		return g.replica(t).Put(ctx, replica.Write{Bucket: bucket, Key: key, Body: bytes.NewReader(nil), UploadID: uploadID, Part: n, FinalNow: fin})
	})
	if len(ok) < recW {
		return nil, quorumFailure("write", ok, failed, recW, len(holders))
	}
	return fin, nil
}
