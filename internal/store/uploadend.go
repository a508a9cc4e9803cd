package store

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store/segment"
)

// An upload's end record outlives the upload: when a replica completes or aborts an
// upload it keeps a small record of how it ended, so that a retried completion gets the
// original answer, and the upload's id is refused everywhere afterwards (a replica that
// missed the end and still holds the upload learns of it from the record, by hint or
// anti-entropy, instead of completing the upload a second time). Records are kept for
// UploadEndLifetime; see docs/design/20261123_cluster.md.

// UploadEndLifetime is how long end records are kept after the end.
const UploadEndLifetime = 7 * 24 * time.Hour

const pfxUploadEnd = "E/"

func uploadEndKey(bucket, key, uploadID string) []byte {
	b := make([]byte, 0, len(pfxUploadEnd)+len(bucket)+len(key)+len(uploadID)+2)
	b = append(b, pfxUploadEnd...)
	b = append(b, bucket...)
	b = append(b, 0)
	b = append(b, key...)
	b = append(b, 0)
	return append(b, uploadID...)
}

func marshalUploadEnd(e *object.UploadEnd) []byte {
	b, _ := json.Marshal(e)
	return b
}

func (s *Store) uploadEnd(bucket, key, uploadID string) (*object.UploadEnd, error) {
	v, c, err := s.db.Get(uploadEndKey(bucket, key, uploadID))
	if err == pebble.ErrNotFound {
		return nil, errors.E(errors.NotExist, object.ErrNoSuchUpload)
	}
	if err != nil {
		return nil, errors.E(errors.IO, err)
	}
	defer c.Close()
	e := new(object.UploadEnd)
	if err := json.Unmarshal(v, e); err != nil {
		return nil, errors.E(errors.Corrupt, "malformed upload end record")
	}
	return e, nil
}

// UploadEnd returns the end record of an upload, or a NotExist error if this store has
// none (the upload is pending, unknown, or ended more than UploadEndLifetime ago).
func (s *Store) UploadEnd(bucket, key, uploadID string) (*object.UploadEnd, error) {
	e, err := s.uploadEnd(bucket, key, uploadID)
	if err != nil {
		return nil, errors.E(errors.Op("store.UploadEnd"), err)
	}
	return e, nil
}

// dropUpload adds to b the removal of an upload and its parts; keep, if set, names the
// parts whose bodies stay (they became the object's).
func (s *Store) dropUpload(b *pebble.Batch, bucket, key, uploadID string, keep map[int]bool) ([]segment.Loc, error) {
	all, err := s.parts(uploadID)
	if err != nil {
		return nil, err
	}
	var freed []segment.Loc
	for _, p := range all {
		if !keep[p.Number] {
			f, err := s.dropBody(b, p.Object)
			if err != nil {
				return nil, err
			}
			freed = append(freed, f...)
		}
		b.Delete(partKey(uploadID, p.Number), nil)
	}
	b.Delete(uploadKey(bucket, key, uploadID), nil)
	return freed, nil
}

// EndUpload applies an end record that another replica wrote: the upload and its parts
// are dropped here (if held) and the record is kept, unless this store already has one.
// The parts' bytes are not used: the object a completion made reaches this replica as an
// object copy (hinted retry or anti-entropy). Shards of erasure-coded parts are not
// touched here; the gateway's shard collection decides about them.
func (s *Store) EndUpload(e *object.UploadEnd) error {
	const op errors.Op = "store.EndUpload"
	if !validUploadID(e.UploadID) || (e.State != object.UploadCompleted && e.State != object.UploadAborted) {
		return errors.E(op, errors.Invalid, "malformed upload end record")
	}
	mu := s.keyLock(e.Bucket, e.Key)
	mu.Lock()
	defer mu.Unlock()
	s.relocMu.RLock()
	defer s.relocMu.RUnlock()
	b := s.db.NewBatch()
	freed, err := s.dropUpload(b, e.Bucket, e.Key, e.UploadID, nil)
	if err != nil {
		b.Close()
		return errors.E(op, err)
	}
	if _, err := s.uploadEnd(e.Bucket, e.Key, e.UploadID); errors.Is(errors.NotExist, err) {
		r := *e
		if r.Result != nil {
			o := *r.Result
			o.Body, o.Chunks, o.Inline, o.Embedded = nil, nil, false, false
			r.Result = &o
		}
		b.Set(uploadEndKey(e.Bucket, e.Key, e.UploadID), marshalUploadEnd(&r), nil)
	} else if err != nil {
		b.Close()
		return errors.E(op, err)
	}
	if err := s.commit(b); err != nil {
		return errors.E(op, err)
	}
	for _, l := range freed {
		s.addLive(l, -1)
	}
	return nil
}

// GCUploadEnds removes end records of uploads that ended before before, and returns how
// many it removed.
func (s *Store) GCUploadEnds(before time.Time) (int, error) {
	const op errors.Op = "store.GCUploadEnds"
	p := []byte(pfxUploadEnd)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return 0, errors.E(op, errors.IO, err)
	}
	b := s.db.NewBatch()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		var e object.UploadEnd
		if json.Unmarshal(it.Value(), &e) != nil || e.Ended < before.UnixNano() {
			b.Delete(append([]byte{}, it.Key()...), nil)
			n++
		}
	}
	if err := it.Close(); err != nil {
		b.Close()
		return 0, errors.E(op, errors.IO, err)
	}
	if n == 0 {
		b.Close()
		return 0, nil
	}
	if err := s.commit(b); err != nil {
		return 0, errors.E(op, err)
	}
	return n, nil
}

// PendingUploads calls fn for every pending upload of every bucket.
func (s *Store) PendingUploads(fn func(object.PendingUpload) error) error {
	const op errors.Op = "store.PendingUploads"
	p := []byte(pfxUpload)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return errors.E(op, errors.IO, err)
	}
	var ups []object.PendingUpload
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()[len(p):]
		i := strings.IndexByte(string(k), 0)
		if i < 0 || len(k) < i+1+uploadIDLen+1 {
			continue
		}
		bucket, rest := string(k[:i]), k[i+1:]
		u := object.PendingUpload{Bucket: bucket, Key: string(rest[:len(rest)-uploadIDLen-1]), UploadID: string(rest[len(rest)-uploadIDLen:])}
		o := new(object.Object)
		if unmarshalRecord(o, it.Value()) == nil {
			u.Initiated = time.Unix(0, o.ModTime)
		}
		ups = append(ups, u)
	}
	if err := it.Close(); err != nil {
		return errors.E(op, errors.IO, err)
	}
	for _, u := range ups {
		if err := fn(u); err != nil {
			return err
		}
	}
	return nil
}
