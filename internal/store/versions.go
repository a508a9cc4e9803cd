package store

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store/segment"
)

// Versions (docs/design/versioning.md). A key's current record stays under O/: the
// newest visible version (an object or a delete marker), or, if it has none, its newest
// tombstone. Every other record of the key is under V/<bucket>\0<key>\0<^HLC>, newest
// first: noncurrent versions, delete markers, tombstones behind a newer version and purge
// records. A key has at most one null version (object, null delete marker or tombstone);
// a newer one replaces it. Keys of buckets that never had versioning enabled have no V/
// records, and their writes take the path they always took.

const pfxVersion = "V/"

// versionPrefix is the first key of bucket/key's noncurrent records.
func versionPrefix(bucket, key string) []byte {
	b := make([]byte, 0, len(pfxVersion)+len(bucket)+len(key)+10)
	b = append(b, pfxVersion...)
	b = append(b, bucket...)
	b = append(b, 0)
	b = append(b, key...)
	return append(b, 0)
}

// versionKey names the noncurrent record of bucket/key at version hlc; the inverted HLC
// sorts a key's records newest first.
func versionKey(bucket, key string, hlc uint64) []byte {
	return binary.BigEndian.AppendUint64(versionPrefix(bucket, key), ^hlc)
}

// versionBound bounds the versions (HLCs) of the V/ records in the index, so that a write
// of a new version need not look for a record at its own version: none can be there if
// the version is above the bound. The bound is known once the count of the index at open
// (countUsage) has read every V/ key; every commit that sets a V/ key raises it first, so
// at any time it is at least the version of every V/ record written (deletions leave it
// where it is). Until it is known, and if that count met damage, every write looks.
type versionBound struct {
	max   atomic.Uint64
	known atomic.Bool
}

// raise makes the bound at least h.
func (v *versionBound) raise(h uint64) {
	for {
		m := v.max.Load()
		if h <= m || v.max.CompareAndSwap(m, h) {
			return
		}
	}
}

// above reports whether no V/ record can have version h or newer.
func (v *versionBound) above(h uint64) bool { return v.known.Load() && h > v.max.Load() }

// keyVersion returns the version a V/ key names (its last 8 bytes, inverted).
func keyVersion(k []byte) (uint64, bool) {
	if len(k) < 8 {
		return 0, false
	}
	return ^binary.BigEndian.Uint64(k[len(k)-8:]), true
}

// markVersioned notes that bucket has V/ records. The set only grows while the bucket
// exists: a bucket in it costs its null writes one seek.
func (s *Store) markVersioned(bucket string) {
	s.vmu.Lock()
	s.vbuckets[bucket] = true
	s.vmu.Unlock()
}

func (s *Store) hasVersionedBucket(bucket string) bool {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	return s.vbuckets[bucket]
}

// loadVersioned fills the set of buckets with V/ records: one seek per bucket.
func (s *Store) loadVersioned() error {
	p := []byte(pfxVersion)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return errors.E(errors.IO, err)
	}
	defer it.Close()
	for ok := it.First(); ok; {
		k := it.Key()[len(p):]
		i := bytes.IndexByte(k, 0)
		if i < 0 {
			ok = it.Next()
			continue
		}
		s.vbuckets[string(k[:i])] = true
		end := prefixEnd(append(append([]byte(pfxVersion), k[:i]...), 0))
		if end == nil {
			break
		}
		ok = it.SeekGE(end)
	}
	return it.Error()
}

// keyVersions calls fn with bucket/key's noncurrent records, newest first, until fn
// returns false.
func (s *Store) keyVersions(g interface {
	NewIter(*pebble.IterOptions) (*pebble.Iterator, error)
}, bucket, key string, fn func(o *object.Object) bool) error {
	return s.versionsFrom(g, bucket, key, 0, true, fn)
}

