package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/hints"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// RunHints delivers queued replica writes to their nodes until ctx ends: every interval it
// takes the queue's entries for nodes that are up, finds the newest record of each object
// among its replicas, and copies it (or its tombstone) to the node; an upload's end record
// is sent as it is (the node drops the upload and its parts).
func (g *Gateway) RunHints(ctx context.Context, interval time.Duration) {
	if g.cfg.Hints == nil {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m := g.cfg.Maps.Current()
		es, err := g.cfg.Hints.Entries(512, func(id string) bool {
			n, ok := m.Node(id)
			return ok && n.State == "down"
		})
		if err != nil {
			g.log.Error("reading the hint queue", "err", err)
			continue
		}
		for _, e := range es {
			if ctx.Err() != nil {
				return
			}
			n, ok := m.Node(e.Node)
			if !ok || n.State == "out" {
				g.cfg.Hints.Done(e) // the node left: recovery re-creates its copies elsewhere
				continue
			}
			if n.State == "down" {
				continue
			}
			dst := topology.Target{ID: n.ID, Addr: n.Addr, Local: n.ID == g.cfg.NodeID && g.cfg.Store != nil}
			var err error
			if e.End != nil {
				if err = g.replica(dst).EndUpload(ctx, e.End); errors.Is(errors.NotExist, err) {
					err = nil // the bucket is gone: nothing to deliver
				}
			} else {
				err = g.deliver(ctx, dst, e)
			}
			if err == nil {
				g.cfg.Hints.Done(e)
				continue
			}
			g.log.Debug("hint not delivered yet", "node", e.Node, "bucket", e.Bucket, "key", e.Key, "err", err)
		}
	}
}

// errNotYet means the version a hint asks for is not on any replica (yet).
var errNotYet = errors.E(errors.Transient, "version not found on any replica yet")

// deliver brings dst up to the newest version of e's object known among its replicas.
func (g *Gateway) deliver(ctx context.Context, dst topology.Target, e hints.Entry) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if _, err := g.HeadBucket(ctx, e.Bucket); err != nil {
		return nil // the bucket is gone: nothing to deliver
	}
	_, ts, err := g.topo.Replicas(e.Bucket, e.Key)
	if err != nil {
		return err
	}
	var srcs []topology.Target
	for _, t := range ts {
		if t.ID != dst.ID && !t.Down {
			srcs = append(srcs, t)
		}
	}
	if g.cfg.Store != nil && dst.ID != g.cfg.NodeID {
		srcs = append(srcs, topology.Target{ID: g.cfg.NodeID, Local: true})
	}
	os, _ := topology.Gather(srcs, func(t topology.Target) (*object.Object, error) { return g.replica(t).Stat(ctx, e.Bucket, e.Key) })
	var best *object.Object
	var src topology.Target
	for i, o := range os {
		if o != nil && (best == nil || o.HLC > best.HLC) {
			best, src = o, srcs[i]
		}
	}
	if best == nil || best.HLC < e.Version {
		if time.Since(e.Added) > time.Minute {
			return nil // the write never landed anywhere (it failed as a whole): drop the hint
		}
		return errNotYet
	}
	if cur, err := g.replica(dst).Stat(ctx, e.Bucket, e.Key); err == nil && cur.HLC >= best.HLC {
		return nil
	} else if err != nil && !errors.Is(errors.NotExist, err) {
		return err
	}
	if best.Deleted {
		_, err := g.replica(dst).Delete(ctx, e.Bucket, e.Key, best.HLC, best.ModTime)
		return err
	}
	_, err = g.copyVersion(ctx, src, dst, e.Bucket, e.Key, best.HLC, false)
	return err
}

// copyVersion copies version of bucket/key from src to dst (replica.Copy); with repair
// (dst local only) it replaces a damaged record of the same version.
func (g *Gateway) copyVersion(ctx context.Context, src, dst topology.Target, bucket, key string, version uint64, repair bool) (int64, error) {
	return replica.Copy(ctx, g.replica(src), g.replica(dst), bucket, key, version, repair && dst.Local)
}

// ReplicaState is one replica's record of an object, for operators and tests.
type ReplicaState struct {
	Node    string `json:"node"`
	HLC     uint64 `json:"hlc"`
	ETag    string `json:"etag,omitempty"`
	Size    int64  `json:"size"`
	Deleted bool   `json:"deleted,omitempty"`
	Missing bool   `json:"missing,omitempty"`
	Error   string `json:"error,omitempty"`
	// Class is the storage class the object was written with ("" for STANDARD), Layout
	// how it is stored: "copy" (this record holds the bytes) or "EC K+M" (the record of
	// an erasure-coded object whose shards are on other nodes).
	Class  string `json:"class,omitempty"`
	Layout string `json:"layout,omitempty"`
}

// Replicas reads bucket/key's record directly from each of its replicas.
func (g *Gateway) Replicas(ctx context.Context, bucket, key string) ([]ReplicaState, error) {
	_, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return nil, err
	}
	os, errs := topology.Gather(ts, func(t topology.Target) (*object.Object, error) { return g.replica(t).Stat(ctx, bucket, key) })
	out := make([]ReplicaState, len(ts))
	for i, t := range ts {
		out[i].Node = t.ID
		switch {
		case errors.Is(errors.NotExist, errs[i]):
			out[i].Missing = true
		case errs[i] != nil:
			out[i].Error = errs[i].Error()
		default:
			o := os[i]
			out[i].HLC, out[i].ETag, out[i].Size, out[i].Deleted, out[i].Class = o.HLC, o.ETag, o.Size, o.Deleted, o.StorageClass
			out[i].Layout = "copy"
			if o.Striped {
				out[i].Layout = fmt.Sprintf("EC %d+%d", o.Stripe.K, o.Stripe.M)
				if o.Stripe.K == 1 {
					out[i].Layout = fmt.Sprintf("%d copies of %d KiB chunks", o.Stripe.M+1, o.Stripe.Size>>10)
				}
			}
		}
	}
	return out, nil
}
