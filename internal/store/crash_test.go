package store

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

var (
	crashSeed = flag.Uint64("crash.seed", 0, "run TestPowerCut with this seed only")
	crashRuns = flag.Int("crash.runs", 0, "TestPowerCut runs (0: 60, 12 with -short, 3 with -race)")
)

// TestPowerCut cuts power under a random workload and checks what survives. Each run keeps
// a Store, index and segments, in one crashable memory file system (vfs.NewCrashableMem)
// and runs PUTs (embedded, inline, one chunk, multi-MiB), overwrites, deletes (with and
// without a tombstone), multipart uploads and compactions from several goroutines. While
// they run it takes crash clones of the file system (CrashClone: only what was synced
// survives, and in some runs a random share of what was not): from a goroutine at random
// moments, from inside a PUT's body reader mid-body, and once after everything returned.
// Each clone is opened as a store and checked against the history of operations:
//
//   - the store opens without error and logs no error;
//   - every key holds the value of the last operation on it acknowledged before the cut,
//     or of an operation that was in flight at the cut (each key's operations are
//     sequential), and nothing else: no key appears that was never written;
//   - every body reads back whole with verified checksums;
//   - the recovered store takes a write, compacts, and reopens with the same contents.
//
// A failure prints the seed; rerun it with -crash.seed=N.
func TestPowerCut(t *testing.T) {
	runs := *crashRuns
	if runs == 0 {
		// make test runs all 60 without the race detector (test-long) and 3 under it.
		runs = 60
		switch {
		case raceBuild:
			runs = 3
		case testing.Short():
			runs = 12
		}
	}
	seeds := make([]uint64, runs)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	if *crashSeed != 0 {
		seeds = []uint64{*crashSeed}
	}
	cuts, open := 0, 0
	kinds := map[string]int{} // cuts by where they were taken
	for _, seed := range seeds {
		ok := t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			r := newCrashRun(t, seed)
			r.run()
			for i, c := range r.cuts {
				kinds[strings.Fields(c.how)[0]]++
				r.verify(i, c)
				for _, ops := range r.ops {
					if len(acceptable(ops, c)) > 1 {
						open++ // a cut with an operation in flight
						break
					}
				}
			}
			cuts += len(r.cuts)
		})
		if !ok {
			t.Logf("TestPowerCut failed with seed %d: rerun with go test -run TestPowerCut ./internal/store/ -crash.seed=%d -v", seed, seed)
		}
	}
	t.Logf("%d runs, %d power cuts checked (%d with operations in flight; by where they were taken: %v), each followed by a second cut of the recovered store",
		len(seeds), cuts, open, kinds)
}

type opKind int

const (
	opPut opKind = iota
	opDelete
	opMultipart
	opRange // a write of a mutable object (sum: its whole content afterwards)
)

func (k opKind) String() string { return [...]string{"put", "delete", "multipart", "range"}[k] }

// crashOp is one operation on a key. start is taken before the operation begins, end
// after it returned: an operation whose end precedes a cut returned before the cut, one
// whose start follows a cut began after it.
type crashOp struct {
	kind       opKind
	sum        [32]byte // the body's SHA-256 (put, multipart)
	size       int
	start, end uint64
	ok         bool
}

// crashCut is one power cut: the file system as it would be found after it. pre and post
// are sequence numbers taken just before and just after the clone.
type crashCut struct {
	fs        *vfs.MemFS
	pre, post uint64
	how       string
}

type crashRun struct {
	t    *testing.T
	seed uint64
	fs   *vfs.MemFS
	s    *Store
	logs *testLogs

	seq  atomic.Uint64
	tick chan struct{} // a sequence number was taken

	mu          sync.Mutex
	ops         map[string][]*crashOp // per key, in order
	cuts        []crashCut
	bucketAcked uint64 // sequence number after CreateBucket returned
	unsynced    int    // percent of unsynced data a clone keeps
	cutRNG      *rand.Rand
}

func newCrashRun(t *testing.T, seed uint64) *crashRun {
	r := &crashRun{
		t:      t,
		seed:   seed,
		fs:     vfs.NewCrashableMem(),
		tick:   make(chan struct{}, 1),
		ops:    map[string][]*crashOp{},
		cutRNG: rand.New(rand.NewPCG(seed, 0xc0ffee)),
	}
	// Half the runs keep exactly what was synced; the others also keep a random share of
	// the unsynced blocks and directory entries (a disk that wrote some back).
	if seed%2 == 0 {
		r.unsynced = 10 + r.cutRNG.IntN(60)
	}
	return r
}

