package replica_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/hlc"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/rpc"
)

// leaseFixture is a lease table whose Grant checks an epoch and counts versions, and the
// clock it expires leases by.
type leaseFixture struct {
	mu    sync.Mutex
	now   time.Time
	epoch uint64
	clock hlc.Clock
	table *replica.Leases
}

func newLeaseFixture(wait time.Duration) *leaseFixture {
	f := &leaseFixture{now: time.Unix(1_800_000_000, 0), epoch: 7}
	f.table = replica.NewLeases(replica.LeaseConfig{
		Grant: func(bucket, key string, epoch, seen uint64) (uint64, *object.Object, error) {
			if key == "not-mine" {
				return 0, nil, errors.E(errors.Transient, "not the first live holder")
			}
			if epoch != f.epoch {
				return 0, nil, &replica.EpochError{Asked: epoch, Current: f.epoch}
			}
			f.clock.Observe(seen)
			var rec *object.Object
			if key == "held" {
				rec = &object.Object{HLC: 77, ETag: "e", Size: 1}
			}
			return f.clock.Next(), rec, nil
		},
		Observe: f.clock.Observe,
		Wait:    wait,
		Now:     func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now },
	})
	return f
}

func (f *leaseFixture) advance(d time.Duration) { f.mu.Lock(); f.now = f.now.Add(d); f.mu.Unlock() }

// remoteLeases serves table on a loopback socket behind the internode signature check and
// returns a Remote for it.
func remoteLeases(t *testing.T, table *replica.Leases) *replica.Remote {
	t.Helper()
	secret, err := rpc.NewSecret("lease-test-secret-0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	h := replica.NewHandler(replica.HandlerConfig{Local: newLocal(t), Secret: secret, Leases: table, Logger: discard()})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w, _, _, ok := secret.Authenticate(w, r)
		if !ok {
			return
		}
		h.ServeHTTP(w, r)
		rpc.EndResponse(w)
	}))
	t.Cleanup(srv.Close)
	tr := rpc.NewTransport()
	t.Cleanup(tr.CloseIdleConnections)
	return &replica.Remote{Node: "n1", Addr: srv.Listener.Addr().String(), Timeout: 10 * time.Second,
		RPC: &rpc.Client{Secret: secret, Node: "gw", HTTP: &http.Client{Transport: tr}}}
}

// TestLeases runs the same checks against the table itself and through the internode
// protocol: one lease per key at a time, versions that grow from one lease to the next
// (and past the coordinator's clock and a version used), refusals for another epoch and
// for a node that is not the key's holder, busy after the wait, expiry of a lease never
// given back, and a waiter woken by a release.
func TestLeases(t *testing.T) {
	ctx := context.Background()
	for _, via := range []string{"local", "remote"} {
		t.Run(via, func(t *testing.T) {
			f := newLeaseFixture(20 * time.Millisecond)
			var h replica.LeaseHolder = f.table
			if via == "remote" {
				h = remoteLeases(t, f.table)
			}
			a, err := h.Acquire(ctx, "b", "k", 7, 1000)
			if err != nil || a.Token == "" || a.Version <= 1000 || a.TTL != replica.LeaseTTL || a.Record != nil {
				t.Fatalf("first lease: %+v, %v", a, err)
			}
			// The holder's record of the key comes with the lease.
			if r, err := h.Acquire(ctx, "b", "held", 7, 0); err != nil || r.Record == nil || r.Record.HLC != 77 || r.Record.ETag != "e" {
				t.Fatalf("lease with a record: %+v, %v", r, err)
			} else if err := h.Release(ctx, "b", "held", r.Token, 0); err != nil {
				t.Fatal(err)
			}
			// Held: another request waits, then is refused as busy; another key is free.
			if _, err := h.Acquire(ctx, "b", "k", 7, 0); !errors.IsErr(err, replica.ErrLeaseBusy) || !errors.Is(errors.Transient, err) {
				t.Fatalf("a held lease: %v, want busy", err)
			}
			if o, err := h.Acquire(ctx, "b", "other", 7, 0); err != nil {
				t.Fatalf("another key: %v", err)
			} else if err := h.Release(ctx, "b", "other", o.Token, 0); err != nil {
				t.Fatal(err)
			}
			// A wrong token gives nothing back.
			if err := h.Release(ctx, "b", "k", "not-the-token", 0); err != nil {
				t.Fatal(err)
			}
			if _, err := h.Acquire(ctx, "b", "k", 7, 0); !errors.IsErr(err, replica.ErrLeaseBusy) {
				t.Fatalf("after a release with another token: %v, want busy", err)
			}
			// Given back with a later version used: the next lease's version is later still.
			used := a.Version + 1<<20
			if err := h.Release(ctx, "b", "k", a.Token, used); err != nil {
				t.Fatal(err)
			}
			b, err := h.Acquire(ctx, "b", "k", 7, 0)
			if err != nil || b.Version <= used || b.Token == a.Token {
				t.Fatalf("lease after a release: %+v, %v (used %d)", b, err, used)
			}
			// Never given back: it expires after its TTL, by the table's clock.
			f.advance(replica.LeaseTTL - time.Millisecond)
			if _, err := h.Acquire(ctx, "b", "k", 7, 0); !errors.IsErr(err, replica.ErrLeaseBusy) {
				t.Fatalf("before the TTL: %v, want busy", err)
			}
			f.advance(time.Millisecond)
			c, err := h.Acquire(ctx, "b", "k", 7, 0)
			if err != nil || c.Version <= b.Version {
				t.Fatalf("after the TTL: %+v, %v", c, err)
			}
			// The expired lease's token gives nothing back.
			if err := h.Release(ctx, "b", "k", b.Token, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := h.Acquire(ctx, "b", "k", 7, 0); !errors.IsErr(err, replica.ErrLeaseBusy) {
				t.Fatalf("after the expired lease's release: %v, want busy", err)
			}
			if err := h.Release(ctx, "b", "k", c.Token, 0); err != nil {
				t.Fatal(err)
			}
			// Another epoch, either way, and a node that is not the key's holder.
			var ee *replica.EpochError
			if _, err := h.Acquire(ctx, "b", "k", 6, 0); !errors.As(err, &ee) || ee.Current != 7 || ee.Asked != 6 {
				t.Fatalf("an older epoch: %v", err)
			}
			if _, err := h.Acquire(ctx, "b", "k", 8, 0); !errors.As(err, &ee) || ee.Current != 7 {
				t.Fatalf("a newer epoch: %v", err)
			}
			if _, err := h.Acquire(ctx, "b", "not-mine", 7, 0); err == nil || errors.As(err, &ee) || errors.IsErr(err, replica.ErrLeaseBusy) {
				t.Fatalf("not the holder: %v", err)
			}
			if n := f.table.Held(); n != 0 {
				t.Fatalf("%d leases held after refusals", n)
			}
		})
	}
	t.Run("release wakes a waiter", func(t *testing.T) {
		f := newLeaseFixture(time.Hour) // a waiter only ends by the release
		a, err := f.table.Acquire(ctx, "b", "k", 7, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			_, err := f.table.Acquire(ctx, "b", "k", 7, 0)
			got <- err
		}()
		f.table.Release(ctx, "b", "k", a.Token, 0)
		if err := <-got; err != nil {
			t.Fatalf("waiter: %v", err)
		}
	})
}
