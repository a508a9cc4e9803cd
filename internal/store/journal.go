package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store/segment"
)

// The volume journal (docs/design/volumes.md, "The volume journal") holds the range
// writes a volume's writer sent unsynced (RangeWrite.Unsynced: an NBD write without FUA).
// Such a write is appended to the journal file, not synced, and answered; SyncJournal
// (an NBD FLUSH, on every holder) syncs the file. A background applier applies the
// journal's writes to the index in order, as ordinary range writes (chunks appended to
// segments and synced as a group, then the index batches committed without a sync), then
// writes, synced, the sequence number below which every write is applied (key
// jnlAppliedKey); a journal file all of whose writes are below it is deleted. Any other
// use of an object the journal holds writes for (a read, a stat, a whole copy, a delete, a
// synced range write) applies them first (drain): what a reader sees is the newest write.
//
// A journal file (journal/<first seq, 16 hex digits>.jnl) is a header, then records:
//
//	header:  "CAIRNJNL", version (4 bytes, big endian: 2; files of version 1 are replayed)
//	record:  length of what follows the checksum (4 bytes), CRC-32C of it (4 bytes),
//	         seq (8), prev (8), next (8), size (8), off (8), len (8), flags (1),
//	         bucket length (2), bucket, key length (2), key, then by flags:
//	           0: the data (len bytes)
//	           1: nothing (a hole)
//	           2: chunk count (2), and per chunk: id (16), segment (4), offset (8),
//	              length (4) (version 2 only)
//
// A record of flags 2 is a write larger than InlineMax: its bytes were appended, unsynced,
// to segments as chunk records, and the journal record references them. SyncJournal syncs
// those segments together with the journal file, so a record made durable by a sync has its
// chunks durable too; replay reads and checks (id, length, checksums) the chunks of every
// record it applies, and a record whose chunks do not check out was never covered by a
// sync: it ends the replay like a torn record.
//
// Sequence numbers follow each other by one across files. Replay at Open reads the files in
// order and stops at the first record that is torn, fails its checksum, does not follow
// the one before it, or references chunks that are not whole: a power cut loses a suffix
// of what was not synced, never a write in the middle, and no record is ever applied in
// part. Replay applies the writes at or above the applied sequence whose object is at
// their Prev (others were applied before).
const (
	jnlMagic      = "CAIRNJNL"
	jnlVersion    = 2 // written; jnlVersionMin and later are replayed
	jnlVersionMin = 1
	jnlHeaderSize = 12
	jnlRecFixed   = 8*6 + 1 + 2 + 2 // after length and checksum, without names and data
	jnlChunkSize  = 16 + 4 + 8 + 4  // one chunk reference of a flags-2 record
	jnlMaxRecord  = 64 << 20
	jnlAppliedKey = "J/applied"

	jflagData   = 0
	jflagHole   = 1
	jflagChunks = 2
)

// jnlFileSize is the size at which the journal starts a new file (the old one is deleted
// once all its writes are applied). Tests lower it.
var jnlFileSize int64 = 64 << 20

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// jrec is one journaled range write. A write whose bytes went to segments (flags 2) has
// bd (its chunks and their locations) and no w.Data: w.Len is its length.
type jrec struct {
	seq uint64
	w   object.RangeWrite
	bd  *body
}

