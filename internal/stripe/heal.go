package stripe

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/erasure"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// repairShards rebuilds the shards of a stripe that are missing or damaged and puts each
// where it belongs: over the damaged copy, or on a node of the stripe that holds none
// (EC read repair).
// It returns how many shards it put back, or -1 if the stripe has too few sound shards to
// rebuild any.
func (p *Path) repairShards(ctx context.Context, ts []topology.Target, stripe string, f *shardFetch, code *erasure.Code) int {
	if f.want != nil && len(f.want) == 0 {
		return 0
	}
	fixed, err := code.Reconstruct(f.shards, f.want)
	if err != nil {
		p.log.Warn("could not rebuild shards", "stripe", stripe, "err", err)
		return -1
	}
	put := 0
	free := map[string]bool{}
	for _, t := range f.empty {
		free[t.ID] = true
	}
	for _, j := range fixed {
		var dst *topology.Target
		if f.holder[j] != nil {
			dst = f.holder[j] // it sent a damaged copy
		} else {
			for _, t := range ts {
				if free[t.ID] && !t.Down {
					free[t.ID] = false
					dst = &t
					break
				}
			}
		}
		ifAbsent := dst != nil && f.absent[dst.ID] // else it replaces a damaged or spare copy
		if dst == nil {
			// Expected while a node of the stripe is down (every read of the stripe gets
			// here): the heal places the shard once the node is back or marked out.
			lvl := slog.LevelWarn
			if slices.ContainsFunc(ts, func(t topology.Target) bool { return t.Down }) {
				lvl = slog.LevelDebug
			}
			p.log.Log(ctx, lvl, "no node to put a rebuilt shard on", "stripe", stripe, "shard", j)
			f.unplaced++
			continue
		}
		if err := p.PutShard(ctx, *dst, stripe, f.owner, f.shards[j], ifAbsent); errors.Is(errors.Precondition, err) {
			p.log.Debug("a node found free for a rebuilt shard holds one now", "stripe", stripe, "shard", j, "node", dst.ID)
		} else if err != nil {
			p.log.Warn("could not put a rebuilt shard back", "stripe", stripe, "shard", j, "node", dst.ID, "err", err)
		} else {
			put++
			p.log.Info("rebuilt a missing or damaged shard", "stripe", stripe, "shard", j, "node", dst.ID)
		}
	}
	return put
}

// HealStats counts what Heal did.
type HealStats struct {
	Stripes    int // stripes checked
	Rebuilt    int // shards rebuilt from the others of their stripe
	Unhealable int // stripes with fewer than K sound shards left anywhere
	Misplaced  int // stripes whose missing shards wait on other nodes to move them, not rebuilt
	Waiting    int // rebuilt shards no node could take yet
}

// Heal checks every stripe of the erasure-coded object bucket/key, whose record is o,
// and rebuilds the shards that are missing or damaged: the sync's share of erasure
// coding. Shards are probed by their header (a few bytes each); only a stripe with
// shards missing is read whole.
func (p *Path) Heal(ctx context.Context, m *clustermap.Map, o *object.Object, bucket, key string) (st HealStats) {
	if !o.Striped || o.Deleted || o.Tiered() {
		return st // a stub's bytes are in an archive tier: no shards to heal
	}
	rd, err := p.Open(o, bucket, key)
	if err != nil {
		p.log.Warn("heal: cannot place the shards of an erasure-coded object", "bucket", bucket, "key", key, "err", err)
		return st
	}
	r := rd.(*stripedReader)
	K, M := o.Stripe.K, o.Stripe.M
	for i, ref := range r.stripes {
		if ctx.Err() != nil {
			return st
		}
		st.Stripes++
		stripe := ref.name
		ts := p.topo.ShardTargets(m, r.tbl, stripe)
		if p.ShardsPresent(ctx, ts, stripe) == K+M {
			continue
		}
		f := &shardFetch{name: stripe, owner: bucket + "/" + key, shards: make([][]byte, K+M), holder: make([]*topology.Target, K+M)}
		f.get(ctx, p, ts)
		good := 0
		for j := range f.shards {
			if f.shards[j] != nil {
				if _, _, err := erasure.ParseShard(f.shards[j]); err == nil {
					good++
				}
			}
		}
		if good == K+M {
			continue
		}
		// Look beyond the stripe's nodes: placement may have changed since the write.
		others := p.othersThan(m, ts)
		if good < K {
			empty := f.empty
			f.get(ctx, p, others)
			f.empty = empty // rebuilt shards go to the stripe's own nodes
		} else if f.want = p.notElsewhere(ctx, m, f, others); len(f.want) == 0 {
			// Every missing index is on a node that placement no longer puts it on: that
			// node moves it here (moveShards), which costs one shard instead of K.
			st.Misplaced++
			continue
		}
		before := 0
		for _, b := range f.shards {
			if b != nil {
				before++
			}
		}
		n := p.repairShards(ctx, ts, stripe, f, r.code)
		if n < 0 {
			st.Unhealable++
			p.log.Error("heal: a stripe has fewer than K sound shards left: its object cannot be read until nodes come back",
				"bucket", bucket, "key", key, "stripe", i, "shards", before, "need", K)
			continue
		}
		st.Rebuilt += n
		st.Waiting += f.unplaced
	}
	return st
}

