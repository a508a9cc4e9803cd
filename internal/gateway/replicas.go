package gateway

import (
	"context"
	"fmt"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

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
	// MetaHLC is the version's last in-place metadata change (0: none), Tags how many
	// tags the record holds.
	MetaHLC uint64 `json:"meta_hlc,omitempty"`
	Tags    int    `json:"tags,omitempty"`
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
			out[i].MetaHLC, out[i].Tags = o.MetaHLC, len(o.Tags)
			out[i].Layout = "copy"
			if name, _, ok := o.TierRef(); ok {
				out[i].Layout = "archived in tier " + name
			} else if o.Striped {
				out[i].Layout = fmt.Sprintf("EC %d+%d", o.Stripe.K, o.Stripe.M)
				if o.Stripe.K == 1 {
					out[i].Layout = fmt.Sprintf("%d copies of %d KiB chunks", o.Stripe.M+1, o.Stripe.Size>>10)
				}
			}
		}
	}
	return out, nil
}
