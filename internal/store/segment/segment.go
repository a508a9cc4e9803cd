// Package segment stores blobs as checksummed records in append-only segment files.
//
// A Set is a directory of numbered segment files. Append writes one record (a header and a
// payload) to the active file at a reserved offset, in parallel with other appends; Sync
// makes every record appended to a file so far durable with one shared fdatasync (group
// commit). Read returns a record's payload only after verifying its checksums. The package
// knows nothing of objects or of which records are live: the caller's index does (see
// docs/design/20261122_storage_engine.md).
//
// Every file operation goes through an FS: OS, the default, writes large records with
// direct I/O and gives the kernel page-cache hints; FromVFS keeps the files in a pebble
// vfs.FS, such as the crashable memory file system the power-cut tests cut.
//
// A Set configured with Spares keeps that many removed segment files (renamed to
// <number>.spare) and gives them to new segments instead of creating files: writes into a
// reused file overwrite blocks the filesystem has already allocated, so they need no block
// allocation and their fdatasync no journal commit of the file's extents (on ext4, 1 MiB
// direct writes appended to a new file with an fdatasync every few milliseconds reached a
// third of the rate of the same writes into written blocks). A reused file holds an older
// life's records past the new ones: readers go by the caller's index, which references
// only records written (and synced) in this life, and every read checks a record's
// checksums and id.
package segment

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/internal/errors"
)

