package volume

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/erasure"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/placement"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// Erasure-coded volumes (docs/design/ec-volumes.md). Data object i of a volume in a K+M
// class is K+M shard objects on the K+M holders the class's shard placement gives the
// stripe "<layer>/<i>": shard j, a mutable object of BlockSize/K bytes, holds strip j of
// every stripe of ECStripe bytes (strips of ECStripe/K bytes), contiguously, as
// Sheepdog lays them out. Each shard has an intent object beside it that holds the
// last write's new bytes for that shard (two-phase writes: the intents first, on every
// holder, then the shards), which is how a write torn between shards is rolled forward,
// or, when too few intents survive, rolled back from K shards still at the old order.

// ECBucket holds the shards of erasure-coded volumes' data objects: an internal bucket
// (anti-entropy and the object layer's shard collection leave it alone; only the lease
// holder's device brings shards to one order).
const ECBucket = ".volshards"

// ECStripe is the bytes of volume data per stripe: a 4 KiB write at a 4 KiB boundary (a
// file system's block, the block size NBD clients are told to prefer) is a whole stripe
// and needs no read; only unaligned heads and tails are read back (read-modify-write).
const ECStripe = 4096

// intentHeader is the size of an intent object's header.
const intentHeader = 40

// ShardKey is the key (in ECBucket) of shard j of a volume's data object i of layer id.
func ShardKey(id string, i int64, j int) string { return fmt.Sprintf("%s/%016x/%d", id, i, j) }

// intentKey is the key of shard j's intent object.
func intentKey(id string, i int64, j int) string { return ShardKey(id, i, j) + "i" }

// StripeName is the stripe whose shard placement holds data object i of layer id.
func StripeName(id string, i int64) string { return ObjectKey(id, i) }

// CheckECClass says whether volumes can be made in class cls: K a power of two that
// divides ECStripe (Sheepdog allows 2, 4, 8 and 16 data strips), and enough parity.
func CheckECClass(cls clustermap.Class) error {
	switch {
	case !cls.EC():
		return nil
	case cls.K&(cls.K-1) != 0 || ECStripe%cls.K != 0:
		return errors.Errorf("", errors.Invalid, "class %s has %d data shards: an erasure-coded volume needs a power of two (1 to 32)", cls.Name, cls.K)
	}
	return nil
}

// ecLayout is how a device stores an erasure-coded volume's data objects.
type ecLayout struct {
	cls   clustermap.Class
	code  *erasure.Code
	k, m  int
	need  int   // shard writes a write needs before it is answered: max(W, M+1)
	strip int64 // bytes of a shard per stripe
	shard int64 // shard object size
	table *placement.Table
}

var codes sync.Map // "k+m" -> *erasure.Code

func newECLayout(cls clustermap.Class, blockSize int64) (*ecLayout, error) {
	if err := CheckECClass(cls); err != nil {
		return nil, err
	}
	key := fmt.Sprint(cls.K, "+", cls.M)
	c, ok := codes.Load(key)
	if !ok {
		code, err := erasure.New(cls.K, cls.M)
		if err != nil {
			return nil, err
		}
		c, _ = codes.LoadOrStore(key, code)
	}
	need := min(max(cls.W, cls.K, cls.M+1), cls.K+cls.M)
	return &ecLayout{cls: cls, code: c.(*erasure.Code), k: cls.K, m: cls.M, need: need,
		strip: ECStripe / int64(cls.K), shard: blockSize / int64(cls.K)}, nil
}

// ecState is what a device knows of one erasure-coded data object's shards.
type ecState struct {
	intent []uint64 // the order of each shard's intent object (0: none, or not known)
	order  []uint64 // the order of each shard, as last seen or written
}

// intent is the header of an intent object: shard j's part of the write prev -> next,
// its new bytes [off, off+n) (none if zero: a hole), which follow the header.
type intent struct {
	prev, next uint64
	off, n     int64
	zero       bool
	sum        uint32 // CRC32C of the bytes
	// repair: a repair's whole write (off 0, the whole shard) of the content of order
	// src, which the intent therefore holds whatever the shard's order (stored in the
	// header's offset field, always 0 for a whole write).
	repair bool
	src    uint64
}

