package store

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
	"sync/atomic"
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
// share a write), under a shard lock, says whether a key was noted. In front of it a
// small table of marks (a key's hash mixed with the period; accessCacheSlots slots,
// 1 MB, two-way set-associative) answers a read of a key noted in the period with at
// most two atomic loads, without the lock: the keys read often stay in it, the others
// (a set's third key, a key not read since its set moved on) take the lock and the hash
// set's answer, as before; a key is put in the cache when it is noted, and again one
// time in accessAdmit that the hash set answers for it (so a scan of more keys than the
// cache holds does not rewrite it at every read). Times are hints: a crash loses those not flushed yet, and the
// entry of a deleted object stays (it is ignored: the tier pass looks times up for the
// objects it holds only).

// accessShards spread the lock over reads of different keys.
const accessShards = 32

// accessSeenMax bounds the keys one shard remembers as written in the current period.
const accessSeenMax = 1 << 16

// accessCacheSlots is the size of the table of marks (a power of 2; 8 bytes a slot).
const accessCacheSlots = 1 << 15

// accessAdmit: a key noted already but missing from the cache is put in it once in
// accessAdmit such reads (per shard).
const accessAdmit = 8

type accessTracker struct {
	seed  maphash.Seed
	once  sync.Once
	start time.Time // the first use: TouchNow's times are start plus the monotonic time since
	// cache holds the marks (accessMark) of keys noted: a key's set is the slots b and
	// b+1, b = (mark>>1) & (accessCacheSlots-1) &^ 1; 0 is an empty slot.
	cache  []atomic.Uint64
	shards [accessShards]accessShard
}

type accessShard struct {
	mu      sync.Mutex
	period  int64
	seen    map[uint64]struct{} // hashes of the keys written (or pending) in period
	pending []accessEntry
	admit   uint8 // reads of noted keys missing from the cache (accessAdmit)
}

type accessEntry struct {
	bucket, key string
	t           int64
}

// accessMark is what the cache holds for a key of hash h noted in period t: never 0.
func accessMark(h uint64, t int64) uint64 { return (h ^ uint64(t)*0x9e3779b97f4a7c15) | 1 }

// AccessGranularity is how coarse the times of Touch are.
func (s *Store) AccessGranularity() time.Duration { return s.granularity() }

func (s *Store) granularity() time.Duration {
	if g := s.cfg.AccessGranularity; g > 0 {
		return g
	}
	return time.Hour
}

// cache1 puts mark in its set b: the newest mark in slot b, the one it replaces moved to
// b+1 (two keys of one set read in turn both stay), the older one there forgotten (the
// hash set still has it). A mark lost to a concurrent cache1 of the set costs one more
// look in the hash set.
func (a *accessTracker) cache1(b, mark uint64) {
	if prev := a.cache[b].Swap(mark); prev != mark {
		a.cache[b+1].Store(prev)
	}
}

func (a *accessTracker) init() {
	a.once.Do(func() {
		a.seed, a.start = maphash.MakeSeed(), time.Now()
		a.cache = make([]atomic.Uint64, accessCacheSlots)
	})
}

// TouchNow notes that bucket/key was read now, as Touch, with the time taken from the
// monotonic clock since the tracker's first use (cheaper than the wall clock's time.Now;
// a step of the wall clock after that is not followed: the times are hints).
func (s *Store) TouchNow(bucket, key string) {
	a := &s.access
	a.init()
	s.touch(bucket, key, a.start.UnixNano()+int64(time.Since(a.start)))
}

// Touch notes that bucket/key was read at now.
func (s *Store) Touch(bucket, key string, now time.Time) {
	s.access.init()
	s.touch(bucket, key, now.UnixNano())
}

func (s *Store) touch(bucket, key string, now int64) {
	a := &s.access
	g := int64(s.granularity())
	t := now / g * g
	h := maphash.String(a.seed, key) ^ maphash.String(a.seed, bucket)*0x9e3779b97f4a7c15
	mark := accessMark(h, t)
	b := (mark >> 1) & (accessCacheSlots - 1) &^ 1
	if a.cache[b].Load() == mark || a.cache[b+1].Load() == mark {
		return // noted in this period already: the common case for a key read often
	}
	sh := &a.shards[h%accessShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.period != t || len(sh.seen) >= accessSeenMax {
		sh.period, sh.seen = t, nil
	}
	if _, ok := sh.seen[h]; ok {
		// Noted, but not in the cache: cached again one time in accessAdmit, so that
		// more keys read in turn than the cache holds do not rewrite it on every read.
		if sh.admit++; sh.admit%accessAdmit == 0 {
			a.cache1(b, mark)
		}
		return
	}
	a.cache1(b, mark)
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

// AccessTime returns the last-access time of bucket/key as last flushed (unix
// nanoseconds, truncated to the granularity); false if it was never read since tracking
// began, or cannot be read (the times are hints).
func (s *Store) AccessTime(bucket, key string) (int64, bool) {
	v, closer, err := s.db.Get(accessKey(bucket, key))
	if err != nil {
		return 0, false
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
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
