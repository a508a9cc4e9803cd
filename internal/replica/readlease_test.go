package replica

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/proc"
)

// fakeClock is a LeaseClock that moves only when the test advances it.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits []fakeWait
}

type fakeWait struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) At(t time.Time) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if !c.now.Before(t) {
		ch <- c.now
		return ch
	}
	c.waits = append(c.waits, fakeWait{t, ch})
	return ch
}

// Advance moves the clock by d and wakes the waits it reached.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waits[:0]
	for _, w := range c.waits {
		if !c.now.Before(w.at) {
			w.ch <- c.now
			continue
		}
		kept = append(kept, w)
	}
	c.waits = kept
}

// waiting reports whether something waits for the clock to reach exactly t.
func (c *fakeClock) waiting(t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.waits {
		if w.at.Equal(t) {
			return true
		}
	}
	return false
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if proc.Until(context.Background(), 10*time.Second, func() error {
		if !cond() {
			return errors.New(what)
		}
		return nil
	}) != nil {
		t.Fatalf("timed out waiting: %s", what)
	}
}

// change runs a change of bucket/key (Changing, then done) in the background; the
// channel is closed once it may be acknowledged.
func change(l *ReadLeases, bucket, key string) chan struct{} {
	ch := make(chan struct{})
	go func() {
		l.Changing(bucket, key)()
		close(ch)
	}()
	return ch
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestReadLeases: grants, revokes, a gateway that cannot be told (the change waits for
// the lease's expiry by the holder's clock), no grant while a change is pending, a second
// change waits for the first one's revoke, the per-gateway bound, internal buckets.
func TestReadLeases(t *testing.T) {
	const ttl = 2 * time.Second
	type revokeCall struct{ node, bucket, key string }
	setup := func(t *testing.T, revoke func(node string) error, mod func(*ReadLeaseConfig)) (*ReadLeases, *fakeClock, *[]revokeCall) {
		clk := newFakeClock()
		var mu sync.Mutex
		calls := &[]revokeCall{}
		cfg := ReadLeaseConfig{Max: ttl, Clock: clk, Logger: slog.New(slog.DiscardHandler), Revoke: func(ctx context.Context, node, bucket, key string) error {
			mu.Lock()
			*calls = append(*calls, revokeCall{node, bucket, key})
			mu.Unlock()
			return revoke(node)
		}}
		if mod != nil {
			mod(&cfg)
		}
		return NewReadLeases(cfg), clk, calls
	}
	ok := func(string) error { return nil }

	t.Run("revoked before the change", func(t *testing.T) {
		l, _, calls := setup(t, ok, nil)
		if d := l.Grant("g1", "b", "k", 10*time.Second); d != ttl {
			t.Fatalf("granted %v, want the table's most, %v", d, ttl)
		}
		if d := l.Grant("g2", "b", "k", time.Second); d != time.Second {
			t.Fatalf("granted %v, want 1s", d)
		}
		l.Changing("b", "k")()
		if len(*calls) != 2 {
			t.Fatalf("revokes %v, want one to each gateway", *calls)
		}
		if s := l.Stats(); s.Revoked != 2 || s.RevokeFailed != 0 || s.Live != 0 || s.Grants != 2 {
			t.Fatalf("stats %+v", s)
		}
		l.Changing("b", "k")() // nothing left to revoke
		if len(*calls) != 2 {
			t.Fatalf("revoked again: %v", *calls)
		}
	})

	t.Run("unreachable gateway: waits for the expiry", func(t *testing.T) {
		l, clk, _ := setup(t, func(string) error { return errors.New("unreachable") }, nil)
		granted := clk.Now()
		if l.Grant("g1", "b", "k", ttl) != ttl {
			t.Fatal("not granted")
		}
		clk.Advance(500 * time.Millisecond)
		done := change(l, "b", "k")
		expiry := granted.Add(ttl)
		waitUntil(t, "the change waits for the lease's expiry", func() bool { return clk.waiting(expiry) })
		if closed(done) {
			t.Fatal("the change went ahead while the lease was live")
		}
		clk.Advance(ttl - 500*time.Millisecond - time.Nanosecond)
		if closed(done) {
			t.Fatal("the change went ahead a nanosecond before the expiry")
		}
		clk.Advance(time.Nanosecond)
		<-done
		if s := l.Stats(); s.RevokeFailed != 1 || s.Revoked != 0 || s.Live != 0 {
			t.Fatalf("stats %+v", s)
		}
	})

	t.Run("expired lease: no revoke", func(t *testing.T) {
		l, clk, calls := setup(t, ok, nil)
		l.Grant("g1", "b", "k", ttl)
		clk.Advance(ttl)
		l.Changing("b", "k")()
		if len(*calls) != 0 {
			t.Fatalf("revoked an expired lease: %v", *calls)
		}
	})

	t.Run("no grant while a change is pending", func(t *testing.T) {
		l, _, _ := setup(t, ok, nil)
		done := l.Changing("b", "k")
		if d := l.Grant("g1", "b", "k", ttl); d != 0 {
			t.Fatalf("granted %v during a change", d)
		}
		if d := l.Grant("g1", "b", "other", ttl); d != ttl {
			t.Fatalf("another key: granted %v", d)
		}
		done()
		if d := l.Grant("g1", "b", "k", ttl); d != ttl {
			t.Fatalf("after the change: granted %v", d)
		}
	})

	t.Run("a second change waits for the first one's revoke", func(t *testing.T) {
		release := make(chan struct{})
		var returned atomic.Bool
		var started atomic.Int64
		l, _, _ := setup(t, func(string) error {
			started.Add(1)
			<-release
			returned.Store(true)
			return nil
		}, nil)
		l.Grant("g1", "b", "k", ttl)
		first := change(l, "b", "k")
		waitUntil(t, "the first change revokes", func() bool { return started.Load() == 1 })
		second := make(chan bool)
		go func() {
			l.Changing("b", "k")()
			second <- returned.Load()
		}()
		close(release)
		if !<-second {
			t.Fatal("the second change went ahead before the first one's revoke was confirmed")
		}
		<-first
		if started.Load() != 1 {
			t.Fatalf("%d revokes, want 1", started.Load())
		}
	})

	t.Run("per-gateway bound", func(t *testing.T) {
		l, clk, _ := setup(t, ok, func(c *ReadLeaseConfig) { c.PerNode = 2 })
		for _, k := range []string{"k1", "k2"} {
			if l.Grant("g1", "b", k, ttl) != ttl {
				t.Fatalf("%s not granted", k)
			}
		}
		if l.Grant("g1", "b", "k1", ttl) != ttl {
			t.Fatal("a renewal was refused at the bound")
		}
		if d := l.Grant("g1", "b", "k3", ttl); d != 0 {
			t.Fatalf("granted %v past the bound", d)
		}
		if l.Grant("g2", "b", "k3", ttl) != ttl {
			t.Fatal("another gateway was refused")
		}
		clk.Advance(ttl)
		if l.Grant("g1", "b", "k3", ttl) != ttl {
			t.Fatal("refused once the others expired")
		}
		if s := l.Stats(); s.Refused != 1 || s.Live != 1 {
			t.Fatalf("stats %+v, want 1 refused and 1 live (g1's k3; the expired ones swept)", s)
		}
	})

	t.Run("internal buckets", func(t *testing.T) {
		l, _, calls := setup(t, ok, nil)
		for _, b := range []string{"_volumes", "_tiers", ".shards"} {
			if d := l.Grant("g1", b, "k", ttl); d != 0 {
				t.Fatalf("%s: granted %v", b, d)
			}
			l.Changing(b, "k")()
		}
		if len(*calls) != 0 {
			t.Fatalf("revokes %v", *calls)
		}
	})

	t.Run("nil table", func(t *testing.T) {
		var l *ReadLeases
		if l.Grant("g1", "b", "k", ttl) != 0 {
			t.Fatal("a nil table granted")
		}
		l.Changing("b", "k")()
	})
}

// TestReadLeasesRestart: a holder whose previous process granted leases (the marker it
// wrote before its first grant) holds every change of an S3 key back until a lease of the
// length the marker records has passed since its start, since it knows none of the
// leases that may still be live; a fresh one does not.
func TestReadLeasesRestart(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "read-leases")
	clk := newFakeClock()
	cfg := ReadLeaseConfig{Max: 3 * time.Second, Marker: marker, Clock: clk,
		Revoke: func(context.Context, string, string, string) error { return nil }}
	first := NewReadLeases(cfg)
	first.Changing("b", "k")() // fresh: no hold
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("marker written before any grant: %v", err)
	}
	if first.Grant("g1", "b", "k", time.Second) != time.Second {
		t.Fatal("not granted")
	}
	if b, err := os.ReadFile(marker); err != nil || strings.TrimSpace(string(b)) != "3s" {
		t.Fatalf("marker %q, %v; want the table's longest lease", b, err)
	}

	// The process dies; another starts on the same data directory.
	start := clk.Now()
	second := NewReadLeases(cfg)
	done := change(second, "b", "k")
	waitUntil(t, "the change is held back", func() bool { return clk.waiting(start.Add(3 * time.Second)) })
	if closed(done) {
		t.Fatal("a restarted holder took a change within a lease of its start")
	}
	second.Changing("_volumes", "x")() // not an S3 key: never leased, never held
	clk.Advance(3*time.Second - time.Nanosecond)
	if closed(done) {
		t.Fatal("held back too short")
	}
	clk.Advance(time.Nanosecond)
	<-done
	if s := second.Stats(); s.Held != 1 {
		t.Fatalf("stats %+v, want 1 change held", s)
	}
	second.Changing("b", "k")() // the hold is over

	// A marker that cannot be read holds for the longest lease any holder grants.
	if err := os.WriteFile(marker, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	third := NewReadLeases(cfg)
	done = change(third, "b", "k")
	waitUntil(t, "held for MaxReadLease", func() bool { return clk.waiting(clk.Now().Add(MaxReadLease)) })
	clk.Advance(MaxReadLease)
	<-done
}

// TestParseLease: lease lengths on the wire are positive milliseconds up to MaxReadLease.
func TestParseLease(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0}, {"0", 0}, {"-5", 0}, {"x", 0}, {"1", time.Millisecond}, {"2000", 2 * time.Second},
		{"5000", MaxReadLease}, {"5001", 0}, {"99999999999999999999", 0},
	} {
		if got := parseLease(tt.in); got != tt.want {
			t.Errorf("parseLease(%q) = %v, want %v", tt.in, got, tt.want)
		}
		if tt.want > 0 && parseLease(grantHeader(tt.want)) != tt.want {
			t.Errorf("grantHeader(%v) does not parse back", tt.want)
		}
	}
}

// FuzzParseLease: any header value parses to 0 or a length in (0, MaxReadLease].
func FuzzParseLease(f *testing.F) {
	for _, s := range []string{"", "0", "1", "2000", "5000", "5001", "-1", "1e3", " 7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d := parseLease(s); d < 0 || d > MaxReadLease {
			t.Fatalf("parseLease(%q) = %v", s, d)
		}
	})
}
