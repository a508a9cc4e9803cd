package store

import (
	"bytes"
	"context"
	"io"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store/segment"
)

// body is what writeBody stored: either inline bytes or chunks.
type body struct {
	size   int64
	inline []byte
	chunks []object.Chunk
	locs   []segment.Loc
	// sums holds, for each chunk, its block checksums (blockSums), or is nil: the chunks
	// then get format-1 locations (only mutable objects' writes compute them).
	sums [][]byte
}

// chunkSums returns the block checksums of bd's chunk i, nil if none were computed.
func (bd *body) chunkSums(i int) []byte {
	if i < len(bd.sums) {
		return bd.sums[i]
	}
	return nil
}

// release tells the segment set that the body's records are committed or abandoned, so
// their segments may be compacted again. Call it once, after the commit or the failure.
func (s *Store) release(locs []segment.Loc) {
	for _, l := range locs {
		s.segs.Done(l.Seg)
	}
}

// writeBody reads src to EOF (exactly size bytes if size >= 0) and stores it: inline if it
// fits in InlineMax (and inlineOK), else as durable chunks. Memory used is at most two chunk
// buffers whatever the size.
func (s *Store) writeBody(ctx context.Context, src io.Reader, size int64, inlineOK bool) (*body, error) {
	const op errors.Op = "store.writeBody"
	if err := s.checkSpace(max(size, 0)); err != nil {
		return nil, err
	}
	bp := s.bufPool.Get().(*[]byte)
	buf := s.payloadBuf(bp)
	n, err := readFull(src, buf)
	if err != nil && err != io.EOF {
		s.bufPool.Put(bp)
		return nil, errors.E(op, bodyErrKind(err), err)
	}
	if inlineOK && err == io.EOF && n <= s.cfg.InlineMax {
		b := &body{size: int64(n), inline: append([]byte(nil), buf[:n]...)}
		s.bufPool.Put(bp)
		if size >= 0 && b.size != size {
			return nil, errors.Errorf(op, errors.Invalid, "body has %d bytes, want %d", b.size, size)
		}
		return b, nil
	}
	if size < 0 && err != io.EOF {
		// Unknown size: check space chunk by chunk.
		if err := s.checkSpace(int64(n)); err != nil {
			s.bufPool.Put(bp)
			return nil, err
		}
	}

	// Pipeline: this goroutine reads (and, through src, hashes) chunk i+1 while the writer
	// appends chunk i to the segment.
	type job struct {
		bp *[]byte
		n  int
	}
	jobs := make(chan job, 1)
	b := &body{}
	var werr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for j := range jobs {
			if werr == nil {
				id := segment.ID(newID())
				loc, err := s.appendChunk(id, *j.bp, j.n)
				if err != nil {
					werr = err
				} else {
					b.chunks = append(b.chunks, object.Chunk{ID: object.ChunkID(id), Size: uint32(j.n)})
					b.locs = append(b.locs, loc)
				}
			}
			s.bufPool.Put(j.bp)
		}
	}()
	var rerr error
	for {
		b.size += int64(n)
		if n > 0 {
			jobs <- job{bp, n}
		} else {
			s.bufPool.Put(bp)
		}
		if err == io.EOF || n < len(buf) {
			break
		}
		if ctx.Err() != nil {
			rerr = ctx.Err()
			break
		}
		bp = s.bufPool.Get().(*[]byte)
		buf = s.payloadBuf(bp)
		n, err = readFull(src, buf)
		if err != nil && err != io.EOF {
			s.bufPool.Put(bp)
			rerr = errors.E(op, bodyErrKind(err), err)
			break
		}
		if size < 0 && n > 0 {
			if e := s.checkSpace(int64(n)); e != nil {
				s.bufPool.Put(bp)
				rerr = e
				break
			}
		}
		if size >= 0 && b.size+int64(n) > size {
			s.bufPool.Put(bp)
			rerr = errors.Errorf(op, errors.Invalid, "body longer than %d bytes", size)
			break
		}
	}
	close(jobs)
	wg.Wait()
	if rerr == nil && werr != nil {
		rerr = errors.E(op, werr)
	}
	if rerr == nil && size >= 0 && b.size != size {
		rerr = errors.Errorf(op, errors.Invalid, "body has %d bytes, want %d", b.size, size)
	}
	if rerr == nil {
		if err := s.syncLocs(b.locs); err != nil {
			rerr = errors.E(op, err)
		}
	}
	if rerr != nil {
		s.release(b.locs)
		return nil, rerr
	}
	return b, nil
}

