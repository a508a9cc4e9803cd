package store

import (
	"fmt"
	"hash/maphash"
	"sync"
	"testing"
	"time"
)

// Touch keeps one access per key and period; FlushAccess writes them in one batch; the
// next period's read is written again; AccessTimes reads them back by bucket.
func TestAccessTimes(t *testing.T) {
	s := openStore(t, testConfig(t))
	t0 := time.Date(2026, 12, 1, 10, 17, 0, 0, time.UTC)
	for range 100 {
		s.Touch("b", "k1", t0)
	}
	s.Touch("b", "k2", t0.Add(time.Minute))
	s.Touch("c", "k1", t0)
	if n, err := s.FlushAccess(); err != nil || n != 3 {
		t.Fatalf("flush: %d, %v; want 3 entries", n, err)
	}
	s.Touch("b", "k1", t0.Add(30*time.Minute)) // the same hour: nothing new
	if n, _ := s.FlushAccess(); n != 0 {
		t.Fatalf("flush after a read in the same hour: %d entries", n)
	}
	s.Touch("b", "k1", t0.Add(time.Hour))
	if n, _ := s.FlushAccess(); n != 1 {
		t.Fatalf("flush after a read in the next hour: %d entries", n)
	}
	got, err := s.AccessTimes("b")
	if err != nil {
		t.Fatal(err)
	}
	hour := t0.Truncate(time.Hour)
	if len(got) != 2 || got["k1"] != hour.Add(time.Hour).UnixNano() || got["k2"] != hour.UnixNano() {
		t.Fatalf("access times of b: %v", got)
	}
	if c, _ := s.AccessTimes("c"); len(c) != 1 {
		t.Fatalf("access times of c: %v", c)
	}
}

// A key is noted once a period whether its read is answered by the cache of marks or by
// the hash set behind it: 10 000 keys read three times, and three keys of one cache set
// read in turn, are noted once each; TouchNow notes with the monotonic clock, truncated
// to the granularity; concurrent reads of the same keys note each once (run under -race).
func TestAccessCache(t *testing.T) {
	s := openStore(t, testConfig(t))
	t0 := time.Date(2026, 12, 1, 10, 17, 0, 0, time.UTC)
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%05d", i)
	}
	pass := func(keys []string) int {
		for _, k := range keys {
			s.Touch("b", k, t0)
		}
		n, err := s.FlushAccess()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i, want := range []int{len(keys), 0, 0} {
		if n := pass(keys); n != want {
			t.Fatalf("pass %d: %d noted, want %d", i, n, want)
		}
	}
	// Three keys of one cache set (found by their marks), read in turn: one evicts
	// another's mark each time, and the hash set still knows them.
	a := &s.access
	set := func(k string) uint64 {
		h := maphash.String(a.seed, k) ^ maphash.String(a.seed, "b")*0x9e3779b97f4a7c15
		return (accessMark(h, t0.Truncate(time.Hour).UnixNano()) >> 1) & (accessCacheSlots - 1) &^ 1
	}
	by := map[uint64][]string{}
	var three []string
	for i := 0; three == nil; i++ {
		k := fmt.Sprintf("c%d", i)
		by[set(k)] = append(by[set(k)], k)
		if l := by[set(k)]; len(l) == 3 {
			three = l
		}
	}
	if n := pass(three); n != 3 {
		t.Fatalf("three keys of one set: %d noted, want 3", n)
	}
	for range 3 {
		if n := pass(three); n != 0 {
			t.Fatalf("three keys of one set read again: %d noted, want 0", n)
		}
	}

	before := time.Now()
	s.TouchNow("now", "k")
	s.TouchNow("now", "k")
	if n, _ := s.FlushAccess(); n != 1 {
		t.Fatalf("TouchNow twice: %d noted, want 1", n)
	}
	at, err := s.AccessTimes("now")
	if g := s.AccessGranularity(); err != nil || at["k"] < before.Truncate(g).UnixNano() || at["k"] > time.Now().UnixNano() {
		t.Fatalf("TouchNow's time %v (%v), read at %v", time.Unix(0, at["k"]), err, before)
	}

	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for _, k := range keys[:1000] {
				s.Touch("c", k, t0)
			}
		})
	}
	wg.Wait()
	if n, _ := s.FlushAccess(); n != 1000 {
		t.Fatalf("4 concurrent passes over 1000 keys: %d noted, want 1000", n)
	}
}

// BenchmarkTouchHot is the note a GET of a key read often pays (the GET benchmarks read
// 64 keys in turn): with the caller's time.Now (Touch) and with the store's monotonic
// clock (TouchNow, what the gateway calls).
func BenchmarkTouchHot(b *testing.B) {
	s := openStore(b, testConfig(b))
	names := make([]string, 64)
	for i := range names {
		names[i] = fmt.Sprintf("get/%d", i)
	}
	b.Run("Touch", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			s.Touch("bench", names[i%len(names)], time.Now())
			i++
		}
	})
	b.Run("TouchNow", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			s.TouchNow("bench", names[i%len(names)])
			i++
		}
	})
}

// BenchmarkTouch is the cost a GET pays: a key read again in the same period (the common
// case: one map lookup under a shard lock), over 1 M keys.
func BenchmarkTouch(b *testing.B) {
	s := openStore(b, testConfig(b))
	const keys = 1 << 20
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("some/prefix/object-%08d", i)
	}
	now := time.Now()
	for _, k := range names { // every key seen once this period (capped per shard)
		s.Touch("bucket", k, now)
	}
	s.FlushAccess()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Touch("bucket", names[i%keys], now)
	}
}
