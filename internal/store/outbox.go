package store

import (
	"encoding/binary"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// The outbox: entries that Config.Outbox makes for a committed change, written in the
// same synced batch as the change's record, so that an entry exists exactly when its
// change committed and survives whatever the record survives. Keys are Q/<seq> (pending)
// and L/<seq> (dead letters), seq a big-endian uint64 that grows with every entry this
// store writes; the values are the caller's (package notify's entries). Entries of one key
// are written under the key's lock, so their seqs are in commit order; entries of
// different keys may commit out of seq order (a scan can find a lower seq later).
//
// With the entries of a change goes a held mark, H/<bucket>\x00<key>\x00<hlc>, valued with
// the time it was written, the first seq and the count of the change's entries: the other
// holders of the key ask the one that sends its events whether it wrote them and sent them
// (OutboxHeld) before they drop their own copies. The marks are removed once older than
// what the deliverer keeps them for (PurgeHeld).
const (
	pfxOutbox = "Q/"
	pfxDead   = "L/"
	pfxHeld   = "H/"
)

func heldKey(bucket, key string, hlc uint64) []byte {
	b := make([]byte, 0, len(pfxHeld)+len(bucket)+len(key)+10)
	b = append(b, pfxHeld...)
	b = append(b, bucket...)
	b = append(b, 0)
	b = append(b, key...)
	b = append(b, 0)
	return binary.BigEndian.AppendUint64(b, hlc)
}

func outboxKey(pfx string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte(pfx), seq)
}

// stacking is the outbox entries of one change between stack and stacked.
type stacking struct {
	n     int64
	first uint64 // the first seq (0: none)
}

// stack adds the outbox entries of o (committed as bucket/key) to b. The caller commits b
// and then calls stacked with the result, whatever it is.
func (s *Store) stack(b *pebble.Batch, bucket, key string, o *object.Object) stacking {
	return s.stackWith(s.cfg.Outbox, b, bucket, key, o)
}

// stackMeta is stack for an in-place metadata change (Config.OutboxMeta).
func (s *Store) stackMeta(b *pebble.Batch, bucket, key string, o *object.Object) stacking {
	return s.stackWith(s.cfg.OutboxMeta, b, bucket, key, o)
}

func (s *Store) stackWith(entries func(bucket, key string, o *object.Object) [][]byte, b *pebble.Batch, bucket, key string, o *object.Object) stacking {
	if entries == nil || Internal(bucket) {
		return stacking{}
	}
	es := entries(bucket, key, o)
	if len(es) == 0 {
		return stacking{}
	}
	s.outMu.Lock()
	first := s.outSeq.Load() + 1
	s.outSeq.Add(uint64(len(es)))
	if s.outInflight == nil {
		s.outInflight = map[uint64]bool{}
	}
	s.outInflight[first] = true
	s.outMu.Unlock()
	for i, e := range es {
		b.Set(outboxKey(pfxOutbox, first+uint64(i)), e, nil)
	}
	mark := binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano()))
	mark = binary.BigEndian.AppendUint64(mark, first)
	mark = binary.BigEndian.AppendUint32(mark, uint32(len(es)))
	b.Set(heldKey(bucket, key, o.HLC), mark, nil)
	return stacking{n: int64(len(es)), first: first}
}

// stacked ends a stack: the entries are committed (ok) or will never be.
func (s *Store) stacked(st stacking, ok bool) {
	if st.n == 0 {
		return
	}
	s.outMu.Lock()
	delete(s.outInflight, st.first)
	s.outMu.Unlock()
	if !ok {
		return
	}
	s.outPending.Add(st.n)
	if s.cfg.OnOutbox != nil {
		s.cfg.OnOutbox()
	}
}

// OutboxFloor returns a seq below which no entry can appear any more: every entry with a
// lower seq is committed (a scan sees it) or never will be. A deliverer that has seen
// every pending entry below it need not scan that part again.
func (s *Store) OutboxFloor() uint64 {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	floor := s.outSeq.Load() + 1
	for f := range s.outInflight {
		floor = min(floor, f)
	}
	return floor
}

// openOutbox finds the last seq used and counts the entries (at open).
func (s *Store) openOutbox() error {
	var last uint64
	for _, pfx := range []string{pfxOutbox, pfxDead} {
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfx), UpperBound: prefixEnd([]byte(pfx))})
		if err != nil {
			return errors.E(errors.IO, err)
		}
		var n int64
		for ok := it.First(); ok; ok = it.Next() {
			n++
		}
		if it.Last() && len(it.Key()) == len(pfx)+8 {
			last = max(last, binary.BigEndian.Uint64(it.Key()[len(pfx):]))
		}
		if err := it.Close(); err != nil {
			return errors.E(errors.IO, err)
		}
		if pfx == pfxOutbox {
			s.outPending.Store(n)
		} else {
			s.outDead.Store(n)
		}
	}
	s.outSeq.Store(last)
	return nil
}