func (it intent) marshal(data []byte) []byte {
	b := make([]byte, intentHeader, intentHeader+len(data))
	copy(b, "CVI1")
	if it.zero {
		b[4] = 1
	}
	off := uint64(it.off)
	if it.repair {
		b[4] |= 2
		off = it.src
	}
	binary.BigEndian.PutUint64(b[8:], it.prev)
	binary.BigEndian.PutUint64(b[16:], it.next)
	binary.BigEndian.PutUint64(b[24:], off)
	binary.BigEndian.PutUint32(b[32:], uint32(it.n))
	binary.BigEndian.PutUint32(b[36:], crc32.Checksum(data, castagnoli))
	return append(b, data...)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func parseIntent(b []byte) (intent, bool) {
	if len(b) < intentHeader || string(b[:4]) != "CVI1" {
		return intent{}, false
	}
	it := intent{zero: b[4]&1 == 1, prev: binary.BigEndian.Uint64(b[8:]), next: binary.BigEndian.Uint64(b[16:]),
		off: int64(binary.BigEndian.Uint64(b[24:])), n: int64(binary.BigEndian.Uint32(b[32:])), sum: binary.BigEndian.Uint32(b[36:])}
	if b[4]&2 != 0 {
		it.repair, it.src, it.off = true, uint64(it.off), 0
	}
	return it, true
}

// ecTargets returns the K+M holders of data object i of layer id, shard j on the j-th:
// a placement of the stripe over the volume's own nodes (Volume.Nodes, fixed when it was
// created), so that nodes joining or leaving the cluster do not move its shards.
func (d *Device) ecTargets(id string, i int64) ([]topology.Target, error) {
	ec := d.ec
	if ec.table == nil {
		return nil, errors.Errorf("", errors.Invalid, "volume %s has no shard placement", d.vol.Name)
	}
	m := d.s.cfg.Maps.Current()
	ids := ec.table.Nodes(placement.Partition(topology.ShardBucket, StripeName(id, i), ec.table.Partitions()))
	if len(ids) != ec.k+ec.m {
		return nil, errors.Errorf("", errors.Invalid, "volume %s: %d shard holders, want %d", d.vol.Name, len(ids), ec.k+ec.m)
	}
	ts := make([]topology.Target, len(ids))
	for j, nid := range ids {
		n, ok := m.Node(nid)
		ts[j] = topology.Target{ID: nid, Addr: n.Addr, Local: d.s.cfg.Topology.IsLocal(nid),
			Down: !ok || n.State == clustermap.StateDown || n.State == clustermap.StateOut}
	}
	return ts, nil
}

// shardTable is the placement of volume v's shards in m: K+M of v.Nodes per stripe,
// spread over zones as the object layer's shard tables are. It is placement version 1
// whatever the map's PlacementVersion: a volume's shard nodes are fixed when it is
// created, and its shards never move to rebalance.
func shardTable(m *clustermap.Map, v clustermap.Volume, width int) (*placement.Table, error) {
	var ns []placement.Node
	for _, id := range v.Nodes {
		n, _ := m.Node(id) // weight 1 and no host: the table changes only with zones
		ns = append(ns, placement.Node{ID: id, Zone: n.Zone, Weight: 1})
	}
	if len(ns) < width {
		return nil, errors.Errorf("", errors.Invalid, "volume %s: %d shard nodes, the class needs %d", v.Name, len(ns), width)
	}
	t, err := placement.New(ns, max(m.Partitions, 1), width)
	if err != nil {
		return nil, errors.E(errors.Invalid, err)
	}
	return t, nil
}

// errCrashed is what a write returns when a test's crash hook stopped it between shard
// writes (the writer died).
var errCrashed = errors.E(errors.IO, "the writer stopped between shard writes (test)")

// shardStat is what catch-up learns of one shard.
type shardStat struct {
	reached bool
	order   uint64 // the shard's order (0: it lacks the shard)
	iorder  uint64 // its intent object's order (0: none)
	it      intent // the intent's header, if iorder > 0
	hasIt   bool
}

// ecSync brings the reachable shards of data object i to one order before the device
// first uses it under this lease, and sets st.order to it (docs/design/ec-volumes.md).
// When every reachable shard is at the newest order, N, nothing is written. Otherwise:
//
//   - if K shards are at N or can get there by applying their intent (its prev is the
//     shard's order), N's content wins (roll forward);
//   - otherwise the write at N was torn before its intents reached K holders, and was
//     not acknowledged (an acknowledged write has max(W, M+1) shards at N, so fewer than
//     K are at any older order): the content of the newest order O that K shards are
//     at or can reach by their intent (one leading to O, or a repair's intent holding
//     O's content) wins (roll back).
//
// The content that wins is written to every shard as a write of its own, at an order
// of this lease past N, with the same two phases as any write: a crash during the
// repair is repaired by the next use, and a shard at N that comes back later is behind
// and rebuilt. It needs max(K, M+1) holders: then a write whose intents reached K
// holders is seen by at least one, and is never rolled forward after a lease read it
// rolled back.
func (d *Device) ecSync(ctx context.Context, i int64, st *objState) error {
	if st.synced {
		return nil
	}
	ec := d.ec
	n := ec.k + ec.m
	ts, err := d.ecTargets(d.vol.ID, i)
	if err != nil {
		return err
	}
	stats := make([]shardStat, n)
	var wg sync.WaitGroup
	for j, t := range ts {
		if t.Down {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			stats[j] = d.statShard(ctx, t, i, j)
		}()
	}
	wg.Wait()
	reached := 0
	var top uint64
	for _, s := range stats {
		if !s.reached {
			continue
		}
		reached++
		top = max(top, s.order)
		if s.hasIt && s.it.next > s.order {
			top = max(top, s.it.next)
		}
	}
	if want := max(ec.k, ec.m+1); reached < want {
		return errors.Errorf("", errors.IO, "volume %s, data object %d: %d of %d shard holders reachable, %d needed", d.vol.Name, i, reached, n, want)
	}
	if !d.ro && EpochOf(top) > d.vol.Epoch {
		return errors.E(errors.Permission, fmt.Errorf("%w: data object %d was written under lease epoch %d", ErrLeaseLost, i, EpochOf(top)))
	}
	st.ec = &ecState{intent: make([]uint64, n), order: make([]uint64, n)}
	for j, s := range stats {
		st.ec.intent[j], st.ec.order[j] = s.iorder, s.order
	}
	at := func(j int, o uint64) bool { return stats[j].reached && stats[j].order == o }
	// A shard can reach order o if it is at o, if its intent leads from its order to o,
	// or if its intent is a repair's whole write of o's content (a repair torn in its
	// intents replaced the intents that led to o: o stays reachable through it).
	canReach := func(j int, o uint64) bool {
		s := stats[j]
		return at(j, o) || s.reached && s.hasIt && (s.it.next == o && s.it.prev == s.order || s.it.repair && s.it.src == o)
	}
	count := func(f func(int) bool) (c int) {
		for j := range n {
			if f(j) {
				c++
			}
		}
		return c
	}
	if count(func(j int) bool { return at(j, top) }) == reached {
		st.order, st.synced, st.unsure = top, true, false
		return nil
	}
	if d.ro {
		if count(func(j int) bool { return at(j, top) }) >= ec.k {
			st.order, st.synced, st.unsure = top, true, false
			return nil
		}
		return errors.Errorf("", errors.IO, "volume %s, data object %d: a write was torn between shards; attach the volume to repair it", d.vol.Name, i)
	}
	if EpochOf(top) == d.vol.Epoch && count(func(j int) bool { return at(j, top) }) >= ec.need {
		// A write of this lease was answered (or could have been) and some holders
		// missed it (they were down, or behind): only their shards are rebuilt, each
		// whole in one write at top, which this lease may write.
		if err := d.rebuildBehind(ctx, ts, i, stats, top); err != nil {
			return err
		}
		st.order, st.synced, st.unsure = top, true, false
		return nil
	}
	// The content that wins, whole: K shards of it, decoded into all.
	shards := make([][]byte, n)
	win, how := top, "rolled forward"
	if count(func(j int) bool { return canReach(j, top) }) < ec.k {
		// The newest older order that K shards are at or can reach with their intent:
		// not only the order shards are at, since a repair torn in its own intents
		// (a whole write at an order past N) may leave N reachable by K shards while
		// neither N nor the order before it has K shards at it.
		win, how = 0, "rolled back"
		for j := range n {
			s := stats[j]
			for _, o := range []uint64{s.order, s.it.next, s.it.src} {
				if s.reached && o > win && o < top && count(func(x int) bool { return canReach(x, o) }) >= ec.k {
					win = o
				}
			}
		}
		if win == 0 && count(func(x int) bool { return canReach(x, 0) }) < ec.k {
			return errors.Errorf("", errors.IO, "volume %s, data object %d: a write was torn between shards, and no version is held by %d reachable shards (the holders that have one may come back)", d.vol.Name, i, ec.k)
		}
	}
	if win > 0 {
		var src []int
		for j := range n {
			if at(j, win) {
				src = append(src, j)
			}
		}
		for j := range n {
			if !at(j, win) && canReach(j, win) {
				src = append(src, j)
			}
		}
		got := 0
		for _, j := range src {
			if got == ec.k {
				break
			}
			b, err := d.shardAt(ctx, ts[j], i, j, stats[j], win)
			if err != nil {
				continue
			}
			shards[j] = b
			got++
		}
		if err := ec.code.ReconstructRaw(shards); err != nil {
			return errors.E(errors.IO, fmt.Errorf("volume %s, data object %d: %w", d.vol.Name, i, err))
		}
	}
	next := Next(top, d.vol.Epoch)
	if err := d.ecPut(ctx, i, st, 0, ec.shard, shards, win == 0, true, win, next); err != nil {
		return err
	}
	d.s.log.Info("repaired the shards of an erasure-coded volume's data object", "volume", d.vol.Name, "object", i,
		"newest", orderString(top), "how", how, "content", orderString(win), "as", orderString(next))
	st.order, st.synced, st.unsure = next, true, false
	return nil
}

// rebuildBehind rebuilds whole at order top every reachable shard of data object i
// that is not at top, from K that are (one that cannot be written is left behind).
func (d *Device) rebuildBehind(ctx context.Context, ts []topology.Target, i int64, stats []shardStat, top uint64) error {
	ec := d.ec
	n := ec.k + ec.m
	var src []int
	for j := range n {
		if stats[j].reached && stats[j].order == top {
			src = append(src, j)
		}
	}
	got, err := d.readShards(ctx, ts, i, top, 0, ec.shard, src[:ec.k])
	if err != nil {
		return err
	}
	shards := make([][]byte, n)
	for _, j := range src[:ec.k] {
		shards[j] = got[j]
	}
	if err := ec.code.ReconstructRaw(shards); err != nil {
		return err
	}
	for j := range n {
		if !stats[j].reached || stats[j].order == top {
			continue
		}
		w := object.RangeWrite{Bucket: ECBucket, Key: ShardKey(d.vol.ID, i, j), Size: ec.shard, Data: shards[j], Prev: stats[j].order, Next: top}
		if _, err := d.s.cfg.Replica(ts[j]).(replica.RangeWriter).WriteRange(ctx, w); err != nil {
			// Left behind: reads decode around it, and find it again.
			d.s.log.Warn("could not rebuild a shard of an erasure-coded volume's data object", "volume", d.vol.Name, "object", i, "shard", j, "node", ts[j].ID, "err", err)
			continue
		}
		d.s.log.Info("rebuilt a shard of an erasure-coded volume's data object that its holder missed", "volume", d.vol.Name, "object", i, "shard", j, "node", ts[j].ID, "order", orderString(top))
	}
	return nil
}

// shardAt returns shard j of data object i whole at order o: as it is, or with its
// intent applied.
func (d *Device) shardAt(ctx context.Context, t topology.Target, i int64, j int, s shardStat, o uint64) ([]byte, error) {
	r := d.s.cfg.Replica(t)
	b := make([]byte, d.ec.shard)
	if s.order > 0 {
		if err := d.readObject(ctx, r, ECBucket, ShardKey(d.vol.ID, i, j), s.order, 0, b); err != nil {
			return nil, err
		}
	}
	if s.order == o {
		return b, nil
	}
	if s.it.off+s.it.n > d.ec.shard {
		return nil, errors.Errorf("", errors.Corrupt, "intent of shard %d past the shard's end", j)
	}
	p := b[s.it.off : s.it.off+s.it.n]
	if s.it.zero {
		clear(p)
		return b, nil
	}
	if err := d.readObject(ctx, r, ECBucket, intentKey(d.vol.ID, i, j), s.iorder, intentHeader, p); err != nil {
		return nil, err
	}
	if crc32.Checksum(p, castagnoli) != s.it.sum {
		return nil, errors.Errorf("", errors.Corrupt, "intent of shard %d does not match its checksum", j)
	}
	return b, nil
}

// statShard reads the order of shard j of data object i and its intent's header.
func (d *Device) statShard(ctx context.Context, t topology.Target, i int64, j int) shardStat {
	r := d.s.cfg.Replica(t)
	var s shardStat
	o, err := r.Stat(ctx, ECBucket, ShardKey(d.vol.ID, i, j))
	switch {
	case errors.Is(errors.NotExist, err):
	case err != nil:
		return s
	case !o.Deleted:
		s.order = o.HLC
	}
	key := intentKey(d.vol.ID, i, j)
	o, err = r.Stat(ctx, ECBucket, key)
	switch {
	case errors.Is(errors.NotExist, err):
		s.reached = true
		return s
	case err != nil:
		return s
	case o.Deleted:
		s.reached = true
		return s
	}
	s.iorder = o.HLC
	hdr := make([]byte, intentHeader)
	if err := d.readObject(ctx, r, ECBucket, key, o.HLC, 0, hdr); err != nil {
		return shardStat{}
	}
	s.it, s.hasIt = parseIntent(hdr)
	s.reached = true
	return s
}

// readObject reads len(p) bytes at off of bucket/key at order from r.
func (d *Device) readObject(ctx context.Context, r replica.Replica, bucket, key string, order uint64, off int64, p []byte) error {
	rd, err := r.Open(ctx, bucket, key, replica.OpenOptions{Version: order, Off: off, N: int64(len(p))})
	if err != nil {
		return err
	}
	defer rd.Close()
	w := &sliceWriter{p: p}
	if _, err := rd.WriteRange(ctx, w, off, int64(len(p))); err != nil {
		return err
	}
	if w.n != len(p) {
		return errors.Errorf("", errors.IO, "%s: short read (%d of %d bytes)", key, w.n, len(p))
	}
	return nil
}

// readShards reads [off, off+n) of the shards which (of data object i, at order) in
// parallel; a shard that cannot be read is left nil in the result, and an error is
// returned only if none could.
func (d *Device) readShards(ctx context.Context, ts []topology.Target, i int64, order uint64, off, n int64, which []int) ([][]byte, error) {
	out := make([][]byte, len(ts))
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for _, j := range which {
		if ts[j].Down {
			errs[j] = errors.E(errors.Transient, "marked down")
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, n)
			if errs[j] = d.readObject(ctx, d.s.cfg.Replica(ts[j]), ECBucket, ShardKey(d.vol.ID, i, j), order, off, p); errs[j] == nil {
				out[j] = p
			}
		}()
	}
	wg.Wait()
	for _, j := range which {
		if errs[j] != nil {
			return out, errors.E(errors.IO, fmt.Errorf("shard %d: %w", j, errs[j]))
		}
	}
	return out, nil
}

