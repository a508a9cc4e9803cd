package proc

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Until calls cond until it returns nil and then returns nil. It gives up when timeout
// has passed or ctx ends, returning an error that wraps cond's last error, or at once
// when cond returns an error made by Permanent (returning the error it wraps). The first
// call is immediate; later ones come 10 ms apart, growing to 200 ms.
func Until(ctx context.Context, timeout time.Duration, cond func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	delay := 10 * time.Millisecond
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for tries := 1; ; tries++ {
		err := cond()
		if err == nil {
			return nil
		}
		var p permanent
		if errors.As(err, &p) {
			return p.err
		}
		t.Reset(delay)
		select {
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%w (after %d tries: %w)", ctx.Err(), tries, err)
			}
			return fmt.Errorf("not so after %s (%d tries): %w", timeout, tries, err)
		case <-t.C:
		}
		delay = min(delay*2, 200*time.Millisecond)
	}
}

type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent wraps err so that Until returns it at once instead of trying again.
func Permanent(err error) error { return permanent{err} }
