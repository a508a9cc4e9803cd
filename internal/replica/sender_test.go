package replica_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// gateSink is a Sink whose lone writes wait for release (and fail when fail is set);
// its batches succeed at once.
type gateSink struct {
	release chan struct{}
	fail    bool
	ones    atomic.Int64
	many    atomic.Int64
	sizes   chan int
}

func (s *gateSink) One(ctx context.Context, w int) (*object.Object, error) {
	s.ones.Add(1)
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, errors.E(errors.Transient, ctx.Err())
	}
	if s.fail {
		return nil, errors.E(errors.Transient, "the holder went (test)")
	}
	return &object.Object{HLC: uint64(w)}, nil
}

func (s *gateSink) Many(ctx context.Context, ws []int) ([]replica.RangeResult, error) {
	s.many.Add(1)
	s.sizes <- len(ws)
	res := make([]replica.RangeResult, len(ws))
	for i, w := range ws {
		res[i].Object = &object.Object{HLC: uint64(w)}
	}
	return res, nil
}

// TestSenderNoStall: writes queued behind requests in flight are all sent when those
// requests end, whether they succeed, fail, or their callers give up; a write whose
// caller gives up while queued leaves the queue and is never sent; every other write
// gets its own outcome.
func TestSenderNoStall(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fail   bool
		cancel bool
	}{{"requests answered", false, false}, {"requests failed", true, false}, {"callers gave up", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			sink := &gateSink{release: make(chan struct{}), fail: tc.fail, sizes: make(chan int, 16)}
			sd := replica.NewSender(replica.SenderConfig[int]{MaxInFlight: 2, Timeout: 10 * time.Second, Size: func(int) int { return 1 }})
			first, cancelFirst := context.WithCancel(context.Background())
			defer cancelFirst()
			gone, cancelGone := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			errs := make([]error, 10)
			hlcs := make([]uint64, 10)
			for i := range 10 {
				ctx := context.Background()
				switch {
				case i < 2 && tc.cancel:
					ctx = first
				case i == 5:
					ctx = gone
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					o, err := sd.Write(ctx, i, sink)
					errs[i] = err
					if o != nil {
						hlcs[i] = o.HLC
					}
				}()
				if i < 2 {
					proctest.WaitFor(t, 10*time.Second, func() error { return want("lone writes sent", sink.ones.Load(), int64(i+1)) })
				} else {
					proctest.WaitFor(t, 10*time.Second, func() error { return want("writes queued", sd.Queued(), i-1) })
				}
			}
			cancelGone() // write 5 leaves the queue
			proctest.WaitFor(t, 10*time.Second, func() error { return want("writes queued", sd.Queued(), 7) })
			if tc.cancel {
				cancelFirst()
			} else {
				close(sink.release)
			}
			wg.Wait()
			for i, err := range errs {
				switch {
				case i == 5:
					if !errors.Is(errors.Transient, err) {
						t.Errorf("write 5, given up while queued: %v", err)
					}
				case i < 2 && (tc.fail || tc.cancel):
					if err == nil {
						t.Errorf("write %d: no error", i)
					}
				case err != nil || hlcs[i] != uint64(i):
					t.Errorf("write %d: %v, outcome of write %d", i, err, hlcs[i])
				}
			}
			if sd.Queued() != 0 {
				t.Fatalf("%d writes left in the queue", sd.Queued())
			}
			if b, w := sd.Stats(); b < 1 || w != 7 {
				t.Fatalf("%d batches carried %d writes; want the 7 queued", b, w)
			}
			// The slots are free again: a new write goes at once, alone.
			if tc.cancel {
				close(sink.release)
			}
			if o, err := sd.Write(context.Background(), 42, sink); (err != nil) != tc.fail || (!tc.fail && o.HLC != 42) {
				t.Fatalf("a write after the queue drained: %v %v", o, err)
			}
		})
	}
}

// want is nil once got is w, else an error naming what is awaited.
func want[T comparable](what string, got, w T) error {
	if got != w {
		return fmt.Errorf("%s: %v, want %v", what, got, w)
	}
	return nil
}