// ecReadStripes returns the data of stripes [s0, s1) of data object i at order: the
// K data shards' strips, or, if one cannot be read, any K shards decoded. behind says
// that a holder that is up could not be read at order (it missed writes, or a write
// moved it past order meanwhile).
func (d *Device) ecReadStripes(ctx context.Context, i int64, order uint64, s0, s1 int64) (buf []byte, behind bool, err error) {
	ec := d.ec
	n := ec.k + ec.m
	buf = make([]byte, (s1-s0)*ECStripe)
	if order == 0 {
		return buf, false, nil
	}
	ts, err := d.ecTargets(d.vol.ID, i)
	if err != nil {
		return nil, false, err
	}
	a, l := s0*ec.strip, (s1-s0)*ec.strip
	data := make([]int, ec.k)
	for j := range data {
		data[j] = j
	}
	shards, err := d.readShards(ctx, ts, i, order, a, l, data)
	if err != nil {
		// Degraded: read the parity shards too, and decode from any K.
		var rest []int
		for j := ec.k; j < n; j++ {
			rest = append(rest, j)
		}
		for j := range ec.k {
			behind = behind || shards[j] == nil && !ts[j].Down
		}
		more, _ := d.readShards(ctx, ts, i, order, a, l, rest)
		for j := ec.k; j < n; j++ {
			shards[j] = more[j]
		}
		if err := ec.code.ReconstructRaw(shards); err != nil {
			return nil, true, errors.E(errors.IO, fmt.Errorf("volume %s, data object %d: %w", d.vol.Name, i, err))
		}
	}
	for t := int64(0); t < s1-s0; t++ {
		for j := range ec.k {
			copy(buf[t*ECStripe+int64(j)*ec.strip:], shards[j][t*ec.strip:(t+1)*ec.strip])
		}
	}
	return buf, behind, nil
}

