package replica

import (
	"context"
	"io"
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
