package volume

import (
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
)

// applyBackup applies a backup's records to base (grown to its size).
func applyBackup(t testing.TB, base []byte, b []byte) ([]byte, error) {
	out, _, err := applyBackupH(t, base, b)
	return out, err
}

func applyBackupH(t testing.TB, base []byte, b []byte) ([]byte, BackupHeader, error) {
	out := bytes.Clone(base)
	var h BackupHeader
	err := ReadBackupDigests(bytes.NewReader(b), func(hh BackupHeader) error {
		h = hh
		if int64(len(out)) < h.Size {
			out = append(out, make([]byte, h.Size-int64(len(out)))...)
		}
		return nil
	}, func(i int64, sum [32]byte) error {
		// The base's digests are of the base's data objects.
		if sha256.Sum256(base[i*h.BlockSize:min((i+1)*h.BlockSize, int64(len(base)))]) != sum {
			return errors.Errorf("", errors.Invalid, "base digest %d differs", i)
		}
		return nil
	}, func(i, off int64, p []byte) error {
		copy(out[i*h.BlockSize+off:], p)
		return nil
	})
	return out, h, err
}

// testRefs are the base and the exported snapshot the test backups name.
var testRefs = [2]BackupRef{{"vm", "mon", "0123456789abcdef"}, {"vm", "tue", "fedcba9876543210"}}

// makeBackup diffs cur against base block by block, as cairn volume export --since.
func makeBackup(t testing.TB, base, cur []byte, bs int) []byte {
	return makeBackupV(t, BackupVersion, base, cur, bs)
}

