package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// smallBody is the largest body read into memory before it is sent to the replicas; larger
// bodies stream through pipes, one per replica, in bounded memory.
const smallBody = 1 << 20

// pumpBuf is the buffer a streaming write copies through.
const pumpBuf = 256 << 10

// replicaResult is the outcome of one replica write.
type replicaResult struct {
	t   topology.Target
	o   *object.Object
	err error
}

// fanOut runs write on every target in parallel and returns once need of them succeeded
// and the others finished or StragglerWait passed (whichever is later), or once need can
// no longer be reached. Failed replicas, including those still failing after the return,
// are queued as hints for (bucket, key) at version when hint, asked at the time of each
// failure, says so (a streamed write the client abandoned stops wanting hints).
func (g *Gateway) fanOut(ctx context.Context, ts []topology.Target, need int, bucket, key string, version uint64, hint func() bool,
	write func(ctx context.Context, t topology.Target) (*object.Object, error)) (ok []replicaResult, failed []replicaResult) {
	return g.fanOutAt(ctx, ts, need, bucket, key, func() uint64 { return version }, hint, write)
}

// fanOutAt is fanOut for a write whose version is known late (a streamed body's is taken
// once the body is complete): version is asked at the time of each hint.
func (g *Gateway) fanOutAt(ctx context.Context, ts []topology.Target, need int, bucket, key string, version func() uint64, hint func() bool,
	write func(ctx context.Context, t topology.Target) (*object.Object, error)) (ok []replicaResult, failed []replicaResult) {
	// Replica writes outlive the request if they straggle: their context is detached
	// from the client's, bounded by the write itself.
	wctx := context.WithoutCancel(ctx)
	if len(ts) == 1 && !ts[0].Down {
		// One copy (N = 1): nothing to race it against, so it runs on this goroutine,
		// whose stack has grown already, instead of one that would grow its stack anew
		// through the store for every write.
		t := ts[0]
		o, err := write(wctx, t)
		g.topo.ClearSuspect(t.ID)
		if o != nil {
			g.clock.Observe(o.HLC)
		}
		if err != nil {
			if hint() {
				g.hint(t, bucket, key, version(), err)
			}
			return nil, []replicaResult{{t: t, o: o, err: err}}
		}
		return []replicaResult{{t: t, o: o}}, nil
	}
	results := make(chan replicaResult, len(ts))
	started := 0
	for _, t := range ts {
		if t.Down {
			failed = append(failed, replicaResult{t: t, err: errors.E(errors.Transient, fmt.Errorf("node %s is down: %w", t.ID, errNotSent))})
			continue
		}
		started++
		g.bg.Add(1)
		g.workers.run(func() {
			defer g.bg.Done()
			o, err := write(wctx, t)
			results <- replicaResult{t: t, o: o, err: err}
		})
	}
	var straggle <-chan time.Time
	pending := started
	waiting := map[string]bool{}
	for _, t := range ts {
		waiting[t.ID] = !t.Down
	}
	for pending > 0 {
		if len(ok) >= need && straggle == nil {
			if g.allSuspect(waiting) {
				break // the others were slow to answer recently: do not wait for them again
			}
			straggle = time.After(g.cfg.StragglerWait)
		}
		if len(ok)+pending < need {
			break // the quorum can no longer be reached; the rest are collected below
		}
		select {
		case r := <-results:
			pending--
			waiting[r.t.ID] = false
			g.topo.ClearSuspect(r.t.ID)
			if r.o != nil {
				g.clock.Observe(r.o.HLC)
			}
			if r.err != nil {
				failed = append(failed, r)
			} else {
				ok = append(ok, r)
			}
		case <-straggle:
			for id, w := range waiting {
				if w {
					g.topo.MarkSuspect(id)
				}
			}
			goto done
		}
	}
done:
	if hint() {
		for _, f := range failed {
			g.hint(f.t, bucket, key, version(), f.err)
		}
	}
	anyOK := len(ok) > 0
	if pending > 0 {
		// Collect the stragglers in the background and hint the ones that fail.
		g.bg.Add(1)
		go func() {
			defer g.bg.Done()
			for ; pending > 0; pending-- {
				if r := <-results; r.err != nil && anyOK && hint() {
					g.hint(r.t, bucket, key, version(), r.err)
				}
			}
		}()
	}
	return ok, failed
}

