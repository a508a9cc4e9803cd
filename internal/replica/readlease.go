package replica

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/wire"
)

// Read leases let a gateway serve an object from its cache with no freshness check while
// the lease lasts (docs/design/object-cache-leases.md). The gateway asks for one with its
// version check (StatLease); the holder records (bucket, key, gateway, expiry), the expiry
// by its monotonic clock counted from when it received the ask, before it reads the
// record it answers with. A change of the key on this holder (a write, delete, in-place
// metadata change, repair: every store mutation of the key, through Changing) first
// revokes the live leases on it, an internode call that the gateway answers once it has
// dropped the lease, or, for a gateway that does not answer, waits until the lease has
// expired; only then does the store commit the change and the holder acknowledge it.
//
// A change revokes before it commits (and no lease is granted while it is pending), so a
// hit under a lease always serves what every holder that granted it has committed.
//
// These are not the leases of conditional writes (lease.go), which serialize writers.

// DefaultReadLease is the read lease a gateway asks for unless configured otherwise.
const DefaultReadLease = 2 * time.Second

// MaxReadLease is the longest read lease a holder grants: changes of a key a gateway
// cannot be reached about wait at most this long.
const MaxReadLease = 5 * time.Second

// LeaseStatter is implemented by replicas that grant read leases (Remote; Local with a
// ReadLeases table): found by type assertion.
type LeaseStatter interface {
	// StatLease is Stat that also asks for a read lease of ttl on bucket/key. It returns
	// the lease granted (0: none), which the holder counts from when it received the ask:
	// the caller counts it from before it asked.
	StatLease(ctx context.Context, bucket, key string, ttl time.Duration) (*object.Object, time.Duration, error)
}

