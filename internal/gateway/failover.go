package gateway

import (
	"context"
	"io"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// failoverReader reads one version of an object from a replica and, if that replica
// fails part-way (a chunk that fails its checksum, a node that dies), goes on from the
// same offset on another replica holding the same version. Bytes already written were
// verified, so the client gets the whole body, correct, or an error; never wrong bytes.
type failoverReader struct {
	g           *Gateway
	bucket, key string
	ts          []topology.Target
	cur         ObjectReader
	curT        topology.Target
	tried       map[string]bool
}

// failover wraps rd, opened on t, so that reads continue on the other targets ts.
func (g *Gateway) failover(rd ObjectReader, t topology.Target, ts []topology.Target, bucket, key string) ObjectReader {
	return &failoverReader{g: g, bucket: bucket, key: key, ts: ts, cur: rd, curT: t, tried: map[string]bool{t.ID: true}}
}

func (r *failoverReader) Info() *object.Object { return r.cur.Info() }

func (r *failoverReader) Close() error { return r.cur.Close() }

// clientWriter remembers whether writing to the client failed (then there is no point in
// trying another replica).
type clientWriter struct {
	w   io.Writer
	err error
}

func (c *clientWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err != nil {
		c.err = err
	}
	return n, err
}

func (r *failoverReader) WriteRange(ctx context.Context, w io.Writer, off, n int64) (int64, error) {
	cw := &clientWriter{w: w}
	version := r.cur.Info().HLC
	var done int64
	for {
		m, err := r.cur.WriteRange(ctx, cw, off+done, n-done)
		done += m
		if err == nil || cw.err != nil || ctx.Err() != nil {
			return done, err
		}
		if errors.Is(errors.Corrupt, err) && r.curT.Local {
			r.g.RepairLocal(r.bucket, r.key, version)
		}
		next, nt, oerr := r.next(ctx, version)
		if oerr != nil {
			return done, err // no other replica can continue: the original error
		}
		r.g.log.Warn("a replica failed during a read; continuing from another", "bucket", r.bucket, "key", r.key,
			"failed", r.curT.ID, "next", nt.ID, "offset", off+done, "err", err)
		r.cur.Close()
		r.cur, r.curT = next, nt
	}
}

// next opens the same version on a replica not tried yet.
func (r *failoverReader) next(ctx context.Context, version uint64) (ObjectReader, topology.Target, error) {
	for _, t := range r.ts {
		if r.tried[t.ID] || t.Down {
			continue
		}
		r.tried[t.ID] = true
		rd, err := r.g.replica(t).Open(ctx, r.bucket, r.key, replica.OpenOptions{Version: version})
		if err == nil {
			return rd, t, nil
		}
	}
	return nil, topology.Target{}, errors.E(errors.NotExist, "no other replica holds this version")
}

// RepairLocal replaces this node's copy of version of bucket/key, which failed its
// checksum, with a copy from another replica, in the background. Concurrent requests for
// the same object are merged.
func (g *Gateway) RepairLocal(bucket, key string, version uint64) {
	if g.cfg.Store == nil || g.cfg.RPC == nil {
		return
	}
	g.bg.Add(1)
	go func() {
		defer g.bg.Done()
		ctx, cancel := context.WithTimeout(g.closing, 10*time.Minute)
		defer cancel()
		g.repairLocal(ctx, bucket, key, version)
	}()
}

// repairLocal is RepairLocal, waiting for the outcome.
func (g *Gateway) repairLocal(ctx context.Context, bucket, key string, version uint64) error {
	if g.cfg.Store == nil || g.cfg.RPC == nil {
		return errors.E(errors.NotExist, "no other replica to repair from")
	}
	id := bucket + "\x00" + key
	if _, busy := g.repairing.LoadOrStore(id, true); busy {
		return nil
	}
	defer g.repairing.Delete(id)
	_, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return err
	}
	last := errors.E(errors.NotExist, "no other replica holds this version")
	for _, t := range ts {
		if t.Local || t.Down {
			continue
		}
		_, err := g.copyVersion(ctx, t, topology.Target{ID: g.cfg.NodeID, Local: true}, bucket, key, version, true)
		if err == nil {
			g.log.Warn("repaired a damaged copy from another replica", "bucket", bucket, "key", key, "from", t.ID)
			return nil
		}
		last = err
		if !errors.Is(errors.NotExist, err) && !errors.Is(errors.Precondition, err) {
			g.log.Warn("repair of a damaged copy failed", "bucket", bucket, "key", key, "from", t.ID, "err", err)
		}
	}
	return last
}
