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
//	header  magic "CAIRNVB\n" (8 bytes), version u32 (1), flags u32 (0),
//	        volume size u64 (bytes), block size u64 (the data object size)
//	record  index u64, offset u32, length u32 (1 to block size), then length bytes:
//	        the bytes at index*block size + offset changed; offset + length <= block
//	        size and the range ends within the volume size
//	end     index 0xffffffffffffffff, offset 0, length 0
//
// Records come in increasing (index, offset) order and do not overlap. Applying them to
// the base snapshot's content, grown to the header's size, gives the exported one.
const (
	BackupMagic   = "CAIRNVB\n"
	BackupVersion = 1
	backupEnd     = ^uint64(0)
	// MaxBackupBlock bounds the block size a backup may declare (a record is at most
	// one block, read whole into memory).
	MaxBackupBlock = 64 << 20
)

// BackupHeader is the header of an incremental backup.
type BackupHeader struct {
	Size      int64
	BlockSize int64
}

// BackupWriter writes an incremental backup.
type BackupWriter struct {
	w                io.Writer
	h                BackupHeader
	lastIdx, lastEnd int64 // the end of the last record, to keep the order
	started          bool
}

// NewBackupWriter writes h to w and returns the writer of the records.
func NewBackupWriter(w io.Writer, h BackupHeader) (*BackupWriter, error) {
	if h.BlockSize <= 0 || h.BlockSize > MaxBackupBlock || h.Size < 0 {
		return nil, errors.Errorf("", errors.Invalid, "backup header: size %d, block size %d", h.Size, h.BlockSize)
	}
	var b [32]byte
	copy(b[:], BackupMagic)
	binary.BigEndian.PutUint32(b[8:], BackupVersion)
	binary.BigEndian.PutUint64(b[16:], uint64(h.Size))
	binary.BigEndian.PutUint64(b[24:], uint64(h.BlockSize))
	if _, err := w.Write(b[:]); err != nil {
		return nil, err
	}
	return &BackupWriter{w: w, h: h}, nil
}

// Record writes the changed bytes p at offset off of data object index.
func (bw *BackupWriter) Record(index, off int64, p []byte) error {
	if err := bw.h.check(index, off, int64(len(p))); err != nil {
		return err
	}
	if bw.started && (index < bw.lastIdx || (index == bw.lastIdx && off < bw.lastEnd)) {
		return errors.Errorf("", errors.Invalid, "backup record %d+%d out of order", index, off)
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

// IsBackup reports whether the first bytes of a stream are an incremental backup's.
func IsBackup(first []byte) bool { return bytes.HasPrefix(first, []byte(BackupMagic)) }

// ReadBackup reads an incremental backup from r: header is called with its header, then
// record with each record (p is valid until record returns). It checks everything the
// format promises (magic, version, bounds, order, the end marker) and stops at the first
// violation (Invalid) or error of a callback.
func ReadBackup(r io.Reader, header func(BackupHeader) error, record func(index, off int64, p []byte) error) error {
	br := bufio.NewReaderSize(r, 1<<20)
	var b [32]byte
	if _, err := io.ReadFull(br, b[:]); err != nil {
		return errors.Errorf("", errors.Invalid, "not a cairn backup: %v", err)
	}
	if string(b[:8]) != BackupMagic {
		return errors.E(errors.Invalid, "not a cairn backup (bad magic)")
	}
	if v := binary.BigEndian.Uint32(b[8:]); v != BackupVersion {
		return errors.Errorf("", errors.Invalid, "cairn backup version %d: this build reads version %d", v, BackupVersion)
	}
	if f := binary.BigEndian.Uint32(b[12:]); f != 0 {
		return errors.Errorf("", errors.Invalid, "cairn backup flags %#x: unknown", f)
	}
	size, bs := binary.BigEndian.Uint64(b[16:]), binary.BigEndian.Uint64(b[24:])
	if bs == 0 || bs > MaxBackupBlock || size > 1<<62 {
		return errors.Errorf("", errors.Invalid, "cairn backup of %d bytes in blocks of %d: out of bounds", size, bs)
	}
	h := BackupHeader{Size: int64(size), BlockSize: int64(bs)}
	if err := header(h); err != nil {
		return err
	}
	var buf []byte
	started := false
	var lastIdx, lastEnd int64
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
		if err := h.check(index, off, n); err != nil {
			return err
		}
		if started && (index < lastIdx || (index == lastIdx && off < lastEnd)) {
			return errors.Errorf("", errors.Invalid, "cairn backup record %d+%d out of order", index, off)
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
