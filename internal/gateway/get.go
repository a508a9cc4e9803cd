package gateway

import (
	"context"
	stderrors "errors"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// readGrace is how long a read that has its quorum still waits for the other replicas'
// answers (to repair stale ones).
const readGrace = 50 * time.Millisecond

// versions asks the replicas for their record of bucket/key and returns the newest record
// (tombstones included) and the targets that hold it, once r replicas answered. With r = 1
// it asks one replica at a time, the local one first, and stops at the first that has a
// live version: the common read costs one lookup and no network hop when this node holds
// a copy. Replicas that answered with an older record are repaired in the background.
func (g *Gateway) versions(ctx context.Context, ts []topology.Target, r int, bucket, key string) (*object.Object, []topology.Target, error) {
	o, holders, _, err := g.versionsLeased(ctx, ts, r, bucket, key, 0)
	return o, holders, err
}

// stat asks holder t for its record of bucket/key and, if ttl > 0 and it grants them,
// for a read lease of ttl (replica.LeaseStatter); it returns the lease granted.
func (g *Gateway) stat(ctx context.Context, t topology.Target, bucket, key string, ttl time.Duration) (*object.Object, time.Duration, error) {
	rep := g.replica(t)
	if ttl > 0 {
		if ls, ok := rep.(replica.LeaseStatter); ok {
			return ls.StatLease(ctx, bucket, key, ttl)
		}
	}
	o, err := rep.Stat(ctx, bucket, key)
	return o, 0, err
}

// versionsLeased is versions that, with ttl > 0, asks each holder for a read lease of ttl
// with its record, and returns the lease the read as a whole holds (0: none): the
// shortest granted, if every holder that answered granted one, all answered with the
// newest version and no holder asked failed. Only then does every change of the key
// acknowledged by a holder this read asked revoke it first (docs/design/object-cache-leases.md).
func (g *Gateway) versionsLeased(ctx context.Context, ts []topology.Target, r int, bucket, key string, ttl time.Duration) (*object.Object, []topology.Target, time.Duration, error) {
	type answer struct {
		t     topology.Target
		o     *object.Object // nil: the replica has no record
		err   error
		lease time.Duration
	}
	var answers []answer
	var lastErr error
	live := 0
	for _, t := range ts {
		if t.Down {
			continue
		}
		live++
	}
	if r > live {
		return nil, nil, 0, replica.QuorumErr("read", live, r, len(ts), errors.E(errors.Transient, "replicas marked down"))
	}
	if r <= 1 {
		for _, t := range ts {
			if t.Down {
				continue
			}
			o, lease, err := g.stat(ctx, t, bucket, key, ttl)
			if err != nil && !errors.Is(errors.NotExist, err) {
				lastErr = err
				continue
			}
			answers = append(answers, answer{t: t, o: o, lease: lease})
			if o != nil && !o.Deleted {
				break
			}
		}
	} else {
		// Ask every replica; answer as soon as r of them did (any r answers meet every
		// acknowledged write when W + R > N), so a paused replica does not slow reads.
		ch := make(chan answer, len(ts))
		asked := 0
		// The stats are not cancelled when the read returns, only no longer waited for
		// (they end within the replica timeout): cancelling a stat just as its answer
		// arrives can close a connection the transport has already handed to the next
		// request, which then fails ("context canceled").
		sctx := context.WithoutCancel(ctx)
		for _, t := range ts {
			if t.Down {
				continue
			}
			asked++
			go func() {
				o, lease, err := g.stat(sctx, t, bucket, key, ttl)
				ch <- answer{t: t, o: o, err: err, lease: lease}
			}()
		}
		for ; asked > 0 && len(answers) < r; asked-- {
			var a answer
			select {
			case a = <-ch:
			case <-ctx.Done():
				return nil, nil, 0, errors.E(errors.Transient, ctx.Err())
			}
			if a.err != nil && !errors.Is(errors.NotExist, a.err) {
				lastErr = a.err
				continue
			}
			a.err = nil
			answers = append(answers, a)
		}
		// The others get a short grace (not the ones that were slow recently): their answers
		// are used too (newest wins) and stale ones get repaired.
		pending := map[string]bool{}
		for _, t := range ts {
			if !t.Down {
				pending[t.ID] = true
			}
		}
		for _, a := range answers {
			delete(pending, a.t.ID)
		}
		if asked > 0 && !g.allSuspect(pending) {
			grace := time.NewTimer(readGrace)
			defer grace.Stop()
		more:
			for asked > 0 {
				select {
				case a := <-ch:
					asked--
					delete(pending, a.t.ID)
					if a.err == nil || errors.Is(errors.NotExist, a.err) {
						answers = append(answers, answer{t: a.t, o: a.o, lease: a.lease})
					} else {
						lastErr = a.err
					}
				case <-grace.C:
					for id := range pending {
						g.topo.MarkSuspect(id) // slow: later reads do not wait for it
					}
					break more
				}
			}
		}
	}
	if len(answers) < r || len(answers) == 0 {
		return nil, nil, 0, replica.QuorumErr("read", len(answers), max(r, 1), len(ts), lastErr)
	}
	var best *object.Object
	for _, a := range answers {
		if a.o != nil {
			g.clock.Observe(a.o.HLC)
			g.clock.Observe(a.o.MetaHLC)
		}
		if a.o.Newer(best) { // (HLC, MetaHLC): the newest version, with its latest tags
			best = a.o
		}
	}
	if best == nil {
		// No replica has any record: while placement changes settle, the object may be
		// only on a node that held it before (several holders moved at once, or N = 1).
		for _, t := range g.topo.FormerReplicas(bucket, key, ts) {
			o, err := g.replica(t).Stat(ctx, bucket, key)
			if err == nil && !o.Deleted {
				g.clock.Observe(o.HLC)
				return o, []topology.Target{t}, 0, nil
			}
		}
	}
	// Holders of the version serve its body; those whose metadata is older are tried
	// last (their record's tags are stale) and repaired.
	var holders, staleMeta []topology.Target
	for _, a := range answers {
		switch {
		case a.o != nil && a.o.HLC == best.HLC && a.o.MetaHLC == best.MetaHLC:
			holders = append(holders, a.t)
		case a.o != nil && a.o.HLC == best.HLC:
			staleMeta = append(staleMeta, a.t)
			g.repair(a.t, bucket, key, best.HLC)
		case best != nil:
			g.repair(a.t, bucket, key, best.HLC)
		}
	}
	var lease time.Duration
	if ttl > 0 && lastErr == nil && best != nil && !best.Deleted && len(staleMeta) == 0 && len(holders) == len(answers) {
		lease = ttl
		for _, a := range answers {
			lease = min(lease, a.lease)
		}
	}
	return best, append(holders, staleMeta...), lease, nil
}

// repair brings a stale replica up to version in the background (read repair): the hint
// queue delivers it.
func (g *Gateway) repair(t topology.Target, bucket, key string, version uint64) {
	if g.cfg.Hints == nil {
		return
	}
	if err := g.cfg.Hints.Add(t.ID, bucket, key, version); err != nil {
		g.log.Warn("cannot queue a read repair", "node", t.ID, "bucket", bucket, "key", key, "err", err)
		return
	}
	g.log.Debug("read repair queued", "node", t.ID, "bucket", bucket, "key", key)
}

func noSuchKey(op errors.Op) error {
	return errors.E(op, errors.NotExist, object.ErrNoSuchKey)
}

// goneErr is the error of a read whose newest record o is not an object: NoSuchKey, with
// the marker if it is a delete marker (S3 names it in its answer).
func goneErr(op errors.Op, o *object.Object) error {
	if o != nil && o.DeleteMarker {
		return errors.E(op, errors.NotExist, &object.DeleteMarkerError{Marker: o, Current: true})
	}
	return noSuchKey(op)
}

// StatObject returns bucket/key's newest record among a read quorum of replicas.
func (g *Gateway) StatObject(ctx context.Context, bucket, key string) (*object.Object, error) {
	const op errors.Op = "gateway.StatObject"
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return nil, errors.E(op, err)
	}
	cls, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return nil, errors.E(op, err)
	}
	o, _, err := g.versions(ctx, ts, g.readQuorum(cls, ts), bucket, key)
	if err != nil {
		return nil, errors.E(op, err)
	}
	if o == nil || o.Deleted {
		return nil, goneErr(op, o)
	}
	return g.restoreView(ctx, bucket, key, o, true), nil
}

