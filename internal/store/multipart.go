package store

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store/segment"
)

const uploadIDLen = 32

// CreateUpload starts a multipart upload of bucket/key whose object will get meta.
func (s *Store) CreateUpload(bucket, key string, meta *object.Object) (string, error) {
	id := NewUploadID()
	return id, s.CreateUploadID(bucket, key, id, meta)
}

// NewUploadID returns a new random upload id.
func NewUploadID() string {
	id := newID()
	return hex.EncodeToString(id[:])
}

// CreateUploadID is CreateUpload with an id chosen by the caller (a cluster gateway
// creates the same upload on every replica). Creating an upload that exists is a no-op.
func (s *Store) CreateUploadID(bucket, key, uploadID string, meta *object.Object) error {
	const op errors.Op = "store.CreateUpload"
	if !validUploadID(uploadID) {
		return errors.E(op, errors.Invalid, "malformed upload id")
	}
	s.bucketMu.RLock()
	defer s.bucketMu.RUnlock()
	if _, err := s.bucket(bucket); err != nil {
		return errors.E(op, err)
	}
	if _, err := s.upload(bucket, key, uploadID); err == nil {
		return nil
	}
	if _, err := s.uploadEnd(bucket, key, uploadID); err == nil {
		return errors.E(op, errors.Invalid, "the upload id was used by an upload that ended")
	}
	m := *meta
	if m.ModTime == 0 {
		m.ModTime = time.Now().UnixNano()
	}
	b := s.db.NewBatch()
	b.Set(uploadKey(bucket, key, uploadID), marshalRecord(&m), nil)
	if err := s.commit(b); err != nil {
		return errors.E(op, err)
	}
	return nil
}

func validUploadID(id string) bool {
	if len(id) != uploadIDLen {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// Upload returns a pending upload's record (the metadata the object will get).
func (s *Store) Upload(bucket, key, uploadID string) (*object.Object, error) {
	o, err := s.upload(bucket, key, uploadID)
	if err != nil {
		return nil, errors.E(errors.Op("store.Upload"), err)
	}
	return o, nil
}

func (s *Store) upload(bucket, key, uploadID string) (*object.Object, error) {
	if !validUploadID(uploadID) {
		return nil, errors.E(errors.NotExist, object.ErrNoSuchUpload)
	}
	o, err := getObject(s.db, uploadKey(bucket, key, uploadID))
	if errors.Is(errors.NotExist, err) {
		if _, berr := s.bucket(bucket); berr != nil {
			return nil, berr
		}
		return nil, errors.E(errors.NotExist, object.ErrNoSuchUpload)
	}
	return o, err
}

// PutPart stores part number n of an upload. finish, if set, fills in and may veto the
// part record (ETag, checksum) once the body is durable.
func (s *Store) PutPart(ctx context.Context, bucket, key, uploadID string, n int, src io.Reader, size int64, finish func(*object.Object) error) (*object.Object, error) {
	const op errors.Op = "store.PutPart"
	if _, err := s.upload(bucket, key, uploadID); err != nil {
		return nil, errors.E(op, err)
	}
	bd, err := s.writeBody(ctx, src, size, false)
	if err != nil {
		return nil, errors.E(op, err)
	}
	defer s.release(bd.locs)
	p := &object.Object{Size: bd.size, ModTime: time.Now().UnixNano(), VersionID: newID()}
	if finish != nil {
		if err := finish(p); err != nil {
			return nil, errors.E(op, err)
		}
	}
	if p.Striped && (bd.size != 0 || p.Stripe.K < 1 || (p.Stripe.M < 1 && p.Stripe.K != 1) || p.Stripe.Size < 1 || p.Size < 0) {
		return nil, errors.E(op, errors.Invalid, "a striped part's record has no body and a valid layout")
	}
	mu := s.keyLock(bucket, key)
	mu.Lock()
	defer mu.Unlock()
	s.relocMu.RLock()
	defer s.relocMu.RUnlock()
	if _, err := s.upload(bucket, key, uploadID); err != nil {
		return nil, errors.E(op, err)
	}
	pkey := partKey(uploadID, n)
	old, err := getObject(s.db, pkey)
	if err != nil && !errors.Is(errors.NotExist, err) {
		return nil, errors.E(op, err)
	}
	b := s.db.NewBatch()
	var freed []segment.Loc
	if old != nil {
		if freed, err = s.dropBody(b, old); err != nil {
			b.Close()
			return nil, errors.E(op, err)
		}
	}
	p.Chunks = bd.chunks
	for i, c := range bd.chunks {
		b.Set(chunkKey(segment.ID(c.ID)), encodeLoc(bd.locs[i]), nil)
		b.Set(segKey(bd.locs[i]), segValue(segment.ID(c.ID), c.Size), nil)
	}
	b.Set(pkey, marshalRecord(p), nil)
	if err := s.commit(b); err != nil {
		return nil, errors.E(op, err)
	}
	for _, l := range bd.locs {
		s.addLive(l, 1)
	}
	for _, l := range freed {
		s.addLive(l, -1)
	}
	return p, nil
}

func (s *Store) parts(uploadID string) ([]object.Part, error) {
	p := partPrefix(uploadID)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil, errors.E(errors.IO, err)
	}
	defer it.Close()
	var out []object.Part
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		o := new(object.Object)
		if err := unmarshalRecord(o, it.Value()); err != nil {
			return nil, err
		}
		out = append(out, object.Part{Number: int(beUint32(k[len(k)-4:])), Object: o})
	}
	return out, it.Error()
}

