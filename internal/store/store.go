// Package store is the storage-node engine: buckets, object records and multipart uploads
// kept in an embedded ordered key-value store (pebble), small bodies inline in it, larger
// bodies as checksummed chunks in append-only segment files (package segment).
//
// Every mutation is acknowledged only after it is durable: chunk records are synced with a
// group fdatasync before the index batch that references them is committed, and index
// batches are committed with a synced write-ahead log by a single committer that groups
// concurrent commits. Store knows nothing of HTTP or S3 wire formats; package s3api does.
// The design and on-disk format are in docs/design/20261122_storage_engine.md.
//
// Every file, the index's and the segments', lives in one file system, Config.FS (the
// operating system's by default). TestPowerCut keeps a store in pebble's crashable memory
// file system and checks what survives power cuts at random instants; TestFormatV1 reads
// data written by the first on-disk format (testdata/format-v1).
package store

import (
	"context"
	"crypto/rand"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/hlc"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store/segment"
)

// Config configures a Store. Zero values mean the documented defaults.
type Config struct {
	// Dir is the data directory. Required.
	Dir string
	// InlineMax is the largest body stored inline in the index (default 128 KiB).
	InlineMax int
	// ChunkSize is the size of the chunks larger bodies are cut into (default 4 MiB).
	ChunkSize int
	// SegmentSize is the size at which a segment file is sealed (default 256 MiB).
	SegmentSize int64
	// Reserve is the free space kept on the data disk for compaction and the index: writes
	// that would leave less are refused with NoSpace (default 2*SegmentSize + 64 MiB).
	Reserve int64
	// CacheSize is the index block cache (default 64 MiB).
	CacheSize int64
	// CompactRatio is the garbage share at which a sealed segment is compacted (default 0.5).
	CompactRatio float64
	// CompactInterval is how often compaction looks for work (default 30s).
	CompactInterval time.Duration
	// SegmentSpares is how many segment files compaction empties are kept, renamed, for new
	// segments to reuse (their writes then overwrite allocated blocks: no block allocation,
	// no filesystem journal commit at fdatasync; segment.Config.Spares). With any, compaction
	// also looks for work whenever a segment is sealed, so that files come back as spares
	// about as fast as segments fill, and a write that would leave less than Reserve free
	// drops the spares first. Zero keeps none (cmd/cairn's default is 8).
	SegmentSpares int
	// AccessGranularity is how coarse the last-access times of Touch are (default an
	// hour; access.go).
	AccessGranularity time.Duration
	// Logger receives events. Nil means slog.Default().
	Logger *slog.Logger
	// OnCommit, if set, is called with the number of batches in each synced index commit.
	OnCommit func(batches int)
	// OnSegmentSync, if set, is called with the number of writers served by each segment sync.
	OnSegmentSync func(writers int)
	// Changing, if set, is called first by every call that may change a key's records
	// (an object's write, delete, tombstone, purge, in-place metadata change, completion,
	// hand-off), with no lock of the store held, and the function it returns when that
	// call returns: a node's read leases on the key are revoked there before the change
	// is committed, and none granted until it is done (replica.ReadLeases.Changing). It
	// may block.
	Changing func(bucket, key string) (done func())
	// FreeSpace, if set, replaces statfs for the free-space check (tests of disk-full paths
	// use a real small filesystem instead where they can).
	FreeSpace func() (int64, error)
	// Clock assigns HLC versions to writes that do not bring their own (nil: a private
	// clock). A node shares one clock between its store and its gateway.
	Clock *hlc.Clock
	// Now is the wall clock Object Lock retentions are compared with (nil: time.Now);
	// tests move time with it.
	Now func() time.Time
	// FS holds every file of the store, the index's and the segments' (nil: the operating
	// system's, with direct I/O for large chunks). Tests pass a crashable memory file
	// system (vfs.NewCrashableMem) to cut power at any instant. A file system that does
	// not report its free space (vfs.MemFS) is taken to have unlimited space.
	FS vfs.FS
	// Outbox, if set, returns the outbox entries of a change just made to bucket/key
	// (o is the record committed: an object, a tombstone, a delete marker or a purge);
	// they are written in the change's own synced batch (outbox.go). Package notify's
	// Stacker provides it. It is called under the key's lock: it must be quick.
	Outbox func(bucket, key string, o *object.Object) [][]byte
	// OutboxMeta, if set, returns the outbox entries of an in-place metadata change of
	// bucket/key (o is the record as committed with it: tags, retention, hold, ACL),
	// written in its batch as Outbox's are.
	OutboxMeta func(bucket, key string, o *object.Object) [][]byte
	// OnOutbox, if set, is called after a commit that wrote outbox entries.
	OnOutbox func()
	// JournalSize bounds the volume journal (journal.go): the bytes of unsynced range
	// writes taken and not applied to the index yet. A write that would pass it waits
	// for the applier (default 256 MiB; negative: no journal, every write is synced).
	JournalSize int64

	// legacyIndex opens the index as builds before value separation did (pebble's oldest
	// format, every value in its table): tests write an index of that layout with it.
	legacyIndex bool
}

