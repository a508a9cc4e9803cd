package repair

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/erasure"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/topology"
)

// ScrubStatus describes a node's deep scrub: the pass in progress, or the last one.
type ScrubStatus struct {
	Node         string    `json:"node"`
	State        string    `json:"state"` // idle, running, paused
	Started      time.Time `json:"started,omitzero"`
	Finished     time.Time `json:"finished,omitzero"`
	NextPass     time.Time `json:"next_pass,omitzero"`
	Objects      int64     `json:"objects"`      // records read in full and verified this pass (shards included)
	Shards       int64     `json:"shards"`       // of those, erasure-code shards (their header and payload CRCs too)
	Bytes        int64     `json:"bytes"`        // body bytes read this pass
	Corrupt      int64     `json:"corrupt"`      // copies and shards that failed a checksum this pass
	Repaired     int64     `json:"repaired"`     // of those, replaced by a good copy from a replica, or rebuilt from their stripe
	Unrepairable int64     `json:"unrepairable"` // damaged shards whose stripe has fewer than K sound shards: left as they are
	Errors       int64     `json:"errors"`       // records that could not be read for another reason
	RateBytes    int64     `json:"rate_bytes_per_sec"`
}

// Scrub is a node's deep scrub: it reads every byte of every object this node stores,
// checks the checksums (chunk records' CRC32C; pebble's block checksums for small bodies),
// and replaces a damaged copy with a good one from another replica; erasure-code shards
// are checked as shards too, and rebuilt from their stripe. A pass runs every
// interval, paced at a byte rate so that it never competes with clients (Spreadshirt's
// lesson); an operator can start, pause and resume it.
type Scrub struct {
	l        *Loops
	interval time.Duration
	rate     atomic.Int64
	start    chan struct{}
	paused   atomic.Bool
	resume   chan struct{}
	mu       sync.Mutex
	st       ScrubStatus
	pass     sync.Mutex   // one pass at a time
	shardBuf bytes.Buffer // the pass's: a shard read whole
}

// NewScrub returns the scrub of this node's store: a pass every interval at rate bytes/s
// (0: unpaced).
func (l *Loops) NewScrub(interval time.Duration, rate int64) *Scrub {
	s := &Scrub{l: l, interval: interval, start: make(chan struct{}, 1), resume: make(chan struct{}, 1)}
	s.rate.Store(rate)
	s.st = ScrubStatus{Node: l.self, State: "idle", RateBytes: rate}
	return s
}

// Start asks for a pass now (or resumes a paused one).
func (s *Scrub) Start() {
	if s.paused.Swap(false) {
		s.resume <- struct{}{}
		return
	}
	select {
	case s.start <- struct{}{}:
	default:
	}
}

// Pause holds the pass in progress (or the next one) until Start.
func (s *Scrub) Pause() { s.paused.Store(true) }

// Status returns the scrub's figures.
func (s *Scrub) Status() ScrubStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	if s.paused.Load() {
		st.State = "paused"
	}
	st.RateBytes = s.rate.Load()
	return st
}

// Run runs passes until ctx ends: the first one interval after start (or when Start is
// called), then every interval.
func (s *Scrub) Run(ctx context.Context) {
	if s.l.store == nil {
		return
	}
	for {
		next := time.Now().Add(s.interval)
		s.mu.Lock()
		s.st.NextPass = next
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		case <-s.start:
		}
		s.Pass(ctx)
	}
}

func (s *Scrub) update(fn func(*ScrubStatus)) {
	s.mu.Lock()
	fn(&s.st)
	s.mu.Unlock()
}

// Pass reads every object once, now (Run runs passes on its schedule); a pass asked for
// while another runs waits for it to end.
func (s *Scrub) Pass(ctx context.Context) {
	s.pass.Lock()
	defer s.pass.Unlock()
	s.update(func(st *ScrubStatus) {
		*st = ScrubStatus{Node: st.Node, State: "running", Started: time.Now()}
	})
	log := s.l.log.With("component", "scrub")
	log.Info("deep scrub pass started")
	begin := time.Now()
	var read int64
	each := func(e object.VersionEntry) error {
		for s.paused.Load() {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-s.resume:
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if e.Deleted || store.Internal(e.Bucket) && e.Bucket != topology.ShardBucket {
			return nil
		}
		var n int64
		var err error
		if e.Bucket == topology.ShardBucket {
			n = s.verifyShard(ctx, log, e) // counts, logs and rebuilds on its own
		} else {
			n, err = s.verify(ctx, e)
		}
		read += n
		switch {
		case errors.Is(errors.Corrupt, err):
			log.Warn("deep scrub found a damaged copy", "bucket", e.Bucket, "key", e.Key, "err", err)
			s.update(func(st *ScrubStatus) { st.Corrupt++ })
			if rerr := s.l.coord.RepairCopy(ctx, e.Bucket, e.Key, e.HLC); rerr == nil {
				s.update(func(st *ScrubStatus) { st.Repaired++ })
			} else {
				log.Error("deep scrub could not repair a damaged copy: it stays damaged until a replica is available", "bucket", e.Bucket, "key", e.Key, "err", rerr)
			}
		case err != nil && !errors.Is(errors.NotExist, err):
			s.update(func(st *ScrubStatus) { st.Errors++ })
		}
		s.update(func(st *ScrubStatus) { st.Objects++; st.Bytes += n })
		// Pace: within the node's background budget, and never faster than the rate.
		if s.l.budget != nil {
			s.l.budget.Wait(ctx, read)
		}
		if r := s.rate.Load(); r > 0 {
			want := time.Duration(float64(read) / float64(r) * float64(time.Second))
			if d := want - time.Since(begin); d > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(d):
				}
			}
		}
		return nil
	}
	// Current records, then the noncurrent versions of versioned keys.
	err := s.l.store.Scan(nil, each)
	if err == nil {
		err = s.l.store.ScanVersions(nil, each)
	}
	st := s.Status()
	s.update(func(st *ScrubStatus) { st.State = "idle"; st.Finished = time.Now() })
	if err != nil && ctx.Err() == nil {
		log.Error("deep scrub pass failed", "err", err)
		return
	}
	log.Info("deep scrub pass finished", "objects", st.Objects, "shards", st.Shards, "bytes", st.Bytes, "corrupt", st.Corrupt, "repaired", st.Repaired,
		"unrepairable", st.Unrepairable, "errors", st.Errors, "took", time.Since(begin).Round(time.Second))
}

