package repair

import (
	"container/heap"
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/topology"
)

// Pressure-driven migration (docs/design/tiering.md): a storage node whose device class
// has water marks compares its own use (its store's accounting) with its capacity in the
// map; past the high mark it archives the current versions of the keys it is the first
// live holder of, least recently used first, through the coordinator's Migrate (to an
// external S3 tier or a class of this cluster), until it is under the
// low mark; paced by the node's background budget; paused by the marks' paused flag.

// TierProgress is this node's migration, for `cairn admin tier status`.
type TierProgress struct {
	DeviceClass string `json:"device_class"`
	Tier        string `json:"tier"`
	Capacity    int64  `json:"capacity"`
	UsedBytes   int64  `json:"used_bytes"`
	// Running: a migration is under way; Paused: the marks are paused while this node is
	// past its high mark.
	Running bool `json:"running"`
	Paused  bool `json:"paused,omitempty"`
	// ToMove is the bytes over the low mark when the current (or last) run started;
	// Done the bytes and Objects the versions it moved, Skipped the versions it left
	// (locked, raced, archived already), Errors the versions that failed (retried by the
	// next run).
	ToMove   int64     `json:"bytes_to_move"`
	Done     int64     `json:"bytes_done"`
	Objects  int64     `json:"objects"`
	Skipped  int64     `json:"skipped"`
	Errors   int64     `json:"errors"`
	Err      string    `json:"err,omitempty"`
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero"`
	// RateBytes is Done over the run's time so far.
	RateBytes float64 `json:"rate_bytes_per_sec"`
}

// TierTotals are this node's migration counters since it started; Collected counts the
// tier copies of replaced or deleted archived versions it deleted.
type TierTotals struct {
	Objects, Bytes, Errors, Collected int64
}

type tierState struct {
	mu     sync.Mutex
	p      TierProgress
	totals TierTotals
}

// TierStatus returns this node's migration progress.
func (l *Loops) TierStatus() TierProgress {
	l.tier.mu.Lock()
	defer l.tier.mu.Unlock()
	p := l.tier.p
	if p.Running && !p.Started.IsZero() {
		if s := time.Since(p.Started).Seconds(); s > 0 {
			p.RateBytes = float64(p.Done) / s
		}
	}
	return p
}

// TierTotals returns this node's migration counters.
func (l *Loops) TierTotals() TierTotals {
	l.tier.mu.Lock()
	defer l.tier.mu.Unlock()
	return l.tier.totals
}

func (l *Loops) tierUpdate(fn func(*TierProgress)) {
	l.tier.mu.Lock()
	defer l.tier.mu.Unlock()
	fn(&l.tier.p)
}

// usedBytes is the node's use as the water marks count it (NodeStats.UsedBytes).
func (l *Loops) usedBytes() int64 {
	s := l.store.Stats()
	return s.LiveBytes + s.IndexBytes
}

