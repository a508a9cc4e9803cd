package store

import (
	"sync"
	"sync/atomic"

	"github.com/cairnfs/cairn/internal/store/segment"
)

// extentCache keeps the extent maps of recently read mutable objects (volume data
// objects), so that a small read finds its extent and its chunk's location without
// seeking the index. An entry is the extent map of one version id at one write order, as
// a reader's snapshot showed it, with each chunk's location (and block checksums) filled
// in when first read.
//
// It is never stale: every index commit that sets or deletes an extent key removes the
// entry of that version id after the commit (Store.invalidateExtents scans the batch), a commit
// that moves chunks (compaction) or deletes a key range removes all of them, and an entry
// or a location is stored only by a reader that began (took its snapshot) after the last
// such removal that concerns it: removal and insertion are ordered by a sequence number,
// so a reader holding an older snapshot cannot put back what a commit made stale.
type extentCache struct {
	seq atomic.Uint64 // removals so far; a reader notes it before taking its snapshot

	mu    sync.Mutex
	slots map[[16]byte]*extentSlot
	// floor is the newest removal that no slot records (a slot evicted, or everything
	// removed): a reader that began before it stores nothing.
	floor uint64
	max   int   // slots
	bytes int64 // the entries' cost (extentEntry.cost), at most extentCacheBytes
}

// extentSlot is the cache's state for one version id: the sequence number of the last
// removal of its entry, and the entry (nil if none).
type extentSlot struct {
	removed uint64
	entry   *extentEntry
}

// extentEntry is a mutable object's extent map at one write order; nil ext with ok false
// says the object is not worth caching (too many extents, or too many inline bytes) and
// is read from the index.
type extentEntry struct {
	order uint64
	ok    bool
	ext   []cachedExtent // in offset order, not overlapping
	cost  int64          // bytes it holds, roughly: its extents, locations and inline bytes
}

// extentCost is what one cached extent costs besides its inline bytes: the extent, and a
// chunk's location with 16 block checksums.
const extentCost = 200

// cachedExtent is an extent and, once a reader resolved it, its chunk's location.
type cachedExtent struct {
	extent
	at atomic.Pointer[chunkPlace]
}

// chunkPlace is a chunk's location and block checksums (nil: a format-1 location).
type chunkPlace struct {
	loc  segment.Loc
	sums []byte
}

// Bounds of what the cache holds: objects (data objects of 4 MiB: 4 GiB of volume data),
// the bytes of all entries, and the extents and inline bytes of one object (small writes
// keep their bytes in the index; an object of many of them is read from the index as
// before).
const (
	extentCacheObjects   = 1024
	extentCacheBytes     = 32 << 20
	extentCacheMaxExtent = 1024
	extentCacheMaxInline = 64 << 10
)

func newExtentCache(max int) *extentCache {
	return &extentCache{slots: map[[16]byte]*extentSlot{}, max: max}
}

// begin returns the sequence number a reader notes before it takes its snapshot.
func (c *extentCache) begin() uint64 { return c.seq.Load() }

// get returns the entry of vid at order, nil if none.
func (c *extentCache) get(vid [16]byte, order uint64) *extentEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sl := c.slots[vid]; sl != nil && sl.entry != nil && sl.entry.order == order {
		return sl.entry
	}
	return nil
}

// fresh reports whether a reader that began at seq may store what it read of vid.
// c.mu must be held.
func (c *extentCache) fresh(vid [16]byte, seq uint64) bool {
	if seq < c.floor {
		return false
	}
	sl := c.slots[vid]
	return sl == nil || seq >= sl.removed
}

// put stores e as vid's entry if the reader that built it, which began at seq, may.
func (c *extentCache) put(vid [16]byte, seq uint64, e *extentEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.fresh(vid, seq) {
		return
	}
	sl := c.slots[vid]
	if sl != nil && sl.entry != nil {
		c.bytes -= sl.entry.cost
		sl.entry = nil
	}
	for c.bytes+e.cost > extentCacheBytes && len(c.slots) > 0 {
		c.evictLocked(true)
	}
	if sl = c.slots[vid]; sl == nil { // evicted just now, or never there
		c.evictLocked(false)
		sl = &extentSlot{}
		c.slots[vid] = sl
	}
	sl.entry = e
	c.bytes += e.cost
}

// place stores p as the location of ce, an extent of vid's entry, if the reader that
// looked it up, which began at seq, may.
func (c *extentCache) place(vid [16]byte, seq uint64, ce *cachedExtent, p *chunkPlace) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fresh(vid, seq) {
		ce.at.Store(p)
	}
}

// evictLocked makes room for one slot, dropping an arbitrary one if the cache has max
// slots, or if always.
func (c *extentCache) evictLocked(always bool) {
	if !always && len(c.slots) < c.max {
		return
	}
	for vid, sl := range c.slots {
		c.floor = max(c.floor, sl.removed)
		if sl.entry != nil {
			c.bytes -= sl.entry.cost
		}
		delete(c.slots, vid)
		return
	}
}

// remove drops the entries of vids; it is called after the commit that changed them.
func (c *extentCache) remove(vids [][16]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seq := c.seq.Add(1)
	for _, vid := range vids {
		sl := c.slots[vid]
		if sl == nil {
			c.evictLocked(false)
			sl = &extentSlot{}
			c.slots[vid] = sl
		}
		if sl.entry != nil {
			c.bytes -= sl.entry.cost
		}
		sl.removed, sl.entry = seq, nil
	}
}

// removeAll drops every entry (compaction moved chunks, or a key range was deleted).
func (c *extentCache) removeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.floor = c.seq.Add(1)
	clear(c.slots)
	c.bytes = 0
}
