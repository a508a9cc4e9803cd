package replica

import (
	"context"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/placement"
	"github.com/cairnfs/cairn/internal/store"
)

// Local is this node's store as a Replica.
type Local struct {
	Node  string
	Store *store.Store
	// EnsureBucket creates a bucket locally if the cluster map has it (holders learn of
	// buckets from the map, not from a create call), or returns a NotExist error. Nil:
	// the bucket must exist.
	EnsureBucket func(name string) error
	// Fence, if set, is asked before each range write (a volume's data object) whether
	// the writer may still write: the node refuses writes under a lease that moved by its
	// map (docs/design/volumes.md).
	Fence func(w object.RangeWrite) error
	// ReadLeases, if set, is this node's table of read leases: StatLease grants this
	// node's own gateway leases from it.
	ReadLeases *ReadLeases
}

var _ Replica = (*Local)(nil)

// ID implements Replica.
func (l *Local) ID() string { return l.Node }

func (l *Local) ensure(bucket string) error {
	if l.EnsureBucket == nil {
		return nil
	}
	return l.EnsureBucket(bucket)
}

// applyFinal copies the coordinator's final metadata into the record being committed, and
// refuses a body whose size is not what the coordinator sent.
func applyFinal(o, fin *object.Object) error {
	if fin == nil {
		return errors.E(errors.Invalid, "the coordinator did not confirm the body (write abandoned)")
	}
	if fin.Striped && !o.Striped {
		// A part of an erasure-coded upload: its bytes are shards elsewhere.
		if o.Size != 0 {
			return errors.Errorf("", errors.Invalid, "received %d bytes for a striped part", o.Size)
		}
		o.Striped, o.Stripe, o.Size = true, fin.Stripe, fin.Size
	}
	if fin.Size != o.Size {
		return errors.Errorf("", errors.Invalid, "received %d bytes, the coordinator sent %d", o.Size, fin.Size)
	}
	o.ETag, o.ChecksumAlgo, o.Checksum, o.ChecksumType = fin.ETag, fin.ChecksumAlgo, fin.Checksum, fin.ChecksumType
	if fin.SSE.Encrypted() {
		o.SSE = fin.SSE // with the plaintext size, known only once the body was read (parts: only here)
	}
	return finalVersion(o, fin)
}

// Put implements Replica.
func (l *Local) Put(ctx context.Context, w Write) (*object.Object, error) {
	finish := func(o *object.Object) error {
		if err := applyFinal(o, w.final()); err != nil {
			return err
		}
		if w.Part == 0 {
			l.Store.Observe(o.HLC) // the final version, which the coordinator took late (late.go)
		}
		return nil
	}
	if w.Part > 0 {
		return l.Store.PutPart(ctx, w.Bucket, w.Key, w.UploadID, w.Part, w.Body, w.Size, finish)
	}
	if err := l.ensure(w.Bucket); err != nil {
		return nil, err
	}
	if w.Meta == nil {
		return nil, errors.E(errors.Invalid, "an object write without metadata")
	}
	m := *w.Meta
	m.Body, m.Chunks, m.Inline, m.Embedded, m.VersionID = nil, nil, false, false, [16]byte{}
	return l.Store.PutObject(ctx, w.Bucket, w.Key, &m, w.Body, w.Size,
		object.PutOptions{Version: w.Version, Finish: finish, Repair: w.Repair, IfNoneMatch: w.IfAbsent})
}

// Open implements Replica.
func (l *Local) Open(ctx context.Context, bucket, key string, o OpenOptions) (Reader, error) {
	if o.Version == 0 {
		rd, err := l.Store.OpenObject(bucket, key)
		if err != nil {
			return nil, err
		}
		return localReader{rd}, nil
	}
	rd, err := l.Store.OpenVersion(bucket, key, o.Version)
	if errors.Is(errors.NotExist, err) && !errors.IsErr(err, object.ErrNoSuchVersion) { // not a purge or tombstone of it
		if cur, serr := l.Store.StatObject(bucket, key); serr == nil && cur.HLC != o.Version {
			return nil, errors.E(errors.Precondition, "the object changed since it was opened")
		}
	}
	if err != nil {
		return nil, err
	}
	return localReader{rd}, nil
}