// OpenObject opens bucket/key's newest version among a read quorum of replicas.
func (g *Gateway) OpenObject(ctx context.Context, bucket, key string) (ObjectReader, error) {
	return g.openObject(ctx, bucket, key, true)
}

// openObject is OpenObject; useCache false bypasses the object cache (neither served
// from it nor filling it), for background passes that read many objects once. An
// archived version (a stub, tier.go) is streamed from its tier for a background pass and
// recalled for a client's read, which then reads the recalled copy.
func (g *Gateway) openObject(ctx context.Context, bucket, key string, useCache bool) (ObjectReader, error) {
	const op errors.Op = "gateway.OpenObject"
	for attempt := 0; ; attempt++ {
		rd, err := g.openCurrent(ctx, bucket, key, useCache)
		var sf *stubFound
		if !stderrors.As(err, &sf) {
			return rd, err
		}
		if !useCache {
			return g.openTiered(sf.o)
		}
		if g.restoreMode(sf.o) {
			if rd := g.openRestored(ctx, bucket, key, sf.o); rd != nil {
				return rd, nil
			}
			return nil, errors.E(op, errors.Precondition, object.ErrInvalidObjectState)
		}
		if attempt == 0 {
			// Transparent: the GET streams from the tier at once while the version is
			// recalled in the background (once per version on this gateway).
			if rd, err := g.openStreaming(bucket, key, sf.o); err == nil {
				return rd, nil
			}
		}
		if attempt == 2 {
			return nil, errors.E(op, errors.Transient, "the archived object keeps changing while being recalled")
		}
		if err := g.recall(ctx, bucket, key, sf.o, nil); err != nil {
			return nil, errors.E(op, err)
		}
	}
}

