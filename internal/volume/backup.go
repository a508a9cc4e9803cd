package volume

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"

	"github.com/cairnfs/cairn/internal/errors"
)

// The incremental backup format (cairn volume export --since; docs/design/
// volume-snapshots.md, "Backup"), after Sheepdog's: every integer big-endian.
//
//	header  magic "CAIRNVB\n" (8 bytes), version u32 (2; 1 is still read), flags u32 (0),
//	        volume size u64 (bytes), block size u64 (the data object size);
//	        version 2 only: base size u64, then six strings, each a length u8 and its
//	        bytes: the base's volume, snapshot and layer id, and the exported
//	        volume's, snapshot's ("" for a detached volume) and layer id
//	record  index u64, offset u32, length u32 (1 to block size), then length bytes:
//	        the bytes at index*block size + offset changed; offset + length <= block
//	        size and the range ends within the volume size
//	digest  (version 2) index u64, offset 0xffffffff, length 32, then the SHA-256 of
//	        the base's data object index (its bytes, cut at the base size): before the
//	        first record of every data object the base has (index*block size < base
//	        size), once, in increasing index order
//	end     index 0xffffffffffffffff, offset 0, length 0
//
// Records come in increasing (index, offset) order and do not overlap. Applying them to
// the base snapshot's content, grown to the header's size, gives the exported one.
// Version 1 does not name its base: cairn volume import refuses it unless told the
// target holds the base (--force-base).
const (
	BackupMagic   = "CAIRNVB\n"
	BackupVersion = 2
	backupEnd     = ^uint64(0)
	digestOff     = 0xffffffff
	// MaxBackupBlock bounds the block size a backup may declare (a record is at most
	// one block, read whole into memory).
	MaxBackupBlock = 64 << 20
	// MaxBackupHeader is the largest header (version 2, every string 255 bytes).
	MaxBackupHeader = 40 + 6*256
)

// BackupRef names a state of a volume: a snapshot (Volume@Snapshot) and its frozen
// layer, or a detached volume (Snapshot "") and its head.
type BackupRef struct {
	Volume, Snapshot, Layer string
}

// String is the snapshot's key, or the volume's name.
func (r BackupRef) String() string {
	if r.Snapshot == "" {
		return r.Volume
	}
	return r.Volume + "@" + r.Snapshot
}

// BackupHeader is the header of an incremental backup. Version is the format's (0
// writes the current one); a version 1 header has no BaseSize, Base or Of.
type BackupHeader struct {
	Version   int
	Size      int64 // of the exported state
	BlockSize int64
	BaseSize  int64
	Base      BackupRef // what the records apply to
	Of        BackupRef // what they produce
}

// BackupWriter writes an incremental backup.
type BackupWriter struct {
	w                io.Writer
	h                BackupHeader
	lastIdx, lastEnd int64 // the end of the last record, to keep the order
	started          bool
	lastDigest       int64 // the index of the last digest (-1: none yet)
}

// NewBackupWriter writes h to w and returns the writer of the records.
func NewBackupWriter(w io.Writer, h BackupHeader) (*BackupWriter, error) {
	if h.Version == 0 {
		h.Version = BackupVersion
	}
	if h.BlockSize <= 0 || h.BlockSize > MaxBackupBlock || h.Size < 0 || h.Size > 1<<62 || h.BaseSize < 0 || h.BaseSize > 1<<62 || h.Version < 1 || h.Version > BackupVersion {
		return nil, errors.Errorf("", errors.Invalid, "backup header: version %d, size %d, block size %d, base size %d", h.Version, h.Size, h.BlockSize, h.BaseSize)
	}
	b := make([]byte, 32, MaxBackupHeader)
	copy(b, BackupMagic)
	binary.BigEndian.PutUint32(b[8:], uint32(h.Version))
	binary.BigEndian.PutUint64(b[16:], uint64(h.Size))
	binary.BigEndian.PutUint64(b[24:], uint64(h.BlockSize))
	if h.Version >= 2 {
		b = binary.BigEndian.AppendUint64(b, uint64(h.BaseSize))
		for _, s := range []string{h.Base.Volume, h.Base.Snapshot, h.Base.Layer, h.Of.Volume, h.Of.Snapshot, h.Of.Layer} {
			if len(s) > 255 {
				return nil, errors.Errorf("", errors.Invalid, "backup header: a name of %d bytes (at most 255)", len(s))
			}
			b = append(append(b, byte(len(s))), s...)
		}
	} else if h.BaseSize != 0 || h.Base != (BackupRef{}) || h.Of != (BackupRef{}) {
		return nil, errors.E(errors.Invalid, "backup header: version 1 names no base")
	}
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	return &BackupWriter{w: w, h: h, lastDigest: -1}, nil
}