// encodeJournalRecord appends r's record to b.
func encodeJournalRecord(b []byte, r *jrec) []byte {
	start := len(b)
	b = append(b, make([]byte, 8)...)
	b = binary.BigEndian.AppendUint64(b, r.seq)
	b = binary.BigEndian.AppendUint64(b, r.w.Prev)
	b = binary.BigEndian.AppendUint64(b, r.w.Next)
	b = binary.BigEndian.AppendUint64(b, uint64(r.w.Size))
	b = binary.BigEndian.AppendUint64(b, uint64(r.w.Off))
	b = binary.BigEndian.AppendUint64(b, uint64(r.w.Length()))
	switch {
	case r.bd != nil:
		b = append(b, jflagChunks)
	case r.w.Data == nil:
		b = append(b, jflagHole)
	default:
		b = append(b, jflagData)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.w.Bucket)))
	b = append(b, r.w.Bucket...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.w.Key)))
	b = append(b, r.w.Key...)
	if r.bd != nil {
		b = binary.BigEndian.AppendUint16(b, uint16(len(r.bd.chunks)))
		for i, c := range r.bd.chunks {
			l := r.bd.locs[i]
			b = append(b, c.ID[:]...)
			b = binary.BigEndian.AppendUint32(b, l.Seg)
			b = binary.BigEndian.AppendUint64(b, uint64(l.Off))
			b = binary.BigEndian.AppendUint32(b, l.Len)
		}
	} else {
		b = append(b, r.w.Data...)
	}
	body := b[start+8:]
	binary.BigEndian.PutUint32(b[start:], uint32(len(body)))
	binary.BigEndian.PutUint32(b[start+4:], crc32.Checksum(body, crcTable))
	return b
}

// errTorn says that a journal record is incomplete or fails its checksum: replay stops.
var errTorn = errors.E(errors.Corrupt, "torn or damaged journal record")

// decodeJournalRecord decodes the record at the start of b, from a file of the given
// format version, and returns its length. The data of the write it returns is a copy. Any
// record that is cut short, fails its checksum or is malformed is errTorn.
func decodeJournalRecord(b []byte, version uint32) (*jrec, int, error) {
	if len(b) < 8 {
		return nil, 0, errTorn
	}
	n := int(binary.BigEndian.Uint32(b))
	if n < jnlRecFixed || n > jnlMaxRecord || len(b)-8 < n {
		return nil, 0, errTorn
	}
	rb := b[8 : 8+n]
	if crc32.Checksum(rb, crcTable) != binary.BigEndian.Uint32(b[4:]) {
		return nil, 0, errTorn
	}
	u := func(i int) uint64 { return binary.BigEndian.Uint64(rb[i:]) }
	r := &jrec{seq: u(0)}
	r.w.Prev, r.w.Next, r.w.Size, r.w.Off = u(8), u(16), int64(u(24)), int64(u(32))
	length, flags := u(40), rb[48]
	p := rb[49:]
	bl := int(binary.BigEndian.Uint16(p))
	if len(p) < 2+bl+2 {
		return nil, 0, errTorn
	}
	r.w.Bucket = string(p[2 : 2+bl])
	p = p[2+bl:]
	kl := int(binary.BigEndian.Uint16(p))
	if len(p) < 2+kl {
		return nil, 0, errTorn
	}
	r.w.Key = string(p[2 : 2+kl])
	p = p[2+kl:]
	switch {
	case flags == jflagHole && len(p) == 0 && length > 0 && length <= MaxMutableSize:
		r.w.Len = int64(length)
	case flags == jflagData && uint64(len(p)) == length && length > 0:
		r.w.Data = append([]byte(nil), p...)
	case flags == jflagChunks && version >= 2 && len(p) >= 2:
		nc := int(binary.BigEndian.Uint16(p))
		p = p[2:]
		if nc == 0 || len(p) != nc*jnlChunkSize || length == 0 || length > MaxMutableSize {
			return nil, 0, errTorn
		}
		bd := &body{size: int64(length), chunks: make([]object.Chunk, nc), locs: make([]segment.Loc, nc)}
		var sum uint64
		for i := range nc {
			c := p[i*jnlChunkSize:]
			copy(bd.chunks[i].ID[:], c[:16])
			l := segment.Loc{Seg: binary.BigEndian.Uint32(c[16:]), Off: int64(binary.BigEndian.Uint64(c[20:])), Len: binary.BigEndian.Uint32(c[28:])}
			if l.Len == 0 || l.Len > segment.MaxPayload || l.Off < 0 {
				return nil, 0, errTorn
			}
			bd.chunks[i].Size = l.Len
			bd.locs[i] = l
			sum += uint64(l.Len)
		}
		if sum != length {
			return nil, 0, errTorn
		}
		r.w.Len, r.bd = int64(length), bd
	default:
		return nil, 0, errTorn
	}
	if r.w.Size <= 0 || r.w.Size > MaxMutableSize || r.w.Off < 0 || r.w.Off > r.w.Size || r.w.Length() > r.w.Size-r.w.Off || r.w.Next <= r.w.Prev {
		return nil, 0, errTorn
	}
	return r, 8 + n, nil
}

