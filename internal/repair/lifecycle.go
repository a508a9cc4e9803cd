package repair

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/lifecycle"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store"
)

// The lifecycle runner (docs/design/lifecycle.md): on every storage node, each bucket
// with a lifecycle configuration (the bucket configuration "lifecycle" in the map) is
// visited at least once per interval. A round reads this node's records of the bucket
// and acts on the keys (and pending uploads) this node is the first live holder of in
// placement order, so each is acted on by one node, through the coordinator's quorum
// paths:
//
//   - a current version due to expire: a tombstone (never versioned), a delete marker
//     (Enabled) or a null delete marker (Suspended), each at version HLC+1 of the version
//     it expires, so a write newer than that version wins over it and a repeated action
//     writes the same record again;
//   - a noncurrent version due: its purge (a null one: a null tombstone at HLC+1);
//   - a delete marker that is its key's only version: its purge;
//   - a stale upload: an abort;
//   - a current version due to move to an archive tier (Transition): its migration
//     (Coordinator.Migrate, as the water marks' migration does it).
//
// A version under a legal hold or an unexpired retention is never removed: it is
// skipped and counted (and every holder would refuse the purge anyway). Decisions use
// Config.Now, the injected clock. A round records its progress after each page of
// records (the last key done, while no action failed); one that stops halfway (a crash,
// a restart, a failed action) is not recorded as finished, and the next round goes on
// after that key with the time the round started with (if it started less than an
// interval ago). Every action is idempotent, so what a cut round did after its last
// record is done again harmlessly.

// LifecycleBucket is the internal bucket that records, per bucket, when this node last
// finished a lifecycle round and for which configuration, and the progress of a round
// under way (lcRecord, as user metadata).
const LifecycleBucket = store.InternalPrefix + "lifecycle"

// lifecycleKind is the bucket configuration kind the S3 layer stores the rules under.
const lifecycleKind = "lifecycle"

// DefaultLifecycleInterval is how often each bucket's rules run by default.
const DefaultLifecycleInterval = 24 * time.Hour

// LifecycleCounts are what rounds did, by outcome.
type LifecycleCounts struct {
	Scanned           int64 `json:"scanned"` // versions and uploads evaluated (this node first holder)
	ExpiredCurrent    int64 `json:"expired_current"`
	ExpiredNoncurrent int64 `json:"expired_noncurrent"`
	RemovedMarkers    int64 `json:"removed_markers"`
	AbortedUploads    int64 `json:"aborted_uploads"`
	Transitioned      int64 `json:"transitioned"`       // current versions moved to an archive tier
	TransitionedBytes int64 `json:"transitioned_bytes"` // of those and of the noncurrent ones
	// TransitionedNoncurrent counts noncurrent versions moved to an archive tier.
	TransitionedNoncurrent int64 `json:"transitioned_noncurrent"`
	SkippedLocked          int64 `json:"skipped_locked"` // versions Object Lock protects
	Raced                  int64 `json:"raced"`          // a newer write came first
	Errors                 int64 `json:"errors"`
}

func (c *LifecycleCounts) add(o LifecycleCounts) {
	c.Scanned += o.Scanned
	c.ExpiredCurrent += o.ExpiredCurrent
	c.ExpiredNoncurrent += o.ExpiredNoncurrent
	c.RemovedMarkers += o.RemovedMarkers
	c.AbortedUploads += o.AbortedUploads
	c.Transitioned += o.Transitioned
	c.TransitionedNoncurrent += o.TransitionedNoncurrent
	c.TransitionedBytes += o.TransitionedBytes
	c.SkippedLocked += o.SkippedLocked
	c.Raced += o.Raced
	c.Errors += o.Errors
}

// LifecycleProgress is one node's lifecycle state for one bucket.
type LifecycleProgress struct {
	Node     string          `json:"node"`
	Bucket   string          `json:"bucket"`
	Running  bool            `json:"running"`
	Started  time.Time       `json:"started,omitzero"`
	Finished time.Time       `json:"finished,omitzero"` // the last finished round (as recorded)
	Next     time.Time       `json:"next,omitzero"`     // when the next round is due
	Last     LifecycleCounts `json:"last"`              // the round in progress, or the last one
	Err      string          `json:"last_error,omitempty"`
	// ResumedAfter is the key after which the round in progress (or the last one) went
	// on with a round cut short ("": it started from the beginning).
	ResumedAfter string `json:"resumed_after,omitempty"`
}

