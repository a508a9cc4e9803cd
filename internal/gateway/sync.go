package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
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

// SyncProgress is the copying of the round in progress: what this node lacks and how
// far it got (the figures `cairn admin recovery` shows).
type SyncProgress struct {
	Running     bool      `json:"running"`
	Started     time.Time `json:"started,omitzero"`
	ObjectsToDo int64     `json:"objects_to_move"`
	BytesToDo   int64     `json:"bytes_to_move"`
	ObjectsDone int64     `json:"objects_done"`
	BytesDone   int64     `json:"bytes_done"`
	RateBytes   int64     `json:"rate_limit_bytes_per_sec"` // 0: unlimited
}

// syncState is the live state of Sync, shared with status readers.
type syncState struct {
	mu   sync.Mutex
	p    SyncProgress
	rate atomic.Int64 // bytes per second, 0 = unlimited
}

// SetRecoveryRate limits the bytes per second Sync copies to this node (0: unlimited); it
// applies at once, also to a round in progress.
func (g *Gateway) SetRecoveryRate(bytesPerSec int64) { g.sync.rate.Store(max(bytesPerSec, 0)) }

// Progress returns the copying of the current (or last) Sync round.
func (g *Gateway) Progress() SyncProgress {
	g.sync.mu.Lock()
	defer g.sync.mu.Unlock()
	p := g.sync.p
	p.RateBytes = g.sync.rate.Load()
	return p
}

func (g *Gateway) progress(fn func(*SyncProgress)) {
	g.sync.mu.Lock()
	fn(&g.sync.p)
	g.sync.mu.Unlock()
}

// Sync brings this node's copies of the partitions it holds (in the current map) up to
// the newest version any other storage node has: pull-based anti-entropy. It is how a node that
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
	var myParts []int
	for p := 0; p < P; p++ {
		for _, id := range tc.t.Nodes(p) {
			if id == g.cfg.NodeID {
				mine[p] = true
				myParts = append(myParts, p)
				st.Partitions++
				break
			}
		}
	}
	// Every other storage node is asked, not only the partitions' current co-holders: when
	// several nodes join at once a partition's data may sit only on nodes that held it
	// under an older map (they keep it until it is handed off).
	peerParts := map[string][]int{}
	for _, n := range m.StorageNodes() {
		if n.ID != g.cfg.NodeID {
			peerParts[n.ID] = myParts
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
		e       store.VersionEntry
		src     target
		holders int // peers holding this newest version: fewer means more urgent
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
			switch b := best[k]; {
			case e.HLC <= local[k]:
			case e.HLC > b.e.HLC:
				best[k] = want{e, src, 1}
			case e.HLC == b.e.HLC:
				b.holders++
				best[k] = b
			}
		})
		if err != nil {
			st.Errors++
			g.log.Warn("sync: could not compare with a peer", "peer", id, "err", err)
		}
	}
	// Objects with the fewest surviving copies first.
	todo := make([]want, 0, len(best))
	var bytesToDo int64
	for _, x := range best {
		todo = append(todo, x)
		bytesToDo += x.e.Size
	}
	sort.Slice(todo, func(i, j int) bool { return todo[i].holders < todo[j].holders })
	g.progress(func(p *SyncProgress) {
		*p = SyncProgress{Running: true, Started: st.Start, ObjectsToDo: int64(len(todo)), BytesToDo: bytesToDo}
	})
	defer g.progress(func(p *SyncProgress) { p.Running = false })
	limiter := newPacer(&g.sync.rate)
	work := make(chan want)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var bytesCopied atomic.Int64
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := range work {
				limiter.wait(ctx, x.e.Size)
				n, err := g.pull(ctx, x.src, x.e)
				g.progress(func(p *SyncProgress) { p.ObjectsDone++; p.BytesDone += x.e.Size })
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
	for _, x := range todo {
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

// pacer spaces copies so that bytes per second stay under a limit read at each call (so
// a new limit applies at once).
type pacer struct {
	limit *atomic.Int64
	mu    sync.Mutex
	start time.Time
	sent  int64
}

func newPacer(limit *atomic.Int64) *pacer { return &pacer{limit: limit, start: time.Now()} }

// wait blocks until n more bytes may go.
func (p *pacer) wait(ctx context.Context, n int64) {
	p.mu.Lock()
	r := p.limit.Load()
	if r <= 0 {
		p.start, p.sent = time.Now(), 0
		p.mu.Unlock()
		return
	}
	p.sent += n
	due := p.start.Add(time.Duration(float64(p.sent) / float64(r) * float64(time.Second)))
	p.mu.Unlock()
	if d := time.Until(due); d > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
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
	return g.copyVersion(ctx, src, target{id: g.cfg.NodeID, local: true}, e.Bucket, e.Key, e.HLC, false)
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
