package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store/segment"
)

// Mutable objects (docs/design/volumes.md) are the data objects of block volumes: written
// in place, a range at a time, instead of replaced whole. A mutable object's record (flag
// Mutable) has no body of its own; its bytes are extents in the index:
//
//	X/<version id><offset, 4 bytes big endian>  ->  0, data...                 (data inline)
//	                                           ->  1, chunk id, chunk offset, length (in a chunk)
//
// A range not covered by an extent reads as zeroes (thin provisioning; TRIM and
// WRITE_ZEROES make holes). Writes up to InlineMax carry their bytes in the index batch;
// larger ones are appended to a segment as a chunk, synced, then referenced. A chunk can
// be referenced by several extents (a write into the middle of an extent splits it):
// K/<chunk id> holds the number of extents referencing it, and the chunk is freed when it
// drops to zero. Each write is one synced index batch: the record (its new order), the
// extents it adds, trims and removes, and the reference counts, so a power cut leaves the
// object as it was before or after the write, never between.
//
// The record's HLC is not a time but the object's write order (the writer's lease epoch
// and write sequence, package volume): a write names the order it expects to find (Prev)
// and the one it leaves (Next); a replica that missed a write refuses the next one with a
// Precondition error, and must catch up (a whole-object copy from a replica that has it,
// through PutObject with Repair) before it takes writes again.
const (
	pfxExtent   = "X/"
	pfxChunkRef = "K/"

	extentData  = 0
	extentChunk = 1

	// MaxMutableSize bounds a mutable object (volume data objects are 4 MiB).
	MaxMutableSize = 64 << 20
)

func extentPrefix(vid [16]byte) []byte {
	return append([]byte(pfxExtent), vid[:]...)
}

func extentKey(vid [16]byte, off int64) []byte {
	return binary.BigEndian.AppendUint32(extentPrefix(vid), uint32(off))
}

// extentOffset is the offset an extent key (of the right length) names.
func extentOffset(k []byte) uint32 { return binary.BigEndian.Uint32(k[len(k)-4:]) }

func chunkRefKey(id segment.ID) []byte { return append([]byte(pfxChunkRef), id[:]...) }

// extent is one decoded extent.
type extent struct {
	off, n   int64
	data     []byte // extentData: the bytes (n of them)
	chunk    segment.ID
	chunkOff int64 // extentChunk: where the bytes start in the chunk's payload
	inChunk  bool
}

func (e extent) end() int64 { return e.off + e.n }

func decodeExtent(key, v []byte) (extent, error) {
	bad := errors.E(errors.Corrupt, "malformed extent of a mutable object")
	if len(key) != len(pfxExtent)+16+4 || len(v) < 1 {
		return extent{}, bad
	}
	e := extent{off: int64(binary.BigEndian.Uint32(key[len(key)-4:]))}
	switch v[0] {
	case extentData:
		e.data, e.n = v[1:], int64(len(v)-1)
	case extentChunk:
		if len(v) != 1+16+4+4 {
			return extent{}, bad
		}
		copy(e.chunk[:], v[1:17])
		e.chunkOff = int64(binary.BigEndian.Uint32(v[17:]))
		e.n = int64(binary.BigEndian.Uint32(v[21:]))
		e.inChunk = true
	default:
		return extent{}, bad
	}
	if e.n == 0 {
		return extent{}, bad
	}
	return e, nil
}

func (e extent) value() []byte {
	if !e.inChunk {
		return append([]byte{extentData}, e.data...)
	}
	v := append([]byte{extentChunk}, e.chunk[:]...)
	v = binary.BigEndian.AppendUint32(v, uint32(e.chunkOff))
	return binary.BigEndian.AppendUint32(v, uint32(e.n))
}

// slice returns the part of e in [from, to) (within e).
func (e extent) slice(from, to int64) extent {
	s := e
	s.off, s.n = from, to-from
	if e.inChunk {
		s.chunkOff = e.chunkOff + from - e.off
	} else {
		s.data = e.data[from-e.off : to-e.off]
	}
	return s
}

