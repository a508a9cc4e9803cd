package gateway

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/node"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/store"
)

// Multipart uploads live on the replicas of their object: the upload record and every
// part are written to all of them with the write quorum, and completion assembles the
// object on each replica from its own parts (no bytes are copied). A replica that missed
// a part fails its completion and receives the object later by hinted retry.

// CreateUpload starts an upload of bucket/key on its replicas.
func (g *Gateway) CreateUpload(ctx context.Context, bucket, key string, meta *store.Object) (string, error) {
	const op errors.Op = "gateway.CreateUpload"
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return "", errors.E(op, err)
	}
	cls, ts, err := g.replicas(bucket, key)
	if err != nil {
		return "", errors.E(op, err)
	}
	if _, err := g.classFor(meta.StorageClass); err != nil {
		return "", errors.E(op, err)
	}
	id := store.NewUploadID()
	m := *meta
	if m.StorageClass == "" {
		m.StorageClass = g.policyClass(bucket, key, -1, m.ContentType)
	}
	m.ModTime = time.Now().UnixNano()
	ok, failed := g.fanOut(ctx, ts, cls.W, bucket, key, 0, never, func(ctx context.Context, t target) (*store.Object, error) {
		if t.local {
			if err := g.EnsureLocalBucket(bucket); err != nil {
				return nil, err
			}
			return nil, g.cfg.Store.CreateUploadID(bucket, key, id, &m)
		}
		ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
		defer cancel()
		resp, err := g.cfg.RPC.Do(ctx, &rpc.Request{Method: http.MethodPost, Addr: t.addr, Path: node.PathUpload,
			Query: objQuery(bucket, key, "id", id), Header: http.Header{rpc.HdrMeta: {node.EncodeMeta(&m)}}, Cap: &[3]string{rpc.CapWrite, bucket, key}})
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
		return nil, nil
	})
	if len(ok) < cls.W {
		return "", errors.E(op, quorumFailure("write", ok, failed, cls.W, len(ts)))
	}
	return id, nil
}

// PutPart stores part n of an upload on the object's replicas.
func (g *Gateway) PutPart(ctx context.Context, bucket, key, uploadID string, n int, src io.Reader, size int64, finish func(*store.Object) error) (*store.Object, error) {
	const op errors.Op = "gateway.PutPart"
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return nil, errors.E(op, err)
	}
	cls, ts, err := g.replicas(bucket, key)
	if err != nil {
		return nil, errors.E(op, err)
	}
	// An unknown or ended upload is refused before the body is read.
	v, err := g.viewUpload(ctx, ts, bucket, key, uploadID, false, 0, 1)
	if err != nil {
		return nil, errors.E(op, err)
	}
	if v.end != nil {
		return nil, errors.E(op, errors.NotExist, store.ErrNoSuchUpload)
	}
	if up := v.pending[0].ans; up.Upload.StorageClass != "" {
		if sc, err := g.classFor(up.Upload.StorageClass); err == nil && sc.Sharded() {
			p, err := g.putStripedPart(ctx, sc, ts, cls.W, bucket, key, uploadID, n, src, size, finish)
			if err != nil {
				return nil, errors.E(op, err)
			}
			return p, nil
		}
	}
	p, err := g.write(ctx, ts, cls.W, bucket, key, &store.Object{ModTime: time.Now().UnixNano()}, src, size, 0, uploadID, n, finish)
	if err != nil {
		return nil, errors.E(op, err)
	}
	return p, nil
}

// replicaParts is one replica's view of an upload: pending with its parts, or ended.
type replicaParts struct {
	t   target
	ans *node.PartsAnswer
	err error
}

// uploadView is an upload as its live replicas see it.
type uploadView struct {
	end     *store.UploadEnd // the end record of any replica that has one
	pending []replicaParts   // replicas holding the upload, in placement order
}