// versionsFrom is keyVersions starting after version after (0: from the newest); body,
// whether fn gets the records' embedded bodies (a listing does not: they are not copied).
func (s *Store) versionsFrom(g interface {
	NewIter(*pebble.IterOptions) (*pebble.Iterator, error)
}, bucket, key string, after uint64, body bool, fn func(o *object.Object) bool) error {
	p := versionPrefix(bucket, key)
	it, err := g.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return errors.E(errors.IO, err)
	}
	defer it.Close()
	ok := it.First()
	if after != 0 {
		ok = it.SeekGE(append(versionKey(bucket, key, after), 0))
	}
	for ; ok; ok = it.Next() {
		if len(it.Key()) != len(p)+8 {
			continue // a record of a longer key that starts with key and NUL
		}
		v, err := s.iterValue(it)
		if err != nil {
			return err
		}
		o := new(object.Object)
		if err := unmarshalRecord(o, v); err != nil {
			return err
		}
		switch {
		case !body:
			o.Body = nil // a sub-slice of the iterator's value
		case o.Body != nil:
			o.Body = append([]byte{}, o.Body...)
		}
		if !fn(o) {
			break
		}
	}
	if err := it.Error(); err != nil {
		return indexErr(err)
	}
	return nil
}

// nullAt is nullVersion reading g (a snapshot).
func (s *Store) nullAt(g interface {
	NewIter(*pebble.IterOptions) (*pebble.Iterator, error)
}, bucket, key string) (*object.Object, error) {
	var n *object.Object
	err := s.keyVersions(g, bucket, key, func(o *object.Object) bool {
		if !o.Versioned && !o.Purged {
			n = o
			return false
		}
		return true
	})
	return n, err
}

// now is the wall time, Unix nanoseconds, Object Lock retentions are compared with.
func (s *Store) now() int64 {
	if s.cfg.Now != nil {
		return s.cfg.Now().UnixNano()
	}
	return time.Now().UnixNano()
}

// locked refuses the removal of record o if Object Lock forbids it in a way no request
// can override: a legal hold or a COMPLIANCE retention in force. (GOVERNANCE retentions
// are checked by the S3 layer, which knows who asks; docs/design/object-lock.md.)
func (s *Store) locked(op errors.Op, o *object.Object) error {
	if o != nil && o.Locked(s.now(), true) {
		return errors.E(op, errors.Precondition, object.ErrLocked)
	}
	return nil
}

// noncurrent is the change of a bucket's noncurrent usage a commit makes.
type noncurrent struct{ objects, bytes int64 }

func (n *noncurrent) add(o *object.Object, sign int64) {
	if o != nil && !o.Deleted {
		n.objects += sign
		n.bytes += sign * o.Size
	}
}