// LifecycleStats are this node's totals since it started, for metrics.
type LifecycleStats struct {
	LifecycleCounts
	Rounds    int64
	LastRound time.Time // when (wall clock) the last round of any bucket finished
}

type lifecycleState struct {
	mu     sync.Mutex
	by     map[string]*LifecycleProgress
	total  LifecycleStats
	runNow chan struct{}
	round  sync.Mutex // one round at a time
}

// LifecycleStatus returns this node's lifecycle state per bucket with rules, by name.
func (l *Loops) LifecycleStatus() []LifecycleProgress {
	if l.store == nil {
		return nil
	}
	m := l.maps.Current()
	l.lc.mu.Lock()
	defer l.lc.mu.Unlock()
	var out []LifecycleProgress
	for name, b := range m.Buckets {
		if b.Config[lifecycleKind] == "" {
			continue
		}
		p := LifecycleProgress{Node: l.self, Bucket: name}
		if q := l.lc.by[name]; q != nil {
			p = *q
		}
		if p.Finished.IsZero() {
			if at, _ := l.lifecycleDone(name); !at.IsZero() {
				p.Finished = at
			}
		}
		if !p.Finished.IsZero() {
			p.Next = p.Finished.Add(l.lcInterval)
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Bucket < out[j].Bucket })
	return out
}

// LifecycleTotals returns what this node's rounds did since it started.
func (l *Loops) LifecycleTotals() LifecycleStats {
	l.lc.mu.Lock()
	defer l.lc.mu.Unlock()
	return l.lc.total
}

// RunLifecycleNow asks RunLifecycle to start a round of every bucket now.
func (l *Loops) RunLifecycleNow() {
	select {
	case l.lc.runNow <- struct{}{}:
	default: // one is already asked for
	}
}

// RunLifecycle runs each bucket's lifecycle rules whenever they are due (interval after
// the last round this node finished for the bucket's current configuration, or at once
// for a configuration it has not run), and on RunLifecycleNow, until ctx ends. A round
// that failed is tried again after the retry delay (a tenth of the interval, at most 10
// minutes), not at every tick: a round reads the whole bucket.
func (l *Loops) RunLifecycle(ctx context.Context) {
	if l.store == nil {
		return
	}
	t := time.NewTicker(l.lcTick)
	defer t.Stop()
	retry := map[string]time.Time{} // buckets whose last round failed: not before (wall clock)
	for {
		all := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.lc.runNow:
			all = true
		}
		for name, b := range l.maps.Current().Buckets {
			doc := b.Config[lifecycleKind]
			if doc == "" || ctx.Err() != nil {
				continue
			}
			if !all {
				if time.Now().Before(retry[name]) {
					continue
				}
				rec := l.lifecycleRecord(name)
				if rec.Doc == docDigest(doc) && l.now().Before(rec.At.Add(l.lcInterval)) && !l.resumable(rec, doc, l.now()) {
					continue
				}
			}
			if err := l.LifecycleRound(ctx, name); err != nil && ctx.Err() == nil {
				if errors.IsErr(err, errLifecycleChanged) {
					continue // the new configuration (if any) runs at the next tick
				}
				retry[name] = time.Now().Add(l.lcRetry)
				l.log.Warn("lifecycle: round not finished; it runs again later", "bucket", name, "retry_in", l.lcRetry, "err", err)
				continue
			}
			delete(retry, name)
		}
	}
}

func docDigest(doc string) string {
	s := sha256.Sum256([]byte(doc))
	return hex.EncodeToString(s[:8])
}

// lcRecord is what this node keeps of its lifecycle rounds of one bucket (the record of
// key bucket in LifecycleBucket, its fields as user metadata).
type lcRecord struct {
	At  time.Time // when the last finished round ran (its clock time)
	Doc string    // the digest of the configuration it ran
	// Round, RDoc and After describe a round that started and has not finished: its
	// clock time, its configuration's digest, and the last key it is done with ("": none).
	Round time.Time
	RDoc  string
	After string
}

// lifecycleRecord returns this node's record of bucket's rounds (zero if none).
func (l *Loops) lifecycleRecord(bucket string) lcRecord {
	var rec lcRecord
	o, err := l.store.StatVersion(LifecycleBucket, bucket)
	if err != nil || o.Deleted {
		return rec
	}
	at := func(v string) time.Time {
		ns, _ := strconv.ParseInt(v, 10, 64)
		if ns == 0 {
			return time.Time{}
		}
		return time.Unix(0, ns)
	}
	for _, kv := range o.UserMeta {
		switch kv[0] {
		case "at":
			rec.At = at(kv[1])
		case "doc":
			rec.Doc = kv[1]
		case "round":
			rec.Round = at(kv[1])
		case "rdoc":
			rec.RDoc = kv[1]
		case "after":
			rec.After = kv[1]
		}
	}
	return rec
}