func (c *Config) setDefaults() {
	if c.InlineMax <= 0 {
		c.InlineMax = 128 << 10
	}
	if c.ChunkSize <= 0 {
		c.ChunkSize = 4 << 20
	}
	if c.SegmentSize <= 0 {
		c.SegmentSize = 256 << 20
	}
	if c.Reserve <= 0 {
		c.Reserve = 2*c.SegmentSize + 64<<20
	}
	if c.CacheSize <= 0 {
		c.CacheSize = 64 << 20
	}
	if c.CompactRatio <= 0 {
		c.CompactRatio = 0.5
	}
	if c.CompactInterval <= 0 {
		c.CompactInterval = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.JournalSize == 0 {
		c.JournalSize = 256 << 20
	}
}

// Validate reports whether the configuration is usable.
func (c *Config) Validate() error {
	if c.Dir == "" {
		return errors.E(errors.Invalid, "store: no data directory")
	}
	if c.ChunkSize > segment.MaxPayload {
		return errors.Errorf("", errors.Invalid, "store: chunk size %d over %d", c.ChunkSize, segment.MaxPayload)
	}
	if c.InlineMax > c.ChunkSize {
		return errors.E(errors.Invalid, "store: inline max larger than chunk size")
	}
	return nil
}

// Store is a single node's object store. Its methods are safe for concurrent use.
type Store struct {
	damage *damage
	cfg    Config
	fs     vfs.FS
	log    *slog.Logger
	db     *pebble.DB
	segs   *segment.Set

	commitCh chan *commitReq
	wg       sync.WaitGroup
	closed   atomic.Bool
	closeMu  sync.RWMutex // commits hold R from their check of closed to their send; Close holds W to set closed

	access accessTracker // last-access times, batched (access.go)

	keyLocks    [512]sync.Mutex // serialise read-modify-write of one object's record
	bucketMu    sync.RWMutex    // object writes hold R; bucket create/delete hold W
	relocMu     sync.RWMutex    // chunk-reference deletes hold R; compaction's commit holds W
	readers     readerTracker
	floor       snapFloor    // a snapshot beneath the readers' (snapfloor.go)
	extents     *extentCache // mutable objects' extent maps, for reads (extcache.go)
	extMaps     *extentMaps  // mutable objects' extent layouts, for writes (extmap.go)
	compactMu   sync.Mutex   // one compaction at a time
	compactStop context.CancelFunc
	compactDone chan struct{} // closed when the compaction loop has returned
	sealed      chan struct{} // a segment was sealed: compaction looks for work (SegmentSpares)

	liveMu sync.Mutex
	live   map[uint32]int64 // live bytes per segment (derived from the index at start)

	vmu      sync.Mutex
	vbuckets map[string]bool // buckets with noncurrent records (versions.go)
	vbound   versionBound    // bounds the versions of the V/ records (versions.go)

	buckets bucketCache // bucket records and configurations (bucketcache.go)

	usageMu sync.Mutex
	usage   map[string]Usage // current objects per bucket: the changes since open, plus the count once it is done
	// counted says the count of the index as it was at open is in usage; until then
	// dropped lists the buckets deleted meanwhile (their count is left out).
	counted bool
	dropped map[string]bool
	// usageIncomplete: the count at start met damage in the index.
	usageIncomplete atomic.Bool

	space spaceCache // checkSpace's last statfs

	bufPool sync.Pool
	clock   *hlc.Clock

	// moveGroup is the bytes compaction moves between index commits (tests shrink it).
	moveGroup int64

	outSeq              atomic.Uint64 // the last outbox seq used
	outPending, outDead atomic.Int64
	outMu               sync.Mutex      // seq assignment and outInflight
	outInflight         map[uint64]bool // first seqs of entries stacked and not yet committed

	jnl   *journal // the volume journal (nil: none)
	jstop chan struct{}
	jdone chan struct{}
	jonce sync.Once
}

type commitReq struct {
	b    *pebble.Batch
	done chan error
}

// Open opens or creates the store in cfg.Dir and runs crash recovery.
func Open(cfg Config) (*Store, error) {
	const op errors.Op = "store.Open"
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, errors.E(op, err)
	}
	fsys, segFS := vfs.Default, segment.OS
	if cfg.FS != nil && cfg.FS != vfs.Default {
		fsys, segFS = cfg.FS, segment.FromVFS(cfg.FS)
	}
	if err := mkdirAllSync(fsys, cfg.Dir); err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	dmg := &damage{}
	ilog := cfg.Logger.With("component", "index")
	opts := &pebble.Options{
		CacheSize:    cfg.CacheSize,
		MemTableSize: 32 << 20,
		Logger:       pebbleLogger{ilog},
		// Nil (the OS) lets pebble add its disk-health checks (slow-disk events).
		FS: cfg.FS,
	}
	// Bloom filters (10 bits a key, about 1 % false positives) let a point read skip the
	// tables that cannot hold its key: most of an object write's reads are of keys that
	// are absent (a new version's noncurrent record, a key's first write). Tables written
	// before have none and are read as before.
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	// Noncurrent versions' values and mutable objects' inline bytes go to blob files that
	// compactions do not rewrite (versions.go, indexFormat, indexSpanPolicy); the index is
	// ratcheted to that format at open.
	if !cfg.legacyIndex {
		opts.FormatMajorVersion = indexFormat
		opts.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy { return versionValues }
		opts.Experimental.SpanPolicyFunc = indexSpanPolicy
	}
	el := pebble.MakeLoggingEventListener(pebbleLogger{ilog})
	// A damaged index block fails the reads that need it (an error of kind Corrupt: the
	// gateway reads another replica) and marks the store damaged; pebble's default would
	// end the process, and a restarted node would die again at the next such read.
	el.DataCorruption = func(info pebble.DataCorruptionInfo) {
		if dmg.note(info.Path) {
			ilog.Error("the index is damaged: reads that need this file fail over to other replicas; "+
				"drain the node and replace its data directory (docs/operations.md, Damaged disk or index)",
				"file", info.Path, "err", firstLine(info.Details.Error()))
		}
	}
	opts.EventListener = &el
	db, err := pebble.Open(filepath.Join(cfg.Dir, "index"), opts)
	if err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	sealed := make(chan struct{}, 1)
	segCfg := segment.Config{Dir: filepath.Join(cfg.Dir, "segments"), MaxSize: cfg.SegmentSize, Logger: cfg.Logger, FS: segFS, Spares: cfg.SegmentSpares}
	if cfg.SegmentSpares > 0 {
		segCfg.OnSeal = func() {
			select {
			case sealed <- struct{}{}:
			default:
			}
		}
	}
	segs, err := segment.Open(segCfg)
	if err != nil {
		db.Close()
		return nil, errors.E(op, err)
	}
	s := &Store{
		moveGroup: 16 << 20,
		damage:    dmg,
		cfg:       cfg,
		fs:        fsys,
		log:       cfg.Logger.With("component", "store"),
		db:        db,
		segs:      segs,
		sealed:    sealed,
		commitCh:  make(chan *commitReq, 4096),
		live:      map[uint32]int64{},
		usage:     map[string]Usage{},
		dropped:   map[string]bool{},
		vbuckets:  map[string]bool{},
		clock:     cfg.Clock,
		extents:   newExtentCache(extentCacheObjects),
		extMaps:   newExtentMaps(),
	}
	if s.clock == nil {
		s.clock = new(hlc.Clock)
	}
	s.readers.init()
	s.bufPool.New = func() any {
		// Room for a whole aligned chunk record: header, payload, padding.
		b := segment.AlignedBuffer(segment.AlignedSize(cfg.ChunkSize))
		return &b
	}
	if err := s.openOutbox(); err != nil {
		segs.Close()
		db.Close()
		return nil, errors.E(op, err)
	}
	var jscan *jscan
	if cfg.JournalSize > 0 {
		// The journal's records may reference chunks the index does not: recover keeps
		// them, and replay (below, once the committer runs) checks and applies them.
		if jscan, err = s.scanJournal(); err != nil {
			segs.Close()
			db.Close()
			return nil, errors.E(op, err)
		}
	}
	if err := s.recover(jscan.locs()); err != nil {
		segs.Close()
		db.Close()
		return nil, errors.E(op, err)
	}
	if err := s.loadVersioned(); err != nil {
		segs.Close()
		db.Close()
		return nil, errors.E(op, err)
	}
	// The buckets' usage is counted from the index as it is now, before any write, in
	// the background; writes meanwhile are counted as changes and added to it.
	usageIt, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxObject), UpperBound: prefixEnd([]byte(pfxObject))})
	if err != nil {
		segs.Close()
		db.Close()
		return nil, errors.E(op, errors.IO, err)
	}
	versIt, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxVersion), UpperBound: prefixEnd([]byte(pfxVersion))})
	if err != nil {
		usageIt.Close()
		segs.Close()
		db.Close()
		return nil, errors.E(op, errors.IO, err)
	}
	s.wg.Add(1)
	go s.committer()
	ctx, cancel := context.WithCancel(context.Background())
	s.compactStop = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.countUsage(ctx, usageIt, versIt)
	}()
	if cfg.JournalSize > 0 {
		// Replayed before compaction starts: the chunks of the journal's records are
		// referenced by no index entry until then.
		if err := s.openJournal(jscan); err != nil {
			s.Close()
			return nil, errors.E(op, err)
		}
	}
	s.compactDone = make(chan struct{})
	go func() {
		defer close(s.compactDone)
		s.compactLoop(ctx)
	}()
	if cfg.JournalSize > 0 {
		s.jstop, s.jdone = make(chan struct{}), make(chan struct{})
		go func() {
			defer close(s.jdone)
			s.jnl.run(s.jstop)
		}()
	}
	return s, nil
}

