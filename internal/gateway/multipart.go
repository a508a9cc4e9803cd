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
	// An unknown upload is refused before the body is read.
	up, err := g.uploadParts(ctx, ts, bucket, key, uploadID, 0, 1)
	if err != nil {
		return nil, errors.E(op, err)
	}
	if up.Upload != nil && up.Upload.StorageClass != "" {
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

// uploadParts returns a page of an upload's parts from the first replica that has it.
func (g *Gateway) uploadParts(ctx context.Context, ts []target, bucket, key, uploadID string, after, max int) (*node.PartsAnswer, error) {
	var lastErr error
	for _, t := range ts {
		if t.down {
			continue
		}
		ans, err := g.partsReplica(ctx, t, bucket, key, uploadID, after, max)
		if err == nil {
			return ans, nil
		}
		lastErr = err
	}
	if lastErr == nil {
		lastErr = errors.E(errors.Transient, "every replica is down")
	}
	return nil, lastErr
}

func (g *Gateway) partsReplica(ctx context.Context, t target, bucket, key, uploadID string, after, max int) (*node.PartsAnswer, error) {
	if t.local {
		up, err := g.cfg.Store.Upload(bucket, key, uploadID)
		if err != nil {
			return nil, err
		}
		parts, trunc, err := g.cfg.Store.ListParts(bucket, key, uploadID, after, max)
		if err != nil {
			return nil, err
		}
		ans := &node.PartsAnswer{Upload: up, Truncated: trunc}
		for _, p := range parts {
			ans.Parts = append(ans.Parts, node.WirePart{Number: p.Number, Object: p.Object})
		}
		return ans, nil
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

// ListParts returns a page of an upload's parts.
func (g *Gateway) ListParts(ctx context.Context, bucket, key, uploadID string, after, max int) ([]store.Part, bool, error) {
	const op errors.Op = "gateway.ListParts"
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return nil, false, errors.E(op, err)
	}
	_, ts, err := g.replicas(bucket, key)
	if err != nil {
		return nil, false, errors.E(op, err)
	}
	ans, err := g.uploadParts(ctx, ts, bucket, key, uploadID, after, max)
	if err != nil {
		return nil, false, errors.E(op, err)
	}
	parts := make([]store.Part, len(ans.Parts))
	for i, p := range ans.Parts {
		parts[i] = store.Part{Number: p.Number, Object: p.Object}
	}
	return parts, ans.Truncated, nil
}

// CompleteUpload assembles the object on its replicas. finish sees the assembled record
// and the listed parts' records (from the first replica that has the upload) and computes
// the object's checksum; every replica then validates the list against its own parts.
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
	// The upload's record and all its parts, to compute what the object will be.
	byNum := map[int]*store.Object{}
	var up *store.Object
	for after := 0; ; {
		ans, err := g.uploadParts(ctx, ts, bucket, key, uploadID, after, 1000)
		if err != nil {
			return nil, errors.E(op, err)
		}
		up = ans.Upload
		for _, p := range ans.Parts {
			byNum[p.Number] = p.Object
			after = p.Number
		}
		if !ans.Truncated || len(ans.Parts) == 0 {
			break
		}
	}
	o := *up
	o.Size, o.Chunks, o.PartSizes, o.Body, o.Inline, o.Embedded = 0, nil, nil, nil, false, false
	md := md5.New()
	var listed []*store.Object
	complete := true
	for _, cp := range list {
		p, ok := byNum[cp.Number]
		if !ok || !strings.EqualFold(strings.Trim(cp.ETag, `"`), p.ETag) {
			complete = false // the replicas refuse it with the precise error below
			break
		}
		sum, _ := hex.DecodeString(p.ETag)
		md.Write(sum)
		o.Size += p.Size
		o.PartSizes = append(o.PartSizes, p.Size)
		listed = append(listed, p)
	}
	if complete {
		o.ETag = fmt.Sprintf("%x-%d", md.Sum(nil), len(list))
		if finish != nil {
			if err := finish(&o, listed); err != nil {
				return nil, errors.E(op, err)
			}
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
	if len(ok) < cls.W {
		return nil, errors.E(op, quorumFailure("write", ok, failed, cls.W, len(ts)))
	}
	// A replica that refused while the quorum completed lacks a part (it was away when the
	// part was written): drop its upload and have it receive the object by hinted retry.
	for _, f := range failed {
		if errors.Is(errors.Invalid, f.err) {
			g.queueHint(f.t, bucket, key, version, f.err)
			if _, err := g.fanOut(ctx, []target{f.t}, 1, bucket, key, 0, never, func(ctx context.Context, t target) (*store.Object, error) {
				return nil, g.abortReplica(ctx, t, bucket, key, uploadID)
			}); len(err) > 0 {
				g.log.Warn("could not drop the upload of a replica that missed a part", "node", f.t.id, "err", err[0].err)
			}
		}
	}
	res := ok[0].o
	res.Body = nil
	return res, nil
}

// AbortUpload deletes an upload and its parts from the replicas.
func (g *Gateway) AbortUpload(ctx context.Context, bucket, key, uploadID string) error {
	const op errors.Op = "gateway.AbortUpload"
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return errors.E(op, err)
	}
	cls, ts, err := g.replicas(bucket, key)
	if err != nil {
		return errors.E(op, err)
	}
	ok, failed := g.fanOut(ctx, ts, cls.D, bucket, key, 0, never, func(ctx context.Context, t target) (*store.Object, error) {
		return nil, g.abortReplica(ctx, t, bucket, key, uploadID)
	})
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