// ListParts returns up to max parts of an upload numbered above after.
func (s *Store) ListParts(bucket, key, uploadID string, after, max int) (parts []object.Part, truncated bool, err error) {
	const op errors.Op = "store.ListParts"
	if _, err := s.upload(bucket, key, uploadID); err != nil {
		return nil, false, errors.E(op, err)
	}
	all, err := s.parts(uploadID)
	if err != nil {
		return nil, false, errors.E(op, err)
	}
	for _, p := range all {
		if p.Number <= after {
			continue
		}
		if len(parts) == max {
			return parts, true, nil
		}
		parts = append(parts, p)
	}
	return parts, false, nil
}

// CompleteUpload assembles the listed parts into bucket/key. Parts must be listed in
// ascending order, exist with the given ETags, and all but the last be at least minPart
// bytes. The parts' chunks become the object's chunks without being copied. The ETag is the
// MD5 of the parts' binary MD5s, followed by "-" and the part count.
//
// finish, if set, sees the assembled record and the listed parts' records (in order) before
// the commit; it may fill in o (e.g. a composite checksum) or veto the completion.
func (s *Store) CompleteUpload(bucket, key, uploadID string, list []object.CompletePart, minPart int64, finish func(o *object.Object, parts []*object.Object) error) (*object.Object, error) {
	return s.CompleteUploadVersion(bucket, key, uploadID, list, minPart, 0, 0, finish)
}

