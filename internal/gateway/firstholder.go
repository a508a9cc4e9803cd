package gateway

import (
	"context"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/replica"
)

// FirstHolder reports whether this node is the first live holder of bucket/key in its
// current map: the holder that grants the key's leases and sends its bucket
// notifications (docs/design/notifications.md). False when no holder is live.
func (g *Gateway) FirstHolder(bucket, key string) bool {
	t, err := g.leaseTarget(g.cfg.Maps.Current(), bucket, key)
	return err == nil && t.Local
}

// FirstHolds reports whether the first live holder of bucket/key holds version hlc of
// it, current or not.
func (g *Gateway) FirstHolds(ctx context.Context, bucket, key string, hlc uint64) (bool, error) {
	t, err := g.leaseTarget(g.cfg.Maps.Current(), bucket, key)
	if err != nil {
		return false, err
	}
	r := g.replica(t)
	rec, err := r.Stat(ctx, bucket, key)
	switch {
	case errors.Is(errors.NotExist, err):
		return false, nil
	case err != nil:
		return false, err
	case rec.HLC == hlc:
		return true, nil
	case rec.HLC < hlc:
		return false, nil
	}
	// A newer current record: the version may be kept beside it (versioning).
	rd, err := r.Open(ctx, bucket, key, replica.OpenOptions{Version: hlc})
	switch {
	case err == nil:
		rd.Close()
		return true, nil
	case errors.Is(errors.NotExist, err), errors.Is(errors.Precondition, err):
		return false, nil
	}
	return false, err
}
