package store

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// diskUsageFS is the operating system's file system reporting the free space a test
// sets, counting how often it is asked.
type diskUsageFS struct {
	vfs.FS
	free, calls atomic.Int64
}

func (f *diskUsageFS) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	f.calls.Add(1)
	return vfs.DiskUsage{AvailBytes: uint64(f.free.Load()), TotalBytes: 1 << 40}, nil
}

// Far from the reserve, writes share one statfs for a while; near it, each write asks
// the filesystem, so a full disk refuses at once and space freed is seen at once.
func TestCheckSpaceStatfs(t *testing.T) {
	fs := &diskUsageFS{FS: vfs.Default}
	fs.free.Store(1 << 40)
	cfg := testConfig(t)
	cfg.FS, cfg.Reserve = fs, 1<<20
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check := func(step string, n int64, wantCalls int64, wantFull bool) {
		t.Helper()
		before := fs.calls.Load()
		err := s.checkSpace(n)
		if got := fs.calls.Load() - before; got != wantCalls {
			t.Errorf("%s: %d statfs calls, want %d", step, got, wantCalls)
		}
		if full := errors.Is(errors.NoSpace, err); full != wantFull || (err != nil && !full) {
			t.Errorf("%s: %v, want full %v", step, err, wantFull)
		}
	}
	s.space.at = time.Time{} // whatever Open wrote
	check("first write", 4096, 1, false)
	check("second write, far from the reserve", 4096, 0, false)
	check("third write", 4096, 0, false)
	s.space.at = time.Now().Add(-spaceCacheAge) // the last statfs is too old
	check("after the cache's age", 4096, 1, false)

	fs.free.Store(cfg.Reserve + spaceCacheMargin/2) // near the reserve: always asked
	s.space.at = time.Time{}
	check("near the reserve", 4096, 1, false)
	check("near the reserve, again", 4096, 1, false)
	fs.free.Store(cfg.Reserve + 1000)
	check("full", 4096, 1, true)
	fs.free.Store(1 << 40) // space freed
	check("after space was freed", 4096, 1, false)
	check("and then", 4096, 0, false)
	check("a write that would cross the margin", 1<<40-cfg.Reserve-spaceCacheMargin, 1, false)
}
