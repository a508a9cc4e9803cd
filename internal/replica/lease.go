package replica

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/wire"
)

// Leases serialize the conditional writes of a key (S3's If-Match and If-None-Match on
// PUT, copy and CompleteMultipartUpload). A coordinator whose body is complete asks the
// key's first live holder (in its map's placement order) for a lease on the key, reads
// the key with a quorum that meets every acknowledged write, evaluates its condition,
// writes with the version the lease came with, and gives the lease back. The holder
// grants one lease per key at a time, only under its current map epoch, and the versions
// it grants grow from one lease to the next, so a later conditional write of a key is
// always newer than an earlier one. A lease not given back expires after its TTL: a
// coordinator that dies holding one blocks the conditional writes of its key that long.
// Plain writes take no lease. See docs/design/20261123_cluster.md, "Conditional writes".

// LeaseTTL is how long a lease lasts unless given back.
const LeaseTTL = 15 * time.Second

// LeaseWait is how long a request for a lease that another write holds waits for it to
// be given back (or to expire) before it is refused as busy.
const LeaseWait = 5 * time.Second

// ErrLeaseBusy refuses a lease that another conditional write of the key held for as
// long as the holder waits (LeaseWait).
var ErrLeaseBusy = errors.New("another conditional write of the key holds its lease")

// EpochError refuses a lease asked for under a map epoch that is not the holder's current
// one: the coordinator's map or the holder's is behind.
type EpochError struct {
	Asked, Current uint64
}

func (e *EpochError) Error() string {
	return fmt.Sprintf("a lease asked for under map epoch %d; the holder's map is at epoch %d", e.Asked, e.Current)
}

// Lease is a lease granted on a key.
type Lease struct {
	// Token names it (to give it back).
	Token string
	// Version is the version the write takes: later than the seen version asked with and
	// than every version the holder granted with an earlier lease.
	Version uint64
	// TTL is how long the lease lasts from the moment it was granted.
	TTL time.Duration
	// Record is the holder's record of the key (a tombstone included; nil: none), read
	// once the lease was held: the holder's answer to the coordinator's quorum read.
	Record *object.Object
}

// LeaseHolder is a node's lease table as a coordinator reaches it: *Leases on this node,
// *Remote on another.
type LeaseHolder interface {
	// Acquire asks for a lease on bucket/key for a coordinator whose map is at epoch and
	// whose clock is at seen. It waits up to LeaseWait for a lease another write holds,
	// then fails with ErrLeaseBusy; an *EpochError if the holder's map has another epoch;
	// another error if the holder is not the key's first live holder or cannot be reached.
	Acquire(ctx context.Context, bucket, key string, epoch, seen uint64) (Lease, error)
	// Release gives the lease named token back, telling the holder the version the write
	// took under it (0: none). A lease that expired or was given back is not an error.
	Release(ctx context.Context, bucket, key, token string, used uint64) error
}

// LeaseConfig configures Leases.
type LeaseConfig struct {
	// Grant decides, once no other lease on bucket/key is held, whether this node grants
	// one to a coordinator whose map is at epoch and whose clock is at seen: an
	// *EpochError if its current map's epoch is another, another error if it is not the
	// key's first live holder. It returns the version the write takes (later than seen,
	// than its record and than every version Grant returned before: this node's clock)
	// and this node's record of the key (nil: none). Required.
	Grant func(bucket, key string, epoch, seen uint64) (uint64, *object.Object, error)
	// Observe, if set, is told the version a write took under a lease given back (it may
	// be later than the one granted), so that later grants are later still.
	Observe func(v uint64)
	// TTL is how long a lease lasts (default LeaseTTL); Wait how long a request waits for
	// a held lease (default LeaseWait).
	TTL, Wait time.Duration
	// Now is the clock leases expire by (default time.Now).
	Now func() time.Time
}

// Leases is a node's table of the leases it granted on keys. It is safe for concurrent
// use.
type Leases struct {
	cfg  LeaseConfig
	mu   sync.Mutex
	held map[string]*lease // by bucket NUL key
}

type lease struct {
	token   string
	expires time.Time
	gone    chan struct{} // closed when given back
}

var _ LeaseHolder = (*Leases)(nil)

