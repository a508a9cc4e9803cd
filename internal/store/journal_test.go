package store

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store/segment"
)

// jmodel is what a test expects of the mutable objects it writes through the journal:
// every state each object went through, in order.
type jmodel struct {
	size   int64
	max    int                 // the largest write (0: any size, some go to segments, synced)
	states map[string][][]byte // by key: states[0] is "never written" (nil)
	orders map[string][]uint64
}

func newJModel(size int64, keys ...string) *jmodel {
	m := &jmodel{size: size, states: map[string][][]byte{}, orders: map[string][]uint64{}}
	for _, k := range keys {
		m.states[k] = [][]byte{nil}
		m.orders[k] = []uint64{0}
	}
	return m
}

// write sends one random unsynced range write of key (inline, chunked or a hole) and
// records the state it leaves.
func (m *jmodel) write(t *testing.T, s *Store, rng *rand.Rand, key string) object.RangeWrite {
	t.Helper()
	st := m.states[key]
	cur := st[len(st)-1]
	next := make([]byte, m.size)
	copy(next, cur)
	n := int64(1 + rng.IntN(40<<10))
	if rng.IntN(4) == 0 {
		n = int64(1 + rng.IntN(int(m.size)))
	}
	if m.max > 0 {
		n = min(n, int64(m.max))
	}
	off := rng.Int64N(m.size - n + 1)
	prev := m.orders[key][len(m.orders[key])-1]
	w := object.RangeWrite{Bucket: "vol", Key: key, Size: m.size, Off: off, Prev: prev, Next: prev + 1 + uint64(rng.IntN(3)), Unsynced: true}
	if rng.IntN(8) == 0 && prev != 0 {
		w.Len = n
		clear(next[off : off+n])
	} else {
		w.Data = randBytes(rng.Uint64(), int(n))
		copy(next[off:], w.Data)
	}
	if _, err := s.WriteRange(context.Background(), w); err != nil {
		t.Fatalf("write %s [%d, +%d): %v", key, off, n, err)
	}
	m.states[key] = append(st, next)
	m.orders[key] = append(m.orders[key], w.Next)
	return w
}

// state returns the index of the state key is in on s (-1: none of them).
func (m *jmodel) state(t *testing.T, s *Store, key string) int {
	t.Helper()
	o, err := s.StatVersion("vol", key)
	if err != nil || o.Deleted {
		if m.states[key][0] == nil {
			return 0
		}
		return -1
	}
	got := readAll(t, s, "vol", key)
	for i := len(m.states[key]) - 1; i > 0; i-- {
		if m.orders[key][i] == o.HLC {
			if bytes.Equal(got, m.states[key][i]) {
				return i
			}
			return -1 // the order of state i with other bytes: garbage
		}
	}
	return -1
}

func journalConfig(fs vfs.FS, logs *testLogs) Config {
	cfg := crashConfig(fs, logs)
	cfg.JournalSize = 2 << 20 // small: writes wait for the applier now and then
	return cfg
}