// Record header layout; see the design note.
const (
	HeaderSize = 36
	magic      = 0xCA1F5E61
	version    = 1
	// KindChunk is the record kind of an object chunk.
	KindChunk = 1
	// MaxPayload bounds a record's payload; larger lengths in a header are corruption.
	MaxPayload = 64 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ID names a record: a random 128-bit chunk id.
type ID [16]byte

// String returns the id in hex.
func (id ID) String() string { return fmt.Sprintf("%x", id[:]) }

// Loc is where a record lives: segment number, offset of its header and payload length.
type Loc struct {
	Seg uint32
	Off int64
	Len uint32
}

// End returns the offset just past the record.
func (l Loc) End() int64 { return l.Off + HeaderSize + int64(l.Len) }

// Header is a decoded record header.
type Header struct {
	Kind   uint8
	ID     ID
	Len    uint32
	CRC    uint32 // CRC32C of the payload
	Header uint32 // CRC32C of the header's first 32 bytes
}

// EncodeHeader writes h into b (len(b) >= HeaderSize), computing the header checksum.
func EncodeHeader(b []byte, kind uint8, id ID, payload []byte) {
	encodeHeader(b, kind, id, len(payload), crc32.Checksum(payload, castagnoli))
}

// encodeHeader is EncodeHeader with the payload's length n and CRC32C known.
func encodeHeader(b []byte, kind uint8, id ID, n int, crc uint32) {
	binary.LittleEndian.PutUint32(b[0:], magic)
	b[4] = version
	b[5] = kind
	b[6], b[7] = 0, 0
	copy(b[8:24], id[:])
	binary.LittleEndian.PutUint32(b[24:], uint32(n))
	binary.LittleEndian.PutUint32(b[28:], crc)
	binary.LittleEndian.PutUint32(b[32:], crc32.Checksum(b[:32], castagnoli))
}

// DecodeHeader parses and checks a record header.
func DecodeHeader(b []byte) (Header, error) {
	const op errors.Op = "segment.DecodeHeader"
	var h Header
	if len(b) < HeaderSize {
		return h, errors.E(op, errors.Corrupt, "short header")
	}
	if binary.LittleEndian.Uint32(b[0:]) != magic {
		return h, errors.E(op, errors.Corrupt, "bad magic")
	}
	h.Header = binary.LittleEndian.Uint32(b[32:])
	if crc32.Checksum(b[:32], castagnoli) != h.Header {
		return h, errors.E(op, errors.Corrupt, "header checksum mismatch")
	}
	if b[4] != version {
		return h, errors.Errorf(op, errors.Corrupt, "unknown record version %d", b[4])
	}
	h.Kind = b[5]
	copy(h.ID[:], b[8:24])
	h.Len = binary.LittleEndian.Uint32(b[24:])
	h.CRC = binary.LittleEndian.Uint32(b[28:])
	if h.Len > MaxPayload {
		return h, errors.Errorf(op, errors.Corrupt, "payload length %d too large", h.Len)
	}
	return h, nil
}

// Config configures a Set.
type Config struct {
	// Dir holds the segment files. Required.
	Dir string
	// MaxSize is the size at which the active segment is sealed and a new one started.
	// Zero means 256 MiB.
	MaxSize int64
	// Logger receives notable events. Nil means slog.Default().
	Logger *slog.Logger
	// FS holds the files. Nil means OS.
	FS FS
	// Spares is how many removed segment files of at least MaxSize/2 bytes are kept to be
	// reused by new segments (see the package comment). Zero keeps none.
	Spares int
	// OnSeal, if not nil, is called (with the set's lock held: it must not block or call
	// the set) whenever a new active segment seals the previous one.
	OnSeal func()
}

// Set is a directory of segment files. It is safe for concurrent use.
type Set struct {
	fs      FS
	dir     string
	maxSize int64
	log     *slog.Logger

	maxSpares int
	onSeal    func()

	mu     sync.Mutex
	files  map[uint32]*file
	active *file
	nextID uint32
	spares []spare // removed files kept for reuse, at most maxSpares
	reused uint64  // segments started in a spare since Open
}

// spare is a removed segment file kept for reuse.
type spare struct {
	name string // base name, <number>.spare
	size int64
}

const spareSuffix = ".spare"

type file struct {
	id     uint32
	f      File
	direct DirectWriter // f, if it can write with direct I/O
	advise Advisor      // f, if it takes page-cache hints
	size   atomic.Int64 // bytes reserved (the end of the last reserved record)

	refs    int  // guarded by Set.mu
	pending int  // guarded by Set.mu: appended records whose writer has not called Done
	removed bool // guarded by Set.mu; close when refs reaches 0

	smu     sync.Mutex
	cond    *sync.Cond
	started uint64 // syncs started
	done    uint64 // syncs finished
	running bool
	syncErr error // sticky
}

func name(id uint32) string { return fmt.Sprintf("%08d.seg", id) }

// Open opens (creating if needed) the segment files in cfg.Dir. New appends go to a new
// segment, so that whatever a crash left at the tail of an older one is never appended to;
// callers truncate unreferenced tails with Truncate.
func Open(cfg Config) (*Set, error) {
	const op errors.Op = "segment.Open"
	if cfg.Dir == "" {
		return nil, errors.E(op, errors.Invalid, "no directory")
	}
	if cfg.MaxSize <= 0 {
		cfg.MaxSize = 256 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.FS == nil {
		cfg.FS = OS
	}
	// The directory, if new, must outlive a power cut like the files in it.
	if err := mkdirAllSync(cfg.FS, cfg.Dir); err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	s := &Set{fs: cfg.FS, dir: cfg.Dir, maxSize: cfg.MaxSize, log: cfg.Logger, files: map[uint32]*file{}, nextID: 1,
		maxSpares: max(cfg.Spares, 0), onSeal: cfg.OnSeal}
	names, err := cfg.FS.List(cfg.Dir)
	if err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	sort.Strings(names)
	for _, nm := range names {
		if strings.HasSuffix(nm, spareSuffix) {
			if err := s.openSpare(nm); err != nil {
				s.closeAll()
				return nil, errors.E(op, errors.IO, err)
			}
			continue
		}
		n, ok := strings.CutSuffix(nm, ".seg")
		if !ok {
			continue
		}
		id, err := strconv.ParseUint(n, 10, 32)
		if err != nil {
			continue
		}
		f, err := cfg.FS.Open(filepath.Join(cfg.Dir, nm))
		if err != nil {
			s.closeAll()
			return nil, errors.E(op, errors.IO, err)
		}
		size, err := f.Size()
		if err != nil {
			f.Close()
			s.closeAll()
			return nil, errors.E(op, errors.IO, err)
		}
		sf := newFile(uint32(id), f)
		sf.size.Store(size)
		s.files[sf.id] = sf
		if uint32(id) >= s.nextID {
			s.nextID = uint32(id) + 1
		}
	}
	s.mu.Lock()
	err = s.rollLocked()
	s.mu.Unlock()
	if err != nil {
		s.closeAll()
		return nil, errors.E(op, err)
	}
	return s, nil
}

func newFile(id uint32, f File) *file {
	sf := &file{id: id, f: f}
	sf.cond = sync.NewCond(&sf.smu)
	sf.direct, _ = f.(DirectWriter)
	sf.advise, _ = f.(Advisor)
	return sf
}

// Alignment is the file offset and memory alignment of records written by AppendAligned.
const Alignment = 4096

// AlignedSize returns the bytes a record with an n-byte payload occupies when aligned.
func AlignedSize(n int) int { return (HeaderSize + n + Alignment - 1) &^ (Alignment - 1) }

// AlignedBuffer returns a buffer of at least n bytes whose first byte is Alignment-aligned.
func AlignedBuffer(n int) []byte {
	b := make([]byte, n+Alignment)
	off := int(uintptr(unsafe.Pointer(&b[0])) & (Alignment - 1))
	if off != 0 {
		off = Alignment - off
	}
	return b[off : off+n : off+n]
}

// AppendAligned writes a record whose payload the caller has already placed at
// buf[HeaderSize:HeaderSize+n]. buf must be Alignment-aligned (see AlignedBuffer) with
// len(buf) >= AlignedSize(n). The record starts at an aligned offset and is padded to an
// aligned length, so it is written with direct I/O where the filesystem supports it. Like
// Append, the record is durable only after Sync.
func (s *Set) AppendAligned(kind uint8, id ID, buf []byte, n int) (Loc, error) {
	locs, err := s.AppendAlignedRecords(kind, []ID{id}, []int{n}, nil, buf)
	if err != nil {
		return Loc{}, err
	}
	return locs[0], nil
}

// AppendAlignedRecords writes several records of one kind in one write: record i, with
// id ids[i] and a payload of sizes[i] bytes, starts at buf[start(i)+HeaderSize], where
// start(0) = 0 and start(i+1) = start(i) + AlignedSize(sizes[i]) (the caller placed the
// payloads there). buf must be Alignment-aligned and hold the records' aligned sizes; the
// records go to consecutive aligned offsets of one segment, with direct I/O where the
// filesystem supports it. crcs, if not nil, holds the CRC32C of each payload, which the
// caller computed from the same bytes (a store that checksums blocks folds their sums
// into it rather than reading the payload twice); nil computes them. Each returned
// location needs its own Done; none is durable before Sync. On an error nothing is
// referenced (and the caller calls no Done).
func (s *Set) AppendAlignedRecords(kind uint8, ids []ID, sizes []int, crcs []uint32, buf []byte) ([]Loc, error) {
	const op errors.Op = "segment.AppendAlignedRecords"
	if len(ids) != len(sizes) || len(ids) == 0 || (crcs != nil && len(crcs) != len(ids)) {
		return nil, errors.E(op, errors.Invalid, "ids, sizes and checksums differ in length")
	}
	total := 0
	for i, n := range sizes {
		if n > MaxPayload {
			return nil, errors.E(op, errors.TooLarge, "payload too large")
		}
		if len(buf) < total+AlignedSize(n) {
			return nil, errors.E(op, errors.Invalid, "buffer shorter than the aligned records")
		}
		rec := buf[total : total+AlignedSize(n)]
		if crcs != nil {
			encodeHeader(rec[:HeaderSize], kind, ids[i], n, crcs[i])
		} else {
			EncodeHeader(rec[:HeaderSize], kind, ids[i], rec[HeaderSize:HeaderSize+n])
		}
		clear(rec[HeaderSize+n:])
		total += AlignedSize(n)
	}
	s.mu.Lock()
	sf := s.active
	off := (sf.size.Load() + Alignment - 1) &^ (Alignment - 1)
	if sf.size.Load() > 0 && off+int64(total) > s.maxSize {
		if err := s.rollLocked(); err != nil {
			s.mu.Unlock()
			return nil, errors.E(op, err)
		}
		sf = s.active
		off = 0
	}
	sf.size.Store(off + int64(total))
	sf.refs++
	sf.pending += len(ids)
	s.mu.Unlock()
	defer s.release(sf)

	err := ErrNoDirect
	if sf.direct != nil {
		err = sf.direct.WriteDirect(buf[:total], off)
	}
	if errors.IsErr(err, ErrNoDirect) {
		err = sf.f.WriteVec(off, buf[:total])
	}
	if err != nil {
		for range ids {
			s.Done(sf.id)
		}
		if errors.IsErr(err, unix.ENOSPC) {
			return nil, errors.E(op, errors.NoSpace, err)
		}
		return nil, errors.E(op, errors.IO, err)
	}
	locs := make([]Loc, len(ids))
	at := off
	for i, n := range sizes {
		locs[i] = Loc{Seg: sf.id, Off: at, Len: uint32(n)}
		at += int64(AlignedSize(n))
	}
	return locs, nil
}

// openSpare takes the spare file nm found at Open into the pool, or removes it if the pool
// is full (or spares are off).
func (s *Set) openSpare(nm string) error {
	path := filepath.Join(s.dir, nm)
	if id, err := strconv.ParseUint(strings.TrimSuffix(nm, spareSuffix), 10, 32); err == nil && uint32(id) >= s.nextID {
		s.nextID = uint32(id) + 1 // a later segment of that number is never kept beside it
	}
	if len(s.spares) >= s.maxSpares {
		if err := s.fs.Remove(path); err != nil {
			return err
		}
		return s.fs.SyncDir(s.dir)
	}
	f, err := s.fs.Open(path)
	if err != nil {
		return err
	}
	size, err := f.Size()
	f.Close()
	if err != nil {
		return err
	}
	s.spares = append(s.spares, spare{name: nm, size: size})
	return nil
}

// rollLocked starts a new active segment, in a spare file if there is one. s.mu must be
// held.
func (s *Set) rollLocked() error {
	id := s.nextID
	path := filepath.Join(s.dir, name(id))
	f, err := s.reuseLocked(path)
	if f == nil && err == nil {
		f, err = s.fs.Create(path)
	}
	if err != nil {
		return errors.E(errors.IO, err)
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		f.Close()
		return errors.E(errors.IO, err)
	}
	s.nextID++
	sf := newFile(id, f)
	s.files[id] = sf
	sealed := s.active != nil
	s.active = sf
	if sealed && s.onSeal != nil {
		s.onSeal()
	}
	return nil
}

// reuseLocked renames a spare file to path and opens it (its bytes, an older life's, stay
// until overwritten; the new segment's size starts at 0). It returns a nil File and no
// error if there is no spare, or if the spare could not be renamed or opened (it is
// dropped and removed): the caller creates a file then. s.mu must be held; the caller
// syncs the directory.
func (s *Set) reuseLocked(path string) (File, error) {
	if len(s.spares) == 0 {
		return nil, nil
	}
	sp := s.spares[len(s.spares)-1]
	s.spares = s.spares[:len(s.spares)-1]
	old := filepath.Join(s.dir, sp.name)
	if err := s.fs.Rename(old, path); err != nil {
		s.log.Warn("could not reuse a spare segment file; removing it", "file", sp.name, "err", err)
		s.fs.Remove(old)
		return nil, nil
	}
	f, err := s.fs.Open(path)
	if err != nil {
		// Renamed but not opened: removed, so that the caller creates a file there.
		s.log.Warn("could not open a reused spare segment file; removing it", "file", path, "err", err)
		if rerr := s.fs.Remove(path); rerr != nil {
			return nil, err
		}
		return nil, nil
	}
	s.reused++
	return f, nil
}

// Reused returns how many segments have started in a spare file since Open.
func (s *Set) Reused() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reused
}

// Spares returns the number of spare files kept and their bytes on the disk.
func (s *Set) Spares() (n int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range s.spares {
		bytes += sp.size
	}
	return len(s.spares), bytes
}

// DropSpares removes every spare file (to give their space back to the filesystem) and
// returns the bytes they held.
func (s *Set) DropSpares() (int64, error) {
	const op errors.Op = "segment.DropSpares"
	s.mu.Lock()
	defer s.mu.Unlock()
	var freed int64
	var err error
	for len(s.spares) > 0 {
		sp := s.spares[len(s.spares)-1]
		if rerr := s.fs.Remove(filepath.Join(s.dir, sp.name)); rerr != nil && !errors.IsErr(rerr, fs.ErrNotExist) {
			err = rerr
			break
		}
		s.spares = s.spares[:len(s.spares)-1]
		freed += sp.size
	}
	if freed > 0 {
		if serr := s.fs.SyncDir(s.dir); err == nil {
			err = serr
		}
	}
	if err != nil {
		return freed, errors.E(op, errors.IO, err)
	}
	return freed, nil
}

// Active returns the number of the segment new records are appended to.
func (s *Set) Active() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active.id
}

