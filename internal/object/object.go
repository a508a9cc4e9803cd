// Package object holds the types that describe objects, buckets, multipart uploads and
// listings: what the S3 layer, the cluster gateway, the internode protocol and the storage
// engine say to each other. It is a leaf: it has no codecs (the engine's on-disk record
// codec is in package store, the internode wire codec in package wire) and no behaviour
// beyond small helpers on the types.
package object

import (
	"fmt"
	"strconv"
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
	// Deleted marks a record without a body that is not an object: a tombstone (the
	// key's null version was deleted at HLC; it keeps a newer delete from losing to an
	// older write that reaches a replica late), a delete marker (DeleteMarker) or the
	// record of a version removed for good (Purged).
	Deleted bool
	// Versioned marks a version written while the bucket's versioning was enabled: it is
	// kept beside the key's other versions and its S3 version id is its own (VersionID
	// of package s3api derives it from HLC). A record without it is the key's null
	// version: a newer null version (or a tombstone) replaces it. A bucket that never had
	// versioning enabled holds only null versions. See docs/design/versioning.md.
	Versioned bool `json:"Versioned,omitempty"`
	// DeleteMarker (with Deleted) marks a delete marker: a version that says the key was
	// deleted. Unlike a tombstone it is listed among the key's versions.
	DeleteMarker bool `json:"DeleteMarker,omitempty"`
	// Purged (with Deleted and Versioned) records that version HLC was removed for good
	// (DELETE with its version id): a copy of that version arriving late (hinted retry,
	// anti-entropy) is dropped instead of coming back.
	Purged bool `json:"Purged,omitempty"`
	ETag   string
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
	// Mutable marks a mutable object (a block volume's data object): written in place a
	// range at a time (package store's WriteRange), its HLC is its write order, not a
	// time (docs/design/volumes.md). Its body is whole on every replica that has it.
	Mutable bool `json:"Mutable,omitempty"`
	// Tags is the object's tag set (S3 object tagging), sorted by key, keys unique.
	// (omitempty: upload end records hold an Object as JSON, whose bytes stay those of
	// binaries from before tagging for a record without tags.)
	Tags [][2]string `json:"Tags,omitempty"`
	// MetaHLC is the HLC of the last change of this version's metadata that did not
	// make a new version (a tagging update); 0 if there was none. Records are ordered by
	// (HLC, MetaHLC): see Newer.
	MetaHLC uint64 `json:"MetaHLC,omitempty"`
	// TagsHLC, RetentionHLC and HoldHLC order the in-place changes of each group of
	// metadata (tags, Object Lock retention, legal hold) on their own, so that concurrent
	// changes of different groups do not undo each other; zero is the state the version
	// was created with. MetaHLC is the newest of them. Normalize fills TagsHLC in for
	// records from before Object Lock.
	TagsHLC      uint64 `json:"TagsHLC,omitempty"`
	RetentionHLC uint64 `json:"RetentionHLC,omitempty"`
	HoldHLC      uint64 `json:"HoldHLC,omitempty"`
	// Retention and LegalHold are the version's Object Lock state (docs/design/object-lock.md).
	Retention Retention `json:"Retention,omitzero"`
	LegalHold bool      `json:"LegalHold,omitempty"`
	// Owner is the user who owns the version when that is not the bucket's owner: its
	// writer, where the bucket's Object Ownership let the writer own it when it was
	// written (docs/design/acl.md). Empty: the bucket's owner (and every record from
	// before ACLs).
	Owner string `json:"Owner,omitempty"`
	// ACL is the version's access control list in the form the S3 layer encodes it
	// (docs/design/acl.md); empty is the default, private: the owner only. ACLHLC orders
	// its in-place changes like TagsHLC the tags (zero: as created).
	ACL    string `json:"ACL,omitempty"`
	ACLHLC uint64 `json:"ACLHLC,omitempty"`
	// SSE says how the stored body is encrypted (server-side encryption); the zero value
	// is a plaintext body. Size, Chunks, PartSizes and the stripes are those of the stored
	// (encrypted) bytes; SSE.PlainSize is the size a client sees. It is set when the
	// version is written and never changes.
	SSE Encryption `json:"SSE,omitzero"`
	// Bypass is a request flag, never stored: a purge or a retention change may override
	// a GOVERNANCE retention (x-amz-bypass-governance-retention).
	Bypass bool `json:"-"`
	// Restore is the x-amz-restore value a HEAD answers, never stored: the gateway sets it
	// for an archived version of a restore-mode tier being restored (docs/design/tiering.md).
	Restore string `json:"-"`
	// Origin is a request flag, never stored: the id of the linked cluster a replicated
	// change came from (docs/design/mdc.md "Loops"), which the holders stack with its
	// link entries so that no link sends the change back to that cluster. Empty for a
	// change made here.
	Origin string `json:"-"`
}

