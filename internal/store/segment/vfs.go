package segment

import (
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cairnfs/cairn/internal/errors"
)

// FromVFS returns an FS that keeps segment files in fsys, a pebble file system, such as
// the crashable memory file system of vfs.NewCrashableMem: its CrashClone then cuts the
// segments and an index kept in the same file system at one instant. Its files have no
// direct I/O and take no page-cache hints; a file system whose files cannot be truncated
// (vfs.MemFS) has Truncate emulated by writing the kept bytes to a new file of the same
// name, which after a crash holds the old file or the new one, as a truncation does.
func FromVFS(fsys vfs.FS) FS { return vfsFS{fsys} }

type vfsFS struct{ fs vfs.FS }

var _ File = (*vfsFile)(nil)

func (v vfsFS) Create(name string) (File, error) {
	if _, err := v.fs.Stat(name); err == nil {
		return nil, &os.PathError{Op: "create", Path: name, Err: os.ErrExist}
	} else if !errors.IsErr(err, os.ErrNotExist) {
		return nil, err
	}
	f, err := v.fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, err
	}
	return &vfsFile{fs: v.fs, name: name, f: f}, nil
}

func (v vfsFS) Open(name string) (File, error) {
	// OpenReadWrite would create a missing file.
	if _, err := v.fs.Stat(name); err != nil {
		return nil, err
	}
	f, err := v.fs.OpenReadWrite(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, err
	}
	return &vfsFile{fs: v.fs, name: name, f: f}, nil
}

func (v vfsFS) Remove(name string) error { return v.fs.Remove(name) }

func (v vfsFS) Rename(oldname, newname string) error {
	if _, err := v.fs.Stat(newname); err == nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: os.ErrExist}
	}
	return v.fs.Rename(oldname, newname)
}
func (v vfsFS) List(dir string) ([]string, error) { return v.fs.List(dir) }
func (v vfsFS) MkdirAll(dir string) error         { return v.fs.MkdirAll(dir, 0o700) }

func (v vfsFS) SyncDir(dir string) error {
	d, err := v.fs.OpenDir(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// vfsFile is a File on a vfs.File. mu guards f, which an emulated Truncate replaces.
type vfsFile struct {
	fs   vfs.FS
	name string
	mu   sync.RWMutex
	f    vfs.File
}

func (f *vfsFile) ReadAt(b []byte, off int64) (int, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.f.ReadAt(b, off)
}

func (f *vfsFile) WriteVec(off int64, bufs ...[]byte) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, b := range bufs {
		if _, err := f.f.WriteAt(b, off); err != nil {
			return err
		}
		off += int64(len(b))
	}
	return nil
}

func (f *vfsFile) SyncData() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.f.SyncData()
}

func (f *vfsFile) Size() (int64, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	st, err := f.f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (f *vfsFile) Truncate(size int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t, ok := f.f.(interface{ Truncate(int64) error }); ok {
		if err := t.Truncate(size); err != nil {
			return err
		}
		return f.f.SyncData()
	}
	// No truncation here: write the kept bytes to a new file of the same name, make
	// them durable, then the name.
	kept := make([]byte, size)
	if n, err := f.f.ReadAt(kept, 0); n < len(kept) {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	nf, err := f.fs.Create(f.name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if _, err := nf.WriteAt(kept, 0); err != nil {
		nf.Close()
		return err
	}
	if err := nf.SyncData(); err != nil {
		nf.Close()
		return err
	}
	f.f.Close()
	f.f = nf
	return vfsFS{f.fs}.SyncDir(filepath.Dir(f.name))
}

func (f *vfsFile) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.f.Close()
}
