package segment

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/internal/errors"
)

func open(t *testing.T, max int64) *Set {
	t.Helper()
	s, err := Open(Config{Dir: t.TempDir(), MaxSize: max})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func payload(seed, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(seed), 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestAppendReadConcurrent(t *testing.T) {
	s := open(t, 1<<20)
	type rec struct {
		id   ID
		loc  Loc
		data []byte
	}
	var mu sync.Mutex
	var recs []rec
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				n := []int{0, 1, 100, 70 << 10, 200 << 10}[i%5]
				data := payload(w*1000+i, n)
				id := ID{byte(w), byte(i)}
				var loc Loc
				var err error
				if n >= 64<<10 {
					buf := AlignedBuffer(AlignedSize(n))
					copy(buf[HeaderSize:], data)
					loc, err = s.AppendAligned(KindChunk, id, buf, n)
				} else {
					loc, err = s.Append(KindChunk, id, data)
				}
				if err != nil {
					t.Error(err)
					return
				}
				if err := s.Sync(loc.Seg); err != nil {
					t.Error(err)
				}
				s.Done(loc.Seg)
				mu.Lock()
				recs = append(recs, rec{id, loc, data})
				mu.Unlock()
			}
		}(w)
	}
	// Groups of records in one write (AppendAlignedRecords), among the appends above.
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				sizes := [][]int{{64 << 10}, {64 << 10, 64 << 10, 64 << 10}, {1, 70 << 10, 0, 4096}}[i%3]
				total := 0
				for _, n := range sizes {
					total += AlignedSize(n)
				}
				buf := AlignedBuffer(total)
				ids := make([]ID, len(sizes))
				datas := make([][]byte, len(sizes))
				at := 0
				for j, n := range sizes {
					ids[j] = ID{0x80 | byte(w), byte(i), byte(j)}
					datas[j] = payload(1e6+w*1000+i*10+j, n)
					copy(buf[at+HeaderSize:], datas[j])
					at += AlignedSize(n)
				}
				var crcs []uint32 // every other group passes its checksums in, as the store does
				if i%2 == 1 {
					for _, d := range datas {
						crcs = append(crcs, crc32.Checksum(d, castagnoli))
					}
				}
				locs, err := s.AppendAlignedRecords(KindChunk, ids, sizes, crcs, buf)
				if err != nil {
					t.Error(err)
					return
				}
				if err := s.Sync(locs[0].Seg); err != nil {
					t.Error(err)
				}
				mu.Lock()
				for j, l := range locs {
					if l.Seg != locs[0].Seg {
						t.Errorf("a group's records in segments %d and %d", locs[0].Seg, l.Seg)
					}
					s.Done(l.Seg)
					recs = append(recs, rec{ids[j], l, datas[j]})
				}
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	if _, err := s.AppendAlignedRecords(KindChunk, []ID{{1}}, []int{64 << 10}, nil, AlignedBuffer(4096)); !errors.Is(errors.Invalid, err) {
		t.Fatalf("a buffer shorter than the records: %v", err)
	}
	if _, err := s.AppendAlignedRecords(KindChunk, []ID{{1}}, []int{100}, []uint32{1, 2}, AlignedBuffer(4096)); !errors.Is(errors.Invalid, err) {
		t.Fatalf("more checksums than records: %v", err)
	}
	// A checksum passed in is the one written: a wrong one fails the record's read.
	bad := AlignedBuffer(AlignedSize(100))
	copy(bad[HeaderSize:], payload(7, 100))
	locs, err := s.AppendAlignedRecords(KindChunk, []ID{{2}}, []int{100}, []uint32{crc32.Checksum(bad[HeaderSize:HeaderSize+100], castagnoli) ^ 1}, bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(locs[0].Seg); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(locs[0], ID{2}, nil); !errors.Is(errors.Corrupt, err) {
		t.Fatalf("a record written with a wrong checksum read back: %v", err)
	}
	s.Done(locs[0].Seg)
	if len(s.Segments()) < 2 {
		t.Fatal("segments did not roll")
	}
	for _, r := range recs {
		got, err := s.Read(r.loc, r.id, nil)
		if err != nil {
			t.Fatalf("read %v: %v", r.loc, err)
		}
		if !bytes.Equal(got, r.data) {
			t.Fatalf("record %v differs", r.loc)
		}
		if (r.loc.Len >= 64<<10 || r.id[0]&0x80 != 0) && r.loc.Off%Alignment != 0 {
			t.Fatalf("large record at unaligned offset %d", r.loc.Off)
		}
	}
	for _, in := range s.Segments() {
		if in.Pending != 0 {
			t.Fatalf("segment %d has %d pending appends", in.ID, in.Pending)
		}
	}
	// Wrong id or length is corruption, not data.
	r := recs[0]
	if _, err := s.Read(r.loc, ID{0xff}, nil); !errors.Is(errors.Corrupt, err) {
		t.Fatalf("wrong id: %v", err)
	}
}