// Encryption is how a version's body is encrypted at rest (docs/design/sse.md). The S3
// layer encrypts before the body reaches the coordinator, so every store, replica and
// shard holds only ciphertext; nothing below the S3 layer reads these fields.
type Encryption struct {
	// Algorithm is the S3 server-side encryption of the version: "AES256" (SSE-S3, a
	// data key sealed by a master key) or "SSE-C" (a key the client sends with every
	// request); "" for none.
	Algorithm string `json:"algo,omitempty"`
	// KeyID names the master key that sealed SealedKey (SSE-S3).
	KeyID string `json:"kid,omitempty"`
	// SealedKey is the version's data key, sealed (by the master key KeyID, or by the
	// client's key for SSE-C).
	SealedKey []byte `json:"key,omitempty"`
	// KeyMD5 is the base64 MD5 of the client's key (SSE-C), checked on every request.
	KeyMD5 string `json:"kmd5,omitempty"`
	// PlainSize is the size of the plaintext: what S3 reports as the object's size.
	PlainSize int64 `json:"psize,omitempty"`
}

// IsZero says whether e is the zero value (no encryption recorded).
func (e Encryption) IsZero() bool {
	return e.Algorithm == "" && e.KeyID == "" && len(e.SealedKey) == 0 && e.KeyMD5 == "" && e.PlainSize == 0
}

// Encrypted says whether the body is stored encrypted.
func (e Encryption) Encrypted() bool { return e.Algorithm != "" }

// Object Lock retention modes.
const (
	LockGovernance = "GOVERNANCE"
	LockCompliance = "COMPLIANCE"
)

// Retention is an Object Lock retention: the version cannot be removed before Until
// (Unix nanoseconds); in GOVERNANCE mode a user allowed to bypass it can, in COMPLIANCE
// mode nobody. The zero value is none.
type Retention struct {
	Mode  string `json:"mode,omitempty"`
	Until int64  `json:"until,omitempty"`
}

// ErrLocked is the error of a removal (or a retention change) that Object Lock forbids.
var ErrLocked = errors.New("the version is protected by Object Lock")

// Locked reports whether Object Lock forbids removing version o at now (Unix
// nanoseconds): a legal hold, or a retention that has not expired (a GOVERNANCE one only
// without bypass).
func (o *Object) Locked(now int64, bypass bool) bool {
	if o == nil {
		return false
	}
	if o.LegalHold {
		return true
	}
	if o.Retention.Until <= now {
		return false
	}
	return o.Retention.Mode == LockCompliance || (o.Retention.Mode == LockGovernance && !bypass)
}