// payloadBuf returns the part of a pooled buffer that a chunk's payload is read into: after
// room for the record header, so the record can be written from the buffer as it is.
func (s *Store) payloadBuf(bp *[]byte) []byte {
	return (*bp)[segment.HeaderSize : segment.HeaderSize+s.cfg.ChunkSize]
}

// directMin is the payload size from which chunk records are written aligned, with direct
// I/O; smaller ones go through the page cache (padding them would waste space).
const directMin = 64 << 10

// appendChunk appends a record whose payload is buf[HeaderSize:HeaderSize+n].
func (s *Store) appendChunk(id segment.ID, buf []byte, n int) (segment.Loc, error) {
	if n >= directMin && len(buf) >= segment.AlignedSize(n) {
		return s.segs.AppendAligned(segment.KindChunk, id, buf, n)
	}
	return s.segs.Append(segment.KindChunk, id, buf[segment.HeaderSize:segment.HeaderSize+n])
}

// readFull is io.ReadFull that reports a short final read as io.EOF with n > 0.
func readFull(r io.Reader, buf []byte) (int, error) {
	n, err := io.ReadFull(r, buf)
	if err == io.ErrUnexpectedEOF {
		return n, io.EOF
	}
	return n, err
}

func bodyErrKind(err error) errors.Kind {
	if k := errors.KindOf(err); k != errors.Other {
		return k
	}
	return errors.Invalid
}

func (s *Store) syncLocs(locs []segment.Loc) error {
	seen := map[uint32]bool{}
	for _, l := range locs {
		if seen[l.Seg] {
			continue
		}
		seen[l.Seg] = true
		if err := s.segs.Sync(l.Seg); err != nil {
			return err
		}
	}
	if s.cfg.OnSegmentSync != nil && len(locs) > 0 {
		s.cfg.OnSegmentSync(1)
	}
	return nil
}

// embedMax is the largest body embedded in its object record: a GET of such an object is
// one index lookup. Larger inline bodies have their own key, so that listings do not read
// them.
const embedMax = 8 << 10

// addBody adds the index entries of a stored body to batch b.
func addBody(b *pebble.Batch, o *object.Object, bd *body) {
	if o.Mutable {
		addMutableBody(b, o, bd)
		return
	}
	o.Embedded, o.Body = false, nil // set below if the body is embedded, whatever o held
	if bd.inline != nil || len(bd.chunks) == 0 {
		o.Inline = true
		o.Chunks = nil
		if len(bd.inline) <= embedMax {
			o.Embedded, o.Body = true, bd.inline
			if o.Body == nil {
				o.Body = []byte{}
			}
			return
		}
		b.Set(inlineKey(o.VersionID), bd.inline, nil)
		return
	}
	o.Inline = false
	o.Chunks = bd.chunks
	for i, c := range bd.chunks {
		b.Set(chunkKey(segment.ID(c.ID)), encodeLoc(bd.locs[i]), nil)
		b.Set(segKey(bd.locs[i]), segValue(segment.ID(c.ID), c.Size), nil)
	}
}

// dropBody adds to b the deletion of o's body and returns the chunk locations freed (for the
// live-bytes accounting after commit). The caller holds relocMu.RLock until it commits b.
func (s *Store) dropBody(b *pebble.Batch, o *object.Object) ([]segment.Loc, error) {
	if o.Mutable {
		return s.dropMutableBody(b, o)
	}
	if o.Embedded {
		return nil, nil
	}
	if o.Inline {
		b.Delete(inlineKey(o.VersionID), nil)
		return nil, nil
	}
	var freed []segment.Loc
	for _, c := range o.Chunks {
		loc, err := s.chunkLoc(s.db, segment.ID(c.ID))
		if errors.Is(errors.NotExist, err) {
			continue // shared with another record already dropped in this batch
		}
		if err != nil {
			return nil, err
		}
		b.Delete(chunkKey(segment.ID(c.ID)), nil)
		b.Delete(segKey(loc), nil)
		freed = append(freed, loc)
	}
	return freed, nil
}

type getter interface {
	Get(key []byte) ([]byte, io.Closer, error)
}

func (s *Store) chunkLoc(g getter, id segment.ID) (segment.Loc, error) {
	l, _, err := s.chunkAt(g, id, nil)
	return l, err
}