// ecRead serves a read of [off, off+len(p)) of data object i. It holds the object's
// lock only to bring it to one order (ecSync) and to learn that order; the shards are
// read without it, so reads of one object go in parallel. A write that lands meanwhile
// moves shards past the order read: the read is done again at the new order.
func (d *Device) ecRead(ctx context.Context, i, off int64, p []byte) error {
	st := d.obj(i)
	s0, s1 := off/ECStripe, (off+int64(len(p))+ECStripe-1)/ECStripe
	for try := 0; ; try++ {
		st.mu.Lock()
		err := d.ecSync(ctx, i, st)
		order := st.order
		st.mu.Unlock()
		if err != nil {
			return err
		}
		buf, behind, err := d.ecReadStripes(ctx, i, order, s0, s1)
		if behind {
			st.mu.Lock()
			if st.order == order {
				// A holder that is up missed writes: the next use catches it up
				// (one marked down is left to its return).
				st.synced = false
			}
			moved := st.order != order
			st.mu.Unlock()
			if err != nil && moved && try < 100 {
				continue
			}
		}
		if err != nil {
			return err
		}
		copy(p, buf[off-s0*ECStripe:])
		return nil
	}
}

// ecWrite writes data (nil: n zeroes) at off of data object i: the stripes it covers
// are read back where it covers them in part, encoded, and written in two phases,
// first every shard's intent, then the shards (docs/design/ec-volumes.md).
func (d *Device) ecWrite(ctx context.Context, i, off, n int64, data []byte) error {
	ec := d.ec
	k := ec.k + ec.m
	st := d.obj(i)
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := d.ecSync(ctx, i, st); err != nil {
		return err
	}
	if data == nil && st.order == 0 {
		return nil // zeroes into an object never written
	}
	if err := d.check(ctx); err != nil {
		return err
	}
	s0, s1 := off/ECStripe, (off+n+ECStripe-1)/ECStripe
	zero := data == nil && off%ECStripe == 0 && (off+n)%ECStripe == 0
	shards := make([][]byte, k)
	if !zero {
		buf := make([]byte, (s1-s0)*ECStripe)
		if off%ECStripe != 0 {
			head, _, err := d.ecReadStripes(ctx, i, st.order, s0, s0+1)
			if err != nil {
				return err
			}
			copy(buf, head)
		}
		if (off+n)%ECStripe != 0 && (s1-1 > s0 || off%ECStripe == 0) {
			tail, _, err := d.ecReadStripes(ctx, i, st.order, s1-1, s1)
			if err != nil {
				return err
			}
			copy(buf[(s1-1-s0)*ECStripe:], tail)
		}
		if data != nil {
			copy(buf[off-s0*ECStripe:], data)
		} else {
			clear(buf[off-s0*ECStripe : off-s0*ECStripe+n])
		}
		l := (s1 - s0) * ec.strip
		block := make([]byte, int64(k)*l)
		for j := range k {
			shards[j] = block[int64(j)*l : int64(j+1)*l : int64(j+1)*l]
		}
		for t := int64(0); t < s1-s0; t++ {
			for j := range ec.k {
				copy(shards[j][t*ec.strip:(t+1)*ec.strip], buf[t*ECStripe+int64(j)*ec.strip:])
			}
		}
		if err := ec.code.EncodeRaw(shards); err != nil {
			return err
		}
	}
	next := Next(st.order, d.vol.Epoch)
	if err := d.ecPut(ctx, i, st, s0*ec.strip, (s1-s0)*ec.strip, shards, zero, false, 0, next); err != nil {
		return err
	}
	st.order = next
	return nil
}

