package gateway

import (
	"bytes"
	"context"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/hlc"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/stripe"
	"github.com/cairnfs/cairn/internal/topology"
)

// Erasure-coded objects (classes with K > 0): package stripe stores the bytes as shards;
// the coordinator's share is the object's record, written like any other on the key's
// holders with their write quorum, marked striped and without a body, once every stripe
// is stored.

// putStriped stores src as an erasure-coded object of class cls: its stripes (stripe.Path.Put),
// then the record on the key's holders (the write quorum of STANDARD).
func (g *Gateway) putStriped(ctx context.Context, cls clustermap.Class, holders []topology.Target, recW int, bucket, key string, meta *object.Object,
	src io.Reader, size int64, finish func(*object.Object) error) (*object.Object, error) {
	version := g.clock.Next()
	total, err := g.ec.Put(ctx, cls, bucket+"/"+key, src, size, func(i int64) string { return stripe.Key(bucket, key, version, i) })
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
	rec.Striped, rec.Stripe = true, stripe.LayoutOf(cls)
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
	total, err := g.ec.Put(ctx, cls, bucket+"/"+key, src, size, func(i int64) string { return stripe.PartKey(bucket, key, uploadID, n, i) })
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
	fin.Striped, fin.Stripe = true, stripe.LayoutOf(cls)
	ok, failed := g.fanOut(ctx, holders, recW, bucket, key, 0, never, func(ctx context.Context, t topology.Target) (*object.Object, error) {
		return g.replica(t).Put(ctx, replica.Write{Bucket: bucket, Key: key, Body: bytes.NewReader(nil), UploadID: uploadID, Part: n, FinalNow: fin})
	})
	if len(ok) < recW {
		return nil, quorumFailure("write", ok, failed, recW, len(holders))
	}
	return fin, nil
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
		upload, isPart := stripe.PartUpload(e.Key)
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
			if strings.HasPrefix(ou[1], stripe.RelayoutPrefix) && time.Since(hlc.Time(s.record)) < stripe.RelayoutGrace {
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