// WriteRange applies w to the mutable object bucket/key, creating it if w.Prev is 0. It
// returns the object's record afterwards. An object at another order than w.Prev is a
// Precondition error returned with the object's record as it is (the caller tells a
// missed write from a stale writer by comparing orders).
func (s *Store) WriteRange(ctx context.Context, w object.RangeWrite) (*object.Object, error) {
	const op errors.Op = "store.WriteRange"
	n := w.Length()
	switch {
	case w.Size <= 0 || w.Size > MaxMutableSize:
		return nil, errors.Errorf(op, errors.Invalid, "mutable object size %d (1 byte to %d)", w.Size, MaxMutableSize)
	case w.Off < 0 || n <= 0 || w.Off > w.Size || n > w.Size-w.Off:
		return nil, errors.Errorf(op, errors.Invalid, "range [%d, +%d) outside an object of %d bytes", w.Off, n, w.Size)
	case w.Next <= w.Prev:
		return nil, errors.Errorf(op, errors.Invalid, "write order %d does not follow %d", w.Next, w.Prev)
	}
	if w.Data != nil && len(w.Data) <= s.cfg.InlineMax {
		// Inline bytes go to the index: refused like any write on a full disk (larger
		// ones are checked by writeMutableChunks; a hole frees space and always goes).
		if err := s.checkSpace(int64(len(w.Data))); err != nil {
			return nil, errors.E(op, err)
		}
	}
	// An unsynced write goes to the journal: its bytes (up to InlineMax, or a hole), or,
	// for a larger one, a reference to its chunks appended unsynced to segments (its
	// bytes are written once; journaling them too halved sequential writes,
	// docs/benchmarks.md, issue 17).
	if w.Unsynced && s.jnl != nil {
		return s.jnl.write(ctx, op, w)
	}
	// A synced write comes after the writes of the object the journal holds.
	if err := s.drain(w.Bucket, w.Key); err != nil {
		return nil, errors.E(op, err)
	}
	var bd *body
	if w.Data != nil && len(w.Data) > s.cfg.InlineMax {
		var err error
		if bd, err = s.writeMutableChunks(w.Data, true); err != nil {
			return nil, errors.E(op, err)
		}
	}
	o, err := s.commitRange(op, w, bd, true)
	if bd != nil {
		s.release(bd.locs)
	}
	return o, err
}

// mutableChunk is the size of the chunk records a mutable object's large writes are cut
// into, a multiple of blockSize. A read of a few KiB reads and checks only the blocks it
// covers (block checksums, format 2), so the size weighs the index work of a large write
// (four or five index keys per chunk, and as many to drop when it is overwritten: about
// a third of the CPU of 1 MiB writes at 64 KiB) against the space an overwritten chunk
// holds until its last block is overwritten too. 256 KiB: docs/benchmarks.md, issue 17,
// session 27.
const mutableChunk = 256 << 10

// alignedGroup is the most whole mutable chunks writeMutableChunks writes in one go.
const alignedGroup = 4

// alignedChunks are buffers for alignedGroup aligned mutable chunk records.
var alignedChunks = sync.Pool{New: func() any {
	b := segment.AlignedBuffer(alignedGroup * segment.AlignedSize(mutableChunk))
	return &b
}}