// lifecycleDone returns when this node last finished a round of bucket, and the digest
// of the configuration it ran.
func (l *Loops) lifecycleDone(bucket string) (time.Time, string) {
	rec := l.lifecycleRecord(bucket)
	return rec.At, rec.Doc
}

func (l *Loops) setLifecycleRecord(ctx context.Context, bucket string, rec lcRecord) error {
	if err := l.coord.EnsureLocalBucket(LifecycleBucket); err != nil {
		return err
	}
	ns := func(t time.Time) string {
		if t.IsZero() {
			return "0"
		}
		return strconv.FormatInt(t.UnixNano(), 10)
	}
	meta := &object.Object{ModTime: time.Now().UnixNano(), UserMeta: [][2]string{{"at", ns(rec.At)}, {"doc", rec.Doc},
		{"round", ns(rec.Round)}, {"rdoc", rec.RDoc}, {"after", rec.After}}}
	_, err := l.store.PutObject(ctx, LifecycleBucket, bucket, meta, bytes.NewReader(nil), 0, object.PutOptions{Version: l.clock.Next()})
	return err
}

// resumable reports whether rec holds a round of configuration doc cut short recently
// enough (within an interval of now) to be continued where it stopped, at its own time.
func (l *Loops) resumable(rec lcRecord, doc string, now time.Time) bool {
	return !rec.Round.IsZero() && rec.RDoc == docDigest(doc) && now.Before(rec.Round.Add(l.lcInterval))
}

func (l *Loops) lcUpdate(bucket string, fn func(*LifecycleProgress)) {
	l.lc.mu.Lock()
	defer l.lc.mu.Unlock()
	if l.lc.by == nil {
		l.lc.by = map[string]*LifecycleProgress{}
	}
	p := l.lc.by[bucket]
	if p == nil {
		p = &LifecycleProgress{Node: l.self, Bucket: bucket}
		l.lc.by[bucket] = p
	}
	fn(p)
}

// lifecyclePage is how many versions a round reads from the store at once; the round's
// progress is recorded after each page.
const lifecyclePage = 1000

// LifecycleRound runs bucket's lifecycle rules once on the keys and uploads this node
// is the first live holder of, and records the round as finished if nothing failed.
func (l *Loops) LifecycleRound(ctx context.Context, bucket string) error {
	const op errors.Op = "repair.LifecycleRound"
	l.lc.round.Lock()
	defer l.lc.round.Unlock()
	b, ok := l.maps.Current().Buckets[bucket]
	if !ok {
		return errors.Errorf(op, errors.NotExist, "no bucket %q", bucket)
	}
	doc := b.Config[lifecycleKind]
	if doc == "" {
		return nil
	}
	if err := l.coord.EnsureLocalBucket(bucket); err != nil {
		return errors.E(op, err) // a bucket no object of which reached this node yet
	}
	cfg, err := lifecycle.Parse([]byte(doc))
	if err != nil {
		return errors.E(op, errors.Corrupt, err) // stored documents were validated
	}
	// A round cut short (a restart, a failed action) goes on where it stopped, with the
	// time it started with; otherwise a new round starts now.
	now := l.now()
	rec := l.lifecycleRecord(bucket)
	if l.resumable(rec, doc, now) {
		now = rec.Round
	} else {
		rec.Round, rec.RDoc, rec.After = now, docDigest(doc), ""
		if err := l.setLifecycleRecord(ctx, bucket, rec); err != nil {
			return errors.E(op, err)
		}
	}
	r := &lcRound{l: l, bucket: bucket, doc: doc, cfg: cfg, now: now, versioning: b.Config["versioning"], pace: l.pacer(), rec: rec}
	l.lcUpdate(bucket, func(p *LifecycleProgress) {
		p.Running, p.Started, p.Last, p.Err, p.ResumedAfter = true, now, LifecycleCounts{}, "", rec.After
	})
	err = r.run(ctx)
	l.lc.mu.Lock()
	l.lc.total.add(r.counts)
	l.lc.mu.Unlock()
	if err == nil && r.counts.Errors > 0 {
		err = errors.Errorf(op, errors.Transient, "%d actions failed, the last: %v", r.counts.Errors, r.lastErr)
	}
	if err == nil {
		err = l.setLifecycleRecord(ctx, bucket, lcRecord{At: now, Doc: docDigest(doc)})
	}
	l.lcUpdate(bucket, func(p *LifecycleProgress) {
		p.Running, p.Last = false, r.counts
		if err != nil {
			p.Err = err.Error()
			return
		}
		p.Finished = now
	})
	if err == nil {
		l.lc.mu.Lock()
		l.lc.total.Rounds++
		l.lc.total.LastRound = time.Now() // wall clock: the metric says when, not the round's time
		l.lc.mu.Unlock()
		lvl := slog.LevelDebug
		if r.counts != (LifecycleCounts{Scanned: r.counts.Scanned}) {
			lvl = slog.LevelInfo // it did something
		}
		l.log.Log(ctx, lvl, "lifecycle: round finished", "bucket", bucket, "scanned", r.counts.Scanned, "expired", r.counts.ExpiredCurrent,
			"noncurrent_expired", r.counts.ExpiredNoncurrent, "markers_removed", r.counts.RemovedMarkers, "uploads_aborted", r.counts.AbortedUploads,
			"skipped_locked", r.counts.SkippedLocked)
	}
	return err
}