// viewUpload asks every live replica of an upload for its state (with all its parts if
// all, else one page from after). An end record on any replica decides: the upload is
// over, and the replicas still holding it are told so (they missed the end: they drop
// it and its parts). Without one, the upload is pending on the replicas that hold it; if
// none does, it is NoSuchUpload (a replica's error if none answered).
func (g *Gateway) viewUpload(ctx context.Context, ts []target, bucket, key, uploadID string, all bool, after, max int) (*uploadView, error) {
	var live []target
	for _, t := range ts {
		if !t.down {
			live = append(live, t)
		}
	}
	if len(live) == 0 {
		return nil, errors.E(errors.Transient, "every replica is down")
	}
	answers, errs := gather(live, func(t target) (*node.PartsAnswer, error) {
		if !all {
			return g.partsReplica(ctx, t, bucket, key, uploadID, after, max)
		}
		var out *node.PartsAnswer
		for a := 0; ; {
			ans, err := g.partsReplica(ctx, t, bucket, key, uploadID, a, 1000)
			if err != nil {
				return nil, err
			}
			if out == nil {
				out = ans
			} else {
				out.Parts = append(out.Parts, ans.Parts...)
			}
			if ans.End != nil || !ans.Truncated || len(ans.Parts) == 0 {
				out.Truncated = false
				return out, nil
			}
			a = ans.Parts[len(ans.Parts)-1].Number
		}
	})
	v := &uploadView{}
	var lastErr error
	notExist := false
	for i, ans := range answers {
		switch {
		case errs[i] != nil && errors.Is(errors.NotExist, errs[i]):
			notExist = true
			lastErr = errs[i]
		case errs[i] != nil:
			lastErr = errs[i]
		case ans.End != nil:
			if v.end == nil {
				v.end = ans.End
			}
		case ans.Upload != nil:
			v.pending = append(v.pending, replicaParts{t: live[i], ans: ans})
		}
	}
	if v.end != nil {
		for _, p := range v.pending {
			g.endReplica(ctx, p.t, uploadID, v.end)
		}
		v.pending = nil
		return v, nil
	}
	if len(v.pending) == 0 {
		if notExist || lastErr == nil {
			return nil, errors.E(errors.NotExist, store.ErrNoSuchUpload)
		}
		return nil, lastErr
	}
	return v, nil
}

// endReplica tells t that an upload ended (it missed the end), in the background; if t
// cannot be told now, a hint retries until it is.
func (g *Gateway) endReplica(ctx context.Context, t target, uploadID string, e *store.UploadEnd) {
	g.bg.Add(1)
	go func() {
		defer g.bg.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.Timeout)
		defer cancel()
		if err := g.sendEnd(ctx, t, uploadID, e); err != nil {
			g.queueEndHint(t, uploadID, e, err)
		}
	}()
}