// writeMutableChunks appends data to a segment as chunk records of at most mutableChunk
// bytes and syncs them (unless !sync: the journal's applier syncs a group of them at once,
// before it commits the extents that reference them).
func (s *Store) writeMutableChunks(data []byte, sync bool) (*body, error) {
	if err := s.checkSpace(int64(len(data))); err != nil {
		return nil, err
	}
	bd := &body{size: int64(len(data))}
	// Whole chunks go in groups, each one write with direct I/O of aligned records
	// (buffered writes of large records and their fdatasync run at a fraction of the
	// disk's rate); a short tail goes through the page cache.
	bp := alignedChunks.Get().(*[]byte)
	defer alignedChunks.Put(bp)
	var ids []segment.ID
	var sizes []int
	var crcs []uint32
	at := 0 // where the next record starts in *bp
	flush := func() error {
		if len(ids) == 0 {
			return nil
		}
		locs, err := s.segs.AppendAlignedRecords(segment.KindChunk, ids, sizes, crcs, *bp)
		if err != nil {
			return err
		}
		bd.locs = append(bd.locs, locs...)
		ids, sizes, crcs, at = ids[:0], sizes[:0], crcs[:0], 0
		return nil
	}
	for off := 0; off < len(data); off += mutableChunk {
		piece := data[off:min(off+mutableChunk, len(data))]
		id := segment.ID(newID())
		sums := blockSums(piece)
		var err error
		if len(piece) == mutableChunk {
			// A whole chunk is whole blocks: its record's checksum is folded from theirs.
			copy((*bp)[at+segment.HeaderSize:], piece)
			ids, sizes, crcs = append(ids, id), append(sizes, len(piece)), append(crcs, wholeSum(sums))
			if at += segment.AlignedSize(len(piece)); at+segment.AlignedSize(mutableChunk) > len(*bp) {
				err = flush()
			}
		} else if err = flush(); err == nil {
			var loc segment.Loc
			if loc, err = s.segs.Append(segment.KindChunk, id, piece); err == nil {
				bd.locs = append(bd.locs, loc)
			}
		}
		if err != nil {
			s.release(bd.locs)
			return nil, err
		}
		bd.chunks = append(bd.chunks, object.Chunk{ID: object.ChunkID(id), Size: uint32(len(piece))})
		bd.sums = append(bd.sums, sums)
	}
	if err := flush(); err != nil {
		s.release(bd.locs)
		return nil, err
	}
	if !sync {
		return bd, nil
	}
	if err := s.syncLocs(bd.locs); err != nil {
		s.release(bd.locs)
		return nil, err
	}
	return bd, nil
}

