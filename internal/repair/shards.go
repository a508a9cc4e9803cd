package repair

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/erasure"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/hlc"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/placement"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/stripe"
	"github.com/cairnfs/cairn/internal/topology"
)

// Moving shards with placement. When nodes join, drain or leave, a stripe's nodes in its
// class's table change, and some shards sit on nodes that are no longer among them. Each
// sync round, a node hands off such shards: it copies each to a node of the stripe that
// holds nothing for it (the one a rebuild would choose: missing indices in order onto
// free nodes in stripe order, put only if that node still holds nothing), checks that the
// node now holds that very shard (its header: stripe, index and payload CRC), and only
// then removes its own copy (store.Forget of that exact record). A shard whose index a
// node of the stripe already holds is a spare: it is removed once that copy is checked.
// Copying one shard costs one shard of traffic, where rebuilding it reads K.
//
// Only shards on no table of their code are considered, so a round costs no I/O beyond
// the index while nothing moves.

// misplacedShard is a local shard that is on no table of its class.
type misplacedShard struct {
	key    string
	record uint64
	owner  string
	hdr    erasure.Header
}

// misplacedShards lists this node's shards that no current table of their code puts here.
// A shard whose class cannot be told, or whose table cannot be built (fewer nodes than
// shards in placement), is not listed: it stays where it is.
func (l *Loops) misplacedShards(m *clustermap.Map) ([]misplacedShard, error) {
	// The tables of the classes that can be placed now, built once for the whole scan.
	type placeable struct {
		k, p int
		tbl  *placement.Table
	}
	var tables []placeable
	for _, c := range stripe.ShardedClasses(m) {
		if tbl, err := l.topo.ShardTable(m, c, true); err == nil {
			k, p := c.Shards()
			tables = append(tables, placeable{k, p, tbl})
		}
	}
	if len(tables) == 0 {
		return nil, nil
	}
	var keys []object.VersionEntry
	err := l.store.Scan(func(b, _ string) bool { return b == topology.ShardBucket }, func(e object.VersionEntry) error {
		if !e.Deleted {
			keys = append(keys, e)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []misplacedShard
	for _, e := range keys {
		// Index only: a shard on some table of a sharded class stays.
		if slices.ContainsFunc(tables, func(t placeable) bool { return l.onTable(t.tbl, e.Key) }) {
			continue
		}
		hb, err := l.localShardHeader(e.Key)
		if err != nil {
			continue
		}
		h, err := erasure.ParseHeader(hb)
		if err != nil {
			continue // damaged: the scrub's and the heal's job
		}
		// A shard of a code no table can be built for (fewer nodes in placement than its
		// shards) has nowhere to go: it stays.
		if !slices.ContainsFunc(tables, func(t placeable) bool { return t.k == h.K && t.p == h.M }) {
			continue
		}
		o, err := l.store.StatVersion(topology.ShardBucket, e.Key)
		if err != nil || o.HLC != e.HLC {
			continue
		}
		s := misplacedShard{key: e.Key, record: e.HLC, hdr: h}
		for _, kv := range o.UserMeta {
			if kv[0] == "owner" {
				s.owner = kv[1]
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// onTable reports whether this node is one of stripe's nodes in tbl.
func (l *Loops) onTable(tbl *placement.Table, stripe string) bool {
	return slices.Contains(tbl.Nodes(placement.Partition(topology.ShardBucket, stripe, tbl.Partitions())), l.self)
}

// localShardHeader reads the header of this node's shard of stripe.
func (l *Loops) localShardHeader(stripe string) ([]byte, error) {
	return l.stripes.ShardHeader(context.Background(), topology.Target{ID: l.self, Local: true}, stripe)
}

// moveShards hands off this node's misplaced shards (see above). It returns how many
// shards it moved or found already in place and removed.
func (l *Loops) moveShards(ctx context.Context, m *clustermap.Map, st *SyncStats) {
	shards, err := l.misplacedShards(m)
	if err != nil {
		l.log.Warn("shard moves: cannot list the shards", "err", err)
		return
	}
	pace := l.pacer()
	for _, s := range shards {
		if ctx.Err() != nil {
			return
		}
		cls := stripe.CodeClass(m, s.hdr.K, s.hdr.M, l.ownerClass(ctx, s.owner))
		tbl, err := l.topo.ShardTable(m, cls, true)
		if err != nil {
			st.ShardsWaiting++
			continue
		}
		ts := l.topo.ShardTargets(m, tbl, s.key)
		done, err := l.moveShard(ctx, ts, s, pace)
		switch {
		case err != nil:
			st.ShardsWaiting++
			l.log.Debug("shard move: not now", "stripe", s.key, "err", err)
		case done:
			if gone, err := l.store.Forget(topology.ShardBucket, s.key, s.record); err == nil && gone {
				st.ShardsMoved++
			}
		}
	}
}

// ownerClass returns the storage class of the object "bucket/key" as its first holder
// that answers has it ("" if none does): it tells classes of one code apart.
func (l *Loops) ownerClass(ctx context.Context, owner string) string {
	bucket, key, ok := strings.Cut(owner, "/")
	if !ok {
		return ""
	}
	_, ts, err := l.topo.Replicas(bucket, key)
	if err != nil {
		return ""
	}
	for _, t := range ts {
		if t.Down {
			continue
		}
		if o, err := l.replica(t).Stat(ctx, bucket, key); err == nil {
			return o.StorageClass
		}
	}
	return ""
}

// moveShard makes sure a node of the stripe (ts) holds the shard s, copying it to a free
// one if none does. true means this node's copy may go.
func (l *Loops) moveShard(ctx context.Context, ts []topology.Target, s misplacedShard, pace waiter) (bool, error) {
	held, free, err := l.probeStripe(ctx, ts, s.key)
	if err != nil {
		return false, err
	}
	if h, ok := held[s.hdr.Index]; ok {
		if h.Stripe == s.hdr.Stripe && h.CRC == s.hdr.CRC {
			return true, nil // a spare: the stripe's nodes have it
		}
		return false, errors.Errorf("", errors.Precondition, "a node of the stripe holds another shard %d", s.hdr.Index)
	}
	// The missing indices in order go to the free nodes in stripe order, as a rebuild
	// would place them, so movers and rebuilds agree on where each goes.
	var missing []int
	for j := range s.hdr.K + s.hdr.M {
		if _, ok := held[j]; !ok {
			missing = append(missing, j)
		}
	}
	pos := slices.Index(missing, s.hdr.Index)
	if pos < 0 || pos >= len(free) {
		return false, errors.E(errors.Transient, "no free node of the stripe for the shard")
	}
	dst := free[pos]
	b, err := l.stripes.GetShard(ctx, topology.Target{ID: l.self, Local: true}, s.key)
	if err != nil {
		return false, err
	}
	if _, _, err := erasure.ParseShard(b); err != nil {
		return false, err // never spread a damaged shard
	}
	pace.wait(ctx, int64(len(b)))
	if err := l.stripes.PutShard(ctx, dst, s.key, s.owner, b, true); err != nil {
		return false, err
	}
	hb, err := l.stripes.ShardHeader(ctx, dst, s.key)
	if err != nil {
		return false, err
	}
	h, err := erasure.ParseHeader(hb)
	if err != nil || h.Index != s.hdr.Index || h.Stripe != s.hdr.Stripe || h.CRC != s.hdr.CRC {
		return false, errors.Errorf("", errors.Precondition, "node %s does not hold the shard it took", dst.ID)
	}
	l.log.Debug("moved a shard to follow placement", "stripe", s.key, "shard", s.hdr.Index, "to", dst.ID)
	return true, nil
}

// probeStripe reads the headers of the shards ts hold for stripe: held by index, and the
// nodes that hold nothing for it, in stripe order. A node that does not answer makes the
// probe fail: what it holds is unknown.
func (l *Loops) probeStripe(ctx context.Context, ts []topology.Target, stripe string) (held map[int]erasure.Header, free []topology.Target, err error) {
	hs := make([]*erasure.Header, len(ts))
	absent := make([]bool, len(ts))
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for i, t := range ts {
		if t.Down {
			errs[i] = errors.E(errors.Transient, "node "+t.ID+" is down")
			continue
		}
		wg.Go(func() {
			b, err := l.stripes.ShardHeader(ctx, t, stripe)
			switch {
			case errors.Is(errors.NotExist, err):
				absent[i] = true
			case err != nil:
				errs[i] = err
			default:
				if h, err := erasure.ParseHeader(b); err == nil {
					hs[i] = &h
				}
			}
		})
	}
	wg.Wait()
	held = map[int]erasure.Header{}
	for i := range ts {
		switch {
		case errs[i] != nil:
			return nil, nil, errs[i]
		case absent[i]:
			free = append(free, ts[i])
		case hs[i] != nil:
			held[hs[i].Index] = *hs[i]
		}
	}
	return held, free, nil
}

// collectShards removes this node's shards of object versions that a newer version (or a
// delete) of their object has replaced: proof that they can never be read again. A shard
// whose object's holders cannot be asked, or show nothing newer, is kept. Shards of
// multipart parts go once their upload is gone and no record reads them
// (uploadStripesNeeded, below).
func (l *Loops) collectShards(ctx context.Context, st *SyncStats) {
	type shard struct {
		key     string
		version uint64 // the object's
		record  uint64 // the shard record's own
	}
	byOwner := map[string][]shard{}
	byUpload := map[[2]string][]shard{} // shards of parts, by owner and upload
	err := l.store.Scan(func(b, _ string) bool { return b == topology.ShardBucket }, func(e object.VersionEntry) error {
		// The key is hash/version/stripe: the version is the object's; or a part's,
		// hash/upload.part/stripe.
		upload, isPart := stripe.PartUpload(e.Key)
		parts := strings.SplitN(e.Key, "/", 3)
		if len(parts) != 3 {
			return nil
		}
		v, err := strconv.ParseUint(parts[1], 16, 64)
		if err != nil && !isPart {
			return nil
		}
		o, err := l.store.StatVersion(topology.ShardBucket, e.Key)
		if err != nil {
			return nil
		}
		for _, kv := range o.UserMeta {
			switch {
			case kv[0] != "owner":
			case isPart:
				byUpload[[2]string{kv[1], upload}] = append(byUpload[[2]string{kv[1], upload}], shard{key: e.Key, record: e.HLC})
			default:
				byOwner[kv[1]] = append(byOwner[kv[1]], shard{e.Key, v, e.HLC})
			}
		}
		return nil
	})
	if err != nil {
		l.log.Warn("shard collection: cannot scan the shards", "err", err)
		return
	}
	for owner, shards := range byOwner {
		if ctx.Err() != nil {
			return
		}
		bucket, key, ok := strings.Cut(owner, "/")
		if !ok {
			continue
		}
		_, ts, err := l.topo.Replicas(bucket, key)
		if err != nil {
			continue
		}
		var newest uint64
		versioned := false // the newest record is a version of a versioned key
		for _, t := range ts {
			if t.Down {
				continue
			}
			if o, err := l.replica(t).Stat(ctx, bucket, key); err == nil && o.HLC > newest {
				newest, versioned = o.HLC, o.Versioned
			}
		}
		// Shards of the newest version itself go only if every holder shows it rewritten
		// into another layout (policy apply); asked once, for the first such shard.
		rewritten, asked := false, false
		for _, s := range shards {
			if newest == s.version && !asked {
				rewritten, asked = l.versionRewritten(ctx, bucket, key, ts, s.version), true
			}
			if newest > s.version && l.versionKept(ctx, bucket, key, ts, s.version, versioned) {
				continue // a noncurrent version of a versioned key (or one still being written): its shards stay
			}
			if newest > s.version || (newest == s.version && rewritten) {
				if gone, err := l.store.Forget(topology.ShardBucket, s.key, s.record); err == nil && gone {
					st.Collected++
				}
			}
		}
	}
	// The records of a key with PUT tags past their grace are listed once a round, from
	// the oldest such tag's version on (a versioned key of many erasure-coded versions
	// would otherwise be listed once per version).
	putFloor := map[string]uint64{}
	for ou := range byUpload {
		if v, ok := stripe.PutTagVersion(ou[1]); ok && l.now().Sub(hlc.Time(v)) >= stripe.PutGrace {
			if f, seen := putFloor[ou[0]]; !seen || v < f {
				putFloor[ou[0]] = v
			}
		}
	}
	type listing struct {
		recs [][]*object.Object
		errs []error
	}
	listed := map[string]*listing{}
	for ou, shards := range byUpload {
		if ctx.Err() != nil {
			return
		}
		bucket, key, ok := strings.Cut(ou[0], "/")
		if !ok {
			continue
		}
		floor, isPut := stripe.PutTagVersion(ou[1])
		if isPut && l.now().Sub(hlc.Time(floor)) < stripe.PutGrace {
			continue // the PUT may still be sending its body, or writing the record that reads it
		}
		olders := func(ts []topology.Target) ([][]*object.Object, []error) {
			return topology.Gather(ts, func(t topology.Target) ([]*object.Object, error) { return l.keyRecords(ctx, t, bucket, key, 0) })
		}
		if isPut {
			olders = func(ts []topology.Target) ([][]*object.Object, []error) {
				if ls := listed[ou[0]]; ls != nil && len(ls.recs) == len(ts) {
					return ls.recs, ls.errs
				}
				ls := &listing{}
				ls.recs, ls.errs = topology.Gather(ts, func(t topology.Target) ([]*object.Object, error) {
					return l.keyRecords(ctx, t, bucket, key, putFloor[ou[0]])
				})
				listed[ou[0]] = ls
				return ls.recs, ls.errs
			}
		}
		needed, ok := l.uploadStripesNeeded(ctx, bucket, key, ou[1], olders)
		for _, s := range shards {
			if strings.HasPrefix(ou[1], stripe.RelayoutPrefix) && l.now().Sub(hlc.Time(s.record)) < stripe.RelayoutGrace {
				continue // a rewrite may still be writing the record that reads it
			}
			if ok && !needed[s.key] {
				if gone, err := l.store.Forget(topology.ShardBucket, s.key, s.record); err == nil && gone {
					st.Collected++
				}
			}
		}
	}
}

// Collection of the shards of multipart parts and of tagged PUTs. A part of an
// erasure-coded upload is striped on its own (hash/UPLOAD.N/i); its shards are read only
// through a record that references the upload (Stripe.Upload), which only the upload's
// completion writes. So once the upload is gone (completed or aborted) from every holder
// of the object and no holder's record (current or noncurrent) references it, nothing
// can read them again: the upload was aborted, or the object it made was replaced or
// deleted (or, in a versioned key, purged). collectShards (above) removes them then, and
// keeps them whenever a holder cannot be asked.
//
// The stripes of an erasure-coded PUT (from feature level 9) are named the same way by
// the PUT's tag (stripe.PutTag: hash/put-P-NONCE.1/i, one part), and only the PUT's record
// references the tag, written once its body is complete, at a version later than P. No
// upload bears the tag, so step 1 below is skipped; what keeps a PUT in flight safe is
// its grace instead: its stripes are not considered until stripe.PutGrace after P (the
// gateway writes no record after half of it, so by then its record is on the holders or
// nowhere), and the records a round lists for one key serve all its tags.

// uploadStripesNeeded decides whether the stripes of the parts of upload (of bucket/key),
// or of the PUT whose tag it is, can still be read. ok false means no proof either way: a
// holder is down or did not answer, or the upload is still in progress somewhere; keep
// them all. ok true with a nil set means none can be read again. Otherwise the set names
// the stripes that a holder's record reads (the parts listed when the upload was
// completed): the others (parts left out of the completion, stripes beyond a part's end
// after it was sent again smaller) cannot be read either. olders lists every record of
// the key on each holder (noncurrent ones included), newer than some version every record
// that references upload is newer than.
//
// The holders are the object's current holders and the nodes that may still hold it
// (draining, or holders under a placement replaced a short while ago): every one must
// answer. The checks run in this order, and the order is what makes the rule safe against
// a completion running meanwhile:
//
//  1. the upload, on every holder: absent everywhere (NotExist; not asked for a PUT's
//     tag, which no upload bears);
//  2. then the records, on every holder: none references the upload (the current records
//     first; if none does, every record of the key, noncurrent versions included).
//
// A holder completes an upload in one index batch that removes the upload and writes the
// object's record (store.CompleteUploadVersion; the gateway's CompleteUpload only fans
// that out), and nothing else writes a record that references an upload but a copy of
// such a record. (A holder that missed the completion drops the upload when it receives
// the upload's end record, store.EndUpload, and can never complete it afterwards; the
// end record exists only once some holder completed, and those holders keep the record.) So once step 1
// saw the upload absent on a holder, that holder's completion is already committed, or
// will never happen there; a record referencing the upload is then either already on that
// holder, where step 2 (later) sees it or a newer record that replaced it (a version
// replaced in a versioned key stays, as a noncurrent record), or nowhere at all (an
// abort, or a completion superseded by a newer write). A copy by sync or hinted retry
// only spreads a record some holder already has, which step 2 sees too. In the other
// order, step 2 could see no record, a completion commit, and step 1 then see the upload
// gone: the parts of a live object would be collected.
func (l *Loops) uploadStripesNeeded(ctx context.Context, bucket, key, upload string,
	olders func(ts []topology.Target) ([][]*object.Object, []error)) (needed map[string]bool, ok bool) {
	_, ts, err := l.topo.Replicas(bucket, key)
	if err != nil {
		return nil, false
	}
	ts = append(ts, l.topo.FormerReplicas(bucket, key, ts)...)
	for _, t := range ts {
		if t.Down {
			return nil, false
		}
	}
	if _, isPut := stripe.PutTagVersion(upload); !isPut {
		_, errs := topology.Gather(ts, func(t topology.Target) (struct{}, error) {
			ans, err := l.replica(t).Parts(ctx, bucket, key, upload, 0, 1)
			if err == nil && ans.End != nil {
				err = errors.E(errors.NotExist, object.ErrNoSuchUpload) // ended there: its end record is all that is left
			}
			return struct{}{}, err
		})
		for _, err := range errs {
			if !errors.Is(errors.NotExist, err) { // nil: in progress there; else: no answer
				return nil, false
			}
		}
	}
	// add notes a record's stripes if it references the upload; false: a record this
	// gateway cannot read, keep what it may need.
	add := func(o *object.Object) bool {
		if !o.Striped || o.Deleted || o.Stripe.Upload != upload {
			return true
		}
		if len(o.Stripe.Parts) != max(len(o.PartSizes), 1) { // one part: a PUT's or a rewrite's
			return false
		}
		if needed == nil {
			needed = map[string]bool{}
		}
		for _, name := range stripe.Names(bucket, key, o) {
			needed[name] = true
		}
		return true
	}
	recs, errs := topology.Gather(ts, func(t topology.Target) (*object.Object, error) { return l.replica(t).Stat(ctx, bucket, key) })
	for i, o := range recs {
		switch err := errs[i]; {
		case errors.Is(errors.NotExist, err):
		case err != nil:
			return nil, false
		case !add(o):
			return nil, false
		}
	}
	if needed != nil {
		return needed, true // every record of the upload's object names the same stripes
	}
	// No current record references it: a noncurrent version of a versioned key may.
	all, errs := olders(ts)
	for i, os := range all {
		if errs[i] != nil {
			return nil, false
		}
		for _, o := range os {
			if !add(o) {
				return nil, false
			}
		}
	}
	return needed, true
}

// keyRecords returns t's records of bucket/key newer than floor, current and noncurrent
// (tombstones and purge records too, if t lists them).
func (l *Loops) keyRecords(ctx context.Context, t topology.Target, bucket, key string, floor uint64) ([]*object.Object, error) {
	var out []*object.Object
	opts := object.VersionListOptions{Prefix: key, Max: 100}
	for {
		page, err := l.replica(t).ListVersions(ctx, bucket, opts)
		if errors.Is(errors.NotExist, err) {
			return out, nil // no such bucket there: no records
		}
		if err != nil {
			return nil, err
		}
		for _, e := range page.Versions {
			if e.Key != key || e.Object.HLC <= floor {
				return out, nil // versions come newest first, the key's before longer keys
			}
			out = append(out, e.Object)
		}
		if !page.Truncated || page.NextKey != key {
			return out, nil
		}
		opts.KeyMarker, opts.VersionMarker, opts.AfterNull = page.NextKey, page.NextVersion, page.NextNull
	}
}

// versionRewritten reports whether version v of bucket/key was rewritten into another
// layout (policy apply) on every holder, so that the stripes its first write made
// (hash/V/i) can never be read again: every holder, current or former, answers with
// version v stored whole or under a rewrite's tag. ts are the current holders.
func (l *Loops) versionRewritten(ctx context.Context, bucket, key string, ts []topology.Target, v uint64) bool {
	ts = append(ts, l.topo.FormerReplicas(bucket, key, ts)...)
	for _, t := range ts {
		if t.Down {
			return false
		}
	}
	recs, errs := topology.Gather(ts, func(t topology.Target) (*object.Object, error) { return l.replica(t).Stat(ctx, bucket, key) })
	for i, o := range recs {
		if errs[i] != nil || o.HLC != v || o.Deleted || (o.Striped && o.Stripe.Upload == "") {
			return false
		}
	}
	return len(recs) > 0
}

// inflightGrace is how long the shards of a version of a versioned key that no holder
// has a record of yet are kept (nanoseconds): an erasure-coded PUT writes its shards
// (named by its version) before its record, and in a versioned bucket that record is kept
// even if a newer version landed meanwhile.
var inflightGrace atomic.Int64

func init() { inflightGrace.Store(int64(24 * time.Hour)) }

// SetInflightGrace changes how long the shards of a versioned key's version in flight are
// kept (for tests) and returns the previous value.
func SetInflightGrace(d time.Duration) time.Duration {
	return time.Duration(inflightGrace.Swap(int64(d)))
}

// versionKept reports whether a holder of bucket/key may still keep version v as a
// noncurrent version (a versioned key): one that holds it, or one that cannot tell; or,
// if the key is versioned, whether v may still be in flight (no holder has a record of it,
// none a purge or tombstone, and it is younger than the in-flight grace). Shards of a version
// are collected only once every holder that answers lacks that version for good.
func (l *Loops) versionKept(ctx context.Context, bucket, key string, ts []topology.Target, v uint64, versioned bool) bool {
	removed := false
	for _, t := range ts {
		if t.Down {
			continue
		}
		rd, err := l.replica(t).Open(ctx, bucket, key, replica.OpenOptions{Version: v})
		if err == nil {
			rd.Close()
			return true
		}
		if errors.IsErr(err, object.ErrNoSuchVersion) {
			removed = true // purged, or a tombstone: it will not come
			continue
		}
		if !errors.Is(errors.NotExist, err) && !errors.Is(errors.Precondition, err) {
			return true
		}
	}
	return versioned && !removed && time.Since(hlc.Time(v)) < time.Duration(inflightGrace.Load())
}