// allSuspect reports whether every target still awaited was slow recently.
func (g *Gateway) allSuspect(waiting map[string]bool) bool {
	any := false
	for id, w := range waiting {
		if !w {
			continue
		}
		any = true
		if !g.topo.IsSuspect(id) {
			return false
		}
	}
	return any
}

// hint queues a failed replica write for retry. Refusals (a malformed or abandoned
// write, a bad signature) are not retried: only unreachable or failing nodes are.
func (g *Gateway) hint(t topology.Target, bucket, key string, version uint64, cause error) {
	switch errors.KindOf(cause) {
	case errors.Invalid, errors.Precondition, errors.Permission, errors.NotExist:
		return
	}
	g.queueHint(t, bucket, key, version, cause)
}

// queueHint queues t to receive bucket/key at version.
func (g *Gateway) queueHint(t topology.Target, bucket, key string, version uint64, cause error) {
	if g.cfg.Hints == nil {
		return
	}
	if err := g.cfg.Hints.Add(t.ID, bucket, key, version); err != nil {
		g.log.Error("cannot queue a replica write for retry: the replica stays stale until anti-entropy", "node", t.ID, "bucket", bucket, "key", key, "err", err)
		return
	}
	g.log.Warn("replica write failed, queued for retry", "node", t.ID, "bucket", bucket, "key", key, "err", cause)
}

// quorumFailure is the error of a write that got fewer than need acknowledgements: the
// replicas' own refusal when every one of them refused (a full disk, a bad part list),
// else a Transient quorum error, which says whether the write may still have been applied
// somewhere (QuorumError.Unknown) or certainly was not.
func quorumFailure(what string, ok, failed []replicaResult, need, of int) error {
	for _, r := range failed {
		if len(ok) < need && errors.IsErr(r.err, object.ErrLocked) {
			return r.err // a holder's Object Lock forbids it: what the client should see
		}
	}
	if len(ok) == 0 && len(failed) == of {
		var refusal error
		for _, r := range failed {
			if r.err == nil || errors.Is(errors.Transient, r.err) || errors.KindOf(r.err) == errors.Other {
				refusal = nil
				break
			}
			if refusal == nil {
				refusal = r.err
			}
		}
		if refusal != nil {
			return refusal // every replica refused, for a reason the client should see
		}
	}
	err := replica.QuorumErr(what, len(ok), need, of, firstErr(failed))
	var qe *QuorumError
	if errors.As(err, &qe) {
		qe.Unknown = mayHaveApplied(ok, failed, of)
	}
	return err
}

// mayHaveApplied reports whether any of a write's of replicas may have applied it: one
// acknowledged it, one has not answered (yet), or one failed in a way that does not
// rule out that it committed (a timeout, a dropped connection, a server error).
func mayHaveApplied(ok, failed []replicaResult, of int) bool {
	if len(ok) > 0 || len(ok)+len(failed) < of {
		return true
	}
	for _, f := range failed {
		if !notApplied(f.err) {
			return true
		}
	}
	return false
}

// nothingWritten marks a quorum error as certain that no replica applied the write.
func nothingWritten(err error) error {
	var qe *QuorumError
	if errors.As(err, &qe) {
		qe.Unknown = false
	}
	return err
}

// errNotSent marks a replica write that was never sent (the node is marked down).
var errNotSent = errors.New("not sent")

