package gateway

import (
	"bytes"
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

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
// are checked as shards too, and rebuilt from their stripe (ecscrub.go). A pass runs every
// interval, paced at a byte rate so that it never competes with clients (Spreadshirt's
// lesson); an operator can start, pause and resume it.
type Scrub struct {
	g        *Gateway
	interval time.Duration
	rate     atomic.Int64
	start    chan struct{}
	paused   atomic.Bool
	resume   chan struct{}
	mu       sync.Mutex
	st       ScrubStatus
	shardBuf bytes.Buffer // the pass's (one pass at a time): a shard read whole (ecscrub.go)
}

// NewScrub returns the scrub of this node's store: a pass every interval at rate bytes/s
// (0: unpaced).
func (g *Gateway) NewScrub(interval time.Duration, rate int64) *Scrub {
	s := &Scrub{g: g, interval: interval, start: make(chan struct{}, 1), resume: make(chan struct{}, 1)}
	s.rate.Store(rate)
	s.st = ScrubStatus{Node: g.cfg.NodeID, State: "idle", RateBytes: rate}
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
	if s.g.cfg.Store == nil {
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
		s.pass(ctx)
	}
}

func (s *Scrub) update(fn func(*ScrubStatus)) {
	s.mu.Lock()
	fn(&s.st)
	s.mu.Unlock()
}

// pass reads every object once.
func (s *Scrub) pass(ctx context.Context) {
	s.update(func(st *ScrubStatus) {
		*st = ScrubStatus{Node: st.Node, State: "running", Started: time.Now()}
	})
	log := s.g.log.With("component", "scrub")
	log.Info("deep scrub pass started")
	begin := time.Now()
	var read int64
	err := s.g.cfg.Store.Scan(nil, func(e object.VersionEntry) error {
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
			n = s.verifyShard(ctx, log, e) // counts, logs and rebuilds on its own (ecscrub.go)
		} else {
			n, err = s.verify(ctx, e)
		}
		read += n
		switch {
		case errors.Is(errors.Corrupt, err):
			log.Warn("deep scrub found a damaged copy", "bucket", e.Bucket, "key", e.Key, "err", err)
			s.update(func(st *ScrubStatus) { st.Corrupt++ })
			if rerr := s.g.repairLocal(ctx, e.Bucket, e.Key, e.HLC); rerr == nil {
				s.update(func(st *ScrubStatus) { st.Repaired++ })
			} else {
				log.Error("deep scrub could not repair a damaged copy: it stays damaged until a replica is available", "bucket", e.Bucket, "key", e.Key, "err", rerr)
			}
		case err != nil && !errors.Is(errors.NotExist, err):
			s.update(func(st *ScrubStatus) { st.Errors++ })
		}
		s.update(func(st *ScrubStatus) { st.Objects++; st.Bytes += n })
		// Pace: never faster than the rate.
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
	})
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
	rd, err := s.g.cfg.Store.OpenObject(e.Bucket, e.Key)
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	if rd.Object.HLC != e.HLC {
		return 0, nil
	}
	return rd.WriteRange(ctx, io.Discard, 0, rd.Object.BodySize())
}