// jentry is a journaled write not applied to the index yet.
type jentry struct {
	jrec
	key     string // bucket "\x00" key
	o       *object.Object
	size    int64 // what it counts against the journal's limit
	held    bool  // bd's segment records were appended by this process (Done once applied)
	applied bool  // guarded by journal.mu
}

type jfile struct {
	name string
	last uint64 // the last seq written to it
}

// journal is a Store's volume journal (nil when Config.JournalSize < 0).
type journal struct {
	s   *Store
	dir string
	max int64

	mu      sync.Mutex
	room    chan struct{}   // closed (and replaced) when applied writes free room
	f       vfs.File        // the file appended to
	files   []jfile         // every file not deleted, the current one last
	seq     uint64          // the last seq given
	dirty   bool            // the current file has writes not synced
	segs    map[uint32]bool // segments holding chunks of journaled writes not synced
	used    int64           // bytes of writes not applied
	queue   []*jentry       // the writes from the first not applied on, in seq order (some applied by drains)
	pending map[string][]*jentry
	buf     []byte
	n       atomic.Int64 // len(queue), read without mu
	wake    chan struct{}
	err     error       // a failed append or sync: the journal refuses writes
	hold    atomic.Bool // tests: the applier applies nothing

	syncMu    sync.Mutex    // one sync (or file switch) at a time
	synced    uint64        // every write up to it is synced (guarded by syncMu)
	syncedSeq atomic.Uint64 // synced, read without syncMu
	applyMu   sync.Mutex    // one application (the applier's, or a drain) at a time
	applied   uint64        // the applied seq last written to the index (guarded by applyMu)
}

func jkey(bucket, key string) string { return bucket + "\x00" + key }

func jfileName(seq uint64) string { return fmt.Sprintf("%016x.jnl", seq) }

// jscan is what scanJournal found on disk: the files and the whole records, in order,
// above the applied sequence.
type jscan struct {
	dir   string
	names []string
	recs  []*jentry
	last  uint64 // the seq of the last record found (or the applied seq)
}

// locs returns the segment locations the scanned records reference: recover keeps them
// (they are not in the index until replay applies them).
func (sc *jscan) locs() []segment.Loc {
	if sc == nil {
		return nil
	}
	var locs []segment.Loc
	for _, e := range sc.recs {
		if e.bd != nil {
			locs = append(locs, e.bd.locs...)
		}
	}
	return locs
}

