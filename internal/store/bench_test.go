package store

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
)

func benchStore(b *testing.B) *Store {
	b.Helper()
	s, err := Open(Config{Dir: b.TempDir(), Reserve: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.CreateBucket("bench"); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkPut measures durable PUTs (data and index synced) with concurrent writers.
func BenchmarkPut(b *testing.B) {
	for _, tc := range []struct {
		size, par int
	}{{4 << 10, 16}, {16 << 20, 4}} {
		b.Run(fmt.Sprintf("size=%d/writers=%d", tc.size, tc.par), func(b *testing.B) {
			s := benchStore(b)
			data := randBytes(1, tc.size)
			var n atomic.Int64
			b.SetBytes(int64(tc.size))
			b.SetParallelism(max(1, tc.par/max(1, runtimeProcs())))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := fmt.Sprintf("k%d", n.Add(1))
					if _, err := s.PutObject(context.Background(), "bench", key, &object.Object{}, bytes.NewReader(data), int64(len(data)), object.PutOptions{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkGet measures reads of objects already written (served from the page cache).
func BenchmarkGet(b *testing.B) {
	for _, size := range []int{4 << 10, 16 << 20} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			s := benchStore(b)
			data := randBytes(1, size)
			const keys = 64
			for i := 0; i < keys; i++ {
				if _, err := s.PutObject(context.Background(), "bench", fmt.Sprint("k", i), &object.Object{}, bytes.NewReader(data), int64(size), object.PutOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			var n atomic.Int64
			b.SetBytes(int64(size))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r, err := s.OpenObject("bench", fmt.Sprint("k", n.Add(1)%keys))
					if err != nil {
						b.Error(err)
						return
					}
					if _, err := r.WriteRange(context.Background(), io.Discard, 0, r.Object.Size); err != nil {
						b.Error(err)
					}
					r.Close()
				}
			})
		})
	}
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

// BenchmarkRangeOverwrite measures synced 1 MiB range writes over mutable objects already
// written whole (a volume's sequential rewrite): each frees the chunks it replaces and
// adds its own.
func BenchmarkRangeOverwrite(b *testing.B) {
	s := benchStore(b)
	const objSize, n, objs = 4 << 20, 1 << 20, 16
	data := randBytes(1, n)
	order := map[string]uint64{}
	write := func(key string, off int64) error {
		w := object.RangeWrite{Bucket: "bench", Key: key, Size: objSize, Off: off, Data: data, Prev: order[key], Next: order[key] + 1}
		if _, err := s.WriteRange(context.Background(), w); err != nil {
			return err
		}
		order[key]++
		return nil
	}
	for i := range objs * objSize / n {
		if err := write(fmt.Sprintf("o%d", i/(objSize/n)), int64(i%(objSize/n))*n); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(n)
	b.ResetTimer()
	cpu := processCPU()
	for i := range b.N {
		j := i % (objs * objSize / n)
		if err := write(fmt.Sprintf("o%d", j/(objSize/n)), int64(j%(objSize/n))*n); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkPutVersioned measures durable 4 KiB PUTs overwriting 4,096 keys (8 writers) in
// a bucket that never had versioning and in one whose writes keep every version, in the
// same store, rounds alternating: the engine's part of BenchmarkVersioned in package s3api
// (docs/benchmarks.md), without HTTP. cpu-ns/op is this process's CPU time per PUT.
//
// CAIRN_BENCH_LEGACY_INDEX=1 opens the index as builds before value separation did
// (every value in its table); CAIRN_BENCH_RANDOM=1 writes incompressible bodies instead
// of zeros (which snappy shrinks many times, so that compactions move few bytes).
func BenchmarkPutVersioned(b *testing.B) {
	s, err := Open(Config{Dir: b.TempDir(), Reserve: 1, legacyIndex: os.Getenv("CAIRN_BENCH_LEGACY_INDEX") == "1"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	for _, name := range []string{"bench", "versioned"} {
		if err := s.CreateBucket(name); err != nil {
			b.Fatal(err)
		}
	}
	data := make([]byte, 4096)
	if os.Getenv("CAIRN_BENCH_RANDOM") == "1" {
		data = randBytes(1, len(data))
	}
	for range 4 {
		for _, bucket := range []string{"bench", "versioned"} {
			b.Run(bucket, func(b *testing.B) {
				var n atomic.Int64
				b.SetBytes(int64(len(data)))
				b.SetParallelism(max(1, 8/runtimeProcs()))
				cpu0 := processCPU()
				defer func() { b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op") }()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						meta := &object.Object{Versioned: bucket == "versioned"}
						key := fmt.Sprintf("k%d", n.Add(1)%4096)
						if _, err := s.PutObject(context.Background(), bucket, key, meta, bytes.NewReader(data), int64(len(data)), object.PutOptions{}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
	m := s.db.Metrics()
	t := m.Total()
	b.Logf("index: %d L0 files, %d compactions, %d flushes, write amplification %.1f; "+
		"compactions read %d MiB of tables, wrote %d MiB of tables and %d MiB of blob files",
		m.Levels[0].TablesCount, m.Compact.Count, m.Flush.Count, t.WriteAmp(),
		t.TableBytesRead>>20, t.TableBytesCompacted>>20, t.BlobBytesCompacted>>20)
}

// processCPU returns the CPU time (user and system) this process has used, in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkListVersionBodies measures a page of 1,000 versions of keys whose versions have
// 4 KiB bodies (embedded in their records: the noncurrent ones are in blob files unless
// CAIRN_BENCH_LEGACY_INDEX=1), 5,000 keys of 4 versions, the index flushed.
func BenchmarkListVersionBodies(b *testing.B) {
	s, err := Open(Config{Dir: b.TempDir(), Reserve: 1, legacyIndex: os.Getenv("CAIRN_BENCH_LEGACY_INDEX") == "1"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.CreateBucket("v"); err != nil {
		b.Fatal(err)
	}
	data := randBytes(1, 4096)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < 20000; i = next.Add(1) - 1 {
				key := fmt.Sprintf("k%05d", i%5000)
				if _, err := s.PutObject(context.Background(), "v", key, &object.Object{Versioned: true}, bytes.NewReader(data), int64(len(data)), object.PutOptions{}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := s.db.Flush(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		res, err := s.ListVersions("v", object.VersionListOptions{Max: 1000, KeyMarker: "k02000"})
		if err != nil || len(res.Versions) != 1000 {
			b.Fatal(len(res.Versions), err)
		}
	}
}

// BenchmarkVersionedOverwrite measures one writer's 4 KiB PUTs overwriting 64 keys of a
// bucket, without versioning and with it (each PUT then moves the version it supersedes
// to V/). With -benchtime 2000x the index's memtable is never flushed, so B/op and
// allocs/op are this path's own, not a compaction's (docs/benchmarks.md).
func BenchmarkVersionedOverwrite(b *testing.B) {
	for _, versioned := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "versioned"}[versioned]
		b.Run(name, func(b *testing.B) {
			s, err := Open(Config{Dir: b.TempDir(), Reserve: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if err := s.CreateBucket("b"); err != nil {
				b.Fatal(err)
			}
			data := make([]byte, 4096)
			keys := make([]string, 64)
			put := func(key string) {
				meta := &object.Object{Versioned: versioned}
				if _, err := s.PutObject(context.Background(), "b", key, meta, bytes.NewReader(data), int64(len(data)), object.PutOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			for i := range keys {
				keys[i] = fmt.Sprintf("k%d", i)
				put(keys[i])
			}
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				put(keys[i%len(keys)])
			}
		})
	}
}

// BenchmarkMutableRead4K measures the store's part of a volume's 4 KiB random read: a
// reader of a data object at its order (replica.Local's OpenVersion) and a 4 KiB
// WriteRange, over 32 data objects of 4 MiB written in 1 MiB writes (256 KiB chunk
// records), as volbench's fill leaves them. cpu-ns/op is this process's CPU per read.
func BenchmarkMutableRead4K(b *testing.B) {
	s := benchStore(b)
	const objSize, n, objs = 4 << 20, 1 << 20, 32
	data := randBytes(1, n)
	order := make([]uint64, objs)
	for i := range objs * objSize / n {
		o := i / (objSize / n)
		w := object.RangeWrite{Bucket: "bench", Key: fmt.Sprintf("o%d", o), Size: objSize, Off: int64(i%(objSize/n)) * n, Data: data, Prev: order[o], Next: order[o] + 1}
		if _, err := s.WriteRange(context.Background(), w); err != nil {
			b.Fatal(err)
		}
		order[o]++
	}
	buf := make([]byte, 4096)
	rng := uint64(1)
	b.SetBytes(4096)
	b.ResetTimer()
	cpu := processCPU()
	for range b.N {
		o, off := randomBlock(&rng, objs, objSize)
		r, err := s.OpenVersion("bench", fmt.Sprintf("o%d", o), order[o])
		if err != nil {
			b.Fatal(err)
		}
		w := bytes.NewBuffer(buf[:0])
		if _, err := r.WriteRange(context.Background(), w, off, 4096); err != nil {
			b.Fatal(err)
		}
		r.Close()
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkRandomWrite4K measures the store's part of a volume's 4 KiB random write, as
// the volume journal takes it (unsynced; the applier then commits its index batch), over
// 32 data objects of 4 MiB written in 1 MiB writes first, as volbench's fill leaves
// them. The timer stops once every write is applied; cpu-ns/op is this process's CPU per
// write, the applier's included.
func BenchmarkRandomWrite4K(b *testing.B) {
	s := benchStore(b)
	const objSize, n, objs = 4 << 20, 1 << 20, 32
	data := randBytes(1, n)
	order := make([]uint64, objs)
	write := func(o int, off int64, data []byte, unsynced bool) {
		w := object.RangeWrite{Bucket: "bench", Key: fmt.Sprintf("o%d", o), Size: objSize, Off: off, Data: data, Prev: order[o], Next: order[o] + 1, Unsynced: unsynced}
		if _, err := s.WriteRange(context.Background(), w); err != nil {
			b.Fatal(err)
		}
		order[o]++
	}
	for i := range objs * objSize / n {
		write(i/(objSize/n), int64(i%(objSize/n))*n, data, false)
	}
	rng := uint64(1)
	b.SetBytes(4096)
	b.ResetTimer()
	cpu := processCPU()
	for range b.N {
		o, off := randomBlock(&rng, objs, objSize)
		write(o, off, data[off%(n-4096):][:4096], true)
	}
	if err := s.drainAll(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}

// randomBlock steps the generator rng and returns a random object of objs and a random
// 4 KiB block in it (objSize bytes).
func randomBlock(rng *uint64, objs int, objSize int64) (int, int64) {
	*rng = *rng*6364136223846793005 + 1442695040888963407
	return int(*rng>>33) % objs, int64(*rng>>12) % (objSize / 4096) * 4096
}
