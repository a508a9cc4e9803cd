package volume

import (
	"testing"
	"time"
)

// TestWarnLimit: one warning of a kind every warnEvery, the ones held back counted in the
// next that is let through; kinds are limited apart.
func TestWarnLimit(t *testing.T) {
	var w warnLimit
	t0 := time.Unix(1000, 0)
	steps := []struct {
		kind     string
		at       time.Duration
		ok       bool
		wantHeld int
	}{
		{"write n2", 0, true, 0},
		{"write n2", time.Second, false, 0},
		{"write n2", 2 * time.Second, false, 0},
		{"write n3", 2 * time.Second, true, 0}, // another holder: its own limit
		{"write n2", warnEvery - time.Millisecond, false, 0},
		{"write n2", warnEvery, true, 3},
		{"write n2", warnEvery + time.Second, false, 0},
		{"write n2", 3 * warnEvery, true, 1},
	}
	for i, s := range steps {
		ok, held := w.allow(s.kind, t0.Add(s.at))
		if ok != s.ok || held != s.wantHeld {
			t.Fatalf("step %d (%s at %v): allow = %v, %d; want %v, %d", i, s.kind, s.at, ok, held, s.ok, s.wantHeld)
		}
	}
}