// scanJournal reads the journal's files (before recover, which must keep the segment
// records they reference).
func (s *Store) scanJournal() (*jscan, error) {
	sc := &jscan{dir: s.fs.PathJoin(s.cfg.Dir, "journal")}
	if err := mkdirAllSync(s.fs, sc.dir); err != nil {
		return nil, errors.E(errors.IO, err)
	}
	applied, err := s.journalApplied()
	if err != nil {
		// A damaged index still opens (reads that need the bad block fail over): replay
		// from the start; a write already applied is at a later order and skipped.
		s.log.Warn("the volume journal's applied sequence cannot be read; replaying every record", "err", err)
		applied = 0
	}
	unknown := err != nil // then the first record found starts the sequence
	names, err := s.fs.List(sc.dir)
	if err != nil {
		return nil, errors.E(errors.IO, err)
	}
	sort.Strings(names)
	last := applied
	stopped := false
	for _, name := range names {
		if !strings.HasSuffix(name, ".jnl") {
			continue
		}
		sc.names = append(sc.names, name)
		if stopped {
			s.log.Warn("dropped a journal file after a torn one (writes never flushed)", "file", name)
			continue
		}
		b, err := readJournalFile(s.fs, s.fs.PathJoin(sc.dir, name))
		if err != nil {
			return nil, errors.E(errors.IO, err)
		}
		if len(b) < jnlHeaderSize || string(b[:8]) != jnlMagic {
			stopped = true // a file whose header did not reach the disk
			continue
		}
		version := binary.BigEndian.Uint32(b[8:])
		if version < jnlVersionMin || version > jnlVersion {
			return nil, errors.Errorf("", errors.Corrupt, "journal file %s has format version %d; this build reads %d to %d", name, version, jnlVersionMin, jnlVersion)
		}
		p := b[jnlHeaderSize:]
		for len(p) > 0 {
			r, n, err := decodeJournalRecord(p, version)
			if err == nil && unknown {
				unknown, last = false, r.seq-1
			}
			if err != nil || (r.seq > applied && r.seq != last+1) {
				s.log.Info("journal replay: dropped a torn tail (writes not flushed)", "file", name, "bytes", len(p))
				stopped = true
				break
			}
			p = p[n:]
			if r.seq <= applied {
				continue
			}
			last = r.seq
			sc.recs = append(sc.recs, &jentry{jrec: *r, key: jkey(r.w.Bucket, r.w.Key)})
		}
	}
	sc.last = last
	return sc, nil
}

// openJournal replays the scanned records (applying them to the index), deletes the old
// files and starts a new one.
func (s *Store) openJournal(sc *jscan) error {
	j := &journal{s: s, dir: sc.dir, max: s.cfg.JournalSize, pending: map[string][]*jentry{}, wake: make(chan struct{}, 1)}
	j.room = make(chan struct{})
	last := sc.last
	s.jnl = j
	// The records' chunks may be in the page cache only (a SIGKILL, not a power cut):
	// synced before any extent references them, as the applier does.
	seen := map[uint32]bool{}
	for _, l := range sc.locs() {
		if !seen[l.Seg] {
			seen[l.Seg] = true
			if err := s.segs.Sync(l.Seg); err != nil && !errors.Is(errors.NotExist, err) {
				return err
			}
		}
	}
	if len(sc.recs) > 0 {
		replayed := 0
		for i, e := range sc.recs {
			err := j.applyOne(e)
			if errors.IsErr(err, errTornChunks) {
				s.log.Info("journal replay: dropped a tail whose chunks are not whole in the segments (writes not flushed)",
					"from_seq", e.seq, "records", len(sc.recs)-i, "err", err)
				last = e.seq - 1
				break
			}
			if err != nil {
				return err
			}
			replayed++
		}
		s.log.Info("journal replay: applied the writes of the journal", "writes", replayed, "through_seq", last)
	}
	j.seq = last
	j.applyMu.Lock()
	err := j.writeApplied(last)
	j.applyMu.Unlock()
	if err != nil {
		return err
	}
	for _, name := range sc.names {
		if err := s.fs.Remove(s.fs.PathJoin(j.dir, name)); err != nil {
			return errors.E(errors.IO, err)
		}
	}
	if err := syncDir(s.fs, j.dir); err != nil {
		return errors.E(errors.IO, err)
	}
	j.synced = last
	j.syncedSeq.Store(last)
	if err := j.newFile(); err != nil {
		return err
	}
	return nil
}