type localReader struct{ *store.Reader }

func (r localReader) Info() *object.Object { return r.Object }

// Stat implements Replica. The record has no Body, as over the wire.
func (l *Local) Stat(ctx context.Context, bucket, key string) (*object.Object, error) {
	return l.Store.StatMeta(bucket, key)
}

// StatLease implements LeaseStatter: this node's own gateway's lease, recorded before
// the read (see ReadLeases.Grant).
func (l *Local) StatLease(ctx context.Context, bucket, key string, ttl time.Duration) (*object.Object, time.Duration, error) {
	d := l.ReadLeases.Grant(l.Node, bucket, key, ttl)
	o, err := l.Stat(ctx, bucket, key)
	if err != nil {
		return nil, 0, err
	}
	return o, d, nil
}

// Delete implements Replica.
func (l *Local) Delete(ctx context.Context, bucket, key string, d object.Object) (*object.Object, error) {
	if err := l.ensure(bucket); err != nil {
		return nil, err
	}
	return l.Store.DeleteRecord(bucket, key, d)
}

// UpdateMeta implements Replica.
func (l *Local) UpdateMeta(ctx context.Context, u object.MetaUpdate) (*object.Object, error) {
	if err := l.ensure(u.Bucket); err != nil {
		return nil, err
	}
	return l.Store.UpdateMeta(u)
}

// List implements Replica.
func (l *Local) List(ctx context.Context, bucket string, opts object.ListOptions) (*object.ListResult, error) {
	if err := l.ensure(bucket); err != nil {
		return nil, err
	}
	opts.Tombstones = true
	return l.Store.List(bucket, opts)
}

// ListVersions implements Replica.
func (l *Local) ListVersions(ctx context.Context, bucket string, opts object.VersionListOptions) (*object.VersionList, error) {
	if err := l.ensure(bucket); err != nil {
		return nil, err
	}
	opts.Hidden = true
	return l.Store.ListVersions(bucket, opts)
}

// CreateUpload implements Replica.
func (l *Local) CreateUpload(ctx context.Context, bucket, key, uploadID string, meta *object.Object) error {
	if err := l.ensure(bucket); err != nil {
		return err
	}
	if meta == nil {
		return errors.E(errors.Invalid, "an upload without metadata")
	}
	return l.Store.CreateUploadID(bucket, key, uploadID, meta)
}

// Parts implements Replica.
func (l *Local) Parts(ctx context.Context, bucket, key, uploadID string, after, max int) (*object.PartsPage, error) {
	if e, err := l.Store.UploadEnd(bucket, key, uploadID); err == nil {
		return &object.PartsPage{End: e}, nil
	} else if !errors.Is(errors.NotExist, err) {
		return nil, err
	}
	up, err := l.Store.Upload(bucket, key, uploadID)
	if err != nil {
		return nil, err
	}
	parts, trunc, err := l.Store.ListParts(bucket, key, uploadID, after, max)
	if err != nil {
		return nil, err
	}
	for i := range parts {
		p := *parts[i].Object
		p.Chunks, p.Body, p.Inline, p.Embedded = nil, nil, false, false
		parts[i].Object = &p
	}
	return &object.PartsPage{Upload: up, Parts: parts, Truncated: trunc}, nil
}

// Complete implements Replica.
func (l *Local) Complete(ctx context.Context, c Completion) (*object.Object, error) {
	if c.Final == nil {
		return nil, errors.E(errors.Invalid, "a completion without the coordinator's checksums")
	}
	return l.Store.CompleteUploadVersion(c.Bucket, c.Key, c.UploadID, c.Parts, c.MinPart, c.Version, c.ModTime,
		func(o *object.Object, _ []*object.Object) error {
			o.ChecksumAlgo, o.Checksum, o.ChecksumType = c.Final.ChecksumAlgo, c.Final.Checksum, c.Final.ChecksumType
			o.PartChecksums = c.Final.PartChecksums
			o.Versioned = c.Final.Versioned
			if c.Final.SSE.Encrypted() {
				o.SSE = c.Final.SSE // the upload's, with the object's plaintext size
			}
			return nil
		})
}

