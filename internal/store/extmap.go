package store

import (
	"bytes"
	"sort"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/store/segment"
)

// extentMaps keeps the extent layout of mutable objects being written (offsets, lengths,
// chunk references; no bytes), so that a range write's cut of the extents it overlaps
// needs no seek of the index. That seek was a fifth of a node's CPU during 4 KiB random
// writes: after random writes the object's extent keys are spread over several levels,
// and a bounded iterator loads a table of each (docs/benchmarks.md, issue 17, session 28).
//
// A map is used only by commitRange, which holds the object's key lock, and only when it
// is the layout at the object's current write order: commitRange takes it out of the cache
// (take), cuts and extends it with the write, and puts it back after its batch committed
// (install). It is never stale:
//   - every commit that sets or deletes an extent key of another batch than the taker's
//     drops the map of that version id (Store.invalidateExtents), or marks a taken one so
//     that its install drops it; a commit that deletes a key range drops every map;
//   - a write order is used once per object (every range write moves it forward, and a
//     whole copy arriving at the same order is a commit of its own extents, which drops
//     the map), and take checks it;
//   - a failed commit (it may be applied in part) installs nothing.
//
// Chunk locations are not in a map, so compaction moving chunks leaves maps alone.
//
// Admission: a version id new to the store (an object created by this write) starts with
// an empty map; another is loaded from the index (a scan of its extent keys) on its second
// write while it is among the recently written, so that writes spread over more objects
// than the cache holds fall back to the seek instead of paying a scan each.
type extentMaps struct {
	mu    sync.Mutex
	slots map[[16]byte]*mapSlot
	seen  map[[16]byte]struct{} // written once recently, no map
	held  int                   // extents in the installed maps, at most max
	max   int
	tick  uint64 // tickets handed out by take
}

// mapSlot is the cache's state of one version id: its map (nil while a writer holds it),
// and, while taken, the taker's ticket, its batch until that batch's commit is seen (a
// closed batch is pooled and may come back as another), and whether another commit
// changed the object's extents meanwhile.
type mapSlot struct {
	m      *extentMap
	taken  bool
	ticket uint64
	owner  *pebble.Batch
	stale  bool
}

// extentMap is a mutable object's extents at one write order, in offset order, not
// overlapping: exactly the object's extent keys in the index at that order.
type extentMap struct {
	order  uint64
	ext    []extMeta
	inline int64 // bytes of the inline extents, set by install
}

// extMeta is an extent without its bytes.
type extMeta struct {
	off, n   int64
	chunkOff int64
	chunk    segment.ID
	inChunk  bool
}

func (e extMeta) end() int64 { return e.off + e.n }

// extent is e as an extent (without bytes: an inline one's are in the index).
func (e extMeta) extent() extent {
	return extent{off: e.off, n: e.n, chunk: e.chunk, chunkOff: e.chunkOff, inChunk: e.inChunk}
}

// Bounds: the extents held by all maps (56 bytes each: 28 MiB), of one map (a 4 MiB
// object written 4 KiB at a time has 1,024; byte-sized writes make more, and such an
// object is cut through the index), and the version ids remembered as written once.
const (
	extentMapMax       = 512 << 10
	extentMapPerObject = 4096
	extentMapSeen      = 2048
)

func newExtentMaps() *extentMaps {
	return &extentMaps{slots: map[[16]byte]*mapSlot{}, seen: map[[16]byte]struct{}{}, max: extentMapMax}
}

// take returns vid's map at order for the writer whose batch is b, and whether the
// writer should load one from the index instead (the object is written often enough)
// when none is returned. fresh says vid is new: its map is empty. Until install or drop
// with the ticket returned, vid's slot is the writer's.
func (c *extentMaps) take(vid [16]byte, order uint64, fresh bool, b *pebble.Batch) (m *extentMap, load bool, ticket uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sl := c.slots[vid]
	if sl != nil && sl.taken {
		// A writer holds it: cannot happen under the key lock, but never share a map.
		return nil, false, 0
	}
	if sl != nil {
		c.held -= len(sl.m.ext)
	}
	switch {
	case fresh:
		m = &extentMap{order: order}
	case sl != nil && sl.m.order == order:
		m = sl.m
	case sl != nil:
		load = true // written recently, at another order: load it anew
	default:
		if _, ok := c.seen[vid]; ok {
			delete(c.seen, vid)
			load = true
		} else {
			if len(c.seen) >= extentMapSeen {
				clear(c.seen)
			}
			c.seen[vid] = struct{}{}
			return nil, false, 0
		}
	}
	if sl == nil {
		sl = &mapSlot{}
		c.slots[vid] = sl
	}
	c.tick++
	*sl = mapSlot{taken: true, ticket: c.tick, owner: b}
	return m, load, c.tick
}

