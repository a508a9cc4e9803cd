package repair

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/policy"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/stripe"
	"github.com/cairnfs/cairn/internal/topology"
)

// Re-placing existing objects (cairn admin policy apply). An apply request raises the
// bucket's apply generation in the cluster map; every storage node then visits the
// current objects of the bucket it is the first holder of in placement order (so each
// object is visited by one node), evaluates the bucket's policy
// on each, and rewrites the objects whose class (or whose class's layout) differs.
//
// A rewrite keeps the object's version: the new copy is written with the same version and
// replaces the old one on each holder (store.PutOptions.Repair), so a client write that
// races it is newer and wins on every holder, and nothing a client wrote is ever lost.
// New chunks are named after a fresh layout tag (stripes of "upload" relayout-V), so they
// never overwrite the chunks of the layout they replace; those are collected once every
// holder shows the new record (collectShards). A rewrite needs every holder up; an object
// with a holder down is left for the next pass, which runs until none is left.

// ApplyBucket is the internal bucket holding the apply generation each bucket reached
// on this node (key: bucket name, user metadata "gen").
const ApplyBucket = store.InternalPrefix + "apply"

// applyRetry is how long a node waits before visiting again the objects a pass could not
// rewrite (a holder down, a write failed).
const applyRetry = 20 * time.Second

// ApplyProgress is one node's progress on re-placing one bucket's objects.
type ApplyProgress struct {
	Bucket   string    `json:"bucket"`
	Gen      uint64    `json:"gen"`  // the apply generation being (or last) worked on
	Done     uint64    `json:"done"` // the generation this node finished
	Running  bool      `json:"running"`
	Scanned  int64     `json:"scanned"`     // objects this node is the first holder of
	Moved    int64     `json:"moved"`       // rewritten into their policy's class
	Bytes    int64     `json:"moved_bytes"` // of those
	Kept     int64     `json:"kept"`        // already in their class, or matched by no rule
	Raced    int64     `json:"raced"`       // a newer write or a delete came first
	Deferred int64     `json:"deferred"`    // left for a later pass: a holder down or a write failed
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	Err      string    `json:"last_error,omitempty"`
}

// applyState is the progress of every bucket this node has worked on.
type applyState struct {
	mu sync.Mutex
	by map[string]*ApplyProgress
}

// ApplyStatus returns this node's progress for every bucket it has re-placed objects of.
func (l *Loops) ApplyStatus() []ApplyProgress {
	l.apply.mu.Lock()
	defer l.apply.mu.Unlock()
	out := make([]ApplyProgress, 0, len(l.apply.by))
	for _, p := range l.apply.by {
		out = append(out, *p)
	}
	return out
}

func (l *Loops) applyUpdate(bucket string, fn func(*ApplyProgress)) {
	l.apply.mu.Lock()
	defer l.apply.mu.Unlock()
	if l.apply.by == nil {
		l.apply.by = map[string]*ApplyProgress{}
	}
	p := l.apply.by[bucket]
	if p == nil {
		p = &ApplyProgress{Bucket: bucket}
		l.apply.by[bucket] = p
	}
	fn(p)
}

// RunApply re-places objects whenever a bucket's apply generation in the map is above
// the one this node finished, until ctx ends.
func (l *Loops) RunApply(ctx context.Context) {
	if l.store == nil {
		return
	}
	retry := map[string]time.Time{}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for name, b := range l.maps.Current().Buckets {
			if b.Apply == 0 || time.Now().Before(retry[name]) {
				continue
			}
			done := l.applyDone(name)
			if done >= b.Apply {
				l.applyUpdate(name, func(p *ApplyProgress) { p.Done, p.Gen = done, max(p.Gen, done) })
				continue
			}
			if left := l.ApplyPass(ctx, name, b.Apply); left > 0 {
				retry[name] = time.Now().Add(applyRetry)
				continue
			}
			if err := l.setApplyDone(ctx, name, b.Apply); err != nil {
				l.log.Warn("apply: cannot record the finished generation", "bucket", name, "err", err)
				retry[name] = time.Now().Add(applyRetry)
				continue
			}
			delete(retry, name)
			l.applyUpdate(name, func(p *ApplyProgress) { p.Done = b.Apply })
		}
	}
}

// applyDone returns the apply generation this node finished for bucket.
func (l *Loops) applyDone(bucket string) uint64 {
	o, err := l.store.StatVersion(ApplyBucket, bucket)
	if err != nil || o.Deleted {
		return 0
	}
	for _, kv := range o.UserMeta {
		if kv[0] == "gen" {
			v, _ := strconv.ParseUint(kv[1], 10, 64)
			return v
		}
	}
	return 0
}

func (l *Loops) setApplyDone(ctx context.Context, bucket string, gen uint64) error {
	if err := l.coord.EnsureLocalBucket(ApplyBucket); err != nil {
		return err
	}
	meta := &object.Object{ModTime: time.Now().UnixNano(), UserMeta: [][2]string{{"gen", strconv.FormatUint(gen, 10)}}}
	_, err := l.store.PutObject(ctx, ApplyBucket, bucket, meta, bytes.NewReader(nil), 0, object.PutOptions{Version: l.clock.Next()})
	return err
}