// Append writes a record with the given kind, id and payload and returns its location.
// The record is not durable until Sync(loc.Seg) returns nil.
func (s *Set) Append(kind uint8, id ID, payload []byte) (Loc, error) {
	const op errors.Op = "segment.Append"
	if len(payload) > MaxPayload {
		return Loc{}, errors.E(op, errors.TooLarge, "payload too large")
	}
	n := int64(HeaderSize + len(payload))
	s.mu.Lock()
	sf := s.active
	if sf.size.Load() > 0 && sf.size.Load()+n > s.maxSize {
		if err := s.rollLocked(); err != nil {
			s.mu.Unlock()
			return Loc{}, errors.E(op, err)
		}
		sf = s.active
	}
	off := sf.size.Add(n) - n
	sf.refs++
	sf.pending++
	s.mu.Unlock()
	defer s.release(sf)

	var hdr [HeaderSize]byte
	EncodeHeader(hdr[:], kind, id, payload)
	if err := sf.f.WriteVec(off, hdr[:], payload); err != nil {
		s.Done(sf.id)
		if errors.IsErr(err, unix.ENOSPC) {
			return Loc{}, errors.E(op, errors.NoSpace, err)
		}
		return Loc{}, errors.E(op, errors.IO, err)
	}
	if n >= 1<<20 && sf.advise != nil {
		// Start writing large records back now, so that the fdatasync that makes them
		// durable finds little left to do (and the page cache does not fill with dirty data).
		sf.advise.WriteBack(off, n)
	}
	return Loc{Seg: sf.id, Off: off, Len: uint32(len(payload))}, nil
}

