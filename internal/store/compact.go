package store

import (
	"context"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/store/segment"
)

func (s *Store) compactLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.CompactInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.sealed:
		}
		for ctx.Err() == nil {
			did, err := s.CompactOnce(ctx)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("compaction failed", "err", err)
				}
				break
			}
			if !did {
				break
			}
		}
	}
}

// CompactOnce compacts the sealed segment with the most garbage, if any has more than
// CompactRatio of its size (or no live data at all). It reports whether it did anything.
func (s *Store) CompactOnce(ctx context.Context) (bool, error) {
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	for attempt := 0; attempt < 2; attempt++ {
		best, ok, rolled, err := s.pickSegment()
		if err != nil {
			return false, err
		}
		if ok {
			return true, s.compactSegment(ctx, best, true)
		}
		if !rolled {
			break
		}
	}
	return false, nil
}

// pickSegment chooses the sealed segment with the largest garbage share above CompactRatio
// (or without live data) that has no writes in flight. If the active segment is worth
// compacting it is sealed (rolled=true) so that the next pick can choose it.
func (s *Store) pickSegment() (best segment.Info, ok, rolled bool, err error) {
	bestRatio := -1.0
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	for _, in := range s.segs.Segments() {
		live := s.live[in.ID]
		if in.Active {
			// Garbage in the active segment is reclaimable once it is sealed.
			if in.Size >= s.cfg.SegmentSize/4 && float64(in.Size-live) >= s.cfg.CompactRatio*float64(in.Size) {
				if err := s.segs.Roll(); err != nil {
					return best, false, false, err
				}
				rolled = true
			}
			continue
		}
		if in.Pending > 0 {
			continue // records being written right now are not live yet, but will be
		}
		ratio := 1.0
		if in.Size > 0 {
			ratio = float64(in.Size-live) / float64(in.Size)
		}
		if (ratio >= s.cfg.CompactRatio || live == 0) && ratio > bestRatio {
			best, bestRatio = in, ratio
		}
	}
	return best, bestRatio >= 0, rolled, nil
}

type moved struct {
	id       segment.ID
	from, to segment.Loc
}

