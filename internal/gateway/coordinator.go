package gateway

// The coordinator's operations for the repair loops (package repair): they decide what
// to repair; writing through quorums stays here.

import (
	"bytes"
	"context"
	"io"
	"strconv"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/policy"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/stripe"
	"github.com/cairnfs/cairn/internal/topology"
)

// Rewrite stores version v of bucket/key again in class cls, on every holder ts, keeping
// its version, metadata and modification time. It returns false when a newer version or
// a delete came first (nothing to do: the newer write was placed when it was made).
func (g *Gateway) Rewrite(ctx context.Context, bucket, key string, v uint64, cls clustermap.Class, ts []topology.Target) (bool, error) {
	rd, err := g.openObject(ctx, bucket, key, false) // a background pass: not through the object cache
	if errors.Is(errors.NotExist, err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer rd.Close()
	cur := rd.Info()
	if cur.HLC != v || cur.Deleted {
		return false, nil
	}
	pr, pw := io.Pipe()
	rctx, cancel := context.WithCancel(ctx)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, err := rd.WriteRange(rctx, pw, 0, cur.Size)
		pw.CloseWithError(err)
	}()
	defer func() { // the reader stays open until the copy has stopped
		pr.Close()
		cancel()
		<-copied
	}()
	meta := *cur
	meta.Body, meta.Chunks, meta.Inline, meta.Embedded = nil, nil, false, false
	meta.Striped, meta.Stripe = false, object.Stripe{}
	meta.StorageClass = cls.Name
	if cls.Name == clustermap.StandardClass {
		meta.StorageClass = ""
	}
	wctx := ctx
	if !cls.Sharded() {
		if _, err := g.write(wctx, ts, len(ts), replica.Write{Bucket: bucket, Key: key, Meta: &meta, Version: v, Repair: true}, pr, cur.Size, nil); err != nil {
			return false, err
		}
		// A holder that had a newer version kept it: the rewrite came too late there.
		o, err := g.replica(ts[0]).Stat(ctx, bucket, key)
		return err == nil && o.HLC == v, nil
	}
	// Chunks under a tag of their own, part by part as the object was uploaded.
	began := time.Now()
	tag := stripe.RelayoutPrefix + strconv.FormatUint(g.clock.Next(), 16)
	sizes := cur.PartSizes
	if len(sizes) == 0 {
		sizes = []int64{cur.Size}
	}
	rec := meta
	rec.Striped, rec.Stripe = true, stripe.LayoutOf(cls)
	rec.Stripe.Upload = tag
	for p, n := range sizes {
		if _, err := g.ec.Put(wctx, cls, bucket+"/"+key, io.LimitReader(pr, n), n, func(i int64) string { return stripe.PartKey(bucket, key, tag, p+1, i) }); err != nil {
			return false, err
		}
		rec.Stripe.Parts = append(rec.Stripe.Parts, p+1)
	}
	if time.Since(began) > stripe.RelayoutGrace/2 {
		// Shard collection may take chunks of a tag no record names after stripe.RelayoutGrace.
		return false, errors.Errorf("", errors.Transient, "rewriting took %s: the chunks may be collected before the record names them; retried later", time.Since(began).Round(time.Second))
	}
	ok, failed := g.fanOut(wctx, ts, len(ts), bucket, key, v, never, func(ctx context.Context, t topology.Target) (*object.Object, error) {
		return g.replica(t).Put(ctx, replica.Write{Bucket: bucket, Key: key, Meta: &rec, Body: bytes.NewReader(nil), Version: v, FinalNow: &rec, Repair: true})
	})
	if len(ok) < len(ts) {
		return false, quorumFailure("rewrite", ok, failed, len(ts), len(ts))
	}
	for _, r := range ok {
		if r.o != nil && r.o.HLC != v {
			return false, nil
		}
	}
	return true, nil
}

// RepairCopy replaces this node's copy of version of bucket/key, found damaged, with a
// good copy from another holder, and waits for the outcome (RepairLocal does not).
func (g *Gateway) RepairCopy(ctx context.Context, bucket, key string, version uint64) error {
	return g.repairLocal(ctx, bucket, key, version)
}

// BucketPolicy returns bucket's parsed placement policy; false if it has none.
func (g *Gateway) BucketPolicy(bucket string) (*policy.Policy, bool) { return g.bucketPolicy(bucket) }

// StaleUpload decides whether the upload u, pending on this node, has ended elsewhere:
// it asks the upload's other holders and returns the end record to apply here (one of
// theirs: this node missed the completion or abort), or nil to keep the upload. An upload
// that no other holder holds or has ended, and that was initiated more than
// store.UploadEndLifetime ago, ended while this node was away for longer than the end
// records live: it is returned as aborted. (Only where the write quorum is at least 2: a
// pending upload is then held by another holder as well.)
func (g *Gateway) StaleUpload(ctx context.Context, u object.PendingUpload) *object.UploadEnd {
	cls, ts, err := g.topo.Replicas(u.Bucket, u.Key)
	if err != nil {
		return nil // the bucket is gone from the map
	}
	var peers []topology.Target
	for _, t := range ts {
		if t.ID != g.cfg.NodeID {
			peers = append(peers, t)
		}
	}
	v := g.uploadView(ctx, peers, len(peers), u.Bucket, u.Key, u.UploadID, 0, 0, false)
	if v.end != nil {
		return v.end
	}
	if len(peers) == 0 || cls.W < 2 || len(v.pending()) > 0 || v.unanswered() != nil || time.Since(u.Initiated) < store.UploadEndLifetime {
		return nil
	}
	return &object.UploadEnd{Bucket: u.Bucket, Key: u.Key, UploadID: u.UploadID, State: object.UploadAborted, Ended: time.Now().UnixNano()}
}
