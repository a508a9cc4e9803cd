package stripe

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/erasure"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/placement"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// GetShard reads one shard whole; a missing one is a NotExist error.
func (p *Path) GetShard(ctx context.Context, t topology.Target, key string) ([]byte, error) {
	if t.Down {
		return nil, errors.E(errors.Transient, "node "+t.ID+" is down")
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	rd, err := p.replica(t).Open(ctx, topology.ShardBucket, key, replica.OpenOptions{})
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
	p           *Path
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

func (p *Path) Open(o *object.Object, bucket, key string) (replica.Reader, error) {
	m := p.maps.Current()
	code, err := p.Code(o.Stripe.K, o.Stripe.M)
	if err != nil {
		return nil, errors.E(errors.Corrupt, err)
	}
	tbl, err := p.topo.ShardTable(m, CodeClass(m, o.Stripe.K, o.Stripe.M, o.StorageClass), false)
	if err != nil {
		return nil, err
	}
	return &stripedReader{p: p, bucket: bucket, key: key, o: o, m: m, code: code, tbl: tbl, stripes: refsOf(bucket, key, o)}, nil
}

func (r *stripedReader) Info() *object.Object { return r.o }

func (r *stripedReader) Close() error { return nil }

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
	ts := r.p.topo.ShardTargets(r.m, r.tbl, stripe)
	K, M := r.o.Stripe.K, r.o.Stripe.M
	f := &shardFetch{name: stripe, owner: r.bucket + "/" + r.key, shards: make([][]byte, K+M), holder: make([]*topology.Target, K+M)}
	first := min(K, len(ts)) // fewer when the cluster has fewer nodes than K+M
	f.get(ctx, r.p, ts[:first])
	data, err := r.code.Decode(nil, f.shards)
	if err != nil {
		f.get(ctx, r.p, ts[first:])
		data, err = r.code.Decode(nil, f.shards)
		if err != nil {
			// Placement changed since the write: the shards are where they were written.
			f.get(ctx, r.p, r.p.othersThan(r.m, ts))
			data, err = r.code.Decode(nil, f.shards)
		}
		if err == nil {
			r.p.bg.Add(1)
			go func() {
				defer r.p.bg.Done()
				r.p.repairShards(context.WithoutCancel(ctx), ts, stripe, f, r.code)
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
func (f *shardFetch) get(ctx context.Context, p *Path, ts []topology.Target) {
	var wg sync.WaitGroup
	for _, t := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := p.GetShard(ctx, t, f.name)
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
