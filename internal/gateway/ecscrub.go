package gateway

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/cairnfs/cairn/internal/clustermap"
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
	switch j, err := s.g.rebuildLocalShard(ctx, e.Key, owner, hdr); {
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

// rebuildLocalShard rebuilds this node's shard of stripe, found damaged, from the other
// shards of the stripe and puts it back over the damaged copy; it returns the index
// rebuilt. hdr is the damaged shard's header if that is still sound (the code and the
// index), else nil: then the code is read from the other shards, and the index is the one
// no other node holds (or this node's position in the stripe, or the first index missing:
// any sound shard of the stripe is worth more here than a damaged one).
//
// The shards are looked for on the stripe's nodes, then on every storage node (placement
// may have changed since the write). Shards of the stripe missing or damaged elsewhere
// are rebuilt too, as a read does (repairShards). With fewer than K sound shards nothing
// is written and the error wraps erasure.ErrTooFewShards. The rebuilt shards are checked
// against the stripe's checksums before anything is written: never wrong bytes.
func (g *Gateway) rebuildLocalShard(ctx context.Context, stripe, owner string, hdr *erasure.Header) (int, error) {
	const op errors.Op = "gateway.rebuildLocalShard"
	m := g.cfg.Maps.Current()
	self := topology.Target{ID: g.cfg.NodeID, Local: true}
	width := erasure.MaxDataShards + erasure.MaxParityShards // until a header tells
	var ts []topology.Target                                 // the stripe's nodes, if its code is known
	if hdr != nil {
		width = hdr.K + hdr.M
		ts = g.stripeNodes(m, hdr.K, hdr.M, stripe)
	}
	f := &shardFetch{name: stripe, owner: owner, shards: make([][]byte, width), holder: make([]*topology.Target, width)}
	asked := map[string]bool{self.ID: true}
	var first []topology.Target
	for _, t := range ts {
		if !asked[t.ID] && !t.Down {
			asked[t.ID] = true
			first = append(first, t)
		}
	}
	f.get(ctx, g, first)
	k := 0
	if hdr != nil {
		k = hdr.K
	}
	if good, _ := soundShards(f.shards); k == 0 || good < k {
		var others []topology.Target
		for _, n := range m.StorageNodes() {
			if !asked[n.ID] && n.State != clustermap.StateDown {
				asked[n.ID] = true
				others = append(others, topology.Target{ID: n.ID, Addr: n.Addr})
			}
		}
		f.get(ctx, g, others) // repairShards puts rebuilt shards only on the stripe's nodes
	}
	if ctx.Err() != nil {
		return 0, errors.E(op, ctx.Err())
	}
	if hdr == nil {
		// The code, from any sound shard; this node's place in the stripe, from the table.
		_, h := soundShards(f.shards)
		if h == nil {
			return 0, errors.E(op, errors.IO, fmt.Errorf("%w: no sound shard of stripe %s on any node", erasure.ErrTooFewShards, stripe))
		}
		k = h.K
		for j := h.K + h.M; j < width; j++ {
			if f.shards[j] != nil {
				return 0, errors.Errorf(op, errors.Corrupt, "stripe %s has shards of more than one code", stripe)
			}
		}
		f.shards, f.holder = f.shards[:h.K+h.M], f.holder[:h.K+h.M]
		ts = g.stripeNodes(m, h.K, h.M, stripe)
	}
	code, err := g.code(k, len(f.shards)-k)
	if err != nil {
		return 0, errors.E(op, errors.Corrupt, err)
	}
	good, _ := soundShards(f.shards)
	if good < k {
		return 0, errors.E(op, errors.IO, fmt.Errorf("%w: %d sound of the %d needed for stripe %s", erasure.ErrTooFewShards, good, k, stripe))
	}
	j := g.localIndex(f, hdr, ts)
	if f.shards[j] != nil && sound(f.shards[j]) {
		// Every index is sound elsewhere: this node's copy is a spare. Put a sound copy
		// over it, once the stripe's checksums vouch for the set.
		if _, err := code.Reconstruct(f.shards, nil); err != nil {
			return 0, errors.E(op, err)
		}
		if err := g.putShard(ctx, self, stripe, owner, f.shards[j]); err != nil {
			return 0, errors.E(op, err)
		}
	} else {
		f.shards[j], f.holder[j] = nil, &self // rebuilt, it goes here
		if g.repairShards(ctx, ts, stripe, f, code) < 0 {
			return 0, errors.E(op, errors.Corrupt, fmt.Errorf("the shards of stripe %s could not be rebuilt", stripe))
		}
	}
	// What is stored now must be sound and the shard chosen.
	b, err := g.getShard(ctx, self, stripe)
	if err != nil {
		return 0, errors.E(op, err)
	}
	h, _, err := erasure.ParseShard(b)
	if err != nil || h.Index != j {
		return 0, errors.E(op, errors.IO, fmt.Errorf("shard %d of stripe %s was not put back", j, stripe))
	}
	return j, nil
}

// localIndex chooses the index of the shard this node should hold: its damaged shard's
// if the header survived and no other node holds a sound copy; else the only index
// missing; else this node's position in the stripe if that index is missing; else the
// first index missing, or (nothing missing) the header's or this node's position.
func (g *Gateway) localIndex(f *shardFetch, hdr *erasure.Header, ts []topology.Target) int {
	pos := -1
	for i, t := range ts {
		if t.ID == g.cfg.NodeID {
			pos = i
		}
	}
	missing, first := 0, -1
	for i, b := range f.shards {
		if b == nil || !sound(b) {
			missing++
			if first < 0 {
				first = i
			}
		}
	}
	lacks := func(i int) bool { return i >= 0 && i < len(f.shards) && (f.shards[i] == nil || !sound(f.shards[i])) }
	switch {
	case hdr != nil && lacks(hdr.Index):
		return hdr.Index
	case missing == 1:
		return first
	case lacks(pos):
		return pos
	case first >= 0:
		return first
	case hdr != nil:
		return hdr.Index
	case pos >= 0:
		return pos
	}
	return 0
}

// soundShards counts the shards that pass their own checks, and returns the header of
// one of them (nil if none).
func soundShards(shards [][]byte) (int, *erasure.Header) {
	n := 0
	var h *erasure.Header
	for _, b := range shards {
		if b == nil {
			continue
		}
		if hh, _, err := erasure.ParseShard(b); err == nil {
			n++
			if h == nil {
				h = &hh
			}
		}
	}
	return n, h
}

func sound(b []byte) bool {
	_, _, err := erasure.ParseShard(b)
	return err == nil
}

// stripeNodes returns the nodes of stripe in the placement of the shards of a K+M code:
// the table of a class with that code (the first by name, if several), else of a class
// with that code and no device class. It returns nil if no table can be made.
func (g *Gateway) stripeNodes(m *clustermap.Map, k, mm int, stripe string) []topology.Target {
	tbl, err := g.topo.ShardTable(m, codeClass(m, k, mm, ""), false)
	if err != nil {
		return nil
	}
	return g.topo.ShardTargets(m, tbl, stripe)
}
