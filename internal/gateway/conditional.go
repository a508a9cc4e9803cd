package gateway

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// Conditional writes (S3's If-Match and If-None-Match: * on PutObject, CopyObject and
// CompleteMultipartUpload) are atomic across the gateways of a cluster: the conditional
// writes of a key are serialized by a lease that the key's first live holder (in
// placement order, in the current map epoch) grants (replica.Leases). Once the body is
// complete (the moment the write takes its version), the coordinator
//
//  1. asks that holder for a lease on the key, under its map's epoch (a holder whose map
//     is at another epoch refuses; a lease another write holds is waited for);
//  2. reads the key's record from N-W+1 holders at least, so that it meets every write
//     acknowledged before (W of N holders), and evaluates the condition: 412
//     PreconditionFailed, or for If-Match on no object 404 NoSuchKey;
//  3. writes with the normal quorum write, at the version the lease came with (later than
//     every version of an earlier lease on the key, and than the record read);
//  4. gives the lease back (telling the holder the version used).
//
// If the holder cannot be reached, or the lease stays held by another write for
// replica.LeaseWait, nothing is written and the answer is 503 SlowDown or 409
// ConditionalRequestConflict: never a risk of two winners. A lease not given back
// expires after replica.LeaseTTL; a coordinator that evaluated for more than half of it
// writes nothing, and one whose write quorum answered after it lapsed answers 409 (the
// write may have taken effect: a later conditional write may not have seen it, but its
// version is later). Plain writes take no lease and stay on their fast path; a plain
// write racing a conditional one is ordered by version like any two writes.

// ErrConditionalConflict is wrapped by the errors of conditional writes that could not be
// serialized with another write of their key: S3's 409 ConditionalRequestConflict. The
// client should read the object again and retry.
var ErrConditionalConflict = errors.New("a conflicting write of the key was in progress")

// condWrite is one conditional write: its condition, then, once the body is complete,
// the lease it holds and the version it takes.
type condWrite struct {
	g           *Gateway
	bucket, key string
	ifNoneMatch bool
	ifMatch     string

	holder   replica.LeaseHolder // nil: no lease held
	holderID string
	lease    replica.Lease
	until    time.Time // when the lease ends at the latest, by this node's clock
	seen     uint64    // the version of the record the condition was evaluated against
	version  uint64
}

// conditional returns the conditional write that opts asks for on bucket/key, nil if it
// asks for none.
func (g *Gateway) conditional(bucket, key string, opts object.PutOptions) *condWrite {
	if !opts.IfNoneMatch && opts.IfMatch == "" {
		return nil
	}
	return &condWrite{g: g, bucket: bucket, key: key, ifNoneMatch: opts.IfNoneMatch, ifMatch: opts.IfMatch}
}

// finish returns f followed by the evaluation of the condition under a lease, which
// gives the record its version; f itself for an unconditional write.
func (c *condWrite) finish(ctx context.Context, f func(*object.Object) error) func(*object.Object) error {
	if c == nil {
		return f
	}
	return func(o *object.Object) error {
		if f != nil {
			if err := f(o); err != nil {
				return err
			}
		}
		return c.stamp(ctx, o)
	}
}

// stamp evaluates the condition under a lease and gives o the version the write takes;
// nothing for an unconditional write.
func (c *condWrite) stamp(ctx context.Context, o *object.Object) error {
	if c == nil {
		return nil
	}
	v, err := c.begin(ctx)
	if err != nil {
		return err
	}
	o.HLC = v
	return nil
}

// stampAt is stamp for a write whose version v was fixed before its body (an
// erasure-coded object's, which names its stripes): the write may take place only if v is
// later than the record the condition was evaluated against, else it is a conflict (the
// client retries; its new attempt takes a later version).
func (c *condWrite) stampAt(ctx context.Context, o *object.Object, v uint64) error {
	if c == nil {
		return nil
	}
	if _, err := c.begin(ctx); err != nil {
		return err
	}
	if v <= c.seen {
		c.release(0)
		return errors.E(errors.Transient, fmt.Errorf("%w: a newer write of the key completed while this one was sent", ErrConditionalConflict))
	}
	c.version, o.HLC = v, v
	return nil
}

// versionOr returns the version a conditional write took under its lease, or next's.
func (c *condWrite) versionOr(next func() uint64) uint64 {
	if c == nil || c.version == 0 {
		return next()
	}
	return c.version
}