// notApplied reports whether err proves that the replica did not apply the write: the
// write was not sent, the connection was never made, or the replica refused it.
func notApplied(err error) bool {
	switch errors.KindOf(err) {
	case errors.NotExist, errors.Exist, errors.Invalid, errors.Permission, errors.NoSpace,
		errors.Precondition, errors.NotEmpty, errors.TooLarge, errors.Corrupt:
		return true
	}
	if errors.IsErr(err, errNotSent) || errors.IsErr(err, errMissedVersion) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

func firstErr(rs []replicaResult) error {
	for _, r := range rs {
		if r.err != nil && !errors.Is(errors.Transient, r.err) {
			return r.err // a refusal (bad request, precondition) says more than "unreachable"
		}
	}
	if len(rs) > 0 {
		return rs[0].err
	}
	return nil
}

// PutObject stores src as bucket/key on the object's replicas and returns once the write
// quorum holds durable copies.
func (g *Gateway) PutObject(ctx context.Context, bucket, key string, meta *object.Object, src io.Reader, size int64, opts object.PutOptions) (*object.Object, error) {
	const op errors.Op = "gateway.PutObject"
	defer g.cache.drop(bucket, key) // whatever the outcome: the version this node cached may be gone
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return nil, errors.E(op, err)
	}
	cls, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return nil, errors.E(op, err)
	}
	cw := g.conditional(bucket, key, opts) // nil: no condition (conditional.go)
	finish := cw.finish(ctx, opts.Finish)
	m := *meta
	m.Striped, m.Stripe = false, object.Stripe{}                              // the layout is ours to choose, not the source's
	m.MetaHLC, m.TagsHLC, m.RetentionHLC, m.HoldHLC, m.ACLHLC = 0, 0, 0, 0, 0 // a new version: its metadata is its own
	if m.StorageClass == "" {
		m.StorageClass = g.policyClass(bucket, key, size, m.ContentType)
	}
	sc, err := g.classFor(m.StorageClass)
	if err != nil {
		return nil, errors.E(op, err)
	}
	if sc.Sharded() {
		o, err := g.putStriped(ctx, sc, ts, cls.W, bucket, key, &m, src, size, opts.Finish, cw)
		if err = cw.end(err); err != nil {
			return nil, errors.E(op, err)
		}
		return o, nil
	}
	m.ModTime = time.Now().UnixNano()
	// Version 0: the version is taken once the body is complete (the last-writer rule).
	o, err := g.write(ctx, ts, cls.W, replica.Write{Bucket: bucket, Key: key, Meta: &m}, src, size, finish)
	if err = cw.end(err); err != nil {
		return nil, errors.E(op, err)
	}
	return o, nil
}

// write sends a body to the replicas ts and waits for need acknowledgements. w says what
// is written (an object version, or a part when w.Part > 0); its body and final
// metadata are filled in here. A new object version (w.Version 0) takes its version once
// the body is complete (lateVersion).
func (g *Gateway) write(ctx context.Context, ts []topology.Target, need int, w replica.Write, src io.Reader, size int64,
	finish func(*object.Object) error) (*object.Object, error) {
	if w.Version == 0 && w.Part == 0 {
		w.Version, finish = g.lateVersion(finish)
	}
	bucket, key, version, part := w.Bucket, w.Key, w.Version, w.Part
	fin := *w.Meta
	fin.HLC = version
	hint := func() bool { return part == 0 }
	var ok, failed []replicaResult
	if size >= 0 && size <= smallBody {
		buf := make([]byte, size)
		if _, err := io.ReadFull(src, buf); err != nil {
			return nil, replica.BodyErr(err)
		}
		// Read to EOF: signed and checksummed bodies are verified there.
		var one [1]byte
		for {
			n, err := src.Read(one[:])
			if n > 0 {
				return nil, errors.E(errors.Invalid, "the body is longer than its declared length")
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, replica.BodyErr(err)
			}
		}
		fin.Size = size
		if finish != nil {
			if err := finish(&fin); err != nil {
				return nil, err
			}
		}
		shared := w
		shared.FinalNow = &fin
		shared = shared.SharedEncoding() // the metadata is encoded once for every remote holder
		ok, failed = g.fanOut(ctx, ts, need, bucket, key, fin.HLC, hint, func(ctx context.Context, t topology.Target) (*object.Object, error) {
			ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout+time.Duration(size/(1<<20))*time.Second)
			defer cancel()
			rw := shared
			rw.Body, rw.Size = bytes.NewReader(buf), size
			return g.putTo(ctx, t, rw)
		})
	} else {
		var err error
		ok, failed, err = g.stream(ctx, ts, need, w, &fin, src, size, finish)
		if err != nil {
			return nil, err
		}
	}
	if len(ok) < need {
		return nil, quorumFailure("write", ok, failed, need, len(ts))
	}
	for _, r := range ok {
		if r.o != nil && r.o.HLC > fin.HLC {
			g.log.Debug("a newer version was already stored", "bucket", bucket, "key", key)
		}
	}
	fin.Body = nil
	return &fin, nil
}