// commitRange applies w to the index in one batch, synced (the write is durable when it
// returns) or, !sync, committed without a sync: the journal's applier, whose writes are
// durable in the journal already and whose chunks (bd) were synced before.
func (s *Store) commitRange(op errors.Op, w object.RangeWrite, bd *body, sync bool) (*object.Object, error) {
	s.bucketMu.RLock()
	defer s.bucketMu.RUnlock()
	if _, err := s.bucket(w.Bucket); err != nil {
		return nil, errors.E(op, err)
	}
	mu := s.keyLock(w.Bucket, w.Key)
	mu.Lock()
	defer mu.Unlock()
	s.relocMu.RLock()
	defer s.relocMu.RUnlock()
	okey := objectKey(w.Bucket, w.Key)
	old, err := getObject(s.db, okey)
	if err != nil && !errors.Is(errors.NotExist, err) {
		return nil, errors.E(op, err)
	}
	o, err := mutableNext(op, &w, old)
	if err != nil {
		if errors.Is(errors.Precondition, err) {
			return old, err // the caller learns the order the object is at
		}
		return nil, err
	}
	o.HLC, o.ModTime = w.Next, time.Now().UnixNano()
	s.clock.Observe(w.Next)

	b := s.db.NewBatch()
	refs := map[segment.ID]int{}
	// The cut goes through the object's extent map if the store keeps one (extmap.go),
	// else through the index; the map, changed by the write, is kept once it committed.
	vid, from, to := o.VersionID, w.Off, w.Off+w.Length()
	fresh := old == nil || old.Deleted || old.VersionID != vid
	m, load, ticket := s.extMaps.take(vid, orderOf(old), fresh, b)
	if m == nil && load {
		m = s.loadExtentMap(vid, orderOf(old))
	}
	kept := false
	defer func() {
		if !kept {
			s.extMaps.drop(vid, ticket)
		}
	}()
	if m != nil {
		err = s.cutMap(b, vid, from, to, refs, m)
	} else {
		err = s.cutExtents(b, vid, from, to, refs)
	}
	if err != nil {
		b.Close()
		return nil, errors.E(op, err)
	}
	var added []extMeta // the write's extents, for m
	switch {
	case bd == nil && w.Data == nil: // a hole
	case bd == nil:
		b.Set(extentKey(o.VersionID, w.Off), extent{data: w.Data}.value(), nil)
		added = append(added, extMeta{off: w.Off, n: int64(len(w.Data))})
	default: // chunks (a journaled one has no w.Data)
		pos := w.Off
		for i, c := range bd.chunks {
			id := segment.ID(c.ID)
			b.Set(chunkKey(id), encodeChunkAt(bd.locs[i], bd.chunkSums(i)), nil)
			b.Set(segKey(bd.locs[i]), segValue(id, c.Size), nil)
			e := extent{off: pos, n: int64(c.Size), chunk: id, inChunk: true}
			b.Set(extentKey(o.VersionID, pos), e.value(), nil)
			added = append(added, metaOf(e))
			// A chunk new in this batch has one reference, this extent: its count is
			// set, not read (a lookup of an id no key has yet cost a fifth of the CPU
			// of 1 MiB overwrites, docs/benchmarks.md); cutExtents never names it.
			b.Set(chunkRefKey(id), binary.AppendUvarint(nil, 1), nil)
			pos += int64(c.Size)
		}
	}
	freed, err := s.applyRefs(b, refs)
	if err != nil {
		b.Close()
		return nil, errors.E(op, err)
	}
	b.Set(okey, marshalRecord(&o), nil)
	if sync {
		err = s.commit(b)
	} else {
		err = s.commitNoSync(b)
	}
	if err != nil {
		return nil, errors.E(op, err)
	}
	if m != nil {
		m.insert(from, added)
		m.order = o.HLC
		s.extMaps.install(vid, m, ticket)
		kept = true
	}
	if old == nil || old.Deleted {
		s.count(w.Bucket, old, &o)
	}
	if bd != nil {
		for _, l := range bd.locs {
			s.addLive(l, 1)
		}
	}
	for _, l := range freed {
		s.addLive(l, -1)
	}
	return &o, nil
}

// orderOf is a record's write order (0 for none or a delete).
func orderOf(o *object.Object) uint64 {
	if o == nil || o.Deleted {
		return 0
	}
	return o.HLC
}

// cutExtents adds to b what removes the object's bytes in [from, to): extents inside are
// deleted, extents across an end trimmed (one across both ends becomes two). refs gets
// the change in references of each chunk.
func (s *Store) cutExtents(b *pebble.Batch, vid [16]byte, from, to int64, refs map[segment.ID]int) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: extentPrefix(vid), UpperBound: extentKey(vid, to)})
	if err != nil {
		return indexErr(err)
	}
	defer it.Close()
	// The first extent that may overlap starts at or before from.
	ok := it.SeekLT(extentKey(vid, from+1))
	if !ok {
		ok = it.First()
	}
	for ; ok; ok = it.Next() {
		// A value in a blob file (at least versionValues.MinimumSize bytes, so inline
		// bytes, never a chunk reference) that the range covers whole is deleted unread:
		// its length is in the table.
		if lv := it.LazyValue(); lv.Len() >= versionValues.MinimumSize {
			if _, separated := lv.TryGetShortAttribute(); separated {
				k := it.Key()
				if len(k) != len(pfxExtent)+16+4 {
					return errors.E(errors.Corrupt, "malformed extent key of a mutable object")
				}
				off := int64(extentOffset(k))
				if off >= from && off+int64(lv.Len()-1) <= to {
					b.Delete(k, nil)
					continue
				}
			}
		}
		v, err := s.iterValue(it)
		if err != nil {
			return err
		}
		e, err := decodeExtent(it.Key(), v)
		if err != nil {
			return err
		}
		if e.end() <= from {
			continue
		}
		if e.off >= to {
			break
		}
		kept := 0
		if e.off < from {
			b.Set(extentKey(vid, e.off), e.slice(e.off, from).value(), nil)
			kept++
		} else {
			b.Delete(extentKey(vid, e.off), nil)
		}
		if e.end() > to {
			b.Set(extentKey(vid, to), e.slice(to, e.end()).value(), nil)
			kept++
		}
		if e.inChunk {
			refs[e.chunk] += kept - 1
		}
	}
	return it.Error()
}

