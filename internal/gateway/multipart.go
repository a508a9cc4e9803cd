package gateway

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/topology"
)

// Multipart uploads live on the replicas of their object: the upload record and every
// part are written to all of them with the write quorum, and completion assembles the
// object on each replica from its own parts (no bytes are copied).
//
// An upload ends (completed or aborted) with an end record on each replica
// (store.UploadEnd). Every operation on an upload asks all its live replicas, not the
// first that answers: one replica's end record decides the answer (a retried completion
// with the same part list gets the original result, anything else NoSuchUpload) and is
// sent on to the replicas that lack it, so a replica that was away when the upload ended
// drops its stale upload instead of completing it again. Completion is two-phase: the
// commit is sent only when at least W replicas hold the pending upload with every listed
// part. A replica that missed a part (or the end) receives the end record and, for a
// completion, the object by hinted retry; anti-entropy carries end records too.
// The semantics per operation are in docs/design/20261123_cluster.md.

// CreateUpload starts an upload of bucket/key on its replicas.
func (g *Gateway) CreateUpload(ctx context.Context, bucket, key string, meta *object.Object) (string, error) {
	const op errors.Op = "gateway.CreateUpload"
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return "", errors.E(op, err)
	}
	cls, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return "", errors.E(op, err)
	}
	if _, err := g.classFor(meta.StorageClass); err != nil {
		return "", errors.E(op, err)
	}
	id := store.NewUploadID()
	m := *meta
	m.MetaHLC = 0
	if m.StorageClass == "" {
		m.StorageClass = g.policyClass(bucket, key, -1, m.ContentType)
	}
	m.ModTime = time.Now().UnixNano()
	ok, failed := g.fanOut(ctx, ts, cls.W, bucket, key, 0, never, func(ctx context.Context, t topology.Target) (*object.Object, error) {
		ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
		defer cancel()
		return nil, g.replica(t).CreateUpload(ctx, bucket, key, id, &m)
	})
	if len(ok) < cls.W {
		err := quorumFailure("write", ok, failed, cls.W, len(ts))
		g.abandonUpload(ctx, ts, &object.UploadEnd{Bucket: bucket, Key: key, UploadID: id, State: object.UploadAborted, Ended: time.Now().UnixNano()})
		return "", errors.E(op, err)
	}
	return id, nil
}

// abandonUpload ends an upload whose creation failed its quorum: the client never learns
// its id, so the replicas that stored it would list it until a lifecycle rule or an
// operator aborted it. Every replica gets an aborted end record (the ones that fail get
// it by hinted retry), which drops the upload where it was created and refuses a create
// still on its way. Best effort: an upload left where the end could not be sent or
// queued stays listed, as an interrupted create may in S3, and can be aborted.
func (g *Gateway) abandonUpload(ctx context.Context, ts []topology.Target, end *object.UploadEnd) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.Timeout)
	defer cancel()
	_, errs := topology.Gather(ts, func(t topology.Target) (struct{}, error) {
		if t.Down {
			return struct{}{}, errNotSent
		}
		return struct{}{}, g.replica(t).EndUpload(ctx, end)
	})
	for i, err := range errs {
		if err != nil {
			g.queueEndHint(ts[i], end)
		}
	}
}

// PutPart stores part n of an upload on the object's replicas.
func (g *Gateway) PutPart(ctx context.Context, bucket, key, uploadID string, n int, src io.Reader, size int64, finish func(*object.Object) error) (*object.Object, error) {
	const op errors.Op = "gateway.PutPart"
	// An unknown or ended upload is refused before the body is read.
	cls, ts, up, err := g.pendingUpload(ctx, bucket, key, uploadID)
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
	p, err := g.write(ctx, ts, cls.W, replica.Write{Bucket: bucket, Key: key, Meta: &object.Object{ModTime: time.Now().UnixNano()}, UploadID: uploadID, Part: n}, src, size, finish)
	if err != nil {
		return nil, errors.E(op, err)
	}
	return p, nil
}

// StatUpload returns the record of a pending upload (what CreateUpload stored: its
// metadata, storage class, encryption), read like PutPart reads it; NoSuchUpload if it
// does not exist or ended.
func (g *Gateway) StatUpload(ctx context.Context, bucket, key, uploadID string) (*object.Object, error) {
	const op errors.Op = "gateway.StatUpload"
	_, _, up, err := g.pendingUpload(ctx, bucket, key, uploadID)
	if err != nil {
		return nil, errors.E(op, err)
	}
	if up.Upload == nil {
		return nil, errors.E(op, errors.NotExist, object.ErrNoSuchUpload)
	}
	o := *up.Upload
	return &o, nil
}

