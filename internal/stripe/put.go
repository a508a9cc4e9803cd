package stripe

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// Put cuts src into stripes of K shard units, encodes each and writes its shards
// (stripe i named name(i)), each stripe acknowledged once cls.W of its K+M shards are
// durable. A stripe is read while the previous one's shards are sent: memory does not
// grow with the object. It returns the bytes read.
func (p *Path) Put(ctx context.Context, cls clustermap.Class, owner string, src io.Reader, size int64, name func(i int64) string) (int64, error) {
	m := p.maps.Current()
	layout := LayoutOf(cls)
	code, err := p.Code(layout.K, layout.M)
	if err != nil {
		return 0, err
	}
	tbl, err := p.topo.ShardTable(m, cls, true)
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
			return 0, replica.BodyErr(rerr)
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
			ch <- p.putShards(ctx, cls, p.topo.ShardTargets(m, tbl, stripe), stripe, owner, shards)
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
func (p *Path) putShards(ctx context.Context, cls clustermap.Class, ts []topology.Target, stripe, owner string, shards [][]byte) error {
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
			ch <- res{j, p.putShard(ctx, t, stripe, owner, shards[j])}
		}()
	}
	okN := 0
	var last error
	for range ts {
		r := <-ch
		if r.err != nil {
			last = r.err
			p.log.Warn("shard write failed", "stripe", stripe, "shard", r.j, "node", ts[r.j].ID, "err", r.err)
			continue
		}
		okN++
	}
	if okN < cls.W {
		return replica.QuorumErr("write", okN, cls.W, len(ts), last)
	}
	return nil
}

// putShard stores one shard on t. owner ("bucket/key") is kept in the shard's record so
// that shards of versions no longer current can be found and collected.
func (p *Path) putShard(ctx context.Context, t topology.Target, key, owner string, shard []byte) error {
	return p.PutShard(ctx, t, key, owner, shard, false)
}

// PutShard is putShard; with ifAbsent the write is refused (Precondition) if t holds
// a shard of the stripe already: a node holds one shard per stripe, so a shard put on a
// node found free never replaces one that another repair or move put there meanwhile.
func (p *Path) PutShard(ctx context.Context, t topology.Target, key, owner string, shard []byte, ifAbsent bool) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	meta := &object.Object{Size: int64(len(shard)), ModTime: time.Now().UnixNano(), UserMeta: [][2]string{{"owner", owner}}}
	_, err := p.replica(t).Put(ctx, replica.Write{Bucket: topology.ShardBucket, Key: key, Meta: meta, Body: bytes.NewReader(shard), Size: int64(len(shard)),
		Version: p.clock.Next(), FinalNow: meta, IfAbsent: ifAbsent})
	return err
}