// applyRefs adds to b the reference counts changed by refs, and the deletion of the chunks
// no extent references any more; it returns their locations (for the live-bytes
// accounting after the commit). refs names chunks indexed before the batch only (a chunk
// new in the batch has its count set by the caller).
func (s *Store) applyRefs(b *pebble.Batch, refs map[segment.ID]int) ([]segment.Loc, error) {
	var freed []segment.Loc
	for id, d := range refs {
		if d == 0 {
			continue
		}
		cur, err := s.chunkRefs(id)
		if err != nil {
			return nil, err
		}
		n := cur + d
		switch {
		case n < 0:
			return nil, errors.Errorf("", errors.Corrupt, "chunk %s: reference count below zero", id)
		case n > 0:
			b.Set(chunkRefKey(id), binary.AppendUvarint(nil, uint64(n)), nil)
			continue
		}
		b.Delete(chunkRefKey(id), nil)
		loc, err := s.chunkLoc(s.db, id)
		if errors.Is(errors.NotExist, err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		b.Delete(chunkKey(id), nil)
		b.Delete(segKey(loc), nil)
		freed = append(freed, loc)
	}
	return freed, nil
}

// chunkRefs returns the number of extents referencing chunk id (0 for a chunk not yet
// referenced).
func (s *Store) chunkRefs(id segment.ID) (int, error) {
	v, c, err := s.db.Get(chunkRefKey(id))
	if err == pebble.ErrNotFound {
		return 0, nil
	}
	if err != nil {
		return 0, indexErr(err)
	}
	defer c.Close()
	n, k := binary.Uvarint(v)
	if k <= 0 {
		return 0, errors.Errorf("", errors.Corrupt, "chunk %s: malformed reference count", id)
	}
	return int(n), nil
}

// addMutableBody adds to b the extents of a mutable object's body stored as bd (a whole
// object arriving from another replica: the body becomes extents, one per chunk or one
// inline).
func addMutableBody(b *pebble.Batch, o *object.Object, bd *body) {
	o.Inline, o.Embedded, o.Body, o.Chunks = false, false, nil, nil
	if bd.inline != nil {
		if len(bd.inline) > 0 {
			b.Set(extentKey(o.VersionID, 0), extent{data: bd.inline}.value(), nil)
		}
		return
	}
	var pos int64
	for i, c := range bd.chunks {
		id := segment.ID(c.ID)
		b.Set(chunkKey(id), encodeChunkAt(bd.locs[i], bd.chunkSums(i)), nil)
		b.Set(segKey(bd.locs[i]), segValue(id, c.Size), nil)
		b.Set(chunkRefKey(id), binary.AppendUvarint(nil, 1), nil)
		b.Set(extentKey(o.VersionID, pos), extent{off: pos, n: int64(c.Size), chunk: id, inChunk: true}.value(), nil)
		pos += int64(c.Size)
	}
}

// dropMutableBody adds to b the deletion of a mutable object's extents and of the chunks
// only they reference; it returns the chunks' locations.
func (s *Store) dropMutableBody(b *pebble.Batch, o *object.Object) ([]segment.Loc, error) {
	refs := map[segment.ID]int{}
	if err := s.cutExtents(b, o.VersionID, 0, o.Size, refs); err != nil {
		return nil, err
	}
	return s.applyRefs(b, refs)
}

// writeMutable writes n bytes of a mutable object's body from off to w, zeroes for holes:
// from the extent cache's map of the object at its order (filled from the reader's
// snapshot if it has none), or, for an object the cache does not hold, from the index.
func (r *Reader) writeMutable(ctx context.Context, w io.Writer, off, n int64) (int64, error) {
	e := r.s.extents.get(r.Object.VersionID, r.Object.HLC)
	if e == nil {
		// An object the extent cache would not keep (many extents, or much inline data:
		// small random writes) is read through its extent map if the store keeps one
		// at the reader's order: no seek of the index for the extents, a point read
		// for each inline one.
		var buf [8]extMeta
		if span, ok := r.s.extMaps.span(r.Object.VersionID, r.Object.HLC, off, off+n, buf[:0]); ok {
			return r.writeMutableMap(ctx, w, off, n, span)
		}
		e = r.loadExtents()
	}
	if e == nil || !e.ok {
		return r.writeMutableIndex(ctx, w, off, n)
	}
	return r.writeMutableCached(ctx, w, off, n, e)
}

// loadExtents reads the object's whole extent map from the reader's snapshot and offers
// it to the extent cache; nil if the index could not be read (the read goes to the index
// then, and reports the error).
func (r *Reader) loadExtents() *extentEntry {
	vid := r.Object.VersionID
	p := extentPrefix(vid)
	it, err := r.snap.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil
	}
	defer it.Close()
	e := &extentEntry{order: r.Object.HLC, ok: true}
	var inline int
	for ok := it.First(); ok; ok = it.Next() {
		v, err := r.s.iterValue(it)
		if err != nil {
			return nil
		}
		x, err := decodeExtent(it.Key(), v)
		if err != nil {
			return nil
		}
		inline += len(x.data)
		if len(e.ext) == extentCacheMaxExtent || inline > extentCacheMaxInline {
			e.ok, e.ext = false, nil
			break
		}
		x.data = bytes.Clone(x.data)
		e.ext = append(e.ext, cachedExtent{extent: x})
		e.cost += extentCost + int64(len(x.data))
	}
	if it.Error() != nil {
		return nil
	}
	r.s.extents.put(vid, r.extSeq, e)
	return e
}