func readJournalFile(fsys vfs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

func syncDir(fsys vfs.FS, dir string) error {
	d, err := fsys.OpenDir(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func (s *Store) journalApplied() (uint64, error) {
	v, closer, err := s.db.Get([]byte(jnlAppliedKey))
	if err == pebble.ErrNotFound {
		return 0, nil
	}
	if err != nil {
		return 0, errors.E(errors.IO, err)
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, errors.E(errors.Corrupt, "malformed journal applied sequence")
	}
	return binary.BigEndian.Uint64(v), nil
}

// newFile starts a journal file for the writes after j.seq. The caller holds syncMu and
// mu (or is openJournal).
func (j *journal) newFile() error {
	name := j.s.fs.PathJoin(j.dir, jfileName(j.seq+1))
	f, err := j.s.fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return errors.E(errors.IO, err)
	}
	hdr := binary.BigEndian.AppendUint32([]byte(jnlMagic), jnlVersion)
	if _, err = f.Write(hdr); err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = syncDir(j.s.fs, j.dir)
	}
	if err != nil {
		f.Close()
		return errors.E(errors.IO, err)
	}
	j.f = f
	j.files = append(j.files, jfile{name: name, last: j.seq})
	return nil
}

// write journals w (validated by WriteRange) and returns the object's record after it. A
// write larger than InlineMax is appended to segments first, unsynced, and its record
// references the chunks (SyncJournal syncs them with the journal).
func (j *journal) write(ctx context.Context, op errors.Op, w object.RangeWrite) (*object.Object, error) {
	s := j.s
	w.Unsynced = false
	size := int64(len(w.Data)) + 256
	// Full: the write waits for the applier (or for its caller to give up: nothing is
	// journaled then, and the writer tries again).
	for {
		j.mu.Lock()
		full, room, err := j.used > 0 && j.used+size > j.max, j.room, j.err
		j.mu.Unlock()
		if err != nil {
			return nil, errors.E(op, err)
		}
		if !full {
			break
		}
		select {
		case <-room:
		case <-ctx.Done():
			return nil, errors.E(op, errors.Transient, "the volume journal is full and the write's caller gave up: nothing was written")
		}
	}
	var bd *body
	if len(w.Data) > s.cfg.InlineMax {
		var err error
		if bd, err = s.writeMutableChunks(w.Data, false); err != nil {
			return nil, errors.E(op, err)
		}
		w.Len, w.Data = int64(len(w.Data)), nil
	} else if w.Data != nil {
		w.Data = slices.Clone(w.Data) // the caller's buffer is reused once it is answered
	}
	o, err := j.append(op, w, bd, size)
	if err != nil && bd != nil {
		s.release(bd.locs) // garbage in the segments, never referenced
	}
	return o, err
}

// append checks w against the object as the journal leaves it and appends its record.
func (j *journal) append(op errors.Op, w object.RangeWrite, bd *body, size int64) (*object.Object, error) {
	s := j.s
	s.bucketMu.RLock()
	defer s.bucketMu.RUnlock()
	if _, err := s.bucket(w.Bucket); err != nil {
		return nil, errors.E(op, err)
	}
	mu := s.keyLock(w.Bucket, w.Key)
	mu.Lock()
	defer mu.Unlock()
	k := jkey(w.Bucket, w.Key)
	j.mu.Lock()
	var old *object.Object
	if p := j.pending[k]; len(p) > 0 {
		old = p[len(p)-1].o
	}
	j.mu.Unlock()
	if old == nil {
		var err error
		old, err = getObject(s.db, objectKey(w.Bucket, w.Key))
		if err != nil && !errors.Is(errors.NotExist, err) {
			return nil, errors.E(op, err)
		}
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

	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return nil, errors.E(op, j.err)
	}
	e := &jentry{jrec: jrec{seq: j.seq + 1, w: w, bd: bd}, key: k, o: &o, size: size, held: bd != nil}
	j.buf = encodeJournalRecord(j.buf[:0], &e.jrec)
	if _, err := j.f.Write(j.buf); err != nil {
		j.err = errors.E(errors.IO, fmt.Errorf("appending to the volume journal: %w", err))
		j.freed()
		return nil, errors.E(op, j.err)
	}
	if cap(j.buf) > 1<<20 {
		j.buf = nil
	}
	j.seq++
	j.dirty = true
	j.files[len(j.files)-1].last = j.seq
	j.queue = append(j.queue, e)
	j.n.Add(1)
	j.pending[k] = append(j.pending[k], e)
	j.used += size
	if bd != nil {
		if j.segs == nil {
			j.segs = map[uint32]bool{}
		}
		for _, l := range bd.locs {
			j.segs[l.Seg] = true
		}
	}
	select {
	case j.wake <- struct{}{}:
	default:
	}
	return &o, nil
}

// HasJournal reports whether the store has a volume journal (Config.JournalSize > 0).
func (s *Store) HasJournal() bool { return s.jnl != nil }

// SyncJournal makes every write the volume journal took before it was called durable
// (NBD FLUSH, on every holder). Concurrent calls share one sync.
func (s *Store) SyncJournal() error {
	j := s.jnl
	if j == nil {
		return nil
	}
	j.mu.Lock()
	target := j.seq
	j.mu.Unlock()
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	return j.syncLocked(target)
}

// syncLocked syncs the current file if it holds writes up to target not synced yet, and
// the segments holding the chunks of the journaled writes, in parallel: a write is synced
// when both are (a record durable without its chunks is dropped at replay, and was never
// answered as synced). The caller holds syncMu.
func (j *journal) syncLocked(target uint64) error {
	if j.synced >= target {
		return nil
	}
	j.mu.Lock()
	f, upto, err, segs := j.f, j.seq, j.err, j.segs
	j.segs = nil
	j.mu.Unlock()
	if err != nil {
		return errors.E(errors.Op("store.SyncJournal"), err)
	}
	if err := j.syncFiles(f, segs); err != nil {
		j.mu.Lock()
		j.err = errors.E(errors.IO, fmt.Errorf("syncing the volume journal: %w", err))
		j.freed()
		j.mu.Unlock()
		return errors.E(errors.Op("store.SyncJournal"), j.err)
	}
	j.synced = upto
	j.syncedSeq.Store(upto)
	return nil
}

// syncFiles syncs f and the segments segs together (segments sync while f does).
func (j *journal) syncFiles(f vfs.File, segs map[uint32]bool) error {
	if len(segs) == 0 {
		return f.SyncData()
	}
	segErr := make(chan error, 1)
	go func() {
		for seg := range segs {
			// A segment removed since held only applied chunks: the applier synced
			// them before it committed them, and compaction moved them.
			if err := j.s.segs.Sync(seg); err != nil && !errors.Is(errors.NotExist, err) {
				segErr <- err
				return
			}
		}
		segErr <- nil
	}()
	err := f.SyncData()
	if serr := <-segErr; err == nil {
		err = serr
	}
	return err
}

// drain applies the journal's writes of bucket/key to the index: the caller then sees
// the object as its newest write left it.
func (s *Store) drain(bucket, key string) error {
	j := s.jnl
	if j == nil || j.n.Load() == 0 {
		return nil
	}
	k := jkey(bucket, key)
	j.mu.Lock()
	_, ok := j.pending[k]
	j.mu.Unlock()
	if !ok {
		return nil
	}
	j.applyMu.Lock()
	defer j.applyMu.Unlock()
	j.mu.Lock()
	es := slices.Clone(j.pending[k])
	j.mu.Unlock()
	return j.apply(es)
}

// drainAll applies every write of the journal (listings and scans see them then).
func (s *Store) drainAll() error {
	j := s.jnl
	if j == nil || j.n.Load() == 0 {
		return nil
	}
	j.applyMu.Lock()
	defer j.applyMu.Unlock()
	return j.apply(j.unapplied(0))
}

// unapplied returns up to max (0: all) of the writes not applied, in seq order.
func (j *journal) unapplied(max int) []*jentry {
	j.mu.Lock()
	defer j.mu.Unlock()
	var es []*jentry
	for _, e := range j.queue {
		if max > 0 && len(es) == max {
			break
		}
		if !e.applied {
			es = append(es, e)
		}
	}
	return es
}

// freed wakes the writes waiting for room. The caller holds mu.
func (j *journal) freed() {
	close(j.room)
	j.room = make(chan struct{})
}

// apply applies es (in seq order, taken from the queue; the caller holds applyMu): the
// chunks of the large writes first, synced as a group (those of journaled chunk records
// are in segments already: synced unless a journal sync did), then each write's index
// batch, without a sync. An index never references a chunk that was not synced; the
// journal (synced at FLUSH) is what makes the writes durable until the applied seq is
// written.
func (j *journal) apply(es []*jentry) error {
	s := j.s
	if len(es) == 0 {
		return nil
	}
	bds := make([]*body, len(es))
	var locs []segment.Loc
	release := func() {
		for i, bd := range bds {
			if bd != nil && bd != es[i].bd {
				s.release(bd.locs)
			}
		}
	}
	// The chunks are written by a few goroutines (each append is a write to the disk,
	// direct I/O for large ones), then synced together.
	var wg sync.WaitGroup
	errs := make([]error, len(es))
	sem := make(chan struct{}, 8)
	synced := j.syncedSeq.Load()
	for i, e := range es {
		switch {
		case e.bd != nil:
			bds[i] = e.bd
			if e.seq > synced {
				locs = append(locs, e.bd.locs...)
			}
		case e.w.Data != nil && len(e.w.Data) > s.cfg.InlineMax:
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				bds[i], errs[i] = s.writeMutableChunks(e.w.Data, false)
			}()
		}
	}
	wg.Wait()
	for i, bd := range bds {
		if errs[i] != nil {
			release()
			return errs[i]
		}
		if bd != nil && bd != es[i].bd {
			locs = append(locs, bd.locs...)
		}
	}
	if err := s.syncLocs(locs); err != nil {
		release()
		return err
	}
	defer release()
	for i, e := range es {
		if _, err := s.commitRange("store.journal", e.w, bds[i], false); err != nil && !errors.Is(errors.Precondition, err) {
			return err
		} else if err != nil {
			// The object moved on meanwhile (a whole copy replaced it): the write is moot.
			s.log.Warn("a journaled volume write no longer applies; dropped", "bucket", e.w.Bucket, "key", e.w.Key, "err", err)
		}
		j.done(e)
	}
	return nil
}