// recover derives the live bytes of every segment from the index, and truncates each sealed segment after its last referenced record: whatever a
// crash left there (torn or complete but never committed) is dropped. The records at keep
// (the volume journal's) count as referenced.
func (s *Store) recover(keep []segment.Loc) error {
	maxEnd, keepEnd := map[uint32]int64{}, map[uint32]int64{}
	for _, l := range keep { // the volume journal's chunks, not indexed yet
		keepEnd[l.Seg] = max(keepEnd[l.Seg], l.End())
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxSeg), UpperBound: prefixEnd([]byte(pfxSeg))})
	if err != nil {
		return errors.E(errors.IO, err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) != len(pfxSeg)+12 || len(v) != 20 {
			it.Close()
			return errors.E(errors.Corrupt, "malformed segment index entry")
		}
		l := segment.Loc{
			Seg: uint32(k[2])<<24 | uint32(k[3])<<16 | uint32(k[4])<<8 | uint32(k[5]),
			Off: int64(beUint64(k[6:])),
			Len: beUint32(v[16:]),
		}
		s.live[l.Seg] += segment.HeaderSize + int64(l.Len)
		if l.End() > maxEnd[l.Seg] {
			maxEnd[l.Seg] = l.End()
		}
	}
	if err := it.Close(); err != nil {
		return errors.E(errors.IO, err)
	}
	for _, info := range s.segs.Segments() {
		if info.Active {
			continue
		}
		indexed := maxEnd[info.ID]
		end := max(indexed, keepEnd[info.ID])
		switch {
		case end == 0:
			if err := s.segs.Remove(info.ID); err != nil {
				return err
			}
			if info.Size > 0 {
				s.log.Info("removed segment without live records", "segment", info.ID, "bytes", info.Size)
			}
		case info.Size > end:
			if err := s.segs.Truncate(info.ID, end); err != nil {
				return err
			}
			s.log.Info("dropped unreferenced segment tail", "segment", info.ID, "bytes", info.Size-end)
		case info.Size < indexed:
			// (A shorter segment than the journal's records say is a torn tail that
			// replay drops: not an error.)
			s.log.Error("segment shorter than its index says: records lost", "segment", info.ID, "size", info.Size, "indexed_end", indexed)
		}
	}
	return nil
}