// commitVersionIn is commitObject for a key with versions, or a write of a version that
// is kept beside the others (o.Versioned) or removes one (o.Purged), adding to batch b,
// which may hold the caller's own changes (a completion's upload and parts): b is
// committed whatever happens to o, or closed on an error. A nil bd means o's body is in
// the index already (a completed upload's chunks). The caller holds the key's lock,
// bucketMu.RLock and relocMu.RLock; old is the current record (nil: none) and oldRec its
// encoding as stored (nil: not at hand), which becomes old's V/ record as it is when o
// supersedes it.
func (s *Store) commitVersionIn(op errors.Op, b *pebble.Batch, bucket, key string, o *object.Object, bd *body, old *object.Object, oldRec []byte, opts object.PutOptions) (*object.Object, error) {
	okey := objectKey(bucket, key)
	vkey := func(h uint64) []byte { return versionKey(bucket, key, h) }
	// setV adds the V/ record of version h to b, raising the bound of V/ versions first.
	setV := func(h uint64, rec []byte) {
		s.vbound.raise(h)
		b.Set(vkey(h), rec, nil)
	}
	// record is the encoding of r: the stored one for old, unchanged until o supersedes it.
	record := func(r *object.Object) []byte {
		if r == old && oldRec != nil {
			return oldRec
		}
		return marshalRecord(r)
	}
	// The record held for this very version, current or not: none under V/ if o's
	// version is above every V/ record's (a new version, the usual write).
	same, sameCurrent := old, old != nil && old.HLC == o.HLC
	if !sameCurrent {
		same = nil
		if !s.vbound.above(o.HLC) {
			r, err := getObject(s.db, vkey(o.HLC))
			if err != nil && !errors.Is(errors.NotExist, err) {
				b.Close()
				return nil, errors.E(op, err)
			}
			same = r
		}
	}
	var freed []segment.Loc
	var nc noncurrent
	drop := func(r *object.Object) error {
		l, err := s.dropBody(b, r)
		freed = append(freed, l...)
		return err
	}
	fail := func(err error) (*object.Object, error) {
		b.Close()
		return nil, errors.E(op, err)
	}
	// dropped is the answer when o is not stored (r is what the key holds instead): the
	// caller's own changes in b are committed all the same.
	dropped := func(r *object.Object) (*object.Object, error) {
		if bd != nil {
			b.Close()
			return r, nil
		}
		if err := s.commit(b); err != nil {
			return nil, errors.E(op, err)
		}
		return r, nil
	}
	place := func() {
		if bd != nil {
			addBody(b, o, bd)
		}
	}
	cur := old // the current record once this commit is done
	stored := o
	switch {
	case same != nil && same.Purged:
		return dropped(same) // the version was removed for good: a late copy stays out
	case same != nil && o.Purged:
		if err := s.locked(op, same); err != nil {
			b.Close()
			return nil, err
		}
		if err := drop(same); err != nil {
			return fail(err)
		}
		tierGarbage(b, same)
		if sameCurrent {
			b.Delete(okey, nil)
			p, err := s.promote(b, bucket, key, 0)
			if err != nil {
				return fail(err)
			}
			nc.add(p, -1)
			cur = p
		} else {
			nc.add(same, -1)
		}
		place()
		setV(o.HLC, marshalRecord(o))
	case same != nil:
		loc := okey
		if !sameCurrent {
			loc = vkey(o.HLC)
		}
		if !opts.Repair {
			if bd == nil {
				if _, err := dropped(same); err != nil {
					return nil, err
				}
			} else {
				b.Close()
			}
			if !same.Deleted && !o.Deleted {
				return s.mergeMeta(op, bucket, key, loc, same, o)
			}
			return same, nil
		}
		if !same.Deleted && !o.Deleted {
			o.MergeMeta(same)
		}
		if err := drop(same); err != nil {
			return fail(err)
		}
		place()
		b.Set(loc, marshalRecord(o), nil)
		if sameCurrent {
			cur = o
		} else {
			nc.add(same, -1)
			nc.add(o, 1)
		}
	case o.Purged:
		// A version never held here: the purge record keeps a late copy out.
		place()
		setV(o.HLC, marshalRecord(o))
	default:
		nullHLC := uint64(0) // a null record removed from V/ (promote skips it)
		if !o.Versioned {
			// A null version replaces the key's null version, if that is older.
			n, nCurrent := old, true
			if old == nil || old.Versioned {
				nCurrent = false
				var err error
				if n, err = s.nullVersion(bucket, key); err != nil {
					return fail(err)
				}
			}
			if n != nil && n.HLC >= o.HLC {
				return dropped(n)
			}
			if err := s.locked(op, n); err != nil {
				return fail(err)
			}
			if n != nil {
				if err := drop(n); err != nil {
					return fail(err)
				}
				tierGarbage(b, n)
				if nCurrent {
					b.Delete(okey, nil)
					cur = nil
				} else {
					b.Delete(vkey(n.HLC), nil)
					nc.add(n, -1)
					nullHLC = n.HLC
				}
			}
		}
		place()
		rec := marshalRecord(o)
		switch {
		case o.Visible() && (cur == nil || !cur.Visible() || o.HLC > cur.HLC):
			if cur != nil {
				setV(cur.HLC, record(cur))
				nc.add(cur, 1)
			}
			b.Set(okey, rec, nil)
			cur = o
		case o.Visible() || (cur != nil && cur.Visible()):
			setV(o.HLC, rec)
			nc.add(o, 1)
		default:
			// A tombstone, and no visible current record: the newest visible version
			// left, if any, becomes current; else the newer of the tombstones.
			p, err := s.promote(b, bucket, key, nullHLC)
			if err != nil {
				return fail(err)
			}
			switch {
			case p != nil:
				nc.add(p, -1)
				if cur != nil {
					setV(cur.HLC, record(cur))
				}
				b.Set(okey, marshalRecord(p), nil)
				setV(o.HLC, rec)
				cur = p
			case cur != nil && cur.HLC > o.HLC:
				setV(o.HLC, rec)
			default:
				if cur != nil {
					setV(cur.HLC, record(cur))
				}
				b.Set(okey, rec, nil)
				cur = o
			}
		}
	}
	events := s.stack(b, bucket, key, o)
	err := s.commit(b)
	s.stacked(events, err == nil)
	if err != nil {
		return nil, errors.E(op, err)
	}
	s.markVersioned(bucket)
	s.count(bucket, old, cur)
	s.countNoncurrent(bucket, nc)
	if bd != nil {
		for _, l := range bd.locs {
			s.addLive(l, 1)
		}
	}
	for _, l := range freed {
		s.addLive(l, -1)
	}
	return stored, nil
}