// errTornChunks says that a replayed record references chunks that are not whole in the
// segments: it was never synced, and it ends the replay.
var errTornChunks = errors.New("a journaled write's chunks are not whole in the segments")

// applyOne applies a replayed write (synchronously, at Open). A write that still applies
// (its object is at its Prev) and references chunks has them read and checked first:
// errTornChunks if one is not whole.
func (j *journal) applyOne(e *jentry) error {
	s := j.s
	s.bucketMu.RLock()
	_, berr := s.bucket(e.w.Bucket)
	s.bucketMu.RUnlock()
	if berr != nil {
		return nil // the bucket is gone: nothing to apply
	}
	bd := e.bd
	if bd != nil {
		old, err := getObject(s.db, objectKey(e.w.Bucket, e.w.Key))
		if err != nil && !errors.Is(errors.NotExist, err) {
			return err
		}
		if _, err := mutableNext("store.journalReplay", &e.w, old); err != nil {
			return nil // applied before (or moot): its chunks may be gone since
		}
		bp := s.bufPool.Get().(*[]byte)
		bd.sums = make([][]byte, len(bd.chunks))
		for i, c := range bd.chunks {
			payload, err := s.segs.Read(bd.locs[i], segment.ID(c.ID), *bp)
			if err != nil {
				s.bufPool.Put(bp)
				return fmt.Errorf("%w: chunk %s at segment %d offset %d: %w", errTornChunks, c.ID, bd.locs[i].Seg, bd.locs[i].Off, err)
			}
			bd.sums[i] = blockSums(payload) // from the bytes just checked whole
		}
		s.bufPool.Put(bp)
	} else if e.w.Data != nil && len(e.w.Data) > s.cfg.InlineMax {
		var err error
		if bd, err = s.writeMutableChunks(e.w.Data, true); err != nil {
			return err
		}
		defer s.release(bd.locs)
	}
	if _, err := s.commitRange("store.journalReplay", e.w, bd, false); err != nil && !errors.Is(errors.Precondition, err) {
		return err
	}
	return nil
}