// Done tells the set that the writer of a record appended to seg has committed or abandoned
// it. Until every Append to a segment is matched by a Done, Info.Pending is non-zero and the
// segment must not be compacted: its records may be referenced any moment now.
func (s *Set) Done(seg uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sf, ok := s.files[seg]; ok && sf.pending > 0 {
		sf.pending--
	}
}

// Roll seals the active segment, if it holds anything, and starts a new one.
func (s *Set) Roll() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active.size.Load() == 0 {
		return nil
	}
	return s.rollLocked()
}

// Sync makes every record whose Append returned before Sync was called durable. Concurrent
// callers share fdatasync calls. An fdatasync error is permanent for that segment.
func (s *Set) Sync(seg uint32) error {
	const op errors.Op = "segment.Sync"
	sf, err := s.acquire(seg)
	if err != nil {
		return errors.E(op, err)
	}
	defer s.release(sf)
	if err := sf.sync(); err != nil {
		return errors.E(op, errors.IO, err)
	}
	return nil
}

func (sf *file) sync() error {
	sf.smu.Lock()
	defer sf.smu.Unlock()
	need := sf.started + 1 // a sync that starts after this call
	for sf.done < need && sf.syncErr == nil {
		if sf.running {
			sf.cond.Wait()
			continue
		}
		sf.running = true
		sf.started++
		gen := sf.started
		sf.smu.Unlock()
		err := sf.f.SyncData()
		sf.smu.Lock()
		sf.running = false
		sf.done = gen
		if err != nil && sf.syncErr == nil {
			sf.syncErr = fmt.Errorf("fdatasync segment %d: %w", sf.id, err)
		}
		sf.cond.Broadcast()
	}
	return sf.syncErr
}

