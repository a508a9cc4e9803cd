package repair

import (
	"context"
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
func (l *Loops) RunHints(ctx context.Context, interval time.Duration) {
	if l.hints == nil {
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
		m := l.maps.Current()
		es, err := l.hints.Entries(512, func(id string) bool {
			n, ok := m.Node(id)
			return ok && n.State == "down"
		})
		if err != nil {
			l.log.Error("reading the hint queue", "err", err)
			continue
		}
		for _, e := range es {
			if ctx.Err() != nil {
				return
			}
			n, ok := m.Node(e.Node)
			if !ok || n.State == "out" {
				l.hints.Done(e) // the node left: recovery re-creates its copies elsewhere
				continue
			}
			if n.State == "down" {
				continue
			}
			dst := topology.Target{ID: n.ID, Addr: n.Addr, Local: n.ID == l.self && l.store != nil}
			var err error
			if e.End != nil {
				if err = l.replica(dst).EndUpload(ctx, e.End); errors.Is(errors.NotExist, err) {
					err = nil // the bucket is gone: nothing to deliver
				}
			} else {
				err = l.deliver(ctx, dst, e)
			}
			if err == nil {
				l.hints.Done(e)
				continue
			}
			l.log.Debug("hint not delivered yet", "node", e.Node, "bucket", e.Bucket, "key", e.Key, "err", err)
		}
	}
}

// errNotYet means the version a hint asks for is not on any replica (yet).
var errNotYet = errors.E(errors.Transient, "version not found on any replica yet")

// deliver brings dst up to the newest version of e's object known among its replicas.
func (l *Loops) deliver(ctx context.Context, dst topology.Target, e hints.Entry) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if _, err := l.coord.HeadBucket(ctx, e.Bucket); err != nil {
		return nil // the bucket is gone: nothing to deliver
	}
	_, ts, err := l.topo.Replicas(e.Bucket, e.Key)
	if err != nil {
		return err
	}
	var srcs []topology.Target
	for _, t := range ts {
		if t.ID != dst.ID && !t.Down {
			srcs = append(srcs, t)
		}
	}
	if l.store != nil && dst.ID != l.self {
		srcs = append(srcs, topology.Target{ID: l.self, Local: true})
	}
	os, _ := topology.Gather(srcs, func(t topology.Target) (*object.Object, error) { return l.replica(t).Stat(ctx, e.Bucket, e.Key) })
	var best *object.Object
	var src topology.Target
	for i, o := range os {
		if o.Newer(best) { // (HLC, MetaHLC): the newest version with its latest tags
			best, src = o, srcs[i]
		}
	}
	if best == nil || best.HLC < e.Version {
		if time.Since(e.Added) > time.Minute {
			return nil // the write never landed anywhere (it failed as a whole): drop the hint
		}
		return errNotYet
	}
	if err := l.deliverNewest(ctx, src, dst, e, best); err != nil || !best.Versioned || e.Version >= best.HLC {
		return err
	}
	// A versioned key: the version the hint is for is kept beside the newest one. Copy it
	// from a holder that has it; if none has it (never landed, or removed for good since),
	// anti-entropy settles what is left.
	if have, err := l.replica(dst).Open(ctx, e.Bucket, e.Key, replica.OpenOptions{Version: e.Version}); err == nil {
		have.Close()
		return nil
	}
	for _, t := range srcs {
		if _, err := l.copyVersion(ctx, t, dst, e.Bucket, e.Key, e.Version, false); err == nil {
			return nil
		}
	}
	return nil
}

// deliverNewest brings dst up to best, the newest record of e's key, held by src.
func (l *Loops) deliverNewest(ctx context.Context, src, dst topology.Target, e hints.Entry, best *object.Object) error {
	cur, err := l.replica(dst).Stat(ctx, e.Bucket, e.Key)
	if err == nil && !best.Newer(cur) {
		return nil
	} else if err != nil && !errors.Is(errors.NotExist, err) {
		return err
	}
	if err == nil && cur.HLC == best.HLC && !cur.Deleted && !best.Deleted {
		// The version is there; only a tagging update is missing.
		return replica.CopyMeta(ctx, l.replica(dst), e.Bucket, e.Key, best)
	}
	if best.Deleted {
		_, err := l.replica(dst).Delete(ctx, e.Bucket, e.Key, replica.Deletion(best))
		return err
	}
	_, err = l.copyVersion(ctx, src, dst, e.Bucket, e.Key, best.HLC, false)
	return err
}