// LeaseClock is the clock a ReadLeases table reads (tests inject one).
type LeaseClock interface {
	// Now is the current time, with a monotonic reading.
	Now() time.Time
	// At returns a channel that is closed or sent on once the clock has reached t.
	At(t time.Time) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                  { return time.Now() }
func (realClock) At(t time.Time) <-chan time.Time { return time.After(time.Until(t)) }

// ReadLeaseConfig configures a ReadLeases table.
type ReadLeaseConfig struct {
	// Max is the longest lease granted (default DefaultReadLease, at most MaxReadLease).
	Max time.Duration
	// PerNode is the most live leases one gateway may hold on this holder (default
	// 65536): past it, its asks are answered without a lease until some expire.
	PerNode int
	// Revoke tells gateway node to drop its lease on bucket/key; nil means the gateway
	// has dropped it. Required (without it no lease is granted). It is called with a
	// context that ends when the lease expires.
	Revoke func(ctx context.Context, node, bucket, key string) error
	// Marker is a file that says this node has granted leases: written (synced) before
	// the first grant, it makes the next process hold back every change of an S3 key
	// for the lease length it records, counted from that process's start, since the
	// leases the previous process granted may still be live and it knows none of them.
	// Empty: no marker (tests).
	Marker string
	// Clock is the clock leases are counted by (nil: the system's monotonic clock).
	Clock  LeaseClock
	Logger *slog.Logger
}

// ReadLeases is a holder's table of the read leases it granted. Safe for concurrent use;
// a nil table grants nothing and Changed returns at once.
type ReadLeases struct {
	cfg   ReadLeaseConfig
	clock LeaseClock
	log   *slog.Logger
	// holdUntil: changes wait until then (a restart within a lease of the last grant).
	holdUntil time.Time

	marked   atomic.Bool
	markOnce sync.Once
	markErr  error

	shards [64]leaseShard
	counts sync.Map // gateway node -> *atomic.Int64: its leases in the table
	sweep  atomic.Int64

	grants, refused, revoked, revokeFailed, held atomic.Int64
	warned                                       atomic.Int64
}

type leaseShard struct {
	mu sync.Mutex
	m  map[leaseKey]*keyLeases
}

// keyLeases are a key's leases and how many changes of it are pending (no lease is
// granted meanwhile).
type keyLeases struct {
	ls       []*readLease
	changing int
}

type leaseKey struct{ bucket, key string }

type readLease struct {
	node   string
	expiry time.Time
	// revoking is set while a change revokes it (closed once done): another change of
	// the key waits for it too.
	revoking chan struct{}
}

// NewReadLeases returns a table. If cfg.Marker exists (the previous process granted
// leases), changes are held back until a lease of the length it records has passed
// since now.
func NewReadLeases(cfg ReadLeaseConfig) *ReadLeases {
	if cfg.Max <= 0 {
		cfg.Max = DefaultReadLease
	}
	cfg.Max = min(cfg.Max, MaxReadLease)
	if cfg.PerNode <= 0 {
		cfg.PerNode = 65536
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	l := &ReadLeases{cfg: cfg, clock: cfg.Clock, log: cfg.Logger.With("component", "read_leases")}
	for i := range l.shards {
		l.shards[i].m = map[leaseKey]*keyLeases{}
	}
	if cfg.Marker != "" {
		if b, err := os.ReadFile(cfg.Marker); err == nil {
			d, perr := time.ParseDuration(strings.TrimSpace(string(b)))
			if perr != nil || d <= 0 || d > MaxReadLease {
				d = MaxReadLease // unreadable: the longest any process grants
			}
			l.holdUntil = l.clock.Now().Add(d)
		} else if !os.IsNotExist(err) {
			l.holdUntil = l.clock.Now().Add(MaxReadLease)
		}
	}
	return l
}

// Max is the longest lease this table grants.
func (l *ReadLeases) Max() time.Duration { return l.cfg.Max }

// leasable reports whether keys of bucket may be leased: S3 buckets only (internal ones
// and volumes' data objects are never cached by gateways, and volume writes must not
// pay for the lookup).
func leasable(bucket string) bool {
	return bucket != "" && bucket[0] != '_' && !store.Internal(bucket)
}

func (l *ReadLeases) shard(k leaseKey) *leaseShard {
	h := uint32(2166136261)
	for i := 0; i < len(k.bucket); i++ {
		h = (h ^ uint32(k.bucket[i])) * 16777619
	}
	for i := 0; i < len(k.key); i++ {
		h = (h ^ uint32(k.key[i])) * 16777619
	}
	return &l.shards[h%uint32(len(l.shards))]
}

func (l *ReadLeases) count(node string) *atomic.Int64 {
	if c, ok := l.counts.Load(node); ok {
		return c.(*atomic.Int64)
	}
	c, _ := l.counts.LoadOrStore(node, new(atomic.Int64))
	return c.(*atomic.Int64)
}

// mark writes the marker once, before the first grant.
func (l *ReadLeases) mark() error {
	if l.cfg.Marker == "" || l.marked.Load() {
		return nil
	}
	l.markOnce.Do(func() {
		l.markErr = writeSynced(l.cfg.Marker, []byte(l.cfg.Max.String()+"\n"))
		l.marked.Store(l.markErr == nil)
	})
	return l.markErr
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Grant records a read lease of at most ask for gateway node on bucket/key and returns
// its length (0: refused, as while a change of the key is pending). The caller reads the
// record it answers with after Grant returns: a change that began before the grant has
// been committed by then (no grant while one is pending), one that begins after it
// revokes this lease before it commits (Changing).
func (l *ReadLeases) Grant(node, bucket, key string, ask time.Duration) time.Duration {
	if l == nil || l.cfg.Revoke == nil || ask <= 0 || node == "" || !leasable(bucket) {
		return 0
	}
	return l.grant(node, bucket, key, ask, false)
}

// grant is Grant; swept says the table was swept for this ask already.
func (l *ReadLeases) grant(node, bucket, key string, ask time.Duration, swept bool) time.Duration {
	if err := l.mark(); err != nil {
		l.refused.Add(1)
		l.warnf("cannot write the read lease marker: no leases granted", "err", err)
		return 0
	}
	d := min(ask, l.cfg.Max)
	k := leaseKey{bucket, key}
	sh := l.shard(k)
	now := l.clock.Now()
	exp := now.Add(d)
	cnt := l.count(node)
	sh.mu.Lock()
	kl := sh.m[k]
	if kl != nil && kl.changing > 0 {
		sh.mu.Unlock()
		return 0 // a change is pending: the read may see either side of it
	}
	if kl == nil {
		kl = &keyLeases{}
	}
	var mine *readLease
	kept := kl.ls[:0]
	for _, x := range kl.ls {
		if x.revoking == nil && !now.Before(x.expiry) {
			l.count(x.node).Add(-1) // expired
			continue
		}
		if x.node == node && x.revoking == nil {
			mine = x
		}
		kept = append(kept, x)
	}
	kl.ls = kept
	if mine == nil && cnt.Load() >= int64(l.cfg.PerNode) {
		if len(kl.ls) == 0 {
			delete(sh.m, k)
		}
		sh.mu.Unlock()
		if !swept && l.sweepExpired(now) {
			return l.grant(node, bucket, key, ask, true)
		}
		l.refused.Add(1)
		return 0
	}
	if mine == nil {
		mine = &readLease{node: node}
		kl.ls = append(kl.ls, mine)
		cnt.Add(1)
	}
	if exp.After(mine.expiry) {
		mine.expiry = exp
	}
	sh.m[k] = kl
	sh.mu.Unlock()
	l.grants.Add(1)
	return d
}

// sweepExpired removes expired leases from the whole table, at most once per half lease,
// and reports whether it ran.
func (l *ReadLeases) sweepExpired(now time.Time) bool {
	last := l.sweep.Load()
	if now.UnixNano()-last < int64(l.cfg.Max/2) || !l.sweep.CompareAndSwap(last, now.UnixNano()) {
		return false
	}
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for k, kl := range sh.m {
			kept := kl.ls[:0]
			for _, x := range kl.ls {
				if x.revoking == nil && !now.Before(x.expiry) {
					l.count(x.node).Add(-1)
					continue
				}
				kept = append(kept, x)
			}
			kl.ls = kept
			if len(kept) == 0 && kl.changing == 0 {
				delete(sh.m, k)
			}
		}
		sh.mu.Unlock()
	}
	return true
}

// Changing is called before a change of bucket/key begins (a write, delete, in-place
// metadata change, repair: every store call that may change the key's records), and the
// function it returns once the change has been committed or has failed, before it is
// acknowledged. Changing returns once no lease granted before it can still be live on a
// gateway: it revokes each live lease (in parallel), waits out the expiry of those whose
// gateway did not confirm, and waits for the revokes another change of the key started.
// Until done is called no lease on the key is granted, so while the change is pending
// a gateway's hit serves what this holder still has committed, and after it every
// lease granted is for what the change left. A table that may know too little after a
// restart holds the change back until its hold has passed.
func (l *ReadLeases) Changing(bucket, key string) (done func()) {
	if l == nil || !leasable(bucket) {
		return noop
	}
	if !l.holdUntil.IsZero() && l.clock.Now().Before(l.holdUntil) {
		l.held.Add(1)
		<-l.clock.At(l.holdUntil)
	}
	k := leaseKey{bucket, key}
	sh := l.shard(k)
	sh.mu.Lock()
	kl := sh.m[k]
	if kl == nil {
		kl = &keyLeases{}
		sh.m[k] = kl
	}
	kl.changing++
	now := l.clock.Now()
	var revoking chan struct{}
	var mine []*readLease
	var others []chan struct{}
	kept := kl.ls[:0]
	for _, x := range kl.ls {
		switch {
		case x.revoking != nil:
			others = append(others, x.revoking)
			kept = append(kept, x)
		case !now.Before(x.expiry):
			l.count(x.node).Add(-1) // expired: nothing to revoke
		default:
			if revoking == nil {
				revoking = make(chan struct{})
			}
			x.revoking = revoking
			mine = append(mine, x)
			kept = append(kept, x)
		}
	}
	kl.ls = kept
	sh.mu.Unlock()
	done = func() {
		sh.mu.Lock()
		kl.changing--
		if kl.changing == 0 && len(kl.ls) == 0 {
			delete(sh.m, k)
		}
		sh.mu.Unlock()
	}
	if len(mine) == 1 {
		l.revoke(mine[0], bucket, key)
	} else if len(mine) > 1 {
		var wg sync.WaitGroup
		for _, x := range mine {
			wg.Add(1)
			go func() { defer wg.Done(); l.revoke(x, bucket, key) }()
		}
		wg.Wait()
	}
	if revoking != nil {
		sh.mu.Lock()
		kept := kl.ls[:0]
		for _, x := range kl.ls {
			if x.revoking == revoking {
				l.count(x.node).Add(-1)
				continue
			}
			kept = append(kept, x)
		}
		kl.ls = kept
		sh.mu.Unlock()
		close(revoking)
	}
	for _, c := range others {
		<-c
	}
	return done
}

func noop() {}

// revoke tells x's gateway to drop its lease, or waits until the lease has expired.
func (l *ReadLeases) revoke(x *readLease, bucket, key string) {
	left := x.expiry.Sub(l.clock.Now())
	if left <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), left)
	err := l.cfg.Revoke(ctx, x.node, bucket, key)
	cancel()
	if err == nil {
		l.revoked.Add(1)
		return
	}
	l.revokeFailed.Add(1)
	l.warnf("a gateway did not confirm dropping its read lease: waiting for it to expire", "node", x.node, "bucket", bucket, "key", key, "err", err)
	<-l.clock.At(x.expiry)
}

