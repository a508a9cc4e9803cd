package segment

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cairnfs/cairn/internal/errors"
)

// fsImpls are the FS implementations every FS test runs against, each with a directory
// to work in.
var fsImpls = []struct {
	name string
	new  func(t *testing.T) (FS, string)
}{
	{"os", func(t *testing.T) (FS, string) { return OS, t.TempDir() }},
	{"vfs-default", func(t *testing.T) (FS, string) { return FromVFS(vfs.Default), t.TempDir() }},
	{"vfs-mem", func(t *testing.T) (FS, string) {
		m := vfs.NewCrashableMem()
		if err := m.MkdirAll("/data", 0o700); err != nil {
			t.Fatal(err)
		}
		return FromVFS(m), "/data"
	}},
}

// TestFS is the conformance suite of FS: what Set relies on, for every implementation.
func TestFS(t *testing.T) {
	for _, impl := range fsImpls {
		t.Run(impl.name, func(t *testing.T) {
			fsys, dir := impl.new(t)
			sub := filepath.Join(dir, "a", "b")
			if err := mkdirAllSync(fsys, sub); err != nil {
				t.Fatal(err)
			}
			name := filepath.Join(sub, "x.seg")
			if _, err := fsys.Open(name); !errors.IsErr(err, os.ErrNotExist) {
				t.Fatalf("open of a missing file: %v, want ErrNotExist", err)
			}
			f, err := fsys.Create(name)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fsys.Create(name); !errors.IsErr(err, os.ErrExist) {
				t.Fatalf("second create: %v, want ErrExist", err)
			}
			if err := f.WriteVec(0, []byte("hello "), []byte("world"), nil, []byte("!")); err != nil {
				t.Fatal(err)
			}
			if err := f.WriteVec(20, []byte("tail")); err != nil {
				t.Fatal(err)
			}
			if err := f.SyncData(); err != nil {
				t.Fatal(err)
			}
			want := append([]byte("hello world!\x00\x00\x00\x00\x00\x00\x00\x00"), "tail"...)
			checkFile(t, f, want)
			if err := f.Truncate(5); err != nil {
				t.Fatal(err)
			}
			checkFile(t, f, want[:5])
			buf := make([]byte, 10)
			if n, err := f.ReadAt(buf, 0); n != 5 || err != io.EOF {
				t.Errorf("read past the end: %d, %v; want 5, EOF", n, err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if err := fsys.SyncDir(sub); err != nil {
				t.Fatal(err)
			}
			f, err = fsys.Open(name)
			if err != nil {
				t.Fatal(err)
			}
			checkFile(t, f, want[:5])
			f.Close()
			names, err := fsys.List(sub)
			if err != nil || !slices.Equal(names, []string{"x.seg"}) {
				t.Fatalf("list: %q, %v", names, err)
			}
			if err := fsys.Remove(name); err != nil {
				t.Fatal(err)
			}
			if names, err := fsys.List(sub); err != nil || len(names) != 0 {
				t.Fatalf("list after remove: %q, %v", names, err)
			}
		})
	}
}

func checkFile(t *testing.T, f File, want []byte) {
	t.Helper()
	n, err := f.Size()
	if err != nil || n != int64(len(want)) {
		t.Fatalf("size %d, %v; want %d", n, err, len(want))
	}
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, 0); err != nil && !(err == io.EOF && len(want) == 0) {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("content %q, want %q", got, want)
	}
}

// TestCrashableMem checks that pebble's crashable memory file system, through FromVFS, has
// the semantics the crash tests rely on: a crash clone keeps exactly what was synced. Data
// not synced (whether written "directly" or not) is lost, and so are a new file, a removal,
// a rename and a new directory whose parent directory was not synced.
func TestCrashableMem(t *testing.T) {
	const dir = "/d"
	type step func(t *testing.T, m *vfs.MemFS, fsys FS)
	create := func(name string, data string, syncData, syncDir bool) step {
		return func(t *testing.T, m *vfs.MemFS, fsys FS) {
			f, err := fsys.Create(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.WriteVec(0, []byte(data)); err != nil {
				t.Fatal(err)
			}
			if syncData {
				if err := f.SyncData(); err != nil {
					t.Fatal(err)
				}
			}
			if syncDir {
				if err := fsys.SyncDir(dir); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	appendTo := func(name, data string, sync bool) step {
		return func(t *testing.T, m *vfs.MemFS, fsys FS) {
			f, err := fsys.Open(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			n, _ := f.Size()
			if err := f.WriteVec(n, []byte(data)); err != nil {
				t.Fatal(err)
			}
			if sync {
				if err := f.SyncData(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	truncate := func(name string, size int64) step {
		return func(t *testing.T, m *vfs.MemFS, fsys FS) {
			f, err := fsys.Open(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(size); err != nil {
				t.Fatal(err)
			}
		}
	}
	remove := func(name string, syncDir bool) step {
		return func(t *testing.T, m *vfs.MemFS, fsys FS) {
			if err := fsys.Remove(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			if syncDir {
				if err := fsys.SyncDir(dir); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	rename := func(from, to string, syncDir bool) step {
		return func(t *testing.T, m *vfs.MemFS, fsys FS) {
			if err := m.Rename(filepath.Join(dir, from), filepath.Join(dir, to)); err != nil {
				t.Fatal(err)
			}
			if syncDir {
				if err := fsys.SyncDir(dir); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	mkdir := func(name string, syncParent bool) step {
		return func(t *testing.T, m *vfs.MemFS, fsys FS) {
			if err := fsys.MkdirAll(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			if syncParent {
				if err := fsys.SyncDir(dir); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	absent := "<absent>"
	for _, tc := range []struct {
		name  string
		steps []step
		want  map[string]string // file (or directory: "<dir>") -> content after the crash
	}{
		{"unsynced write lost", []step{create("f", "abc", false, true)}, map[string]string{"f": ""}},
		{"synced write kept", []step{create("f", "abc", true, true)}, map[string]string{"f": "abc"}},
		{"new file lost without directory sync", []step{create("f", "abc", true, false)}, map[string]string{"f": absent}},
		{"append lost without sync", []step{create("f", "abc", true, true), appendTo("f", "def", false)}, map[string]string{"f": "abc"}},
		{"append kept with sync", []step{create("f", "abc", true, true), appendTo("f", "def", true)}, map[string]string{"f": "abcdef"}},
		{"truncate", []step{create("f", "abcdef", true, true), truncate("f", 2)}, map[string]string{"f": "ab"}},
		{"remove undone without directory sync", []step{create("f", "abc", true, true), remove("f", false)}, map[string]string{"f": "abc"}},
		{"remove kept with directory sync", []step{create("f", "abc", true, true), remove("f", true)}, map[string]string{"f": absent}},
		{"rename undone without directory sync", []step{create("f", "abc", true, true), rename("f", "g", false)}, map[string]string{"f": "abc", "g": absent}},
		{"rename kept with directory sync", []step{create("f", "abc", true, true), rename("f", "g", true)}, map[string]string{"f": absent, "g": "abc"}},
		{"new directory lost without parent sync", []step{mkdir("sub", false)}, map[string]string{"sub": absent}},
		{"new directory kept with parent sync", []step{mkdir("sub", true)}, map[string]string{"sub": "<dir>"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := vfs.NewCrashableMem()
			fsys := FromVFS(m)
			if err := mkdirAllSync(fsys, dir); err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.steps {
				s(t, m, fsys)
			}
			crashed := m.CrashClone(vfs.CrashCloneCfg{})
			for name, want := range tc.want {
				p := filepath.Join(dir, name)
				st, err := crashed.Stat(p)
				switch {
				case want == absent:
					if err == nil {
						t.Errorf("%s survived the crash", name)
					}
				case err != nil:
					t.Errorf("%s lost in the crash: %v", name, err)
				case want == "<dir>":
					if !st.IsDir() {
						t.Errorf("%s is not a directory", name)
					}
				default:
					f, err := FromVFS(crashed).Open(p)
					if err != nil {
						t.Fatal(err)
					}
					checkFile(t, f, []byte(want))
					f.Close()
				}
			}
		})
	}
}

// TestCrashableMemDirectWrites checks that a Set's aligned ("direct") appends on the memory
// file system are ordinary writes: lost in a crash unless synced.
func TestCrashableMemDirectWrites(t *testing.T) {
	m := vfs.NewCrashableMem()
	s, err := Open(Config{Dir: "/segs", FS: FromVFS(m)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := 100 << 10
	buf := AlignedBuffer(AlignedSize(n))
	copy(buf[HeaderSize:], payload(1, n))
	loc1, err := s.AppendAligned(KindChunk, ID{1}, buf, n)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(loc1.Seg); err != nil {
		t.Fatal(err)
	}
	s.Done(loc1.Seg)
	loc2, err := s.AppendAligned(KindChunk, ID{2}, buf, n)
	if err != nil {
		t.Fatal(err)
	}
	s.Done(loc2.Seg)
	crashed, err := Open(Config{Dir: "/segs", FS: FromVFS(m.CrashClone(vfs.CrashCloneCfg{}))})
	if err != nil {
		t.Fatal(err)
	}
	defer crashed.Close()
	if _, err := crashed.Read(loc1, ID{1}, nil); err != nil {
		t.Errorf("synced record: %v", err)
	}
	if _, err := crashed.Read(loc2, ID{2}, nil); !errors.Is(errors.Corrupt, err) {
		t.Errorf("unsynced record: %v, want a Corrupt error (truncated)", err)
	}
}
