package store

import (
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cairnfs/cairn/internal/errors"
)

// mkdirAllSync creates dir and its missing parents in fsys and syncs the parent of each
// directory it created: a new directory's entry, like a new file's, is lost in a power cut
// unless its parent directory was synced.
func mkdirAllSync(fsys vfs.FS, dir string) error {
	var missing []string
	for d := dir; ; {
		if _, err := fsys.Stat(d); err == nil {
			break
		} else if !errors.IsErr(err, os.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		parent := fsys.PathDir(d)
		if parent == d {
			break
		}
		d = parent
	}
	if len(missing) == 0 {
		return nil
	}
	if err := fsys.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		d, err := fsys.OpenDir(fsys.PathDir(missing[i]))
		if err != nil {
			return err
		}
		err = d.Sync()
		if cerr := d.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