// BaseDigest writes the SHA-256 of the base's data object index (version 2): before
// its first record.
func (bw *BackupWriter) BaseDigest(index int64, sum [32]byte) error {
	if err := bw.h.checkDigest(index, bw.lastDigest, bw.started, bw.lastIdx); err != nil {
		return err
	}
	bw.lastDigest = index
	var b [16 + 32]byte
	binary.BigEndian.PutUint64(b[:], uint64(index))
	binary.BigEndian.PutUint32(b[8:], digestOff)
	binary.BigEndian.PutUint32(b[12:], 32)
	copy(b[16:], sum[:])
	_, err := bw.w.Write(b[:])
	return err
}

// needDigest refuses a record of data object index that the base has without its digest
// before it (version 2).
func (h BackupHeader) needDigest(index, lastDigest int64) error {
	if h.Version >= 2 && index*h.BlockSize < h.BaseSize && index != lastDigest {
		return errors.Errorf("", errors.Invalid, "cairn backup: a record of block %d without the base's digest of it before", index)
	}
	return nil
}

func (h BackupHeader) checkDigest(index, lastDigest int64, started bool, lastIdx int64) error {
	switch {
	case h.Version < 2:
		return errors.E(errors.Invalid, "cairn backup: a base digest in a version 1 backup")
	case index < 0 || index*h.BlockSize >= h.BaseSize || index > (h.Size-1)/h.BlockSize:
		return errors.Errorf("", errors.Invalid, "cairn backup: a base digest of block %d, past the base's end (%d bytes) or the volume's", index, h.BaseSize)
	case index <= lastDigest || (started && index <= lastIdx):
		return errors.Errorf("", errors.Invalid, "cairn backup: the base digest of block %d out of order", index)
	}
	return nil
}

// Record writes the changed bytes p at offset off of data object index.
func (bw *BackupWriter) Record(index, off int64, p []byte) error {
	if err := bw.h.check(index, off, int64(len(p))); err != nil {
		return err
	}
	if bw.started && (index < bw.lastIdx || (index == bw.lastIdx && off < bw.lastEnd)) {
		return errors.Errorf("", errors.Invalid, "backup record %d+%d out of order", index, off)
	}
	if err := bw.h.needDigest(index, bw.lastDigest); err != nil {
		return err
	}
	bw.started, bw.lastIdx, bw.lastEnd = true, index, off+int64(len(p))
	var b [16]byte
	binary.BigEndian.PutUint64(b[:], uint64(index))
	binary.BigEndian.PutUint32(b[8:], uint32(off))
	binary.BigEndian.PutUint32(b[12:], uint32(len(p)))
	if _, err := bw.w.Write(b[:]); err != nil {
		return err
	}
	_, err := bw.w.Write(p)
	return err
}

// Close writes the end marker.
func (bw *BackupWriter) Close() error {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:], backupEnd)
	_, err := bw.w.Write(b[:])
	return err
}

func (h BackupHeader) check(index, off, n int64) error {
	switch {
	case n <= 0 || off < 0 || off+n > h.BlockSize:
		return errors.Errorf("", errors.Invalid, "backup record at offset %d, %d bytes: outside a block of %d bytes", off, n, h.BlockSize)
	case index < 0 || index > (h.Size-1)/h.BlockSize || index*h.BlockSize+off+n > h.Size:
		return errors.Errorf("", errors.Invalid, "backup record of block %d at offset %d, %d bytes: past the volume's end (%d bytes)", index, off, n, h.Size)
	}
	return nil
}

// ReadBackupHeader reads and checks an incremental backup's header (of version 1 or 2)
// from r, and nothing after it.
func ReadBackupHeader(r io.Reader) (BackupHeader, error) {
	var h BackupHeader
	var b [32]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return h, errors.Errorf("", errors.Invalid, "not a cairn backup: %v", err)
	}
	if string(b[:8]) != BackupMagic {
		return h, errors.E(errors.Invalid, "not a cairn backup (bad magic)")
	}
	v := binary.BigEndian.Uint32(b[8:])
	if v < 1 || v > BackupVersion {
		return h, errors.Errorf("", errors.Invalid, "cairn backup version %d: this build reads versions 1 to %d", v, BackupVersion)
	}
	if f := binary.BigEndian.Uint32(b[12:]); f != 0 {
		return h, errors.Errorf("", errors.Invalid, "cairn backup flags %#x: unknown", f)
	}
	size, bs := binary.BigEndian.Uint64(b[16:]), binary.BigEndian.Uint64(b[24:])
	if bs == 0 || bs > MaxBackupBlock || size > 1<<62 {
		return h, errors.Errorf("", errors.Invalid, "cairn backup of %d bytes in blocks of %d: out of bounds", size, bs)
	}
	h = BackupHeader{Version: int(v), Size: int64(size), BlockSize: int64(bs)}
	if v == 1 {
		return h, nil
	}
	if _, err := io.ReadFull(r, b[:8]); err != nil {
		return h, errors.Errorf("", errors.Invalid, "cairn backup header truncated: %v", err)
	}
	bsz := binary.BigEndian.Uint64(b[:8])
	if bsz > 1<<62 {
		return h, errors.Errorf("", errors.Invalid, "cairn backup of a base of %d bytes: out of bounds", bsz)
	}
	h.BaseSize = int64(bsz)
	var strs [6]string
	var sb [256]byte
	for k := range strs {
		if _, err := io.ReadFull(r, sb[:1]); err != nil {
			return h, errors.Errorf("", errors.Invalid, "cairn backup header truncated: %v", err)
		}
		n := int(sb[0])
		if _, err := io.ReadFull(r, sb[:n]); err != nil {
			return h, errors.Errorf("", errors.Invalid, "cairn backup header truncated: %v", err)
		}
		strs[k] = string(sb[:n])
	}
	h.Base = BackupRef{Volume: strs[0], Snapshot: strs[1], Layer: strs[2]}
	h.Of = BackupRef{Volume: strs[3], Snapshot: strs[4], Layer: strs[5]}
	return h, nil
}