// RetentionChangeAllowed reports whether a retention r may replace cur's at now: a
// version once under COMPLIANCE stays under COMPLIANCE (its mode never changes, even after
// the date passed: replicas merge COMPLIANCE retentions by their latest date, whatever
// order they learn them in), and one in force may only be kept or extended; a GOVERNANCE
// one in force may be extended, and shortened, removed, made COMPLIANCE or otherwise
// changed only with bypass (S3 answers a change of mode without it AccessDenied).
func RetentionChangeAllowed(cur, r Retention, now int64, bypass bool) bool {
	extends := r.Until >= cur.Until
	if cur.Mode == LockCompliance {
		return r.Mode == LockCompliance && (extends || cur.Until <= now)
	}
	if cur.Until <= now || cur.Mode == "" {
		return true
	}
	switch cur.Mode {
	case LockGovernance:
		return bypass || (extends && r.Mode == LockGovernance)
	}
	return true
}

// Normalize fills in TagsHLC for a record from before Object Lock, whose MetaHLC was
// the HLC of its tags.
func (o *Object) Normalize() {
	if o.TagsHLC == 0 && o.RetentionHLC == 0 && o.HoldHLC == 0 && o.ACLHLC == 0 {
		o.TagsHLC = o.MetaHLC
	}
}

// MergeMeta gives o, a record of the same version as src, each group of in-place
// metadata (tags, retention, legal hold, ACL) from whichever of the two changed it last; a
// COMPLIANCE retention on either side is kept, with the later of the two dates, so that
// merges in any order never shorten one. It reports whether o changed.
func (o *Object) MergeMeta(src *Object) bool {
	o.Normalize()
	s := *src
	s.Normalize()
	changed := false
	if s.TagsHLC > o.TagsHLC {
		o.Tags, o.TagsHLC, changed = s.Tags, s.TagsHLC, true
	}
	if r := mergeRetention(o.Retention, o.RetentionHLC, s.Retention, s.RetentionHLC); r != o.Retention || s.RetentionHLC > o.RetentionHLC {
		o.Retention, changed = r, true
		o.RetentionHLC = max(o.RetentionHLC, s.RetentionHLC)
	}
	if s.HoldHLC > o.HoldHLC {
		o.LegalHold, o.HoldHLC, changed = s.LegalHold, s.HoldHLC, true
	}
	if s.ACLHLC > o.ACLHLC {
		o.ACL, o.ACLHLC, changed = s.ACL, s.ACLHLC, true
	}
	if s.MetaHLC > o.MetaHLC {
		o.MetaHLC, changed = s.MetaHLC, true
	}
	return changed
}

// mergeRetention merges two retentions of one version: if either is COMPLIANCE, the
// COMPLIANCE one with the later date (a GOVERNANCE one is then not kept: a version under
// COMPLIANCE never goes back to GOVERNANCE, RetentionChangeAllowed); else the one changed
// last. Both parts are joins (a maximum), so merges in any order agree.
func mergeRetention(a Retention, ah uint64, b Retention, bh uint64) Retention {
	switch {
	case a.Mode == LockCompliance && b.Mode == LockCompliance:
		return Retention{LockCompliance, max(a.Until, b.Until)}
	case a.Mode == LockCompliance:
		return a
	case b.Mode == LockCompliance:
		return b
	case bh > ah:
		return b
	}
	return a
}

// Visible reports whether the record is a version S3 shows: an object or a delete
// marker, not a tombstone or a purge record.
func (o *Object) Visible() bool { return !o.Deleted || o.DeleteMarker }

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
	// The groups changed, each with its HLC (zero: not changed). An update with none
	// (from a binary before Object Lock) changes the tags at MetaHLC.
	Tags         [][2]string
	TagsHLC      uint64
	Retention    Retention
	RetentionHLC uint64
	LegalHold    bool
	HoldHLC      uint64
	ACL          string
	ACLHLC       uint64
	// Bypass allows shortening a GOVERNANCE retention (RetentionChangeAllowed).
	Bypass bool
}

// Record returns the groups u changes as a record of the version, for MergeMeta.
func (u *MetaUpdate) Record() *Object {
	o := &Object{HLC: u.Version, MetaHLC: u.MetaHLC, Tags: u.Tags, TagsHLC: u.TagsHLC, Retention: u.Retention,
		RetentionHLC: u.RetentionHLC, LegalHold: u.LegalHold, HoldHLC: u.HoldHLC, ACL: u.ACL, ACLHLC: u.ACLHLC}
	o.Normalize()
	return o
}