// sendEnd applies an upload's end record on one replica.
func (g *Gateway) sendEnd(ctx context.Context, t target, uploadID string, e *store.UploadEnd) error {
	if t.local {
		if err := g.EnsureLocalBucket(e.Bucket); err != nil {
			return err
		}
		_, err := g.cfg.Store.EndUpload(uploadID, e)
		return err
	}
	body, _ := json.Marshal(e)
	resp, err := g.cfg.RPC.Do(ctx, &rpc.Request{Method: http.MethodPost, Addr: t.addr, Path: node.PathEnd,
		Query: objQuery(e.Bucket, e.Key, "id", uploadID), Body: strings.NewReader(string(body)), Size: int64(len(body)),
		Cap: &[3]string{rpc.CapWrite, e.Bucket, e.Key}})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

func (g *Gateway) partsReplica(ctx context.Context, t target, bucket, key, uploadID string, after, max int) (*node.PartsAnswer, error) {
	if t.local {
		return node.PartsOf(g.cfg.Store, bucket, key, uploadID, after, max)
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	var ans node.PartsAnswer
	err := g.cfg.RPC.DoJSON(ctx, &rpc.Request{Method: http.MethodGet, Addr: t.addr, Path: node.PathParts,
		Query: objQuery(bucket, key, "id", uploadID, "after", strconv.Itoa(after), "max", strconv.Itoa(max)),
		Cap:   &[3]string{rpc.CapRead, bucket, key}}, &ans)
	if err != nil {
		return nil, err
	}
	return &ans, nil
}

// ListParts returns a page of an upload's parts, from the first replica holding it. An
// upload that ended on any replica is NoSuchUpload.
func (g *Gateway) ListParts(ctx context.Context, bucket, key, uploadID string, after, max int) ([]store.Part, bool, error) {
	const op errors.Op = "gateway.ListParts"
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return nil, false, errors.E(op, err)
	}
	_, ts, err := g.replicas(bucket, key)
	if err != nil {
		return nil, false, errors.E(op, err)
	}
	v, err := g.viewUpload(ctx, ts, bucket, key, uploadID, false, after, max)
	if err != nil {
		return nil, false, errors.E(op, err)
	}
	if v.end != nil {
		return nil, false, errors.E(op, errors.NotExist, store.ErrNoSuchUpload)
	}
	ans := v.pending[0].ans
	parts := make([]store.Part, len(ans.Parts))
	for i, p := range ans.Parts {
		parts[i] = store.Part{Number: p.Number, Object: p.Object}
	}
	return parts, ans.Truncated, nil
}

// CompleteUpload assembles the object on its replicas. finish sees the assembled record
// and the listed parts' records and computes the object's checksum; every replica then
// validates the list against its own parts.
//
// It is two-phase: every live replica is asked for the upload first. If any replica
// says it ended, the completion is answered from that record: with the same part list,
// the original result (a client retrying after a lost answer; nothing is written), else
// NoSuchUpload. Otherwise the completion is sent only if at least W replicas hold every
// listed part with the listed ETags, so a replica that missed parts (or missed the end)
// never completes on its own. Replicas that could not complete get the object by hinted
// copy and the end record, which makes them drop their upload.
func (g *Gateway) CompleteUpload(ctx context.Context, bucket, key, uploadID string, list []store.CompletePart, minPart int64, finish func(o *store.Object, parts []*store.Object) error) (*store.Object, error) {
	const op errors.Op = "gateway.CompleteUpload"
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return nil, errors.E(op, err)
	}
	cls, ts, err := g.replicas(bucket, key)
	if err != nil {
		return nil, errors.E(op, err)
	}
	if len(list) == 0 {
		return nil, errors.E(op, errors.Invalid, "no parts given")
	}
	v, err := g.viewUpload(ctx, ts, bucket, key, uploadID, true, 0, 0)
	if err != nil {
		return nil, errors.E(op, err)
	}
	if v.end != nil {
		if v.end.Aborted || !store.SameParts(v.end.Parts, list) {
			return nil, errors.E(op, errors.NotExist, store.ErrNoSuchUpload)
		}
		return g.completedBefore(ctx, ts, bucket, key, v.end), nil
	}
	// The replicas holding every listed part, and what the object will be (from the
	// first of them).
	var ready []target
	var o store.Object
	var listed []*store.Object
	for _, p := range v.pending {
		byNum := map[int]*store.Object{}
		for _, wp := range p.ans.Parts {
			byNum[wp.Number] = wp.Object
		}
		var ps []*store.Object
		for _, cp := range list {
			x, ok := byNum[cp.Number]
			if !ok || !strings.EqualFold(strings.Trim(cp.ETag, `"`), x.ETag) {
				ps = nil
				break
			}
			ps = append(ps, x)
		}
		if ps == nil {
			continue
		}
		if ready = append(ready, p.t); len(ready) == 1 {
			o, listed = *p.ans.Upload, ps
		}
	}
	if len(ready) == 0 {
		return nil, errors.E(op, errors.Invalid, store.ErrInvalidPart)
	}
	if len(ready) < cls.W {
		return nil, errors.E(op, errors.Transient, &QuorumError{What: "write", Got: len(ready), Need: cls.W, Of: len(ts),
			Last: fmt.Errorf("only %d of the upload's replicas hold every listed part", len(ready))})
	}
	o.Size, o.Chunks, o.PartSizes, o.Body, o.Inline, o.Embedded = 0, nil, nil, nil, false, false
	md := md5.New()
	for _, p := range listed {
		sum, _ := hex.DecodeString(p.ETag)
		md.Write(sum)
		o.Size += p.Size
		o.PartSizes = append(o.PartSizes, p.Size)
	}
	o.ETag = fmt.Sprintf("%x-%d", md.Sum(nil), len(list))
	if finish != nil {
		if err := finish(&o, listed); err != nil {
			return nil, errors.E(op, err)
		}
	}
	version, mod := g.clock.Next(), time.Now().UnixNano()
	body, _ := json.Marshal(node.CompleteRequest{Parts: list, MinPart: minPart, Final: &o})
	ok, failed := g.fanOut(ctx, ts, cls.W, bucket, key, version, always, func(ctx context.Context, t target) (*store.Object, error) {
		if t.local {
			return g.cfg.Store.CompleteUploadVersion(bucket, key, uploadID, list, minPart, version, mod, func(x *store.Object, _ []*store.Object) error {
				x.ChecksumAlgo, x.Checksum, x.ChecksumType = o.ChecksumAlgo, o.Checksum, o.ChecksumType
				return nil
			})
		}
		ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
		defer cancel()
		resp, err := g.cfg.RPC.Do(ctx, &rpc.Request{Method: http.MethodPost, Addr: t.addr, Path: node.PathComplete,
			Query: objQuery(bucket, key, "id", uploadID, "v", u64(version), "mod", i64(mod)),
			Body:  strings.NewReader(string(body)), Size: int64(len(body)), Cap: &[3]string{rpc.CapWrite, bucket, key}})
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
		return metaOf(resp)
	})
	// Every replica that did not complete learns of the end (a hint if it cannot be told
	// now): it drops its upload and parts, and receives the object by hinted copy.
	end := &store.UploadEnd{Bucket: bucket, Key: key, HLC: version, ETag: o.ETag, Parts: list, At: mod}
	if len(ok) > 0 {
		for _, f := range failed {
			if errors.Is(errors.Invalid, f.err) || errors.Is(errors.NotExist, f.err) {
				g.queueHint(f.t, bucket, key, version, f.err) // refused: it lacks a part
			}
			g.endReplica(ctx, f.t, uploadID, end)
		}
	}
	if len(ok) < cls.W {
		return nil, errors.E(op, quorumFailure("write", ok, failed, cls.W, len(ts)))
	}
	res := ok[0].o
	res.Body = nil
	return res, nil
}