func beUint64(b []byte) uint64 {
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}

func beUint32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// Close waits for background work to stop, then closes the index and the segment files.
func (s *Store) Close() error {
	if s.jstop != nil && !s.closed.Load() {
		s.jonce.Do(s.closeJournal)
	}
	// Background compaction stops (its commits done) before commits are refused.
	s.compactStop()
	if s.compactDone != nil { // nil: Open failed before starting it
		<-s.compactDone
	}
	s.closeMu.Lock()
	already := s.closed.Swap(true)
	s.closeMu.Unlock()
	if already {
		return nil
	}
	// No commit can be between its check of closed and its send now: closing the
	// channel is safe, and the committer answers every batch sent before it.
	close(s.commitCh)
	s.wg.Wait()
	err1 := s.segs.Close()
	s.closeFloor()
	// Flush the memtable so that the next start need not replay the log.
	if err := s.db.Flush(); err != nil {
		s.log.Warn("flushing the index on close", "err", err)
	}
	err2 := s.db.Close()
	if err1 != nil {
		return errors.E(errors.Op("store.Close"), errors.IO, err1)
	}
	if err2 != nil {
		return errors.E(errors.Op("store.Close"), errors.IO, err2)
	}
	return nil
}

// closeJournal stops the journal's applier and applies what it holds: a clean restart
// replays nothing.
func (s *Store) closeJournal() {
	// The journal's writes go to the index before it closes: a clean restart
	// replays nothing.
	close(s.jstop)
	<-s.jdone
	err := s.drainAll()
	if err == nil {
		s.jnl.applyMu.Lock()
		err = s.jnl.writeApplied(s.jnl.appliedThrough())
		s.jnl.applyMu.Unlock()
	}
	if err != nil {
		s.log.Warn("applying the volume journal on close; the next start replays it", "err", err)
	}
	s.jnl.close()
}