// EndUpload implements Replica.
func (l *Local) EndUpload(ctx context.Context, e *object.UploadEnd) error {
	if err := l.ensure(e.Bucket); err != nil {
		return err
	}
	return l.Store.EndUpload(e)
}

// ListUploads implements Replica.
func (l *Local) ListUploads(ctx context.Context, bucket string, opts object.UploadListOptions) (*object.UploadList, error) {
	if err := l.ensure(bucket); err != nil {
		return nil, err
	}
	return l.Store.ListUploads(bucket, opts)
}

// Digests implements Replica.
func (l *Local) Digests(ctx context.Context, partitions int, parts []int) ([]uint64, error) {
	if partitions <= 0 {
		return nil, errors.E(errors.Invalid, "no partitions")
	}
	all, err := Digests(l.Store, partitions, nil)
	if err != nil {
		return nil, err
	}
	out := make([]uint64, len(parts))
	for i, p := range parts {
		if p >= 0 && p < partitions {
			out[i] = all[p]
		}
	}
	return out, nil
}

// Scan implements Replica.
func (l *Local) Scan(ctx context.Context, partitions int, parts []int, fn func(object.VersionEntry)) error {
	if partitions <= 0 {
		return errors.E(errors.Invalid, "no partitions")
	}
	want := make([]bool, partitions)
	for _, p := range parts {
		if p >= 0 && p < partitions {
			want[p] = true
		}
	}
	keep := func(b, k string) bool { return !store.Internal(b) && want[placement.Partition(b, k, partitions)] }
	each := func(e object.VersionEntry) error { fn(e); return ctx.Err() }
	if err := l.Store.Scan(keep, each); err != nil {
		return err
	}
	return l.Store.ScanVersions(keep, each)
}

// Digests returns a digest of the versions st holds (internal buckets aside) in each of
// the partitions of a map with the given partition count (zero for an empty partition),
// calling each, if set, for every record as well. A digest sums a hash of (bucket, key,
// version, deleted, and MetaHLC when set) over the partition's records, so two stores holding the same versions
// have equal digests whatever their order, and one differing record changes it: a
// one-level hash tree over the partition's metadata.
func Digests(st *store.Store, partitions int, each func(p int, e object.VersionEntry)) ([]uint64, error) {
	d := make([]uint64, partitions)
	add := func(e object.VersionEntry) error {
		p := placement.Partition(e.Bucket, e.Key, partitions)
		d[p] += entryHash(e)
		if each != nil {
			each(p, e)
		}
		return nil
	}
	if err := st.Scan(notInternal, add); err != nil {
		return d, err
	}
	return d, st.ScanVersions(notInternal, add)
}

// notInternal keeps the records of S3 buckets: anti-entropy compares those; the
// internal buckets (erasure-code shards) have placement rules of their own.
func notInternal(bucket, _ string) bool { return !store.Internal(bucket) }

// entryHash is FNV-1a over the record's identity and version, finished with a 64-bit
// mixer so that sums of hashes stay well spread.
func entryHash(e object.VersionEntry) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for i := 0; i < len(e.Bucket); i++ {
		h = (h ^ uint64(e.Bucket[i])) * prime
	}
	h = (h ^ 0xff) * prime
	for i := 0; i < len(e.Key); i++ {
		h = (h ^ uint64(e.Key[i])) * prime
	}
	v := e.HLC << 1
	if e.Deleted {
		v |= 1
	}
	h ^= v * 0x9e3779b97f4a7c15
	if e.Versioned || e.DeleteMarker || e.Purged {
		// Only the records of versioned keys add their flags (not where they are: two
		// holders with the same records agree on which is current).
		f := uint64(0)
		if e.Versioned {
			f |= 1
		}
		if e.DeleteMarker {
			f |= 2
		}
		if e.Purged {
			f |= 4
		}
		h = (h ^ 0xfd) * prime
		h ^= f * 0x94d049bb133111eb
	}
	if e.MetaHLC != 0 {
		// Only records changed in place add to the hash, so the digests of every other
		// record are those of binaries from before in-place changes.
		h = (h ^ 0xfe) * prime
		h ^= e.MetaHLC * 0xc2b2ae3d27d4eb4f
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
