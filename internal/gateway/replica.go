package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/wire"
)

// This file holds the per-replica operations: each is a direct store call when the
// target is this node and an internode request otherwise.

func objQuery(bucket, key string, kv ...string) url.Values {
	q := url.Values{wire.QBucket: {bucket}, wire.QKey: {key}}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	return q
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }
func i64(v int64) string  { return strconv.FormatInt(v, 10) }

// copyFinal copies the fields only the coordinator knows once the body is complete.
func copyFinal(dst, src *object.Object) {
	dst.ETag, dst.ChecksumAlgo, dst.Checksum, dst.ChecksumType = src.ETag, src.ChecksumAlgo, src.Checksum, src.ChecksumType
	if src.Striped && !dst.Striped && dst.Size == 0 {
		// A part of an erasure-coded upload: its bytes are shards elsewhere.
		dst.Striped, dst.Stripe, dst.Size = true, src.Stripe, src.Size
	}
}

// metaOf reads the record a node sent with a response.
func metaOf(resp *http.Response) (*object.Object, error) {
	return wire.DecodeMeta(resp.Header.Get(wire.HdrMeta))
}

// putFlags change what a replica write may replace; they ride on the context of the
// writes they apply to (putReplica).
type putFlags struct {
	repair   bool // replace a record of the same version (a rewrite into another layout)
	ifAbsent bool // store only if the key holds nothing (a shard put on a free node)
}

type putFlagsKey struct{}

func withPutFlags(ctx context.Context, f putFlags) context.Context {
	return context.WithValue(ctx, putFlagsKey{}, f)
}

func flagsOf(ctx context.Context) putFlags {
	f, _ := ctx.Value(putFlagsKey{}).(putFlags)
	return f
}