// completedBefore is the answer to a completion retried after the upload completed: the
// object it wrote if a replica still has that version, else its version and ETag.
func (g *Gateway) completedBefore(ctx context.Context, ts []target, bucket, key string, e *store.UploadEnd) *store.Object {
	for _, t := range ts {
		if t.down {
			continue
		}
		if o, err := g.statReplica(ctx, t, bucket, key); err == nil && o.HLC == e.HLC && !o.Deleted {
			o.Body = nil
			return o
		}
	}
	return &store.Object{HLC: e.HLC, ETag: e.ETag}
}

// AbortUpload deletes an upload and its parts from the replicas. An upload that ended
// (completed or aborted) on any replica is NoSuchUpload.
func (g *Gateway) AbortUpload(ctx context.Context, bucket, key, uploadID string) error {
	const op errors.Op = "gateway.AbortUpload"
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return errors.E(op, err)
	}
	cls, ts, err := g.replicas(bucket, key)
	if err != nil {
		return errors.E(op, err)
	}
	v, err := g.viewUpload(ctx, ts, bucket, key, uploadID, false, 0, 1)
	if err != nil {
		return errors.E(op, err)
	}
	if v.end != nil {
		return errors.E(op, errors.NotExist, store.ErrNoSuchUpload)
	}
	ok, failed := g.fanOut(ctx, ts, cls.D, bucket, key, 0, never, func(ctx context.Context, t target) (*store.Object, error) {
		return nil, g.abortReplica(ctx, t, bucket, key, uploadID)
	})
	if len(ok) > 0 {
		end := &store.UploadEnd{Bucket: bucket, Key: key, Aborted: true, At: time.Now().UnixNano()}
		for _, f := range failed {
			g.endReplica(ctx, f.t, uploadID, end)
		}
	}
	if len(ok) < cls.D {
		return errors.E(op, quorumFailure("delete", ok, failed, cls.D, len(ts)))
	}
	return nil
}

