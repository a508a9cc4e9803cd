package store

import (
	"bytes"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/errors"
)

// Sentinel errors the S3 layer maps to specific error codes. They are wrapped in
// *errors.Error values carrying a kind.
var (
	ErrNoSuchBucket     = errors.New("the specified bucket does not exist")
	ErrNoSuchKey        = errors.New("the specified key does not exist")
	ErrNoSuchUpload     = errors.New("the specified multipart upload does not exist")
	ErrInvalidPart      = errors.New("one or more of the specified parts could not be found or its entity tag did not match")
	ErrInvalidPartOrder = errors.New("the list of parts was not in ascending order")
	ErrEntityTooSmall   = errors.New("a part is smaller than the minimum allowed size")
)

// ListOptions selects the entries of a listing.
type ListOptions struct {
	Prefix    string
	Delimiter string
	// After lists only keys (and common prefixes) greater than After.
	After string
	// Max is the largest number of keys plus common prefixes to return.
	Max int
	// Tombstones includes deleted objects' tombstones as entries (Object.Deleted set), for
	// a cluster gateway merging replicas' listings. Common prefixes never come from
	// tombstones alone.
	Tombstones bool
}

// ListEntry is one object in a listing.
type ListEntry struct {
	Key    string
	Object *Object
}

// ListResult is a page of a listing.
type ListResult struct {
	Objects        []ListEntry
	CommonPrefixes []string
	// Truncated reports that more entries follow; Next is the last key or common prefix
	// returned, to pass as After for the next page.
	Truncated bool
	Next      string
}

// List returns a page of bucket's objects in key order. With a delimiter, keys that contain
// it after the prefix are rolled up into common prefixes; the scan skips over each common
// prefix with one seek, so a page costs O(page), not O(keys under the prefixes).
func (s *Store) List(bucket string, opts ListOptions) (*ListResult, error) {
	const op errors.Op = "store.List"
	if _, err := s.bucket(bucket); err != nil {
		return nil, errors.E(op, err)
	}
	base := objectPrefix(bucket, "")
	lower := objectPrefix(bucket, opts.Prefix)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
	if err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	defer it.Close()
	res := &ListResult{}
	if opts.Max <= 0 {
		return res, nil
	}
	var ok bool
	if opts.After != "" && opts.After >= opts.Prefix {
		ok = it.SeekGE(append(objectPrefix(bucket, opts.After), 0))
	} else {
		ok = it.First()
	}
	count := 0
	for ok {
		key := string(it.Key()[len(base):])
		dead := isTombstone(it.Value())
		if dead && (!opts.Tombstones || (opts.Delimiter != "" && strings.Contains(key[len(opts.Prefix):], opts.Delimiter))) {
			ok = it.Next()
			continue
		}
		if opts.Delimiter != "" {
			if i := strings.Index(key[len(opts.Prefix):], opts.Delimiter); i >= 0 {
				cp := key[:len(opts.Prefix)+i+len(opts.Delimiter)]
				if cp > opts.After || opts.After == "" {
					if count == opts.Max {
						res.Truncated = true
						break
					}
					res.CommonPrefixes = append(res.CommonPrefixes, cp)
					res.Next = cp
					count++
				}
				end := prefixEnd(objectPrefix(bucket, cp))
				if end == nil {
					break
				}
				ok = it.SeekGE(end)
				continue
			}
		}
		if count == opts.Max {
			res.Truncated = true
			break
		}
		o := new(Object)
		if err := o.Unmarshal(it.Value()); err != nil {
			return nil, errors.E(op, err)
		}
		o.Body = nil // points into the iterator's buffer
		res.Objects = append(res.Objects, ListEntry{Key: key, Object: o})
		res.Next = key
		count++
		ok = it.Next()
	}
	if err := it.Error(); err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	return res, nil
}

// VersionEntry is one object record as Scan reports it: enough to compare replicas.
type VersionEntry struct {
	Bucket  string `json:"b"`
	Key     string `json:"k"`
	HLC     uint64 `json:"v"`
	Deleted bool   `json:"d,omitempty"`
	Size    int64  `json:"s,omitempty"`
	Striped bool   `json:"x,omitempty"` // an erasure-coded object's record (Size is the object's)
}

// Scan calls fn for every object record of every bucket (tombstones included) whose
// bucket and key keep returns true, in key order, reading a consistent snapshot. It reads
// the whole index of objects: replicas use it to compare what they hold.
func (s *Store) Scan(keep func(bucket, key string) bool, fn func(VersionEntry) error) error {
	const op errors.Op = "store.Scan"
	p := []byte(pfxObject)
	snap := s.db.NewSnapshot()
	defer snap.Close()
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return errors.E(op, errors.IO, err)
	}
	defer it.Close()
	var o Object
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()[len(p):]
		i := bytes.IndexByte(k, 0)
		if i < 0 {
			continue
		}
		bucket, key := string(k[:i]), string(k[i+1:])
		if keep != nil && !keep(bucket, key) {
			continue
		}
		if err := o.Unmarshal(it.Value()); err != nil {
			return errors.E(op, err)
		}
		if err := fn(VersionEntry{Bucket: bucket, Key: key, HLC: o.HLC, Deleted: o.Deleted, Size: o.Size, Striped: o.Striped}); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return errors.E(op, errors.IO, err)
	}
	return nil
}
