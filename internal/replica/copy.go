package replica

import (
	"context"
	"io"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// Copy copies version of bucket/key from src to dst, streaming its body, and returns the
// body bytes copied (none for the record of an erasure-coded object, whose bytes are in
// its shards). With repair, dst replaces a record of the same version it holds: a damaged
// copy. It is how hinted retry, read repair and anti-entropy bring a holder up to date.
func Copy(ctx context.Context, src, dst Replica, bucket, key string, version uint64, repair bool) (int64, error) {
	// Cancelled on return, so that a source stalled mid-body stops sending (reads from
	// another node have no deadline of their own) and the wait for the sender below ends.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rd, err := src.Open(ctx, bucket, key, OpenOptions{Version: version})
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	o := rd.Info()
	if o.Deleted { // a delete marker
		_, err := dst.Delete(ctx, bucket, key, Deletion(o))
		return 0, err
	}
	size := o.BodySize()
	pr, pw := io.Pipe()
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		_, err := rd.WriteRange(ctx, pw, 0, size)
		pw.CloseWithError(err)
	}()
	defer func() { // the source is closed once its sender has stopped
		pr.CloseWithError(ErrReaderGone)
		cancel()
		<-sent
	}()
	meta := *o
	meta.Body, meta.Chunks, meta.Inline, meta.Embedded = nil, nil, false, false
	if _, err := dst.Put(ctx, Write{Bucket: bucket, Key: key, Meta: &meta, Body: pr, Size: size, Version: o.HLC, FinalNow: &meta, Repair: repair}); err != nil {
		return 0, err
	}
	return size, nil
}

// Deletion returns the fields of a record without a body (tombstone, delete marker,
// purge record) that Delete writes.
func Deletion(o *object.Object) object.Object {
	return object.Object{HLC: o.HLC, ModTime: o.ModTime, Versioned: o.Versioned, DeleteMarker: o.DeleteMarker, Purged: o.Purged, Bypass: o.Bypass, Origin: o.Origin}
}

// CopyMeta gives dst's record of version src.HLC the in-place metadata (tags) of src, a
// record of the same version with a later metadata change, without sending the body:
// how hinted retry, read repair and anti-entropy bring a holder that has the version but
// missed a tagging update up to date. A dst that holds a newer version, or the change
// already, is up to date; one that lacks the version is an error (copy the version).
func CopyMeta(ctx context.Context, dst Replica, bucket, key string, src *object.Object) error {
	u := object.MetaUpdateOf(bucket, key, src)
	rec, err := dst.UpdateMeta(ctx, u)
	if err != nil {
		return err
	}
	if UpdateOutcome(u, rec) == MetaMissing {
		return errors.E(errors.Precondition, "the holder lacks the version whose metadata changed")
	}
	return nil
}