// pendingUpload reads an upload's record from its replicas (with the quorum a part
// write needs) and returns it with the key's class and replicas.
func (g *Gateway) pendingUpload(ctx context.Context, bucket, key, uploadID string) (clustermap.Class, []topology.Target, *object.PartsPage, error) {
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return clustermap.Class{}, nil, nil, err
	}
	cls, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return clustermap.Class{}, nil, nil, err
	}
	up, err := g.settle(ctx, g.uploadView(ctx, ts, viewNeed(len(ts), cls.W), bucket, key, uploadID, 0, 1, false), bucket, key, uploadID)
	return cls, ts, up, err
}

// replicaUpload is one replica's view of an upload.
type replicaUpload struct {
	t   topology.Target
	ans *object.PartsPage // nil if err is set
	err error             // NotExist: the replica neither holds the upload nor has its end record
}

// pending reports whether the replica holds the upload, pending.
func (r replicaUpload) pending() bool { return r.err == nil && r.ans.End == nil }

// uploadState is an upload's state on all its replicas.
type uploadState struct {
	reps []replicaUpload   // every replica, in placement order
	end  *object.UploadEnd // an end record held by some replica, or nil
}

// pending returns the replicas that hold the upload, pending, in placement order.
func (v *uploadState) pending() []replicaUpload {
	var out []replicaUpload
	for _, r := range v.reps {
		if r.pending() {
			out = append(out, r)
		}
	}
	return out
}

// unanswered returns the first error of a replica that did not say what it holds (it is
// down, or failed), or nil if every replica answered.
func (v *uploadState) unanswered() error {
	for _, r := range v.reps {
		if r.err != nil && !errors.Is(errors.NotExist, r.err) {
			return r.err
		}
	}
	return nil
}

// uploadView asks every live replica of bucket/key for the upload: a page of its parts
// (all of them, if all is set) or its end record. Once need replicas answered (enough that
// any W of them include one of them: an end record held by W replicas is always seen), the
// others get StragglerWait more, so a paused replica does not hold up every operation on
// the upload; one that has not answered by then counts as not answering.
func (g *Gateway) uploadView(ctx context.Context, ts []topology.Target, need int, bucket, key, uploadID string, after, max int, all bool) *uploadState {
	// The stragglers are not cancelled, only no longer waited for (they end within the
	// replica timeout): cancelling a call just as its answer arrives can close a
	// connection the transport has already handed to the next request.
	done := ctx.Done()
	ctx = context.WithoutCancel(ctx)
	fetch := func(t topology.Target) (*object.PartsPage, error) {
		if t.Down {
			return nil, errors.E(errors.Transient, fmt.Errorf("node %s is down: %w", t.ID, errNotSent))
		}
		if !all {
			return g.replica(t).Parts(ctx, bucket, key, uploadID, after, max)
		}
		var out *object.PartsPage
		for a := 0; ; {
			p, err := g.replica(t).Parts(ctx, bucket, key, uploadID, a, 1000)
			if err != nil {
				return nil, err
			}
			if out == nil {
				out = p
			} else {
				out.Parts = append(out.Parts, p.Parts...)
			}
			if p.End != nil || !p.Truncated || len(p.Parts) == 0 {
				out.Truncated = false
				return out, nil
			}
			a = p.Parts[len(p.Parts)-1].Number
		}
	}
	type answer struct {
		i   int
		ans *object.PartsPage
		err error
	}
	ch := make(chan answer, len(ts))
	for i, t := range ts {
		go func() {
			a, err := fetch(t)
			ch <- answer{i, a, err}
		}()
	}
	v := &uploadState{reps: make([]replicaUpload, len(ts))}
	for i, t := range ts {
		v.reps[i] = replicaUpload{t: t, err: errors.E(errors.Transient, fmt.Errorf("node %s did not answer in time", t.ID))}
	}
	var cutoff <-chan time.Time
	for got := 0; got < len(ts); got++ {
		if got >= need && cutoff == nil {
			cutoff = time.After(g.cfg.StragglerWait)
		}
		var a answer
		select {
		case a = <-ch:
		case <-cutoff:
			return v.finish()
		case <-done:
			return v.finish()
		}
		v.reps[a.i].ans, v.reps[a.i].err = a.ans, a.err
	}
	return v.finish()
}

