package gateway

import (
	"context"
	"io"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/topology"
)

// The object cache's read path (docs/architecture.md, "The object cache").
//
// A GET of an object the cache holds first asks the holders for the object's record with
// the read quorum in force, exactly as an uncached read does (versions): the newest
// (HLC, MetaHLC) among the answers. The body is served from memory only if the cached
// body is of that version (same HLC and ETag; a version's body never changes, tags are
// changed in place under a new MetaHLC and come from the record just read). Otherwise
// the read goes the uncached way. So a cached read is never staler than an uncached read
// with the same R, whatever happened on other gateways: the cache saves the body's
// transfer, never the check.

// cacheable reports whether o's body may be kept in the cache. The cache holds stored
// bytes: for an object with server-side encryption (SSE-S3 or SSE-C) that is its
// ciphertext, which the S3 layer decrypts per request with the key the request presents
// (docs/design/sse.md), so encrypted objects may be cached like any other. Were the S3
// layer ever to hand the gateway plaintext of an SSE-C object, such records would have to
// answer false here.
func (c *objectCache) cacheable(o *object.Object) bool {
	return c != nil && o != nil && !o.Deleted && c.fits(o.Size)
}

// openCached serves bucket/key from the cache if it holds the version a freshness check
// reads with quorum r, or answers NoSuchKey if the check found the object deleted. ok
// false: the caller reads the uncached way (nothing cached, the check failed, or the
// cached version is not the newest).
func (g *Gateway) openCached(ctx context.Context, ts []topology.Target, r int, bucket, key string) (rd ObjectReader, ok bool, err error) {
	c := g.cache
	ttl := g.leaseTTL()
	var epoch uint64
	if ttl > 0 {
		epoch = g.cfg.Maps.Current().Epoch
		if rec, body, ok := c.leased(bucket, key, ts, r, epoch, time.Now()); ok {
			c.hits.Add(1)
			c.leaseHits.Add(1)
			o := *rec // the caller may change its record
			return &memReader{o: &o, body: body}, true, nil
		}
	}
	if !c.has(bucket, key) {
		return nil, false, nil
	}
	var o *object.Object
	var lg leaseGrant
	if r <= 1 && localFirst(ts) {
		// The check is a lookup in this node's own index: cheaper than sharing it,
		// whose lock every concurrent GET of the object would take twice.
		c.checks.Add(1)
		o, _, err = g.versions(ctx, ts, r, bucket, key)
	} else {
		o, lg, err = g.freshVersion(ctx, ts, r, bucket, key, ttl)
	}
	if err != nil {
		c.checkFailures.Add(1)
		return nil, false, nil
	}
	if o == nil || o.Deleted {
		c.drop(bucket, key)
		c.stale.Add(1)
		return nil, true, goneErr("gateway.OpenObject", o)
	}
	body, hit := c.get(bucket, key, o.HLC, o.ETag)
	if !hit || int64(len(body)) != o.Size {
		return nil, false, nil
	}
	c.hits.Add(1)
	if ttl > 0 {
		c.setLease(bucket, key, o, lg, ts, r, epoch)
	}
	return &memReader{o: o, body: body}, true, nil
}

// LevelReadLeases is the cluster feature level (clustermap.Map.Level) from which
// gateways ask holders for read leases with their version checks (every holder then
// grants and revokes them; an older one would ignore the ask and answer without a lease
// anyway, and an older gateway never asks). Level 11.
const LevelReadLeases = 11

// leaseTTL is the read lease this gateway asks for with each check: 0 (none) with the
// cache or its leases off, or below LevelReadLeases. The one place the level is checked.
func (g *Gateway) leaseTTL() time.Duration {
	if g.cache == nil || g.cfg.CacheLease <= 0 || g.cfg.Maps.Current().Level < LevelReadLeases {
		return 0
	}
	return g.cfg.CacheLease
}

// RevokeLease drops this gateway's read lease on bucket/key (a holder is taking a change
// of it): when it returns, no GET begins to be served under that lease, and the lease a
// check in flight brings back is not taken. The handler of wire.PathRevoke calls it.
func (g *Gateway) RevokeLease(bucket, key string) { g.cache.revoke(bucket, key) }

// check reads bucket/key's newest record with quorum r from ts, asking the holders for a
// read lease of ttl (0: none); the lease is counted from before the ask was sent, less a
// margin for the holders' clocks running slower than this node's.
func (g *Gateway) check(ctx context.Context, ts []topology.Target, r int, bucket, key string, ttl time.Duration) (*object.Object, leaseGrant, error) {
	c := g.cache
	c.checks.Add(1)
	var lg leaseGrant
	if ttl > 0 {
		lg.gen = c.gen(bucket, key).Load()
	}
	start := time.Now()
	o, _, d, err := g.versionsLeased(ctx, ts, r, bucket, key, ttl)
	if d > 0 && err == nil {
		lg.until = start.Add(d - d/32)
	}
	return o, lg, err
}

// localFirst reports whether this node is the first of ts that is not marked down: the
// one a read with R = 1 asks first.
func localFirst(ts []topology.Target) bool {
	for _, t := range ts {
		if !t.Down {
			return t.Local
		}
	}
	return false
}

// flight is the state of the freshness checks of one object: whether one is running, and
// the one that will start when it ends, which requests arriving meanwhile join.
type flight struct {
	running bool
	next    *check
}

// check is one freshness check and its outcome (valid once done is closed).
type check struct {
	done chan struct{}
	// ts and r are the targets and quorum of the first request that joined.
	ts    []topology.Target
	r     int
	ttl   time.Duration
	o     *object.Object
	lease leaseGrant
	err   error
}