// ecPut writes [a, a+l) of every shard of data object i (shards[j], or a hole if zero)
// at order next, in two phases: every shard's intent, then every shard. A whole write
// (a repair, a = 0 and l the shard size) takes a shard at whatever order it is; a range
// write needs it at st.order, and a shard behind that (its holder missed writes while
// marked down) is left out of the write and rebuilt by the object's next use. A whole
// write's intents say that they hold the content of order src. It leaves st.synced false
// until it succeeds.
func (d *Device) ecPut(ctx context.Context, i int64, st *objState, a, l int64, shards [][]byte, zero, whole bool, src, next uint64) error {
	ec := d.ec
	prev := st.order
	st.synced = false
	// Phase 1: every shard's intent.
	err := d.ecFan(ctx, i, 1, func(ctx context.Context, j int, r replica.Replica) error {
		it := intent{prev: prev, next: next, off: a, n: l, zero: zero}
		if whole {
			it.prev, it.repair, it.src = st.ec.order[j], true, src
		}
		w := object.RangeWrite{Bucket: ECBucket, Key: intentKey(d.vol.ID, i, j), Size: ec.shard + intentHeader,
			Data: it.marshal(shards[j]), Prev: st.ec.intent[j], Next: next}
		_, err := r.(replica.RangeWriter).WriteRange(ctx, w)
		if errors.Is(errors.Precondition, err) {
			// The intent is not at the order this device saw (a write of this device
			// failed after it landed): it is replaced whatever its order.
			o, serr := r.Stat(ctx, ECBucket, w.Key)
			switch {
			case serr == nil && !o.Deleted && o.HLC < next:
				w.Prev = o.HLC
				_, err = r.(replica.RangeWriter).WriteRange(ctx, w)
			case serr == nil && o.HLC == next:
				err = nil
			}
		}
		if err == nil {
			st.ec.intent[j] = next
		}
		return err
	})
	if err != nil {
		return err
	}
	// Phase 2: the shards.
	behind := false
	var mu sync.Mutex
	err = d.ecFan(ctx, i, 2, func(ctx context.Context, j int, r replica.Replica) error {
		w := object.RangeWrite{Bucket: ECBucket, Key: ShardKey(d.vol.ID, i, j), Size: ec.shard, Off: a, Prev: prev, Next: next}
		if whole {
			w.Prev = st.ec.order[j]
		}
		if zero {
			w.Len = l
		} else {
			w.Data = shards[j]
		}
		for try := 0; ; try++ {
			_, err := r.(replica.RangeWriter).WriteRange(ctx, w)
			if !errors.Is(errors.Precondition, err) {
				if err == nil {
					st.ec.order[j] = next
				}
				return err
			}
			o, serr := r.Stat(ctx, ECBucket, w.Key)
			cur := uint64(0)
			if serr == nil && !o.Deleted {
				cur = o.HLC
			} else if serr != nil && !errors.Is(errors.NotExist, serr) {
				return serr
			}
			switch {
			case cur == next:
				st.ec.order[j] = next
				return nil
			case cur > next || EpochOf(cur) > d.vol.Epoch:
				return errors.E(errors.Permission, fmt.Errorf("%w: shard %s is at write order %s, past this writer's %s", ErrLeaseLost, w.Key, orderString(cur), orderString(next)))
			case whole && try == 0:
				w.Prev = cur
				continue
			}
			mu.Lock()
			behind = true
			mu.Unlock()
			return errShardBehind
		}
	})
	if err != nil {
		return err
	}
	st.synced = !behind
	return nil
}