// install puts m back as vid's map after the batch of the taker of ticket committed,
// unless another commit changed vid's extents meanwhile or m is too large.
func (c *extentMaps) install(vid [16]byte, m *extentMap, ticket uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sl := c.slots[vid]
	if sl == nil || !sl.taken || sl.ticket != ticket {
		return
	}
	if sl.stale || len(m.ext) > extentMapPerObject {
		delete(c.slots, vid)
		return
	}
	for c.held+len(m.ext) > c.max && c.evictLocked() {
	}
	m.inline = 0
	for _, e := range m.ext {
		if !e.inChunk {
			m.inline += e.n
		}
	}
	*sl = mapSlot{m: m}
	c.held += len(m.ext)
}

// span appends to buf the extents of vid's map at order that overlap [from, to), for a
// reader whose snapshot shows the object at order (the map is then exactly the extents
// the snapshot holds); false if the store keeps no such map, if more than spanMax
// extents overlap the range, or if the extent cache would
// keep the object (it holds chunk locations too: reads of objects of few extents and
// little inline data are better served there).
func (c *extentMaps) span(vid [16]byte, order uint64, from, to int64, buf []extMeta) ([]extMeta, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sl := c.slots[vid]
	if sl == nil || sl.m == nil || sl.m.order != order {
		return nil, false
	}
	m := sl.m
	if len(m.ext) <= extentCacheMaxExtent && m.inline <= extentCacheMaxInline {
		return nil, false
	}
	for i := sort.Search(len(m.ext), func(i int) bool { return m.ext[i].end() > from }); i < len(m.ext) && m.ext[i].off < to; i++ {
		if len(buf) == spanMax {
			return nil, false
		}
		buf = append(buf, m.ext[i])
	}
	return buf, true
}

// spanMax is the most extents a read goes through a map for: each inline one is a point
// read, where the index's iterator reads neighbouring extents from the same blocks (1 MiB
// sequential reads after random writes ran at a third of their rate through maps).
const spanMax = 8

// drop ends the hold of vid by the taker of ticket, without a map (its commit failed,
// or it had none).
func (c *extentMaps) drop(vid [16]byte, ticket uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sl := c.slots[vid]; sl != nil && sl.taken && sl.ticket == ticket {
		delete(c.slots, vid)
	}
}

// evictLocked drops an arbitrary installed map; false if there is none.
func (c *extentMaps) evictLocked() bool {
	for vid, sl := range c.slots {
		if !sl.taken {
			c.held -= len(sl.m.ext)
			delete(c.slots, vid)
			return true
		}
	}
	return false
}

// remove drops the maps of vids after batch b (committed, or failed) changed their
// extents; a slot taken by b's own writer is left to it.
func (c *extentMaps) remove(b *pebble.Batch, vids [][16]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, vid := range vids {
		sl := c.slots[vid]
		switch {
		case sl == nil:
		case sl.taken:
			if sl.owner == b {
				sl.owner = nil // the taker's own commit: any later batch is another's
			} else {
				sl.stale = true
			}
		default:
			c.held -= len(sl.m.ext)
			delete(c.slots, vid)
		}
	}
}

// removeAll drops every map (a key range was deleted, or a batch could not be read).
func (c *extentMaps) removeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for vid, sl := range c.slots {
		if sl.taken {
			sl.stale = true
		} else {
			delete(c.slots, vid)
		}
	}
	c.held = 0
}

// batchExtents returns the version ids of the extent keys batch b sets or deletes, in
// the batch's order without repeats next to each other, and all if b deletes a key range
// or cannot be read (every cached extent may have changed).
func batchExtents(b *pebble.Batch) (vids [][16]byte, all bool) {
	r := b.Reader()
	for {
		kind, k, _, ok, err := r.Next()
		if err != nil {
			return nil, true
		}
		if !ok {
			return vids, false
		}
		if kind == pebble.InternalKeyKindRangeDelete {
			return nil, true
		}
		if len(k) >= len(pfxExtent)+16 && string(k[:len(pfxExtent)]) == pfxExtent {
			vid := [16]byte(k[len(pfxExtent) : len(pfxExtent)+16])
			if len(vids) == 0 || vids[len(vids)-1] != vid {
				vids = append(vids, vid)
			}
		}
	}
}

// invalidateExtents drops what batch b (committed, or failed: it may be applied in part)
// may have made stale in the extent cache and the extent maps.
func (s *Store) invalidateExtents(b *pebble.Batch) {
	vids, all := batchExtents(b)
	switch {
	case all:
		s.extents.removeAll()
		s.extMaps.removeAll()
	case len(vids) > 0:
		s.extents.remove(vids)
		s.extMaps.remove(b, vids)
	}
}