// chunkAt returns a chunk's location and its block checksums appended to dst (nil if its
// location has none: format 1).
func (s *Store) chunkAt(g getter, id segment.ID, dst []byte) (segment.Loc, []byte, error) {
	v, c, err := g.Get(chunkKey(id))
	if err == pebble.ErrNotFound {
		return segment.Loc{}, nil, errors.Errorf("", errors.NotExist, "chunk %s not in index", id)
	}
	if err != nil {
		return segment.Loc{}, nil, errors.E(errors.IO, err)
	}
	defer c.Close()
	l, sums, err := decodeChunkAt(v)
	if err != nil || sums == nil {
		return l, nil, err
	}
	return l, append(dst, sums...), nil
}

// getLive is getObject for callers that must not see tombstones.
func getLive(g getter, key []byte) (*object.Object, error) {
	o, err := getObject(g, key)
	if err == nil && o.Deleted {
		return nil, errors.E(errors.NotExist, object.ErrNoSuchKey)
	}
	return o, err
}

// getObject returns the record under key, a tombstone included.
func getObject(g getter, key []byte) (*object.Object, error) { return readRecord(g, key, true) }

// getStored is getObject returning also the record's encoding as stored, which holds the
// object's embedded body (o.Body is a sub-slice of it): a versioned write moves the
// current record to V/ as it is, without encoding it again.
func getStored(g getter, key []byte) (*object.Object, []byte, error) {
	v, c, err := getValue(g, key)
	if err != nil {
		return nil, nil, err
	}
	rec := append([]byte(nil), v...)
	c.Close()
	o := new(object.Object)
	if err := unmarshalRecord(o, rec); err != nil {
		return nil, nil, err
	}
	return o, rec, nil
}

// getValue reads the value under key (valid until the closer is closed): NotExist when
// there is none, the index error (indexErr) when the read fails.
func getValue(g getter, key []byte) ([]byte, io.Closer, error) {
	v, c, err := g.Get(key)
	if err == pebble.ErrNotFound {
		return nil, nil, errors.E(errors.NotExist, object.ErrNoSuchKey)
	}
	if err != nil {
		return nil, nil, indexErr(err)
	}
	return v, c, nil
}

// readRecord reads the record under key, with a copy of its embedded body or without it.
func readRecord(g getter, key []byte, body bool) (*object.Object, error) {
	v, c, err := getValue(g, key)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	o := new(object.Object)
	if err := unmarshalRecord(o, v); err != nil {
		return nil, err
	}
	switch {
	case !body:
		o.Body = nil // a sub-slice of v, valid only until c.Close
	case o.Body != nil:
		o.Body = append([]byte{}, o.Body...)
	}
	return o, nil
}

// indexErr is the error of a failed index read: Corrupt for a damaged block (the caller
// reads another replica), else IO.
func indexErr(err error) error {
	if pebble.IsCorruptionError(err) {
		return errors.E(errors.Corrupt, err)
	}
	return errors.E(errors.IO, err)
}

// PutObject stores src (size bytes, or until EOF if size < 0) as bucket/key with the
// metadata in meta, replacing any previous version. It returns the stored record.
func (s *Store) PutObject(ctx context.Context, bucket, key string, meta *object.Object, src io.Reader, size int64, opts object.PutOptions) (*object.Object, error) {
	defer s.changing(bucket, key)()
	const op errors.Op = "store.PutObject"
	if err := s.drain(bucket, key); err != nil {
		return nil, errors.E(op, err)
	}
	if _, err := s.bucket(bucket); err != nil {
		return nil, errors.E(op, err)
	}
	if opts.IfNoneMatch {
		if _, err := getLive(s.db, objectKey(bucket, key)); err == nil {
			return nil, errors.E(op, errors.Precondition, "object exists")
		}
	}
	bd, err := s.writeBody(ctx, src, size, true)
	if err != nil {
		return nil, errors.E(op, err)
	}
	defer s.release(bd.locs)
	o := *meta
	o.Deleted = false
	if o.Striped {
		// The record of an object whose bytes are stripes elsewhere: no body here.
		if bd.size != 0 || o.Stripe.K < 1 || (o.Stripe.M < 1 && o.Stripe.K != 1) || o.Stripe.Size < 1 || o.Size < 0 {
			return nil, errors.E(op, errors.Invalid, "a striped object's record has no body and a valid layout")
		}
	} else {
		o.Size = bd.size
	}
	return s.commitObject(op, bucket, key, &o, bd, opts)
}