var errShardBehind = errors.New("the shard's holder missed writes")

// ecFan runs fn on every holder of data object i's shards not marked down, in parallel,
// trying again every 200 ms a holder that does not answer until it answers or the
// cluster marks it down; it fails unless every holder not marked down took it (or is
// behind, errShardBehind) and at least d.ec.need did. Permission (a fenced writer)
// fails it at once.
func (d *Device) ecFan(ctx context.Context, i int64, phase int, fn func(ctx context.Context, j int, r replica.Replica) error) error {
	n := d.ec.k + d.ec.m
	done := make([]bool, n)
	behind := make([]bool, n)
	for {
		ts, err := d.ecTargets(d.vol.ID, i)
		if err != nil {
			return err
		}
		if live := countLive(ts); live < d.ec.need {
			// Refused before anything is sent: a write that could not be answered
			// must not leave intents that a later lease would roll forward.
			return errors.Errorf("", errors.IO, "volume %s, data object %d: %d of %d shard holders are up, a write needs %d (class %s: W=%d, and more than M)", d.vol.Name, i, live, n, d.ec.need, d.ec.cls.Name, d.ec.cls.W)
		}
		errs := make([]error, n)
		crashed := false
		var wg sync.WaitGroup
		for j, t := range ts {
			if t.Down || done[j] || behind[j] {
				continue
			}
			if d.s.cfg.crash != nil && d.s.cfg.crash(phase, j) {
				crashed = true // the writer died before it sent this one
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[j] = fn(ctx, j, d.s.cfg.Replica(t))
			}()
		}
		wg.Wait()
		if crashed {
			return errCrashed
		}
		retry := false
		for j, err := range errs {
			switch {
			case ts[j].Down || done[j] || behind[j]:
			case err == nil:
				done[j] = true
			case err == errShardBehind:
				behind[j] = true
			case errors.Is(errors.Permission, err):
				return errors.E(errors.Permission, fmt.Errorf("node %s refused the write: %w", ts[j].ID, err))
			case errors.Is(errors.Transient, err) || errors.Is(errors.IO, err):
				if ok, held := d.warns.allow("shard write "+ts[j].ID, time.Now()); ok {
					d.s.log.Warn("a shard holder of an erasure-coded volume did not take a write; retrying until it is marked down", "volume", d.vol.Name, "node", ts[j].ID, "err", err, "same_warnings_held", held)
				}
				retry = true
			case errors.Is(errors.NoSpace, err):
				return errors.E(errors.NoSpace, fmt.Errorf("node %s: %w", ts[j].ID, err))
			default:
				return errors.E(errors.IO, fmt.Errorf("node %s: %w", ts[j].ID, err))
			}
		}
		if !retry {
			c := 0
			for _, ok := range done {
				if ok {
					c++
				}
			}
			if c < d.ec.need {
				return errors.Errorf("", errors.IO, "volume %s, data object %d: %d shard holders took the write, %d needed (class %s: W=%d, and more than M)", d.vol.Name, i, c, d.ec.need, d.ec.cls.Name, d.ec.cls.W)
			}
			return nil
		}
		wait := 200 * time.Millisecond
		if d.s.cfg.retry > 0 {
			wait = d.s.cfg.retry
		}
		select {
		case <-ctx.Done():
			return errors.Errorf("", errors.IO, "volume %s, data object %d: a shard holder did not take the write within %s", d.vol.Name, i, d.s.cfg.WriteTimeout)
		case <-time.After(wait):
		}
	}
}