// errLifecycleChanged ends a round whose bucket's configuration was replaced or deleted
// under it: no action of the old rules is taken after that.
var errLifecycleChanged = errors.New("the bucket's lifecycle configuration or versioning changed (or the configuration was deleted) during the round, which stopped")

// lcRound is one round of one bucket.
type lcRound struct {
	l          *Loops
	bucket     string
	doc        string          // the configuration the round runs, as stored
	checked    *clustermap.Map // the last map found to hold doc (changed)
	cfg        *lifecycle.Config
	now        time.Time
	versioning string
	pace       waiter
	counts     LifecycleCounts
	lastErr    error    // of the last failed action
	rec        lcRecord // the round's record: After is its progress
}

// changed reports whether the bucket's lifecycle configuration or versioning is no
// longer the one the round runs with: an expiry decided as a delete in a bucket whose
// versioning was enabled meanwhile would remove a version that must stay noncurrent (a
// document is compared once per map, not once per key).
func (r *lcRound) changed() bool {
	m := r.l.maps.Current()
	if m == r.checked {
		return false
	}
	if b, ok := m.Buckets[r.bucket]; !ok || b.Config[lifecycleKind] != r.doc || b.Config["versioning"] != r.versioning {
		return true
	}
	r.checked = m
	return false
}

// first reports whether this node is the first holder of bucket/key in placement order
// that is not marked down.
func (r *lcRound) first(m *clustermap.Map, key string) bool {
	tc, err := r.l.topo.Layout(m)
	if err != nil {
		return false
	}
	for _, id := range tc.Table.Lookup(r.bucket, key) {
		if n, ok := m.Node(id); ok && n.State == clustermap.StateDown {
			continue
		}
		return id == r.l.self
	}
	return false
}

