package store

import (
	"bytes"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// List returns a page of bucket's objects in key order. With a delimiter, keys that contain
// it after the prefix are rolled up into common prefixes; the scan skips over each common
// prefix with one seek, so a page costs O(page), not O(keys under the prefixes).
func (s *Store) List(bucket string, opts object.ListOptions) (*object.ListResult, error) {
	const op errors.Op = "store.List"
	if err := s.drainAll(); err != nil {
		return nil, errors.E(op, err)
	}
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
	res := &object.ListResult{}
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
		o := new(object.Object)
		if err := unmarshalRecord(o, it.Value()); err != nil {
			return nil, errors.E(op, err)
		}
		o.Body = nil // points into the iterator's buffer
		res.Objects = append(res.Objects, object.ListEntry{Key: key, Object: o})
		res.Next = key
		count++
		ok = it.Next()
	}
	if err := it.Error(); err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	return res, nil
}

// Scan calls fn for every object record of every bucket (tombstones included) whose
// bucket and key keep returns true, in key order, reading a consistent snapshot. It reads
// the whole index of objects: replicas use it to compare what they hold.
func (s *Store) Scan(keep func(bucket, key string) bool, fn func(object.VersionEntry) error) error {
	if err := s.drainAll(); err != nil {
		return err
	}
	return s.scan("store.Scan", pfxObject, false, keep, fn)
}

// scan is Scan over the records under prefix pfx (pfxObject, or pfxVersion whose keys end
// in NUL and 8 bytes of version: noncurrent).
func (s *Store) scan(op errors.Op, pfx string, noncurrent bool, keep func(bucket, key string) bool, fn func(object.VersionEntry) error) error {
	p := []byte(pfx)
	snap := s.snapshot()
	defer snap.Close()
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return errors.E(op, errors.IO, err)
	}
	defer it.Close()
	var o object.Object
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()[len(p):]
		i := bytes.IndexByte(k, 0)
		if i < 0 {
			continue
		}
		end := len(k)
		if noncurrent {
			if len(k) < i+10 || k[len(k)-9] != 0 {
				continue
			}
			end -= 9
		}
		bucket, key := string(k[:i]), string(k[i+1:end])
		if keep != nil && !keep(bucket, key) {
			continue
		}
		v, err := s.iterValue(it)
		if err != nil {
			return errors.E(op, err)
		}
		if err := unmarshalRecord(&o, v); err != nil {
			return errors.E(op, err)
		}
		if err := fn(versionEntry(bucket, key, &o, noncurrent)); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return errors.E(op, errors.IO, err)
	}
	return nil
}