func TestCorruptionDetected(t *testing.T) {
	s := open(t, 1<<20)
	data := payload(1, 5000)
	loc, err := s.Append(KindChunk, ID{1}, data)
	if err != nil {
		t.Fatal(err)
	}
	s.Sync(loc.Seg)
	for _, off := range []int64{0, 10, 30, HeaderSize + 100, HeaderSize + 4999} {
		t.Run(fmt.Sprint(off), func(t *testing.T) {
			f, _ := os.OpenFile(s.Path(loc.Seg), os.O_RDWR, 0)
			var b [1]byte
			f.ReadAt(b[:], loc.Off+off)
			b[0] ^= 1
			f.WriteAt(b[:], loc.Off+off)
			defer func() { b[0] ^= 1; f.WriteAt(b[:], loc.Off+off); f.Close() }()
			if _, err := s.Read(loc, ID{1}, nil); !errors.Is(errors.Corrupt, err) {
				t.Fatalf("flip at %d: %v", off, err)
			}
		})
	}
	if got, err := s.Read(loc, ID{1}, nil); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("restored record: %v", err)
	}
}

func TestRemoveWhileReading(t *testing.T) {
	s := open(t, 4096)
	loc, _ := s.Append(KindChunk, ID{1}, payload(1, 5000))
	s.Sync(loc.Seg)
	s.Done(loc.Seg)
	// Roll so that the segment is sealed.
	if err := s.Roll(); err != nil {
		t.Fatal(err)
	}
	sf, err := s.acquire(loc.Seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(loc.Seg); err != nil {
		t.Fatal(err)
	}
	// The reader that holds the file can still read it; new reads cannot.
	var hdr [HeaderSize]byte
	if _, err := sf.f.ReadAt(hdr[:], loc.Off); err != nil {
		t.Fatalf("held file unreadable after remove: %v", err)
	}
	s.release(sf)
	if _, err := s.Read(loc, ID{1}, nil); !errors.Is(errors.NotExist, err) {
		t.Fatalf("read after remove: %v", err)
	}
	if err := s.Remove(s.Active()); err == nil {
		t.Fatal("removed the active segment")
	}
}

// fullFS is the OS file system whose files' writes fail with ENOSPC once full is set.
type fullFS struct {
	FS
	full *atomic.Bool
}

func (f fullFS) Create(name string) (File, error) {
	file, err := f.FS.Create(name)
	return fullFile{file, f.full}, err
}

type fullFile struct {
	File
	full *atomic.Bool
}

func (f fullFile) WriteVec(off int64, bufs ...[]byte) error {
	if f.full.Load() {
		return unix.ENOSPC
	}
	return f.File.WriteVec(off, bufs...)
}

// A group of records that the disk refuses is a NoSpace error, references nothing (no
// append left pending), and the set goes on appending once there is room.
func TestAppendAlignedRecordsDiskFull(t *testing.T) {
	var full atomic.Bool
	s, err := Open(Config{Dir: t.TempDir(), MaxSize: 1 << 20, FS: fullFS{OS, &full}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sizes := []int{64 << 10, 64 << 10}
	buf := AlignedBuffer(2 * AlignedSize(64<<10))
	ids := []ID{{1}, {2}}
	full.Store(true)
	if _, err := s.AppendAlignedRecords(KindChunk, ids, sizes, nil, buf); !errors.Is(errors.NoSpace, err) {
		t.Fatalf("a group on a full disk: %v, want NoSpace", err)
	}
	for _, in := range s.Segments() {
		if in.Pending != 0 {
			t.Fatalf("segment %d has %d pending appends after a refused group", in.ID, in.Pending)
		}
	}
	full.Store(false)
	data := payload(7, 64<<10)
	copy(buf[HeaderSize:], data)
	copy(buf[AlignedSize(64<<10)+HeaderSize:], data)
	locs, err := s.AppendAlignedRecords(KindChunk, ids, sizes, nil, buf)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range locs {
		got, err := s.Read(l, ids[i], nil)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("record %d after the disk had room again: %v", i, err)
		}
		s.Done(l.Seg)
	}
}