// begin takes the lease on the key, evaluates the condition, and returns the version the
// write takes. On an error nothing is held.
func (c *condWrite) begin(ctx context.Context) (uint64, error) {
	g := c.g
	start := time.Now()
	var err error
	for attempt := 0; ; attempt++ {
		m := g.cfg.Maps.Current()
		t, terr := g.leaseTarget(m, c.bucket, c.key)
		if terr != nil {
			return 0, terr
		}
		c.holderID = t.ID
		h := g.leaseHolder(t)
		c.lease, err = h.Acquire(ctx, c.bucket, c.key, m.Epoch, g.clock.Next())
		if err == nil {
			c.holder = h
			break
		}
		var ee *replica.EpochError
		if !errors.As(err, &ee) || attempt == 2 {
			break
		}
		if ee.Current > m.Epoch && g.cfg.Refresh != nil {
			// This node's map is behind the holder's: catch up, then ask again.
			if rerr := g.cfg.Refresh(ctx); rerr != nil {
				break
			}
		}
	}
	switch {
	case errors.IsErr(err, replica.ErrLeaseBusy):
		return 0, errors.E(errors.Transient, fmt.Errorf("%w: node %s kept the key's lease for another conditional write for %s", ErrConditionalConflict, c.holderID, replica.LeaseWait))
	case err != nil:
		return 0, errors.E(errors.Transient, fmt.Errorf("node %s, which serializes the conditional writes of this key, cannot grant one now; nothing was written: %w", c.holderID, err))
	}
	c.until = start.Add(c.lease.TTL)
	v, err := c.evaluate(ctx, start)
	if err != nil {
		c.release(0)
		return 0, err
	}
	c.version = v
	return v, nil
}

// evaluate reads the key's record with a quorum that meets every acknowledged write and
// checks the condition against it; it returns the version the write takes.
func (c *condWrite) evaluate(ctx context.Context, start time.Time) (uint64, error) {
	g := c.g
	ctx, cancel := context.WithDeadline(ctx, start.Add(c.lease.TTL/2))
	defer cancel()
	cls, ts, err := g.topo.Replicas(c.bucket, c.key)
	if err != nil {
		return 0, err
	}
	// The lease holder's record, read under the lease, is one of the answers needed.
	need, others := max(g.readQuorum(cls, ts), len(ts)-cls.W+1), ts
	if i := slices.IndexFunc(ts, func(t topology.Target) bool { return t.ID == c.holderID }); i >= 0 {
		need, others = need-1, slices.Delete(slices.Clone(ts), i, i+1)
	}
	cur := c.lease.Record
	if need <= 0 {
		need, others = 0, nil
	}
	if need > 0 || cur == nil {
		o, err := g.newestOf(ctx, others, need, c.bucket, c.key, cur != nil)
		if err != nil {
			return 0, err
		}
		if o.Newer(cur) {
			cur = o
		}
	}
	if cur != nil {
		g.clock.Observe(cur.HLC)
	}
	if err := c.check(cur); err != nil {
		return 0, err
	}
	if cur != nil {
		c.seen = cur.HLC
	}
	if time.Since(start) > c.lease.TTL/2 {
		return 0, errors.E(errors.Transient, fmt.Errorf("%w: the condition took too long to evaluate; nothing was written", ErrConditionalConflict))
	}
	g.clock.Observe(c.lease.Version)
	v := c.lease.Version
	if cur != nil && cur.HLC >= v {
		v = g.clock.Next() // newestOf observed cur.HLC: later than the record read
	}
	return v, nil
}

// newestOf returns the newest record of bucket/key (tombstones included; nil: none) among
// the first r of its holders ts to answer. Unlike a read (versions) it waits for no other
// holder and repairs none: a conditional write needs only a read that meets every
// acknowledged write. A key no current holder has a record of (and found false: none
// elsewhere either) is also looked for on the holders it may still be on (a placement
// change in progress), as reads do.
func (g *Gateway) newestOf(ctx context.Context, ts []topology.Target, r int, bucket, key string, found bool) (*object.Object, error) {
	type answer struct {
		o   *object.Object
		err error
	}
	// The stats are not cancelled when ctx ends, only no longer waited for; those not
	// waited for finish on their own (within the replica timeout). Cancelling a stat (a
	// HEAD: no body) just as its answer arrives can close the connection the transport has
	// already handed to the next request, which then fails ("context canceled").
	sctx := context.WithoutCancel(ctx)
	ch := make(chan answer, len(ts))
	asked := 0
	for _, t := range ts {
		if t.Down {
			continue
		}
		asked++
		go func() {
			o, err := g.replica(t).Stat(sctx, bucket, key)
			ch <- answer{o, err}
		}()
	}
	var best *object.Object
	var lastErr error
	got := 0
	for ; asked > 0 && got < r; asked-- {
		var a answer
		select {
		case a = <-ch:
		case <-ctx.Done():
			return nil, errors.E(errors.Transient, ctx.Err())
		}
		if a.err != nil && !errors.Is(errors.NotExist, a.err) {
			lastErr = a.err
			continue
		}
		got++
		if a.err == nil && a.o.Newer(best) {
			best = a.o
		}
	}
	if got < r {
		if lastErr == nil {
			lastErr = errors.E(errors.Transient, "replicas marked down")
		}
		return nil, replica.QuorumErr("read", got, r, len(ts), lastErr)
	}
	if best == nil && !found {
		for _, t := range g.topo.FormerReplicas(bucket, key, ts) {
			if o, err := g.replica(t).Stat(ctx, bucket, key); err == nil && o.Newer(best) {
				best = o
			}
		}
	}
	if best != nil {
		g.clock.Observe(best.HLC)
		g.clock.Observe(best.MetaHLC)
	}
	return best, nil
}