// RunTiering collects tier garbage and checks the water marks every TierTick until ctx
// ends.
func (l *Loops) RunTiering(ctx context.Context) {
	t := time.NewTicker(l.tierTick)
	defer t.Stop()
	for {
		if l.store != nil {
			if _, err := l.store.FlushAccess(); err != nil {
				l.log.Warn("tier: cannot write the access times", "err", err)
			}
		}
		l.CollectTierGarbage(ctx)
		l.DropExpiredRestores(ctx)
		l.TierPass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// firstUpMarkedHolder reports whether this node is the first holder in ids that is up and
// of a device class with water marks: the one node that migrates the key. A key's holders
// may be of several device classes: an unmarked one's nodes (archive nodes, say) never
// migrate, so they are passed over; of the marked ones only the first holder across all
// of them migrates, so a key held by two marked classes that are both past their high
// marks is copied to the tier once, not once per class (two copies, one never named).
func (l *Loops) firstUpMarkedHolder(m *clustermap.Map, ids []string) bool {
	for _, id := range ids {
		n, ok := m.Node(id)
		if !ok || n.State != clustermap.StateUp {
			continue
		}
		if _, marked := m.WaterMarks[n.DeviceClass]; marked {
			return id == l.self
		}
	}
	return false
}

// tierMaxFailures is how many migrations in a row may fail before a run gives up until
// the next tick (each failed attempt may have read the object once).
const tierMaxFailures = 8

// tierCandidate is a current version this node is the first live holder of; last is
// its last use (unix ns): its last read as this node noted it, else its write, both
// truncated to the access granularity.
type tierCandidate struct {
	bucket, key string
	hlc         uint64
	size        int64
	last        int64
}

// tierBatch is how many migration candidates a pass holds at once by default.
const tierBatch = 10000

// candHeap is a max-heap of candidates by use (the most recently used on top, to be
// dropped first when a less recently used one comes).
type candHeap []tierCandidate

func (h candHeap) Len() int           { return len(h) }
func (h candHeap) Less(i, j int) bool { return h[j].before(h[i]) }
func (h candHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)        { *h = append(*h, x.(tierCandidate)) }
func (h *candHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// before orders candidates least recently used first: the older use, then the older
// write.
func (c tierCandidate) before(d tierCandidate) bool {
	if c.last != d.last {
		return c.last < d.last
	}
	return c.hlc < d.hlc
}

// tierCandidates returns the l.tierBatch least recently used current versions this node
// migrates (whole copies, not archived yet, not left by this pass already), least
// recently used first. Its use is the
// last read this node noted (store.Touch), else the write (an HLC is the time of its
// write, in microseconds, in its high bits), to the same granularity. It holds at most
// l.tierBatch candidates, whatever the number of objects (about 150 bytes each with
// their names: 1.5 MB for the default 10 000).
func (l *Loops) tierCandidates(m *clustermap.Map, tc *topology.Layout, left map[string]struct{}) ([]tierCandidate, error) {
	g := int64(l.store.AccessGranularity())
	h := &candHeap{}
	err := l.store.Scan(func(b, _ string) bool {
		_, ok := m.Buckets[b]
		return ok && b != clustermap.VolumeBucket && b != clustermap.TierBucket && !strings.HasPrefix(b, store.InternalPrefix)
	}, func(e object.VersionEntry) error {
		// Whole copies only: an erasure-coded object's bytes are on its class's nodes.
		if e.Deleted || e.Noncurrent || e.DeleteMarker || e.Striped || e.Size == 0 {
			return nil
		}
		if !l.firstUpMarkedHolder(m, tc.Table.Lookup(e.Bucket, e.Key)) {
			return nil
		}
		if len(left) > 0 {
			if _, ok := left[e.Bucket+"\x00"+e.Key]; ok {
				return nil
			}
		}
		c := tierCandidate{bucket: e.Bucket, key: e.Key, hlc: e.HLC, size: e.Size}
		c.last = int64(c.hlc>>12) * 1000 / g * g
		if t, ok := l.store.AccessTime(e.Bucket, e.Key); ok && t > c.last {
			c.last = t
		}
		switch {
		case h.Len() < l.tierBatch:
			heap.Push(h, c)
		case c.before((*h)[0]):
			(*h)[0] = c
			heap.Fix(h, 0)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := []tierCandidate(*h)
	sort.Slice(out, func(i, j int) bool { return out[i].before(out[j]) })
	return out, nil
}

// TierPass migrates versions to the device class's tier while this node is past its
// high mark, until it is under its low mark, and returns the bytes moved.
func (l *Loops) TierPass(ctx context.Context) int64 {
	if l.store == nil {
		return 0
	}
	m := l.maps.Current()
	self, ok := m.Node(l.self)
	w, marked := m.WaterMarks[self.DeviceClass]
	if !ok || !marked || self.Capacity <= 0 {
		l.tierUpdate(func(p *TierProgress) { *p = TierProgress{} })
		return 0
	}
	used := l.usedBytes()
	high, low := self.Capacity*int64(w.High)/100, self.Capacity*int64(w.Low)/100
	l.tierUpdate(func(p *TierProgress) {
		p.DeviceClass, p.Tier, p.Capacity, p.UsedBytes, p.Paused = w.DeviceClass, w.Tier, self.Capacity, used, false
	})
	if used <= high {
		return 0
	}
	if w.Paused {
		l.tierUpdate(func(p *TierProgress) { p.Paused = true })
		return 0
	}
	t, ok := m.Tiers[w.Tier]
	if !ok {
		l.tierUpdate(func(p *TierProgress) { p.Err = "no tier " + w.Tier + " in the map" })
		return 0
	}
	if _, bucket := m.Buckets[clustermap.TierBucket]; t.Kind == clustermap.TierClass && (!bucket || m.Level < clustermap.TierBucketLevel) {
		l.tierUpdate(func(p *TierProgress) {
			p.Err = "class tier " + w.Tier + " was added before the cluster reached feature level 9: remove it and add it again"
		})
		return 0
	}
	l.tierUpdate(func(p *TierProgress) {
		*p = TierProgress{DeviceClass: w.DeviceClass, Tier: w.Tier, Capacity: self.Capacity, UsedBytes: used, Running: true, ToMove: used - low, Started: time.Now()}
	})
	defer l.tierUpdate(func(p *TierProgress) { p.Running, p.Finished, p.UsedBytes = false, time.Now(), l.usedBytes() })
	tc, err := l.topo.Layout(m)
	if err != nil {
		l.tierUpdate(func(p *TierProgress) { p.Err = err.Error() })
		return 0
	}
	// Least recently used first, in batches: a scan keeps the tierBatch least recently
	// used candidates (a bounded heap: the memory of a pass does not grow with the
	// objects this node holds), they are migrated, and while the node is still over its
	// low mark the next scan takes the next batch (archived versions are stubs, which
	// the scan passes over).
	if _, err := l.store.FlushAccess(); err != nil {
		l.log.Warn("tier: cannot write the access times", "err", err)
	}
	pace := l.pacer()
	var done int64
	var lastErr error
	failed := 0 // in a row: a tier that does not answer ends the run (the next tick retries)
	// left are the versions this pass tried and left (locked, raced, failed): the next
	// batches pass over them (the memory of the pass grows by one name per version left).
	left := map[string]struct{}{}
	for more := true; more; {
		cands, err := l.tierCandidates(m, tc, left)
		if err != nil {
			l.tierUpdate(func(p *TierProgress) { p.Err = err.Error() })
			break
		}
		more = len(cands) == l.tierBatch
		moved := 0
		for _, c := range cands {
			if ctx.Err() != nil || l.usedBytes() <= low || failed >= tierMaxFailures {
				more = false
				break
			}
			if m := l.maps.Current(); m.WaterMarks[self.DeviceClass].Paused {
				l.tierUpdate(func(p *TierProgress) { p.Paused = true })
				more = false
				break
			}
			pace.wait(ctx, c.size)
			n, err := l.coord.Migrate(ctx, c.bucket, c.key, c.hlc, w.Tier)
			done += n
			if n > 0 {
				moved++
			} else {
				left[c.bucket+"\x00"+c.key] = struct{}{}
			}
			l.tierUpdate(func(p *TierProgress) {
				switch {
				case err != nil:
					p.Errors++
					p.Err = err.Error()
				case n == 0:
					p.Skipped++
				default:
					p.Objects++
					p.Done += n
				}
				p.UsedBytes = l.usedBytes()
			})
			l.tier.mu.Lock()
			if err != nil {
				l.tier.totals.Errors++
			} else if n > 0 {
				l.tier.totals.Objects++
				l.tier.totals.Bytes += n
			}
			l.tier.mu.Unlock()
			if err != nil {
				lastErr = err
				failed++
			} else {
				failed = 0
			}
		}
	}
	if lastErr != nil {
		l.log.Warn("tier: versions left for the next run", "tier", w.Tier, "err", lastErr)
	}
	if done > 0 {
		l.log.Info("tier: migrated", "tier", w.Tier, "bytes", done, "used", l.usedBytes(), "low", low)
	}
	return done
}

// DropExpiredRestores deletes the restored copies (object.RestoredKey in the tier bucket)
// that have expired by Config.Now and that this node is the first up holder of (a
// tombstone at the copy's version + 1, as the lifecycle runner expires objects: a copy
// made again meanwhile is newer and stays). The archived version stays archived: a GET
// of it is InvalidObjectState again. It returns the copies dropped.
func (l *Loops) DropExpiredRestores(ctx context.Context) int {
	if l.store == nil {
		return 0
	}
	m := l.maps.Current()
	if _, ok := m.Buckets[clustermap.TierBucket]; !ok {
		return 0
	}
	tc, err := l.topo.Layout(m)
	if err != nil {
		return 0
	}
	// Only the restored copies' keys (a prefix listing of this node's records), not the
	// class tiers' copies beside them in the bucket.
	var due []*object.Object
	var keys []string
	now := l.now()
	opts := object.VersionListOptions{Prefix: object.RestoredPrefix, Max: 1000}
	for {
		page, err := l.store.ListVersions(clustermap.TierBucket, opts)
		if err != nil {
			l.log.Warn("tier: cannot list the restored copies", "err", err)
			return 0
		}
		for _, v := range page.Versions {
			o := v.Object
			if !v.Current || o.DeleteMarker || !l.firstUpHolder(m, tc.Table.Lookup(clustermap.TierBucket, v.Key)) {
				continue
			}
			if exp, ok := object.RestoreExpiry(o); ok && !now.Before(exp) {
				due, keys = append(due, o), append(keys, v.Key)
			}
		}
		if !page.Truncated {
			break
		}
		opts.KeyMarker, opts.VersionMarker, opts.AfterNull = page.NextKey, page.NextVersion, page.NextNull
	}
	n := 0
	var lastErr error
	for i, k := range keys {
		if ctx.Err() != nil {
			break
		}
		o := due[i]
		if _, err := l.coord.DeleteRecord(ctx, clustermap.TierBucket, k, object.Object{HLC: o.HLC + 1, ModTime: now.UnixNano()}); err != nil {
			lastErr = err
			continue
		}
		n++
	}
	if lastErr != nil {
		l.log.Warn("tier: expired restored copies left for later", "err", lastErr)
	}
	return n
}

// CollectTierGarbage deletes from their tiers the copies of archived versions that this
// node's store no longer names (a newer version, a delete or a purge replaced the stub:
// store.TierGarbage), then forgets them. A copy whose tier is gone from the map is
// forgotten (nothing can reach it); one that fails is tried again next time. It returns
// the copies collected.
func (l *Loops) CollectTierGarbage(ctx context.Context) int {
	if l.store == nil {
		return 0
	}
	gc, err := l.store.TierGarbage(1000)
	if err != nil {
		l.log.Warn("tier: cannot read the tier garbage", "err", err)
		return 0
	}
	n := 0
	var lastErr error
	for _, c := range gc {
		if ctx.Err() != nil {
			break
		}
		err := l.coord.DeleteTierCopy(ctx, c.Tier, c.Key)
		if err != nil && !errors.Is(errors.NotExist, err) {
			lastErr = err
			continue
		}
		if err := l.store.ForgetTierGarbage(c); err != nil {
			lastErr = err
			continue
		}
		n++
	}
	if lastErr != nil {
		l.log.Warn("tier: copies of replaced archived versions left for later", "err", lastErr)
	}
	l.tier.mu.Lock()
	l.tier.totals.Collected += int64(n)
	l.tier.mu.Unlock()
	return n
}