// writeMutableCached is writeMutable with the object's extent map e.
func (r *Reader) writeMutableCached(ctx context.Context, w io.Writer, off, n int64, e *extentEntry) (int64, error) {
	i := sort.Search(len(e.ext), func(i int) bool { return e.ext[i].end() > off })
	ext := e.ext[i:]
	return writePieces(ctx, w, off, n, len(ext), func(i int) int64 { return ext[i].off }, func(i int, pos, end int64) (int64, error) {
		ce := &ext[i]
		part := ce.slice(max(ce.off, pos), min(ce.end(), end))
		if !part.inChunk {
			k, err := w.Write(part.data)
			return int64(k), err
		}
		pl := ce.at.Load()
		if pl == nil {
			loc, sums, err := r.s.chunkAt(r.snap, part.chunk, nil)
			if err != nil {
				if errors.Is(errors.NotExist, err) {
					err = errors.E(errors.Corrupt, err)
				}
				return 0, err
			}
			pl = &chunkPlace{loc: loc, sums: sums}
			r.s.extents.place(r.Object.VersionID, r.extSeq, ce, pl)
		}
		return r.writeChunkAt(w, part, pl.loc, pl.sums)
	})
}

// writeMutableMap is writeMutable with span, the extents of the object's map (at the
// reader's order) that overlap [off, off+n): an inline extent's bytes are read from the
// reader's snapshot, a chunk's as writeMutableIndex reads them.
func (r *Reader) writeMutableMap(ctx context.Context, w io.Writer, off, n int64, span []extMeta) (int64, error) {
	var last chunkMemo
	return writePieces(ctx, w, off, n, len(span), func(i int) int64 { return span[i].off }, func(i int, pos, end int64) (int64, error) {
		x := span[i]
		if x.inChunk {
			return r.writeChunkPartMemo(w, x.extent().slice(max(x.off, pos), min(x.end(), end)), &last)
		}
		var m int64
		_, err := r.s.inlineExtent(r.snap, r.Object.VersionID, x, func(e extent) error {
			k, err := w.Write(e.slice(max(e.off, pos), min(e.end(), end)).data)
			m = int64(k)
			return err
		})
		return m, err
	})
}

