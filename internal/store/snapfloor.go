package store

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// snapFloor keeps one index snapshot open, replaced when older than snapFloorAge, so that
// a reader's snapshot is never the index's earliest. Closing the earliest snapshot makes
// pebble look for a compaction to schedule (the obsolete keys it pinned may be droppable),
// under the database's mutex: with one read at a time that was every read's Close, 14 %
// of the CPU of a volume's 4 KiB read in the store (BenchmarkMutableRead4K,
// docs/benchmarks.md). With the floor, that look happens once per replacement. The cost
// is that compactions keep, for at most about snapFloorAge, the versions of keys the floor
// still sees (at most one extra version of a key); an idle floor is closed after
// 2 x snapFloorAge, so that nothing stays pinned when reads stop.
type snapFloor struct {
	mu     sync.Mutex
	snap   *pebble.Snapshot
	taken  time.Time
	closed bool
}

const snapFloorAge = time.Second

// snapshot returns a new snapshot of the index, first renewing the floor beneath it if the
// floor is missing or old.
func (s *Store) snapshot() *pebble.Snapshot {
	f := &s.floor
	f.mu.Lock()
	if !f.closed && (f.snap == nil || time.Since(f.taken) > snapFloorAge) {
		old := f.snap
		f.snap, f.taken = s.db.NewSnapshot(), time.Now()
		if old != nil {
			old.Close()
		} else {
			time.AfterFunc(2*snapFloorAge, s.expireFloor)
		}
	}
	f.mu.Unlock()
	return s.db.NewSnapshot()
}

// expireFloor closes the floor if no reader renewed it for snapFloorAge, else checks again
// later.
func (s *Store) expireFloor() {
	f := &s.floor
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.snap == nil {
		return
	}
	if age := time.Since(f.taken); age < 2*snapFloorAge {
		time.AfterFunc(2*snapFloorAge-age, s.expireFloor)
		return
	}
	f.snap.Close()
	f.snap = nil
}

// closeFloor closes the floor for good (the index is closing).
func (s *Store) closeFloor() {
	f := &s.floor
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	if f.snap != nil {
		f.snap.Close()
		f.snap = nil
	}
}
