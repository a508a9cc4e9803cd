package gateway

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/topology"
)

// MaxCachedObject is the largest body the object cache keeps (1 MiB, LeoFS's threshold
// for its RAM tier). A miss of an object up to this size is copied into memory as it
// streams to the client; larger objects stream as before and are never buffered. At 1 MiB
// a hit still saves a whole internode transfer while one object is at most 1/64 of the
// default budget, so a few large objects cannot flush the small hot ones.
const MaxCachedObject = 1 << 20

// cacheEntryOverhead is what an entry costs beyond its body and names (the entry, its map
// slot and list links), charged so that a cache of many tiny objects stays within its
// budget too.
const cacheEntryOverhead = 160

// objectCache is a bounded LRU of object bodies keyed by (bucket, key, version): one
// version per object is kept (the last one filled), and a lookup names the version it
// wants, so an entry of an older version is a miss. Memory is accounted in bytes (bodies,
// names and a per-entry overhead) and never exceeds the budget. It holds bodies only: the
// record served with a body is the one the freshness check read (see openCached), so
// tags changed in place are always current. Safe for concurrent use.
type objectCache struct {
	budget int64 // bytes
	maxObj int64 // largest body kept

	mu      sync.Mutex
	entries map[cacheKey]*cacheEntry
	// head is the most recently used entry, tail the least; evictions take the tail.
	head, tail *cacheEntry
	used       int64

	hits, misses, evictions, stale, checks, checkFailures atomic.Int64
	// leaseHits are hits served under a read lease (no check); leasesTaken the leases taken
	// with checks; revoked the revokes holders sent.
	leaseHits, leasesTaken, revoked atomic.Int64

	// gens count the revokes received, by a hash of the key: a check notes its key's
	// count before it is sent, and the lease it brings back is taken only if no revoke
	// of the key (or of another key of the same count) arrived meanwhile: the revoke may
	// overtake the answer granting the lease it revokes.
	gens [256]atomic.Uint64

	// flights coalesces freshness checks of one object (see freshVersion).
	fmu     sync.Mutex
	flights map[cacheKey]*flight
}

type cacheKey struct{ bucket, key string }

type cacheEntry struct {
	k          cacheKey
	version    uint64 // the HLC of the version whose body this is
	etag       string
	body       []byte
	charge     int64
	prev, next *cacheEntry

	// The read lease (zero until: none): until then, while the map gives the same
	// targets (ids and down marks), quorum and epoch, a GET is served rec and body with
	// no check (openCached).
	rec   *object.Object
	until time.Time
	ts    []topology.Target
	r     int
	epoch uint64
}

// newObjectCache returns a cache of budget bytes, or nil if budget <= 0 (disabled).
func newObjectCache(budget int64) *objectCache {
	if budget <= 0 {
		return nil
	}
	return &objectCache{budget: budget, maxObj: min(MaxCachedObject, budget/16),
		entries: map[cacheKey]*cacheEntry{}, flights: map[cacheKey]*flight{}}
}

// charge is what an entry of body size n for bucket/key costs in the budget.
func cacheCharge(bucket, key string, n int64) int64 {
	return n + int64(len(bucket)+len(key)) + cacheEntryOverhead
}

// fits reports whether a body of size n may be cached.
func (c *objectCache) fits(n int64) bool { return c != nil && n >= 0 && n <= c.maxObj }

// has reports whether some version of bucket/key is cached.
func (c *objectCache) has(bucket, key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[cacheKey{bucket, key}]
	return ok
}

// get returns the cached body of version (with that ETag) of bucket/key and marks it
// recently used. An entry of another version is dropped (the caller checked that version
// is the newest) and counted as stale. The body must not be modified.
func (c *objectCache) get(bucket, key string, version uint64, etag string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[cacheKey{bucket, key}]
	if !ok {
		return nil, false
	}
	if e.version != version || e.etag != etag {
		c.stale.Add(1)
		c.remove(e)
		return nil, false
	}
	c.moveToFront(e)
	return e.body, true
}

// put caches body as version of bucket/key, replacing any other version of it, and evicts
// least recently used entries until the budget holds. A body over the size limit is not
// kept. An entry newer than version is kept instead (a slower fill of an older version
// never replaces it).
func (c *objectCache) put(bucket, key string, version uint64, etag string, body []byte) {
	n := int64(len(body))
	if !c.fits(n) {
		return
	}
	k := cacheKey{bucket, key}
	e := &cacheEntry{k: k, version: version, etag: etag, body: body, charge: cacheCharge(bucket, key, n)}
	if e.charge > c.budget {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.entries[k]; ok {
		if old.version > version {
			return
		}
		c.remove(old)
	}
	for c.used+e.charge > c.budget && c.tail != nil {
		c.remove(c.tail)
		c.evictions.Add(1)
	}
	c.entries[k] = e
	c.used += e.charge
	c.pushFront(e)
}

// gen is the revoke count of bucket/key's hash.
func (c *objectCache) gen(bucket, key string) *atomic.Uint64 {
	h := uint32(2166136261)
	for i := 0; i < len(bucket); i++ {
		h = (h ^ uint32(bucket[i])) * 16777619
	}
	h = (h ^ 0xff) * 16777619
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return &c.gens[h%uint32(len(c.gens))]
}

// leaseGrant is the read lease a check brought back: zero until for none; gen is the
// key's revoke count before the check was sent.
type leaseGrant struct {
	until time.Time
	gen   uint64
}

// leased returns the record and body of bucket/key if a read lease on it is live at now
// for the targets ts, quorum r and map epoch, and marks the entry recently used.
func (c *objectCache) leased(bucket, key string, ts []topology.Target, r int, epoch uint64, now time.Time) (*object.Object, []byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[cacheKey{bucket, key}]
	if !ok || e.rec == nil || !now.Before(e.until) || e.r != r || e.epoch != epoch || !sameTargets(e.ts, ts) {
		return nil, nil, false
	}
	c.moveToFront(e)
	return e.rec, e.body, true
}

// sameTargets reports whether a and b name the same holders in the same order with the
// same down marks: the holders a read would ask, in the order it asks them.
func sameTargets(a, b []topology.Target) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Down != b[i].Down {
			return false
		}
	}
	return true
}