// writePieces writes [off, off+n) of a mutable object to w from count extents in offset
// order, the first ending after off: zeroes where none is, and, through piece, the part
// [pos, end) of extent i that the range covers (start(i) is where extent i starts).
func writePieces(ctx context.Context, w io.Writer, off, n int64, count int, start func(i int) int64, piece func(i int, pos, end int64) (int64, error)) (int64, error) {
	pos, end := off, off+n
	var written int64
	for i := 0; i < count && pos < end && start(i) < end; i++ {
		m, err := writeZeroes(w, start(i)-pos)
		written += m
		pos += m
		if err != nil {
			return written, err
		}
		m, err = piece(i, pos, end)
		written += m
		pos += m
		if err != nil {
			return written, err
		}
		if err := ctx.Err(); err != nil {
			return written, err
		}
	}
	m, err := writeZeroes(w, end-pos)
	return written + m, err
}

// writeZeroes writes n zero bytes to w.
func writeZeroes(w io.Writer, n int64) (int64, error) {
	var written int64
	for written < n {
		m, err := w.Write(zeroes[:min(n-written, int64(len(zeroes)))])
		written += int64(m)
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// writeMutableIndex is writeMutable reading the extents from the index.
func (r *Reader) writeMutableIndex(ctx context.Context, w io.Writer, off, n int64) (int64, error) {
	vid := r.Object.VersionID
	it, err := r.snap.NewIter(&pebble.IterOptions{LowerBound: extentPrefix(vid), UpperBound: extentKey(vid, off+n)})
	if err != nil {
		return 0, indexErr(err)
	}
	defer it.Close()
	pos, end := off, off+n
	var written int64
	zero := func(upTo int64) error {
		for pos < upTo {
			k := min(upTo-pos, int64(len(zeroes)))
			m, err := w.Write(zeroes[:k])
			written += int64(m)
			pos += int64(m)
			if err != nil {
				return err
			}
		}
		return nil
	}
	ok := it.SeekLT(extentKey(vid, off+1))
	if !ok {
		ok = it.First()
	}
	// The pieces of one chunk that later small writes cut apart follow each other: the
	// chunk's location is looked up once for all of them (same snapshot).
	var last chunkMemo
	for ; ok && pos < end; ok = it.Next() {
		v, err := r.s.iterValue(it)
		if err != nil {
			return written, err
		}
		e, err := decodeExtent(it.Key(), v)
		if err != nil {
			return written, err
		}
		if e.end() <= pos {
			continue
		}
		if e.off >= end {
			break
		}
		if err := zero(e.off); err != nil {
			return written, err
		}
		part := e.slice(max(e.off, pos), min(e.end(), end))
		var p []byte
		if part.inChunk {
			m, werr := r.writeChunkPartMemo(w, part, &last)
			written += m
			pos += m
			if werr != nil {
				return written, werr
			}
		} else {
			p = part.data
			m, werr := w.Write(p)
			written += int64(m)
			pos += int64(m)
			if werr != nil {
				return written, werr
			}
		}
		if err := ctx.Err(); err != nil {
			return written, err
		}
	}
	if err := it.Error(); err != nil {
		return written, indexErr(err)
	}
	return written, zero(end)
}

// chunkMemo is the location of the chunk a read looked up last, with room for its block
// checksums.
type chunkMemo struct {
	ok   bool
	id   segment.ID
	loc  segment.Loc
	sums []byte
	buf  [4 * mutableChunk / blockSize]byte
}

// writeChunkPartMemo writes the bytes of the chunk extent part to w, looking the chunk's
// location up only if it is not the one in m, which it then holds. A chunk whose location
// has block checksums (format 2) has only the blocks part covers read and checked; any
// other is read and checked whole. Nothing of a block that fails its checksum reaches w.
func (r *Reader) writeChunkPartMemo(w io.Writer, part extent, m *chunkMemo) (int64, error) {
	if !m.ok || m.id != part.chunk {
		m.ok = false
		loc, sums, err := r.s.chunkAt(r.snap, part.chunk, m.buf[:0])
		if err != nil {
			if errors.Is(errors.NotExist, err) {
				err = errors.E(errors.Corrupt, err)
			}
			return 0, err
		}
		m.ok, m.id, m.loc, m.sums = true, part.chunk, loc, sums
	}
	return r.writeChunkAt(w, part, m.loc, m.sums)
}

// writeChunkAt is writeChunkPartMemo with the chunk's location and block checksums (nil:
// checked whole) known.
func (r *Reader) writeChunkAt(w io.Writer, part extent, loc segment.Loc, sums []byte) (int64, error) {
	if part.chunkOff < 0 || part.chunkOff+part.n > int64(loc.Len) {
		return 0, errors.E(errors.Corrupt, "extent beyond the end of its chunk")
	}
	bp := r.s.bufPool.Get().(*[]byte)
	defer r.s.bufPool.Put(bp)
	if sums == nil {
		payload, err := r.s.segs.Read(loc, part.chunk, *bp)
		if err != nil {
			return 0, err
		}
		m, err := w.Write(payload[part.chunkOff : part.chunkOff+part.n])
		return int64(m), err
	}
	first, last := int(part.chunkOff>>blockShift), blocks(part.chunkOff+part.n) // blocks [first, last)
	from, to := int64(first)<<blockShift, min(int64(last)<<blockShift, int64(loc.Len))
	buf := *bp
	if int64(cap(buf)) < to-from {
		buf = make([]byte, to-from)
	}
	buf = buf[:to-from]
	if err := r.s.segs.ReadPayload(loc, from, buf); err != nil {
		return 0, err
	}
	for i := first; i < last; i++ {
		blk := buf[int64(i-first)<<blockShift : min(int64(i-first+1)<<blockShift, int64(len(buf)))]
		if crc32.Checksum(blk, crcTable) != binary.BigEndian.Uint32(sums[4*i:]) {
			return 0, errors.Errorf("", errors.Corrupt, "segment %d offset %d: chunk %s block %d fails its checksum", loc.Seg, loc.Off, part.chunk, i)
		}
	}
	m, err := w.Write(buf[part.chunkOff-from : part.chunkOff-from+part.n])
	return int64(m), err
}

// zeroes is what holes of mutable objects read as, a piece at a time.
var zeroes = make([]byte, 64<<10)

// mutableNext returns the record a range write w starts from, given the key's record old
// (nil if none): old itself if it is the mutable object at w's previous order, a new
// mutable object if w creates one (nothing there, or a tombstone older than w); otherwise
// a Precondition error naming the order the object is at (or Invalid: not a mutable
// object, or another size).
func mutableNext(op errors.Op, w *object.RangeWrite, old *object.Object) (object.Object, error) {
	switch {
	case old != nil && !old.Deleted && old.HLC == w.Prev:
		if !old.Mutable {
			return object.Object{}, errors.Errorf(op, errors.Invalid, "%s/%s is not a mutable object", w.Bucket, w.Key)
		}
		if old.Size != w.Size {
			return object.Object{}, errors.Errorf(op, errors.Invalid, "mutable object of %d bytes written as one of %d", old.Size, w.Size)
		}
		return *old, nil
	case w.Prev == 0 && (old == nil || (old.Deleted && old.HLC < w.Next)):
		return object.Object{Mutable: true, VersionID: newID(), Size: w.Size}, nil
	}
	return object.Object{}, errors.Errorf(op, errors.Precondition, "mutable object %s/%s is at order %d, the write expects %d", w.Bucket, w.Key, orderOf(old), w.Prev)
}