// layoutOf returns the erasure-coded layout of volume v's class in m (nil: replicated).
func layoutOf(m *clustermap.Map, v clustermap.Volume) (*ecLayout, error) {
	cls, ok := m.Class(v.Class)
	switch {
	case !ok && len(v.Nodes) > 0:
		return nil, errors.Errorf("", errors.Invalid, "erasure-coded volume %s: its storage class %q is not in the map", v.Name, v.Class)
	case !ok || !cls.EC():
		return nil, nil // replicated: the data objects' placement does not depend on the class
	}
	ec, err := newECLayout(cls, v.BlockSize)
	if err != nil {
		return nil, err
	}
	if ec.table, err = shardTable(m, v, cls.K+cls.M); err != nil {
		return nil, err
	}
	return ec, nil
}

func countLive(ts []topology.Target) (n int) {
	for _, t := range ts {
		if !t.Down {
			n++
		}
	}
	return n
}

// DeleteShards deletes up to a page of the shards and intents of erasure-coded layer
// id from every storage node that is up, and reports how many it deleted and whether
// more are left. A node that is down keeps its shards of the layer (they are orphans:
// see docs/design/ec-volumes.md).
func (s *Service) DeleteShards(ctx context.Context, id string) (deleted int, more bool, err error) {
	for _, t := range s.cfg.Topology.ListTargets() {
		r := s.cfg.Replica(t)
		res, err := r.List(ctx, ECBucket, object.ListOptions{Prefix: id + "/", Max: 500})
		if errors.Is(errors.NotExist, err) {
			continue
		}
		if err != nil {
			return deleted, true, fmt.Errorf("listing node %s's shards of layer %s: %w", t.ID, id, err)
		}
		for _, e := range res.Objects {
			tomb := object.Object{HLC: e.Object.HLC + 1, ModTime: time.Now().UnixNano()}
			if _, err := r.Delete(ctx, ECBucket, e.Key, tomb); err != nil && !errors.Is(errors.NotExist, err) {
				return deleted, true, fmt.Errorf("deleting shard %s on node %s: %w", e.Key, t.ID, err)
			}
			deleted++
		}
		more = more || res.Truncated
	}
	return deleted, more, nil
}