func crashConfig(fs vfs.FS, logs *testLogs) Config {
	return Config{
		Dir:             "/data",
		FS:              fs,
		InlineMax:       16 << 10,
		ChunkSize:       256 << 10,
		SegmentSize:     1 << 20,
		Reserve:         1,
		CacheSize:       1 << 20,
		CompactInterval: 1 << 40, // compaction runs when the workload says so, and at seals
		SegmentSpares:   2,       // so that cuts also land in reused segment files
		Logger:          logs.logger(),
	}
}

func (r *crashRun) next() uint64 {
	n := r.seq.Add(1)
	select {
	case r.tick <- struct{}{}:
	default:
	}
	return n
}

// cut takes a crash clone of the file system now.
func (r *crashRun) cut(how string) {
	r.mu.Lock()
	cfg := vfs.CrashCloneCfg{}
	if r.unsynced > 0 {
		cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: r.unsynced, RNG: rand.New(rand.NewPCG(r.cutRNG.Uint64(), 1))}
	}
	r.mu.Unlock()
	pre := r.next()
	fs := r.fs.CrashClone(cfg)
	post := r.next()
	r.mu.Lock()
	r.cuts = append(r.cuts, crashCut{fs: fs, pre: pre, post: post, how: how})
	r.mu.Unlock()
}

func (r *crashRun) begin(key string, kind opKind, body []byte) *crashOp {
	op := &crashOp{kind: kind, size: len(body)}
	if kind != opDelete {
		op.sum = sha256.Sum256(body)
	}
	op.start = r.next()
	r.mu.Lock()
	r.ops[key] = append(r.ops[key], op)
	r.mu.Unlock()
	return op
}

func (r *crashRun) end(op *crashOp, err error) {
	op.end = r.next()
	op.ok = err == nil
	if err != nil {
		r.t.Errorf("seed %d: %s: %v", r.seed, op.kind, err)
	}
}

const (
	crashWorkers = 3
	crashOpsPer  = 24 // operations per worker
	crashKeysPer = 5  // keys per worker
)

// run runs the workload, cutting power along the way, and closes the store.
func (r *crashRun) run() {
	t := r.t
	r.logs = &testLogs{}
	s, err := Open(crashConfig(r.fs, r.logs))
	if err != nil {
		t.Fatal(err)
	}
	r.s = s
	if r.cutRNG.IntN(4) == 0 {
		r.cut("fresh store")
	}
	if err := s.CreateBucket(crashBucket); err != nil {
		t.Fatal(err)
	}
	r.bucketAcked = r.next()

	// Cuts from a goroutine at random moments while the workers run.
	maxSeq := r.seq.Load() + 2*crashWorkers*crashOpsPer
	var targets []uint64
	for range 2 + r.cutRNG.IntN(4) {
		targets = append(targets, r.seq.Load()+1+r.cutRNG.Uint64N(maxSeq-r.seq.Load()))
	}
	slices.Sort(targets)
	done := make(chan struct{})
	cutterDone := make(chan struct{})
	go func() {
		defer close(cutterDone)
		for _, target := range targets {
			for r.seq.Load() < target {
				select {
				case <-r.tick:
				case <-done:
					return
				}
			}
			r.cut(fmt.Sprintf("concurrent at seq %d", target))
		}
	}()
	// Which PUTs cut power from inside their body reader.
	midBody := map[int]bool{}
	for range r.cutRNG.IntN(3) {
		midBody[r.cutRNG.IntN(crashWorkers*crashOpsPer)] = true
	}

	var wg sync.WaitGroup
	for w := range crashWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.worker(w, midBody)
		}()
	}
	wg.Wait()
	close(done)
	<-cutterDone
	r.cut("after the workload") // every operation returned
	if err := s.Close(); err != nil {
		t.Error(err)
	}
	if n := r.logs.errors.Load(); n > 0 {
		t.Errorf("seed %d: the store logged %d errors:\n%s", r.seed, n, r.logs.String())
	}
}

