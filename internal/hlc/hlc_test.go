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

// Two nodes' clocks at the same wall time, observing each other, never issue the same
// timestamp once their tags differ; without tags they do (the collision tags prevent).
func TestTagsNeverCollide(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	fixed := func() time.Time { return now }
	for _, tc := range []struct {
		name       string
		tagA, tagB uint16
		collide    bool
	}{
		{"untagged", 0, 0, true},
		{"tagged", 1, MaxTag, false},
		{"adjacent tags", 7, 8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := &Clock{Now: fixed}, &Clock{Now: fixed}
			a.SetTag(tc.tagA)
			b.SetTag(tc.tagB)
			seen := map[Timestamp]string{}
			collided := false
			for i := 0; i < 5000; i++ {
				x, y := a.Next(), b.Next()
				if i%3 == 0 {
					a.Observe(y) // gossip: each sees the other's timestamps now and then
				}
				if i%5 == 0 {
					b.Observe(x)
				}
				for _, p := range []struct {
					ts  Timestamp
					who string
				}{{x, "a"}, {y, "b"}} {
					if w, ok := seen[p.ts]; ok && w != p.who {
						collided = true
					}
					seen[p.ts] = p.who
				}
				if tc.tagA != 0 && (x&MaxTag != Timestamp(tc.tagA) || y&MaxTag != Timestamp(tc.tagB)) {
					t.Fatalf("timestamps %x, %x do not end in their tags %x, %x", x, y, tc.tagA, tc.tagB)
				}
			}
			if collided != tc.collide {
				t.Fatalf("collided = %v, want %v", collided, tc.collide)
			}
		})
	}
}

// A tag set (or changed) mid-stream keeps Next monotonic.
func TestSetTagMonotonic(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	c := &Clock{Now: func() time.Time { return now }}
	last := c.Next()
	for i, tag := range []uint16{5, 3, 0, MaxTag, 1} {
		c.SetTag(tag)
		for j := 0; j < 10; j++ {
			n := c.Next()
			if n <= last {
				t.Fatalf("step %d.%d (tag %d): %d after %d", i, j, tag, n, last)
			}
			last = n
		}
	}
}