// finish fills in v.end and classifies empty answers.
func (v *uploadState) finish() *uploadState {
	for i := range v.reps {
		r := &v.reps[i]
		if r.err == nil && r.ans == nil {
			r.err = errors.E(errors.NotExist, object.ErrNoSuchUpload)
		}
		if r.err == nil && r.ans.End != nil && v.end == nil {
			v.end = r.ans.End
		}
	}
	return v
}

// viewNeed is how many of n replicas uploadView waits for with write quorum w: n-w+1,
// so that the answers meet every set of w replicas.
func viewNeed(n, w int) int { return max(n-w+1, 1) }

// settle decides what v says about the upload: if some replica has its end record, the
// record goes to the replicas that lack it and the answer is NoSuchUpload; if no replica
// holds the upload, NoSuchUpload (or, with replicas unanswered, their error). Otherwise it
// returns the answer of the first replica that holds it.
func (g *Gateway) settle(ctx context.Context, v *uploadState, bucket, key, uploadID string) (*object.PartsPage, error) {
	if v.end != nil {
		g.spreadEnd(ctx, v, v.end)
		return nil, errors.E(errors.NotExist, object.ErrNoSuchUpload)
	}
	if p := v.pending(); len(p) > 0 {
		return p[0].ans, nil
	}
	if err := v.unanswered(); err != nil {
		return nil, err
	}
	return nil, errors.E(errors.NotExist, object.ErrNoSuchUpload)
}

// spreadEnd sends an upload's end record to the replicas in v that hold the upload
// pending, and queues it for the replicas that did not answer.
func (g *Gateway) spreadEnd(ctx context.Context, v *uploadState, e *object.UploadEnd) {
	var send []topology.Target
	for _, r := range v.reps {
		switch {
		case r.pending():
			send = append(send, r.t)
		case r.err != nil && !errors.Is(errors.NotExist, r.err):
			g.queueEndHint(r.t, e)
		}
	}
	_, errs := topology.Gather(send, func(t topology.Target) (struct{}, error) { return struct{}{}, g.replica(t).EndUpload(ctx, e) })
	for i, err := range errs {
		if err != nil {
			g.queueEndHint(send[i], e)
		}
	}
}

// queueEndHint queues t to receive an upload's end record.
func (g *Gateway) queueEndHint(t topology.Target, e *object.UploadEnd) {
	if g.cfg.Hints == nil {
		return
	}
	if err := g.cfg.Hints.AddUploadEnd(t.ID, e); err != nil {
		g.log.Error("cannot queue an upload's end for retry: the replica keeps the upload until anti-entropy", "node", t.ID, "bucket", e.Bucket, "key", e.Key, "upload", e.UploadID, "err", err)
	}
}

// ListParts returns a page of an upload's parts.
func (g *Gateway) ListParts(ctx context.Context, bucket, key, uploadID string, after, max int) ([]object.Part, bool, error) {
	const op errors.Op = "gateway.ListParts"
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return nil, false, errors.E(op, err)
	}
	cls, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return nil, false, errors.E(op, err)
	}
	v := g.uploadView(ctx, ts, viewNeed(len(ts), cls.W), bucket, key, uploadID, after, max, false)
	if _, err := g.settle(ctx, v, bucket, key, uploadID); err != nil {
		return nil, false, errors.E(op, err)
	}
	parts, truncated := mergeParts(v.pending(), max)
	return parts, truncated, nil
}

// mergeParts merges the replicas' pages of parts: every part number any of them holds
// (a replica that was away misses some), the most recently uploaded record of each, up to
// max, and no number beyond the last of a truncated page (what follows it there is not
// known yet).
func mergeParts(reps []replicaUpload, max int) ([]object.Part, bool) {
	byNum := map[int]*object.Object{}
	limit, truncated := -1, false
	for _, r := range reps {
		for _, p := range r.ans.Parts {
			if o, ok := byNum[p.Number]; !ok || p.Object.ModTime > o.ModTime {
				byNum[p.Number] = p.Object
			}
		}
		if r.ans.Truncated && len(r.ans.Parts) > 0 {
			truncated = true
			if last := r.ans.Parts[len(r.ans.Parts)-1].Number; limit < 0 || last < limit {
				limit = last
			}
		}
	}
	var parts []object.Part
	for n, o := range byNum {
		if limit < 0 || n <= limit {
			parts = append(parts, object.Part{Number: n, Object: o})
		}
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].Number < parts[j].Number })
	if len(parts) > max {
		parts, truncated = parts[:max], true
	}
	return parts, truncated
}

