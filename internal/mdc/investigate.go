package mdc

import (
	"sort"
	"strconv"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/placement"
)

// An investigation (LeoFS's "investigating") compares two clusters: each sums a hash of
// every record of the linked buckets per partition of a partition count both use (a
// one-level hash tree: equal sums, equal records), and the partitions whose sums differ
// exchange their records, compared by Diff.

// Hash is the hash of one record that the digests sum: FNV-1a over the bucket and key,
// then the version, the tombstone flag, the last metadata change and the versioning
// flags, finished with a 64-bit mixer.
func Hash(e object.VersionEntry) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for i := 0; i < len(e.Bucket); i++ {
		h = (h ^ uint64(e.Bucket[i])) * prime
	}
	h = (h ^ 0xff) * prime
	for i := 0; i < len(e.Key); i++ {
		h = (h ^ uint64(e.Key[i])) * prime
	}
	mix := func(v uint64) {
		h ^= v
		h *= 0x9e3779b97f4a7c15
		h ^= h >> 29
	}
	v := e.HLC << 1
	if e.Deleted {
		v |= 1
	}
	mix(v)
	mix(e.MetaHLC)
	var f uint64
	if e.Versioned {
		f |= 1
	}
	if e.DeleteMarker {
		f |= 2
	}
	if e.Purged {
		f |= 4
	}
	mix(f)
	return h
}

// identity names what a record is a version of: a key's null version (the newest
// replaces the older) by the key, a version of a versioned key by the key and its HLC.
func identity(e object.VersionEntry) string {
	if e.Versioned {
		return e.Bucket + "\x00" + e.Key + "\x00" + strconv.FormatUint(e.HLC, 36)
	}
	return e.Bucket + "\x00" + e.Key
}

// rank orders records of one identity: version, then metadata; a purge outranks the
// version it removed.
func rank(e object.VersionEntry) [2]uint64 {
	if e.Purged {
		return [2]uint64{e.HLC, ^uint64(0)}
	}
	return [2]uint64{e.HLC, e.MetaHLC}
}

func newer(a, b [2]uint64) bool { return a[0] > b[0] || (a[0] == b[0] && a[1] > b[1]) }

// Newest keeps, of records that name the same identity (several holders' copies), the
// newest, in a stable order (by bucket, key, version).
func Newest(es []object.VersionEntry) []object.VersionEntry {
	by := map[string]object.VersionEntry{}
	for _, e := range es {
		id := identity(e)
		if cur, ok := by[id]; !ok || newer(rank(e), rank(cur)) {
			by[id] = e
		}
	}
	out := make([]object.VersionEntry, 0, len(by))
	for _, e := range by {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Bucket != b.Bucket {
			return a.Bucket < b.Bucket
		}
		if a.Key != b.Key {
			return a.Key < b.Key
		}
		return a.HLC < b.HLC
	})
	return out
}

// Diff compares the newest records of the same partitions on two clusters: push are the
// local records the remote lacks or holds older, pull the remote's the local cluster
// lacks or holds older. Both sides end equal once each has applied what the other sent
// (the newest wins on either side).
func Diff(local, remote []object.VersionEntry) (push, pull []object.VersionEntry) {
	l, r := map[string]object.VersionEntry{}, map[string]object.VersionEntry{}
	for _, e := range Newest(local) {
		l[identity(e)] = e
	}
	for _, e := range Newest(remote) {
		r[identity(e)] = e
	}
	for _, e := range Newest(local) {
		if o, ok := r[identity(e)]; !ok || newer(rank(e), rank(o)) {
			push = append(push, e)
		}
	}
	for _, e := range Newest(remote) {
		if o, ok := l[identity(e)]; !ok || newer(rank(e), rank(o)) {
			pull = append(pull, e)
		}
	}
	return push, pull
}

// Digests sums the Hash of es per partition of a partition count of `partitions`.
func Digests(es []object.VersionEntry, partitions int) []uint64 {
	d := make([]uint64, partitions)
	for _, e := range es {
		d[placement.Partition(e.Bucket, e.Key, partitions)] += Hash(e)
	}
	return d
}

// Partition is the partition of bucket/key in a partition count of `partitions`.
func Partition(bucket, key string, partitions int) int {
	return placement.Partition(bucket, key, partitions)
}