// abortReplica deletes an upload on one replica.
func (g *Gateway) abortReplica(ctx context.Context, t target, bucket, key, uploadID string) error {
	if t.local {
		return g.cfg.Store.AbortUpload(bucket, key, uploadID)
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	resp, err := g.cfg.RPC.Do(ctx, &rpc.Request{Method: http.MethodDelete, Addr: t.addr, Path: node.PathUpload,
		Query: objQuery(bucket, key, "id", uploadID), Cap: &[3]string{rpc.CapDelete, bucket, key}})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// ListUploads lists pending uploads, merged from every storage node.
func (g *Gateway) ListUploads(ctx context.Context, bucket string, opts store.UploadListOptions) (*store.UploadList, error) {
	const op errors.Op = "gateway.ListUploads"
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return nil, errors.E(op, err)
	}
	if g.cfg.Apply == nil {
		return g.cfg.Store.ListUploads(bucket, opts)
	}
	if opts.Max <= 0 {
		opts.Max = 1000
	}
	ts := g.listTargets()
	ress, errs := gather(ts, func(t target) (*store.UploadList, error) {
		if t.local {
			if err := g.EnsureLocalBucket(bucket); err != nil {
				return nil, err
			}
			return g.cfg.Store.ListUploads(bucket, opts)
		}
		q := url.Values{"b": {bucket}, "prefix": {opts.Prefix}, "delim": {opts.Delimiter}, "km": {opts.KeyMarker}, "um": {opts.UploadMarker}, "max": {strconv.Itoa(opts.Max)}}
		var res store.UploadList
		err := g.cfg.RPC.DoJSON(ctx, &rpc.Request{Method: http.MethodGet, Addr: t.addr, Path: node.PathUploads, Query: q,
			Cap: &[3]string{rpc.CapList, bucket, opts.Prefix}}, &res)
		return &res, err
	})
	out := &store.UploadList{}
	seen := map[string]bool{}
	cps := map[string]bool{}
	type entry struct {
		key, id string
		u       *store.Upload
	}
	var all []entry
	for i, r := range ress {
		if errs[i] != nil {
			return nil, errors.E(op, errs[i])
		}
		out.Truncated = out.Truncated || r.Truncated
		for j := range r.Uploads {
			u := &r.Uploads[j]
			if !seen[u.Key+"\x00"+u.UploadID] {
				seen[u.Key+"\x00"+u.UploadID] = true
				all = append(all, entry{u.Key, u.UploadID, u})
			}
		}
		for _, p := range r.CommonPrefixes {
			if !cps[p] {
				cps[p] = true
				all = append(all, entry{key: p})
			}
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].key != all[j].key {
			return all[i].key < all[j].key
		}
		return all[i].id < all[j].id
	})
	max := opts.Max
	if len(all) > max {
		all, out.Truncated = all[:max], true
	}
	for _, e := range all {
		if e.u == nil {
			out.CommonPrefixes = append(out.CommonPrefixes, e.key)
		} else {
			out.Uploads = append(out.Uploads, *e.u)
		}
		out.NextKey, out.NextUpload = e.key, e.id
	}
	return out, nil
}