// loadExtentMap reads vid's extents from the index, at order; nil if they cannot be read
// or are too many to keep (the write then cuts through the index, which reports any
// error as it always did).
func (s *Store) loadExtentMap(vid [16]byte, order uint64) *extentMap {
	p := extentPrefix(vid)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil
	}
	defer it.Close()
	m := &extentMap{order: order}
	for ok := it.First(); ok; ok = it.Next() {
		if len(m.ext) == extentMapPerObject {
			return nil
		}
		k := it.Key()
		if len(k) != len(pfxExtent)+16+4 {
			return nil
		}
		var e extMeta
		// A value in a blob file is inline bytes (cutExtents): its length is in the table.
		if lv := it.LazyValue(); lv.Len() >= versionValues.MinimumSize {
			if _, separated := lv.TryGetShortAttribute(); separated {
				e.off, e.n = int64(extentOffset(k)), int64(lv.Len()-1)
				m.ext = append(m.ext, e)
				continue
			}
		}
		v, err := s.iterValue(it)
		if err != nil {
			return nil
		}
		x, err := decodeExtent(k, v)
		if err != nil {
			return nil
		}
		m.ext = append(m.ext, metaOf(x))
	}
	if it.Error() != nil {
		return nil
	}
	for i := 1; i < len(m.ext); i++ {
		if m.ext[i].off < m.ext[i-1].end() {
			return nil // overlapping extents: leave them to the index path's checks
		}
	}
	return m
}

func metaOf(x extent) extMeta {
	return extMeta{off: x.off, n: x.n, chunkOff: x.chunkOff, chunk: x.chunk, inChunk: x.inChunk}
}

// cutMap is cutExtents against m, the object's extents as the index holds them: the same
// changes to b and refs, and m changed to match. The bytes of an inline extent that is
// trimmed (not removed whole) are read from the index.
func (s *Store) cutMap(b *pebble.Batch, vid [16]byte, from, to int64, refs map[segment.ID]int, m *extentMap) error {
	i := sort.Search(len(m.ext), func(i int) bool { return m.ext[i].end() > from })
	j := i
	var kept [2]extMeta
	nk := 0
	for ; j < len(m.ext) && m.ext[j].off < to; j++ {
		e := m.ext[j]
		var x extent // e with its bytes, once needed
		piece := func(lo, hi int64) ([]byte, extMeta, error) {
			if !e.inChunk && x.data == nil {
				var err error
				if x, err = s.inlineExtent(s.db, vid, e, nil); err != nil {
					return nil, extMeta{}, err
				}
			}
			if e.inChunk {
				x = e.extent()
			}
			p := x.slice(lo, hi)
			return p.value(), metaOf(p), nil
		}
		k := 0
		if e.off < from {
			v, pm, err := piece(e.off, from)
			if err != nil {
				return err
			}
			b.Set(extentKey(vid, e.off), v, nil)
			kept[nk], nk, k = pm, nk+1, k+1
		} else {
			b.Delete(extentKey(vid, e.off), nil)
		}
		if e.end() > to {
			v, pm, err := piece(to, e.end())
			if err != nil {
				return err
			}
			b.Set(extentKey(vid, to), v, nil)
			kept[nk], nk, k = pm, nk+1, k+1
		}
		if e.inChunk {
			refs[e.chunk] += k - 1
		}
	}
	m.ext = replaceExtents(m.ext, i, j, kept[:nk])
	return nil
}

// inlineExtent reads the inline extent e of object vid from g (the index, or a reader's
// snapshot) and passes its bytes to use, if not nil, before they are released; with a nil
// use, the extent returned holds a copy of them. An extent missing, or other than e
// says, is Corrupt.
func (s *Store) inlineExtent(g getter, vid [16]byte, e extMeta, use func(extent) error) (extent, error) {
	k := extentKey(vid, e.off)
	v, c, err := g.Get(k)
	if err == pebble.ErrNotFound {
		return extent{}, errors.E(errors.Corrupt, "an extent of a mutable object is missing from the index")
	}
	if err != nil {
		return extent{}, s.valueErr(err)
	}
	defer c.Close()
	x, err := decodeExtent(k, v)
	if err == nil && (x.inChunk || x.n != e.n) {
		err = errors.E(errors.Corrupt, "an extent of a mutable object differs from its map")
	}
	if err != nil {
		return extent{}, err
	}
	if use != nil {
		return x, use(x)
	}
	x.data = bytes.Clone(x.data)
	return x, nil
}

// replaceExtents replaces ext[i:j] by with.
func replaceExtents(ext []extMeta, i, j int, with []extMeta) []extMeta {
	tail := len(ext) - j
	n := i + len(with) + tail
	if n > cap(ext) {
		grown := make([]extMeta, n, n+n/4)
		copy(grown, ext[:i])
		copy(grown[i+len(with):], ext[j:])
		ext = grown
	} else {
		old := len(ext)
		ext = ext[:max(n, old)]
		copy(ext[i+len(with):], ext[j:old])
		ext = ext[:n]
	}
	copy(ext[i:], with)
	return ext
}

// insertExtents adds extents starting at from (a range the map has no extent in since
// the write's cut) in offset order.
func (m *extentMap) insert(from int64, add []extMeta) {
	i := sort.Search(len(m.ext), func(i int) bool { return m.ext[i].off >= from })
	m.ext = replaceExtents(m.ext, i, i, add)
}
