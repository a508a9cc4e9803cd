package store

import (
	"fmt"
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
