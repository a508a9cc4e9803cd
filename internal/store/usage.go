package store

import (
	"bytes"
	"encoding/binary"
	"maps"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// Usage is what one bucket holds in this store: its current objects (records that are not
// tombstones) and the sum of their sizes (an object's size as S3 reports it, whatever its
// layout: the record of an erasure-coded object counts its full size here, its shards
// elsewhere are not counted). Uploads in progress are not counted.
type Usage struct {
	Objects int64 `json:"objects"`
	Bytes   int64 `json:"bytes"`
}

// Usage returns the usage of every bucket of this store that holds or held objects since
// it was opened (internal buckets excluded). It costs a copy of a map of one entry per
// bucket: the figures are kept up to date by every commit that changes a current record
// (a put, a delete, a completed upload, a hand-off), and counted once from the index when
// the store is opened.
func (s *Store) Usage() map[string]Usage {
	s.usageMu.Lock()
	defer s.usageMu.Unlock()
	return maps.Clone(s.usage)
}

// count adjusts bucket's usage after a committed change of one key's record from old to
// cur (either nil: no record; tombstones count as no object).
func (s *Store) count(bucket string, old, cur *object.Object) {
	if Internal(bucket) {
		return
	}
	var d Usage
	if old != nil && !old.Deleted {
		d.Objects--
		d.Bytes -= old.Size
	}
	if cur != nil && !cur.Deleted {
		d.Objects++
		d.Bytes += cur.Size
	}
	if d == (Usage{}) {
		return
	}
	s.usageMu.Lock()
	u := s.usage[bucket]
	u.Objects += d.Objects
	u.Bytes += d.Bytes
	s.usage[bucket] = u
	s.usageMu.Unlock()
}

// countUsage counts every bucket's current objects from the index: one pass over the
// object records at open. Only each record's fixed header (version, flags, id, size) is
// read, not decoded; embedded bodies are read from disk with their records. A damaged
// index does not keep the store from opening (its readable records are served, see
// Damaged): the count stops at the damage and is marked incomplete (UsageComplete).
func (s *Store) countUsage() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxObject), UpperBound: prefixEnd([]byte(pfxObject))})
	if err != nil {
		return errors.E(errors.IO, err)
	}
	defer it.Close()
	var bucket []byte
	var u Usage
	flush := func() {
		if len(bucket) > 0 && !Internal(string(bucket)) && u != (Usage{}) {
			s.usage[string(bucket)] = u
		}
	}
	malformed := 0
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()[len(pfxObject):]
		i := bytes.IndexByte(k, 0)
		size, live, ok := recordSize(it.Value())
		if i < 0 || !ok {
			malformed++
			continue
		}
		if !bytes.Equal(k[:i], bucket) {
			flush()
			bucket, u = append(bucket[:0], k[:i]...), Usage{}
		}
		if live {
			u.Objects++
			u.Bytes += size
		}
	}
	flush()
	err = it.Error()
	switch {
	case err != nil && pebble.IsCorruptionError(err):
		s.usageIncomplete.Store(true)
		s.log.Warn("the index is damaged: the buckets' object counts leave out what lies beyond the damage", "err", firstLine(err.Error()))
	case err != nil:
		return errors.E(errors.IO, err)
	case malformed > 0:
		s.usageIncomplete.Store(true)
		s.log.Warn("malformed object records in the index: left out of the buckets' object counts", "records", malformed)
	}
	return nil
}

// UsageComplete reports whether Usage counts every record: false if the count at open
// met a damaged or malformed part of the index.
func (s *Store) UsageComplete() bool { return !s.usageIncomplete.Load() }

// recordSize reads an encoded record's size and whether it is an object (not a tombstone)
// from the header every record version shares: version, flags, 16-byte id, size.
func recordSize(v []byte) (size int64, live, ok bool) {
	if len(v) < 18 {
		return 0, false, false
	}
	size, n := binary.Varint(v[18:])
	if n <= 0 {
		return 0, false, false
	}
	return size, !isTombstone(v), true
}