// ApplyPass visits the current objects of bucket this node is the first holder of and
// rewrites those the bucket's policy places in another class. It returns how many it
// had to leave for a later pass.
func (l *Loops) ApplyPass(ctx context.Context, bucket string, gen uint64) (left int64) {
	l.applyUpdate(bucket, func(p *ApplyProgress) {
		*p = ApplyProgress{Bucket: bucket, Gen: gen, Done: p.Done, Running: true, Started: time.Now()}
	})
	defer l.applyUpdate(bucket, func(p *ApplyProgress) { p.Running, p.Finished = false, time.Now() })
	pol, ok := l.coord.BucketPolicy(bucket)
	if !ok {
		l.log.Info("apply: the bucket has no placement policy: nothing to re-place", "bucket", bucket)
		return 0
	}
	var keys []string
	err := l.store.Scan(func(b, _ string) bool { return b == bucket }, func(e object.VersionEntry) error {
		if !e.Deleted {
			keys = append(keys, e.Key)
		}
		return nil
	})
	if err != nil {
		l.applyUpdate(bucket, func(p *ApplyProgress) { p.Err = err.Error() })
		return 1
	}
	l.log.Info("apply: re-placing objects by the bucket's policy", "bucket", bucket, "generation", gen, "local objects", len(keys))
	// The copying shares the recovery rate limit (cairn admin recovery set --rate).
	pace := l.pacer()
	work := make(chan string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range applyWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for key := range work {
				if !l.applyOne(ctx, pol, bucket, key, pace) {
					mu.Lock()
					left++
					mu.Unlock()
				}
			}
		}()
	}
	for _, key := range keys {
		if ctx.Err() != nil {
			break
		}
		work <- key
	}
	close(work)
	wg.Wait()
	if ctx.Err() != nil {
		return max(left, 1)
	}
	l.log.Info("apply: pass finished", "bucket", bucket, "generation", gen, "left for later", left)
	return left
}

// applyWorkers is how many objects a node rewrites at once.
const applyWorkers = 4

// applyOne visits bucket/key for ApplyPass; false means it must be visited again.
func (l *Loops) applyOne(ctx context.Context, pol *policy.Policy, bucket, key string, pace waiter) bool {
	// The key's first holder in placement order visits it (whoever asks).
	tc, err := l.topo.Layout(l.maps.Current())
	if err != nil {
		return false
	}
	if ids := tc.Table.Lookup(bucket, key); len(ids) == 0 || ids[0] != l.self {
		return true
	}
	_, ts, err := l.topo.Replicas(bucket, key)
	if err != nil {
		return false
	}
	o, err := l.store.StatVersion(bucket, key)
	if err != nil || o.Deleted {
		return true
	}
	outcome, err := l.replace(ctx, pol, bucket, key, o, ts, pace)
	if err != nil {
		l.log.Warn("apply: object left for a later pass", "bucket", bucket, "key", key, "err", err)
	}
	l.applyUpdate(bucket, func(p *ApplyProgress) {
		p.Scanned++
		switch {
		case err != nil:
			p.Deferred++
			p.Err = err.Error()
		case outcome == moved:
			p.Moved++
			p.Bytes += o.Size
		case outcome == raced:
			p.Raced++
		default:
			p.Kept++
		}
	})
	return err == nil
}

type replaceOutcome int

const (
	kept replaceOutcome = iota
	moved
	raced
)

// replace rewrites bucket/key (this node's record o of it) into the class pol chooses,
// if that differs from how it is stored.
func (l *Loops) replace(ctx context.Context, pol *policy.Policy, bucket, key string, o *object.Object, ts []topology.Target, pace waiter) (replaceOutcome, error) {
	if o.Tiered() {
		return kept, nil // archived: it is re-placed when it is recalled
	}
	name, _ := pol.Evaluate(policy.Object{Key: key, Size: o.Size, ContentType: o.ContentType})
	if name == "" {
		return kept, nil // no rule and no default: the object stays where it is
	}
	m := l.maps.Current()
	cls, ok := m.ResolveClass(name)
	if !ok {
		return kept, errors.Errorf("", errors.NotExist, "the policy names class %q, which the cluster does not have", name)
	}
	if placedIn(m, o, cls) && l.placedEverywhere(ctx, m, bucket, key, o.HLC, cls, ts) {
		return kept, nil
	}
	for _, t := range ts {
		if t.Down {
			return kept, errors.Errorf("", errors.Transient, "holder %s is down: every holder must take the rewrite", t.ID)
		}
	}
	pace.wait(ctx, o.Size)
	ok, err := l.coord.Rewrite(ctx, bucket, key, o.HLC, cls, ts)
	switch {
	case err != nil:
		return kept, err
	case !ok:
		return raced, nil
	}
	return moved, nil
}

// placedIn reports whether the record o is stored as class cls stores objects now.
func placedIn(m *clustermap.Map, o *object.Object, cls clustermap.Class) bool {
	cur, ok := m.ResolveClass(o.StorageClass)
	if !ok || cur.Name != cls.Name || o.Striped != cls.Sharded() {
		return false
	}
	if !o.Striped {
		return true
	}
	want := stripe.LayoutOf(cls)
	return o.Stripe.K == want.K && o.Stripe.M == want.M && o.Stripe.Size == want.Size
}

// placedEverywhere reports whether every other holder's record of version v is stored
// as cls stores objects: a rewrite that reached only some holders is finished by the
// next pass. A holder with a newer version or none counts as placed (nothing to redo).
func (l *Loops) placedEverywhere(ctx context.Context, m *clustermap.Map, bucket, key string, v uint64, cls clustermap.Class, ts []topology.Target) bool {
	for _, t := range ts {
		if t.Local || t.Down {
			continue
		}
		o, err := l.replica(t).Stat(ctx, bucket, key)
		if err == nil && o.HLC == v && !placedIn(m, o, cls) {
			return false
		}
	}
	return true
}