// serves reports whether the check reads what a request with targets ts and quorum r
// would read itself: the same quorum of the same holders.
func (p *check) serves(ts []topology.Target, r int, ttl time.Duration) bool {
	if p.r != r || p.ttl != ttl || len(p.ts) != len(ts) {
		return false
	}
	for i := range ts {
		if p.ts[i].ID != ts[i].ID {
			return false
		}
	}
	return true
}

// freshVersion returns bucket/key's newest record among r replicas, read by a check that
// started after this call began. Concurrent GETs of a hot object share checks: a request
// that finds a check running waits for the next one, which starts only once the running
// one ended and serves every request that arrived while it waited. A check started before
// a request arrived is never shared with it (it might have missed a write acknowledged
// just before the request), nor is one that reads with another quorum or other holders
// (a map change between two requests), so each answer is as fresh as the request's own
// read: one made, in its entirety, after the request began, with its R.
//
// With ttl > 0 each check asks for a read lease of ttl too, which the answer carries.
func (g *Gateway) freshVersion(ctx context.Context, ts []topology.Target, r int, bucket, key string, ttl time.Duration) (*object.Object, leaseGrant, error) {
	c := g.cache
	k := cacheKey{bucket, key}
	c.fmu.Lock()
	f := c.flights[k]
	if f == nil {
		f = &flight{}
		c.flights[k] = f
	}
	if !f.running {
		// Nothing running: check now, on this request's own context.
		f.running = true
		c.fmu.Unlock()
		o, lg, err := g.check(ctx, ts, r, bucket, key, ttl)
		g.nextCheck(k, f)
		return o, lg, err
	}
	p := f.next
	if p != nil && !p.serves(ts, r, ttl) {
		// The waiting check reads with another quorum or other holders (the map changed
		// between the requests): it would not be this request's read. Check alone.
		c.fmu.Unlock()
		return g.check(ctx, ts, r, bucket, key, ttl)
	}
	if p == nil {
		p = &check{done: make(chan struct{}), ts: ts, r: r, ttl: ttl}
		f.next = p
	}
	c.fmu.Unlock()
	select {
	case <-p.done:
		return p.o, p.lease, p.err
	case <-ctx.Done():
		return nil, leaseGrant{}, ctx.Err()
	}
}

// nextCheck ends the running check of k: it starts the one requests are waiting for, if
// any, in the background (it serves several requests, so no one request's context
// bounds it), or marks k idle.
func (g *Gateway) nextCheck(k cacheKey, f *flight) {
	c := g.cache
	c.fmu.Lock()
	p := f.next
	if p == nil {
		f.running = false
		delete(c.flights, k)
		c.fmu.Unlock()
		return
	}
	f.next = nil
	c.fmu.Unlock()
	g.bg.Add(1)
	go func() {
		defer g.bg.Done()
		ctx, cancel := context.WithTimeout(g.closing, g.cfg.Timeout)
		p.o, p.lease, p.err = g.check(ctx, p.ts, p.r, k.bucket, k.key, p.ttl)
		cancel()
		close(p.done)
		g.nextCheck(k, f)
	}()
}

// memReader serves a body held in memory.
type memReader struct {
	o    *object.Object
	body []byte
}

func (m *memReader) Info() *object.Object { return m.o }

func (m *memReader) Close() error { return nil }

func (m *memReader) WriteRange(ctx context.Context, w io.Writer, off, n int64) (int64, error) {
	if off < 0 || n < 0 || off+n > int64(len(m.body)) {
		return 0, errors.E(errors.Invalid, "range outside the object")
	}
	k, err := w.Write(m.body[off : off+n])
	return int64(k), err
}

// fillReader copies a whole-body read of a small object into the cache as it streams to
// the client; partial reads pass through untouched. Only bodies within the size limit
// are wrapped, so nothing large is ever buffered.
type fillReader struct {
	ObjectReader
	c           *objectCache
	bucket, key string
}

// fill wraps rd, read from a replica, so that a full read of it fills the cache.
func (g *Gateway) fill(rd ObjectReader, bucket, key string) ObjectReader {
	c := g.cache
	if c == nil {
		return rd
	}
	c.misses.Add(1)
	if !c.cacheable(rd.Info()) {
		return rd
	}
	return &fillReader{ObjectReader: rd, c: c, bucket: bucket, key: key}
}

// Prepare passes on to the wrapped reader (an erasure-coded object's first stripe).
func (f *fillReader) Prepare(ctx context.Context, off, n int64) error {
	if p, ok := f.ObjectReader.(Preparer); ok {
		return p.Prepare(ctx, off, n)
	}
	return nil
}

func (f *fillReader) WriteRange(ctx context.Context, w io.Writer, off, n int64) (int64, error) {
	o := f.Info()
	if off != 0 || n != o.Size {
		return f.ObjectReader.WriteRange(ctx, w, off, n)
	}
	t := &teeWriter{w: w, buf: make([]byte, 0, n)}
	m, err := f.ObjectReader.WriteRange(ctx, t, off, n)
	if err == nil && m == n && int64(len(t.buf)) == n {
		f.c.put(f.bucket, f.key, o.HLC, o.ETag, t.buf)
	}
	return m, err
}

// teeWriter keeps a copy of the bytes w accepted, up to the capacity of buf (more would
// be a reader's error; the copy is then not kept).
type teeWriter struct {
	w   io.Writer
	buf []byte
}

func (t *teeWriter) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	if len(t.buf)+n <= cap(t.buf) {
		t.buf = append(t.buf, p[:n]...)
	} else {
		t.buf = t.buf[:0:0]
	}
	return n, err
}
