package store

import (
	"maps"
	"sync"

	"github.com/cairnfs/cairn/internal/object"
)

// The bucket cache: every object request looks its bucket up (does it exist, which
// configurations does it have: versioning, lifecycle, ...), and in an index that grows
// (a versioned bucket's does with every PUT) each of those point reads probes the levels
// of the LSM and decodes their blocks. Bucket records and configurations change only
// through this store (CreateBucket, SetBucketConfig, DeleteBucket, which hold bucketMu
// for writing), so a copy kept in memory is exact: each change drops the bucket's entry
// once it is committed, and a read that raced with a change does not fill the cache (the
// generation it began with is gone). Only existing buckets are kept (a request for a
// name that does not exist never grows the cache): at most one entry per bucket.

// bucketCache holds buckets as last read from the index.
type bucketCache struct {
	mu  sync.Mutex
	gen uint64 // bumped by every change of a bucket
	m   map[string]*cachedBucket
}

// cachedBucket is one bucket's record and, once read, its configurations.
type cachedBucket struct {
	b         object.Bucket
	cfg       map[string]string
	cfgLoaded bool
}

// get returns the cached record of name (a copy) and whether there was one, and the
// generation to fill the cache with after reading the index.
func (c *bucketCache) get(name string) (cachedBucket, bool, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[name]
	if !ok {
		return cachedBucket{}, false, c.gen
	}
	return *e, true, c.gen
}

// putBucket keeps the record of name read from the index at generation gen.
func (c *bucketCache) putBucket(name string, b object.Bucket, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return // the bucket may have changed since it was read
	}
	if c.m == nil {
		c.m = map[string]*cachedBucket{}
	}
	if _, ok := c.m[name]; !ok {
		c.m[name] = &cachedBucket{b: b}
	}
}

// putConfig keeps the configurations of name read from the index at generation gen.
func (c *bucketCache) putConfig(name string, cfg map[string]string, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if e, ok := c.m[name]; ok {
		e.cfg, e.cfgLoaded = maps.Clone(cfg), true
	}
}

// drop forgets name: called once a change of it is committed (or failed: its outcome
// is then unknown).
func (c *bucketCache) drop(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.m, name)
}