func (s *Set) acquire(seg uint32) (*file, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sf, ok := s.files[seg]
	if !ok || sf.removed {
		return nil, errors.Errorf("", errors.NotExist, "segment %d not found", seg)
	}
	sf.refs++
	return sf, nil
}

func (s *Set) release(sf *file) {
	s.mu.Lock()
	sf.refs--
	closeIt := sf.removed && sf.refs == 0
	s.mu.Unlock()
	if closeIt {
		sf.close()
	}
}

func (sf *file) close() error { return sf.f.Close() }

// Read reads the record at loc into buf (grown if needed) and returns its payload after
// checking both checksums and that the record's id is want. A checksum failure is an error
// of kind Corrupt; a missing segment is NotExist.
func (s *Set) Read(loc Loc, want ID, buf []byte) ([]byte, error) {
	const op errors.Op = "segment.Read"
	sf, err := s.acquire(loc.Seg)
	if err != nil {
		return nil, errors.E(op, err)
	}
	defer s.release(sf)
	if loc.Off < 0 || loc.End() > sf.size.Load() {
		// Past the records of this segment (in a reused file, an older life's bytes).
		return nil, errors.Errorf(op, errors.Corrupt, "record at segment %d offset %d is truncated", loc.Seg, loc.Off)
	}
	n := HeaderSize + int(loc.Len)
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if err := sf.readAt(buf, loc); err != nil {
		if err == io.EOF {
			return nil, errors.Errorf(op, errors.Corrupt, "record at segment %d offset %d is truncated", loc.Seg, loc.Off)
		}
		return nil, errors.E(op, errors.IO, err)
	}
	h, err := DecodeHeader(buf)
	if err != nil {
		return nil, errors.E(op, errors.Corrupt, fmt.Errorf("segment %d offset %d: %w", loc.Seg, loc.Off, err))
	}
	if h.ID != want || h.Len != loc.Len {
		return nil, errors.Errorf(op, errors.Corrupt, "segment %d offset %d: record is %s/%d, want %s/%d", loc.Seg, loc.Off, h.ID, h.Len, want, loc.Len)
	}
	payload := buf[HeaderSize:]
	if crc32.Checksum(payload, castagnoli) != h.CRC {
		return nil, errors.Errorf(op, errors.Corrupt, "segment %d offset %d: payload checksum mismatch (chunk %s)", loc.Seg, loc.Off, want)
	}
	return payload, nil
}