// done removes an applied write from the queue and the pending writes of its object.
func (j *journal) done(e *jentry) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if e.applied {
		return
	}
	e.applied = true
	if e.held {
		j.s.release(e.bd.locs) // committed: the segments may be compacted again
	}
	j.n.Add(-1)
	head := 0
	for head < len(j.queue) && j.queue[head].applied {
		head++
	}
	if head > 0 {
		j.queue = j.queue[head:]
		if cap(j.queue) > 4*len(j.queue)+1024 {
			j.queue = slices.Clone(j.queue)
		}
	}
	p := j.pending[e.key]
	if i := slices.Index(p, e); i >= 0 {
		p = slices.Delete(p, i, i+1)
	}
	if len(p) == 0 {
		delete(j.pending, e.key)
	} else {
		j.pending[e.key] = p
	}
	j.used -= e.size
	j.freed()
}

// writeApplied writes, synced, that every write up to seq is applied: the index is synced
// with it, so every write applied before is durable in the index. The caller holds
// applyMu.
func (j *journal) writeApplied(seq uint64) error {
	b := j.s.db.NewBatch()
	b.Set([]byte(jnlAppliedKey), binary.BigEndian.AppendUint64(nil, seq), nil)
	if err := j.s.commit(b); err != nil {
		return err
	}
	j.applied = seq
	return nil
}

