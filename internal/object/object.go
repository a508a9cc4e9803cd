// Package object holds the types that describe objects, buckets, multipart uploads and
// listings: what the S3 layer, the cluster gateway, the internode protocol and the storage
// engine say to each other. It is a leaf: it has no codecs (the engine's on-disk record
// codec is in package store, the internode wire codec in package wire) and no behaviour
// beyond small helpers on the types.
package object

import (
	"fmt"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
)

// ChunkID names a chunk of a body in the engine's segment files.
type ChunkID [16]byte

// String returns the id in hex.
func (id ChunkID) String() string { return fmt.Sprintf("%x", id[:]) }

// Object is the metadata of one object version (or of one multipart part, or of a pending
// multipart upload, which reuse the same record).
type Object struct {
	VersionID [16]byte
	// HLC is the version's hybrid-logical-clock timestamp (package hlc): across the
	// replicas of an object the record with the largest HLC wins.
	HLC     uint64
	Size    int64
	ModTime int64 // Unix nanoseconds
	// Deleted marks a tombstone: the object was deleted at HLC. Tombstones keep a newer
	// delete from losing to an older write that reaches a replica late; they have no body.
	Deleted bool
	ETag    string
	// Standard headers stored and returned as given.
	ContentType        string
	ContentEncoding    string
	ContentDisposition string
	ContentLanguage    string
	CacheControl       string
	Expires            string
	StorageClass       string
	// UserMeta holds x-amz-meta-* pairs (names lower case, without the prefix), sorted.
	UserMeta [][2]string
	// ChecksumAlgo and Checksum are the S3 flexible checksum (e.g. "CRC32C" and its base64).
	ChecksumAlgo string
	Checksum     string
	ChecksumType string // FULL_OBJECT or COMPOSITE
	// Inline reports that the body is stored in the index, not in chunks: in Body if it
	// is embedded in the record itself (small bodies: one lookup serves a GET), else under
	// its own key.
	Inline bool
	// Body is the embedded body of a small object (nil otherwise). Unmarshal makes it a
	// sub-slice of its input: copy it to keep it longer than the input.
	Body []byte
	// Embedded reports that Body holds the whole body.
	Embedded bool
	// Chunks lists the body's chunks in order (empty when Inline).
	Chunks []Chunk
	// PartSizes lists the part sizes of an object made by a multipart upload.
	PartSizes []int64
	// PartChecksums lists the parts' checksums (of algorithm ChecksumAlgo, base64), in
	// part order, for an object made by a multipart upload with checksums; nil otherwise.
	PartChecksums []string `json:"PartChecksums,omitempty"` // omitted: end records stay as older binaries wrote them
	// Striped marks the record of an erasure-coded object: its bytes are not here but in
	// stripes of Stripe.Size bytes, each cut into Stripe.K data and Stripe.M parity
	// shards stored on other nodes (package gateway). Size is the object's size; the
	// record has no body.
	Striped bool
	Stripe  Stripe
	// Tags is the object's tag set (S3 object tagging), sorted by key, keys unique.
	// (omitempty: upload end records hold an Object as JSON, whose bytes stay those of
	// binaries from before tagging for a record without tags.)
	Tags [][2]string `json:"Tags,omitempty"`
	// MetaHLC is the HLC of the last change of this version's metadata that did not
	// make a new version (a tagging update); 0 if there was none. Records are ordered by
	// (HLC, MetaHLC): see Newer.
	MetaHLC uint64 `json:"MetaHLC,omitempty"`
}

// Newer reports whether o is a newer record than p (nil is older than any record): a
// newer version whatever its MetaHLC, or the same version with a later metadata change.
// The version (HLC) names the body, its chunks and shards; MetaHLC orders only the
// changes of metadata made to one version in place (tagging), which never make a new
// version.
func (o *Object) Newer(p *Object) bool {
	if o == nil {
		return false
	}
	if p == nil {
		return true
	}
	return o.HLC > p.HLC || (o.HLC == p.HLC && o.MetaHLC > p.MetaHLC)
}

// MetaUpdate changes the metadata of one version of an object in place, without a new
// version: it applies to a holder's record only if that record is Version, and only if
// its MetaHLC is older than MetaHLC.
type MetaUpdate struct {
	Bucket, Key string
	Version     uint64 // the HLC of the version to change
	MetaHLC     uint64 // the HLC of this change, from the coordinator's clock
	Tags        [][2]string
}

// Stripe is the layout of a striped object.
type Stripe struct {
	K    int   `json:"k"`
	M    int   `json:"m"`
	Size int64 `json:"size"` // bytes of object data per stripe (K shards)
	// Upload and Parts are set for an object made by a multipart upload: each part was
	// striped on its own (its stripes are named by the upload and part number), and
	// PartSizes gives the parts' sizes.
	Upload string `json:"upload,omitempty"`
	Parts  []int  `json:"parts,omitempty"`
}

