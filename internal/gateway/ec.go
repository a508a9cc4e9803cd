package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/erasure"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/hlc"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/placement"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// Erasure-coded objects (classes with K > 0). The object's record lives on the key's
// STANDARD holders like any other, marked striped and without a body. The bytes are cut
// into stripes of K shard units; each stripe is encoded into K data and M parity shards
// (package erasure: every shard carries its own checksum), and the shards go to the K+M
// distinct nodes of the stripe's partition in the class's placement table, as records of
// the internal bucket topology.ShardBucket. Stripes of one object land in different partitions, so
// a large object spreads over the whole cluster. A node holds at most one shard of a
// stripe, under the stripe's name: the shard's header says which one it is, so a shard
// stays readable where it is when placement changes shift positions. See
// docs/design/20261123_classes_and_ec.md.

// The shard size of a full stripe is the class's chunk size (clustermap.DefaultChunk,
// 1 MiB, unless the class sets one): a stripe holds K chunks of the object (4 MiB for
// 4+2). A MiB keeps each shard one sequential write and read on its node, and a ranged
// read fetches at most a stripe more than it needs.
//
// Replicated classes other than STANDARD are stored the same way with a code of 1+(N-1):
// every shard is a whole checksummed copy of its chunk, on N distinct nodes of the class.

// stripeKey names stripe i of version v of bucket/key: fixed length whatever the key.
func stripeKey(bucket, key string, v uint64, i int64) string {
	h := sha256.New()
	io.WriteString(h, bucket)
	h.Write([]byte{0})
	io.WriteString(h, key)
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:12]) + "/" + strconv.FormatUint(v, 16) + "/" + strconv.FormatInt(i, 10)
}

// partStripeKey names stripe i of part n of a multipart upload of bucket/key.
func partStripeKey(bucket, key, upload string, n int, i int64) string {
	return stripeKey(bucket, key, 0, 0)[:24] + "/" + upload + "." + strconv.Itoa(n) + "/" + strconv.FormatInt(i, 10)
}

// stripeRef is one stripe of an object: its name and the bytes of the object it holds.
type stripeRef struct {
	name   string
	off, n int64
}

// stripesOf lists the stripes of the erasure-coded object o (its record), in order.
func stripesOf(bucket, key string, o *object.Object) []stripeRef {
	ss := o.Stripe.Size
	var out []stripeRef
	add := func(size int64, name func(i int64) string) {
		var base int64
		if len(out) > 0 {
			last := out[len(out)-1]
			base = last.off + last.n
		}
		for i := int64(0); i == 0 || i*ss < size; i++ {
			out = append(out, stripeRef{name: name(i), off: base + i*ss, n: min(ss, size-i*ss)})
		}
	}
	if o.Stripe.Upload == "" {
		add(o.Size, func(i int64) string { return stripeKey(bucket, key, o.HLC, i) })
		return out
	}
	sizes := o.PartSizes
	if len(sizes) == 0 {
		sizes = []int64{o.Size} // an object rewritten into another layout (relayout-V)
	}
	for p, num := range o.Stripe.Parts {
		if p < len(sizes) {
			add(sizes[p], func(i int64) string { return partStripeKey(bucket, key, o.Stripe.Upload, num, i) })
		}
	}
	return out
}

// codeClass returns the class whose placement table holds the shards of a stripe coded
// k+p: the class named (an object's StorageClass) if it uses that code, else the first
// class by name that does, else an unnamed class of that code on any device. The table
// depends only on the code and the device class.
func codeClass(m *clustermap.Map, k, p int, name string) clustermap.Class {
	same := func(c clustermap.Class) bool {
		ck, cp := c.Shards()
		return c.Sharded() && ck == k && cp == p
	}
	if c, ok := m.ResolveClass(name); ok && name != "" && same(c) {
		return c
	}
	for _, c := range shardedClasses(m) {
		if same(c) {
			return c
		}
	}
	return clustermap.Class{Name: fmt.Sprintf("ec%d+%d", k, p), K: k, M: p, N: k + p}
}

