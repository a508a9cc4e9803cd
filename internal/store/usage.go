package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"maps"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/object"
)

// Usage is what one bucket holds in this store: its current objects (records that are not
// tombstones) and the sum of their sizes (an object's size as S3 reports it, whatever its
// layout: the record of an erasure-coded object counts its full size here, its shards
// elsewhere are not counted). Uploads in progress are not counted.
type Usage struct {
	Objects int64 `json:"objects"`
	Bytes   int64 `json:"bytes"`
	// Noncurrent and NoncurrentBytes count the versions of versioned keys that are not
	// current (delete markers left out): they take space too.
	Noncurrent      int64 `json:"noncurrent,omitempty"`
	NoncurrentBytes int64 `json:"noncurrent_bytes,omitempty"`
}

// Usage returns the usage of every bucket of this store that holds or held objects since
// it was opened (internal buckets excluded). It costs a copy of a map of one entry per
// bucket: the figures are kept up to date by every commit that changes a current record
// (a put, a delete, a completed upload, a hand-off), and the index is counted once, in the
// background, when the store is opened: until that is done (UsageComplete) they hold only
// the changes since.
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

// countUsage counts every bucket's current objects in it, an iterator over the object
// records of the index as it was at open, and adds the counts to the changes made since:
// one pass, in the background. Only each record's fixed header (version, flags, id,
// size) is read, not decoded, but records with embedded bodies are read whole. A damaged
// index (or one that cannot be read, or a close before the end) stops the count where it
// is and leaves the usage incomplete (UsageComplete); the store works on regardless.
func (s *Store) countUsage(ctx context.Context, it, versIt *pebble.Iterator) {
	defer it.Close()
	defer versIt.Close()
	start := time.Now()
	counts := map[string]Usage{}
	var bucket []byte
	var u Usage
	flush := func() {
		if len(bucket) > 0 && !Internal(string(bucket)) && u != (Usage{}) {
			counts[string(bucket)] = u
		}
	}
	malformed, records := 0, 0
	for ok := it.First(); ok; ok = it.Next() {
		if records++; records%4096 == 0 && ctx.Err() != nil {
			s.usageIncomplete.Store(true)
			return
		}
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
	// Noncurrent versions: V/<bucket>\x00<key>\x00<8 bytes>. The newest version a V/ key
	// names bounds them (versionBound), once every key is read.
	var vmax uint64
	for ok := versIt.First(); ok && it.Error() == nil; ok = versIt.Next() {
		if records++; records%4096 == 0 && ctx.Err() != nil {
			s.usageIncomplete.Store(true)
			return
		}
		k := versIt.Key()[len(pfxVersion):]
		if h, ok := keyVersion(k); ok && h > vmax {
			vmax = h
		}
		i := bytes.IndexByte(k, 0)
		v, err := versIt.ValueAndErr() // in a blob file, maybe: a failed read ends the loop
		if err != nil {
			break
		}
		size, live, ok := recordSize(v)
		if i < 0 || !ok {
			malformed++
			continue
		}
		if live && !Internal(string(k[:i])) {
			c := counts[string(k[:i])]
			c.Noncurrent++
			c.NoncurrentBytes += size
			counts[string(k[:i])] = c
		}
	}
	if err := versIt.Error(); err != nil && it.Error() == nil {
		s.valueErr(err) // a damaged blob file is noted
		s.usageIncomplete.Store(true)
		s.log.Warn("the index of noncurrent versions could not be read in full", "err", firstLine(err.Error()))
	}
	if it.Error() == nil && versIt.Error() == nil {
		s.vbound.raise(vmax)
		s.vbound.known.Store(true)
	}
	if err := it.Error(); err != nil {
		s.usageIncomplete.Store(true)
		s.log.Warn("the index could not be read in full: the buckets' object counts leave out what lies beyond the damage", "err", firstLine(err.Error()))
	} else if malformed > 0 {
		s.usageIncomplete.Store(true)
		s.log.Warn("malformed object records in the index: left out of the buckets' object counts", "records", malformed)
	}
	s.usageMu.Lock()
	for b, c := range counts {
		if s.dropped[b] {
			continue
		}
		d := s.usage[b]
		s.usage[b] = Usage{Objects: d.Objects + c.Objects, Bytes: d.Bytes + c.Bytes,
			Noncurrent: d.Noncurrent + c.Noncurrent, NoncurrentBytes: d.NoncurrentBytes + c.NoncurrentBytes}
	}
	s.counted, s.dropped = true, nil
	s.usageMu.Unlock()
	s.log.Info("counted the buckets' objects in the index", "records", records, "took", time.Since(start).Round(time.Millisecond))
}

// UsageComplete reports whether Usage counts every record: false while the count of the
// index at open runs, and for good if it met a damaged or malformed part of the index.
func (s *Store) UsageComplete() bool {
	s.usageMu.Lock()
	defer s.usageMu.Unlock()
	return s.counted && !s.usageIncomplete.Load()
}

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
