package store

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

func TestIndexSpanPolicy(t *testing.T) {
	inPlace := pebble.SpanPolicy{ValueStoragePolicy: pebble.ValueStorageLowReadLatency}
	for _, tc := range []struct {
		name, start string
		want        pebble.SpanPolicy
		end         string // "" : the policy holds to the end of the key space
	}{
		{"first key", "", inPlace, "V/"},
		{"bucket record", "B/b", inPlace, "V/"},
		{"current record", "O/b\x00k", inPlace, "V/"},
		{"inline body", "I/0123456789abcdef", inPlace, "V/"},
		{"the span's first key", "V/", pebble.SpanPolicy{}, "V0"},
		{"noncurrent record", "V/b\x00k\x00\xff\xff\xff\xff\xff\xff\xff\xfe", pebble.SpanPolicy{}, "V0"},
		{"last key before the span's end", "V/\xff\xff", pebble.SpanPolicy{}, "V0"},
		{"the span's end", "V0", inPlace, "X/"},
		{"a chunk's references", "K/0123456789abcdef", inPlace, "V/"},
		{"extent", "X/v\x00", pebble.SpanPolicy{}, "X0"},
		{"the extent span's end", "X0", inPlace, ""},
		{"after every span", "Z", inPlace, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, end, err := indexSpanPolicy([]byte(tc.start))
			if err != nil || got != tc.want || string(end) != tc.end {
				t.Fatalf("indexSpanPolicy(%q) = %+v, %q, %v; want %+v, %q", tc.start, got, end, err, tc.want, tc.end)
			}
		})
	}
}

// versionedFixture writes keys with three versions each (4 KiB bodies, large enough for
// their noncurrent records to go to blob files, and one small body) and returns the model.
func versionedFixture(t *testing.T, s *Store, keys int, from uint64) vmodel {
	t.Helper()
	model := vmodel{}
	for i := range keys {
		key := "k" + itoa(i)
		for v := range 3 {
			h := from + uint64(10*v+i)*1000
			body := randBytes(h, 4096)
			if v == 1 {
				body = []byte("small")
			}
			vwrite{key: key, rec: object.Object{HLC: h, Versioned: true}, body: body}.apply(t, s)
			model[key] = append([]mver{{hlc: h, versioned: true, body: body}}, model[key]...)
		}
	}
	return model
}

func indexFormatOf(t *testing.T, dir string) pebble.FormatMajorVersion {
	t.Helper()
	d, err := pebble.Peek(filepath.Join(dir, "index"), vfs.Default)
	if err != nil {
		t.Fatal(err)
	}
	return d.FormatMajorVersion
}

// TestIndexFormatUpgrade opens an index written as builds before value separation wrote
// it (pebble's oldest format, values in their tables) with versions in it: the store
// ratchets it, reads every version, keeps the noncurrent versions it writes in blob files
// (which compactions carry by reference), and a build of the old layout (same pebble)
// still opens and reads all of it.
func TestIndexFormatUpgrade(t *testing.T) {
	cfg := testConfig(t)
	cfg.InlineMax = embedMax // 4 KiB bodies embedded in their records
	legacy := cfg
	legacy.legacyIndex = true
	s := openStore(t, legacy)
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	model := versionedFixture(t, s, 20, 1<<40)
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if f := indexFormatOf(t, cfg.Dir); f >= indexFormat {
		t.Fatalf("the legacy index is at format %v already", f)
	}

	s = openStore(t, cfg)
	if f := indexFormatOf(t, cfg.Dir); f != indexFormat {
		t.Fatalf("index format after open: %v, want %v", f, indexFormat)
	}
	waitCounted(t, s)
	checkVersions(t, s, model, true)
	// New versions of every key: the versions they supersede are noncurrent records with
	// 4 KiB bodies, which the flush writes to blob files.
	for k, vs := range versionedFixture(t, s, 20, 1<<41) {
		model[k] = append(vs, model[k]...)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if m := s.db.Metrics(); m.BlobFiles.LiveCount == 0 {
		t.Fatal("no blob file after a flush of noncurrent versions")
	}
	checkVersions(t, s, model, true)
	// A compaction of everything carries the blob references (or rewrites the values);
	// either way every version reads back.
	if err := s.db.Compact(context.Background(), []byte("A"), []byte("Z"), true); err != nil {
		t.Fatal(err)
	}
	checkVersions(t, s, model, true)
	s.Close()

	// The previous build's layout on the new index: values in blob files still read.
	s = openStore(t, legacy)
	waitCounted(t, s)
	checkVersions(t, s, model, true)
	s.Close()
	s = openStore(t, cfg)
	waitCounted(t, s)
	checkVersions(t, s, model, false)
}

// TestDamagedBlobFile flips bytes in the blob files that hold noncurrent versions: reads
// of those versions, listings of versions and scans fail with Corrupt errors (the gateway
// reads another replica), reads of current versions still work, and the store reports
// itself damaged.
func TestDamagedBlobFile(t *testing.T) {
	cfg := testConfig(t)
	cfg.InlineMax = embedMax
	s := openStore(t, cfg)
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	model := versionedFixture(t, s, 20, 1<<40)
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	blobs, _ := filepath.Glob(filepath.Join(cfg.Dir, "index", "*.blob"))
	if len(blobs) == 0 {
		t.Fatal("no blob file after a flush of noncurrent versions")
	}
	for _, p := range blobs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, at := range []int{len(b) / 8, len(b) / 4, len(b) / 3} {
			b[at] ^= 0xff
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s = openStore(t, cfg)
	waitCounted(t, s)
	corrupt := 0
	for key, vs := range model {
		if got := readAll(t, s, "b", key); !bytes.Equal(got, vs[0].body) {
			t.Fatalf("current version of %s: %d bytes, want %d", key, len(got), len(vs[0].body))
		}
		for _, v := range vs[1:] {
			r, err := s.OpenVersion("b", key, v.hlc)
			if err != nil {
				if !errors.Is(errors.Corrupt, err) {
					t.Fatalf("read of %s@%d from a damaged blob file: %v (kind %v), want Corrupt", key, v.hlc, err, errors.KindOf(err))
				}
				corrupt++
				continue
			}
			var buf bytes.Buffer
			_, err = r.WriteRange(context.Background(), &buf, 0, r.Object.Size)
			r.Close()
			if err != nil || !bytes.Equal(buf.Bytes(), v.body) {
				t.Fatalf("read of %s@%d: %d bytes, %v", key, v.hlc, buf.Len(), err)
			}
		}
	}
	if corrupt == 0 {
		t.Fatal("no read of a noncurrent version hit the flipped bytes")
	}
	if _, err := s.ListVersions("b", object.VersionListOptions{Max: 1000}); !errors.Is(errors.Corrupt, err) {
		t.Fatalf("listing of versions over a damaged blob file: %v, want Corrupt", err)
	}
	if err := s.ScanVersions(nil, func(object.VersionEntry) error { return nil }); !errors.Is(errors.Corrupt, err) {
		t.Fatalf("scan of versions over a damaged blob file: %v, want Corrupt", err)
	}
	if files, reads := s.Damaged(); len(files) == 0 || reads == 0 {
		t.Fatalf("Damaged() = %v, %d after %d corrupt reads", files, reads, corrupt)
	}
	if s.UsageComplete() {
		t.Fatal("the usage counted at open claims to be complete over a damaged blob file")
	}
}