// crashBody returns a deterministic body of n bytes.
func crashBody(seed uint64, n int) []byte {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	binary.LittleEndian.PutUint64(key[8:], uint64(n))
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

func (r *crashRun) worker(w int, midBody map[int]bool) {
	rng := rand.New(rand.NewPCG(r.seed, uint64(w)+1))
	ctx := context.Background()
	size := func() int {
		switch p := rng.IntN(100); {
		case p < 30:
			return rng.IntN(8 << 10) // embedded in the record
		case p < 45:
			return 8<<10 + rng.IntN(8<<10) // inline under its own key
		case p < 75:
			return 16<<10 + rng.IntN(500<<10) // one or two chunks, aligned or not
		case p < 90:
			return 600<<10 + rng.IntN(600<<10) // several chunks
		default:
			return 2<<20 + rng.IntN(1<<20) // multi-MiB
		}
	}
	mut := map[string]*mutableModel{}
	for i := range crashOpsPer {
		key := fmt.Sprintf("w%d/k%d", w, rng.IntN(crashKeysPer))
		bodySeed := r.seed<<32 | uint64(w)<<16 | uint64(i)
		if rng.IntN(4) == 0 {
			r.mutableOp(ctx, rng, mut, fmt.Sprintf("w%d/m%d", w, rng.IntN(2)), bodySeed)
			continue
		}
		switch p := rng.IntN(100); {
		case p < 50:
			body := crashBody(bodySeed, size())
			var src io.Reader = bytes.NewReader(body)
			if midBody[w*crashOpsPer+i] {
				src = &cutReader{r: src, at: rng.IntN(len(body) + 1), cut: func() { r.cut(fmt.Sprintf("mid-body of a %d-byte PUT", len(body))) }}
			}
			op := r.begin(key, opPut, body)
			_, err := r.s.PutObject(ctx, crashBucket, key, &object.Object{ContentType: "x/crash"}, src, int64(len(body)), object.PutOptions{})
			r.end(op, err)
		case p < 60:
			op := r.begin(key, opDelete, nil)
			r.end(op, r.s.DeleteObject(crashBucket, key))
		case p < 68:
			op := r.begin(key, opDelete, nil)
			_, err := r.s.DeleteVersion(crashBucket, key, 0, 0)
			r.end(op, err)
		case p < 85:
			var parts [][]byte
			for j := range 1 + rng.IntN(3) {
				parts = append(parts, crashBody(bodySeed+uint64(j)<<8, 1+rng.IntN(300<<10)))
			}
			op := r.begin(key, opMultipart, bytes.Join(parts, nil))
			r.end(op, r.multipart(ctx, key, parts))
		default:
			for {
				did, err := r.s.CompactOnce(ctx)
				if err != nil {
					r.t.Errorf("seed %d: compaction: %v", r.seed, err)
				}
				if !did || err != nil {
					break
				}
			}
		}
	}
}

// mutableModel is what a mutable object holds after the acknowledged writes.
type mutableModel struct {
	content []byte
	order   uint64
}

const crashMutableSize = 1 << 20

// mutableOp writes a range of a mutable object (inline data, a chunk, or a hole), or
// replaces it whole as a catch-up copy from another replica would.
func (r *crashRun) mutableOp(ctx context.Context, rng *rand.Rand, mut map[string]*mutableModel, key string, seed uint64) {
	m := mut[key]
	if m == nil {
		m = &mutableModel{content: make([]byte, crashMutableSize)}
		mut[key] = m
	}
	next := slices.Clone(m.content)
	var err error
	var op *crashOp
	switch p := rng.IntN(100); {
	case p < 10:
		next = crashBody(seed, crashMutableSize)
		op = r.begin(key, opRange, next)
		_, err = r.s.PutObject(ctx, crashBucket, key, &object.Object{Mutable: true}, bytes.NewReader(next), crashMutableSize,
			object.PutOptions{Version: m.order + 1, Repair: true})
	default:
		n := 1 + rng.IntN(16<<10)
		if p >= 60 {
			n = 16<<10 + rng.IntN(600<<10)
		}
		off := rng.IntN(crashMutableSize - n + 1)
		w := object.RangeWrite{Bucket: crashBucket, Key: key, Size: crashMutableSize, Off: int64(off), Prev: m.order, Next: m.order + 1}
		if p < 25 {
			w.Len = int64(n)
			clear(next[off : off+n])
		} else {
			w.Data = crashBody(seed, n)
			copy(next[off:], w.Data)
		}
		op = r.begin(key, opRange, next)
		_, err = r.s.WriteRange(ctx, w)
	}
	r.end(op, err)
	if err == nil {
		m.content, m.order = next, m.order+1
	}
}

func (r *crashRun) multipart(ctx context.Context, key string, parts [][]byte) error {
	id, err := r.s.CreateUpload(crashBucket, key, &object.Object{ContentType: "x/multipart"})
	if err != nil {
		return err
	}
	var list []object.CompletePart
	for i, p := range parts {
		sum := md5.Sum(p)
		etag := hex.EncodeToString(sum[:])
		if _, err := r.s.PutPart(ctx, crashBucket, key, id, i+1, bytes.NewReader(p), int64(len(p)), func(o *object.Object) error {
			o.ETag = etag
			return nil
		}); err != nil {
			return err
		}
		list = append(list, object.CompletePart{Number: i + 1, ETag: etag})
	}
	_, err = r.s.CompleteUpload(crashBucket, key, id, list, 1, nil)
	return err
}

// cutReader calls cut once, when at bytes have been read.
type cutReader struct {
	r    io.Reader
	at   int
	n    int
	cut  func()
	done bool
}

func (c *cutReader) Read(p []byte) (int, error) {
	if !c.done && c.n >= c.at {
		c.done = true
		c.cut()
	}
	if !c.done && len(p) > c.at-c.n {
		p = p[:c.at-c.n]
	}
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// state is what a key holds: absent, or a body's SHA-256.
type state struct {
	present bool
	sum     [32]byte
}

func (s state) String() string {
	if !s.present {
		return "absent"
	}
	return hex.EncodeToString(s.sum[:6])
}

func (op *crashOp) result() state {
	if op.kind == opDelete {
		return state{}
	}
	return state{present: true, sum: op.sum}
}

// acceptable returns the states a key may be found in after cut c: that of the last
// operation acknowledged before the cut (absent if none), or that of any later operation
// begun before the cut.
func acceptable(ops []*crashOp, c crashCut) []state {
	last := -1
	for i, op := range ops {
		if op.ok && op.end < c.pre {
			last = i
		}
	}
	var acc []state
	if last < 0 {
		acc = append(acc, state{})
	} else {
		acc = append(acc, ops[last].result())
	}
	for _, op := range ops[last+1:] {
		if op.start < c.post {
			acc = append(acc, op.result())
		}
	}
	return acc
}

func historyString(ops []*crashOp, c crashCut) string {
	var b strings.Builder
	for _, op := range ops {
		fmt.Fprintf(&b, "\n    %s %s (%d bytes) seq %d..%d ok=%v", op.kind, op.result(), op.size, op.start, op.end, op.ok)
	}
	fmt.Fprintf(&b, "\n    cut at seq %d..%d", c.pre, c.post)
	return b.String()
}

// readState reads key's body whole (checksums verified) and returns its state.
func readState(s *Store, key string) (state, error) {
	rd, err := s.OpenObject(crashBucket, key)
	if errors.Is(errors.NotExist, err) {
		return state{}, nil
	}
	if err != nil {
		return state{}, err
	}
	defer rd.Close()
	h := sha256.New()
	n, err := rd.WriteRange(context.Background(), h, 0, rd.Object.Size)
	if err != nil {
		return state{}, err
	}
	if n != rd.Object.Size {
		return state{}, fmt.Errorf("read %d of %d bytes", n, rd.Object.Size)
	}
	st := state{present: true}
	h.Sum(st.sum[:0])
	return st, nil
}

// verify opens the store found after cut i and checks it against the history. Then it
// writes to the recovered store, compacts, cuts power again and checks that both the
// reopened store and the one found after the second cut hold what the first check found.
func (r *crashRun) verify(i int, c crashCut) {
	t := r.t
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("seed %d, cut %d (%s, unsynced kept %d%%): %s", r.seed, i, c.how, r.unsynced, fmt.Sprintf(format, args...))
	}
	logs := &testLogs{}
	defer func() {
		if n := logs.errors.Load(); n > 0 {
			fail("the recovered store logged %d errors:\n%s", n, logs.String())
		}
	}()
	s, err := Open(crashConfig(c.fs, logs))
	if err != nil {
		fail("open: %v", err)
		return
	}
	defer func() { s.Close() }()
	if _, err := s.HeadBucket(crashBucket); err != nil {
		if r.bucketAcked < c.pre || !errors.Is(errors.NotExist, err) {
			fail("bucket: %v", err)
		}
		return
	}
	keys := make([]string, 0, len(r.ops)+1)
	for k := range r.ops {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	// read returns every key's state and checks that a listing shows exactly the keys
	// present, and that the bucket's usage counts what the listing shows.
	read := func(s *Store, when string) map[string]state {
		t.Helper()
		found := map[string]state{}
		for _, key := range keys {
			got, err := readState(s, key)
			if err != nil {
				fail("%s: %s: read: %v", when, key, err)
				continue
			}
			found[key] = got
		}
		listed := map[string]bool{}
		var inList Usage
		for after := ""; ; {
			res, err := s.List(crashBucket, object.ListOptions{After: after, Max: 100})
			if err != nil {
				fail("%s: list: %v", when, err)
				break
			}
			for _, e := range res.Objects {
				listed[e.Key] = true
				inList.Objects++
				inList.Bytes += e.Object.Size
			}
			if !res.Truncated {
				break
			}
			after = res.Next
		}
		waitCounted(t, s)
		if u := s.Usage()[crashBucket]; u != inList || !s.UsageComplete() {
			fail("%s: the bucket's usage is %+v (complete %v), its listing %+v", when, u, s.UsageComplete(), inList)
		}
		for key, st := range found {
			if listed[key] != st.present {
				fail("%s: %s is %s but listed=%v", when, key, st, listed[key])
			}
			delete(listed, key)
		}
		for key := range listed {
			fail("%s: listed %s, which was never written", when, key)
		}
		return found
	}
	same := func(got, want map[string]state, when string) {
		t.Helper()
		for _, key := range keys {
			if got[key] != want[key] {
				fail("%s: %s is %s, was %s after recovery", when, key, got[key], want[key])
			}
		}
	}

	found := read(s, "after recovery")
	for _, key := range keys {
		if acc := acceptable(r.ops[key], c); !slices.Contains(acc, found[key]) {
			fail("%s is %s, want one of %v; history:%s", key, found[key], acc, historyString(r.ops[key], c))
		}
	}
	if t.Failed() {
		return
	}

	// The recovered store takes a write and compacts; then power is cut again.
	body := crashBody(r.seed, 700<<10)
	if _, err := s.PutObject(context.Background(), crashBucket, "after-crash", &object.Object{}, bytes.NewReader(body), int64(len(body)), object.PutOptions{}); err != nil {
		fail("put after recovery: %v", err)
		return
	}
	keys = append(keys, "after-crash")
	found["after-crash"] = state{present: true, sum: sha256.Sum256(body)}
	for {
		did, err := s.CompactOnce(context.Background())
		if err != nil {
			fail("compaction after recovery: %v", err)
			return
		}
		if !did {
			break
		}
	}
	again := c.fs.CrashClone(vfs.CrashCloneCfg{})
	if err := s.Close(); err != nil {
		fail("close: %v", err)
	}
	for _, tc := range []struct {
		when string
		fs   *vfs.MemFS
	}{{"after close and reopen", c.fs}, {"after a second power cut", again}} {
		s, err = Open(crashConfig(tc.fs, logs))
		if err != nil {
			fail("%s: open: %v", tc.when, err)
			return
		}
		same(read(s, tc.when), found, tc.when)
		if err := s.Close(); err != nil {
			fail("%s: close: %v", tc.when, err)
		}
	}
}

// testLogs collects a store's logs and counts its errors.
type testLogs struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	errors atomic.Int64
}

func (l *testLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *testLogs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *testLogs) logger() *slog.Logger {
	return slog.New(countingHandler{slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}), &l.errors})
}

type countingHandler struct {
	slog.Handler
	errors *atomic.Int64
}

func (h countingHandler) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level >= slog.LevelError {
		h.errors.Add(1)
	}
	return h.Handler.Handle(ctx, rec)
}

func (h countingHandler) WithAttrs(a []slog.Attr) slog.Handler {
	return countingHandler{h.Handler.WithAttrs(a), h.errors}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{h.Handler.WithGroup(name), h.errors}
}

const crashBucket = "crash"
