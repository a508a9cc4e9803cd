package repair

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/budget"
	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/erasure"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/placement"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/topology"
)

// SyncStats reports one synchronisation round of this node's partitions.
type SyncStats struct {
	Start         time.Time     `json:"start"`
	Duration      time.Duration `json:"duration_ns"`
	Partitions    int           `json:"partitions"`     // partitions this node holds
	Peers         int           `json:"peers"`          // nodes compared with
	Differing     int           `json:"differing"`      // (peer, partition) pairs whose digests differed
	Compared      int           `json:"compared"`       // object records received from peers
	Copied        int           `json:"copied"`         // newer versions copied here
	Deleted       int           `json:"deleted"`        // newer tombstones applied here
	Bytes         int64         `json:"bytes"`          // body bytes copied
	Foreign       int           `json:"foreign"`        // records held here outside this node's partitions
	HandedOff     int           `json:"handed_off"`     // of those, removed here after their holders confirmed them
	Stripes       int           `json:"stripes"`        // stripes of erasure-coded objects checked
	Rebuilt       int           `json:"rebuilt"`        // shards rebuilt from the others of their stripe
	Unhealable    int           `json:"unhealable"`     // stripes with fewer than K shards left anywhere
	Misplaced     int           `json:"misplaced"`      // stripes whose missing shards wait on other nodes to be moved, not rebuilt
	ShardsWaiting int           `json:"shards_waiting"` // shards that could not be moved or placed yet (retried soon)
	ShardsMoved   int           `json:"shards_moved"`   // shards handed to the stripe's current nodes (or found there) and removed here
	Collected     int           `json:"collected"`      // shards no longer readable removed (replaced versions, aborted or replaced uploads)
	UploadsEnded  int           `json:"uploads_ended"`  // stale pending uploads dropped here (ended on a peer, or expired)
	EndsExpired   int           `json:"ends_expired"`   // upload end records removed after store.UploadEndLifetime
	// Present counts the versions found here (or replaced here by a newer write) when
	// their turn to be copied came: they arrived after the round compared its records (a
	// read repair, a hinted retry or a client's write), so nothing was copied. Not errors.
	Present int `json:"present"`
	// Errors counts the steps of the round that failed (a copy, a comparison with a peer);
	// each is retried by the next round, which comes within 10 s of a round with errors.
	// FirstError is the first of them, with what failed.
	Errors     int    `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	Err        string `json:"error,omitempty"`
}

// fail counts one failed step of the round, keeping the first with what failed.
func (st *SyncStats) fail(what string, err error) {
	st.Errors++
	if st.FirstError == "" {
		st.FirstError = what + ": " + err.Error()
	}
}

// SyncProgress is the copying of the round in progress: what this node lacks and how
// far it got (the figures `cairn admin recovery` shows), and what it still holds for
// partitions that moved elsewhere.
type SyncProgress struct {
	Running     bool      `json:"running"`
	Started     time.Time `json:"started,omitzero"`
	ObjectsToDo int64     `json:"objects_to_move"`
	BytesToDo   int64     `json:"bytes_to_move"`
	ObjectsDone int64     `json:"objects_done"`
	BytesDone   int64     `json:"bytes_done"`
	RateBytes   int64     `json:"rate_limit_bytes_per_sec"` // 0: unlimited
	// HandoffObjects and HandoffBytes are the records this node holds for partitions it
	// no longer holds, not yet confirmed by their holders (as of the last round).
	HandoffObjects int64 `json:"handoff_objects"`
	HandoffBytes   int64 `json:"handoff_bytes"`
}

// syncState is the live state of Sync, shared with status readers.
type syncState struct {
	mu   sync.Mutex
	p    SyncProgress
	rate atomic.Int64 // bytes per second, 0 = unlimited
	run  sync.Mutex   // one round at a time
}

// SetRecoveryRate limits the bytes per second Sync copies to this node (0: unlimited); it
// applies at once, also to a round in progress.
func (l *Loops) SetRecoveryRate(bytesPerSec int64) {
	l.sync.rate.Store(max(bytesPerSec, 0))
	if l.budget != nil {
		l.budget.SetCeiling(bytesPerSec)
	}
}

// Progress returns the copying of the current (or last) Sync round.
func (l *Loops) Progress() SyncProgress {
	l.sync.mu.Lock()
	defer l.sync.mu.Unlock()
	p := l.sync.p
	p.RateBytes = l.sync.rate.Load()
	return p
}

func (l *Loops) progress(fn func(*SyncProgress)) {
	l.sync.mu.Lock()
	fn(&l.sync.p)
	l.sync.mu.Unlock()
}

// HeldElsewhere counts the records and erasure-code shards (and their bytes) this node holds for partitions that
// the current map places on other nodes only: what a drain still has to hand off. It
// reads the whole local index.
func (l *Loops) HeldElsewhere() (objects, bytes int64, err error) {
	if l.store == nil {
		return 0, 0, nil
	}
	tc, err := l.topo.Layout(l.maps.Current())
	if err != nil {
		return 0, 0, err
	}
	P := tc.Table.Partitions()
	err = l.store.Scan(func(b, _ string) bool { return !store.Internal(b) }, func(e object.VersionEntry) error {
		if !slices.Contains(tc.Table.Nodes(placement.Partition(e.Bucket, e.Key, P)), l.self) {
			objects++
			bytes += e.Size
		}
		return nil
	})
	if err != nil {
		return objects, bytes, err
	}
	// Shards that no table puts here wait to be moved to their stripe's nodes.
	shards, err := l.misplacedShards(l.maps.Current())
	for _, s := range shards {
		objects++
		bytes += int64(s.hdr.ShardSize()) + erasure.HeaderSize
	}
	return objects, bytes, err
}

// ver is a record's place in the order of records: its version, then its last in-place
// metadata change (object.Object.Newer).
type ver struct{ hlc, meta uint64 }

func verOf(e object.VersionEntry) ver {
	if e.Purged {
		return ver{e.HLC, ^uint64(0)} // a purge is final: it outranks the version it removed
	}
	return ver{e.HLC, e.MetaHLC}
}

// identity names what a record is a version of, for comparing holders: a key's null
// version (the newest wins: a newer null record replaces an older one) is named by the
// key, a version of a versioned key by the key and its HLC (each is kept beside the
// others). docs/design/versioning.md.
func identity(e object.VersionEntry) string {
	if e.Versioned {
		return e.Bucket + "\x00" + e.Key + "\x00" + strconv.FormatUint(e.HLC, 36)
	}
	return e.Bucket + "\x00" + e.Key
}

// newer reports whether v comes after w.
func (v ver) newer(w ver) bool { return v.hlc > w.hlc || (v.hlc == w.hlc && v.meta > w.meta) }

// want is a version to copy here from a peer.
type want struct {
	e       object.VersionEntry
	src     topology.Target
	holders int // peers holding this newest version: fewer means more urgent
}

// Sync brings this node's copies of the partitions it holds (in the current map) up to
// the newest version any other storage node has (pull-based anti-entropy), then hands off
// what it holds for partitions it no longer holds. It is how a node that joined gets its
// share, how the new holder of a partition of a node marked out or draining gets the
// data, how replicas converge if a queued write was lost, and how a drained node empties.
//
// Each node computes a digest of each of its partitions (one pass over its index) and
// asks every other storage node for theirs; only the partitions whose digests differ are
// compared record by record. What is newer elsewhere is copied, four objects at a time,
// fewest surviving copies first, paced by the recovery rate. It is idempotent and can be
// interrupted at any point.
func (l *Loops) Sync(ctx context.Context) (st SyncStats, err error) {
	const op errors.Op = "repair.Sync"
	st = SyncStats{Start: time.Now()}
	defer func() { st.Duration = time.Since(st.Start) }()
	if l.store == nil {
		return st, nil
	}
	l.sync.run.Lock()
	defer l.sync.run.Unlock()
	m := l.maps.Current()
	tc, err := l.topo.Layout(m)
	if err != nil {
		return st, errors.E(op, err)
	}
	P := tc.Table.Partitions()
	mine := make([]bool, P)
	var myParts []int
	for p := 0; p < P; p++ {
		for _, id := range tc.Table.Nodes(p) {
			if id == l.self {
				mine[p] = true
				myParts = append(myParts, p)
				st.Partitions++
				break
			}
		}
	}
	foreign := map[int][]object.VersionEntry{}
	var striped []object.VersionEntry // erasure-coded objects whose shards this node checks
	digests, err := replica.Digests(l.store, P, func(p int, e object.VersionEntry) {
		if mine[p] {
			if e.Striped && !e.Deleted && l.firstUpHolder(m, tc.Table.Nodes(p)) {
				striped = append(striped, e)
			}
		} else {
			foreign[p] = append(foreign[p], e)
			st.Foreign++
		}
	})
	if err != nil {
		return st, errors.E(op, err)
	}
	if st.Partitions > 0 {
		for _, e := range l.pullNewer(ctx, m, P, myParts, digests, &st) {
			if e.Striped && !e.Deleted && l.firstUpHolder(m, tc.Table.Nodes(placement.Partition(e.Bucket, e.Key, P))) {
				striped = append(striped, e) // a record copied here just now
			}
		}
	}
	if len(foreign) > 0 && ctx.Err() == nil {
		l.handOff(ctx, m, tc, foreign, &st)
	} else if len(foreign) == 0 {
		l.progress(func(p *SyncProgress) { p.HandoffObjects, p.HandoffBytes = 0, 0 })
	}
	if ctx.Err() == nil {
		l.moveShards(ctx, m, &st) // before healing: a moved shard needs no rebuild
	}
	for _, e := range striped {
		if ctx.Err() != nil {
			break
		}
		o, err := l.store.StatAt(e.Bucket, e.Key, e.HLC)
		if err != nil || o.Deleted {
			continue
		}
		h := l.stripes.Heal(ctx, m, o, e.Bucket, e.Key)
		st.Stripes += h.Stripes
		st.Rebuilt += h.Rebuilt
		st.Unhealable += h.Unhealable
		st.Misplaced += h.Misplaced
		st.ShardsWaiting += h.Waiting
	}
	if ctx.Err() == nil {
		l.syncUploads(ctx, &st) // before collecting shards: a dropped upload's shards may go
	}
	if ctx.Err() == nil {
		l.collectShards(ctx, &st)
	}
	return st, ctx.Err()
}

// syncUploads is anti-entropy for multipart uploads. It removes this node's upload end
// records older than store.UploadEndLifetime, then asks the coordinator about each upload
// this node holds pending (StaleUpload): if it ended elsewhere (this node missed the
// completion or abort, or was away for longer than the end records live), its end record
// is applied here, which drops the upload and its parts.
func (l *Loops) syncUploads(ctx context.Context, st *SyncStats) {
	if n, err := l.store.GCUploadEnds(time.Now().Add(-store.UploadEndLifetime)); err != nil {
		st.fail("removing expired upload end records", err)
		l.log.Warn("removing expired upload end records", "err", err)
	} else {
		st.EndsExpired += n
	}
	var ups []object.PendingUpload
	if err := l.store.PendingUploads(func(u object.PendingUpload) error { ups = append(ups, u); return nil }); err != nil {
		st.fail("listing pending uploads", err)
		l.log.Warn("listing pending uploads", "err", err)
		return
	}
	for _, u := range ups {
		if ctx.Err() != nil {
			return
		}
		end := l.coord.StaleUpload(ctx, u)
		if end == nil {
			continue
		}
		if err := l.store.EndUpload(end); err != nil {
			st.fail("dropping stale upload "+u.UploadID+" of "+u.Bucket+"/"+u.Key, err)
			l.log.Warn("dropping a stale upload", "bucket", u.Bucket, "key", u.Key, "upload", u.UploadID, "err", err)
			continue
		}
		st.UploadsEnded++
		l.log.Info("dropped a stale upload", "bucket", u.Bucket, "key", u.Key, "upload", u.UploadID, "state", end.State)
	}
}

// firstUpHolder reports whether this node is the first of ids that is up: the one that
// checks the shards of the partition's erasure-coded objects.
func (l *Loops) firstUpHolder(m *clustermap.Map, ids []string) bool {
	for _, id := range ids {
		if n, ok := m.Node(id); ok && n.State == clustermap.StateUp {
			return id == l.self
		}
	}
	return false
}

// pullNewer copies to this node what other storage nodes hold newer in parts, and
// returns what it copied.
func (l *Loops) pullNewer(ctx context.Context, m *clustermap.Map, P int, parts []int, digests []uint64, st *SyncStats) []object.VersionEntry {
	// Every other storage node is asked, not only the partitions' current co-holders: when
	// several nodes join at once, or a node drains, a partition's data may sit only on
	// nodes that held it under an older map (they keep it until it is handed off).
	type peerDiff struct {
		src    topology.Target
		differ []int
	}
	var diffs []peerDiff
	inDiff := make([]bool, P)
	for _, n := range m.StorageNodes() {
		if n.ID == l.self || n.State == clustermap.StateDown {
			continue
		}
		src := topology.Target{ID: n.ID, Addr: n.Addr}
		differ, err := l.differing(ctx, src, P, parts, digests)
		if err != nil {
			st.fail("comparing digests with "+n.ID, err)
			l.log.Warn("sync: could not compare digests with a peer", "peer", n.ID, "err", err)
			continue
		}
		st.Peers++
		st.Differing += len(differ)
		if len(differ) > 0 {
			diffs = append(diffs, peerDiff{src, differ})
			for _, p := range differ {
				inDiff[p] = true
			}
		}
	}
	if len(diffs) == 0 || ctx.Err() != nil {
		// A round with nothing to copy is still a round: `cairn admin recovery` shows its
		// start, and whoever waits for a round after a change (a mark-out) sees it end.
		l.progress(func(p *SyncProgress) {
			p.Running, p.Started, p.ObjectsToDo, p.BytesToDo, p.ObjectsDone, p.BytesDone = false, st.Start, 0, 0, 0, 0
		})
		return nil
	}
	// This node's newest version of each record, for the partitions that differ on some
	// peer only (a second pass over the index): a node in step with its peers, or alone,
	// holds no map of its whole store (at 10 M objects that map took gigabytes).
	local := map[string]ver{}
	if _, err := replica.Digests(l.store, P, func(p int, e object.VersionEntry) {
		if inDiff[p] {
			if id := identity(e); verOf(e).newer(local[id]) {
				local[id] = verOf(e)
			}
		}
	}); err != nil {
		st.fail("reading this node's records of the differing partitions", err)
		l.log.Warn("sync: could not read this node's records of the differing partitions", "err", err)
		return nil
	}
	best := map[string]want{}
	for _, d := range diffs {
		src := d.src
		err := l.replica(src).Scan(ctx, P, d.differ, func(e object.VersionEntry) {
			st.Compared++
			k := identity(e)
			switch b := best[k]; {
			case !verOf(e).newer(local[k]):
			case verOf(e).newer(verOf(b.e)):
				best[k] = want{e, src, 1}
			case verOf(e) == verOf(b.e):
				b.holders++
				best[k] = b
			}
		})
		if err != nil {
			st.fail("comparing records with "+src.ID, err)
			l.log.Warn("sync: could not compare with a peer", "peer", src.ID, "err", err)
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
	l.progress(func(p *SyncProgress) {
		p.Running, p.Started, p.ObjectsToDo, p.BytesToDo, p.ObjectsDone, p.BytesDone = true, st.Start, int64(len(todo)), bytesToDo, 0, 0
	})
	defer l.progress(func(p *SyncProgress) { p.Running = false })
	limiter := l.pacer()
	var copied []object.VersionEntry
	work := make(chan want)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := range work {
				limiter.wait(ctx, x.e.Size)
				n, present, err := l.pull(ctx, x.src, x.e)
				l.progress(func(p *SyncProgress) { p.ObjectsDone++; p.BytesDone += x.e.Size })
				mu.Lock()
				switch {
				case err != nil:
					st.fail("copying "+x.e.Bucket+"/"+x.e.Key+" from "+x.src.ID, err)
					l.log.Debug("sync: copy failed", "bucket", x.e.Bucket, "key", x.e.Key, "from", x.src.ID, "err", err)
				case present:
					st.Present++
				case x.e.Deleted:
					st.Deleted++
				default:
					st.Copied++
					copied = append(copied, x.e)
				}
				st.Bytes += n
				mu.Unlock()
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
	return copied
}

// differing asks peer t for its digests of parts and returns those that are not empty
// there and differ from ours (digests, indexed by partition).
func (l *Loops) differing(ctx context.Context, t topology.Target, P int, parts []int, digests []uint64) ([]int, error) {
	theirs, err := l.replica(t).Digests(ctx, P, parts)
	if err != nil {
		return nil, err
	}
	var out []int
	for i, p := range parts {
		if d := theirs[i]; d != 0 && d != digests[p] {
			out = append(out, p)
		}
	}
	return out, nil
}

// handOff removes the records this node holds for partitions it no longer holds, once
// every current holder of the partition (all N, each up) holds that version or a newer
// one: the data is never down to fewer copies than before. Holders that lack a version
// get it from this node through their own sync rounds, which ask every storage node.
func (l *Loops) handOff(ctx context.Context, m *clustermap.Map, tc *topology.Layout, foreign map[int][]object.VersionEntry, st *SyncStats) {
	// Which partitions each holder must confirm, and whether all their holders are up.
	byNode := map[string][]int{}
	for p := range foreign {
		ids := tc.Table.Nodes(p)
		ok := len(ids) >= tc.Class.N
		for _, id := range ids {
			n, found := m.Node(id)
			ok = ok && found && n.State == clustermap.StateUp
		}
		if !ok {
			continue // a holder is down or the partition is short of holders: keep ours
		}
		for _, id := range ids {
			byNode[id] = append(byNode[id], p)
		}
	}
	keys := map[string]bool{}
	for _, es := range foreign {
		for _, e := range es {
			keys[identity(e)] = true
		}
	}
	// held[node][key] is the version that node holds of key.
	held := map[string]map[string]ver{}
	for id, parts := range byNode {
		n, _ := m.Node(id)
		h := map[string]ver{}
		err := l.replica(topology.Target{ID: id, Addr: n.Addr}).Scan(ctx, tc.Table.Partitions(), parts, func(e object.VersionEntry) {
			if k := identity(e); keys[k] && verOf(e).newer(h[k]) {
				h[k] = verOf(e)
			}
		})
		if err != nil {
			st.fail("hand-off: comparing records with "+id, err)
			l.log.Warn("hand-off: could not compare with a holder", "node", id, "err", err)
			continue
		}
		held[id] = h
	}
	var left, leftBytes int64
	for p, es := range foreign {
		ids := tc.Table.Nodes(p)
		for _, e := range es {
			k := identity(e)
			confirmed := len(ids) > 0
			for _, id := range ids {
				h, ok := held[id]
				confirmed = confirmed && ok && h[k].hlc != 0 && !verOf(e).newer(h[k])
			}
			if confirmed && ctx.Err() == nil {
				forget := l.store.ForgetMeta
				if e.Noncurrent {
					forget = l.store.ForgetVersion
				}
				if gone, err := forget(e.Bucket, e.Key, e.HLC, e.MetaHLC); err != nil {
					st.fail("hand-off: removing "+e.Bucket+"/"+e.Key, err)
					l.log.Warn("hand-off: could not remove a copy", "bucket", e.Bucket, "key", e.Key, "err", err)
				} else if gone {
					st.HandedOff++
					continue
				}
			}
			left++
			leftBytes += e.Size
		}
	}
	l.progress(func(p *SyncProgress) { p.HandoffObjects, p.HandoffBytes = left, leftBytes })
}

// pacer spaces copies so that bytes per second stay under a limit read while waiting, so
// that a new limit applies at once, also to copies already waiting.
type pacer struct {
	limit *atomic.Int64
	mu    sync.Mutex
	rate  int64 // the limit the accounting below is for
	start time.Time
	sent  int64
}

func newPacer(limit *atomic.Int64) *pacer { return &pacer{limit: limit, start: time.Now()} }

// waiter paces the bytes of a background loop.
type waiter interface {
	wait(ctx context.Context, n int64)
}

// budgetWaiter draws from the node's background budget.
type budgetWaiter struct{ b *budget.Budget }

func (w budgetWaiter) wait(ctx context.Context, n int64) { w.b.Wait(ctx, n) }

// pacer returns what paces a loop's bytes: the node's budget, or the recovery rate alone.
func (l *Loops) pacer() waiter {
	if l.budget != nil {
		return budgetWaiter{l.budget}
	}
	return newPacer(&l.sync.rate)
}

// wait blocks until n more bytes may go.
func (p *pacer) wait(ctx context.Context, n int64) {
	p.mu.Lock()
	p.sent += n
	p.mu.Unlock()
	for {
		p.mu.Lock()
		r := p.limit.Load()
		if r <= 0 {
			p.rate, p.start, p.sent = 0, time.Now(), 0
			p.mu.Unlock()
			return
		}
		if r != p.rate { // a new limit: count from now
			p.rate, p.start, p.sent = r, time.Now(), n
		}
		due := p.start.Add(time.Duration(float64(p.sent) / float64(r) * float64(time.Second)))
		p.mu.Unlock()
		d := time.Until(due)
		if d <= 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(d, 200*time.Millisecond)):
		}
	}
}

// pull copies version e of an object from src into the local store and returns the body
// bytes copied; present says that the version was here already, with its metadata.
func (l *Loops) pull(ctx context.Context, src topology.Target, e object.VersionEntry) (n int64, present bool, err error) {
	if err := l.coord.EnsureLocalBucket(e.Bucket); err != nil {
		return 0, false, err // the bucket was deleted meanwhile
	}
	if e.Deleted && !e.DeleteMarker {
		_, err := l.store.DeleteRecord(e.Bucket, e.Key, object.Object{HLC: e.HLC, Versioned: e.Versioned, Purged: e.Purged})
		return 0, false, err
	}
	if have, err := l.store.StatAt(e.Bucket, e.Key, e.HLC); err == nil && !have.Deleted && !e.Deleted {
		// The version is here: it arrived after this round's scan (a read repair, a
		// hinted retry or a write of clients during a recovery do that), or only an
		// in-place change of its metadata (tags, retention, legal hold) is missing. (The
		// first is no error: taking it for the second made recoveries under read load
		// count copy errors, docs/benchmarks.md.)
		if have.MetaHLC >= e.MetaHLC {
			return 0, true, nil
		}
		rec, err := l.sourceRecord(ctx, src, e)
		if err != nil {
			return 0, false, err
		}
		return 0, false, replica.CopyMeta(ctx, l.replica(topology.Target{ID: l.self, Local: true}), e.Bucket, e.Key, rec)
	}
	if !e.Versioned {
		// A newer null record (a client's overwrite or delete during the round) replaces
		// the null version e: there is nothing to copy (and the source may have replaced
		// it too). A versioned record above it keeps it as a noncurrent version: copy it.
		if cur, err := l.store.StatVersion(e.Bucket, e.Key); err == nil && cur.HLC > e.HLC && !cur.Versioned {
			return 0, true, nil
		}
	}
	n, err = l.copyVersion(ctx, src, topology.Target{ID: l.self, Local: true}, e.Bucket, e.Key, e.HLC, false)
	return n, false, err
}

// sourceRecord fetches src's record of version e (without its body).
func (l *Loops) sourceRecord(ctx context.Context, src topology.Target, e object.VersionEntry) (*object.Object, error) {
	if !e.Noncurrent {
		rec, err := l.replica(src).Stat(ctx, e.Bucket, e.Key)
		if err != nil {
			return nil, err
		}
		if rec.HLC != e.HLC || rec.Deleted {
			return nil, errors.E(errors.Transient, "the record changed while syncing") // the next round sees the newer one
		}
		return rec, nil
	}
	first := int64(0) // a record without a body of its own: the whole (empty) body
	if e.Size > 0 && !e.Striped {
		first = 1 // one byte, not the body
	}
	rd, err := l.replica(src).Open(ctx, e.Bucket, e.Key, replica.OpenOptions{Version: e.HLC, N: first})
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	return rd.Info(), nil
}

// nodeStates lists the nodes' states, for RunSync to notice changes.
func nodeStates(m *clustermap.Map) string {
	var b strings.Builder
	for _, n := range m.Nodes {
		b.WriteString(n.ID)
		b.WriteByte('=')
		b.WriteString(string(n.State))
		b.WriteByte(' ')
	}
	return b.String()
}

// RunSync runs Sync when placement changes (a node joined, left, drains or was marked
// out), when a node changes state (one returning from down, say), when this node starts,
// and every interval, until ctx ends; sooner while it has copies to hand off. last, if
// set, receives each round's figures.
func (l *Loops) RunSync(ctx context.Context, interval time.Duration, last func(SyncStats)) {
	if l.store == nil {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	digest := ""
	next := time.Now().Add(3 * time.Second) // let the node settle first
	var handoffWait time.Duration
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m := l.maps.Current()
		tc, err := l.topo.Layout(m)
		if err != nil {
			continue
		}
		// Placement changed, or a node changed state (one that returns has missed writes; one
		// that drains or leaves has data to move).
		d := tc.Digest + "|" + nodeStates(m)
		if d != digest && digest != "" {
			next = time.Now()
		}
		if time.Now().Before(next) {
			continue
		}
		st, err := l.Sync(ctx)
		if err != nil && ctx.Err() == nil {
			st.Err = err.Error()
			l.log.Warn("sync round failed", "err", err)
		}
		if st.Copied+st.Deleted > 0 || st.Errors > 0 {
			args := []any{"partitions", st.Partitions, "peers", st.Peers, "compared", st.Compared,
				"copied", st.Copied, "deleted", st.Deleted, "present", st.Present, "bytes", st.Bytes, "errors", st.Errors,
				"took", st.Duration.Round(time.Millisecond)}
			if st.FirstError != "" {
				args = append(args, "first_error", st.FirstError)
			}
			l.log.Info("sync round", args...)
		}
		if last != nil {
			last(st)
		}
		digest = d
		next = time.Now().Add(interval)
		switch {
		case st.Errors > 0:
			next = time.Now().Add(min(interval, 10*time.Second)) // retry sooner
		case st.Foreign > st.HandedOff || st.ShardsWaiting > 0:
			// Copies wait for their new holders to confirm them, or shards for a node to
			// take them: look again soon, less often while nothing moves (a holder down
			// for long, say).
			if st.HandedOff > 0 || st.ShardsMoved > 0 || handoffWait == 0 {
				handoffWait = 5 * time.Second
			} else {
				handoffWait = min(2*handoffWait, interval)
			}
			next = time.Now().Add(min(handoffWait, interval))
		default:
			handoffWait = 0
		}
	}
}
