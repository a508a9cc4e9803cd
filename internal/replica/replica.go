// Package replica is the seam between a coordinator and one holder of an object: the
// Replica interface (what a gateway asks of a node's store: writes with the coordinator's
// versions, reads and ranges, records, tombstones, multipart uploads, listings, digests
// and scans of partitions), its two implementations (Local over this node's store, Remote
// over the internode protocol of package wire), the Handler that serves a Local to the
// other nodes, the read leases a holder grants gateways' object caches and revokes before
// every change of the key (ReadLeases, readlease.go), and Faulty, a wrapper that injects
// delays, errors, hangs, cut bodies and partitions for tests. Package replicatest is the conformance suite every
// implementation passes.
package replica

import (
	"context"
	"io"
	"sync"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/wire"
)

// Replica is one holder of objects, as a coordinator sees it. Errors carry the kinds of
// package errors (NotExist with object.ErrNoSuchKey and the other sentinels, Precondition,
// Transient for a holder that cannot be reached, ...), the same from every implementation.
type Replica interface {
	// ID names the holder (its node id).
	ID() string
	// Put writes an object version, or a part of a multipart upload (w.Part > 0), and
	// returns the record the holder keeps: a newer record than w.Version if it has one
	// (the write was dropped).
	Put(ctx context.Context, w Write) (*object.Object, error)
	// Open opens the holder's current version of bucket/key, or, if o.Version is set,
	// that version, current or not (a delete marker opens as its record, with no body); a
	// version it lacks is Precondition if the key has a current record, else NotExist. A
	// striped object's record has no body.
	Open(ctx context.Context, bucket, key string, o OpenOptions) (Reader, error)
	// Stat returns the holder's record of bucket/key, tombstones included, without the
	// embedded body of a small object (Body nil: read it with Open).
	Stat(ctx context.Context, bucket, key string) (*object.Object, error)
	// Delete writes a record without a body at version d.HLC (d.ModTime: its time, Unix
	// nanoseconds): a tombstone, or with d's flags a delete marker (d.DeleteMarker) or
	// the purge of version d.HLC (d.Purged). It returns the record the holder keeps.
	Delete(ctx context.Context, bucket, key string, d object.Object) (*object.Object, error)
	// UpdateMeta changes the metadata (tags) of the holder's record in place, if that
	// record is version u.Version and its MetaHLC is older than u.MetaHLC, and returns the
	// record it holds afterwards, whichever it is: the caller compares it with u (see
	// UpdateOutcome). A key the holder has no record of is a NotExist error.
	UpdateMeta(ctx context.Context, u object.MetaUpdate) (*object.Object, error)
	// List returns a page of a bucket's records, tombstones included.
	List(ctx context.Context, bucket string, opts object.ListOptions) (*object.ListResult, error)
	// ListVersions returns a page of a bucket's versions, tombstones and purge records
	// included.
	ListVersions(ctx context.Context, bucket string, opts object.VersionListOptions) (*object.VersionList, error)

	// CreateUpload starts a multipart upload with the coordinator's id.
	CreateUpload(ctx context.Context, bucket, key, uploadID string, meta *object.Object) error
	// Parts returns the upload's record and a page of its parts, or only its end record if
	// it ended on this holder.
	Parts(ctx context.Context, bucket, key, uploadID string, after, max int) (*object.PartsPage, error)
	// Complete commits an upload as an object version.
	Complete(ctx context.Context, c Completion) (*object.Object, error)
	// EndUpload applies an upload's end record: the upload and its parts go, the record
	// stays.
	EndUpload(ctx context.Context, e *object.UploadEnd) error
	// ListUploads returns a page of a bucket's pending uploads.
	ListUploads(ctx context.Context, bucket string, opts object.UploadListOptions) (*object.UploadList, error)

	// Digests returns a digest of the holder's versions in each of parts, for a map of
	// the given partition count (see Digests).
	Digests(ctx context.Context, partitions int, parts []int) ([]uint64, error)
	// Scan calls fn with every record the holder has in parts: current records
	// (tombstones included) and the noncurrent records of versioned keys.
	Scan(ctx context.Context, partitions int, parts []int, fn func(object.VersionEntry)) error
}

// Write is one replica write.
type Write struct {
	Bucket, Key string
	// Meta describes the object (object writes; a part's record is the holder's own).
	Meta *object.Object
	Body io.Reader
	Size int64 // body length; -1 if unknown
	// Version is the HLC of the version, chosen by the coordinator (object writes).
	Version uint64
	// UploadID and Part name a multipart part (Part > 0).
	UploadID string
	Part     int
	// FinalNow is the coordinator's final metadata (ETag, checksums) if it is known before
	// the body is sent (a body it holds in memory); otherwise Final returns it once Body
	// has returned EOF, and nil if the coordinator abandoned the write (nothing is kept).
	FinalNow *object.Object
	Final    func() *object.Object
	// Repair replaces a record of the same version (a rewrite into another layout, a good
	// copy over a damaged one); IfAbsent stores only if the key holds nothing (a shard on
	// a free node).
	Repair, IfAbsent bool

	enc *encodedMeta // see SharedEncoding
}