// setLease gives the cached body of o's version a read lease lg, taken by a check of
// targets ts with quorum r under map epoch, unless a revoke of the key arrived since the
// check was sent or the entry is of another version.
func (c *objectCache) setLease(bucket, key string, o *object.Object, lg leaseGrant, ts []topology.Target, r int, epoch uint64) {
	if lg.until.IsZero() {
		return
	}
	g := c.gen(bucket, key)
	c.mu.Lock()
	defer c.mu.Unlock()
	if g.Load() != lg.gen {
		return
	}
	e, ok := c.entries[cacheKey{bucket, key}]
	if !ok || e.version != o.HLC || e.etag != o.ETag {
		return
	}
	rec := *o
	e.rec, e.until, e.r, e.epoch = &rec, lg.until, r, epoch
	e.ts = append(e.ts[:0], ts...)
	c.leasesTaken.Add(1)
}

// revoke drops the read lease on bucket/key (the body stays: it is of a version, and the
// next GET checks it) and makes the leases of checks in flight void. When it returns no
// GET begins to be served under the lease.
func (c *objectCache) revoke(bucket, key string) {
	if c == nil {
		return
	}
	c.gen(bucket, key).Add(1)
	c.revoked.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[cacheKey{bucket, key}]; ok {
		e.rec, e.until, e.ts = nil, time.Time{}, nil
	}
}

// drop removes bucket/key (any version).
func (c *objectCache) drop(bucket, key string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[cacheKey{bucket, key}]; ok {
		c.remove(e)
	}
}

// dropBucket removes every entry of bucket.
func (c *objectCache) dropBucket(bucket string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.entries {
		if k.bucket == bucket {
			c.remove(e)
		}
	}
}

// usage returns the bytes charged and the entry count.
func (c *objectCache) usage() (int64, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used, len(c.entries)
}

func (c *objectCache) remove(e *cacheEntry) {
	delete(c.entries, e.k)
	c.used -= e.charge
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		c.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		c.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (c *objectCache) pushFront(e *cacheEntry) {
	e.prev, e.next = nil, c.head
	if c.head != nil {
		c.head.prev = e
	}
	c.head = e
	if c.tail == nil {
		c.tail = e
	}
}

func (c *objectCache) moveToFront(e *cacheEntry) {
	if c.head == e {
		return
	}
	// unlink without touching the map or the accounting
	e.prev.next = e.next
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		c.tail = e.prev
	}
	c.pushFront(e)
}

// CacheStats are the object cache's counters since the gateway started.
type CacheStats struct {
	// Enabled is false when the cache is off (--object-cache 0); the rest is then zero.
	Enabled bool
	// Budget is the most bytes the cache may hold; Bytes what it holds now (bodies,
	// names and per-entry overhead), in Entries objects.
	Budget, Bytes int64
	Entries       int
	// Hits are GETs served from memory; Misses GETs read from a replica with the cache
	// on (objects too large to cache included); Evictions entries removed to make room;
	// Stale entries found older than the version the freshness check read; CheckFailures
	// freshness checks that failed (the GET then went the uncached way); Checks the
	// freshness checks sent (fewer than the hits when concurrent GETs shared them).
	Hits, Misses, Evictions, Stale, Checks, CheckFailures int64
	// LeaseHits are the hits served under a read lease, with no check; Leased the read
	// leases checks brought back and the cache took; Revoked the revokes holders sent.
	LeaseHits, Leased, Revoked int64
}

// CacheStats returns the object cache's counters.
func (g *Gateway) CacheStats() CacheStats {
	c := g.cache
	if c == nil {
		return CacheStats{}
	}
	used, n := c.usage()
	return CacheStats{Enabled: true, Budget: c.budget, Bytes: used, Entries: n, Hits: c.hits.Load(), Misses: c.misses.Load(),
		Evictions: c.evictions.Load(), Stale: c.stale.Load(), Checks: c.checks.Load(), CheckFailures: c.checkFailures.Load(),
		LeaseHits: c.leaseHits.Load(), Leased: c.leasesTaken.Load(), Revoked: c.revoked.Load()}
}
