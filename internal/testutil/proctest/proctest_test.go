package proctest

import (
	"errors"
	"fmt"
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