// IsBackup reports whether the first bytes of a stream are an incremental backup's.
func IsBackup(first []byte) bool { return bytes.HasPrefix(first, []byte(BackupMagic)) }

// ReadBackup reads an incremental backup from r: header is called with its header, then
// record with each record (p is valid until record returns). It checks everything the
// format promises (magic, version, bounds, order, the end marker) and stops at the first
// violation (Invalid) or error of a callback.
func ReadBackup(r io.Reader, header func(BackupHeader) error, record func(index, off int64, p []byte) error) error {
	return ReadBackupDigests(r, header, nil, record)
}

// ReadBackupDigests is ReadBackup that calls digest (if not nil) with each base digest
// (version 2).
func ReadBackupDigests(r io.Reader, header func(BackupHeader) error, digest func(index int64, sum [32]byte) error, record func(index, off int64, p []byte) error) error {
	br := bufio.NewReaderSize(r, 1<<20)
	h, err := ReadBackupHeader(br)
	if err != nil {
		return err
	}
	var b [16]byte
	if err := header(h); err != nil {
		return err
	}
	var buf []byte
	started := false
	var lastIdx, lastEnd int64
	lastDigest := int64(-1)
	for {
		if _, err := io.ReadFull(br, b[:16]); err != nil {
			return errors.Errorf("", errors.Invalid, "cairn backup truncated (no end marker): %v", err)
		}
		idx := binary.BigEndian.Uint64(b[:])
		off, n := int64(binary.BigEndian.Uint32(b[8:])), int64(binary.BigEndian.Uint32(b[12:]))
		if idx == backupEnd {
			if off != 0 || n != 0 {
				return errors.E(errors.Invalid, "cairn backup: a malformed end marker")
			}
			return nil
		}
		if idx > 1<<62 {
			return errors.Errorf("", errors.Invalid, "cairn backup record of block %d: past the volume's end", idx)
		}
		index := int64(idx)
		if off == digestOff {
			if n != 32 {
				return errors.Errorf("", errors.Invalid, "cairn backup: a base digest of %d bytes", n)
			}
			if err := h.checkDigest(index, lastDigest, started, lastIdx); err != nil {
				return err
			}
			lastDigest = index
			var sum [32]byte
			if _, err := io.ReadFull(br, sum[:]); err != nil {
				return errors.Errorf("", errors.Invalid, "cairn backup truncated in a digest: %v", err)
			}
			if digest != nil {
				if err := digest(index, sum); err != nil {
					return err
				}
			}
			continue
		}
		if err := h.check(index, off, n); err != nil {
			return err
		}
		if started && (index < lastIdx || (index == lastIdx && off < lastEnd)) {
			return errors.Errorf("", errors.Invalid, "cairn backup record %d+%d out of order", index, off)
		}
		if err := h.needDigest(index, lastDigest); err != nil {
			return err
		}
		started, lastIdx, lastEnd = true, index, off+n
		if int64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		p := buf[:n]
		if _, err := io.ReadFull(br, p); err != nil {
			return errors.Errorf("", errors.Invalid, "cairn backup truncated in a record: %v", err)
		}
		if err := record(index, off, p); err != nil {
			return err
		}
	}
}

// DiffRuns calls fn with each run of grain-sized pieces (the last may be shorter) where
// cur differs from base (a base shorter than cur counts as zeroes past its end).
func DiffRuns(base, cur []byte, grain int, fn func(off, n int) error) error {
	start := -1
	for off := 0; off < len(cur); off += grain {
		end := min(off+grain, len(cur))
		var b []byte
		if off < len(base) {
			b = base[off:min(end, len(base))]
		}
		same := bytes.Equal(b, cur[off:off+len(b)]) && IsZero(cur[off+len(b):end])
		switch {
		case !same && start < 0:
			start = off
		case same && start >= 0:
			if err := fn(start, off-start); err != nil {
				return err
			}
			start = -1
		}
	}
	if start >= 0 {
		return fn(start, len(cur)-start)
	}
	return nil
}

// IsZero reports whether p is all zeroes.
func IsZero(p []byte) bool {
	for _, c := range p {
		if c != 0 {
			return false
		}
	}
	return true
}
