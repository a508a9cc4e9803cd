package gateway

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/erasure"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/placement"
	"github.com/cairnfs/cairn/internal/stripe"
	"github.com/cairnfs/cairn/internal/topology"
)

// Moving shards with placement. When nodes join, drain or leave, a stripe's nodes in its
// class's table change, and some shards sit on nodes that are no longer among them. Each
// sync round, a node hands off such shards: it copies each to a node of the stripe that
// holds nothing for it (the one a rebuild would choose: missing indices in order onto
// free nodes in stripe order, put only if that node still holds nothing), checks that the
// node now holds that very shard (its header: stripe, index and payload CRC), and only
// then removes its own copy (store.Forget of that exact record). A shard whose index a
// node of the stripe already holds is a spare: it is removed once that copy is checked.
// Copying one shard costs one shard of traffic, where rebuilding it reads K.
//
// Only shards on no table of their code are considered, so a round costs no I/O beyond
// the index while nothing moves.

// misplacedShard is a local shard that is on no table of its class.
type misplacedShard struct {
	key    string
	record uint64
	owner  string
	hdr    erasure.Header
}

// misplacedShards lists this node's shards that no current table of their code puts here.
// A shard whose class cannot be told, or whose table cannot be built (fewer nodes than
// shards in placement), is not listed: it stays where it is.
func (g *Gateway) misplacedShards(m *clustermap.Map) ([]misplacedShard, error) {
	// The tables of the classes that can be placed now, built once for the whole scan.
	type placeable struct {
		k, p int
		tbl  *placement.Table
	}
	var tables []placeable
	for _, c := range stripe.ShardedClasses(m) {
		if tbl, err := g.topo.ShardTable(m, c, true); err == nil {
			k, p := c.Shards()
			tables = append(tables, placeable{k, p, tbl})
		}
	}
	if len(tables) == 0 {
		return nil, nil
	}
	var keys []object.VersionEntry
	err := g.cfg.Store.Scan(func(b, _ string) bool { return b == topology.ShardBucket }, func(e object.VersionEntry) error {
		if !e.Deleted {
			keys = append(keys, e)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []misplacedShard
	for _, e := range keys {
		// Index only: a shard on some table of a sharded class stays.
		if slices.ContainsFunc(tables, func(t placeable) bool { return g.onTable(t.tbl, e.Key) }) {
			continue
		}
		hb, err := g.localShardHeader(e.Key)
		if err != nil {
			continue
		}
		h, err := erasure.ParseHeader(hb)
		if err != nil {
			continue // damaged: the scrub's and the heal's job
		}
		// A shard of a code no table can be built for (fewer nodes in placement than its
		// shards) has nowhere to go: it stays.
		if !slices.ContainsFunc(tables, func(t placeable) bool { return t.k == h.K && t.p == h.M }) {
			continue
		}
		o, err := g.cfg.Store.StatVersion(topology.ShardBucket, e.Key)
		if err != nil || o.HLC != e.HLC {
			continue
		}
		s := misplacedShard{key: e.Key, record: e.HLC, hdr: h}
		for _, kv := range o.UserMeta {
			if kv[0] == "owner" {
				s.owner = kv[1]
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// onTable reports whether this node is one of stripe's nodes in tbl.
func (g *Gateway) onTable(tbl *placement.Table, stripe string) bool {
	return slices.Contains(tbl.Nodes(placement.Partition(topology.ShardBucket, stripe, tbl.Partitions())), g.cfg.NodeID)
}

// localShardHeader reads the header of this node's shard of stripe.
func (g *Gateway) localShardHeader(stripe string) ([]byte, error) {
	return g.ec.ShardHeader(context.Background(), topology.Target{ID: g.cfg.NodeID, Local: true}, stripe)
}

// moveShards hands off this node's misplaced shards (see above). It returns how many
// shards it moved or found already in place and removed.
func (g *Gateway) moveShards(ctx context.Context, m *clustermap.Map, st *SyncStats) {
	shards, err := g.misplacedShards(m)
	if err != nil {
		g.log.Warn("shard moves: cannot list the shards", "err", err)
		return
	}
	pace := newPacer(&g.sync.rate)
	for _, s := range shards {
		if ctx.Err() != nil {
			return
		}
		cls := stripe.CodeClass(m, s.hdr.K, s.hdr.M, g.ownerClass(ctx, s.owner))
		tbl, err := g.topo.ShardTable(m, cls, true)
		if err != nil {
			st.ShardsWaiting++
			continue
		}
		ts := g.topo.ShardTargets(m, tbl, s.key)
		done, err := g.moveShard(ctx, ts, s, pace)
		switch {
		case err != nil:
			st.ShardsWaiting++
			g.log.Debug("shard move: not now", "stripe", s.key, "err", err)
		case done:
			if gone, err := g.cfg.Store.Forget(topology.ShardBucket, s.key, s.record); err == nil && gone {
				st.ShardsMoved++
			}
		}
	}
}

// ownerClass returns the storage class of the object "bucket/key" as its first holder
// that answers has it ("" if none does): it tells classes of one code apart.
func (g *Gateway) ownerClass(ctx context.Context, owner string) string {
	bucket, key, ok := strings.Cut(owner, "/")
	if !ok {
		return ""
	}
	_, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return ""
	}
	for _, t := range ts {
		if t.Down {
			continue
		}
		if o, err := g.replica(t).Stat(ctx, bucket, key); err == nil {
			return o.StorageClass
		}
	}
	return ""
}

// moveShard makes sure a node of the stripe (ts) holds the shard s, copying it to a free
// one if none does. true means this node's copy may go.
func (g *Gateway) moveShard(ctx context.Context, ts []topology.Target, s misplacedShard, pace *pacer) (bool, error) {
	held, free, err := g.probeStripe(ctx, ts, s.key)
	if err != nil {
		return false, err
	}
	if h, ok := held[s.hdr.Index]; ok {
		if h.Stripe == s.hdr.Stripe && h.CRC == s.hdr.CRC {
			return true, nil // a spare: the stripe's nodes have it
		}
		return false, errors.Errorf("", errors.Precondition, "a node of the stripe holds another shard %d", s.hdr.Index)
	}
	// The missing indices in order go to the free nodes in stripe order, as a rebuild
	// would place them, so movers and rebuilds agree on where each goes.
	var missing []int
	for j := range s.hdr.K + s.hdr.M {
		if _, ok := held[j]; !ok {
			missing = append(missing, j)
		}
	}
	pos := slices.Index(missing, s.hdr.Index)
	if pos < 0 || pos >= len(free) {
		return false, errors.E(errors.Transient, "no free node of the stripe for the shard")
	}
	dst := free[pos]
	b, err := g.ec.GetShard(ctx, topology.Target{ID: g.cfg.NodeID, Local: true}, s.key)
	if err != nil {
		return false, err
	}
	if _, _, err := erasure.ParseShard(b); err != nil {
		return false, err // never spread a damaged shard
	}
	pace.wait(ctx, int64(len(b)))
	if err := g.ec.PutShard(ctx, dst, s.key, s.owner, b, true); err != nil {
		return false, err
	}
	hb, err := g.ec.ShardHeader(ctx, dst, s.key)
	if err != nil {
		return false, err
	}
	h, err := erasure.ParseHeader(hb)
	if err != nil || h.Index != s.hdr.Index || h.Stripe != s.hdr.Stripe || h.CRC != s.hdr.CRC {
		return false, errors.Errorf("", errors.Precondition, "node %s does not hold the shard it took", dst.ID)
	}
	g.log.Debug("moved a shard to follow placement", "stripe", s.key, "shard", s.hdr.Index, "to", dst.ID)
	return true, nil
}

// probeStripe reads the headers of the shards ts hold for stripe: held by index, and the
// nodes that hold nothing for it, in stripe order. A node that does not answer makes the
// probe fail: what it holds is unknown.
func (g *Gateway) probeStripe(ctx context.Context, ts []topology.Target, stripe string) (held map[int]erasure.Header, free []topology.Target, err error) {
	hs := make([]*erasure.Header, len(ts))
	absent := make([]bool, len(ts))
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for i, t := range ts {
		if t.Down {
			errs[i] = errors.E(errors.Transient, "node "+t.ID+" is down")
			continue
		}
		wg.Go(func() {
			b, err := g.ec.ShardHeader(ctx, t, stripe)
			switch {
			case errors.Is(errors.NotExist, err):
				absent[i] = true
			case err != nil:
				errs[i] = err
			default:
				if h, err := erasure.ParseHeader(b); err == nil {
					hs[i] = &h
				}
			}
		})
	}
	wg.Wait()
	held = map[int]erasure.Header{}
	for i := range ts {
		switch {
		case errs[i] != nil:
			return nil, nil, errs[i]
		case absent[i]:
			free = append(free, ts[i])
		case hs[i] != nil:
			held[hs[i].Index] = *hs[i]
		}
	}
	return held, free, nil
}
