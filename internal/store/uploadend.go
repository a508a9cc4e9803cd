package store

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/store/segment"
)

// UploadEnd is what a replica keeps of a multipart upload once it completed or was
// aborted (the upload's record and parts are gone by then): a Complete retried with the
// same part list gets the original answer instead of assembling the object anew, any
// other operation on the upload is NoSuchUpload, and a replica that missed the end (it
// was away) learns of it from hints and anti-entropy and drops its stale upload instead
// of ever completing it. End records live UploadEndTTL (see ExpireUploadEnds).
type UploadEnd struct {
	Bucket  string         `json:"bucket"`
	Key     string         `json:"key"`
	Aborted bool           `json:"aborted,omitempty"`
	HLC     uint64         `json:"hlc,omitempty"`   // completed: the object's version
	ETag    string         `json:"etag,omitempty"`  // completed: the object's ETag
	Parts   []CompletePart `json:"parts,omitempty"` // completed: the part list it was completed with
	At      int64          `json:"at"`              // unix nanoseconds of the end
}

// UploadEndTTL is how long end records are kept. A replica away longer than this that
// still holds the upload learns nothing from its peers; the gateway's two-phase
// completion still never lets it complete alone (it needs W replicas holding the upload),
// and a stale upload older than this is dropped by age (ExpireUploads).
const UploadEndTTL = 7 * 24 * time.Hour

const pfxUploadEnd = "E/"

func uploadEndKey(uploadID string) []byte { return append([]byte(pfxUploadEnd), uploadID...) }

// SameParts reports whether two part lists name the same parts with the same ETags.
func SameParts(a, b []CompletePart) bool {
	return slices.EqualFunc(a, b, func(x, y CompletePart) bool {
		return x.Number == y.Number && strings.EqualFold(strings.Trim(x.ETag, `"`), strings.Trim(y.ETag, `"`))
	})
}

// UploadEnded returns the end record of an upload (NotExist if it has none).
func (s *Store) UploadEnded(uploadID string) (*UploadEnd, error) {
	const op errors.Op = "store.UploadEnded"
	e, err := s.uploadEnd(uploadID)
	if err != nil {
		return nil, errors.E(op, err)
	}
	return e, nil
}

func (s *Store) uploadEnd(uploadID string) (*UploadEnd, error) {
	if !validUploadID(uploadID) {
		return nil, errors.E(errors.NotExist, ErrNoSuchUpload)
	}
	v, c, err := s.db.Get(uploadEndKey(uploadID))
	if err == pebble.ErrNotFound {
		return nil, errors.E(errors.NotExist, ErrNoSuchUpload)
	}
	if err != nil {
		return nil, errors.E(errors.IO, err)
	}
	defer c.Close()
	var e UploadEnd
	if err := json.Unmarshal(v, &e); err != nil {
		return nil, errors.E(errors.Corrupt, "malformed upload end record")
	}
	return &e, nil
}

func (e *UploadEnd) marshal() []byte {
	b, _ := json.Marshal(e)
	return b
}

// EndUpload applies an end record learned from another replica: the upload, if still
// pending here, is dropped with its parts (a completed upload's object reaches this
// replica by the hint or anti-entropy copy of its record, never by completing here), and
// the record is kept. It reports whether a pending upload was dropped. An upload that
// already ended here is left as it is.
func (s *Store) EndUpload(uploadID string, e *UploadEnd) (dropped bool, err error) {
	const op errors.Op = "store.EndUpload"
	if !validUploadID(uploadID) || e == nil || e.Bucket == "" {
		return false, errors.E(op, errors.Invalid, "malformed upload end")
	}
	s.bucketMu.RLock()
	defer s.bucketMu.RUnlock()
	mu := s.keyLock(e.Bucket, e.Key)
	mu.Lock()
	defer mu.Unlock()
	s.relocMu.RLock()
	defer s.relocMu.RUnlock()
	if _, err := s.uploadEnd(uploadID); err == nil {
		return false, nil
	} else if !errors.Is(errors.NotExist, err) {
		return false, errors.E(op, err)
	}
	if _, err := s.bucket(e.Bucket); err != nil {
		return false, errors.E(op, err)
	}
	b := s.db.NewBatch()
	var freed []segment.Loc
	if _, err := s.upload(e.Bucket, e.Key, uploadID); err == nil {
		all, err := s.parts(uploadID)
		if err != nil {
			b.Close()
			return false, errors.E(op, err)
		}
		for _, p := range all {
			f, err := s.dropBody(b, p.Object)
			if err != nil {
				b.Close()
				return false, errors.E(op, err)
			}
			freed = append(freed, f...)
			b.Delete(partKey(uploadID, p.Number), nil)
		}
		b.Delete(uploadKey(e.Bucket, e.Key, uploadID), nil)
		dropped = true
	}
	b.Set(uploadEndKey(uploadID), e.marshal(), nil)
	if err := s.commit(b); err != nil {
		return false, errors.E(op, err)
	}
	for _, l := range freed {
		s.addLive(l, -1)
	}
	return dropped, nil
}

// ExpireUploadEnds removes the end records of uploads that ended before before, and
// returns how many it removed.
func (s *Store) ExpireUploadEnds(before time.Time) (int, error) {
	const op errors.Op = "store.ExpireUploadEnds"
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxUploadEnd), UpperBound: prefixEnd([]byte(pfxUploadEnd))})
	if err != nil {
		return 0, errors.E(op, errors.IO, err)
	}
	var old [][]byte
	for ok := it.First(); ok; ok = it.Next() {
		var e UploadEnd
		if json.Unmarshal(it.Value(), &e) != nil || e.At < before.UnixNano() {
			old = append(old, append([]byte(nil), it.Key()...))
		}
	}
	if err := it.Close(); err != nil {
		return 0, errors.E(op, errors.IO, err)
	}
	if len(old) == 0 {
		return 0, nil
	}
	b := s.db.NewBatch()
	for _, k := range old {
		b.Delete(k, nil)
	}
	if err := s.commit(b); err != nil {
		return 0, errors.E(op, err)
	}
	return len(old), nil
}

// PendingUpload names a pending upload, for anti-entropy.
type PendingUpload struct {
	Bucket, Key, UploadID string
	Initiated             time.Time
}

// PendingUploads returns every pending upload of every bucket but the internal ones.
func (s *Store) PendingUploads() ([]PendingUpload, error) {
	const op errors.Op = "store.PendingUploads"
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxUpload), UpperBound: prefixEnd([]byte(pfxUpload))})
	if err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	var out []PendingUpload
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()[len(pfxUpload):]
		if len(k) < uploadIDLen+2 {
			continue
		}
		id := string(k[len(k)-uploadIDLen:])
		rest := k[:len(k)-uploadIDLen-1] // bucket \0 key
		i := slices.Index(rest, 0)
		if i < 0 || Internal(string(rest[:i])) {
			continue
		}
		p := PendingUpload{Bucket: string(rest[:i]), Key: string(rest[i+1:]), UploadID: id}
		var o Object
		if o.Unmarshal(it.Value()) == nil {
			p.Initiated = time.Unix(0, o.ModTime)
		}
		out = append(out, p)
	}
	if err := it.Close(); err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	return out, nil
}