// putReplica writes one replica of an object (or, with part > 0, of a multipart part).
// body streams the bytes; final returns the coordinator's final metadata once body has
// returned EOF (nil means the write is abandoned). If finalNow is non-nil the final
// metadata is already known (small bodies) and sent as a header.
func (g *Gateway) putReplica(ctx context.Context, t target, bucket, key string, meta *object.Object, body io.Reader, size int64,
	version uint64, uploadID string, part int, final func() *object.Object, finalNow *object.Object) (*object.Object, error) {
	if t.local {
		finish := func(o *object.Object) error {
			f := finalNow
			if f == nil {
				f = final()
			}
			if f == nil {
				return errors.E(errors.Invalid, "write abandoned by the coordinator")
			}
			copyFinal(o, f)
			return nil
		}
		if part > 0 {
			return g.cfg.Store.PutPart(ctx, bucket, key, uploadID, part, body, size, finish)
		}
		if err := g.EnsureLocalBucket(bucket); err != nil {
			return nil, err
		}
		m := *meta
		fl := flagsOf(ctx)
		return g.cfg.Store.PutObject(ctx, bucket, key, &m, body, size, object.PutOptions{Version: version, Finish: finish, Repair: fl.repair, IfNoneMatch: fl.ifAbsent})
	}
	hdr := http.Header{}
	req := &rpc.Request{Method: http.MethodPut, Addr: t.addr, Header: hdr, Body: body, Size: size, Cap: &rpc.Cap{Op: rpc.CapWrite, Bucket: bucket, Key: key}}
	if part > 0 {
		req.Path, req.Query = wire.PathPart, objQuery(bucket, key, wire.QUploadID, uploadID, wire.QPart, strconv.Itoa(part))
	} else {
		req.Path, req.Query = wire.PathObject, objQuery(bucket, key, wire.QVersion, u64(version), wire.QModTime, i64(meta.ModTime))
		if fl := flagsOf(ctx); fl.repair {
			req.Query.Set(wire.QRepair, "1")
		} else if fl.ifAbsent {
			req.Query.Set(wire.QIfAbsent, "1")
		}
		hdr.Set(wire.HdrMeta, wire.EncodeMeta(meta))
	}
	if finalNow != nil {
		hdr.Set(wire.HdrFinal, wire.EncodeMeta(finalNow))
	} else {
		tr := http.Header{wire.HdrFinal: nil}
		req.Trailer, req.Size = tr, -1
		req.Body = &trailerReader{r: body, fill: func() {
			if f := final(); f != nil {
				tr.Set(wire.HdrFinal, wire.EncodeMeta(f))
			}
		}}
	}
	resp, err := g.cfg.RPC.Do(ctx, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return metaOf(resp)
}

// trailerReader calls fill just before it returns EOF, so the trailers it sets are sent.
type trailerReader struct {
	r    io.Reader
	fill func()
	done bool
}

func (t *trailerReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err == io.EOF && !t.done {
		t.done = true
		t.fill()
	}
	return n, err
}

// statReplica returns the replica's record of bucket/key, tombstones included.
func (g *Gateway) statReplica(ctx context.Context, t target, bucket, key string) (*object.Object, error) {
	if t.local {
		return g.cfg.Store.StatVersion(bucket, key)
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	resp, err := g.cfg.RPC.Do(ctx, &rpc.Request{Method: http.MethodHead, Addr: t.addr, Path: wire.PathObject,
		Query: objQuery(bucket, key), Cap: &rpc.Cap{Op: rpc.CapRead, Bucket: bucket, Key: key}})
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return metaOf(resp)
}

// deleteReplica writes a tombstone at version.
func (g *Gateway) deleteReplica(ctx context.Context, t target, bucket, key string, version uint64, mod int64) (*object.Object, error) {
	if t.local {
		if err := g.EnsureLocalBucket(bucket); err != nil {
			return nil, err
		}
		return g.cfg.Store.DeleteVersion(bucket, key, version, mod)
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	resp, err := g.cfg.RPC.Do(ctx, &rpc.Request{Method: http.MethodDelete, Addr: t.addr, Path: wire.PathObject,
		Query: objQuery(bucket, key, wire.QVersion, u64(version), wire.QModTime, i64(mod)), Cap: &rpc.Cap{Op: rpc.CapDelete, Bucket: bucket, Key: key}})
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return metaOf(resp)
}

// ObjectReader reads one object version.
type ObjectReader interface {
	// Info is the object's record.
	Info() *object.Object
	// WriteRange writes n bytes from off to w; corrupt data is an error, never written.
	WriteRange(ctx context.Context, w io.Writer, off, n int64) (int64, error)
	Close() error
}

type localReader struct{ *store.Reader }

func (r localReader) Info() *object.Object { return r.Object }

// openReplica opens bucket/key on a replica; version, if non-zero, must match.
func (g *Gateway) openReplica(ctx context.Context, t target, bucket, key string, version uint64) (ObjectReader, error) {
	if t.local {
		rd, err := g.cfg.Store.OpenObject(bucket, key)
		if err != nil {
			return nil, err
		}
		if version != 0 && rd.Object.HLC != version {
			rd.Close()
			return nil, errors.E(errors.Precondition, "replica changed")
		}
		return localReader{rd}, nil
	}
	rr := &remoteReader{g: g, t: t, bucket: bucket, key: key}
	// The answer's headers must come within Timeout (a paused node must not hang the
	// read); the body then streams for as long as it takes.
	hctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(g.cfg.Timeout, func() {
		g.markSuspect(t.id)
		cancel()
	})
	resp, err := g.cfg.RPC.Do(hctx, &rpc.Request{Method: http.MethodGet, Addr: t.addr, Path: wire.PathObject,
		Query: objQuery(bucket, key, wire.QVersion, u64(version)), Cap: &rpc.Cap{Op: rpc.CapRead, Bucket: bucket, Key: key}})
	if !timer.Stop() && err != nil {
		return nil, errors.E(errors.Transient, fmt.Errorf("node %s did not answer within %s", t.id, g.cfg.Timeout))
	}
	if err != nil {
		cancel()
		return nil, err
	}
	rr.cancel = cancel
	if rr.o, err = metaOf(resp); err != nil {
		resp.Body.Close()
		return nil, err
	}
	rr.resp = resp
	return rr, nil
}

// remoteReader reads an object from another node: the whole body from the response of
// the open, or a range with a new request pinned to the same version.
type remoteReader struct {
	g           *Gateway
	t           target
	bucket, key string
	o           *object.Object
	resp        *http.Response
	cancel      context.CancelFunc
}

func (r *remoteReader) Info() *object.Object { return r.o }

func (r *remoteReader) WriteRange(ctx context.Context, w io.Writer, off, n int64) (int64, error) {
	body := r.resp
	r.resp = nil
	if body == nil || off != 0 || n != r.o.BodySize() {
		if body != nil {
			body.Body.Close()
		}
		resp, err := r.g.cfg.RPC.Do(ctx, &rpc.Request{Method: http.MethodGet, Addr: r.t.addr, Path: wire.PathObject,
			Query: objQuery(r.bucket, r.key, wire.QVersion, u64(r.o.HLC), wire.QOffset, i64(off), wire.QLength, i64(n)), Cap: &rpc.Cap{Op: rpc.CapRead, Bucket: r.bucket, Key: r.key}})
		if err != nil {
			return 0, err
		}
		body = resp
	}
	defer body.Body.Close()
	got, err := io.CopyN(w, body.Body, n)
	if err != nil {
		return got, errors.E(errors.IO, err)
	}
	return got, nil
}

func (r *remoteReader) Close() error {
	if r.resp != nil {
		r.resp.Body.Close()
		r.resp = nil
	}
	if r.cancel != nil {
		r.cancel()
	}
	return nil
}