// CompleteUpload assembles the object on its replicas. finish sees the assembled record
// and the listed parts' records and computes the object's checksum; every replica then
// validates the list against its own parts.
//
// The upload's state is read from every replica first. An upload completed with the same
// part list answers with the recorded result and writes nothing; one that ended otherwise
// is NoSuchUpload. The commit is sent only if at least W replicas hold the upload with
// every listed part and ETag: otherwise nothing is written.
func (g *Gateway) CompleteUpload(ctx context.Context, bucket, key, uploadID string, list []object.CompletePart, minPart int64, finish func(o *object.Object, parts []*object.Object) error) (*object.Object, error) {
	return g.completeUpload(ctx, bucket, key, uploadID, list, minPart, nil, finish)
}

// completeUpload is CompleteUpload; cw, if set, is its condition (CompleteUploadIf).
func (g *Gateway) completeUpload(ctx context.Context, bucket, key, uploadID string, list []object.CompletePart, minPart int64, cw *condWrite, finish func(o *object.Object, parts []*object.Object) error) (*object.Object, error) {
	const op errors.Op = "gateway.CompleteUpload"
	defer g.cache.drop(bucket, key)
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return nil, errors.E(op, err)
	}
	cls, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return nil, errors.E(op, err)
	}
	if len(list) == 0 {
		return nil, errors.E(op, errors.Invalid, "no parts given")
	}
	for i := 1; i < len(list); i++ {
		if list[i].Number <= list[i-1].Number {
			return nil, errors.E(op, errors.Invalid, object.ErrInvalidPartOrder)
		}
	}
	v := g.uploadView(ctx, ts, viewNeed(len(ts), cls.W), bucket, key, uploadID, 0, 0, true)
	if e := v.end; e != nil {
		g.spreadEnd(ctx, v, e)
		if e.SameParts(list) && e.Result != nil {
			res := *e.Result // a retry of this completion: its answer again, nothing written
			res.Body = nil
			return &res, nil
		}
		return nil, errors.E(op, errors.NotExist, object.ErrNoSuchUpload)
	}
	pend := v.pending()
	if len(pend) == 0 {
		if err := v.unanswered(); err != nil {
			return nil, errors.E(op, err)
		}
		return nil, errors.E(op, errors.NotExist, object.ErrNoSuchUpload)
	}
	// The replicas that hold every listed part with its ETag, and their part records.
	var holders []topology.Target
	var byNum map[int]*object.Object
	for _, r := range pend {
		have := map[int]*object.Object{}
		for _, p := range r.ans.Parts {
			have[p.Number] = p.Object
		}
		all := true
		for _, cp := range list {
			p, ok := have[cp.Number]
			if !ok || !strings.EqualFold(strings.Trim(cp.ETag, `"`), p.ETag) {
				all = false
				break
			}
		}
		if all {
			holders = append(holders, r.t)
			if byNum == nil {
				byNum = have
			}
		}
	}
	if len(holders) < cls.W {
		if len(holders) == 0 && v.unanswered() == nil {
			return nil, errors.E(op, errors.Invalid, fmt.Errorf("no replica holds every listed part: %w", object.ErrInvalidPart))
		}
		return nil, errors.E(op, replica.QuorumErr("write", len(holders), cls.W, len(ts),
			errors.E(errors.Transient, "too few replicas hold every listed part: nothing was sent")))
	}
	up := pend[0].ans.Upload
	for _, r := range pend {
		if r.t.ID == holders[0].ID {
			up = r.ans.Upload
		}
	}
	o := *up
	o.Size, o.Chunks, o.PartSizes, o.Body, o.Inline, o.Embedded = 0, nil, nil, nil, false, false
	md := md5.New()
	var listed []*object.Object
	for _, cp := range list {
		p := byNum[cp.Number]
		sum, _ := hex.DecodeString(p.ETag)
		md.Write(sum)
		o.Size += p.Size
		o.PartSizes = append(o.PartSizes, p.Size)
		listed = append(listed, p)
	}
	o.ETag = fmt.Sprintf("%x-%d", md.Sum(nil), len(list))
	if finish != nil {
		if err := finish(&o, listed); err != nil {
			return nil, errors.E(op, err)
		}
	}
	if err := cw.stamp(ctx, &o); err != nil { // the condition, under the key's lease
		return nil, errors.E(op, err)
	}
	version, mod := cw.versionOr(g.clock.Next), time.Now().UnixNano()
	c := replica.Completion{Bucket: bucket, Key: key, UploadID: uploadID, Parts: list, MinPart: minPart, Version: version, ModTime: mod, Final: &o}
	ok, failed := g.fanOut(ctx, holders, cls.W, bucket, key, version, always, func(ctx context.Context, t topology.Target) (*object.Object, error) {
		return g.replica(t).Complete(ctx, c)
	})
	if len(ok) < cls.W {
		return nil, errors.E(op, cw.end(quorumFailure("write", ok, failed, cls.W, len(holders))))
	}
	lapsed := cw.end(nil) // a conditional completion whose lease lapsed: 409 once the end record is spread
	res := *ok[0].o
	if res.HLC != version {
		// A newer write of the key was there first: the replicas kept it and consumed
		// the upload. The answer (and the end record) is still this upload's object,
		// as S3 answers a completion, not the newer write's record.
		res = o
		res.HLC, res.ModTime = version, mod
	}
	res.Body, res.Chunks, res.Inline, res.Embedded = nil, nil, false, false
	// The replicas that were not sent the commit (they lack a part, or did not answer)
	// and those that refused it get the end record, which drops their upload, and the
	// object by hinted retry.
	end := &object.UploadEnd{Bucket: bucket, Key: key, UploadID: uploadID, State: object.UploadCompleted, Result: &res, Ended: time.Now().UnixNano()}
	for _, cp := range list {
		end.Parts = append(end.Parts, object.CompletePart{Number: cp.Number, ETag: strings.ToLower(strings.Trim(cp.ETag, `"`))})
	}
	sent := map[string]bool{}
	for _, t := range holders {
		sent[t.ID] = true
	}
	var rest []replicaUpload
	for _, r := range v.reps {
		if !sent[r.t.ID] {
			g.queueHint(r.t, bucket, key, version, errors.E(errors.Invalid, "the replica could not complete the upload"))
			rest = append(rest, r)
		}
	}
	for _, f := range failed {
		if errors.Is(errors.Invalid, f.err) {
			g.queueHint(f.t, bucket, key, version, f.err)
		}
		rest = append(rest, replicaUpload{t: f.t, err: f.err})
	}
	if len(rest) > 0 {
		g.spreadEnd(ctx, &uploadState{reps: rest}, end)
	}
	if lapsed != nil {
		return nil, errors.E(op, lapsed)
	}
	return &res, nil
}