// MetaUpdateOf is the update that gives another holder's record of the version every
// group of in-place metadata o has.
func MetaUpdateOf(bucket, key string, o *Object) MetaUpdate {
	n := *o
	n.Normalize()
	return MetaUpdate{Bucket: bucket, Key: key, Version: n.HLC, MetaHLC: n.MetaHLC, Tags: n.Tags, TagsHLC: n.TagsHLC,
		Retention: n.Retention, RetentionHLC: n.RetentionHLC, LegalHold: n.LegalHold, HoldHLC: n.HoldHLC, ACL: n.ACL, ACLHLC: n.ACLHLC}
}

// Covers reports whether record o holds every group u changes, at u's HLC or later.
func (u *MetaUpdate) Covers(o *Object) bool {
	n := *o
	n.Normalize()
	r := u.Record()
	return (r.TagsHLC == 0 || n.TagsHLC >= r.TagsHLC) && (r.RetentionHLC == 0 || n.RetentionHLC >= r.RetentionHLC) &&
		(r.HoldHLC == 0 || n.HoldHLC >= r.HoldHLC) && (r.ACLHLC == 0 || n.ACLHLC >= r.ACLHLC)
}

// RangeWrite is one in-place write of a mutable object (Object.Mutable), as a volume's
// writer sends it to each holder (docs/design/volumes.md).
type RangeWrite struct {
	Bucket, Key string
	// Size is the object's size, fixed when it is created (by its first write).
	Size int64
	// Off and Data: the bytes written. Nil Data writes Len zeroes (TRIM, WRITE_ZEROES):
	// the range becomes a hole.
	Off  int64
	Data []byte
	Len  int64
	// Prev is the write order the object must be at (0: it must not exist, or be
	// deleted before Next); Next the order it is left at.
	Prev, Next uint64
	// Unsynced asks the holder to answer once the write is in its volume journal, before
	// it is synced (a replicated volume's write without FUA; the writer's FLUSH syncs the
	// journal: store.SyncJournal). A holder without a journal syncs it as any write.
	Unsynced bool
}

