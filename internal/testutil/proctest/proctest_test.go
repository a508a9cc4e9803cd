package proctest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/proc"
)

// recorder is a testing.TB whose Fatal records the message and ends the goroutine.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatal(args ...any) {
	r.msg = fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls fn with a recorder in its own goroutine and returns what it failed with.
func run(t *testing.T, fn func(tb testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	return r.msg
}

func TestWaitFor(t *testing.T) {
	n := 0
	if msg := run(t, func(tb testing.TB) {
		WaitFor(tb, 5*time.Second, func() error {
			if n++; n < 3 {
				return errors.New("not yet")
			}
			return nil
		})
	}); msg != "" || n != 3 {
		t.Fatalf("failed with %q after %d calls", msg, n)
	}
	if msg := run(t, func(tb testing.TB) {
		WaitFor(tb, 30*time.Millisecond, func() error { return errors.New("the condition's own words") })
	}); !strings.Contains(msg, "the condition's own words") {
		t.Fatalf("timeout message %q lacks the last error", msg)
	}
	if msg := run(t, func(tb testing.TB) {
		WaitFor(tb, time.Minute, func() error { return proc.Permanent(errors.New("hopeless")) })
	}); msg != "hopeless" {
		t.Fatalf("permanent: %q", msg)
	}
}

func TestHolds(t *testing.T) {
	start := time.Now()
	calls := 0
	if msg := run(t, func(tb testing.TB) {
		Holds(tb, 100*time.Millisecond, func() error { calls++; return nil })
	}); msg != "" || time.Since(start) < 100*time.Millisecond || calls < 2 {
		t.Fatalf("failed with %q after %s, %d calls", msg, time.Since(start), calls)
	}
	calls = 0
	if msg := run(t, func(tb testing.TB) {
		Holds(tb, time.Minute, func() error {
			if calls++; calls == 3 {
				return errors.New("it happened")
			}
			return nil
		})
	}); !strings.Contains(msg, "it happened") || calls != 3 {
		t.Fatalf("failed with %q after %d calls", msg, calls)
	}
}

func TestSweepStaleBins(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-2 * staleBinAge)
	mk := func(name string, mtime time.Time) {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "cairn"), []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	mk(binDirPrefix+"111", old)        // stale: removed
	mk(binDirPrefix+"222", time.Now()) // another run's, in use: kept
	mk("other-old", old)               // not ours: kept
	sweepStaleBins(dir, time.Now().Add(-staleBinAge))
	for name, want := range map[string]bool{binDirPrefix + "111": false, binDirPrefix + "222": true, "other-old": true} {
		_, err := os.Stat(filepath.Join(dir, name))
		if got := err == nil; got != want {
			t.Errorf("%s exists = %v, want %v", name, got, want)
		}
	}
}