func makeBackupV(t testing.TB, version int, base, cur []byte, bs int) []byte {
	var buf bytes.Buffer
	h := BackupHeader{Version: version, Size: int64(len(cur)), BlockSize: int64(bs)}
	if version >= 2 {
		h.BaseSize, h.Base, h.Of = int64(len(base)), testRefs[0], testRefs[1]
	}
	bw, err := NewBackupWriter(&buf, h)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i*bs < len(cur); i++ {
		c := cur[i*bs : min((i+1)*bs, len(cur))]
		var b []byte
		if i*bs < len(base) {
			b = base[i*bs : min((i+1)*bs, len(base))]
		}
		digested := false
		if err := DiffRuns(b, c, 512, func(off, n int) error {
			if version >= 2 && b != nil && !digested {
				digested = true
				if err := bw.BaseDigest(int64(i), sha256.Sum256(b)); err != nil {
					return err
				}
			}
			return bw.Record(int64(i), int64(off), c[off:off+n])
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := bw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestBackupRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name            string
		baseLen, curLen int
	}{{"same size", 64 << 10, 64 << 10}, {"grown", 40 << 10, 70<<10 + 512}, {"empty base", 0, 32 << 10}} {
		base := make([]byte, tc.baseLen)
		for i := range base {
			base[i] = byte(rng.IntN(4))
		}
		cur := make([]byte, tc.curLen)
		copy(cur, base)
		for range 5 {
			off := rng.IntN(tc.curLen - 100)
			for k := range 1 + rng.IntN(3000) {
				if off+k < len(cur) {
					cur[off+k] = byte(rng.Uint32())
				}
			}
		}
		// Version 2 names its base and what it produces; version 1 is still read.
		for _, v := range []int{2, 1} {
			b := makeBackupV(t, v, base, cur, 16<<10)
			got, h, err := applyBackupH(t, base, b)
			if err != nil || !bytes.Equal(got, cur) {
				t.Fatalf("%s, version %d: round trip: %v", tc.name, v, err)
			}
			want := BackupHeader{Version: v, Size: int64(tc.curLen), BlockSize: 16 << 10}
			if v == 2 {
				want.BaseSize, want.Base, want.Of = int64(tc.baseLen), testRefs[0], testRefs[1]
			}
			if h != want {
				t.Fatalf("%s, version %d: header %+v, want %+v", tc.name, v, h, want)
			}
			if hh, err := ReadBackupHeader(bytes.NewReader(b)); err != nil || hh != want {
				t.Fatalf("%s, version %d: ReadBackupHeader %+v, %v", tc.name, v, hh, err)
			}
		}
	}
	// Malformed backups are refused, never applied past their bounds.
	good := makeBackup(t, make([]byte, 8192), bytes.Repeat([]byte{1}, 8192), 4096)
	hdrLen := 40 + 6 + len(testRefs[0].Volume+testRefs[0].Snapshot+testRefs[0].Layer+testRefs[1].Volume+testRefs[1].Snapshot+testRefs[1].Layer)
	if _, err := applyBackup(t, make([]byte, 8192), good); err != nil {
		t.Fatal(err)
	}
	// Applied onto another base, the digests differ (what cairn volume import --onto checks).
	if _, err := applyBackup(t, bytes.Repeat([]byte{2}, 8192), good); err == nil {
		t.Error("the digests of another base matched")
	}
	for name, b := range map[string][]byte{
		"bad magic":   append([]byte("XAIRNVB\n"), good[8:]...),
		"truncated":   good[:len(good)-3],
		"no end":      good[:len(good)-16],
		"bad version": append(append(bytes.Clone(good[:8]), 0, 0, 0, 3), good[12:]...),
		"version 0":   append(append(bytes.Clone(good[:8]), 0, 0, 0, 0), good[12:]...),
		"cut header":  good[:45],
		// A name's length running into the records.
		"long name": append(bytes.Clone(good[:40]), append([]byte{200}, good[41:]...)...),
		// The first record's digest dropped: a record of a block the base has, unvouched.
		"no digest": append(bytes.Clone(good[:hdrLen]), good[hdrLen+48:]...),
	} {
		if _, err := applyBackup(t, nil, b); !errors.Is(errors.Invalid, err) {
			t.Errorf("%s: %v", name, err)
		}
	}
	var buf bytes.Buffer
	bw, _ := NewBackupWriter(&buf, BackupHeader{Size: 8192, BlockSize: 4096})
	if bw.Record(2, 0, []byte("x")) == nil || bw.Record(0, 4000, make([]byte, 100)) == nil {
		t.Error("a record out of bounds was written")
	}
	for _, h := range []BackupHeader{
		{Version: 1, Size: 8192, BlockSize: 4096, Base: testRefs[0]}, // version 1 names no base
		{Size: 8192, BlockSize: 4096, Of: BackupRef{Volume: string(make([]byte, 256))}},
		{Version: 3, Size: 8192, BlockSize: 4096},
	} {
		if _, err := NewBackupWriter(io.Discard, h); err == nil {
			t.Errorf("header %+v written", h)
		}
	}
}

// FuzzReadBackup: the reader never panics, never hands a record outside the volume's
// bounds, and what it accepts it accepts again after being written back.
func FuzzReadBackup(f *testing.F) {
	f.Add(makeBackup(f, make([]byte, 8192), bytes.Repeat([]byte{1}, 8192), 4096))
	f.Add(makeBackup(f, nil, []byte("hello world, a volume of 32 bytes"[:32]), 16))
	f.Add(makeBackupV(f, 1, make([]byte, 8192), bytes.Repeat([]byte{1}, 8192), 4096))
	f.Add([]byte(BackupMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h BackupHeader
		type rec struct {
			i, off int64
			p      []byte
		}
		var recs []rec
		err := ReadBackupDigests(bytes.NewReader(b), func(hh BackupHeader) error { h = hh; return nil }, func(i int64, sum [32]byte) error {
			recs = append(recs, rec{i, -1, sum[:]})
			return nil
		}, func(i, off int64, p []byte) error {
			if i*h.BlockSize+off+int64(len(p)) > h.Size || off+int64(len(p)) > h.BlockSize {
				t.Fatalf("record %d+%d (%d bytes) outside %+v", i, off, len(p), h)
			}
			recs = append(recs, rec{i, off, bytes.Clone(p)})
			return nil
		})
		if err != nil {
			return
		}
		var buf bytes.Buffer
		bw, err := NewBackupWriter(&buf, h)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.off < 0 {
				err = bw.BaseDigest(r.i, [32]byte(r.p))
			} else {
				err = bw.Record(r.i, r.off, r.p)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		bw.Close()
		if !bytes.Equal(buf.Bytes(), b[:buf.Len()]) {
			t.Fatal("written back differently")
		}
	})
}