// commitObject runs opts.Finish and commits o (an object, or a tombstone if o.Deleted)
// with its body bd as bucket/key, dropping the previous version's body in the same batch,
// unless the stored record is newer.
func (s *Store) commitObject(op errors.Op, bucket, key string, o *object.Object, bd *body, opts object.PutOptions) (*object.Object, error) {
	o.VersionID = newID()
	if o.ModTime == 0 {
		o.ModTime = time.Now().UnixNano()
	}
	o.HLC = s.version(opts.Version)
	if opts.Finish != nil {
		if err := opts.Finish(o); err != nil {
			return nil, errors.E(op, err)
		}
	}
	s.bucketMu.RLock()
	defer s.bucketMu.RUnlock()
	if _, err := s.bucket(bucket); err != nil {
		return nil, errors.E(op, err)
	}
	mu := s.keyLock(bucket, key)
	mu.Lock()
	defer mu.Unlock()
	s.relocMu.RLock()
	defer s.relocMu.RUnlock()
	okey := objectKey(bucket, key)
	// A write that may keep versions keeps the current record's encoding too, to move it
	// to V/ as it is; a plain write copies only what it needs (the versioned path encodes
	// the record again when it has no encoding at hand).
	var old *object.Object
	var oldRec []byte
	var err error
	if o.Versioned || o.Purged || s.hasVersionedBucket(bucket) {
		old, oldRec, err = getStored(s.db, okey)
	} else {
		old, err = getObject(s.db, okey)
	}
	if err != nil && !errors.Is(errors.NotExist, err) {
		return nil, errors.E(op, err)
	}
	if old != nil && opts.IfNoneMatch && !old.Deleted {
		return nil, errors.E(op, errors.Precondition, "object exists")
	}
	if o.Versioned || o.Purged || (old != nil && old.Versioned) || ((old == nil || o.Deleted) && s.hasVersionedBucket(bucket)) {
		return s.commitVersionIn(op, s.db.NewBatch(), bucket, key, o, bd, old, oldRec, opts)
	}
	if old != nil && (old.HLC > o.HLC || (old.HLC == o.HLC && !opts.Repair)) {
		if old.HLC == o.HLC && !old.Deleted && !o.Deleted {
			// A copy of the version held here (hinted retry, sync): take the metadata
			// changes it has that this one lacks, keep the body.
			return s.mergeMeta(op, bucket, key, okey, old, o)
		}
		return old, nil // a newer version (or delete) is already here
	}
	if old != nil && old.HLC == o.HLC && !old.Deleted && !o.Deleted {
		// A repair or a rewrite of this version replaces its body and layout; the
		// metadata changes made here meanwhile stay.
		o.MergeMeta(old)
	}
	if old != nil && old.HLC < o.HLC && !o.Versioned {
		// A null write replaces the null version old: not one Object Lock protects.
		if err := s.locked(op, old); err != nil {
			return nil, err
		}
	}
	b := s.db.NewBatch()
	var freed []segment.Loc
	if old != nil {
		if freed, err = s.dropBody(b, old); err != nil {
			b.Close()
			return nil, errors.E(op, err)
		}
		if old.HLC != o.HLC || o.Deleted {
			tierGarbage(b, old) // a newer version or a delete: the old stub's tier copy goes
		}
	}
	addBody(b, o, bd)
	b.Set(okey, marshalRecord(o), nil)
	events := s.stack(b, bucket, key, o)
	err = s.commit(b)
	s.stacked(events, err == nil)
	if err != nil {
		return nil, errors.E(op, err)
	}
	s.count(bucket, old, o)
	for _, l := range bd.locs {
		s.addLive(l, 1)
	}
	for _, l := range freed {
		s.addLive(l, -1)
	}
	return o, nil
}

// version returns v, or a new timestamp from the store's clock if v is zero.
func (s *Store) version(v uint64) uint64 {
	if v == 0 {
		return s.clock.Next()
	}
	s.clock.Observe(v)
	return v
}

// StatObject returns an object's record without its body.
func (s *Store) StatObject(bucket, key string) (*object.Object, error) {
	if err := s.drain(bucket, key); err != nil {
		return nil, err
	}
	return s.stat(errors.Op("store.StatObject"), getLive, bucket, key)
}

// StatVersion is StatObject that also returns tombstones (records with Deleted set), for
// replicas comparing versions.
func (s *Store) StatVersion(bucket, key string) (*object.Object, error) {
	if err := s.drain(bucket, key); err != nil {
		return nil, err
	}
	return s.stat(errors.Op("store.StatVersion"), getObject, bucket, key)
}

