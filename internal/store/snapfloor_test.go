package store

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// The floor beneath the readers' snapshots is taken by reads, closed when reads stop and
// closed for good with the store; reads see every write committed before they opened.
func TestSnapFloor(t *testing.T) {
	s := openStore(t, testConfig(t))
	ctx := context.Background()
	if err := s.CreateBucket("vol"); err != nil {
		t.Fatal(err)
	}
	floor := func() (bool, time.Time) {
		s.floor.mu.Lock()
		defer s.floor.mu.Unlock()
		return s.floor.snap != nil, s.floor.taken
	}
	order := uint64(0)
	for i := range 3 {
		data := bytes.Repeat([]byte{byte(i + 1)}, 8192)
		o, err := s.WriteRange(ctx, object.RangeWrite{Bucket: "vol", Key: "o", Size: 8192, Data: data, Prev: order, Next: order + 1})
		if err != nil {
			t.Fatal(err)
		}
		order = o.HLC
		r, err := s.OpenVersion("vol", "o", order)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		_, err = r.WriteRange(ctx, &buf, 0, 8192)
		r.Close()
		if err != nil || !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("write %d: read %v, equal %v", i, err, bytes.Equal(buf.Bytes(), data))
		}
		if ok, _ := floor(); !ok {
			t.Fatalf("write %d: no floor after a read", i)
		}
	}
	// Idle, the floor is closed, not before 2 x snapFloorAge after it was taken.
	_, taken := floor()
	proctest.WaitFor(t, 10*snapFloorAge, func() error {
		if ok, _ := floor(); ok {
			return errors.New("the idle floor is still open")
		}
		return nil
	})
	if since := time.Since(taken); since < 2*snapFloorAge {
		t.Fatalf("floor closed %v after it was taken", since)
	}
	// A read renews it; closing the store closes it for good.
	s.snapshot().Close()
	if ok, _ := floor(); !ok {
		t.Fatal("no floor after a read")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.floor.mu.Lock()
	closed := s.floor.closed
	s.floor.mu.Unlock()
	if ok, _ := floor(); ok || !closed {
		t.Fatal("the floor outlived the store")
	}
}