// stream copies src to every live replica through a pipe each, so memory stays at one
// buffer whatever the size. A replica that fails is dropped from the copy; the write
// fails if fewer than need remain. finish runs once src is exhausted; only then do the
// replicas receive the final metadata that lets them commit.
func (g *Gateway) stream(ctx context.Context, ts []topology.Target, need int, w replica.Write, fin *object.Object, src io.Reader, size int64,
	finish func(*object.Object) error) (ok, failed []replicaResult, err error) {
	bucket, key, version, part := w.Bucket, w.Key, w.Version, w.Part
	var finalMu sync.Mutex
	var final *object.Object
	getFinal := func() *object.Object { finalMu.Lock(); defer finalMu.Unlock(); return final }
	hintVersion := func() uint64 { // the final version once known; until then the provisional one, a lower bound
		if f := getFinal(); f != nil {
			return f.HLC
		}
		return version
	}
	pws := map[string]*io.PipeWriter{}
	prs := map[string]*io.PipeReader{}
	for _, t := range ts {
		if !t.Down {
			pr, pw := io.Pipe()
			pws[t.ID], prs[t.ID] = pw, pr
		}
	}
	type outcome struct{ ok, failed []replicaResult }
	res := make(chan outcome, 1)
	var abandoned atomic.Bool // the client's body failed or was refused: replicas failing now need no retry
	go func() {
		o, f := g.fanOutAt(ctx, ts, need, bucket, key, hintVersion, func() bool { return part == 0 && !abandoned.Load() }, func(ctx context.Context, t topology.Target) (*object.Object, error) {
			rw := w
			rw.Body, rw.Size, rw.Final = prs[t.ID], -1, getFinal
			o, err := g.replica(t).Put(ctx, rw)
			prs[t.ID].CloseWithError(replica.ErrReaderGone) // unblock the pump if the replica stopped reading
			return o, err
		})
		res <- outcome{o, f}
	}()
	abort := func(cause error) {
		abandoned.Store(true)
		for _, pw := range pws {
			pw.CloseWithError(cause)
		}
	}
	buf := make([]byte, pumpBuf)
	var total int64
	// A replica that takes no bytes for Timeout is cut off, so a paused node cannot stall
	// the upload for the others.
	var stalled *io.PipeReader
	var stallMu sync.Mutex
	watchdog := time.AfterFunc(time.Hour, func() {
		stallMu.Lock()
		defer stallMu.Unlock()
		if stalled != nil {
			stalled.CloseWithError(errors.E(errors.Transient, "replica stopped taking the body"))
		}
	})
	defer watchdog.Stop()
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			total += int64(n)
			for id, pw := range pws {
				stallMu.Lock()
				stalled = prs[id]
				stallMu.Unlock()
				watchdog.Reset(g.cfg.Timeout)
				_, werr := pw.Write(buf[:n])
				watchdog.Stop()
				if werr != nil {
					delete(pws, id) // this replica failed; its error comes through fanOut
				}
			}
			if len(pws) < need {
				abort(errors.E(errors.Transient, "too few replicas left"))
				out := <-res
				// No replica received the final metadata, so none committed.
				return nil, nil, nothingWritten(quorumFailure("write", out.ok, out.failed, need, len(ts)))
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			abort(rerr)
			<-res
			return nil, nil, replica.BodyErr(rerr)
		}
	}
	if size >= 0 && total != size {
		abort(io.ErrUnexpectedEOF)
		<-res
		return nil, nil, errors.E(errors.Invalid, fmt.Sprintf("the body has %d bytes, %d were declared", total, size))
	}
	fin.Size = total
	if finish != nil {
		if err := finish(fin); err != nil {
			abort(err)
			<-res
			return nil, nil, err
		}
	}
	finalMu.Lock()
	f := *fin
	final = &f
	finalMu.Unlock()
	for _, pw := range pws {
		pw.Close()
	}
	out := <-res
	return out.ok, out.failed, nil
}

func always() bool { return true }
func never() bool  { return false }

// DeleteObject deletes bucket/key: a tombstone on the replicas, acknowledged by the delete
// quorum.
func (g *Gateway) DeleteObject(ctx context.Context, bucket, key string) error {
	const op errors.Op = "gateway.DeleteObject"
	defer g.cache.drop(bucket, key)
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return errors.E(op, err)
	}
	cls, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return errors.E(op, err)
	}
	version, mod := g.clock.Next(), time.Now().UnixNano()
	ok, failed := g.fanOut(ctx, ts, cls.D, bucket, key, version, always, func(ctx context.Context, t topology.Target) (*object.Object, error) {
		return g.replica(t).Delete(ctx, bucket, key, object.Object{HLC: version, ModTime: mod})
	})
	if len(ok) < cls.D {
		return errors.E(op, quorumFailure("delete", ok, failed, cls.D, len(ts)))
	}
	return nil
}