// promote adds to b the move of bucket/key's newest visible noncurrent version (not
// version skip) to the current record, and returns it (nil: none).
func (s *Store) promote(b *pebble.Batch, bucket, key string, skip uint64) (*object.Object, error) {
	var p *object.Object
	err := s.keyVersions(s.db, bucket, key, func(o *object.Object) bool {
		if o.HLC != skip && o.Visible() {
			p = o
			return false
		}
		return true
	})
	if err != nil || p == nil {
		return nil, err
	}
	b.Delete(versionKey(bucket, key, p.HLC), nil)
	b.Set(objectKey(bucket, key), marshalRecord(p), nil)
	return p, nil
}

// nullVersion returns bucket/key's noncurrent null record (object, null delete marker or
// tombstone), nil if it has none.
func (s *Store) nullVersion(bucket, key string) (*object.Object, error) {
	if !s.hasVersionedBucket(bucket) {
		return nil, nil
	}
	return s.nullAt(s.db, bucket, key)
}

// countNoncurrent adds a commit's change of noncurrent versions to bucket's usage.
func (s *Store) countNoncurrent(bucket string, d noncurrent) {
	if Internal(bucket) || d == (noncurrent{}) {
		return
	}
	s.usageMu.Lock()
	u := s.usage[bucket]
	u.Noncurrent += d.objects
	u.NoncurrentBytes += d.bytes
	s.usage[bucket] = u
	s.usageMu.Unlock()
}

// StatAt returns bucket/key's record of version hlc, current or not, whatever it is (a
// delete marker, a tombstone or a purge record included).
func (s *Store) StatAt(bucket, key string, hlc uint64) (*object.Object, error) {
	const op errors.Op = "store.StatAt"
	if err := s.drain(bucket, key); err != nil {
		return nil, errors.E(op, err)
	}
	o, err := s.recordAt(s.db, bucket, key, hlc)
	if errors.Is(errors.NotExist, err) {
		if _, berr := s.bucket(bucket); berr != nil {
			return nil, errors.E(op, berr)
		}
	}
	if err != nil {
		return nil, errors.E(op, err)
	}
	return o, nil
}