// SharedEncoding returns w with a cache of the wire encoding of its Meta and FinalNow,
// shared by every copy of the Write made from it: a coordinator sending one body it holds
// in memory to several holders encodes the metadata once, not once per holder. Meta and
// FinalNow must not change afterwards.
func (w Write) SharedEncoding() Write {
	w.enc = new(encodedMeta)
	return w
}

// encodedMeta is the wire encoding of a Write's Meta and FinalNow, made once.
type encodedMeta struct {
	once        sync.Once
	meta, final string
}

// encoded returns the wire encoding of w.Meta (of an object write) and w.FinalNow (""
// for nil ones).
func (w *Write) encoded() (meta, final string) {
	enc := func() (string, string) {
		var m, f string
		if w.Meta != nil && w.Part == 0 {
			m = wire.EncodeMeta(w.Meta)
		}
		if w.FinalNow != nil {
			f = wire.EncodeMeta(w.FinalNow)
		}
		return m, f
	}
	if w.enc == nil {
		return enc()
	}
	w.enc.once.Do(func() { w.enc.meta, w.enc.final = enc() })
	return w.enc.meta, w.enc.final
}

// BatchSize is the bytes w counts against a put batch's bound (MaxBatchData): its body
// and its encoded metadata.
func (w *Write) BatchSize() int {
	meta, final := w.encoded()
	return len(meta) + len(final) + int(max(w.Size, 0))
}

// final returns the coordinator's final metadata (nil: abandoned).
func (w *Write) final() *object.Object {
	if w.FinalNow != nil {
		return w.FinalNow
	}
	if w.Final == nil {
		return nil
	}
	return w.Final()
}

// Completion commits a multipart upload at a coordinator's version.
type Completion struct {
	Bucket, Key, UploadID string
	Parts                 []object.CompletePart
	MinPart               int64 // smallest size of a part but the last
	Version               uint64
	ModTime               int64
	// Final carries the checksum fields the coordinator computed from the parts.
	Final *object.Object
}

// OpenOptions select what Open reads.
type OpenOptions struct {
	// Version, if non-zero, is the version that must be read (Precondition otherwise).
	Version uint64
	// Off and N, if N > 0, are the range the caller will read first: a remote holder
	// sends just that range with its answer.
	Off, N int64
}

// Reader reads one object version.
type Reader interface {
	// Info is the object's record.
	Info() *object.Object
	// WriteRange writes n bytes from off to w; corrupt data is an error, never written.
	WriteRange(ctx context.Context, w io.Writer, off, n int64) (int64, error)
	Close() error
}

// Preparer is implemented by readers that can fetch the start of a range before the
// response's status is sent, so that a read that cannot start is answered with an error
// status rather than a 200 and a cut-off body.
type Preparer interface {
	Prepare(ctx context.Context, off, n int64) error
}

// CopyFinal copies the fields only the coordinator knows once the body is complete into a
// record being written.
func CopyFinal(dst, src *object.Object) {
	dst.ETag, dst.ChecksumAlgo, dst.Checksum, dst.ChecksumType = src.ETag, src.ChecksumAlgo, src.Checksum, src.ChecksumType
	if src.Striped && !dst.Striped && dst.Size == 0 {
		// A part of an erasure-coded upload: its bytes are shards elsewhere.
		dst.Striped, dst.Stripe, dst.Size = true, src.Stripe, src.Size
	}
}

// Outcomes of an UpdateMeta, as UpdateOutcome names them.
const (
	// MetaApplied: the holder's record is the version, with the update or a later one.
	MetaApplied = "applied"
	// MetaSuperseded: the holder has a newer version or a delete; the update is ordered
	// before it and has nothing left to change there.
	MetaSuperseded = "superseded"
	// MetaMissing: the holder lacks the version (it missed the write): repair brings it
	// the version with its metadata.
	MetaMissing = "missing"
)

// UpdateOutcome says what the record a holder answered to UpdateMeta(u) means (nil: the
// holder has no record of the key).
func UpdateOutcome(u object.MetaUpdate, rec *object.Object) string {
	switch {
	case rec == nil || rec.HLC < u.Version:
		return MetaMissing
	case rec.HLC > u.Version || rec.Deleted:
		return MetaSuperseded
	case u.Covers(rec):
		return MetaApplied
	}
	return MetaMissing // the version without the update: cannot happen on a conforming holder
}