// compactSegment copies the live records of a sealed segment to the active one, re-points
// their index entries, waits for reads that may use the old locations, and removes the file.
// With reclaim, the segments that overwrites empty while the records are being moved are
// removed between groups of moves (reclaimEmpty).
func (s *Store) compactSegment(ctx context.Context, in segment.Info, reclaim bool) error {
	const op errors.Op = "store.compactSegment"
	start := time.Now()
	p := segPrefix(in.ID)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return errors.E(op, errors.IO, err)
	}
	type rec struct {
		id  segment.ID
		loc segment.Loc
	}
	var recs []rec
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		if len(v) != 20 || len(k) != len(p)+8 {
			it.Close()
			return errors.E(op, errors.Corrupt, "malformed segment index entry")
		}
		var r rec
		copy(r.id[:], v[:16])
		r.loc = segment.Loc{Seg: in.ID, Off: int64(beUint64(k[len(p):])), Len: beUint32(v[16:])}
		recs = append(recs, r)
	}
	if err := it.Close(); err != nil {
		return errors.E(op, errors.IO, err)
	}

	var bytesMoved int64
	var failed map[uint32]bool // reclaimEmpty: this segment, and those it could not reclaim
	bp := s.bufPool.Get().(*[]byte)
	defer s.bufPool.Put(bp)
	for len(recs) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Move in groups (16 MiB) so the index commit stays small and the segments emptied
		// meanwhile are not kept waiting.
		var group []moved
		var size int64
		for len(recs) > 0 && size < s.moveGroup {
			r := recs[0]
			recs = recs[1:]
			payload, err := s.segs.Read(r.loc, r.id, *bp)
			if err == nil {
				var to segment.Loc
				if len(payload) > 0 && &payload[0] == &(*bp)[segment.HeaderSize] {
					// Read left the whole record at the start of the pooled buffer.
					to, err = s.appendChunk(r.id, *bp, len(payload))
				} else {
					to, err = s.segs.Append(segment.KindChunk, r.id, payload)
				}
				if err == nil {
					group = append(group, moved{id: r.id, from: r.loc, to: to})
					size += int64(len(payload))
					continue
				}
			}
			// A corrupt live record must not be lost by removing its segment: stop here.
			for _, m := range group {
				s.segs.Done(m.to.Seg)
			}
			return errors.E(op, err)
		}
		if err := s.commitMoves(group); err != nil {
			return errors.E(op, err)
		}
		bytesMoved += size
		if reclaim && len(recs) > 0 {
			if failed == nil {
				failed = map[uint32]bool{in.ID: true}
			}
			if err := s.reclaimEmpty(ctx, failed); err != nil {
				return err
			}
		}
	}
	// Reads that took their snapshot before the moves may still use the old file.
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	err = s.readers.waitBefore(waitCtx, s.readers.mark())
	cancel()
	if err != nil {
		return errors.E(op, errors.Transient, err)
	}
	if err := s.segs.Remove(in.ID); err != nil {
		return errors.E(op, err)
	}
	s.liveMu.Lock()
	delete(s.live, in.ID)
	s.liveMu.Unlock()
	s.log.Info("compacted segment", "segment", in.ID, "size", in.Size, "live_moved", bytesMoved, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// reclaimEmpty removes every sealed segment other than skip that holds no live data and
// no records being written. Compaction calls it while it moves the live records of
// another segment: moving them can take seconds under a write load (each record read and
// written again beside the writes), and overwrites (a volume rewritten, objects replaced)
// empty whole segments meanwhile. Those cost nothing to reclaim, and their files become
// the spares new segments write into (segment.Config.Spares); left behind the move they
// kept the writes in new files (measured: 6-13 s without a spare in a 15 s phase of
// 1 MiB volume writes, docs/benchmarks.md).
//
// A segment it cannot reclaim (a record found live and unreadable, an I/O error) is kept,
// logged and added to skip, so it neither stops the move that called it nor is retried by
// it; only the context's end is returned.
func (s *Store) reclaimEmpty(ctx context.Context, skip map[uint32]bool) error {
	var empty []segment.Info
	s.liveMu.Lock()
	for _, in := range s.segs.Segments() {
		if !in.Active && !skip[in.ID] && in.Pending == 0 && s.live[in.ID] == 0 {
			empty = append(empty, in)
		}
	}
	s.liveMu.Unlock()
	for _, in := range empty {
		// The scan of its index entries, not the live count, decides: a record still
		// referenced is moved as in any compaction.
		if err := s.compactSegment(ctx, in, false); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.log.Warn("could not reclaim an empty segment during a compaction; keeping it", "segment", in.ID, "err", err)
			skip[in.ID] = true
		}
	}
	return nil
}

// commitMoves syncs the new copies and re-points the chunks that are still live at their old
// location; a chunk deleted meanwhile keeps its new copy as garbage.
func (s *Store) commitMoves(group []moved) error {
	defer func() {
		for _, m := range group {
			s.segs.Done(m.to.Seg)
		}
	}()
	seen := map[uint32]bool{}
	for _, m := range group {
		if !seen[m.to.Seg] {
			seen[m.to.Seg] = true
			if err := s.segs.Sync(m.to.Seg); err != nil {
				return err
			}
		}
	}
	s.relocMu.Lock()
	defer s.relocMu.Unlock()
	b := s.db.NewBatch()
	var done []moved
	for _, m := range group {
		cur, sums, err := s.chunkAt(s.db, m.id, nil)
		if errors.Is(errors.NotExist, err) {
			continue
		}
		if err != nil {
			b.Close()
			return err
		}
		if cur != m.from {
			continue
		}
		b.Set(chunkKey(m.id), encodeChunkAt(m.to, sums), nil) // the block checksums move with it
		b.Delete(segKey(m.from), nil)
		b.Set(segKey(m.to), segValue(m.id, m.to.Len), nil)
		done = append(done, m)
	}
	err := s.commit(b)
	s.extents.removeAll() // cached chunk locations may name the old ones
	if err != nil {
		return err
	}
	for _, m := range done {
		s.addLive(m.from, -1)
		s.addLive(m.to, 1)
	}
	return nil
}