func (s *Store) recordAt(g getter, bucket, key string, hlc uint64) (*object.Object, error) {
	o, err := getObject(g, objectKey(bucket, key))
	if err == nil && o.HLC == hlc {
		return o, nil
	}
	if err != nil && !errors.Is(errors.NotExist, err) {
		return nil, err
	}
	o, err = getObject(g, versionKey(bucket, key, hlc))
	if errors.Is(errors.Corrupt, err) {
		s.noteBlobDamage(err.Error())
	}
	return o, err
}

// OpenVersion returns a Reader of bucket/key's version hlc, current or not. A delete
// marker opens as its record (Deleted and DeleteMarker set, no body); a version this store
// does not hold, a tombstone or a purge record is NotExist.
func (s *Store) OpenVersion(bucket, key string, hlc uint64) (*Reader, error) {
	if err := s.drain(bucket, key); err != nil {
		return nil, err
	}
	return s.open("store.OpenVersion", bucket, func(g getter) (*object.Object, error) {
		o, err := s.recordAt(g, bucket, key, hlc)
		if err == nil && !o.Visible() {
			err = errors.E(errors.NotExist, object.ErrNoSuchVersion)
		}
		return o, err
	})
}

// ListVersions returns a page of bucket's versions: keys in order, each key's versions
// newest first (opts.Hidden adds tombstones and purge records, for a gateway merging
// replicas). With a delimiter, keys that contain it after the prefix are rolled up into
// common prefixes, as List does.
func (s *Store) ListVersions(bucket string, opts object.VersionListOptions) (*object.VersionList, error) {
	const op errors.Op = "store.ListVersions"
	if err := s.drainAll(); err != nil {
		return nil, errors.E(op, err)
	}
	if _, err := s.bucket(bucket); err != nil {
		return nil, errors.E(op, err)
	}
	res := &object.VersionList{}
	if opts.Max <= 0 {
		return res, nil
	}
	snap := s.snapshot()
	defer snap.Close()
	base := objectPrefix(bucket, "")
	lower := objectPrefix(bucket, opts.Prefix)
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
	if err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	defer it.Close()
	var ok bool
	resume := opts.KeyMarker != "" && (opts.VersionMarker != 0 || opts.AfterNull)
	switch {
	case opts.KeyMarker != "" && opts.KeyMarker >= opts.Prefix && resume:
		ok = it.SeekGE(objectPrefix(bucket, opts.KeyMarker))
	case opts.KeyMarker != "" && opts.KeyMarker >= opts.Prefix:
		ok = it.SeekGE(append(objectPrefix(bucket, opts.KeyMarker), 0))
	default:
		ok = it.First()
	}
	count := 0
	for ok {
		key := string(it.Key()[len(base):])
		if opts.Delimiter != "" {
			if i := strings.Index(key[len(opts.Prefix):], opts.Delimiter); i >= 0 {
				cp := key[:len(opts.Prefix)+i+len(opts.Delimiter)]
				// A key with only hidden records makes no common prefix.
				if (cp > opts.KeyMarker || opts.KeyMarker == "") && !isHidden(it.Value()) {
					if count == opts.Max {
						res.Truncated = true
						break
					}
					res.CommonPrefixes = append(res.CommonPrefixes, cp)
					res.NextKey, res.NextVersion = cp, 0
					count++
				}
				if isHidden(it.Value()) {
					ok = it.Next()
					continue
				}
				end := prefixEnd(objectPrefix(bucket, cp))
				if end == nil {
					break
				}
				ok = it.SeekGE(end)
				continue
			}
		}
		cur := new(object.Object)
		if err := unmarshalRecord(cur, it.Value()); err != nil {
			return nil, errors.E(op, err)
		}
		cur.Body = nil
		// The key's records newest first: its noncurrent records streamed in order, the
		// current one slotted in among them, resuming after the marker's version; the
		// page stops reading as soon as it is full.
		after := uint64(0) // resume after this version (0: from the newest)
		if resume && key == opts.KeyMarker {
			after = opts.VersionMarker
			if opts.AfterNull {
				n := cur
				if cur.Versioned || cur.Purged {
					var err error
					if n, err = s.nullAt(snap, bucket, key); err != nil {
						return nil, errors.E(op, err)
					}
				}
				if n == nil {
					after = 0 // no null version any more: the whole key, as S3 does after a gone marker
				} else {
					after = n.HLC
				}
			}
		}
		emit := func(o *object.Object) bool {
			if !o.Visible() && !opts.Hidden {
				return true
			}
			if count == opts.Max {
				res.Truncated = true
				return false
			}
			res.Versions = append(res.Versions, object.VersionListEntry{Key: key, Object: o, Current: o == cur})
			res.NextKey, res.NextVersion, res.NextNull = key, o.HLC, !o.Versioned
			count++
			return true
		}
		curDone := after != 0 && cur.HLC >= after
		full := false
		if err := s.versionsFrom(snap, bucket, key, after, false, func(o *object.Object) bool {
			if !curDone && cur.HLC > o.HLC {
				curDone = true
				if !emit(cur) {
					full = true
					return false
				}
			}
			if !emit(o) {
				full = true
				return false
			}
			return true
		}); err != nil {
			return nil, errors.E(op, err)
		}
		if !full && !curDone {
			emit(cur)
		}
		if res.Truncated {
			break
		}
		ok = it.Next()
	}
	if err := it.Error(); err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	return res, nil
}

