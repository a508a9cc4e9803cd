package replica

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/wire"
)

// Remote is another node's store, reached over the internode protocol (package wire)
// with signed requests carrying capabilities (package rpc).
type Remote struct {
	Node, Addr string
	RPC        *rpc.Client
	// Timeout bounds each call but the bodies of writes and reads, which stream for as
	// long as they take (default 10s); an open whose answer does not start within it
	// fails Transient.
	Timeout time.Duration
	// OnSlow, if set, is called when the holder does not answer an open within Timeout.
	OnSlow func()
}

var _ Replica = (*Remote)(nil)

// ID implements Replica.
func (r *Remote) ID() string { return r.Node }

func (r *Remote) timeout() time.Duration {
	if r.Timeout <= 0 {
		return 10 * time.Second
	}
	return r.Timeout
}

func query(bucket, key string, kv ...string) url.Values {
	q := url.Values{wire.QBucket: {bucket}, wire.QKey: {key}}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	return q
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }
func i64(v int64) string  { return strconv.FormatInt(v, 10) }

// call sends a request that has no streamed body, within Timeout, and returns the record
// the answer carries (nil if it carries none).
func (r *Remote) call(ctx context.Context, req *rpc.Request) (*object.Object, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	req.Addr = r.Addr
	resp, err := r.RPC.Do(ctx, req)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Header.Get(wire.HdrMeta) == "" {
		return nil, nil
	}
	return wire.DecodeMeta(resp.Header.Get(wire.HdrMeta))
}

// callJSON sends a request within Timeout and decodes its JSON answer into out.
func (r *Remote) callJSON(ctx context.Context, req *rpc.Request, out any) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	req.Addr = r.Addr
	return r.RPC.DoJSON(ctx, req, out)
}

func jsonBody(req *rpc.Request, v any) *rpc.Request {
	b, _ := json.Marshal(v)
	req.Body, req.Size = bytes.NewReader(b), int64(len(b))
	return req
}