// warnf logs a warning at most once every 10 s.
func (l *ReadLeases) warnf(msg string, args ...any) {
	now := time.Now().UnixNano()
	last := l.warned.Load()
	if now-last < int64(10*time.Second) || !l.warned.CompareAndSwap(last, now) {
		return
	}
	l.log.Warn(msg, args...)
}

// ReadLeaseStats are a holder's read lease counters since it started.
type ReadLeaseStats struct {
	// Grants are leases granted (renewals included); Refused asks answered without one
	// (a gateway at its limit, no marker); Revoked leases a gateway confirmed dropping;
	// RevokeFailed revokes not confirmed, whose expiry the change waited for; Held
	// changes held back after a restart.
	Grants, Refused, Revoked, RevokeFailed, Held int64
	// Live is the number of leases in the table now (expired ones not yet swept included).
	Live int64
}

// Stats returns the table's counters.
func (l *ReadLeases) Stats() ReadLeaseStats {
	if l == nil {
		return ReadLeaseStats{}
	}
	var live int64
	l.counts.Range(func(_, v any) bool { live += v.(*atomic.Int64).Load(); return true })
	return ReadLeaseStats{Grants: l.grants.Load(), Refused: l.refused.Load(), Revoked: l.revoked.Load(),
		RevokeFailed: l.revokeFailed.Load(), Held: l.held.Load(), Live: live}
}