// commitNoSync commits b without syncing the index's log and closes it (the volume
// journal's applier: its writes are durable in the journal).
func (s *Store) commitNoSync(b *pebble.Batch) error {
	defer b.Close()
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed.Load() {
		return errors.E(errors.Transient, "store is closed")
	}
	err := b.Commit(pebble.NoSync)
	s.invalidateExtents(b)
	if err != nil {
		return errors.E(errors.Op("store.commit"), errors.IO, err)
	}
	return nil
}

// committer commits index batches with a synced WAL write, grouping every batch that arrived
// while the previous commit was syncing into one commit (group commit).
func (s *Store) committer() {
	defer s.wg.Done()
	group := make([]*commitReq, 0, 256)
	for req := range s.commitCh {
		group = append(group[:0], req)
	drain:
		for len(group) < cap(group) {
			select {
			case r, ok := <-s.commitCh:
				if !ok {
					break drain
				}
				group = append(group, r)
			default:
				break drain
			}
		}
		var err error
		if len(group) == 1 {
			err = group[0].b.Commit(pebble.Sync)
		} else {
			merged := s.db.NewBatch()
			for _, r := range group {
				if err = merged.Apply(r.b, nil); err != nil {
					break
				}
			}
			if err == nil {
				err = merged.Commit(pebble.Sync)
			}
			merged.Close()
		}
		if s.cfg.OnCommit != nil {
			s.cfg.OnCommit(len(group))
		}
		for _, r := range group {
			r.done <- err
		}
	}
}

// commit makes b durable and closes it.
func (s *Store) commit(b *pebble.Batch) error {
	defer b.Close()
	s.closeMu.RLock()
	if s.closed.Load() {
		s.closeMu.RUnlock()
		s.log.Error("a write reached the store after it was closed: it was refused, nothing was written")
		return errors.E(errors.Transient, "store is closed")
	}
	req := &commitReq{b: b, done: make(chan error, 1)}
	s.commitCh <- req
	s.closeMu.RUnlock()
	err := <-req.done
	s.invalidateExtents(b)
	if err != nil {
		return errors.E(errors.Op("store.commit"), errors.IO, err)
	}
	return nil
}

func (s *Store) keyLock(bucket, key string) *sync.Mutex {
	h := fnv.New32a()
	io.WriteString(h, bucket)
	h.Write([]byte{0})
	io.WriteString(h, key)
	return &s.keyLocks[h.Sum32()%uint32(len(s.keyLocks))]
}