// ScanOutbox calls fn with the pending outbox entries from seq from on, in seq order,
// until fn returns false. The entry's bytes are valid only during the call.
func (s *Store) ScanOutbox(from uint64, fn func(seq uint64, entry []byte) bool) error {
	const op errors.Op = "store.ScanOutbox"
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: outboxKey(pfxOutbox, from), UpperBound: prefixEnd([]byte(pfxOutbox))})
	if err != nil {
		return errors.E(op, errors.IO, err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != len(pfxOutbox)+8 {
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return errors.E(op, errors.IO, err)
		}
		if !fn(binary.BigEndian.Uint64(k[len(pfxOutbox):]), v) {
			break
		}
	}
	if err := it.Close(); err != nil {
		return errors.E(op, errors.IO, err)
	}
	return nil
}

// DoneOutbox removes delivered entries, which must be pending (it does not look: the
// pending count goes down by len(seqs)). The removal is not synced: one lost in a crash
// leaves the entry to be sent again (at least once), never a change without its entry.
func (s *Store) DoneOutbox(seqs []uint64) error {
	return s.moveOutbox(errors.Op("store.DoneOutbox"), seqs, false)
}

// DeadOutbox moves entries to the dead letters (kept, counted, not sent), synced.
func (s *Store) DeadOutbox(seqs []uint64) error {
	return s.moveOutbox(errors.Op("store.DeadOutbox"), seqs, true)
}

func (s *Store) moveOutbox(op errors.Op, seqs []uint64, dead bool) error {
	if len(seqs) == 0 {
		return nil
	}
	if s.closed.Load() {
		return errors.E(op, errors.Transient, "store is closed")
	}
	b := s.db.NewBatch()
	defer b.Close()
	var n int64
	for _, seq := range seqs {
		k := outboxKey(pfxOutbox, seq)
		if dead {
			v, closer, err := s.db.Get(k)
			if err == pebble.ErrNotFound {
				continue
			}
			if err != nil {
				return errors.E(op, errors.IO, err)
			}
			b.Set(outboxKey(pfxDead, seq), v, nil)
			closer.Close()
		}
		b.Delete(k, nil)
		n++
	}
	wo := pebble.NoSync
	if dead {
		wo = pebble.Sync
	}
	if err := b.Commit(wo); err != nil {
		return errors.E(op, errors.IO, err)
	}
	// A deliverer may remove entries before their writer has counted them (they are
	// visible from the commit on): the count can be below zero for that moment.
	s.outPending.Add(-n)
	if dead {
		s.outDead.Add(n)
	}
	return nil
}

// OutboxLen returns the number of pending entries and of dead letters.
func (s *Store) OutboxLen() (pending, dead int64) {
	return max(s.outPending.Load(), 0), s.outDead.Load()
}

// OutboxHeld reports whether this store wrote outbox entries for version hlc of
// bucket/key (and has not purged its mark yet), and whether they are all sent (or dead
// letters) since.
func (s *Store) OutboxHeld(bucket, key string, hlc uint64) (held, sent bool, err error) {
	const op errors.Op = "store.OutboxHeld"
	v, closer, err := s.db.Get(heldKey(bucket, key, hlc))
	if err == pebble.ErrNotFound {
		return false, false, nil
	}
	if err != nil {
		return false, false, errors.E(op, errors.IO, err)
	}
	if len(v) != 20 {
		closer.Close()
		return false, false, errors.E(op, errors.Corrupt, "malformed outbox mark")
	}
	first, n := binary.BigEndian.Uint64(v[8:]), binary.BigEndian.Uint32(v[16:])
	closer.Close()
	for i := uint64(0); i < uint64(n); i++ {
		_, c, err := s.db.Get(outboxKey(pfxOutbox, first+i))
		if err == nil {
			c.Close()
			return true, false, nil // still pending
		}
		if err != pebble.ErrNotFound {
			return false, false, errors.E(op, errors.IO, err)
		}
	}
	return true, true, nil
}

// PurgeHeld removes the held marks written before t, unsynced, and returns how many.
func (s *Store) PurgeHeld(t time.Time) (int, error) {
	const op errors.Op = "store.PurgeHeld"
	if s.closed.Load() {
		return 0, errors.E(op, errors.Transient, "store is closed")
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxHeld), UpperBound: prefixEnd([]byte(pfxHeld))})
	if err != nil {
		return 0, errors.E(op, errors.IO, err)
	}
	b := s.db.NewBatch()
	defer b.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return 0, errors.E(op, errors.IO, err)
		}
		if len(v) >= 8 && int64(binary.BigEndian.Uint64(v)) < t.UnixNano() {
			b.Delete(it.Key(), nil)
			n++
		}
	}
	if err := it.Close(); err != nil {
		return 0, errors.E(op, errors.IO, err)
	}
	if n == 0 {
		return 0, nil
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return 0, errors.E(op, errors.IO, err)
	}
	return n, nil
}