// appliedThrough is the seq up to which every write is applied.
func (j *journal) appliedThrough() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.queue) > 0 {
		return j.queue[0].seq - 1
	}
	return j.seq
}

// run is the applier: it applies the queue as it fills, records what is applied, and
// deletes the files whose writes are all applied.
func (j *journal) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-j.wake:
		case <-time.After(time.Second):
		}
		for !j.hold.Load() {
			j.applyMu.Lock()
			es := j.unapplied(4096)
			err := j.apply(es)
			if err == nil {
				if a := j.appliedThrough(); a > j.applied {
					err = j.writeApplied(a)
				}
			}
			j.applyMu.Unlock()
			if err != nil {
				j.s.log.Error("the volume journal's applier failed; it tries again (the writes stay in the journal)", "err", err)
				select {
				case <-stop:
					return
				case <-time.After(time.Second):
				}
				break
			}
			if err := j.retire(); err != nil {
				j.s.log.Error("the volume journal could not switch files", "err", err)
			}
			if len(es) == 0 || j.n.Load() == 0 {
				break
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}
}

// retire starts a new file when the current one is large, and deletes the files whose
// writes are all applied (and that applied seq written).
func (j *journal) retire() error {
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	j.mu.Lock()
	var size int64
	if st, err := j.f.Stat(); err == nil {
		size = st.Size()
	}
	j.mu.Unlock()
	if size >= jnlFileSize {
		// No write is appended while the file switches: the old one is synced whole
		// (SyncJournal syncs only the current one), then left.
		j.mu.Lock()
		old, segs := j.f, j.segs
		j.segs = nil
		err := j.syncFiles(old, segs)
		if err == nil {
			j.syncedSeq.Store(j.seq)
			j.synced = j.seq
			err = j.newFile()
		}
		j.mu.Unlock()
		if err != nil {
			return err
		}
		old.Close()
	}
	j.applyMu.Lock()
	applied := j.applied
	j.applyMu.Unlock()
	j.mu.Lock()
	var gone []string
	for len(j.files) > 1 && j.files[0].last <= applied {
		gone = append(gone, j.files[0].name)
		j.files = j.files[1:]
	}
	j.mu.Unlock()
	for _, name := range gone {
		if err := j.s.fs.Remove(name); err != nil {
			return err
		}
	}
	if len(gone) > 0 {
		return syncDir(j.s.fs, j.dir)
	}
	return nil
}

// close stops nothing (the applier is stopped by the Store) and closes the file.
func (j *journal) close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	j.err = errors.E(errors.Transient, "store is closed")
	j.freed()
	return err
}
