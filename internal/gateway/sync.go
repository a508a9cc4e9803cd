package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/node"
	"github.com/cairnfs/cairn/internal/placement"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/store"
)

// SyncStats reports one synchronisation round of this node's partitions.
type SyncStats struct {
	Start      time.Time     `json:"start"`
	Duration   time.Duration `json:"duration_ns"`
	Partitions int           `json:"partitions"` // partitions this node holds
	Peers      int           `json:"peers"`      // nodes compared with
	Compared   int           `json:"compared"`   // object records received from peers
	Copied     int           `json:"copied"`     // newer versions copied here
	Deleted    int           `json:"deleted"`    // newer tombstones applied here
	Bytes      int64         `json:"bytes"`      // body bytes copied
	Errors     int           `json:"errors"`
	Err        string        `json:"error,omitempty"`
}

// Sync brings this node's copies of the partitions it holds (in the current map) up to
// the newest version any other holder has: pull-based anti-entropy. It is how a node that
// joined gets its share, how the new holder of a partition of a node marked out gets the
// data, and how replicas converge if a queued write was lost. Each node compares the
// versions it holds with every other holder's (one scan of each store), then copies what
// is newer elsewhere, four objects at a time. It is idempotent and can be interrupted at
// any point.
func (g *Gateway) Sync(ctx context.Context) (SyncStats, error) {
	const op errors.Op = "gateway.Sync"
	st := SyncStats{Start: time.Now()}
	defer func() { st.Duration = time.Since(st.Start) }()
	if g.cfg.Store == nil {
		return st, nil
	}
	m := g.cfg.Maps.Current()
	tc, err := g.table(m)
	if err != nil {
		return st, errors.E(op, err)
	}
	P := tc.t.Partitions()
	mine := make([]bool, P)
	peerParts := map[string][]int{}
	for p := 0; p < P; p++ {
		ids := tc.t.Nodes(p)
		in := false
		for _, id := range ids {
			in = in || id == g.cfg.NodeID
		}
		if !in {
			continue
		}
		mine[p] = true
		st.Partitions++
		for _, id := range ids {
			if id != g.cfg.NodeID {
				peerParts[id] = append(peerParts[id], p)
			}
		}
	}
	if st.Partitions == 0 {
		return st, nil
	}
	keep := func(b, k string) bool { return mine[placement.Partition(b, k, P)] }
	local := map[string]uint64{}
	if err := g.cfg.Store.Scan(keep, func(e store.VersionEntry) error {
		local[e.Bucket+"\x00"+e.Key] = e.HLC
		return nil
	}); err != nil {
		return st, errors.E(op, err)
	}
	type want struct {
		e   store.VersionEntry
		src target
	}
	best := map[string]want{}
	for id, parts := range peerParts {
		n, ok := m.Node(id)
		if !ok || n.State != clustermap.StateUp {
			continue
		}
		st.Peers++
		src := target{id: id, addr: n.Addr}
		err := g.scanPeer(ctx, src, P, parts, func(e store.VersionEntry) {
			st.Compared++
			k := e.Bucket + "\x00" + e.Key
			if e.HLC > local[k] && e.HLC > best[k].e.HLC {
				best[k] = want{e, src}
			}
		})
		if err != nil {
			st.Errors++
			g.log.Warn("sync: could not compare with a peer", "peer", id, "err", err)
		}
	}
	work := make(chan want)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var bytesCopied atomic.Int64
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := range work {
				n, err := g.pull(ctx, x.src, x.e)
				mu.Lock()
				switch {
				case err != nil:
					st.Errors++
					g.log.Debug("sync: copy failed", "bucket", x.e.Bucket, "key", x.e.Key, "from", x.src.id, "err", err)
				case x.e.Deleted:
					st.Deleted++
				default:
					st.Copied++
				}
				mu.Unlock()
				bytesCopied.Add(n)
			}
		}()
	}
	for _, x := range best {
		if ctx.Err() != nil {
			break
		}
		work <- x
	}
	close(work)
	wg.Wait()
	st.Bytes = bytesCopied.Load()
	return st, ctx.Err()
}

// scanPeer streams the versions a peer holds in parts.
func (g *Gateway) scanPeer(ctx context.Context, t target, partitions int, parts []int, fn func(store.VersionEntry)) error {
	body, _ := json.Marshal(node.ScanRequest{Partitions: partitions, Parts: parts})
	resp, err := g.cfg.RPC.Do(ctx, &rpc.Request{Method: http.MethodPost, Addr: t.addr, Path: node.PathScan,
		Body: bytes.NewReader(body), Size: int64(len(body)), Cap: &[3]string{rpc.CapList, "", ""}})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var e store.VersionEntry
		if err := dec.Decode(&e); err != nil {
			if err == io.EOF {
				return errors.E(errors.IO, fmt.Errorf("node %s: scan ended early", t.id))
			}
			return errors.E(errors.IO, err)
		}
		if e.Bucket == "" {
			return nil // end marker
		}
		fn(e)
	}
}

// pull copies version e of an object from src into the local store and returns the body
// bytes copied.
func (g *Gateway) pull(ctx context.Context, src target, e store.VersionEntry) (int64, error) {
	if err := g.EnsureLocalBucket(e.Bucket); err != nil {
		return 0, err // the bucket was deleted meanwhile
	}
	if e.Deleted {
		_, err := g.cfg.Store.DeleteVersion(e.Bucket, e.Key, e.HLC, 0)
		return 0, err
	}
	rd, err := g.openReplica(ctx, src, e.Bucket, e.Key, e.HLC)
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	o := rd.Info()
	pr, pw := io.Pipe()
	go func() {
		_, err := rd.WriteRange(ctx, pw, 0, o.Size)
		pw.CloseWithError(err)
	}()
	meta := *o
	meta.Body, meta.Chunks = nil, nil
	local := target{id: g.cfg.NodeID, local: true}
	_, err = g.putReplica(ctx, local, e.Bucket, e.Key, &meta, pr, o.Size, o.HLC, "", 0, nil, &meta)
	pr.CloseWithError(errReplicaGone)
	if err != nil {
		return 0, err
	}
	return o.Size, nil
}

// RunSync runs Sync when placement changes (a node joined, left or was marked out), when
// this node starts, and every interval, until ctx ends. last, if set, receives each
// round's figures.
func (g *Gateway) RunSync(ctx context.Context, interval time.Duration, last func(SyncStats)) {
	if g.cfg.Store == nil {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	digest := ""
	next := time.Now().Add(3 * time.Second) // let the node settle first
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tc, err := g.table(g.cfg.Maps.Current())
		if err != nil {
			continue
		}
		if tc.digest != digest && digest != "" {
			next = time.Now() // placement changed
		}
		if time.Now().Before(next) {
			continue
		}
		st, err := g.Sync(ctx)
		if err != nil && ctx.Err() == nil {
			st.Err = err.Error()
			g.log.Warn("sync round failed", "err", err)
		}
		if st.Copied+st.Deleted > 0 || st.Errors > 0 {
			g.log.Info("sync round", "partitions", st.Partitions, "peers", st.Peers, "compared", st.Compared,
				"copied", st.Copied, "deleted", st.Deleted, "bytes", st.Bytes, "errors", st.Errors, "took", st.Duration.Round(time.Millisecond))
		}
		if last != nil {
			last(st)
		}
		digest = tc.digest
		next = time.Now().Add(interval)
		if st.Errors > 0 {
			next = time.Now().Add(min(interval, 10*time.Second)) // retry sooner
		}
	}
}