// RevokeVia returns a ReadLeaseConfig.Revoke that sends the revoke to the gateway's
// address (addr: false for a node the map does not have) over the internode protocol,
// signed, and calls self for this node's own gateway.
func RevokeVia(c *rpc.Client, selfID string, self func(bucket, key string), addr func(node string) (string, bool)) func(ctx context.Context, node, bucket, key string) error {
	return func(ctx context.Context, node, bucket, key string) error {
		if node == selfID {
			self(bucket, key)
			return nil
		}
		a, ok := addr(node)
		if !ok {
			return errors.E(errors.NotExist, fmt.Errorf("node %s is not in the map", node))
		}
		resp, err := c.Do(ctx, &rpc.Request{Method: http.MethodPost, Addr: a, Path: wire.PathRevoke,
			Query: url.Values{wire.QBucket: {bucket}, wire.QKey: {key}}})
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			return errors.E(errors.IO, fmt.Errorf("node %s answered a revoke with %s", node, resp.Status))
		}
		return nil
	}
}

// ServeRevoke returns the handler of wire.PathRevoke on a gateway: it calls drop, which
// must return only once no hit is served under the lease, and answers 204. The caller's
// middleware checks the internode signature (a tampered or replayed revoke never gets
// here).
func ServeRevoke(drop func(bucket, key string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		q := r.URL.Query()
		if q.Get(wire.QBucket) == "" {
			wire.WriteError(w, errors.E(errors.Invalid, "a revoke names a bucket"))
			return
		}
		drop(q.Get(wire.QBucket), q.Get(wire.QKey))
		w.WriteHeader(http.StatusNoContent)
	}
}

// grantHeader is the value of wire.HdrReadLease for a lease of d.
func grantHeader(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// parseLease reads a lease length in milliseconds (wire.QReadLease, wire.HdrReadLease);
// 0 for none or a malformed one.
func parseLease(s string) time.Duration {
	if s == "" {
		return 0
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms <= 0 || ms > int64(MaxReadLease/time.Millisecond) {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}