// stubFound is openStriped's answer for an archived version's record.
type stubFound struct{ o *object.Object }

func (s *stubFound) Error() string { return "archived in a tier" }

// openCurrent opens bucket/key's current version, as openObject; it answers a stubFound
// error for an archived version.
func (g *Gateway) openCurrent(ctx context.Context, bucket, key string, useCache bool) (_ ObjectReader, err error) {
	const op errors.Op = "gateway.OpenObject"
	fill := g.fill
	if !useCache {
		fill = func(rd ObjectReader, _, _ string) ObjectReader { return rd }
	}
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return nil, errors.E(op, err)
	}
	cls, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return nil, errors.E(op, err)
	}
	if useCache && g.cfg.Store != nil && !g.cfg.NoAccessTimes {
		// A client's read of a key this node holds: its last access, noted in memory and
		// written in batches (store.Touch), orders migration to a tier (tier.go).
		holder := false
		for i := range ts {
			if ts[i].ID == g.cfg.NodeID {
				holder = true
				break
			}
		}
		if holder {
			defer g.touch(bucket, key, &err) // not in the loop: an open-coded defer
		}
	}
	r := g.readQuorum(cls, ts)
	if g.cache != nil && useCache {
		if rd, ok, err := g.openCached(ctx, ts, r, bucket, key); ok {
			return rd, err // a hit, or NoSuchKey (already named by op)
		}
	}
	if r <= 1 {
		// Fast path: open on the first replica that answers; one round trip.
		for _, t := range ts {
			if t.Down {
				continue
			}
			rd, err := g.replica(t).Open(ctx, bucket, key, replica.OpenOptions{Version: 0})
			if err == nil {
				if o := rd.Info(); o.Striped {
					rd.Close()
					return g.openStriped(o, bucket, key, fill)
				}
				return fill(g.failover(rd, t, ts, bucket, key), bucket, key), nil
			}
			if errors.Is(errors.NotExist, err) {
				break // perhaps a stale replica: ask them all below
			}
		}
	}
	for attempt := 0; attempt < 3; attempt++ {
		o, holders, err := g.versions(ctx, ts, r, bucket, key)
		if err != nil {
			return nil, errors.E(op, err)
		}
		if o == nil || o.Deleted {
			return nil, goneErr(op, o)
		}
		if o.Striped {
			return g.openStriped(o, bucket, key, fill)
		}
		for _, t := range holders {
			rd, err := g.replica(t).Open(ctx, bucket, key, replica.OpenOptions{Version: o.HLC})
			if err == nil {
				return fill(g.failover(rd, t, ts, bucket, key), bucket, key), nil
			}
			if !errors.Is(errors.Precondition, err) && !errors.Is(errors.NotExist, err) && !errors.Is(errors.Transient, err) {
				return nil, errors.E(op, err)
			}
		}
		// The version changed between the stat and the open: look again.
	}
	return nil, errors.E(op, errors.Transient, "the object keeps changing while being read")
}

// openStriped opens an erasure-coded object's stripes (through the cache's filler); for
// an archived version's record it answers a stubFound error.
func (g *Gateway) openStriped(o *object.Object, bucket, key string, fill func(ObjectReader, string, string) ObjectReader) (ObjectReader, error) {
	if o.Tiered() {
		return nil, &stubFound{o: o}
	}
	rd, err := g.ec.Open(o, bucket, key)
	if err != nil {
		return nil, err
	}
	return fill(rd, bucket, key), nil
}

// touch notes a client's read of bucket/key in this node's store, if the read succeeded
// (by the store's monotonic clock: cheaper than time.Now on the GET path).
func (g *Gateway) touch(bucket, key string, err *error) {
	if *err == nil {
		g.cfg.Store.TouchNow(bucket, key)
	}
}