// shardedClasses returns the classes of m stored as shards (every class but STANDARD),
// by name, with their names set.
func shardedClasses(m *clustermap.Map) []clustermap.Class {
	names := make([]string, 0, len(m.Classes))
	for n := range m.Classes {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []clustermap.Class
	for _, n := range names {
		c := m.Classes[n]
		c.Name = n
		if c.Sharded() {
			out = append(out, c)
		}
	}
	return out
}

// stripeLayout is the record's description of how cls cuts objects into stripes.
func stripeLayout(cls clustermap.Class) object.Stripe {
	k, m := cls.Shards()
	return object.Stripe{K: k, M: m, Size: int64(k) * cls.ChunkSize()}
}

// ecState caches codes and placement tables per class.
type ecState struct {
	mu    sync.Mutex
	codes map[[2]int]*erasure.Code
}

func (g *Gateway) code(k, m int) (*erasure.Code, error) {
	g.ec.mu.Lock()
	defer g.ec.mu.Unlock()
	if c := g.ec.codes[[2]int{k, m}]; c != nil {
		return c, nil
	}
	c, err := erasure.New(k, m)
	if err != nil {
		return nil, err
	}
	if g.ec.codes == nil {
		g.ec.codes = map[[2]int]*erasure.Code{}
	}
	g.ec.codes[[2]int{k, m}] = c
	return c, nil
}

// putStriped stores src as an erasure-coded object of class cls: its stripes (putStripes),
// then the record on the key's holders (the write quorum of STANDARD).
func (g *Gateway) putStriped(ctx context.Context, cls clustermap.Class, holders []topology.Target, recW int, bucket, key string, meta *object.Object,
	src io.Reader, size int64, finish func(*object.Object) error) (*object.Object, error) {
	version := g.clock.Next()
	total, err := g.putStripes(ctx, cls, bucket+"/"+key, src, size, func(i int64) string { return stripeKey(bucket, key, version, i) })
	if err != nil {
		return nil, err
	}
	rec := *meta
	rec.Size = total
	if finish != nil {
		if err := finish(&rec); err != nil {
			return nil, err
		}
	}
	rec.Size = total
	rec.ModTime = time.Now().UnixNano()
	rec.HLC = version
	rec.Striped, rec.Stripe = true, stripeLayout(cls)
	ok, failed := g.fanOut(ctx, holders, recW, bucket, key, version, always, func(ctx context.Context, t topology.Target) (*object.Object, error) {
		return g.replica(t).Put(ctx, replica.Write{Bucket: bucket, Key: key, Meta: &rec, Body: bytes.NewReader(nil), Version: version, FinalNow: &rec})
	})
	if len(ok) < recW {
		return nil, quorumFailure("write", ok, failed, recW, len(holders))
	}
	out := rec
	return &out, nil
}

// putStripedPart stores part n of an erasure-coded upload: its stripes, then the part's
// record (striped, no body) on the key's holders.
func (g *Gateway) putStripedPart(ctx context.Context, cls clustermap.Class, holders []topology.Target, recW int, bucket, key, uploadID string, n int,
	src io.Reader, size int64, finish func(*object.Object) error) (*object.Object, error) {
	total, err := g.putStripes(ctx, cls, bucket+"/"+key, src, size, func(i int64) string { return partStripeKey(bucket, key, uploadID, n, i) })
	if err != nil {
		return nil, err
	}
	fin := &object.Object{Size: total, ModTime: time.Now().UnixNano()}
	if finish != nil {
		if err := finish(fin); err != nil {
			return nil, err
		}
	}
	fin.Size = total
	fin.Striped, fin.Stripe = true, stripeLayout(cls)
	ok, failed := g.fanOut(ctx, holders, recW, bucket, key, 0, never, func(ctx context.Context, t topology.Target) (*object.Object, error) {
		return g.replica(t).Put(ctx, replica.Write{Bucket: bucket, Key: key, Body: bytes.NewReader(nil), UploadID: uploadID, Part: n, FinalNow: fin})
	})
	if len(ok) < recW {
		return nil, quorumFailure("write", ok, failed, recW, len(holders))
	}
	return fin, nil
}

// putStripes cuts src into stripes of K shard units, encodes each and writes its shards
// (stripe i named name(i)), each stripe acknowledged once cls.W of its K+M shards are
// durable. A stripe is read while the previous one's shards are sent: memory does not
// grow with the object. It returns the bytes read.
func (g *Gateway) putStripes(ctx context.Context, cls clustermap.Class, owner string, src io.Reader, size int64, name func(i int64) string) (int64, error) {
	m := g.cfg.Maps.Current()
	layout := stripeLayout(cls)
	code, err := g.code(layout.K, layout.M)
	if err != nil {
		return 0, err
	}
	tbl, err := g.topo.ShardTable(m, cls, true)
	if err != nil {
		return 0, err
	}
	stripeSize := layout.Size
	// One read buffer; each stripe's shards (copies of its bytes) are sent while the next
	// stripes are read and encoded, up to depth stripes in flight.
	depth := putDepth(cls)
	buf := make([]byte, stripeSize)
	shardBufs := make([][][]byte, depth)
	pending := make([]chan error, depth)
	wait := func(slot int) error {
		if pending[slot] == nil {
			return nil
		}
		err := <-pending[slot]
		pending[slot] = nil
		return err
	}
	waitAll := func() error {
		var first error
		for s := range pending {
			if err := wait(s); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	var total int64
	for i := int64(0); ; i++ {
		slot := int(i % int64(depth))
		n, rerr := io.ReadFull(src, buf)
		if rerr != nil && rerr != io.EOF && rerr != io.ErrUnexpectedEOF {
			waitAll()
			return 0, bodyErr(rerr)
		}
		if n == 0 && i > 0 {
			break
		}
		total += int64(n)
		if size >= 0 && total > size {
			waitAll()
			return 0, errors.E(errors.Invalid, "the body is longer than its declared length")
		}
		if err := wait(slot); err != nil { // the stripe that used these shard buffers
			waitAll()
			return 0, err
		}
		shards, err := code.Encode(shardBufs[slot], buf[:n])
		if err != nil {
			waitAll()
			return 0, err
		}
		shardBufs[slot] = shards
		ch := make(chan error, 1)
		pending[slot] = ch
		stripe := name(i)
		go func() {
			ch <- g.putShards(ctx, cls, g.topo.ShardTargets(m, tbl, stripe), stripe, owner, shards)
		}()
		if int64(n) < stripeSize {
			break
		}
	}
	if err := waitAll(); err != nil {
		return 0, err
	}
	if size >= 0 && total != size {
		return 0, errors.E(errors.Invalid, fmt.Sprintf("the body has %d bytes, %d were declared", total, size))
	}
	return total, nil
}

// putDepth is how many stripes of cls a PUT has in flight: enough to keep the nodes busy
// while the next stripe is read and encoded, within about 24 MiB of shards per PUT.
func putDepth(cls clustermap.Class) int {
	k, m := cls.Shards()
	return int(min(max(24<<20/(int64(k+m)*cls.ChunkSize()), 2), 4))
}

// putShards writes the shards of one stripe, shard j to ts[j], and returns nil once
// cls.W of them are durable. Shards that fail are not queued (no other node holds them):
// reads reconstruct them and put them back.
func (g *Gateway) putShards(ctx context.Context, cls clustermap.Class, ts []topology.Target, stripe, owner string, shards [][]byte) error {
	type res struct {
		j   int
		err error
	}
	ch := make(chan res, len(ts))
	for j, t := range ts {
		go func() {
			if t.Down {
				ch <- res{j, errors.E(errors.Transient, "node "+t.ID+" is down")}
				return
			}
			ch <- res{j, g.putShard(ctx, t, stripe, owner, shards[j])}
		}()
	}
	okN := 0
	var last error
	for range ts {
		r := <-ch
		if r.err != nil {
			last = r.err
			g.log.Warn("shard write failed", "stripe", stripe, "shard", r.j, "node", ts[r.j].ID, "err", r.err)
			continue
		}
		okN++
	}
	if okN < cls.W {
		return quorumError("write", okN, cls.W, len(ts), last)
	}
	return nil
}

// putShard stores one shard on t. owner ("bucket/key") is kept in the shard's record so
// that shards of versions no longer current can be found and collected.
func (g *Gateway) putShard(ctx context.Context, t topology.Target, key, owner string, shard []byte) error {
	return g.putShardOpts(ctx, t, key, owner, shard, false)
}

// putShardOpts is putShard; with ifAbsent the write is refused (Precondition) if t holds
// a shard of the stripe already: a node holds one shard per stripe, so a shard put on a
// node found free never replaces one that another repair or move put there meanwhile.
func (g *Gateway) putShardOpts(ctx context.Context, t topology.Target, key, owner string, shard []byte, ifAbsent bool) error {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	meta := &object.Object{Size: int64(len(shard)), ModTime: time.Now().UnixNano(), UserMeta: [][2]string{{"owner", owner}}}
	_, err := g.replica(t).Put(ctx, replica.Write{Bucket: topology.ShardBucket, Key: key, Meta: meta, Body: bytes.NewReader(shard), Size: int64(len(shard)),
		Version: g.clock.Next(), FinalNow: meta, IfAbsent: ifAbsent})
	return err
}

// getShard reads one shard whole; a missing one is a NotExist error.
func (g *Gateway) getShard(ctx context.Context, t topology.Target, key string) ([]byte, error) {
	if t.Down {
		return nil, errors.E(errors.Transient, "node "+t.ID+" is down")
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	rd, err := g.replica(t).Open(ctx, topology.ShardBucket, key, replica.OpenOptions{})
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var b bytes.Buffer
	b.Grow(int(rd.Info().Size))
	if _, err := rd.WriteRange(ctx, &b, 0, rd.Info().Size); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// stripedReader reads an erasure-coded object stripe by stripe, fetching the K data
// shards of each (and the parity shards only when a data shard is missing or damaged),
// with the next stripe read ahead.
type stripedReader struct {
	g           *Gateway
	bucket, key string
	o           *object.Object
	m           *clustermap.Map
	code        *erasure.Code
	tbl         *placement.Table
	stripes     []stripeRef
	// pre is the first stripe of a range, read by Prepare before the response started.
	pre *prefetched
}

type prefetched struct {
	i    int
	data []byte
}

func (g *Gateway) openStriped(o *object.Object, bucket, key string) (ObjectReader, error) {
	m := g.cfg.Maps.Current()
	code, err := g.code(o.Stripe.K, o.Stripe.M)
	if err != nil {
		return nil, errors.E(errors.Corrupt, err)
	}
	tbl, err := g.topo.ShardTable(m, codeClass(m, o.Stripe.K, o.Stripe.M, o.StorageClass), false)
	if err != nil {
		return nil, err
	}
	return &stripedReader{g: g, bucket: bucket, key: key, o: o, m: m, code: code, tbl: tbl, stripes: stripesOf(bucket, key, o)}, nil
}

func (r *stripedReader) Info() *object.Object { return r.o }
func (r *stripedReader) Close() error         { return nil }

// Preparer is implemented by readers that can fetch the start of a range before the
// response's status is sent, so that a read that cannot start is answered with an error
// status rather than a 200 and a cut-off body.
type Preparer interface {
	Prepare(ctx context.Context, off, n int64) error
}

// Prepare reads the first stripe of the range off, n (WriteRange then starts with it).
func (r *stripedReader) Prepare(ctx context.Context, off, n int64) error {
	if n <= 0 || off < 0 || off >= r.o.Size {
		return nil
	}
	ss := r.stripes
	i := sort.Search(len(ss), func(i int) bool { return ss[i].off+ss[i].n > off })
	if i >= len(ss) {
		return nil
	}
	d, err := r.readStripe(ctx, ss[i])
	if err != nil {
		return err
	}
	r.pre = &prefetched{i, d}
	return nil
}

// WriteRange writes n bytes from off, fetching only the stripes the range touches.
func (r *stripedReader) WriteRange(ctx context.Context, w io.Writer, off, n int64) (int64, error) {
	size := r.o.Size
	if off < 0 || n < 0 || off > size || n > size-off {
		return 0, errors.E(errors.Invalid, "range outside the object")
	}
	if n == 0 {
		return 0, nil
	}
	ss := r.stripes
	first := sort.Search(len(ss), func(i int) bool { return ss[i].off+ss[i].n > off })
	last := sort.Search(len(ss), func(i int) bool { return ss[i].off+ss[i].n >= off+n })
	if first >= len(ss) || last >= len(ss) {
		return 0, errors.Errorf("", errors.Corrupt, "the record of %s/%s lists stripes for fewer bytes than its size", r.bucket, r.key)
	}
	type stripe struct {
		data []byte
		err  error
	}
	fetch := func(i int) chan stripe {
		ch := make(chan stripe, 1)
		if p := r.pre; p != nil && p.i == i {
			r.pre = nil
			ch <- stripe{p.data, nil}
			return ch
		}
		go func() {
			d, err := r.readStripe(ctx, ss[i])
			ch <- stripe{d, err}
		}()
		return ch
	}
	var done int64
	next := fetch(first)
	for i := first; i <= last; i++ {
		cur := next
		if i < last {
			next = fetch(i + 1) // read ahead
		}
		s := <-cur
		lo, hi := max(off-ss[i].off, 0), min(off+n-ss[i].off, ss[i].n)
		if s.err == nil && int64(len(s.data)) != ss[i].n {
			s.err = errors.Errorf("", errors.Corrupt, "stripe %s of %s/%s holds %d bytes, the record says %d", ss[i].name, r.bucket, r.key, len(s.data), ss[i].n)
		}
		if s.err == nil {
			var k int
			k, s.err = w.Write(s.data[lo:hi])
			done += int64(k)
		}
		if s.err != nil {
			if i < last {
				<-next
			}
			return done, s.err
		}
	}
	return done, nil
}

// readStripe returns stripe i's bytes: from the K data shards when they are all there and
// sound, else reconstructed from any K sound shards, looked for on the stripe's other
// nodes and, if that is not enough (placement changed since the write), on every
// storage node. The shards found missing or damaged are rebuilt and put back in the
// background.
func (r *stripedReader) readStripe(ctx context.Context, ref stripeRef) ([]byte, error) {
	stripe := ref.name
	ts := r.g.topo.ShardTargets(r.m, r.tbl, stripe)
	K, M := r.o.Stripe.K, r.o.Stripe.M
	f := &shardFetch{name: stripe, owner: r.bucket + "/" + r.key, shards: make([][]byte, K+M), holder: make([]*topology.Target, K+M)}
	first := min(K, len(ts)) // fewer when the cluster has fewer nodes than K+M
	f.get(ctx, r.g, ts[:first])
	data, err := r.code.Decode(nil, f.shards)
	if err != nil {
		f.get(ctx, r.g, ts[first:])
		data, err = r.code.Decode(nil, f.shards)
		if err != nil {
			// Placement changed since the write: the shards are where they were written.
			in := map[string]bool{}
			for _, t := range ts {
				in[t.ID] = true
			}
			var others []topology.Target
			for _, n := range r.m.StorageNodes() {
				if !in[n.ID] && n.State != clustermap.StateDown {
					others = append(others, topology.Target{ID: n.ID, Addr: n.Addr, Local: n.ID == r.g.cfg.NodeID && r.g.cfg.Store != nil})
				}
			}
			f.get(ctx, r.g, others)
			data, err = r.code.Decode(nil, f.shards)
		}
		if err == nil {
			r.g.bg.Add(1)
			go func() {
				defer r.g.bg.Done()
				r.g.repairShards(context.WithoutCancel(ctx), ts, stripe, f, r.code)
			}()
		}
	}
	if err != nil {
		return nil, errors.E(errors.Transient, fmt.Errorf("stripe %s of %s/%s: %w", stripe, r.bucket, r.key, err))
	}
	return data, nil
}

// shardFetch collects the shards of one stripe by their index, whoever holds them.
type shardFetch struct {
	name   string // the stripe's
	owner  string // the object's "bucket/key"
	mu     sync.Mutex
	shards [][]byte           // by index
	holder []*topology.Target // who sent shards[j]
	empty  []topology.Target  // nodes that answered without a usable shard
	want   []int              // the indices to rebuild; nil: every missing or damaged one
	// unplaced counts the rebuilt shards repairShards found no node for.
	unplaced int
	absent   map[string]bool // of those, the ones that hold nothing for the stripe
}

// get asks each of ts for its shard of the stripe, in parallel.
func (f *shardFetch) get(ctx context.Context, g *Gateway, ts []topology.Target) {
	var wg sync.WaitGroup
	for _, t := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := g.getShard(ctx, t, f.name)
			f.mu.Lock()
			defer f.mu.Unlock()
			h, herr := erasure.ParseHeader(b)
			switch {
			case err != nil && !errors.Is(errors.NotExist, err):
				// unreachable: neither a holder nor a place to rebuild to
			case err != nil || herr != nil || h.Index >= len(f.shards):
				f.empty = append(f.empty, t)
				if err != nil {
					if f.absent == nil {
						f.absent = map[string]bool{}
					}
					f.absent[t.ID] = true
				}
			case f.shards[h.Index] == nil:
				f.shards[h.Index], f.holder[h.Index] = b, &t
			default:
				// A second copy of an index (rebuilt while its holder was away): the
				// node may take a shard that is missing instead.
				f.empty = append(f.empty, t)
			}
		}()
	}
	wg.Wait()
}

// repairShards rebuilds the shards of a stripe that are missing or damaged and puts each
// where it belongs: over the damaged copy, or on a node of the stripe that holds none
// (EC read repair).
// It returns how many shards it put back, or -1 if the stripe has too few sound shards to
// rebuild any.
func (g *Gateway) repairShards(ctx context.Context, ts []topology.Target, stripe string, f *shardFetch, code *erasure.Code) int {
	if f.want != nil && len(f.want) == 0 {
		return 0
	}
	fixed, err := code.Reconstruct(f.shards, f.want)
	if err != nil {
		g.log.Warn("could not rebuild shards", "stripe", stripe, "err", err)
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
			g.log.Log(ctx, lvl, "no node to put a rebuilt shard on", "stripe", stripe, "shard", j)
			f.unplaced++
			continue
		}
		if err := g.putShardOpts(ctx, *dst, stripe, f.owner, f.shards[j], ifAbsent); errors.Is(errors.Precondition, err) {
			g.log.Debug("a node found free for a rebuilt shard holds one now", "stripe", stripe, "shard", j, "node", dst.ID)
		} else if err != nil {
			g.log.Warn("could not put a rebuilt shard back", "stripe", stripe, "shard", j, "node", dst.ID, "err", err)
		} else {
			put++
			g.log.Info("rebuilt a missing or damaged shard", "stripe", stripe, "shard", j, "node", dst.ID)
		}
	}
	return put
}

// healStriped checks every stripe of the erasure-coded object bucket/key (this node's
// record of it) and rebuilds the shards that are missing or damaged: the sync's share of
// erasure coding. Shards are probed by their header (a few bytes each); only a stripe
// with shards missing is read whole.
func (g *Gateway) healStriped(ctx context.Context, m *clustermap.Map, bucket, key string, st *SyncStats) {
	o, err := g.cfg.Store.StatVersion(bucket, key)
	if err != nil || !o.Striped || o.Deleted {
		return
	}
	rd, err := g.openStriped(o, bucket, key)
	if err != nil {
		g.log.Warn("heal: cannot place the shards of an erasure-coded object", "bucket", bucket, "key", key, "err", err)
		return
	}
	r := rd.(*stripedReader)
	K, M := o.Stripe.K, o.Stripe.M
	for i, ref := range r.stripes {
		if ctx.Err() != nil {
			return
		}
		st.Stripes++
		stripe := ref.name
		ts := g.topo.ShardTargets(m, r.tbl, stripe)
		if g.shardsPresent(ctx, ts, stripe) == K+M {
			continue
		}
		f := &shardFetch{name: stripe, owner: bucket + "/" + key, shards: make([][]byte, K+M), holder: make([]*topology.Target, K+M)}
		f.get(ctx, g, ts)
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
		in := map[string]bool{}
		for _, t := range ts {
			in[t.ID] = true
		}
		var others []topology.Target
		for _, n := range m.StorageNodes() {
			if !in[n.ID] && n.State != clustermap.StateDown {
				others = append(others, topology.Target{ID: n.ID, Addr: n.Addr, Local: n.ID == g.cfg.NodeID && g.cfg.Store != nil})
			}
		}
		if good < K {
			empty := f.empty
			f.get(ctx, g, others)
			f.empty = empty // rebuilt shards go to the stripe's own nodes
		} else if f.want = g.notElsewhere(ctx, m, f, others); len(f.want) == 0 {
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
		n := g.repairShards(ctx, ts, stripe, f, r.code)
		if n < 0 {
			st.Unhealable++
			g.log.Error("heal: a stripe has fewer than K sound shards left: its object cannot be read until nodes come back",
				"bucket", bucket, "key", key, "stripe", i, "shards", before, "need", K)
			continue
		}
		st.Rebuilt += n
		st.ShardsWaiting += f.unplaced
	}
}

// notElsewhere returns the indices missing from f (fetched from the stripe's nodes) that
// none of others (nodes outside the stripe, up or draining) holds as a shard of the same
// stripe: the ones to rebuild. It reads only headers; a node that does not answer holds
// nothing as far as this is concerned.
func (g *Gateway) notElsewhere(ctx context.Context, m *clustermap.Map, f *shardFetch, others []topology.Target) []int {
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
			hb, err := g.shardHeader(ctx, t, f.name)
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

// shardsPresent counts the distinct shard indices the nodes ts hold for stripe, reading
// only each shard's header.
func (g *Gateway) shardsPresent(ctx context.Context, ts []topology.Target, stripe string) int {
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
			ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
			defer cancel()
			b, err := g.shardHeader(ctx, t, stripe)
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

// shardHeader reads the first erasure.HeaderSize bytes of a node's shard of stripe.
func (g *Gateway) shardHeader(ctx context.Context, t topology.Target, stripe string) ([]byte, error) {
	rd, err := g.replica(t).Open(ctx, topology.ShardBucket, stripe, replica.OpenOptions{N: erasure.HeaderSize})
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var b bytes.Buffer
	_, err = rd.WriteRange(ctx, &b, 0, min(erasure.HeaderSize, rd.Info().Size))
	return b.Bytes(), err
}

// collectShards removes this node's shards of object versions that a newer version (or a
// delete) of their object has replaced: proof that they can never be read again. A shard
// whose object's holders cannot be asked, or show nothing newer, is kept. Shards of
// multipart parts go once their upload is gone and no record reads them
// (uploadStripesNeeded, ecgc.go).
func (g *Gateway) collectShards(ctx context.Context, st *SyncStats) {
	type shard struct {
		key     string
		version uint64 // the object's
		record  uint64 // the shard record's own
	}
	byOwner := map[string][]shard{}
	byUpload := map[[2]string][]shard{} // shards of parts, by owner and upload
	err := g.cfg.Store.Scan(func(b, _ string) bool { return b == topology.ShardBucket }, func(e object.VersionEntry) error {
		// The key is hash/version/stripe: the version is the object's; or a part's,
		// hash/upload.part/stripe.
		upload, isPart := partStripe(e.Key)
		parts := strings.SplitN(e.Key, "/", 3)
		if len(parts) != 3 {
			return nil
		}
		v, err := strconv.ParseUint(parts[1], 16, 64)
		if err != nil && !isPart {
			return nil
		}
		o, err := g.cfg.Store.StatVersion(topology.ShardBucket, e.Key)
		if err != nil {
			return nil
		}
		for _, kv := range o.UserMeta {
			switch {
			case kv[0] != "owner":
			case isPart:
				byUpload[[2]string{kv[1], upload}] = append(byUpload[[2]string{kv[1], upload}], shard{key: e.Key, record: e.HLC})
			default:
				byOwner[kv[1]] = append(byOwner[kv[1]], shard{e.Key, v, e.HLC})
			}
		}
		return nil
	})
	if err != nil {
		g.log.Warn("shard collection: cannot scan the shards", "err", err)
		return
	}
	for owner, shards := range byOwner {
		if ctx.Err() != nil {
			return
		}
		bucket, key, ok := strings.Cut(owner, "/")
		if !ok {
			continue
		}
		_, ts, err := g.topo.Replicas(bucket, key)
		if err != nil {
			continue
		}
		var newest uint64
		for _, t := range ts {
			if t.Down {
				continue
			}
			if o, err := g.replica(t).Stat(ctx, bucket, key); err == nil && o.HLC > newest {
				newest = o.HLC
			}
		}
		// Shards of the newest version itself go only if every holder shows it rewritten
		// into another layout (policy apply); asked once, for the first such shard.
		rewritten, asked := false, false
		for _, s := range shards {
			if newest == s.version && !asked {
				rewritten, asked = g.versionRewritten(ctx, bucket, key, ts, s.version), true
			}
			if newest > s.version || (newest == s.version && rewritten) {
				if gone, err := g.cfg.Store.Forget(topology.ShardBucket, s.key, s.record); err == nil && gone {
					st.Collected++
				}
			}
		}
	}
	for ou, shards := range byUpload {
		if ctx.Err() != nil {
			return
		}
		bucket, key, ok := strings.Cut(ou[0], "/")
		if !ok {
			continue
		}
		needed, ok := g.uploadStripesNeeded(ctx, bucket, key, ou[1])
		for _, s := range shards {
			if strings.HasPrefix(ou[1], relayoutPrefix) && time.Since(hlc.Time(s.record)) < relayoutGrace {
				continue // a rewrite may still be writing the record that reads it
			}
			if ok && !needed[s.key] {
				if gone, err := g.cfg.Store.Forget(topology.ShardBucket, s.key, s.record); err == nil && gone {
					st.Collected++
				}
			}
		}
	}
}