// CompleteUploadVersion is CompleteUpload with the HLC version and modification time of the
// new object chosen by the caller (zero: now), as for PutOptions.Version. If a newer record
// is stored, the upload is consumed but the object is left as it is, and that newer record is
// returned.
func (s *Store) CompleteUploadVersion(bucket, key, uploadID string, list []object.CompletePart, minPart int64, version uint64, modTime int64, finish func(o *object.Object, parts []*object.Object) error) (*object.Object, error) {
	defer s.changing(bucket, key)()
	const op errors.Op = "store.CompleteUpload"
	if len(list) == 0 {
		return nil, errors.E(op, errors.Invalid, "no parts given")
	}
	s.bucketMu.RLock()
	defer s.bucketMu.RUnlock()
	mu := s.keyLock(bucket, key)
	mu.Lock()
	defer mu.Unlock()
	s.relocMu.RLock()
	defer s.relocMu.RUnlock()
	if e, err := s.uploadEnd(bucket, key, uploadID); err == nil {
		// Ended here already: a retry of the same completion gets its result again and
		// writes nothing; anything else is refused.
		if e.SameParts(list) && e.Result != nil {
			o := *e.Result
			return &o, nil
		}
		return nil, errors.E(op, errors.NotExist, object.ErrNoSuchUpload)
	} else if !errors.Is(errors.NotExist, err) {
		return nil, errors.E(op, err)
	}
	meta, err := s.upload(bucket, key, uploadID)
	if err != nil {
		return nil, errors.E(op, err)
	}
	all, err := s.parts(uploadID)
	if err != nil {
		return nil, errors.E(op, err)
	}
	byNum := make(map[int]*object.Object, len(all))
	for _, p := range all {
		byNum[p.Number] = p.Object
	}
	o := *meta
	o.VersionID = newID()
	o.ModTime = modTime
	if o.ModTime == 0 {
		o.ModTime = time.Now().UnixNano()
	}
	o.HLC = s.version(version)
	o.MetaHLC = 0 // the upload's tags are the new version's own
	o.Deleted = false
	o.Size = 0
	o.Inline, o.Embedded, o.Body = false, false, nil
	o.Chunks = nil
	o.PartSizes = nil
	md := md5.New()
	used := map[int]bool{}
	var listed []*object.Object
	for i, cp := range list {
		if i > 0 && cp.Number <= list[i-1].Number {
			return nil, errors.E(op, errors.Invalid, object.ErrInvalidPartOrder)
		}
		p, ok := byNum[cp.Number]
		if !ok || !strings.EqualFold(strings.Trim(cp.ETag, `"`), p.ETag) {
			return nil, errors.E(op, errors.Invalid, fmt.Errorf("part %d: %w", cp.Number, object.ErrInvalidPart))
		}
		if i < len(list)-1 && p.Size < minPart {
			return nil, errors.E(op, errors.Invalid, fmt.Errorf("part %d has %d bytes: %w", cp.Number, p.Size, object.ErrEntityTooSmall))
		}
		sum, err := hex.DecodeString(p.ETag)
		if err != nil {
			return nil, errors.E(op, errors.Corrupt, "part has a malformed ETag")
		}
		md.Write(sum)
		if i == 0 {
			o.Striped, o.Stripe = p.Striped, layoutOf(p)
		} else if p.Striped != o.Striped || (p.Striped && (p.Stripe.K != o.Stripe.K || p.Stripe.M != o.Stripe.M || p.Stripe.Size != o.Stripe.Size)) {
			return nil, errors.E(op, errors.Invalid, fmt.Errorf("part %d is stored differently from part %d (erasure-coded or not, or another code): %w", cp.Number, list[0].Number, object.ErrInvalidPart))
		}
		if o.Striped {
			o.Stripe.Upload = uploadID
			o.Stripe.Parts = append(o.Stripe.Parts, cp.Number)
		}
		o.Size += p.Size
		o.Chunks = append(o.Chunks, p.Chunks...)
		o.PartSizes = append(o.PartSizes, p.Size)
		used[cp.Number] = true
		listed = append(listed, p)
	}
	o.ETag = fmt.Sprintf("%x-%d", md.Sum(nil), len(list))
	if finish != nil {
		if err := finish(&o, listed); err != nil {
			return nil, errors.E(op, err)
		}
	}
	b := s.db.NewBatch()
	var freed []segment.Loc
	okey := objectKey(bucket, key)
	old, err := getObject(s.db, okey)
	if err != nil && !errors.Is(errors.NotExist, err) {
		b.Close()
		return nil, errors.E(op, err)
	}
	if o.Versioned || (old != nil && old.Versioned) || s.hasVersionedBucket(bucket) {
		// A key with versions: the new object is placed among them as any write is
		// (commitVersion), the record it supersedes kept; the upload goes in the same batch.
		return s.completeVersioned(op, b, bucket, key, uploadID, &o, old, all, used, list)
	}
	superseded := old != nil && old.HLC >= o.HLC
	if old != nil && !superseded {
		tierGarbage(b, old)
		f, err := s.dropBody(b, old)
		if err != nil {
			b.Close()
			return nil, errors.E(op, err)
		}
		freed = append(freed, f...)
	}
	f, err := s.endCompleted(b, bucket, key, uploadID, &o, all, used, list, superseded)
	if err != nil {
		b.Close()
		return nil, errors.E(op, err)
	}
	freed = append(freed, f...)
	var events stacking
	if !superseded {
		b.Set(okey, marshalRecord(&o), nil)
		events = s.stack(b, bucket, key, &o)
	}
	err = s.commit(b)
	s.stacked(events, err == nil)
	if err != nil {
		return nil, errors.E(op, err)
	}
	for _, l := range freed {
		s.addLive(l, -1)
	}
	if superseded {
		return old, nil
	}
	s.count(bucket, old, &o)
	return &o, nil
}

// completeVersioned commits a completion of a versioned key (or of a bucket with
// versions): the upload's parts and upload record go, its end record is written, and the
// object record o (whose chunks are the used parts' chunks, already in the index) is
// placed by commitVersion, all in batch b.
func (s *Store) completeVersioned(op errors.Op, b *pebble.Batch, bucket, key, uploadID string, o, old *object.Object, all []object.Part,
	used map[int]bool, list []object.CompletePart) (*object.Object, error) {
	freed, err := s.endCompleted(b, bucket, key, uploadID, o, all, used, list, false)
	if err != nil {
		b.Close()
		return nil, errors.E(op, err)
	}
	stored, err := s.commitVersionIn(op, b, bucket, key, o, nil, old, nil, object.PutOptions{})
	if err != nil {
		return nil, err
	}
	for _, l := range freed {
		s.addLive(l, -1)
	}
	return stored, nil
}