// Put implements Replica.
func (r *Remote) Put(ctx context.Context, w Write) (*object.Object, error) {
	hdr := http.Header{}
	req := &rpc.Request{Method: http.MethodPut, Addr: r.Addr, Header: hdr, Body: w.Body, Size: w.Size,
		Cap: &rpc.Cap{Op: rpc.CapWrite, Bucket: w.Bucket, Key: w.Key}}
	if w.Part > 0 {
		req.Path, req.Query = wire.PathPart, query(w.Bucket, w.Key, wire.QUploadID, w.UploadID, wire.QPart, strconv.Itoa(w.Part))
	} else {
		if w.Meta == nil {
			return nil, errors.E(errors.Invalid, "an object write without metadata")
		}
		req.Path, req.Query = wire.PathObject, query(w.Bucket, w.Key, wire.QVersion, u64(w.Version), wire.QModTime, i64(w.Meta.ModTime))
		if w.Repair {
			req.Query.Set(wire.QRepair, "1")
		} else if w.IfAbsent {
			req.Query.Set(wire.QIfAbsent, "1")
		}
	}
	meta, final := w.encoded()
	if w.Part == 0 {
		hdr.Set(wire.HdrMeta, meta)
	}
	if w.FinalNow != nil {
		hdr.Set(wire.HdrFinal, final)
	} else {
		// The final metadata goes as a trailer, once the body is complete.
		tr := http.Header{wire.HdrFinal: nil}
		req.Trailer, req.Size = tr, -1
		req.Body = &trailerReader{r: w.Body, fill: func() {
			if w.Final != nil {
				if f := w.Final(); f != nil {
					tr.Set(wire.HdrFinal, wire.EncodeMeta(f))
				}
			}
		}}
	}
	resp, err := r.RPC.Do(ctx, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return wire.DecodeMeta(resp.Header.Get(wire.HdrMeta))
}

// trailerReader calls fill just before it returns EOF, so the trailers it sets are sent.
type trailerReader struct {
	r    io.Reader
	fill func()
	done bool
}

func (t *trailerReader) Read(p []byte) (int, error) {
	if t.r == nil {
		t.r = http.NoBody
	}
	n, err := t.r.Read(p)
	if err == io.EOF && !t.done {
		t.done = true
		t.fill()
	}
	return n, err
}

// Open implements Replica.
func (r *Remote) Open(ctx context.Context, bucket, key string, o OpenOptions) (Reader, error) {
	rr := &remoteReader{r: r, bucket: bucket, key: key, off: 0, n: -1}
	q := query(bucket, key, wire.QVersion, u64(o.Version))
	if o.N > 0 {
		q.Set(wire.QOffset, i64(o.Off))
		q.Set(wire.QLength, i64(o.N))
		rr.off, rr.n = o.Off, o.N
	}
	// The answer's headers must come within Timeout (a paused node must not hang the
	// read); the body then streams for as long as it takes.
	hctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(r.timeout(), func() {
		if r.OnSlow != nil {
			r.OnSlow()
		}
		cancel()
	})
	resp, err := r.RPC.Do(hctx, &rpc.Request{Method: http.MethodGet, Addr: r.Addr, Path: wire.PathObject, Query: q,
		Cap: &rpc.Cap{Op: rpc.CapRead, Bucket: bucket, Key: key}})
	if !timer.Stop() && err != nil {
		return nil, errors.E(errors.Transient, fmt.Errorf("node %s did not answer within %s", r.Node, r.timeout()))
	}
	if err != nil {
		cancel()
		return nil, err
	}
	rr.cancel = cancel
	if rr.o, err = wire.DecodeMeta(resp.Header.Get(wire.HdrMeta)); err != nil {
		resp.Body.Close()
		cancel()
		return nil, err
	}
	if rr.n < 0 {
		rr.n = rr.o.BodySize()
	}
	rr.resp = resp
	return rr, nil
}

// remoteReader reads an object from another node: the range sent with the open's answer,
// or another range with a new request pinned to the same version.
type remoteReader struct {
	r           *Remote
	bucket, key string
	o           *object.Object
	resp        *http.Response
	off, n      int64 // the range resp carries
	cancel      context.CancelFunc
}

func (rr *remoteReader) Info() *object.Object { return rr.o }

func (rr *remoteReader) WriteRange(ctx context.Context, w io.Writer, off, n int64) (int64, error) {
	body := rr.resp
	rr.resp = nil
	if body == nil || off != rr.off || n != rr.n {
		if body != nil {
			body.Body.Close()
		}
		resp, err := rr.r.RPC.Do(ctx, &rpc.Request{Method: http.MethodGet, Addr: rr.r.Addr, Path: wire.PathObject,
			Query: query(rr.bucket, rr.key, wire.QVersion, u64(rr.o.HLC), wire.QOffset, i64(off), wire.QLength, i64(n)),
			Cap:   &rpc.Cap{Op: rpc.CapRead, Bucket: rr.bucket, Key: rr.key}})
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

func (rr *remoteReader) Close() error {
	if rr.resp != nil {
		rr.resp.Body.Close()
		rr.resp = nil
	}
	if rr.cancel != nil {
		rr.cancel()
	}
	return nil
}

// Stat implements Replica.
func (r *Remote) Stat(ctx context.Context, bucket, key string) (*object.Object, error) {
	o, err := r.call(ctx, &rpc.Request{Method: http.MethodHead, Path: wire.PathObject, Query: query(bucket, key),
		Cap: &rpc.Cap{Op: rpc.CapRead, Bucket: bucket, Key: key}})
	if err == nil && o == nil {
		err = errors.E(errors.Invalid, "malformed object metadata")
	}
	return o, err
}

// StatLease implements LeaseStatter: a Stat whose answer may carry a read lease.
func (r *Remote) StatLease(ctx context.Context, bucket, key string, ttl time.Duration) (*object.Object, time.Duration, error) {
	if ttl <= 0 {
		o, err := r.Stat(ctx, bucket, key)
		return o, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	resp, err := r.RPC.Do(ctx, &rpc.Request{Method: http.MethodHead, Addr: r.Addr, Path: wire.PathObject,
		Query: query(bucket, key, wire.QReadLease, i64(ttl.Milliseconds())), Cap: &rpc.Cap{Op: rpc.CapRead, Bucket: bucket, Key: key}})
	if err != nil {
		return nil, 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Header.Get(wire.HdrMeta) == "" {
		return nil, 0, errors.E(errors.Invalid, "malformed object metadata")
	}
	o, err := wire.DecodeMeta(resp.Header.Get(wire.HdrMeta))
	if err != nil {
		return nil, 0, err
	}
	return o, min(parseLease(resp.Header.Get(wire.HdrReadLease)), ttl), nil
}

// Delete implements Replica.
func (r *Remote) Delete(ctx context.Context, bucket, key string, d object.Object) (*object.Object, error) {
	q := query(bucket, key, wire.QVersion, u64(d.HLC), wire.QModTime, i64(d.ModTime))
	if f := deleteFlags(d); f != "" {
		q.Set(wire.QFlags, f)
	}
	if d.Origin != "" {
		q.Set(wire.QOrigin, d.Origin)
	}
	o, err := r.call(ctx, &rpc.Request{Method: http.MethodDelete, Path: wire.PathObject,
		Query: q, Cap: &rpc.Cap{Op: rpc.CapDelete, Bucket: bucket, Key: key}})
	if err == nil && o == nil {
		err = errors.E(errors.Invalid, "malformed object metadata")
	}
	return o, err
}

// UpdateMeta implements Replica.
func (r *Remote) UpdateMeta(ctx context.Context, u object.MetaUpdate) (*object.Object, error) {
	o, err := r.call(ctx, jsonBody(&rpc.Request{Method: http.MethodPost, Path: wire.PathMeta, Query: query(u.Bucket, u.Key),
		Cap: &rpc.Cap{Op: rpc.CapWrite, Bucket: u.Bucket, Key: u.Key}}, wire.MetaUpdateOf(u)))
	if err == nil && o == nil {
		err = errors.E(errors.Invalid, "malformed object metadata")
	}
	return o, err
}

// List implements Replica.
func (r *Remote) List(ctx context.Context, bucket string, opts object.ListOptions) (*object.ListResult, error) {
	q := url.Values{wire.QBucket: {bucket}, wire.QPrefix: {opts.Prefix}, wire.QDelimiter: {opts.Delimiter}, wire.QAfter: {opts.After}, wire.QMax: {strconv.Itoa(opts.Max)}}
	var res wire.ListAnswer
	if err := r.callJSON(ctx, &rpc.Request{Method: http.MethodGet, Path: wire.PathList, Query: q,
		Cap: &rpc.Cap{Op: rpc.CapList, Bucket: bucket, Key: opts.Prefix}}, &res); err != nil {
		return nil, err
	}
	return res.Result(), nil
}

// ListVersions implements Replica.
func (r *Remote) ListVersions(ctx context.Context, bucket string, opts object.VersionListOptions) (*object.VersionList, error) {
	q := url.Values{wire.QBucket: {bucket}, wire.QPrefix: {opts.Prefix}, wire.QDelimiter: {opts.Delimiter}, wire.QKeyMarker: {opts.KeyMarker},
		wire.QMax: {strconv.Itoa(opts.Max)}}
	if opts.VersionMarker != 0 {
		q.Set(wire.QVersion, u64(opts.VersionMarker))
	}
	if opts.AfterNull {
		q.Set(wire.QNullMkr, "1")
	}
	var res wire.VersionsAnswer
	if err := r.callJSON(ctx, &rpc.Request{Method: http.MethodGet, Path: wire.PathVersions, Query: q,
		Cap: &rpc.Cap{Op: rpc.CapList, Bucket: bucket, Key: opts.Prefix}}, &res); err != nil {
		return nil, err
	}
	return res.List(), nil
}

// CreateUpload implements Replica.
func (r *Remote) CreateUpload(ctx context.Context, bucket, key, uploadID string, meta *object.Object) error {
	if meta == nil {
		return errors.E(errors.Invalid, "an upload without metadata")
	}
	_, err := r.call(ctx, &rpc.Request{Method: http.MethodPost, Path: wire.PathUpload, Query: query(bucket, key, wire.QUploadID, uploadID),
		Header: http.Header{wire.HdrMeta: {wire.EncodeMeta(meta)}}, Cap: &rpc.Cap{Op: rpc.CapWrite, Bucket: bucket, Key: key}})
	return err
}

// Parts implements Replica.
func (r *Remote) Parts(ctx context.Context, bucket, key, uploadID string, after, max int) (*object.PartsPage, error) {
	var ans wire.PartsAnswer
	if err := r.callJSON(ctx, &rpc.Request{Method: http.MethodGet, Path: wire.PathParts,
		Query: query(bucket, key, wire.QUploadID, uploadID, wire.QAfter, strconv.Itoa(after), wire.QMax, strconv.Itoa(max)),
		Cap:   &rpc.Cap{Op: rpc.CapRead, Bucket: bucket, Key: key}}, &ans); err != nil {
		return nil, err
	}
	return ans.Page(), nil
}

// Complete implements Replica.
func (r *Remote) Complete(ctx context.Context, c Completion) (*object.Object, error) {
	if c.Final == nil {
		return nil, errors.E(errors.Invalid, "a completion without the coordinator's checksums")
	}
	req := jsonBody(&rpc.Request{Method: http.MethodPost, Path: wire.PathComplete,
		Query: query(c.Bucket, c.Key, wire.QUploadID, c.UploadID, wire.QVersion, u64(c.Version), wire.QModTime, i64(c.ModTime)),
		Cap:   &rpc.Cap{Op: rpc.CapWrite, Bucket: c.Bucket, Key: c.Key}},
		wire.CompleteRequest{Parts: wire.CompletePartsOf(c.Parts), MinPart: c.MinPart, Final: wire.MetaOf(c.Final)})
	o, err := r.call(ctx, req)
	if err == nil && o == nil {
		err = errors.E(errors.Invalid, "malformed object metadata")
	}
	return o, err
}

// EndUpload implements Replica.
func (r *Remote) EndUpload(ctx context.Context, e *object.UploadEnd) error {
	_, err := r.call(ctx, jsonBody(&rpc.Request{Method: http.MethodPost, Path: wire.PathUploadEnd,
		Query: query(e.Bucket, e.Key, wire.QUploadID, e.UploadID), Cap: &rpc.Cap{Op: rpc.CapDelete, Bucket: e.Bucket, Key: e.Key}},
		wire.UploadEndOf(e)))
	return err
}

// ListUploads implements Replica.
func (r *Remote) ListUploads(ctx context.Context, bucket string, opts object.UploadListOptions) (*object.UploadList, error) {
	q := url.Values{wire.QBucket: {bucket}, wire.QPrefix: {opts.Prefix}, wire.QDelimiter: {opts.Delimiter}, wire.QKeyMarker: {opts.KeyMarker},
		wire.QUploadMkr: {opts.UploadMarker}, wire.QMax: {strconv.Itoa(opts.Max)}}
	var res wire.UploadsAnswer
	if err := r.callJSON(ctx, &rpc.Request{Method: http.MethodGet, Path: wire.PathUploads, Query: q,
		Cap: &rpc.Cap{Op: rpc.CapList, Bucket: bucket, Key: opts.Prefix}}, &res); err != nil {
		return nil, err
	}
	return res.List(), nil
}

// Digests implements Replica. The holder reads its whole index to answer: the call is not
// bounded by Timeout.
func (r *Remote) Digests(ctx context.Context, partitions int, parts []int) ([]uint64, error) {
	var ans wire.DigestAnswer
	if err := r.RPC.DoJSON(ctx, jsonBody(&rpc.Request{Method: http.MethodPost, Addr: r.Addr, Path: wire.PathDigest, Cap: &rpc.Cap{Op: rpc.CapList}},
		wire.ScanRequest{Partitions: partitions, Parts: parts}), &ans); err != nil {
		return nil, err
	}
	if len(ans.Digests) != len(parts) {
		return nil, errors.E(errors.IO, fmt.Errorf("node %s: %d digests for %d partitions", r.Node, len(ans.Digests), len(parts)))
	}
	return ans.Digests, nil
}

// Scan implements Replica. The answer streams; it is not bounded by Timeout.
func (r *Remote) Scan(ctx context.Context, partitions int, parts []int, fn func(object.VersionEntry)) error {
	resp, err := r.RPC.Do(ctx, jsonBody(&rpc.Request{Method: http.MethodPost, Addr: r.Addr, Path: wire.PathScan, Cap: &rpc.Cap{Op: rpc.CapList}},
		wire.ScanRequest{Partitions: partitions, Parts: parts}))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var w wire.ScanEntry
		if err := dec.Decode(&w); err != nil {
			if err == io.EOF {
				return errors.E(errors.IO, fmt.Errorf("node %s: scan ended early", r.Node))
			}
			return errors.E(errors.IO, err)
		}
		if w.Bucket == "" {
			return nil // end marker
		}
		fn(w.Entry())
	}
}