func (r *lcRound) run(ctx context.Context) error {
	m := r.l.maps.Current()
	opts := object.VersionListOptions{Max: r.l.lcPage, KeyMarker: r.rec.After}
	var key, done string
	var group []*object.Object
	current := false
	var stop error
	flush := func() {
		if stop == nil && len(group) > 0 && r.changed() {
			// A configuration withdrawn (a wrong rule, say) stops deleting at once, not
			// at the end of a round that may take hours.
			stop = errLifecycleChanged
		}
		if stop == nil && len(group) > 0 && current && r.first(m, key) {
			r.key(ctx, key, group)
		}
		if stop == nil && len(group) > 0 {
			done = key
		}
		group, current = nil, false
	}
	// checkpoint records that the keys up to done are done, as long as no action of the
	// round failed (a resumed round then retries from before the first failure).
	checkpoint := func() {
		if done == "" || done == r.rec.After || r.counts.Errors > 0 || ctx.Err() != nil {
			return
		}
		r.rec.After = done
		if err := r.l.setLifecycleRecord(ctx, r.bucket, r.rec); err != nil {
			r.l.log.Warn("lifecycle: cannot record the round's progress", "bucket", r.bucket, "err", err)
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		page, err := r.l.store.ListVersions(r.bucket, opts)
		if err != nil {
			return err
		}
		r.pace.wait(ctx, int64(len(page.Versions))*64) // reading the index: a little of the budget
		for _, v := range page.Versions {
			if v.Key != key {
				flush()
				key, current = v.Key, v.Current
			}
			group = append(group, v.Object)
		}
		if stop != nil {
			return stop
		}
		if !page.Truncated {
			break
		}
		checkpoint()
		opts.KeyMarker, opts.VersionMarker, opts.AfterNull = page.NextKey, page.NextVersion, page.NextNull
	}
	flush()
	if stop != nil {
		return stop
	}
	if r.cfg.Uploads() {
		return r.uploads(ctx, m)
	}
	return nil
}

// key evaluates and acts on one key's versions (newest first, the first current).
func (r *lcRound) key(ctx context.Context, key string, vs []*object.Object) {
	in := make([]lifecycle.Version, len(vs))
	byHLC := make(map[uint64]*object.Object, len(vs))
	for i, o := range vs {
		in[i] = lifecycle.Version{HLC: o.HLC, ModTime: time.Unix(0, o.ModTime), Size: o.Size, Tags: o.Tags, DeleteMarker: o.DeleteMarker, Archived: o.Tiered()}
		byHLC[o.HLC] = o
	}
	r.counts.Scanned += int64(len(vs))
	for _, a := range r.cfg.Evaluate(key, in, r.now) {
		r.act(ctx, key, a, byHLC[a.HLC])
	}
}

// act applies one action to version o of key.
func (r *lcRound) act(ctx context.Context, key string, a lifecycle.Action, o *object.Object) {
	if ctx.Err() != nil {
		return // stopping: the round is not recorded, the next one does it
	}
	if a.Kind == lifecycle.TransitionCurrent {
		r.transition(ctx, key, a, o)
		return
	}
	if a.Kind == lifecycle.TransitionNoncurrent {
		// Migrate decides about Object Lock (a locked version goes only to a class tier,
		// which keeps the lock's guarantee); the version must still be noncurrent as the
		// cluster has it (a purge of its successor makes it current again).
		ok, err := r.confirmed(ctx, key, a)
		switch {
		case err != nil:
			r.fail(key, a, err)
		case !ok:
			r.counts.Raced++
		default:
			r.transition(ctx, key, a, o)
		}
		return
	}
	if a.Kind != lifecycle.ExpireCurrent && o.Locked(r.now.UnixNano(), false) {
		r.counts.SkippedLocked++
		return
	}
	if a.Kind != lifecycle.ExpireCurrent {
		ok, err := r.confirmed(ctx, key, a)
		switch {
		case err != nil:
			r.fail(key, a, err)
			return
		case !ok:
			r.counts.Raced++
			return
		}
	}
	r.pace.wait(ctx, 4<<10) // a deletion's records on its holders
	var d object.Object
	switch a.Kind {
	case lifecycle.ExpireCurrent:
		// Only if the cluster's current version is still the one evaluated.
		cur, err := r.l.coord.StatObject(ctx, r.bucket, key)
		switch {
		case errors.Is(errors.NotExist, err):
			r.counts.Raced++
			return
		case err != nil:
			r.fail(key, a, err)
			return
		case cur.HLC != o.HLC:
			r.counts.Raced++
			return
		}
		d = object.Object{HLC: o.HLC + 1, ModTime: r.now.UnixNano()}
		switch r.versioning {
		case "Enabled":
			d.DeleteMarker, d.Versioned = true, true
		case "Suspended":
			d.DeleteMarker = true
		}
	case lifecycle.ExpireNoncurrent, lifecycle.RemoveMarker:
		if o.Versioned {
			d = object.Object{HLC: o.HLC, Versioned: true, Purged: true}
		} else {
			d = object.Object{HLC: o.HLC + 1, ModTime: r.now.UnixNano()} // the null version: a newer null tombstone
		}
	}
	_, err := r.l.coord.DeleteRecord(ctx, r.bucket, key, d)
	switch {
	case errors.IsErr(err, object.ErrLocked) || errors.Is(errors.Permission, err):
		r.counts.SkippedLocked++
	case err != nil:
		r.fail(key, a, err)
	case a.Kind == lifecycle.ExpireCurrent:
		r.counts.ExpiredCurrent++
	case a.Kind == lifecycle.ExpireNoncurrent:
		r.counts.ExpiredNoncurrent++
	default:
		r.counts.RemovedMarkers++
	}
}

// transition moves version o of key (the current one, or a noncurrent one for
// TransitionNoncurrent) to the archive tier a.Tier through the tiers' migration (the
// coordinator's Migrate or MigrateNoncurrent: copy checked against its MD5, then the
// stub on every holder, then the local bodies dropped), paced by the object's size. The
// tier must still be in the map. Migrate does nothing (counted as raced) for a current
// version no longer current, a version purged, archived already, empty, or under Object
// Lock when the tier is external; it is idempotent: a repeated action finds the version
// archived.
func (r *lcRound) transition(ctx context.Context, key string, a lifecycle.Action, o *object.Object) {
	if _, ok := r.l.maps.Current().Tiers[a.Tier]; !ok {
		r.fail(key, a, errors.Errorf("", errors.NotExist, "no archive tier %q in the cluster map", a.Tier))
		return
	}
	r.pace.wait(ctx, o.Size)
	migrate := r.l.coord.Migrate
	if a.Kind == lifecycle.TransitionNoncurrent {
		migrate = r.l.coord.MigrateNoncurrent
	}
	n, err := migrate(ctx, r.bucket, key, o.HLC, a.Tier)
	switch {
	case err != nil:
		r.fail(key, a, err)
	case n == 0:
		r.counts.Raced++
	case a.Kind == lifecycle.TransitionNoncurrent:
		r.counts.TransitionedNoncurrent++
		r.counts.TransitionedBytes += n
	default:
		r.counts.Transitioned++
		r.counts.TransitionedBytes += n
	}
}

// confirmed reports whether action a (a purge: a noncurrent version's or a lone delete
// marker's; or a noncurrent version's transition) is still due when key's versions are read as the cluster has them, every
// storage node's records merged, rather than as this node's store has them. This node may
// have missed a change that others took: the permanent delete of the version that made
// a.HLC noncurrent, say, after which a.HLC is the key's current version again and must
// stay. An expiry of the current version needs no such check: its marker is written at
// the expired version + 1 and only after a quorum read found that version current, so a
// newer write wins over it. A listing that cannot be had (too many nodes silent) is an
// error: the action waits for a later round.
func (r *lcRound) confirmed(ctx context.Context, key string, a lifecycle.Action) (bool, error) {
	opts := object.VersionListOptions{Prefix: key, Max: 1000}
	var in []lifecycle.Version
	for {
		page, err := r.l.coord.ListVersions(ctx, r.bucket, opts)
		if err != nil {
			return false, err
		}
		for _, v := range page.Versions {
			if v.Key != key {
				break
			}
			o := v.Object
			in = append(in, lifecycle.Version{HLC: o.HLC, ModTime: time.Unix(0, o.ModTime), Size: o.Size, Tags: o.Tags, DeleteMarker: o.DeleteMarker, Archived: o.Tiered()})
		}
		// A page ends inside the key's versions only if the key fills it: its versions
		// come first, then the keys it prefixes.
		if !page.Truncated || page.NextKey != key {
			break
		}
		opts.KeyMarker, opts.VersionMarker, opts.AfterNull = page.NextKey, page.NextVersion, page.NextNull
	}
	for _, b := range r.cfg.Evaluate(key, in, r.now) {
		if b.Kind == a.Kind && b.HLC == a.HLC {
			return true, nil
		}
	}
	return false, nil
}

// fail counts a failed action; the round reports the last one (one log line a round).
func (r *lcRound) fail(key string, a lifecycle.Action, err error) {
	r.counts.Errors++
	r.lastErr = fmt.Errorf("%s of %s (rule %q): %w", a.Kind, key, a.Rule, err)
}

// uploads aborts the bucket's stale uploads this node is the first live holder of.
func (r *lcRound) uploads(ctx context.Context, m *clustermap.Map) error {
	var due []object.PendingUpload
	err := r.l.store.PendingUploads(func(u object.PendingUpload) error {
		if u.Bucket != r.bucket || !r.first(m, u.Key) {
			return nil
		}
		r.counts.Scanned++
		if r.cfg.AbortDue(u.Key, u.Initiated, r.now) != "" {
			due = append(due, u)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, u := range due {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if r.changed() {
			return errLifecycleChanged
		}
		r.pace.wait(ctx, 4<<10)
		err := r.l.coord.AbortUpload(ctx, u.Bucket, u.Key, u.UploadID)
		switch {
		case err == nil:
			r.counts.AbortedUploads++
		case errors.Is(errors.NotExist, err):
			r.counts.Raced++ // completed or aborted meanwhile
		default:
			r.fail(u.Key, lifecycle.Action{Kind: lifecycle.AbortUpload}, err)
		}
	}
	return nil
}
