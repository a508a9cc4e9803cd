package store

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/errors"
)

// Last-access times (docs/design/tiering.md): Touch notes a read in memory, coarse to
// Config.AccessGranularity (an hour by default); FlushAccess writes what was noted since
// the last flush in one unsynced batch under A/<bucket>\x00<key> (the time, unix
// nanoseconds truncated to the granularity, 8 bytes big-endian). A key read many times
// in one period is written once per period: a set of 64-bit hashes of the keys written in
// the current period (at most accessSeenMax per shard, 2 M keys, about 40 MB; past that
// the set starts again and the next read of a key is written again; two keys of one hash
// share a write) answers most reads with one lookup, without an allocation. Times are
// hints: a crash loses those not flushed yet, and the entry of a deleted object stays (it
// is ignored: the tier pass looks times up for the objects it holds only).

// accessShards spread the lock over reads of different keys.
const accessShards = 32

// accessSeenMax bounds the keys one shard remembers as written in the current period.
const accessSeenMax = 1 << 16

type accessTracker struct {
	seed   maphash.Seed
	once   sync.Once
	shards [accessShards]accessShard
}

type accessShard struct {
	mu      sync.Mutex
	period  int64
	seen    map[uint64]struct{} // hashes of the keys written (or pending) in period
	pending []accessEntry
}

type accessEntry struct {
	bucket, key string
	t           int64
}

// AccessGranularity is how coarse the times of Touch are.
func (s *Store) AccessGranularity() time.Duration { return s.granularity() }

func (s *Store) granularity() time.Duration {
	if g := s.cfg.AccessGranularity; g > 0 {
		return g
	}
	return time.Hour
}

// Touch notes that bucket/key was read at now.
func (s *Store) Touch(bucket, key string, now time.Time) {
	a := &s.access
	a.once.Do(func() { a.seed = maphash.MakeSeed() })
	g := s.granularity()
	t := now.UnixNano() / int64(g) * int64(g)
	h := maphash.String(a.seed, key) ^ maphash.String(a.seed, bucket)*0x9e3779b97f4a7c15
	sh := &a.shards[h%accessShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.period != t || len(sh.seen) >= accessSeenMax {
		sh.period, sh.seen = t, nil
	}
	if _, ok := sh.seen[h]; ok {
		return
	}
	if sh.seen == nil {
		sh.seen = make(map[uint64]struct{}, 1024)
	}
	sh.seen[h] = struct{}{}
	sh.pending = append(sh.pending, accessEntry{bucket, key, t})
}

func accessKey(bucket, key string) []byte {
	k := make([]byte, 0, len(pfxAccess)+len(bucket)+1+len(key))
	k = append(append(append(k, pfxAccess...), bucket...), 0)
	return append(k, key...)
}

// FlushAccess writes the access times noted since the last flush, in one batch, and
// returns how many.
func (s *Store) FlushAccess() (int, error) {
	b := s.db.NewBatch()
	defer b.Close()
	n := 0
	var v [8]byte
	for i := range s.access.shards {
		sh := &s.access.shards[i]
		sh.mu.Lock()
		pend := sh.pending
		sh.pending = nil
		sh.mu.Unlock()
		for _, e := range pend {
			binary.BigEndian.PutUint64(v[:], uint64(e.t))
			b.Set(accessKey(e.bucket, e.key), v[:], nil)
			n++
		}
	}
	if n == 0 {
		return 0, nil
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return 0, errors.E(errors.Op("store.FlushAccess"), errors.IO, err)
	}
	return n, nil
}

// AccessTimes returns the last-access times of bucket's objects that were read since
// tracking began (unix nanoseconds, truncated to the granularity), by key.
func (s *Store) AccessTimes(bucket string) (map[string]int64, error) {
	const op errors.Op = "store.AccessTimes"
	lo := accessKey(bucket, "")
	hi := append([]byte(pfxAccess), bucket...)
	hi = append(hi, 1)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	defer it.Close()
	out := map[string]int64{}
	for it.First(); it.Valid(); it.Next() {
		if v := it.Value(); len(v) == 8 {
			out[string(it.Key()[len(lo):])] = int64(binary.BigEndian.Uint64(v))
		}
	}
	if err := it.Error(); err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	return out, nil
}