// endCompleted adds to b the end of a completed upload: the bodies of its parts left out
// of the completion (of all its parts if the object is not stored: dropAll), its parts'
// and upload's records, and its end record naming o; an object without chunks gets an
// empty inline body. It returns the chunk locations freed.
func (s *Store) endCompleted(b *pebble.Batch, bucket, key, uploadID string, o *object.Object, all []object.Part, used map[int]bool,
	list []object.CompletePart, dropAll bool) ([]segment.Loc, error) {
	var freed []segment.Loc
	for _, p := range all {
		if !used[p.Number] || dropAll {
			f, err := s.dropBody(b, p.Object)
			if err != nil {
				return nil, err
			}
			freed = append(freed, f...)
		}
		b.Delete(partKey(uploadID, p.Number), nil)
	}
	b.Delete(uploadKey(bucket, key, uploadID), nil)
	if len(o.Chunks) == 0 {
		o.Inline, o.Embedded, o.Body = true, true, []byte{}
	}
	res := *o
	res.Body, res.Chunks, res.Inline, res.Embedded = nil, nil, false, false
	end := &object.UploadEnd{Bucket: bucket, Key: key, UploadID: uploadID, State: object.UploadCompleted, Result: &res, Ended: time.Now().UnixNano()}
	for _, cp := range list {
		end.Parts = append(end.Parts, object.CompletePart{Number: cp.Number, ETag: strings.ToLower(strings.Trim(cp.ETag, `"`))})
	}
	b.Set(uploadEndKey(bucket, key, uploadID), marshalUploadEnd(end), nil)
	return freed, nil
}

// layoutOf is p's stripe layout without part information.
func layoutOf(p *object.Object) object.Stripe {
	return object.Stripe{K: p.Stripe.K, M: p.Stripe.M, Size: p.Stripe.Size}
}

// AbortUpload deletes an upload and its parts.
func (s *Store) AbortUpload(bucket, key, uploadID string) error {
	const op errors.Op = "store.AbortUpload"
	mu := s.keyLock(bucket, key)
	mu.Lock()
	defer mu.Unlock()
	s.relocMu.RLock()
	defer s.relocMu.RUnlock()
	if _, err := s.upload(bucket, key, uploadID); err != nil {
		return errors.E(op, err)
	}
	if _, err := s.uploadEnd(bucket, key, uploadID); err == nil {
		return errors.E(op, errors.NotExist, object.ErrNoSuchUpload)
	}
	b := s.db.NewBatch()
	freed, err := s.dropUpload(b, bucket, key, uploadID, nil)
	if err != nil {
		b.Close()
		return errors.E(op, err)
	}
	end := &object.UploadEnd{Bucket: bucket, Key: key, UploadID: uploadID, State: object.UploadAborted, Ended: time.Now().UnixNano()}
	b.Set(uploadEndKey(bucket, key, uploadID), marshalUploadEnd(end), nil)
	if err := s.commit(b); err != nil {
		return errors.E(op, err)
	}
	for _, l := range freed {
		s.addLive(l, -1)
	}
	return nil
}

// ListUploads lists a bucket's pending uploads in key, then upload id, order.
func (s *Store) ListUploads(bucket string, opts object.UploadListOptions) (*object.UploadList, error) {
	const op errors.Op = "store.ListUploads"
	if _, err := s.bucket(bucket); err != nil {
		return nil, errors.E(op, err)
	}
	base := uploadPrefix(bucket, "")
	lower := uploadPrefix(bucket, opts.Prefix)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
	if err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	defer it.Close()
	res := &object.UploadList{}
	count := 0
	lastCP := ""
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()[len(base):]
		if len(k) < uploadIDLen+1 {
			continue
		}
		key := string(k[:len(k)-uploadIDLen-1])
		id := string(k[len(k)-uploadIDLen:])
		if opts.KeyMarker != "" {
			if key < opts.KeyMarker || (key == opts.KeyMarker && (opts.UploadMarker == "" || id <= opts.UploadMarker)) {
				continue
			}
		}
		if opts.Delimiter != "" {
			if i := strings.Index(key[len(opts.Prefix):], opts.Delimiter); i >= 0 {
				cp := key[:len(opts.Prefix)+i+len(opts.Delimiter)]
				if cp == lastCP || (opts.KeyMarker != "" && cp <= opts.KeyMarker) {
					continue
				}
				if count == opts.Max {
					res.Truncated = true
					break
				}
				lastCP = cp
				res.CommonPrefixes = append(res.CommonPrefixes, cp)
				res.NextKey, res.NextUpload = cp, ""
				count++
				continue
			}
		}
		if count == opts.Max {
			res.Truncated = true
			break
		}
		o := new(object.Object)
		if err := unmarshalRecord(o, it.Value()); err != nil {
			return nil, errors.E(op, err)
		}
		res.Uploads = append(res.Uploads, object.Upload{Key: key, UploadID: id, Initiated: time.Unix(0, o.ModTime), Meta: o})
		res.NextKey, res.NextUpload = key, id
		count++
	}
	return res, it.Error()
}
