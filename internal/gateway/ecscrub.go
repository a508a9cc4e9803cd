package gateway

import (
	"context"
	"log/slog"

	"github.com/cairnfs/cairn/internal/erasure"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/topology"
)

// Deep scrub of erasure-code shards. The store checks its own chunk checksums on every
// read, which catches bit rot on disk; the shard's header (erasure.ParseShard) also
// catches a shard that was damaged before it was stored, or that is cut short. A shard
// nobody reads is checked here, once per scrub pass, like any other record; a damaged one
// is rebuilt from the other shards of its stripe (repairShards, as reads and the sync do)
// and put back over the damaged copy.

// verifyShard reads this node's shard record e whole and checks it as a shard. A damaged
// shard is rebuilt and put back; the scrub's status counts what it found and did, and
// the log says it. It returns the bytes read.
func (s *Scrub) verifyShard(ctx context.Context, log *slog.Logger, e object.VersionEntry) int64 {
	rd, err := s.g.cfg.Store.OpenObject(topology.ShardBucket, e.Key)
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
	switch j, err := s.g.ec.RebuildLocal(ctx, e.Key, owner, hdr); {
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
