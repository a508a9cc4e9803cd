package segment

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
)

// spareFiles lists the spare files in dir.
func spareFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), spareSuffix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// Removed segments are kept as spares only while none is being read, up to Config.Spares
// and if large enough; a new segment reuses one: its records read back, the older life's
// bytes past them do not, and spares survive a reopen (or go, if spares are off).
func TestSpares(t *testing.T) {
	dir := t.TempDir()
	const max = 64 << 10
	seals := 0
	s, err := Open(Config{Dir: dir, MaxSize: max, Spares: 2, OnSeal: func() { seals++ }})
	if err != nil {
		t.Fatal(err)
	}
	// Segments 1-4 hold one 40 KiB record each, segment 5 a small one.
	type rec struct {
		id  ID
		loc Loc
	}
	var recs []rec
	for i := range 5 {
		n := 40 << 10
		if i == 4 {
			n = 100
		}
		id := ID{byte(i + 1)}
		loc, err := s.Append(KindChunk, id, payload(i, n))
		if err != nil {
			t.Fatal(err)
		}
		s.Done(loc.Seg)
		if err := s.Sync(loc.Seg); err != nil {
			t.Fatal(err)
		}
		if err := s.Roll(); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec{id, loc})
	}
	if seals != 5 {
		t.Fatalf("OnSeal called %d times for 5 rolls", seals)
	}
	// A segment being read is unlinked, not kept: its reader may still read it.
	held, err := s.acquire(recs[0].loc.Seg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := s.Remove(r.loc.Seg); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := held.f.ReadAt(make([]byte, HeaderSize), recs[0].loc.Off); err != nil {
		t.Fatalf("a held segment unreadable after Remove: %v", err)
	}
	s.release(held)
	// Segment 1 was held, 5 is too small: 2 and 3 are the spares, 4 found the pool full.
	if got, want := spareFiles(t, dir), []string{"00000002.spare", "00000003.spare"}; !slices.Equal(got, want) {
		t.Fatalf("spare files %v, want %v", got, want)
	}
	if n, bytes := s.Spares(); n != 2 || bytes != 2*int64(HeaderSize+40<<10) {
		t.Fatalf("Spares() = %d, %d", n, bytes)
	}
	for _, r := range recs {
		if _, err := s.Read(r.loc, r.id, nil); !errors.Is(errors.NotExist, err) {
			t.Fatalf("read of a removed segment's record: %v, want NotExist", err)
		}
	}

	// The next segment reuses a spare: its file is the spare's, renamed, with the older
	// life's bytes still in it past the new record.
	active := s.Active()
	small := payload(99, 10)
	loc, err := s.Append(KindChunk, ID{99}, small)
	if err != nil {
		t.Fatal(err)
	}
	s.Done(loc.Seg)
	if err := s.Roll(); err != nil {
		t.Fatal(err)
	}
	reused := s.Active()
	if reused == active {
		t.Fatal("Roll did not start a new segment")
	}
	if got := spareFiles(t, dir); len(got) != 1 {
		t.Fatalf("spare files after a roll: %v, want one", got)
	}
	st, err := os.Stat(filepath.Join(dir, name(reused)))
	if err != nil || st.Size() != int64(HeaderSize+40<<10) {
		t.Fatalf("the reused file: %v, size %d", err, st.Size())
	}
	if in := s.Segments(); in[len(in)-1].ID != reused || in[len(in)-1].Size != 0 {
		t.Fatalf("the reused segment's info: %+v, want size 0", in[len(in)-1])
	}
	data := payload(7, 1000)
	loc, err = s.Append(KindChunk, ID{7}, data)
	if err != nil {
		t.Fatal(err)
	}
	s.Done(loc.Seg)
	if err := s.Sync(loc.Seg); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Read(loc, ID{7}, nil); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("a record in a reused file: %v", err)
	}
	// The older life's record is still at offset 0 of the file, past this life's end:
	// no read returns it.
	stale := Loc{Seg: reused, Off: 0, Len: 40 << 10}
	if loc.Off != 0 {
		t.Fatalf("first record of the reused segment at %d", loc.Off)
	}
	stale.Off = loc.End()
	if _, err := s.Read(stale, ID{3}, nil); !errors.Is(errors.Corrupt, err) {
		t.Fatalf("read past a reused segment's records: %v, want Corrupt", err)
	}
	if err := s.ReadPayload(Loc{Seg: reused, Off: loc.End(), Len: 100}, 0, make([]byte, 100)); !errors.Is(errors.Corrupt, err) {
		t.Fatalf("ReadPayload past a reused segment's records: %v, want Corrupt", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// A reopen keeps the spare; new segments are numbered after every file, spares too.
	s, err = Open(Config{Dir: dir, MaxSize: max, Spares: 2})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Spares(); n != 0 {
		// The reopen's new active segment took the one spare.
		t.Fatalf("%d spares after a reopen that rolled into the only one", n)
	}
	if got := spareFiles(t, dir); len(got) != 0 {
		t.Fatalf("spare files %v after the reopen's roll", got)
	}
	if a := s.Active(); a <= reused {
		t.Fatalf("active segment %d after reopen, want above %d", a, reused)
	}
	got, err := s.Read(loc, ID{7}, nil)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("record after reopen: %v", err)
	}
	// At a reopen a reused segment's size is its file's (the older life's bytes too):
	// the store truncates it to its records. Cut so, it is too small to be kept.
	if err := s.Truncate(reused, loc.End()); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(reused); err != nil {
		t.Fatal(err)
	}
	if got := spareFiles(t, dir); len(got) != 0 {
		t.Fatalf("a segment of 1 KiB was kept as a spare: %v", got)
	}
	s.Close()
}

// DropSpares removes the spare files and reports their bytes; a reopen with spares off
// removes any left.
func TestDropSpares(t *testing.T) {
	dir := t.TempDir()
	const max = 64 << 10
	s, err := Open(Config{Dir: dir, MaxSize: max, Spares: 3})
	if err != nil {
		t.Fatal(err)
	}
	var segs []uint32
	for i := range 3 {
		loc, err := s.Append(KindChunk, ID{byte(i)}, payload(i, 50<<10))
		if err != nil {
			t.Fatal(err)
		}
		s.Done(loc.Seg)
		if err := s.Roll(); err != nil {
			t.Fatal(err)
		}
		segs = append(segs, loc.Seg)
	}
	for _, seg := range segs {
		if err := s.Remove(seg); err != nil {
			t.Fatal(err)
		}
	}
	if got := spareFiles(t, dir); len(got) != 3 {
		t.Fatalf("spare files %v, want 3", got)
	}
	freed, err := s.DropSpares()
	if err != nil || freed != 3*int64(HeaderSize+50<<10) {
		t.Fatalf("DropSpares = %d, %v", freed, err)
	}
	if got := spareFiles(t, dir); len(got) != 0 {
		t.Fatalf("spare files %v after DropSpares", got)
	}
	// Rolls after it create files again.
	if err := s.Roll(); err != nil {
		t.Fatal(err)
	}
	loc, err := s.Append(KindChunk, ID{9}, payload(9, 50<<10))
	if err != nil {
		t.Fatal(err)
	}
	s.Done(loc.Seg)
	if err := s.Roll(); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(loc.Seg); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if got := spareFiles(t, dir); len(got) != 1 {
		t.Fatalf("spare files %v, want 1", got)
	}
	s, err = Open(Config{Dir: dir, MaxSize: max})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := spareFiles(t, dir); len(got) != 0 {
		t.Fatalf("a reopen with spares off left %v", got)
	}
}