// Length is the number of bytes w writes.
func (w *RangeWrite) Length() int64 {
	if w.Data != nil {
		return int64(len(w.Data))
	}
	return w.Len
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
	ErrNoSuchVersion    = errors.New("the specified version does not exist")
	ErrInvalidPart      = errors.New("one or more of the specified parts could not be found or its entity tag did not match")
	ErrInvalidPartOrder = errors.New("the list of parts was not in ascending order")
	ErrEntityTooSmall   = errors.New("a part is smaller than the minimum allowed size")
	// ErrInvalidObjectState: a GET of an archived version of a restore-mode tier
	// (docs/design/tiering.md), or a RestoreObject of a version that is not archived.
	ErrInvalidObjectState = errors.New("the operation is not valid for the object's storage class")
	// ErrRestoreInProgress: a RestoreObject of a version being restored already.
	ErrRestoreInProgress = errors.New("object restore is already in progress")
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

// DeleteMarkerError is the error of a read that found a delete marker: the key's
// current version (Current: S3 answers NoSuchKey) or the version asked for (S3 answers
// MethodNotAllowed). Marker is the marker's record.
type DeleteMarkerError struct {
	Marker  *Object
	Current bool
}

func (e *DeleteMarkerError) Error() string {
	if e.Current {
		return "the key's current version is a delete marker"
	}
	return "the version is a delete marker"
}

// Unwrap makes a current delete marker ErrNoSuchKey.
func (e *DeleteMarkerError) Unwrap() error {
	if e.Current {
		return ErrNoSuchKey
	}
	return nil
}

// VersionListOptions selects the entries of a listing of versions.
type VersionListOptions struct {
	Prefix, Delimiter string
	// KeyMarker lists only keys after it, or, with VersionMarker (an HLC) or AfterNull,
	// the versions of KeyMarker older than that version (or its null version) and then
	// the keys after it.
	KeyMarker     string
	VersionMarker uint64
	AfterNull     bool
	// Max is the largest number of versions plus common prefixes to return.
	Max int
	// Hidden includes tombstones and purge records, for a gateway merging replicas.
	Hidden bool
}

// VersionListEntry is one version in a listing.
type VersionListEntry struct {
	Key    string
	Object *Object
	// Current: the record is its holder's current record of the key.
	Current bool
}

// VersionList is a page of versions: keys in order, each key's versions newest first.
type VersionList struct {
	Versions       []VersionListEntry
	CommonPrefixes []string
	// Truncated reports that more entries follow; NextKey and NextVersion (an HLC, 0
	// after a common prefix; NextNull if that version is the null version) are the last
	// entry returned, to pass as KeyMarker and VersionMarker for the next page.
	Truncated   bool
	NextKey     string
	NextVersion uint64
	NextNull    bool
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
	// Noncurrent marks a record that is not the key's current one: an older version of a
	// versioned key, a delete marker behind a newer version, or a purge record.
	Noncurrent bool `json:"nc,omitempty"`
	// Versioned, DeleteMarker and Purged are the record's flags (Object).
	Versioned    bool `json:"v,omitempty"`
	DeleteMarker bool `json:"dm,omitempty"`
	Purged       bool `json:"p,omitempty"`
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

// TierLayout starts the Stripe.Upload tag of an archived version's record (a stub,
// docs/design/tiering.md): its bytes are not on this cluster's nodes but in an archive
// tier, under the key after the tier's name ("tier:<tier>:<key in the tier>"). The record
// is a striped one of one shard and no parity (no body here, Size the object's), so a
// build that does not know stubs finds no shards and fails the read, never serving
// other bytes.
const TierLayout = "tier:"

// TierStub returns the stripe layout of a stub of a size-byte object kept in tier under
// key.
func TierStub(tier, key string, size int64) Stripe {
	return Stripe{K: 1, Size: max(size, 1), Upload: TierLayout + tier + ":" + key}
}

// TierRef returns the tier and the key in it of an archived version's record; ok is false
// for any other record.
func (o *Object) TierRef() (tier, key string, ok bool) {
	if !o.Striped || !strings.HasPrefix(o.Stripe.Upload, TierLayout) {
		return "", "", false
	}
	tier, key, ok = strings.Cut(o.Stripe.Upload[len(TierLayout):], ":")
	return tier, key, ok && tier != "" && key != ""
}

// RestoredPrefix starts the keys, in the cluster's tier bucket (clustermap.TierBucket),
// of the temporary copies RestoreObject makes of versions archived in a restore-mode
// tier: RestoredKey. No tier's name starts with '_', so no tier's copies share it.
const RestoredPrefix = "_restored/"

// RestoreExpiryMeta is the user-metadata key of a restored copy that holds when it
// expires (unix seconds).
const RestoreExpiryMeta = "cairn-restore-expiry"

// RestoredKey is the tier-bucket key of the restored copy of version v of bucket/key.
func RestoredKey(bucket, key string, v uint64) string {
	return fmt.Sprintf("%s%s/%016x/%s", RestoredPrefix, bucket, v, key)
}

// RestoreExpiry returns when the restored copy o expires; false if o has no expiry.
func RestoreExpiry(o *Object) (time.Time, bool) {
	for _, kv := range o.UserMeta {
		if kv[0] == RestoreExpiryMeta {
			if sec, err := strconv.ParseInt(kv[1], 10, 64); err == nil {
				return time.Unix(sec, 0).UTC(), true
			}
		}
	}
	return time.Time{}, false
}

// Tiered reports whether o is an archived version's record (a stub).
func (o *Object) Tiered() bool {
	_, _, ok := o.TierRef()
	return ok
}