// Free-space checks without statfs: while the last statfs is younger than spaceCacheAge
// and, less what writes checked since then, leaves more than spaceCacheMargin above the
// reserve, a write does not ask the filesystem again.
const (
	spaceCacheAge    = 100 * time.Millisecond
	spaceCacheMargin = 1 << 30
)

// spaceCache is the free space of the last statfs, less the bytes checked since.
type spaceCache struct {
	mu   sync.Mutex
	at   time.Time // of the statfs; zero: none
	free int64
}

// checkSpace refuses a write of n bytes that would leave less than the reserve free. Near
// the reserve (within spaceCacheMargin) it asks the filesystem every time, so space freed
// by deletes and compaction is seen at once when it matters; further from it, at most
// every spaceCacheAge (statfs showed in profiles of small PUTs: every copy of every write
// asked).
func (s *Store) checkSpace(n int64) error {
	cached := s.cfg.FreeSpace == nil // a test's FreeSpace is asked every time
	if cached {
		s.space.mu.Lock()
		ok := !s.space.at.IsZero() && time.Since(s.space.at) < spaceCacheAge && s.space.free-n >= s.cfg.Reserve+spaceCacheMargin
		if ok {
			s.space.free -= n
		}
		s.space.mu.Unlock()
		if ok {
			return nil
		}
	}
	free, err := s.freeSpace()
	if err != nil {
		return errors.E(errors.Op("store.checkSpace"), errors.IO, err)
	}
	if spares, _ := s.segs.Spares(); spares > 0 && free-n < s.cfg.Reserve {
		// Spare segment files go before a write is refused.
		if freed, derr := s.segs.DropSpares(); freed > 0 {
			s.log.Info("removed spare segment files: free space below the reserve", "bytes", freed, "err", derr)
			if free, err = s.freeSpace(); err != nil {
				return errors.E(errors.Op("store.checkSpace"), errors.IO, err)
			}
		}
	}
	if cached {
		s.space.mu.Lock()
		s.space.at, s.space.free = time.Now(), free-n
		s.space.mu.Unlock()
	}
	if free-n < s.cfg.Reserve {
		return errors.Errorf(errors.Op("store.checkSpace"), errors.NoSpace,
			"not enough free space on the data disk (%d bytes free, %d reserved, %d needed)", free, s.cfg.Reserve, n)
	}
	return nil
}

func (s *Store) freeSpace() (int64, error) {
	if s.cfg.FreeSpace != nil {
		return s.cfg.FreeSpace()
	}
	u, err := s.fs.GetDiskUsage(s.cfg.Dir)
	if errors.IsErr(err, vfs.ErrUnsupported) {
		return math.MaxInt64, nil
	}
	if err != nil {
		return 0, err
	}
	return int64(min(u.AvailBytes, math.MaxInt64)), nil
}

// Stats describes the store's disk use.
type Stats struct {
	SegmentBytes int64 // bytes in segment files
	LiveBytes    int64 // bytes of referenced records
	GarbageBytes int64 // SegmentBytes - LiveBytes: reclaimable by compaction
	IndexBytes   int64 // size of the index on disk
	FreeBytes    int64 // free space on the data disk, SpareBytes included
	SpareBytes   int64 // bytes of spare segment files kept for reuse (Config.SegmentSpares)
	Segments     int
}

// Stats returns current disk-use figures.
func (s *Store) Stats() Stats {
	var st Stats
	infos := s.segs.Segments()
	st.Segments = len(infos)
	for _, in := range infos {
		st.SegmentBytes += in.Size
	}
	s.liveMu.Lock()
	for _, v := range s.live {
		st.LiveBytes += v
	}
	s.liveMu.Unlock()
	st.GarbageBytes = max(st.SegmentBytes-st.LiveBytes, 0)
	m := s.db.Metrics()
	st.IndexBytes = int64(m.DiskSpaceUsage())
	st.FreeBytes, _ = s.freeSpace()
	_, st.SpareBytes = s.segs.Spares()
	if st.FreeBytes < math.MaxInt64-st.SpareBytes {
		st.FreeBytes += st.SpareBytes
	}
	return st
}

func (s *Store) addLive(l segment.Loc, sign int64) {
	s.liveMu.Lock()
	s.live[l.Seg] += sign * (segment.HeaderSize + int64(l.Len))
	s.liveMu.Unlock()
}

// InternalPrefix starts the names of the buckets nodes keep for themselves (erasure-code
// shards): no S3 bucket name can start with it. Anti-entropy and scrub leave them alone.
const InternalPrefix = "."