// ReadPayload reads len(buf) bytes of the payload of the record at loc, from payload offset
// off, without reading the header or checking any checksum: the caller checks the bytes
// against checksums of its own (the store's per-block checksums of volume chunks). A range
// past the record's payload is Invalid, a short file Corrupt, a missing segment NotExist.
func (s *Set) ReadPayload(loc Loc, off int64, buf []byte) error {
	const op errors.Op = "segment.ReadPayload"
	if off < 0 || off+int64(len(buf)) > int64(loc.Len) {
		return errors.Errorf(op, errors.Invalid, "range [%d, +%d) outside a payload of %d bytes", off, len(buf), loc.Len)
	}
	sf, err := s.acquire(loc.Seg)
	if err != nil {
		return errors.E(op, err)
	}
	defer s.release(sf)
	if loc.Off < 0 || loc.End() > sf.size.Load() {
		return errors.Errorf(op, errors.Corrupt, "record at segment %d offset %d is truncated", loc.Seg, loc.Off)
	}
	if _, err := sf.f.ReadAt(buf, loc.Off+HeaderSize+off); err != nil {
		if err == io.EOF {
			return errors.Errorf(op, errors.Corrupt, "record at segment %d offset %d is truncated", loc.Seg, loc.Off)
		}
		return errors.E(op, errors.IO, err)
	}
	return nil
}