// BodySize is the number of body bytes the record's store holds: Size, or zero for a
// striped object.
func (o *Object) BodySize() int64 {
	if o.Striped {
		return 0
	}
	return o.Size
}

// Chunk is one piece of a body, stored by the engine as a segment record.
type Chunk struct {
	ID   ChunkID
	Size uint32
}

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

// VersionEntry is one object record as Scan reports it: enough to compare replicas.
type VersionEntry struct {
	Bucket  string
	Key     string
	HLC     uint64
	MetaHLC uint64 // the record's last in-place metadata change (Object.MetaHLC)
	Deleted bool
	Size    int64
	Striped bool // an erasure-coded object's record (Size is the object's)
}

// Upload is a pending multipart upload.
type Upload struct {
	Key       string
	UploadID  string
	Initiated time.Time
	Meta      *Object
}

// Part is an uploaded part: its record holds size, ETag, checksum and chunks.
type Part struct {
	Number int
	*Object
}

// CompletePart names a part in a CompleteMultipartUpload request.
type CompletePart struct {
	Number int
	ETag   string // hex MD5, without quotes
}

// UploadListOptions selects uploads in ListUploads.
type UploadListOptions struct {
	Prefix, Delimiter       string
	KeyMarker, UploadMarker string
	Max                     int
}

// UploadList is a page of uploads.
type UploadList struct {
	Uploads        []Upload
	CommonPrefixes []string
	Truncated      bool
	NextKey        string
	NextUpload     string
}

// Upload end states.
const (
	UploadCompleted = "completed"
	UploadAborted   = "aborted"
)

// UploadEnd records how an upload ended.
type UploadEnd struct {
	Bucket   string `json:"bucket"`
	Key      string `json:"key"`
	UploadID string `json:"upload_id"`
	State    string `json:"state"` // UploadCompleted or UploadAborted
	// Parts is the completion's part list (completed only), in order, ETags unquoted.
	Parts []CompletePart `json:"parts,omitempty"`
	// Result is the record the completion wrote, without its body and chunks: its HLC,
	// ETag, size and checksums answer a retried completion.
	Result *Object `json:"result,omitempty"`
	Ended  int64   `json:"ended"` // unix nanoseconds
}

// SameParts reports whether list is the part list the upload was completed with.
func (e *UploadEnd) SameParts(list []CompletePart) bool {
	if e.State != UploadCompleted || len(list) != len(e.Parts) {
		return false
	}
	for i, p := range list {
		if p.Number != e.Parts[i].Number || !strings.EqualFold(strings.Trim(p.ETag, `"`), strings.Trim(e.Parts[i].ETag, `"`)) {
			return false
		}
	}
	return true
}

// PendingUpload names a pending upload, for anti-entropy.
type PendingUpload struct {
	Bucket, Key, UploadID string
	Initiated             time.Time
}

// PutOptions adjusts a write.
type PutOptions struct {
	// IfNoneMatch makes the write fail with Precondition if the object exists.
	IfNoneMatch bool
	// IfMatch, if set, is an If-Match header's list of ETags: the write fails with
	// Precondition unless the object's ETag is one of them ("*": any), NotExist if there
	// is no object. Evaluated by the gateway (conditional writes), not by a store.
	IfMatch string
	// Finish, if set, is called after the whole body has been read and made durable but
	// before the object is committed. It may fill in o (ETag, checksums) and veto the
	// write by returning an error, in which case nothing is stored.
	Finish func(o *Object) error
	// Version, if non-zero, is the HLC timestamp of this version, chosen by the cluster
	// gateway that coordinates the write (otherwise the store's clock assigns one). The
	// write takes effect only if the stored record (object or tombstone) is older; if it
	// is newer, the write is dropped and PutObject returns the newer record.
	Version uint64
	// Repair also replaces a stored record of the same Version: a copy of that version
	// fetched from another replica replaces a local one that failed its checksum.
	Repair bool
}

// Bucket describes a bucket.
type Bucket struct {
	Name    string
	Created time.Time
	// Config holds the bucket's S3 configurations by kind (the sub-resource that sets
	// them: "cors", "tagging"), each the document the S3 layer stored; nil if none.
	// It is shared: do not modify it.
	Config map[string]string
	// Owner is the user who created the bucket; empty for the root user.
	Owner string
}

// PartsPage is what one replica holds of a multipart upload: the upload's record and a
// page of its parts, or, for an upload that ended there, only its end record.
type PartsPage struct {
	Upload    *Object
	Parts     []Part
	Truncated bool
	End       *UploadEnd
}