// TestJournalPowerCut writes random unsynced range writes (those up to InlineMax through
// the volume journal, larger ones synced)
// while its applier runs, syncs the journal now and then (FLUSH), and cuts power at
// random instants (crash clones of the file system that keep only what was synced, or
// that and a random share of the rest). After each cut the store opens, replays its
// journal, and every object is in a state it went through, never older than the state
// at the last sync before the cut, and byte for byte that state; reads during the
// writing see each object's newest bytes.
func TestJournalPowerCut(t *testing.T) {
	defer func(v int64) { jnlFileSize = v }(jnlFileSize)
	jnlFileSize = 256 << 10 // many files: switching and deleting them is exercised
	seeds := uint64(4)      // make test runs all four without the race detector (test-long), one under it
	if raceBuild || testing.Short() {
		seeds = 1
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			logs := &testLogs{}
			fs := vfs.NewCrashableMem()
			s, err := Open(journalConfig(fs, logs))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.CreateBucket("vol"); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(seed, 99))
			keys := []string{"a", "b", "c", "d"}
			m := newJModel(256<<10, keys...)
			flushed := map[string]int{}
			for round := range 6 {
				for range 40 + rng.IntN(60) {
					k := keys[rng.IntN(len(keys))]
					m.write(t, s, rng, k)
					if rng.IntN(10) == 0 {
						if got := m.state(t, s, k); got != len(m.states[k])-1 {
							t.Fatalf("round %d: a read of %s during the writing sees state %d of %d", round, k, got, len(m.states[k])-1)
						}
					}
					if rng.IntN(25) == 0 {
						if err := s.SyncJournal(); err != nil {
							t.Fatal(err)
						}
						for _, k := range keys {
							flushed[k] = len(m.states[k]) - 1
						}
					}
				}
				ccfg := vfs.CrashCloneCfg{}
				if rng.IntN(2) == 0 {
					ccfg = vfs.CrashCloneCfg{UnsyncedDataPercent: 10 + rng.IntN(80), RNG: rand.New(rand.NewPCG(rng.Uint64(), 1))}
				}
				atCut := copyCounts(flushed)
				clone := fs.CrashClone(ccfg)
				c, err := Open(journalConfig(clone, logs))
				if err != nil {
					t.Fatalf("round %d: open after the power cut: %v", round, err)
				}
				for _, k := range keys {
					got := m.state(t, c, k)
					if got < 0 {
						t.Fatalf("round %d: after the power cut %s is in no state it went through (garbage)", round, k)
					}
					if got < atCut[k] {
						t.Fatalf("round %d: after the power cut %s is at state %d, older than %d, which was flushed\n%s", round, k, got, atCut[k], logs.String())
					}
				}
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func copyCounts(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// TestJournalTornTail: a journal file cut at random offsets (its applier held, so the
// index has none of its writes) replays exactly the records wholly before the cut, in
// order; a flipped byte stops the replay at its record.
func TestJournalTornTail(t *testing.T) {
	logs := &testLogs{}
	fs := vfs.NewCrashableMem()
	s, err := Open(journalConfig(fs, logs))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.jnl.hold.Store(true)
	if err := s.CreateBucket("vol"); err != nil {
		t.Fatal(err)
	}
	// The bucket must be durable without the journal: a synced write elsewhere.
	if _, err := s.WriteRange(context.Background(), object.RangeWrite{Bucket: "vol", Key: "z", Size: 4096, Data: make([]byte, 10), Next: 1}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	keys := []string{"a", "b"}
	m := newJModel(128<<10, keys...)
	m.max = s.cfg.InlineMax // every write journaled
	var order []string      // the key of each journal record
	for range 30 {
		k := keys[rng.IntN(len(keys))]
		m.write(t, s, rng, k)
		order = append(order, k)
	}
	if err := s.SyncJournal(); err != nil {
		t.Fatal(err)
	}
	base := fs.CrashClone(vfs.CrashCloneCfg{})
	names, err := base.List("/data/journal")
	if err != nil {
		t.Fatal(err)
	}
	var name string
	for _, n := range names {
		if len(n) > 4 && n[len(n)-4:] == ".jnl" {
			name = base.PathJoin("/data/journal", n)
		}
	}
	whole, err := readJournalFile(base, name)
	if err != nil {
		t.Fatal(err)
	}
	var ends []int // where each record ends
	for p := jnlHeaderSize; p < len(whole); {
		_, n, err := decodeJournalRecord(whole[p:], jnlVersion)
		if err != nil {
			t.Fatalf("record at %d of %d (%d found, length field %x): %v", p, len(whole), len(ends), whole[p:p+8], err)
		}
		p += n
		ends = append(ends, p)
	}
	if len(ends) != len(order) {
		t.Fatalf("%d records in the journal, %d writes", len(ends), len(order))
	}
	check := func(what string, content []byte, complete int) {
		t.Helper()
		// A clone of the live file system each time (its applier is held: nothing moves).
		c := fs.CrashClone(vfs.CrashCloneCfg{})
		f, err := c.Create(name, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		// A copy: under -race pebble's memory file system flips the bytes it was given
		// after writing them (its invariants check that callers do not reuse them).
		if _, err := f.Write(slices.Clone(content)); err != nil {
			t.Fatal(err)
		}
		f.Sync()
		f.Close()
		st, err := Open(journalConfig(c, logs))
		if err != nil {
			t.Fatalf("%s: open: %v", what, err)
		}
		defer st.Close()
		want := map[string]int{}
		for _, k := range order[:complete] {
			want[k]++
		}
		for _, k := range keys {
			if got := m.state(t, st, k); got != want[k] {
				t.Fatalf("%s: %s is at state %d, want %d (%d whole records)\n%s", what, k, got, want[k], complete, logs.String())
			}
		}
	}
	for i := range 12 {
		cut := jnlHeaderSize + rng.IntN(len(whole)-jnlHeaderSize+1)
		if i == 0 {
			cut = len(whole)
		}
		complete := 0
		for complete < len(ends) && ends[complete] <= cut {
			complete++
		}
		check(fmt.Sprintf("cut at %d", cut), whole[:cut], complete)
	}
	// A damaged byte inside record 10: records 0-9 replay, nothing after.
	bad := slices.Clone(whole)
	bad[ends[9]+20] ^= 0x40
	check("flipped byte", bad, 10)
}

// FuzzJournalRecord: the decoder never panics, and what it accepts encodes back to the
// same bytes; a version 1 file's decoder refuses a record referencing chunks.
func FuzzJournalRecord(f *testing.F) {
	for _, r := range journalRecordSeeds() {
		f.Add(encodeJournalRecord(nil, &r))
	}
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 0, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, v := range []uint32{1, 2} {
			r, n, err := decodeJournalRecord(b, v)
			if err != nil {
				continue
			}
			if v == 1 && r.bd != nil {
				t.Fatalf("a version 1 decoder accepted a record referencing chunks")
			}
			if again := encodeJournalRecord(nil, r); !bytes.Equal(again, b[:n]) {
				t.Fatalf("decoded %+v, which encodes to other bytes", r)
			}
		}
	})
}

func journalRecordSeeds() []jrec {
	id := func(b byte) object.ChunkID { return object.ChunkID{b, 1, 2, 3} }
	return []jrec{
		{seq: 1, w: object.RangeWrite{Bucket: "_volumes", Key: "v/0000000000000001", Size: 4 << 20, Off: 4096, Data: []byte("hello"), Prev: 0, Next: 1 << 40}},
		{seq: 9, w: object.RangeWrite{Bucket: "b", Key: "k", Size: 100, Off: 10, Len: 90, Prev: 3, Next: 4}},
		{seq: 12, w: object.RangeWrite{Bucket: "_volumes", Key: "v/0000000000000002", Size: 4 << 20, Off: 1 << 20, Len: 96 << 10, Prev: 7, Next: 8},
			bd: &body{size: 96 << 10, chunks: []object.Chunk{{ID: id(1), Size: 64 << 10}, {ID: id(2), Size: 32 << 10}},
				locs: []segment.Loc{{Seg: 3, Off: 4096, Len: 64 << 10}, {Seg: 4, Off: 0, Len: 32 << 10}}}},
	}
}

// TestJournalRecordVersions: each kind of record decodes back to itself from a version 2
// file; a version 1 file's records (data and holes) still decode, one referencing chunks
// does not.
func TestJournalRecordVersions(t *testing.T) {
	for _, r := range journalRecordSeeds() {
		t.Run(fmt.Sprint("seq", r.seq), func(t *testing.T) {
			b := encodeJournalRecord(nil, &r)
			got, n, err := decodeJournalRecord(b, 2)
			if err != nil || n != len(b) {
				t.Fatalf("version 2: %v (%d of %d bytes)", err, n, len(b))
			}
			if got.seq != r.seq || got.w.Length() != r.w.Length() || (got.bd == nil) != (r.bd == nil) {
				t.Fatalf("decoded %+v, want %+v", got, r)
			}
			if r.bd != nil && (!slices.Equal(got.bd.chunks, r.bd.chunks) || !slices.Equal(got.bd.locs, r.bd.locs)) {
				t.Fatalf("chunks %v at %v, want %v at %v", got.bd.chunks, got.bd.locs, r.bd.chunks, r.bd.locs)
			}
			_, _, err = decodeJournalRecord(b, 1)
			if (err != nil) != (r.bd != nil) {
				t.Fatalf("version 1: %v", err)
			}
		})
	}
}

// TestJournalTornChunks: a journal record of a large write references chunks appended
// unsynced to segments. When the journal reached the disk but those segment bytes did not
// (the journal file whole, the segments as of the last sync), replay applies exactly the
// records before the first one whose chunks are not whole and nothing after it; a chunk
// damaged on disk stops the replay at its record the same way. The applier is held, so
// the index has none of the journaled writes.
func TestJournalTornChunks(t *testing.T) {
	logs := &testLogs{}
	fs := vfs.NewCrashableMem()
	cfg := func(fs vfs.FS) Config {
		c := journalConfig(fs, logs)
		c.JournalSize = 64 << 20 // the applier is held: every write stays in the journal
		return c
	}
	s, err := Open(cfg(fs))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.jnl.hold.Store(true)
	if err := s.CreateBucket("vol"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteRange(context.Background(), object.RangeWrite{Bucket: "vol", Key: "z", Size: 4096, Data: make([]byte, 10), Next: 1}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	keys := []string{"a", "b"}
	m := newJModel(512<<10, keys...)
	var order []string           // the key of each journal record
	var large []int              // the records referencing chunks
	var firstChunk []segment.Loc // of each record referencing chunks
	write := func(n int) {
		for range n {
			k := keys[rng.IntN(len(keys))]
			w := m.write(t, s, rng, k)
			if len(w.Data) > s.cfg.InlineMax {
				large = append(large, len(order))
				j := s.jnl
				j.mu.Lock()
				firstChunk = append(firstChunk, j.queue[len(j.queue)-1].bd.locs[0])
				j.mu.Unlock()
			}
			order = append(order, k)
		}
	}
	write(30)
	if err := s.SyncJournal(); err != nil {
		t.Fatal(err)
	}
	synced := len(order)
	syncedLarge := len(large)
	write(30)
	for len(large) == syncedLarge { // at least one large write after the sync
		write(5)
	}
	if syncedLarge == 0 {
		t.Fatal("no large write before the sync: change the seed")
	}
	name := s.jnl.files[len(s.jnl.files)-1].name
	whole, err := readJournalFile(fs, name) // the live file, synced or not
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, damage func(c *vfs.MemFS), complete int) {
		t.Helper()
		c := fs.CrashClone(vfs.CrashCloneCfg{}) // what was synced
		f, err := c.Create(name, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(slices.Clone(whole)); err != nil { // the journal, whole
			t.Fatal(err)
		}
		f.Sync()
		f.Close()
		if damage != nil {
			damage(c)
		}
		st, err := Open(cfg(c))
		if err != nil {
			t.Fatalf("%s: open: %v", what, err)
		}
		defer st.Close()
		want := map[string]int{}
		for _, k := range order[:complete] {
			want[k]++
		}
		for _, k := range keys {
			if got := m.state(t, st, k); got != want[k] {
				t.Fatalf("%s: %s is at state %d, want %d (%d records replayed)\n%s", what, k, got, want[k], complete, logs.String())
			}
		}
		// The store takes writes again after the dropped tail, and they survive a restart.
		if _, err := st.WriteRange(context.Background(), object.RangeWrite{Bucket: "vol", Key: "z", Size: 4096, Data: make([]byte, 200<<10)[:4096], Prev: 1, Next: 2, Unsynced: true}); err != nil {
			t.Fatalf("%s: a write after the replay: %v", what, err)
		}
	}
	check("segments as of the sync", nil, large[syncedLarge])
	// A chunk of a synced record damaged on disk: the replay stops at that record.
	victim := syncedLarge / 2
	check("damaged chunk", func(c *vfs.MemFS) {
		l := firstChunk[victim]
		path := c.PathJoin("/data/segments", fmt.Sprintf("%08d.seg", l.Seg))
		f, err := c.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, l.Off+segment.HeaderSize+7); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0x10
		if _, err := f.WriteAt(b, l.Off+segment.HeaderSize+7); err != nil {
			t.Fatal(err)
		}
		f.Sync()
		f.Close()
	}, large[victim])
	if large[victim] >= synced {
		t.Fatal("the damaged chunk is not of a synced record")
	}
	// SIGKILL (every byte written kept, in the page cache), the replay, then a power cut
	// at once: every write is there, its chunks synced before replay referenced them.
	k := pageCacheClone(t, fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 2))}), "/data/segments")
	ks, err := Open(cfg(k))
	if err != nil {
		t.Fatal(err)
	}
	defer ks.Close()
	cut := k.CrashClone(vfs.CrashCloneCfg{})
	cs, err := Open(cfg(cut))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, key := range keys {
		if got, want := m.state(t, cs, key), len(m.states[key])-1; got != want {
			t.Fatalf("SIGKILL, replay, power cut: %s is at state %d, want %d\n%s", key, got, want, logs.String())
		}
	}
}

// pageCacheClone copies src into a new crashable file system, every file synced except
// those under unsynced (their bytes as if in the page cache only: a SIGKILL's state,
// which a power cut then loses unless they are synced).
func pageCacheClone(t *testing.T, src *vfs.MemFS, unsynced string) *vfs.MemFS {
	t.Helper()
	dst := vfs.NewCrashableMem()
	var walk func(dir string)
	walk = func(dir string) {
		if err := dst.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		names, err := src.List(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			path := src.PathJoin(dir, n)
			st, err := src.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.IsDir() {
				walk(path)
				continue
			}
			b, err := readJournalFile(src, path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := dst.Create(path, vfs.WriteCategoryUnspecified)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(b); err != nil {
				t.Fatal(err)
			}
			if dir != unsynced {
				if err := f.Sync(); err != nil {
					t.Fatal(err)
				}
			}
			f.Close()
		}
		d, err := dst.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		d.Sync()
		d.Close()
	}
	walk("/")
	return dst
}
