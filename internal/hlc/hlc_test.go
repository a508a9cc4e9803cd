package hlc

import (
	"sync"
	"testing"
	"time"
)

func TestMonotonicUnderClockSkew(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	c := &Clock{Now: func() time.Time { return now }}
	a := c.Next()
	now = now.Add(-time.Hour) // the wall clock jumps back
	b := c.Next()
	if b <= a {
		t.Fatalf("timestamp went backwards: %d then %d", a, b)
	}
	remote := FromTime(now.Add(2 * time.Hour))
	c.Observe(remote)
	if n := c.Next(); n <= remote {
		t.Fatalf("Next %d does not exceed observed %d", n, remote)
	}
	if got := Time(remote); !got.Equal(now.Add(2 * time.Hour)) {
		t.Fatalf("Time(FromTime(t)) = %v", got)
	}
}

func TestConcurrentUnique(t *testing.T) {
	var c Clock
	var mu sync.Mutex
	seen := map[Timestamp]bool{}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				ts := c.Next()
				mu.Lock()
				if seen[ts] {
					t.Errorf("duplicate timestamp %d", ts)
				}
				seen[ts] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}