// StatMeta is StatVersion without the embedded body of a small object (Body nil): what a
// replica's Stat answers, locally as over the wire (whose form of a record has no body),
// without copying up to a few KiB out of the index for every check of a version.
func (s *Store) StatMeta(bucket, key string) (*object.Object, error) {
	if err := s.drain(bucket, key); err != nil {
		return nil, err
	}
	return s.stat(errors.Op("store.StatVersion"), getMeta, bucket, key)
}

// getMeta is getObject without the embedded body.
func getMeta(g getter, key []byte) (*object.Object, error) { return readRecord(g, key, false) }

func (s *Store) stat(op errors.Op, get func(getter, []byte) (*object.Object, error), bucket, key string) (*object.Object, error) {
	o, err := get(s.db, objectKey(bucket, key))
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

// DeleteObject deletes bucket/key. Deleting a missing object is not an error (S3 semantics);
// a missing bucket is.
func (s *Store) DeleteObject(bucket, key string) error {
	defer s.changing(bucket, key)()
	const op errors.Op = "store.DeleteObject"
	if err := s.drain(bucket, key); err != nil {
		return errors.E(op, err)
	}
	if _, err := s.bucket(bucket); err != nil {
		return errors.E(op, err)
	}
	_, err := s.drop(op, bucket, key, nil)
	return err
}

// DeleteVersion deletes bucket/key as of version (an HLC timestamp; zero means now): it
// replaces the object with a tombstone unless the stored record is newer. It returns the
// record that is current afterwards (the tombstone, or the newer record).
func (s *Store) DeleteVersion(bucket, key string, version uint64, modTime int64) (*object.Object, error) {
	defer s.changing(bucket, key)()
	const op errors.Op = "store.DeleteVersion"
	if err := s.drain(bucket, key); err != nil {
		return nil, errors.E(op, err)
	}
	if _, err := s.bucket(bucket); err != nil {
		return nil, errors.E(op, err)
	}
	return s.commitObject(op, bucket, key, &object.Object{Deleted: true, ModTime: modTime}, &body{inline: []byte{}}, object.PutOptions{Version: version})
}

// DeleteRecord stores a record without a body at version d.HLC (zero means now): a
// tombstone, a delete marker (d.DeleteMarker; d.Versioned unless it is the null version)
// or the purge of version d.HLC (d.Purged, d.Versioned). It returns the record the key
// holds for that version afterwards: d, or what was there (a newer null version, a purge).
func (s *Store) DeleteRecord(bucket, key string, d object.Object) (*object.Object, error) {
	defer s.changing(bucket, key)()
	const op errors.Op = "store.DeleteRecord"
	if err := s.drain(bucket, key); err != nil {
		return nil, errors.E(op, err)
	}
	if _, err := s.bucket(bucket); err != nil {
		return nil, errors.E(op, err)
	}
	if d.Purged && (!d.Versioned || d.HLC == 0) {
		return nil, errors.E(op, errors.Invalid, "a purge names a version of a versioned key")
	}
	o := &object.Object{Deleted: true, ModTime: d.ModTime, Versioned: d.Versioned, DeleteMarker: d.DeleteMarker, Purged: d.Purged, Origin: d.Origin}
	return s.commitObject(op, bucket, key, o, &body{inline: []byte{}}, object.PutOptions{Version: d.HLC})
}

// Forget removes bucket/key from this store, body and record, if the record stored is
// version (an HLC timestamp; a tombstone included); it leaves no tombstone. It reports
// whether it removed anything. Nodes use it to hand off data they no longer hold once the
// new holders confirmed their copies: a newer write that arrived meanwhile is kept.
func (s *Store) Forget(bucket, key string, version uint64) (bool, error) {
	defer s.changing(bucket, key)()
	if err := s.drain(bucket, key); err != nil {
		return false, err
	}
	return s.drop(errors.Op("store.Forget"), bucket, key, func(o *object.Object) bool { return o.HLC == version })
}

// ForgetMeta is Forget that also keeps the record if its metadata changed after metaHLC
// (a tagging update that arrived after the new holders confirmed their copies).
func (s *Store) ForgetMeta(bucket, key string, version, metaHLC uint64) (bool, error) {
	defer s.changing(bucket, key)()
	if err := s.drain(bucket, key); err != nil {
		return false, err
	}
	return s.drop(errors.Op("store.ForgetMeta"), bucket, key, func(o *object.Object) bool { return o.HLC == version && o.MetaHLC <= metaHLC })
}

// UpdateMeta applies u to the record of version u.Version of u.Bucket/u.Key, current
// or not (not a tombstone or delete marker): each group of metadata u changes (tags,
// retention, legal hold) replaces the record's if u changed it later, and a COMPLIANCE
// retention is never shortened (object.Object.MergeMeta); the body, ETag, modification
// time and version stay. It returns the version's record stored afterwards, or, if this
// store lacks the version, the key's current record (the caller compares it with u to
// learn what happened: a newer version, an older one this store missed u.Version for, a
// tombstone). A key without any record is a NotExist error.
func (s *Store) UpdateMeta(u object.MetaUpdate) (*object.Object, error) {
	defer s.changing(u.Bucket, u.Key)()
	const op errors.Op = "store.UpdateMeta"
	if err := s.drain(u.Bucket, u.Key); err != nil {
		return nil, errors.E(op, err)
	}
	if u.Version == 0 || u.MetaHLC == 0 {
		return nil, errors.E(op, errors.Invalid, "a metadata update needs a version and its own HLC")
	}
	s.bucketMu.RLock()
	defer s.bucketMu.RUnlock()
	if _, err := s.bucket(u.Bucket); err != nil {
		return nil, errors.E(op, err)
	}
	mu := s.keyLock(u.Bucket, u.Key)
	mu.Lock()
	defer mu.Unlock()
	s.clock.Observe(u.MetaHLC)
	okey := objectKey(u.Bucket, u.Key)
	old, err := getObject(s.db, okey)
	if err != nil && !errors.Is(errors.NotExist, err) {
		return nil, errors.E(op, err)
	}
	loc := okey
	if old == nil || old.HLC != u.Version {
		v, verr := getObject(s.db, versionKey(u.Bucket, u.Key, u.Version))
		if verr != nil && !errors.Is(errors.NotExist, verr) {
			return nil, errors.E(op, verr)
		}
		if v == nil {
			if old == nil {
				return nil, errors.E(op, err)
			}
			return old, nil
		}
		old, loc = v, versionKey(u.Bucket, u.Key, u.Version)
	}
	if old.Deleted {
		return old, nil
	}
	return s.mergeMeta(op, u.Bucket, u.Key, loc, old, u.Record())
}

// mergeMeta stores old again under key with the groups of in-place metadata src changed
// later (object.Object.MergeMeta), if any. The caller holds the key's lock. The record
// keeps its version id, so its body (embedded, inline under its own key, or chunks) is
// untouched.
func (s *Store) mergeMeta(op errors.Op, bucket, key string, rkey []byte, old, src *object.Object) (*object.Object, error) {
	o := *old
	if !o.MergeMeta(src) {
		return old, nil
	}
	o.Origin = src.Origin // the link entries of a replicated metadata change name its origin
	b := s.db.NewBatch()
	b.Set(rkey, marshalRecord(&o), nil)
	events := s.stackMeta(b, bucket, key, &o)
	err := s.commit(b)
	s.stacked(events, err == nil)
	if err != nil {
		return nil, errors.E(op, err)
	}
	return &o, nil
}

// drop removes the current record of bucket/key and its body, if there is one and match
// (when set) accepts it. It reports whether it removed anything.
func (s *Store) drop(op errors.Op, bucket, key string, match func(*object.Object) bool) (bool, error) {
	return s.dropAt(op, bucket, key, objectKey(bucket, key), match)
}

// dropAt is drop of the record under rkey: the key's current record (O/) or a noncurrent
// one (V/).
func (s *Store) dropAt(op errors.Op, bucket, key string, rkey []byte, match func(*object.Object) bool) (bool, error) {
	mu := s.keyLock(bucket, key)
	mu.Lock()
	defer mu.Unlock()
	s.relocMu.RLock()
	defer s.relocMu.RUnlock()
	old, err := getObject(s.db, rkey)
	if errors.Is(errors.NotExist, err) {
		return false, nil
	}
	if err != nil {
		return false, errors.E(op, err)
	}
	if match != nil && !match(old) {
		return false, nil
	}
	b := s.db.NewBatch()
	freed, err := s.dropBody(b, old)
	if err != nil {
		b.Close()
		return false, errors.E(op, err)
	}
	b.Delete(rkey, nil)
	if err := s.commit(b); err != nil {
		return false, errors.E(op, err)
	}
	if bytes.HasPrefix(rkey, []byte(pfxVersion)) {
		var nc noncurrent
		nc.add(old, -1)
		s.countNoncurrent(bucket, nc)
	} else {
		s.count(bucket, old, nil)
	}
	for _, l := range freed {
		s.addLive(l, -1)
	}
	return true, nil
}