// notElsewhere returns the indices missing from f (fetched from the stripe's nodes) that
// none of others (nodes outside the stripe, up or draining) holds as a shard of the same
// stripe: the ones to rebuild. It reads only headers; a node that does not answer holds
// nothing as far as this is concerned.
func (p *Path) notElsewhere(ctx context.Context, m *clustermap.Map, f *shardFetch, others []topology.Target) []int {
	var id *erasure.Header
	for _, b := range f.shards {
		if h, _, err := erasure.ParseShard(b); b != nil && err == nil {
			id = &h
			break
		}
	}
	var missing []int
	for j, b := range f.shards {
		if b == nil {
			missing = append(missing, j)
		} else if _, _, err := erasure.ParseShard(b); err != nil {
			missing = append(missing, j)
		}
	}
	if id == nil || len(missing) == 0 {
		return missing
	}
	var mu sync.Mutex
	found := map[int]bool{}
	var wg sync.WaitGroup
	for _, t := range others {
		if n, ok := m.Node(t.ID); !ok || (n.State != clustermap.StateUp && n.State != clustermap.StateDraining) {
			continue // a node marked out is leaving: what it holds is rebuilt
		}
		wg.Go(func() {
			hb, err := p.ShardHeader(ctx, t, f.name)
			if err != nil {
				return
			}
			if h, err := erasure.ParseHeader(hb); err == nil && h.Stripe == id.Stripe {
				mu.Lock()
				found[h.Index] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	want := []int{}
	for _, j := range missing {
		// A damaged copy on the stripe's nodes is rebuilt wherever a sound one is.
		if !found[j] || f.shards[j] != nil {
			want = append(want, j)
		}
	}
	return want
}

// ShardsPresent counts the distinct shard indices the nodes ts hold for stripe, reading
// only each shard's header.
func (p *Path) ShardsPresent(ctx context.Context, ts []topology.Target, stripe string) int {
	var mu sync.Mutex
	seen := map[int]bool{}
	var wg sync.WaitGroup
	for _, t := range ts {
		if t.Down {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, p.timeout)
			defer cancel()
			b, err := p.ShardHeader(ctx, t, stripe)
			if err != nil {
				return
			}
			if h, err := erasure.ParseHeader(b); err == nil {
				mu.Lock()
				seen[h.Index] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return len(seen)
}

// ShardHeader reads the first erasure.HeaderSize bytes of a node's shard of stripe.
func (p *Path) ShardHeader(ctx context.Context, t topology.Target, stripe string) ([]byte, error) {
	rd, err := p.replica(t).Open(ctx, topology.ShardBucket, stripe, replica.OpenOptions{N: erasure.HeaderSize})
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var b bytes.Buffer
	_, err = rd.WriteRange(ctx, &b, 0, min(erasure.HeaderSize, rd.Info().Size))
	return b.Bytes(), err
}

// RebuildLocal rebuilds this node's shard of stripe, found damaged, from the other
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
func (p *Path) RebuildLocal(ctx context.Context, stripe, owner string, hdr *erasure.Header) (int, error) {
	const op errors.Op = "gateway.RebuildLocal"
	m := p.maps.Current()
	self := topology.Target{ID: p.self, Local: true}
	width := erasure.MaxDataShards + erasure.MaxParityShards // until a header tells
	var ts []topology.Target                                 // the stripe's nodes, if its code is known
	if hdr != nil {
		width = hdr.K + hdr.M
		ts = p.Nodes(m, hdr.K, hdr.M, stripe)
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
	f.get(ctx, p, first)
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
		f.get(ctx, p, others) // repairShards puts rebuilt shards only on the stripe's nodes
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
		ts = p.Nodes(m, h.K, h.M, stripe)
	}
	code, err := p.Code(k, len(f.shards)-k)
	if err != nil {
		return 0, errors.E(op, errors.Corrupt, err)
	}
	good, _ := soundShards(f.shards)
	if good < k {
		return 0, errors.E(op, errors.IO, fmt.Errorf("%w: %d sound of the %d needed for stripe %s", erasure.ErrTooFewShards, good, k, stripe))
	}
	j := p.localIndex(f, hdr, ts)
	if f.shards[j] != nil && sound(f.shards[j]) {
		// Every index is sound elsewhere: this node's copy is a spare. Put a sound copy
		// over it, once the stripe's checksums vouch for the set.
		if _, err := code.Reconstruct(f.shards, nil); err != nil {
			return 0, errors.E(op, err)
		}
		if err := p.putShard(ctx, self, stripe, owner, f.shards[j]); err != nil {
			return 0, errors.E(op, err)
		}
	} else {
		f.shards[j], f.holder[j] = nil, &self // rebuilt, it goes here
		if p.repairShards(ctx, ts, stripe, f, code) < 0 {
			return 0, errors.E(op, errors.Corrupt, fmt.Errorf("the shards of stripe %s could not be rebuilt", stripe))
		}
	}
	// What is stored now must be sound and the shard chosen.
	b, err := p.GetShard(ctx, self, stripe)
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
func (p *Path) localIndex(f *shardFetch, hdr *erasure.Header, ts []topology.Target) int {
	pos := -1
	for i, t := range ts {
		if t.ID == p.self {
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

// Nodes returns the nodes of stripe in the placement of the shards of a K+M code:
// the table of a class with that code (the first by name, if several), else of a class
// with that code and no device class. It returns nil if no table can be made.
func (p *Path) Nodes(m *clustermap.Map, k, mm int, stripe string) []topology.Target {
	tbl, err := p.topo.ShardTable(m, CodeClass(m, k, mm, ""), false)
	if err != nil {
		return nil
	}
	return p.topo.ShardTargets(m, tbl, stripe)
}