// NewLeases returns an empty lease table.
func NewLeases(cfg LeaseConfig) *Leases {
	if cfg.TTL <= 0 {
		cfg.TTL = LeaseTTL
	}
	if cfg.Wait <= 0 {
		cfg.Wait = LeaseWait
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Leases{cfg: cfg, held: map[string]*lease{}}
}

// sweepAt is the table size from which expired leases of other keys are dropped when a
// lease is granted (those of coordinators that died; a key's own is dropped on sight).
const sweepAt = 1024

// Acquire implements LeaseHolder.
func (l *Leases) Acquire(ctx context.Context, bucket, key string, epoch, seen uint64) (Lease, error) {
	const op errors.Op = "replica.Leases.Acquire"
	id := bucket + "\x00" + key
	var deadline <-chan time.Time
	for {
		l.mu.Lock()
		now := l.cfg.Now()
		cur := l.held[id]
		if cur != nil && !now.Before(cur.expires) {
			delete(l.held, id) // its coordinator did not give it back in time
			cur = nil
		}
		if cur == nil {
			if len(l.held) >= sweepAt {
				for k, o := range l.held {
					if !now.Before(o.expires) {
						delete(l.held, k)
					}
				}
			}
			// Held from now; granted (outside the table's lock) or dropped.
			ls := &lease{token: newToken(), expires: now.Add(l.cfg.TTL), gone: make(chan struct{})}
			l.held[id] = ls
			l.mu.Unlock()
			v, rec, err := l.cfg.Grant(bucket, key, epoch, seen)
			if err != nil {
				l.Release(ctx, bucket, key, ls.token, 0)
				return Lease{}, errors.E(op, err)
			}
			return Lease{Token: ls.token, Version: v, TTL: l.cfg.TTL, Record: rec}, nil
		}
		gone, left := cur.gone, cur.expires.Sub(now)
		l.mu.Unlock()
		if deadline == nil {
			t := time.NewTimer(l.cfg.Wait)
			defer t.Stop()
			deadline = t.C
		}
		expiry := time.NewTimer(left)
		select {
		case <-gone:
		case <-expiry.C:
		case <-deadline:
			expiry.Stop()
			return Lease{}, errors.E(op, errors.Transient, ErrLeaseBusy)
		case <-ctx.Done():
			expiry.Stop()
			return Lease{}, errors.E(op, errors.Transient, ctx.Err())
		}
		expiry.Stop()
	}
}

// Release implements LeaseHolder.
func (l *Leases) Release(_ context.Context, bucket, key, token string, used uint64) error {
	if used != 0 && l.cfg.Observe != nil {
		l.cfg.Observe(used)
	}
	id := bucket + "\x00" + key
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur := l.held[id]; cur != nil && cur.token == token {
		delete(l.held, id)
		close(cur.gone)
	}
	return nil
}

// Held returns the number of leases held (expired ones not yet dropped included).
func (l *Leases) Held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held)
}

func newToken() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// lease serves PathLease: a lease asked for (POST) or given back (DELETE).
func (h *Handler) lease(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost && r.Method != http.MethodDelete {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	bucket, key, err := h.capFor(r, rpc.CapWrite)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	var req wire.LeaseRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 4<<10)).Decode(&req); err != nil {
		wire.WriteError(w, errors.E(errors.Invalid, "malformed lease request"))
		return
	}
	if r.Method == http.MethodDelete {
		h.cfg.Leases.Release(r.Context(), bucket, key, req.Token, req.Used)
		return
	}
	ls, err := h.cfg.Leases.Acquire(r.Context(), bucket, key, req.Epoch, req.Seen)
	var ans wire.LeaseAnswer
	var ee *EpochError
	switch {
	case err == nil:
		ans = wire.LeaseAnswer{Token: ls.Token, Version: ls.Version, TTLMillis: ls.TTL.Milliseconds()}
	case errors.As(err, &ee):
		ans.Epoch = ee.Current
	case errors.IsErr(err, ErrLeaseBusy):
		ans.Busy = true
	default:
		wire.WriteError(w, err)
		return
	}
	if ls.Record != nil {
		w.Header().Set(wire.HdrMeta, wire.EncodeMeta(ls.Record))
	}
	b, _ := json.Marshal(ans)
	w.Header().Set(wire.HdrLease, string(b))
}

// Acquire implements LeaseHolder: it asks node r for a lease.
func (r *Remote) Acquire(ctx context.Context, bucket, key string, epoch, seen uint64) (Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, LeaseWait+r.timeout())
	defer cancel()
	resp, err := r.RPC.Do(ctx, jsonBody(&rpc.Request{Method: http.MethodPost, Addr: r.Addr, Path: wire.PathLease, Query: query(bucket, key),
		Cap: &rpc.Cap{Op: rpc.CapWrite, Bucket: bucket, Key: key}}, wire.LeaseRequest{Epoch: epoch, Seen: seen}))
	if err != nil {
		return Lease{}, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	var ans wire.LeaseAnswer
	if err := json.Unmarshal([]byte(resp.Header.Get(wire.HdrLease)), &ans); err != nil {
		return Lease{}, errors.E(errors.IO, fmt.Errorf("node %s: malformed lease answer: %w", r.Node, err))
	}
	switch {
	case ans.Busy:
		return Lease{}, errors.E(errors.Transient, ErrLeaseBusy)
	case ans.Epoch != 0:
		return Lease{}, &EpochError{Asked: epoch, Current: ans.Epoch}
	case ans.Token == "" || ans.Version == 0 || ans.TTLMillis <= 0:
		return Lease{}, errors.E(errors.IO, fmt.Errorf("node %s: a lease answer without a lease", r.Node))
	}
	ls := Lease{Token: ans.Token, Version: ans.Version, TTL: time.Duration(ans.TTLMillis) * time.Millisecond}
	if m := resp.Header.Get(wire.HdrMeta); m != "" {
		if ls.Record, err = wire.DecodeMeta(m); err != nil {
			r.Release(ctx, bucket, key, ls.Token, 0)
			return Lease{}, err
		}
	}
	return ls, nil
}

// Release implements LeaseHolder: it gives a lease back to node r.
func (r *Remote) Release(ctx context.Context, bucket, key, token string, used uint64) error {
	_, err := r.call(ctx, jsonBody(&rpc.Request{Method: http.MethodDelete, Path: wire.PathLease, Query: query(bucket, key),
		Cap: &rpc.Cap{Op: rpc.CapWrite, Bucket: bucket, Key: key}}, wire.LeaseRequest{Token: token, Used: used}))
	return err
}