// check evaluates the condition against cur, the key's newest record (nil: none).
func (c *condWrite) check(cur *object.Object) error {
	exists := cur != nil && !cur.Deleted
	if c.ifMatch != "" {
		if !exists {
			return errors.E(errors.NotExist, object.ErrNoSuchKey) // S3: If-Match on no object is 404
		}
		if !etagListMatches(c.ifMatch, cur.ETag) {
			return errors.E(errors.Precondition, "the object's ETag does not match If-Match")
		}
	}
	if c.ifNoneMatch && exists {
		return errors.E(errors.Precondition, "the key holds an object (If-None-Match: *)")
	}
	return nil
}

// end gives the lease back once the write is over and returns its outcome: err, or a
// conflict if the write's quorum answered after the lease may have lapsed.
func (c *condWrite) end(err error) error {
	if c == nil || c.holder == nil {
		return err
	}
	used := c.version
	late := err == nil && time.Now().After(c.until)
	c.release(used)
	if late {
		return errors.E(errors.Transient, fmt.Errorf("%w: the key's lease lapsed before the write's quorum answered; the write may have taken effect, read the object to find out", ErrConditionalConflict))
	}
	return err
}

// release gives the lease back in the background (the answer does not wait for it).
func (c *condWrite) release(used uint64) {
	h, token := c.holder, c.lease.Token
	c.holder = nil
	g := c.g
	g.bg.Add(1)
	go func() {
		defer g.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), g.cfg.Timeout)
		defer cancel()
		if err := h.Release(ctx, c.bucket, c.key, token, used); err != nil {
			g.log.Debug("a lease was not given back: it expires on its own", "node", c.holderID, "bucket", c.bucket, "key", c.key, "err", err)
		}
	}()
}

// leaseTarget returns the node that grants the leases of bucket/key under map m: its
// first holder in placement order that is not marked down.
func (g *Gateway) leaseTarget(m *clustermap.Map, bucket, key string) (topology.Target, error) {
	lay, err := g.topo.Layout(m)
	if err != nil {
		return topology.Target{}, err
	}
	for _, id := range lay.Table.Lookup(bucket, key) {
		if n, ok := m.Node(id); ok && n.State != clustermap.StateDown {
			return topology.Target{ID: id, Addr: n.Addr, Local: g.topo.IsLocal(id)}, nil
		}
	}
	return topology.Target{}, errors.E(errors.Transient, fmt.Errorf("no holder of %s/%s is up: conditional writes of the key wait for one", bucket, key))
}

// leaseHolder returns the lease table of node t: this node's, or another's over the
// internode protocol.
func (g *Gateway) leaseHolder(t topology.Target) replica.LeaseHolder {
	if t.Local {
		return g.leases
	}
	return &replica.Remote{Node: t.ID, Addr: t.Addr, RPC: g.cfg.RPC, Timeout: g.cfg.Timeout}
}

// Leases is this node's lease table, which the replica handler serves to the other
// nodes' gateways (wire.PathLease).
func (g *Gateway) Leases() *replica.Leases { return g.leases }

// grantLease is the lease table's Grant: this node grants a lease on bucket/key only
// under its current map's epoch and only as the key's first live holder; the version it
// returns is later than seen (the coordinator's clock), than its own record of the key
// and than every version it granted before; the record comes with it (it counts in the
// coordinator's quorum read).
func (g *Gateway) grantLease(bucket, key string, epoch, seen uint64) (uint64, *object.Object, error) {
	m := g.cfg.Maps.Current()
	if m.Epoch != epoch {
		return 0, nil, &replica.EpochError{Asked: epoch, Current: m.Epoch}
	}
	t, err := g.leaseTarget(m, bucket, key)
	if err != nil {
		return 0, nil, err
	}
	if !t.Local {
		return 0, nil, errors.E(errors.Transient, fmt.Errorf("node %s is not the first live holder of %s/%s in map epoch %d (%s is)", g.cfg.NodeID, bucket, key, epoch, t.ID))
	}
	g.clock.Observe(seen)
	rec, err := g.cfg.Store.StatVersion(bucket, key)
	switch {
	case err == nil:
		g.clock.Observe(rec.HLC)
	case errors.Is(errors.NotExist, err):
		rec = nil
	default:
		return 0, nil, err
	}
	return g.clock.Next(), rec, nil
}

// etagListMatches reports whether an If-Match header's list of ETags names etag ("*"
// names any).
func etagListMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || strings.Trim(t, `"`) == etag {
			return true
		}
	}
	return false
}

// CompleteUploadIf is CompleteUpload as a conditional write: cond's IfMatch and
// IfNoneMatch (its other fields are not used) are evaluated against the key when the
// upload completes, atomically with the completion.
func (g *Gateway) CompleteUploadIf(ctx context.Context, bucket, key, uploadID string, list []object.CompletePart, minPart int64, cond object.PutOptions,
	finish func(o *object.Object, parts []*object.Object) error) (*object.Object, error) {
	return g.completeUpload(ctx, bucket, key, uploadID, list, minPart, g.conditional(bucket, key, cond), finish)
}