// readAt reads the record at loc into buf (len(buf) = HeaderSize+loc.Len) through the page
// cache, so hot objects are served from memory. For a large record it first asks the kernel
// for the whole range at once: a cold read otherwise proceeds in readahead windows of a few
// hundred KiB, one after the other (measured: 626 -> 864 MiB/s for cold 16 MiB GETs). Direct
// reads used less CPU but were slower here and would never let an object become hot.
func (sf *file) readAt(buf []byte, loc Loc) error {
	if len(buf) >= 1<<20 && sf.advise != nil {
		sf.advise.WillNeed(loc.Off, int64(len(buf)))
	}
	_, err := sf.f.ReadAt(buf, loc.Off)
	return err
}

// Segments returns the numbers and sizes of all segment files, in order.
func (s *Set) Segments() []Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Info, 0, len(s.files))
	for id, sf := range s.files {
		if sf.removed {
			continue
		}
		out = append(out, Info{ID: id, Size: sf.size.Load(), Active: sf == s.active, Pending: sf.pending})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Info describes one segment file.
type Info struct {
	ID      uint32
	Size    int64
	Active  bool
	Pending int // appends not yet matched by Done
}

// Truncate cuts a sealed segment at size (dropping a crash's unreferenced tail) and syncs it.
func (s *Set) Truncate(seg uint32, size int64) error {
	const op errors.Op = "segment.Truncate"
	sf, err := s.acquire(seg)
	if err != nil {
		return errors.E(op, err)
	}
	defer s.release(sf)
	if sf == s.activeFile() {
		return errors.E(op, errors.Invalid, "cannot truncate the active segment")
	}
	if err := sf.f.Truncate(size); err != nil {
		return errors.E(op, errors.IO, err)
	}
	sf.size.Store(size)
	return nil
}

func (s *Set) activeFile() *file {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active
}

// Remove unlinks a sealed segment, or keeps its file as a spare (see Config.Spares) if no
// read is using it. Reads already in progress finish; later reads fail with NotExist.
func (s *Set) Remove(seg uint32) error {
	const op errors.Op = "segment.Remove"
	s.mu.Lock()
	sf, ok := s.files[seg]
	if !ok || sf.removed {
		s.mu.Unlock()
		return errors.Errorf(op, errors.NotExist, "segment %d not found", seg)
	}
	if sf == s.active {
		s.mu.Unlock()
		return errors.E(op, errors.Invalid, "cannot remove the active segment")
	}
	sf.removed = true
	delete(s.files, seg)
	closeIt := sf.refs == 0
	path := filepath.Join(s.dir, name(seg))
	// A file still being read must keep its bytes; one that is closed at once can be
	// reused. It is renamed with the lock held, so that a roll never sees a spare that is
	// not there yet.
	kept := false
	if size := sf.size.Load(); closeIt && len(s.spares) < s.maxSpares && size >= s.maxSize/2 {
		sf.close()
		closeIt = false
		nm := fmt.Sprintf("%08d%s", seg, spareSuffix)
		if err := s.fs.Rename(path, filepath.Join(s.dir, nm)); err != nil {
			s.log.Warn("could not keep a removed segment file as a spare; removing it", "segment", seg, "err", err)
		} else {
			s.spares = append(s.spares, spare{name: nm, size: size})
			kept = true
		}
	}
	s.mu.Unlock()
	var err error
	if !kept {
		err = s.fs.Remove(path)
	}
	if closeIt {
		sf.close()
	}
	if err != nil {
		return errors.E(op, errors.IO, err)
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		return errors.E(op, errors.IO, err)
	}
	return nil
}

// Path returns the file name of a segment (for tools and tests).
func (s *Set) Path(seg uint32) string { return filepath.Join(s.dir, name(seg)) }

// Close syncs and closes every segment file.
func (s *Set) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first error
	for _, sf := range s.files {
		if err := sf.f.SyncData(); err != nil && first == nil {
			first = err
		}
		if err := sf.close(); err != nil && first == nil {
			first = err
		}
	}
	s.files = map[uint32]*file{}
	return first
}

func (s *Set) closeAll() {
	for _, sf := range s.files {
		sf.close()
	}
}