// isHidden reports whether an encoded record is a tombstone or purge record (not a
// delete marker), without decoding it.
func isHidden(v []byte) bool { return isTombstone(v) && v[1]&flagMarker == 0 }

// ScanVersions calls fn for every noncurrent record (Noncurrent set) of every bucket
// whose bucket and key keep returns true, in key order, reading a consistent snapshot.
func (s *Store) ScanVersions(keep func(bucket, key string) bool, fn func(object.VersionEntry) error) error {
	if err := s.drainAll(); err != nil {
		return err
	}
	return s.scan("store.ScanVersions", pfxVersion, true, keep, fn)
}

func versionEntry(bucket, key string, o *object.Object, noncurrent bool) object.VersionEntry {
	return object.VersionEntry{Bucket: bucket, Key: key, HLC: o.HLC, MetaHLC: o.MetaHLC, Deleted: o.Deleted, Size: o.Size,
		Striped: o.Striped, Noncurrent: noncurrent, Versioned: o.Versioned, DeleteMarker: o.DeleteMarker, Purged: o.Purged}
}

// ForgetVersion removes bucket/key's noncurrent record of version hlc (metadata change
// metaHLC or older) and its body, leaving nothing behind: the hand-off of a drained or
// moved partition. It reports whether it removed anything.
func (s *Store) ForgetVersion(bucket, key string, hlc, metaHLC uint64) (bool, error) {
	defer s.changing(bucket, key)()
	if err := s.drain(bucket, key); err != nil {
		return false, err
	}
	return s.dropAt(errors.Op("store.ForgetVersion"), bucket, key, versionKey(bucket, key, hlc), func(o *object.Object) bool { return o.MetaHLC <= metaHLC })
}

// The index keeps noncurrent records' values in blob files (pebble's value separation):
// a V/ record of at least versionValues.MinimumSize bytes (one with an embedded body,
// mostly) is written to a blob file when its memtable is flushed, and compactions then
// move only its key and a reference, instead of rewriting every kept version each time
// its level is compacted (docs/benchmarks.md, Versioned buckets vs unversioned). Every
// other range keeps its values in its tables (indexSpanPolicy): a GET of a current
// version stays one lookup in one table. Reads of a noncurrent version, a listing of
// versions and the count at open read the blob file too.
//
// indexFormat is the index's format major version: blob files need it (and it writes
// tables in pebble's columnar format). An index written by an older build (pebble's
// oldest format, which builds before this one left it at) is ratcheted at open; its
// tables are read as they are and rewritten by compactions in their own time. The
// ratchet is one way for pebble builds older than the one in go.mod, not for cairn
// builds: they use this pebble and open the index at the format it has
// (TestIndexFormatUpgrade).
const indexFormat = pebble.FormatValueSeparation