// Internal reports whether bucket is an internal bucket.
func Internal(bucket string) bool { return strings.HasPrefix(bucket, InternalPrefix) }

// CreateBucket creates a bucket; it is an Exist error if it is already there.
func (s *Store) CreateBucket(name string) error {
	const op errors.Op = "store.CreateBucket"
	s.bucketMu.Lock()
	defer s.bucketMu.Unlock()
	if _, err := s.bucket(name); err == nil {
		return errors.E(op, errors.Exist, fmt.Errorf("bucket %q exists", name))
	} else if !errors.Is(errors.NotExist, err) {
		return errors.E(op, err)
	}
	b := s.db.NewBatch()
	b.Set(bucketKey(name), []byte(time.Now().UTC().Format(time.RFC3339Nano)), nil)
	defer s.buckets.drop(name)
	return s.commit(b)
}

// bucket returns the bucket's record (from the bucket cache if it holds it).
func (s *Store) bucket(name string) (object.Bucket, error) {
	e, ok, gen := s.buckets.get(name)
	if ok {
		return e.b, nil
	}
	b, err := s.readBucket(name)
	if err == nil {
		s.buckets.putBucket(name, b, gen)
	}
	return b, err
}

// readBucket reads the bucket's record from the index.
func (s *Store) readBucket(name string) (object.Bucket, error) {
	v, c, err := s.db.Get(bucketKey(name))
	if err == pebble.ErrNotFound {
		return object.Bucket{}, errors.E(errors.NotExist, fmt.Errorf("bucket %q: %w", name, object.ErrNoSuchBucket))
	}
	if err != nil {
		return object.Bucket{}, errors.E(errors.IO, err)
	}
	defer c.Close()
	t, _ := time.Parse(time.RFC3339Nano, string(v))
	return object.Bucket{Name: name, Created: t}, nil
}

// bucketConfig returns a bucket's configurations (nil if it has none), from the bucket
// cache if it holds them. The map is the caller's.
func (s *Store) bucketConfig(name string) (map[string]string, error) {
	e, ok, gen := s.buckets.get(name)
	if ok && e.cfgLoaded {
		return maps.Clone(e.cfg), nil
	}
	cfg, err := s.readBucketConfig(name)
	if err == nil {
		s.buckets.putConfig(name, cfg, gen)
	}
	return cfg, err
}

// readBucketConfig reads a bucket's configurations from the index (nil if it has none).
func (s *Store) readBucketConfig(name string) (map[string]string, error) {
	p := configPrefix(name)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil, errors.E(errors.IO, err)
	}
	defer it.Close()
	var cfg map[string]string
	for ok := it.First(); ok; ok = it.Next() {
		if cfg == nil {
			cfg = map[string]string{}
		}
		cfg[string(it.Key()[len(p):])] = string(it.Value())
	}
	if err := it.Error(); err != nil {
		return nil, errors.E(errors.IO, err)
	}
	return cfg, nil
}

// SetBucketConfig sets the bucket's configuration of the given kind (an S3 sub-resource
// such as "cors") to doc; an empty doc deletes it. NotExist if the bucket does not exist.
// Only the single-store mode keeps bucket configurations here; a cluster keeps them in its
// map.
func (s *Store) SetBucketConfig(name, kind string, doc []byte) error {
	const op errors.Op = "store.SetBucketConfig"
	if kind == "" {
		return errors.E(op, errors.Invalid, "missing configuration kind")
	}
	s.bucketMu.Lock()
	defer s.bucketMu.Unlock()
	if _, err := s.bucket(name); err != nil {
		return errors.E(op, err)
	}
	b := s.db.NewBatch()
	k := append(configPrefix(name), kind...)
	if len(doc) == 0 {
		b.Delete(k, nil)
	} else {
		b.Set(k, doc, nil)
	}
	defer s.buckets.drop(name)
	return s.commit(b)
}

// HeadBucket returns a bucket with its configurations, or a NotExist error.
func (s *Store) HeadBucket(name string) (object.Bucket, error) {
	const op errors.Op = "store.HeadBucket"
	b, err := s.bucket(name)
	if err != nil {
		return b, errors.E(op, err)
	}
	if b.Config, err = s.bucketConfig(name); err != nil {
		return object.Bucket{}, errors.E(op, err)
	}
	return b, nil
}