// AbortUpload ends an upload: each replica drops it with its parts and keeps an aborted
// end record. An upload that ended (completed or aborted) is NoSuchUpload, as in S3.
func (g *Gateway) AbortUpload(ctx context.Context, bucket, key, uploadID string) error {
	const op errors.Op = "gateway.AbortUpload"
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return errors.E(op, err)
	}
	cls, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return errors.E(op, err)
	}
	if _, err := g.settle(ctx, g.uploadView(ctx, ts, viewNeed(len(ts), cls.W), bucket, key, uploadID, 0, 1, false), bucket, key, uploadID); err != nil {
		return errors.E(op, err)
	}
	end := &object.UploadEnd{Bucket: bucket, Key: key, UploadID: uploadID, State: object.UploadAborted, Ended: time.Now().UnixNano()}
	ok, failed := g.fanOut(ctx, ts, cls.D, bucket, key, 0, never, func(ctx context.Context, t topology.Target) (*object.Object, error) {
		return nil, g.replica(t).EndUpload(ctx, end)
	})
	for _, f := range failed {
		g.queueEndHint(f.t, end)
	}
	if len(ok) < cls.D {
		return errors.E(op, quorumFailure("delete", ok, failed, cls.D, len(ts)))
	}
	return nil
}

// ListUploads lists pending uploads, merged from every storage node.
func (g *Gateway) ListUploads(ctx context.Context, bucket string, opts object.UploadListOptions) (*object.UploadList, error) {
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
	ts := g.topo.ListTargets()
	ress, errs := topology.Gather(ts, func(t topology.Target) (*object.UploadList, error) {
		return g.replica(t).ListUploads(ctx, bucket, opts)
	})
	out := &object.UploadList{}
	seen := map[string]bool{}
	cps := map[string]bool{}
	type entry struct {
		key, id string
		u       *object.Upload
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
