package gateway

import (
	"bytes"
	"context"
	"io"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/stripe"
	"github.com/cairnfs/cairn/internal/topology"
)

// Erasure-coded objects (classes with K > 0): package stripe stores the bytes as shards;
// the coordinator's share is the object's record, written like any other on the key's
// holders with their write quorum, marked striped and without a body, once every stripe
// is stored.

// putStriped stores src as an erasure-coded object of class cls: its stripes (stripe.Path.Put),
// then the record on the key's holders (the write quorum of STANDARD). cw, if set, is the
// write's condition, evaluated once the stripes are stored.
//
// The version is taken before the body (it names the stripes): an erasure-coded write
// does not follow the last-writer rule yet (docs/design/20261123_cluster.md).
func (g *Gateway) putStriped(ctx context.Context, cls clustermap.Class, holders []topology.Target, recW int, bucket, key string, meta *object.Object,
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
	ok, failed := g.fanOut(ctx, holders, recW, bucket, key, version, always, func(ctx context.Context, t topology.Target) (*object.Object, error) {
		return g.replica(t).Put(ctx, replica.Write{Bucket: bucket, Key: key, Meta: &rec, Body: bytes.NewReader(nil), Version: version, FinalNow: &rec})
	})
	if len(ok) < recW {
		return nil, quorumFailure("write", ok, failed, recW, len(holders))
	}
	out := rec
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