// BucketExists returns nil if the bucket exists, else a NotExist error. It is cheaper than
// HeadBucket: one index lookup.
func (s *Store) BucketExists(name string) error {
	_, err := s.bucket(name)
	return err
}

// ListBuckets returns every bucket in name order.
func (s *Store) ListBuckets() ([]object.Bucket, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxBucket), UpperBound: prefixEnd([]byte(pfxBucket))})
	if err != nil {
		return nil, errors.E(errors.Op("store.ListBuckets"), errors.IO, err)
	}
	defer it.Close()
	var out []object.Bucket
	for ok := it.First(); ok; ok = it.Next() {
		t, _ := time.Parse(time.RFC3339Nano, string(it.Value()))
		out = append(out, object.Bucket{Name: string(it.Key()[len(pfxBucket):]), Created: t})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// DeleteBucket deletes an empty bucket (NotEmpty if it holds objects or uploads).
func (s *Store) DeleteBucket(name string) error {
	const op errors.Op = "store.DeleteBucket"
	if err := s.drainAll(); err != nil {
		return errors.E(op, err)
	}
	s.bucketMu.Lock()
	defer s.bucketMu.Unlock()
	if _, err := s.bucket(name); err != nil {
		return errors.E(op, err)
	}
	vers := append(append([]byte(pfxVersion), name...), 0)
	for _, p := range [][]byte{objectPrefix(name, ""), uploadPrefix(name, ""), vers} {
		empty, err := s.emptyRange(p)
		if err != nil {
			return errors.E(op, err)
		}
		if !empty {
			return errors.E(op, errors.NotEmpty, fmt.Errorf("bucket %q is not empty", name))
		}
	}
	b := s.db.NewBatch()
	objs := objectPrefix(name, "")
	b.DeleteRange(objs, prefixEnd(objs), nil) // tombstones
	b.DeleteRange(vers, prefixEnd(vers), nil) // tombstones and purge records of versioned keys
	cfg := configPrefix(name)
	b.DeleteRange(cfg, prefixEnd(cfg), nil)
	b.Delete(bucketKey(name), nil)
	err := s.commit(b)
	s.buckets.drop(name)
	if err != nil {
		return err
	}
	s.vmu.Lock()
	delete(s.vbuckets, name)
	s.vmu.Unlock()
	s.usageMu.Lock()
	delete(s.usage, name)
	if !s.counted {
		s.dropped[name] = true
	}
	s.usageMu.Unlock()
	return nil
}

// emptyRange reports whether the range under prefix p holds no records other than
// tombstones and purge records (a delete marker is a version: its bucket is not empty).
func (s *Store) emptyRange(p []byte) (bool, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return false, errors.E(errors.IO, err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		v, err := s.iterValue(it)
		if err != nil {
			return false, err
		}
		if !isHidden(v) {
			return false, nil
		}
	}
	if err := it.Error(); err != nil {
		return false, indexErr(err)
	}
	return true, nil
}

// isTombstone reports whether an encoded record is a tombstone, without decoding it.
func isTombstone(v []byte) bool { return len(v) >= 2 && v[0] >= 2 && v[1]&4 != 0 }

func newID() (id [16]byte) {
	if _, err := rand.Read(id[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return id
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// damage records the index files found damaged.
type damage struct {
	mu    sync.Mutex
	files []string
	count atomic.Int64
}

// note records a corruption in file and reports whether the file is new to the list.
func (d *damage) note(file string) bool {
	d.count.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	if slices.Contains(d.files, file) {
		return false
	}
	d.files = append(d.files, file)
	return true
}

// Damaged returns the index files in which reads found corruption since the store was
// opened (none: nil), and how many reads failed on them.
func (s *Store) Damaged() (files []string, reads int64) {
	s.damage.mu.Lock()
	defer s.damage.mu.Unlock()
	return slices.Clone(s.damage.files), s.damage.count.Load()
}

// pebbleLogger sends pebble's logs to slog: its chatter at debug level.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...))
}
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
}
func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
	os.Exit(1)
}

// changing calls Config.Changing for bucket/key and returns what to call when the
// change returns.
func (s *Store) changing(bucket, key string) (done func()) {
	if s.cfg.Changing == nil {
		return noChange
	}
	return s.cfg.Changing(bucket, key)
}

func noChange() {}