// verify reads one object's body in full, checking every checksum, and returns the bytes
// read. A copy that changed since the scan is skipped.
func (s *Scrub) verify(ctx context.Context, e object.VersionEntry) (int64, error) {
	open := func() (*store.Reader, error) { return s.l.store.OpenObject(e.Bucket, e.Key) }
	if e.Noncurrent {
		open = func() (*store.Reader, error) { return s.l.store.OpenVersion(e.Bucket, e.Key, e.HLC) }
	}
	rd, err := open()
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	if rd.Object.HLC != e.HLC {
		return 0, nil
	}
	return rd.WriteRange(ctx, io.Discard, 0, rd.Object.BodySize())
}

// Deep scrub of erasure-code shards. The store checks its own chunk checksums on every
// read, which catches bit rot on disk; the shard's header (erasure.ParseShard) also
// catches a shard that was damaged before it was stored, or that is cut short. A shard
// nobody reads is checked here, once per scrub pass, like any other record; a damaged one
// is rebuilt from the other shards of its stripe (stripe.Path.RebuildLocal) and put back
// over the damaged copy.

// verifyShard reads this node's shard record e whole and checks it as a shard. A damaged
// shard is rebuilt and put back; the scrub's status counts what it found and did, and
// the log says it. It returns the bytes read.
func (s *Scrub) verifyShard(ctx context.Context, log *slog.Logger, e object.VersionEntry) int64 {
	rd, err := s.l.store.OpenObject(topology.ShardBucket, e.Key)
	if err != nil {
		if !errors.Is(errors.NotExist, err) { // else removed since the scan
			log.Warn("deep scrub could not open a shard", "stripe", e.Key, "err", err)
			s.update(func(st *ScrubStatus) { st.Errors++ })
		}
		return 0
	}
	if rd.Object.HLC != e.HLC {
		rd.Close()
		return 0 // replaced since the scan: the next pass checks the new one
	}
	owner := ""
	for _, kv := range rd.Object.UserMeta {
		if kv[0] == "owner" {
			owner = kv[1]
		}
	}
	// One buffer for the whole pass (a pass runs alone): a shard is read without allocating.
	buf := &s.shardBuf
	buf.Reset()
	buf.Grow(int(rd.Object.Size))
	n, err := rd.WriteRange(ctx, buf, 0, rd.Object.Size)
	rd.Close()
	s.update(func(st *ScrubStatus) { st.Shards++ })
	switch {
	case err == nil:
		if _, _, err = erasure.ParseShard(buf.Bytes()); err == nil {
			return n
		}
	case ctx.Err() != nil:
		return n
	case !errors.Is(errors.Corrupt, err): // not the store's chunk checksum
		log.Warn("deep scrub could not read a shard", "stripe", e.Key, "err", err)
		s.update(func(st *ScrubStatus) { st.Errors++ })
		return n
	}
	log.Warn("deep scrub found a damaged shard", "stripe", e.Key, "owner", owner, "err", err)
	s.update(func(st *ScrubStatus) { st.Corrupt++ })
	// The header may have survived (the payload is damaged, or only a later chunk of the
	// record): it gives the code and the shard's index. Else the other shards tell.
	var hdr *erasure.Header
	if h, herr := erasure.ParseHeader(buf.Bytes()); herr == nil {
		hdr = &h
	}
	switch j, err := s.l.stripes.RebuildLocal(ctx, e.Key, owner, hdr); {
	case err == nil:
		s.update(func(st *ScrubStatus) { st.Repaired++ })
		log.Warn("deep scrub rebuilt a damaged shard from the other shards of its stripe", "stripe", e.Key, "owner", owner, "shard", j)
	case errors.IsErr(err, erasure.ErrTooFewShards):
		s.update(func(st *ScrubStatus) { st.Unrepairable++ })
		log.Error("deep scrub found a damaged shard it cannot rebuild: its stripe has fewer than K sound shards",
			"stripe", e.Key, "owner", owner, "err", err)
	default:
		log.Error("deep scrub could not rebuild a damaged shard: it stays damaged until the next pass", "stripe", e.Key, "owner", owner, "err", err)
	}
	return n
}