var versionValues = pebble.ValueSeparationPolicy{
	Enabled: true,
	// Smaller records (no body, or a small one) are cheap to rewrite and stay in place.
	MinimumSize: 1024,
	// pebble's recommended values (those CockroachDB runs with): a table references at
	// most 10 overlapping blob files before a compaction rewrites its values, and a blob
	// file more than 5 minutes old with over 20 % of unreferenced values (versions
	// removed for good) is rewritten to reclaim the space.
	MaxBlobReferenceDepth: 10,
	RewriteMinimumAge:     5 * time.Minute,
	TargetGarbageRatio:    0.2,
}

var (
	versionSpanStart = []byte(pfxVersion)
	versionSpanEnd   = prefixEnd([]byte(pfxVersion))
)

var (
	extentSpanStart = []byte(pfxExtent)
	extentSpanEnd   = prefixEnd([]byte(pfxExtent))
)

// indexSpanPolicy is the index's pebble.SpanPolicyFunc: values under V/ and X/ may be
// separated (versionValues: noncurrent versions, and the inline bytes of mutable objects'
// small writes, which compactions then carry by reference instead of rewriting them and
// which a write covering them deletes unread, cutExtents), every other range keeps its
// values in place.
func indexSpanPolicy(start []byte) (pebble.SpanPolicy, []byte, error) {
	inPlace := pebble.SpanPolicy{ValueStoragePolicy: pebble.ValueStorageLowReadLatency}
	switch {
	case bytes.Compare(start, versionSpanStart) < 0:
		return inPlace, versionSpanStart, nil
	case bytes.Compare(start, versionSpanEnd) < 0:
		return pebble.SpanPolicy{}, versionSpanEnd, nil
	case bytes.Compare(start, extentSpanStart) < 0:
		return inPlace, extentSpanStart, nil
	case bytes.Compare(start, extentSpanEnd) < 0:
		return pebble.SpanPolicy{}, extentSpanEnd, nil
	default:
		return inPlace, nil, nil
	}
}

// iterValue is it.Value for a range whose values may be in blob files (V/): a value that
// cannot be read is an error (Corrupt for a damaged block, else IO), not a nil value.
func (s *Store) iterValue(it *pebble.Iterator) ([]byte, error) {
	v, err := it.ValueAndErr()
	if err != nil {
		return nil, s.valueErr(err)
	}
	return v, nil
}

// valueErr is indexErr for reads of values that may be in blob files. pebble reports a
// damaged table to the store's event listener, not a damaged blob file: valueErr adds a
// blob file a corruption error names to the store's damage (Damaged).
func (s *Store) valueErr(err error) error {
	if pebble.IsCorruptionError(err) {
		s.noteBlobDamage(err.Error())
	}
	return indexErr(err)
}

// noteBlobDamage notes the blob file msg (pebble's "file 000123: ..." message) names.
func (s *Store) noteBlobDamage(msg string) {
	i := strings.Index(msg, "file ")
	if i < 0 {
		return
	}
	j := i + len("file ")
	for j < len(msg) && msg[j] >= '0' && msg[j] <= '9' {
		j++
	}
	p := filepath.Join(s.cfg.Dir, "index", msg[i+len("file "):j]+".blob")
	if j == i+len("file ") {
		return
	}
	if _, err := s.fs.Stat(p); err != nil {
		return // not a blob file: a table, which pebble reported itself
	}
	if s.damage.note(p) {
		s.log.Error("the index is damaged: reads that need this file fail over to other replicas; "+
			"drain the node and replace its data directory (docs/operations.md, Damaged disk or index)",
			"file", p, "err", firstLine(msg))
	}
}
