package wire

import (
	"encoding/json"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// Meta is an object record on the wire: what describes a version, not how a node lays it
// out (no body, chunk list, version id or inline flags: those are each store's business).
type Meta struct {
	HLC                uint64      `json:"hlc"`
	Size               int64       `json:"size"`
	ModTime            int64       `json:"mod,omitempty"`
	Deleted            bool        `json:"deleted,omitempty"`
	ETag               string      `json:"etag,omitempty"`
	ContentType        string      `json:"content_type,omitempty"`
	ContentEncoding    string      `json:"content_encoding,omitempty"`
	ContentDisposition string      `json:"content_disposition,omitempty"`
	ContentLanguage    string      `json:"content_language,omitempty"`
	CacheControl       string      `json:"cache_control,omitempty"`
	Expires            string      `json:"expires,omitempty"`
	StorageClass       string      `json:"storage_class,omitempty"`
	UserMeta           [][2]string `json:"user_meta,omitempty"`
	ChecksumAlgo       string      `json:"checksum_algo,omitempty"`
	Checksum           string      `json:"checksum,omitempty"`
	ChecksumType       string      `json:"checksum_type,omitempty"`
	PartSizes          []int64     `json:"part_sizes,omitempty"`
	Striped            bool        `json:"striped,omitempty"`
	Stripe             *Stripe     `json:"stripe,omitempty"`
	Tags               [][2]string `json:"tags,omitempty"`
	MetaHLC            uint64      `json:"meta_hlc,omitempty"`
	PartChecksums      []string    `json:"part_checksums,omitempty"`
	Versioned          bool        `json:"versioned,omitempty"`
	DeleteMarker       bool        `json:"marker,omitempty"`
	Purged             bool        `json:"purged,omitempty"`
	// Object Lock (absent from binaries before it; TagsHLC then is MetaHLC).
	TagsHLC      uint64 `json:"tags_hlc,omitempty"`
	LockMode     string `json:"lock_mode,omitempty"`
	LockUntil    int64  `json:"lock_until,omitempty"`
	RetentionHLC uint64 `json:"retention_hlc,omitempty"`
	LegalHold    bool   `json:"legal_hold,omitempty"`
	HoldHLC      uint64 `json:"hold_hlc,omitempty"`
	// Owner, ACL and encryption (absent from binaries before feature level 5, which
	// therefore never receive records with them: see object.Object).
	Owner  string             `json:"owner,omitempty"`
	ACL    string             `json:"acl,omitempty"`
	ACLHLC uint64             `json:"acl_hlc,omitempty"`
	SSE    *object.Encryption `json:"sse,omitempty"`
	// Mutable: a volume data object (object.Object.Mutable).
	Mutable bool `json:"mutable,omitempty"`
	// Origin: a write of a change replicated from a linked cluster names that cluster
	// (object.Object.Origin). A binary before it ignores it and stacks the change for
	// the link back too (the origin then skips the echo: docs/design/mdc.md "Loops").
	Origin string `json:"origin,omitempty"`
}

// Stripe is an erasure-coded object's layout on the wire.
type Stripe struct {
	K      int    `json:"k"`
	M      int    `json:"m"`
	Size   int64  `json:"size"`
	Upload string `json:"upload,omitempty"`
	Parts  []int  `json:"parts,omitempty"`
}

// MetaOf returns o's wire form (nil for nil).
func MetaOf(o *object.Object) *Meta {
	if o == nil {
		return nil
	}
	m := &Meta{HLC: o.HLC, Size: o.Size, ModTime: o.ModTime, Deleted: o.Deleted, ETag: o.ETag,
		ContentType: o.ContentType, ContentEncoding: o.ContentEncoding, ContentDisposition: o.ContentDisposition,
		ContentLanguage: o.ContentLanguage, CacheControl: o.CacheControl, Expires: o.Expires, StorageClass: o.StorageClass,
		UserMeta: o.UserMeta, ChecksumAlgo: o.ChecksumAlgo, Checksum: o.Checksum, ChecksumType: o.ChecksumType,
		PartSizes: o.PartSizes, Striped: o.Striped, Tags: o.Tags, MetaHLC: o.MetaHLC, PartChecksums: o.PartChecksums,
		Versioned: o.Versioned, DeleteMarker: o.DeleteMarker, Purged: o.Purged,
		TagsHLC: o.TagsHLC, LockMode: o.Retention.Mode, LockUntil: o.Retention.Until, RetentionHLC: o.RetentionHLC, LegalHold: o.LegalHold, HoldHLC: o.HoldHLC,
		Owner: o.Owner, ACL: o.ACL, ACLHLC: o.ACLHLC, Mutable: o.Mutable, Origin: o.Origin}
	if !o.SSE.IsZero() {
		e := o.SSE
		m.SSE = &e
	}
	if s := o.Stripe; s.K != 0 || s.M != 0 || s.Size != 0 || s.Upload != "" || len(s.Parts) > 0 {
		m.Stripe = &Stripe{K: s.K, M: s.M, Size: s.Size, Upload: s.Upload, Parts: s.Parts}
	}
	return m
}

// Object returns the record m describes (nil for nil).
func (m *Meta) Object() *object.Object {
	if m == nil {
		return nil
	}
	o := &object.Object{HLC: m.HLC, Size: m.Size, ModTime: m.ModTime, Deleted: m.Deleted, ETag: m.ETag,
		ContentType: m.ContentType, ContentEncoding: m.ContentEncoding, ContentDisposition: m.ContentDisposition,
		ContentLanguage: m.ContentLanguage, CacheControl: m.CacheControl, Expires: m.Expires, StorageClass: m.StorageClass,
		UserMeta: m.UserMeta, ChecksumAlgo: m.ChecksumAlgo, Checksum: m.Checksum, ChecksumType: m.ChecksumType,
		PartSizes: m.PartSizes, Striped: m.Striped, Tags: m.Tags, MetaHLC: m.MetaHLC, PartChecksums: m.PartChecksums,
		Versioned: m.Versioned, DeleteMarker: m.DeleteMarker, Purged: m.Purged,
		TagsHLC: m.TagsHLC, Retention: object.Retention{Mode: m.LockMode, Until: m.LockUntil}, RetentionHLC: m.RetentionHLC, LegalHold: m.LegalHold, HoldHLC: m.HoldHLC,
		Owner: m.Owner, ACL: m.ACL, ACLHLC: m.ACLHLC, Mutable: m.Mutable, Origin: m.Origin}
	if m.SSE != nil {
		o.SSE = *m.SSE
	}
	if s := m.Stripe; s != nil {
		o.Stripe = object.Stripe{K: s.K, M: s.M, Size: s.Size, Upload: s.Upload, Parts: s.Parts}
	}
	return o
}

// EncodeMeta returns o's metadata as a header value.
func EncodeMeta(o *object.Object) string {
	b, _ := json.Marshal(MetaOf(o))
	return string(b)
}

// DecodeMeta parses a header value made by EncodeMeta.
func DecodeMeta(s string) (*object.Object, error) {
	var m Meta
	if s == "" || s == "null" || json.Unmarshal([]byte(s), &m) != nil {
		return nil, errors.E(errors.Invalid, "malformed object metadata")
	}
	return m.Object(), nil
}

// Part is one part in a PartsAnswer.
type Part struct {
	Number int   `json:"number"`
	Meta   *Meta `json:"meta"`
}

// PartsAnswer is the answer to a parts listing: the upload's own record and a page of
// parts, or, for an upload that ended on this replica, only its end record.
type PartsAnswer struct {
	Upload    *Meta      `json:"upload,omitempty"`
	Parts     []Part     `json:"parts,omitempty"`
	Truncated bool       `json:"truncated,omitempty"`
	End       *UploadEnd `json:"end,omitempty"`
}

// CompletePart names a part of a completion.
type CompletePart struct {
	Number int    `json:"number"`
	ETag   string `json:"etag"`
}

// CompletePartsOf returns list's wire form.
func CompletePartsOf(list []object.CompletePart) []CompletePart {
	out := make([]CompletePart, len(list))
	for i, p := range list {
		out[i] = CompletePart{Number: p.Number, ETag: p.ETag}
	}
	return out
}

// CompleteParts returns the parts list.
func CompleteParts(list []CompletePart) []object.CompletePart {
	out := make([]object.CompletePart, len(list))
	for i, p := range list {
		out[i] = object.CompletePart{Number: p.Number, ETag: p.ETag}
	}
	return out
}

// CompleteRequest is the body of a completion.
type CompleteRequest struct {
	Parts   []CompletePart `json:"parts"`
	MinPart int64          `json:"min_part"`
	// Final carries the checksum fields the gateway computed from the parts.
	Final *Meta `json:"final"`
}

// UploadEnd is an upload's end record on the wire (object.UploadEnd).
type UploadEnd struct {
	Bucket   string         `json:"bucket"`
	Key      string         `json:"key"`
	UploadID string         `json:"upload_id"`
	State    string         `json:"state"`
	Parts    []CompletePart `json:"parts,omitempty"`
	Result   *Meta          `json:"result,omitempty"`
	Ended    int64          `json:"ended"`
}

// UploadEndOf returns e's wire form (nil for nil).
func UploadEndOf(e *object.UploadEnd) *UploadEnd {
	if e == nil {
		return nil
	}
	w := &UploadEnd{Bucket: e.Bucket, Key: e.Key, UploadID: e.UploadID, State: e.State, Result: MetaOf(e.Result), Ended: e.Ended}
	if len(e.Parts) > 0 {
		w.Parts = CompletePartsOf(e.Parts)
	}
	return w
}

// UploadEnd returns the end record w describes (nil for nil).
func (w *UploadEnd) UploadEnd() *object.UploadEnd {
	if w == nil {
		return nil
	}
	e := &object.UploadEnd{Bucket: w.Bucket, Key: w.Key, UploadID: w.UploadID, State: w.State, Result: w.Result.Object(), Ended: w.Ended}
	if len(w.Parts) > 0 {
		e.Parts = CompleteParts(w.Parts)
	}
	return e
}

// ListEntry is one record of a ListAnswer.
type ListEntry struct {
	Key  string `json:"key"`
	Meta *Meta  `json:"meta"`
}

// ListAnswer is a page of a node's listing (object.ListResult).
type ListAnswer struct {
	Objects        []ListEntry `json:"objects,omitempty"`
	CommonPrefixes []string    `json:"common_prefixes,omitempty"`
	Truncated      bool        `json:"truncated,omitempty"`
	Next           string      `json:"next,omitempty"`
}

// ListAnswerOf returns r's wire form.
func ListAnswerOf(r *object.ListResult) *ListAnswer {
	a := &ListAnswer{CommonPrefixes: r.CommonPrefixes, Truncated: r.Truncated, Next: r.Next}
	for _, e := range r.Objects {
		a.Objects = append(a.Objects, ListEntry{Key: e.Key, Meta: MetaOf(e.Object)})
	}
	return a
}

// Result returns the page a describes.
func (a *ListAnswer) Result() *object.ListResult {
	r := &object.ListResult{CommonPrefixes: a.CommonPrefixes, Truncated: a.Truncated, Next: a.Next}
	for _, e := range a.Objects {
		if e.Meta != nil {
			r.Objects = append(r.Objects, object.ListEntry{Key: e.Key, Object: e.Meta.Object()})
		}
	}
	return r
}

// Upload is one pending upload of an UploadsAnswer.
type Upload struct {
	Key       string    `json:"key"`
	UploadID  string    `json:"upload_id"`
	Initiated time.Time `json:"initiated"`
	Meta      *Meta     `json:"meta,omitempty"`
}

// UploadsAnswer is a page of a node's pending uploads (object.UploadList).
type UploadsAnswer struct {
	Uploads        []Upload `json:"uploads,omitempty"`
	CommonPrefixes []string `json:"common_prefixes,omitempty"`
	Truncated      bool     `json:"truncated,omitempty"`
	NextKey        string   `json:"next_key,omitempty"`
	NextUpload     string   `json:"next_upload,omitempty"`
}

// UploadsAnswerOf returns l's wire form.
func UploadsAnswerOf(l *object.UploadList) *UploadsAnswer {
	a := &UploadsAnswer{CommonPrefixes: l.CommonPrefixes, Truncated: l.Truncated, NextKey: l.NextKey, NextUpload: l.NextUpload}
	for _, u := range l.Uploads {
		a.Uploads = append(a.Uploads, Upload{Key: u.Key, UploadID: u.UploadID, Initiated: u.Initiated, Meta: MetaOf(u.Meta)})
	}
	return a
}

// List returns the page a describes.
func (a *UploadsAnswer) List() *object.UploadList {
	l := &object.UploadList{CommonPrefixes: a.CommonPrefixes, Truncated: a.Truncated, NextKey: a.NextKey, NextUpload: a.NextUpload}
	for _, u := range a.Uploads {
		l.Uploads = append(l.Uploads, object.Upload{Key: u.Key, UploadID: u.UploadID, Initiated: u.Initiated, Meta: u.Meta.Object()})
	}
	return l
}

// ScanRequest asks for the versions of every object in some partitions.
type ScanRequest struct {
	Partitions int   `json:"partitions"` // partition count of the map
	Parts      []int `json:"parts"`
}

// ScanEntry is one line of a scan's answer (object.VersionEntry).
type ScanEntry struct {
	Bucket  string `json:"b"`
	Key     string `json:"k"`
	HLC     uint64 `json:"v"`
	Deleted bool   `json:"d,omitempty"`
	Size    int64  `json:"s,omitempty"`
	Striped bool   `json:"x,omitempty"` // an erasure-coded object's record (Size is the object's)
	MetaHLC uint64 `json:"m,omitempty"` // the record's last in-place metadata change
	// The record's place and flags (object.VersionEntry).
	Noncurrent   bool `json:"nc,omitempty"`
	Versioned    bool `json:"vv,omitempty"`
	DeleteMarker bool `json:"dm,omitempty"`
	Purged       bool `json:"p,omitempty"`
}

// ScanEntryOf returns e's wire form.
func ScanEntryOf(e object.VersionEntry) ScanEntry {
	return ScanEntry{Bucket: e.Bucket, Key: e.Key, HLC: e.HLC, MetaHLC: e.MetaHLC, Deleted: e.Deleted, Size: e.Size, Striped: e.Striped,
		Noncurrent: e.Noncurrent, Versioned: e.Versioned, DeleteMarker: e.DeleteMarker, Purged: e.Purged}
}

// Entry returns the version entry w describes.
func (w ScanEntry) Entry() object.VersionEntry {
	return object.VersionEntry{Bucket: w.Bucket, Key: w.Key, HLC: w.HLC, MetaHLC: w.MetaHLC, Deleted: w.Deleted, Size: w.Size, Striped: w.Striped,
		Noncurrent: w.Noncurrent, Versioned: w.Versioned, DeleteMarker: w.DeleteMarker, Purged: w.Purged}
}

// VersionItem is one version of a VersionsAnswer.
type VersionItem struct {
	Key     string `json:"key"`
	Meta    *Meta  `json:"meta"`
	Current bool   `json:"current,omitempty"`
}

// VersionsAnswer is a page of a node's listing of versions (object.VersionList).
type VersionsAnswer struct {
	Versions       []VersionItem `json:"versions,omitempty"`
	CommonPrefixes []string      `json:"common_prefixes,omitempty"`
	Truncated      bool          `json:"truncated,omitempty"`
	NextKey        string        `json:"next_key,omitempty"`
	NextVersion    uint64        `json:"next_version,omitempty"`
	NextNull       bool          `json:"next_null,omitempty"`
}

// VersionsAnswerOf returns l's wire form.
func VersionsAnswerOf(l *object.VersionList) *VersionsAnswer {
	a := &VersionsAnswer{CommonPrefixes: l.CommonPrefixes, Truncated: l.Truncated, NextKey: l.NextKey, NextVersion: l.NextVersion, NextNull: l.NextNull}
	for _, v := range l.Versions {
		a.Versions = append(a.Versions, VersionItem{Key: v.Key, Meta: MetaOf(v.Object), Current: v.Current})
	}
	return a
}

// List returns the page a describes.
func (a *VersionsAnswer) List() *object.VersionList {
	l := &object.VersionList{CommonPrefixes: a.CommonPrefixes, Truncated: a.Truncated, NextKey: a.NextKey, NextVersion: a.NextVersion, NextNull: a.NextNull}
	for _, v := range a.Versions {
		if v.Meta != nil {
			l.Versions = append(l.Versions, object.VersionListEntry{Key: v.Key, Object: v.Meta.Object(), Current: v.Current})
		}
	}
	return l
}

// MetaUpdate is the body of a conditional in-place metadata change (object.MetaUpdate;
// bucket and key are in the query): applied only to a record of version HLC whose
// MetaHLC is older.
type MetaUpdate struct {
	HLC     uint64      `json:"hlc"`
	MetaHLC uint64      `json:"meta_hlc"`
	Tags    [][2]string `json:"tags"`
	// The groups changed, each with its HLC (object.MetaUpdate); all absent: the tags, at
	// MetaHLC (a binary from before Object Lock).
	TagsHLC      uint64 `json:"tags_hlc,omitempty"`
	LockMode     string `json:"lock_mode,omitempty"`
	LockUntil    int64  `json:"lock_until,omitempty"`
	RetentionHLC uint64 `json:"retention_hlc,omitempty"`
	LegalHold    bool   `json:"legal_hold,omitempty"`
	HoldHLC      uint64 `json:"hold_hlc,omitempty"`
	ACL          string `json:"acl,omitempty"`
	ACLHLC       uint64 `json:"acl_hlc,omitempty"`
}

// MetaUpdateOf returns u's wire form (bucket and key go in the query).
func MetaUpdateOf(u object.MetaUpdate) MetaUpdate {
	return MetaUpdate{HLC: u.Version, MetaHLC: u.MetaHLC, Tags: u.Tags, TagsHLC: u.TagsHLC, LockMode: u.Retention.Mode, LockUntil: u.Retention.Until,
		RetentionHLC: u.RetentionHLC, LegalHold: u.LegalHold, HoldHLC: u.HoldHLC, ACL: u.ACL, ACLHLC: u.ACLHLC}
}

// Update returns the update m describes, of bucket/key.
func (m MetaUpdate) Update(bucket, key string) object.MetaUpdate {
	return object.MetaUpdate{Bucket: bucket, Key: key, Version: m.HLC, MetaHLC: m.MetaHLC, Tags: m.Tags, TagsHLC: m.TagsHLC,
		Retention: object.Retention{Mode: m.LockMode, Until: m.LockUntil}, RetentionHLC: m.RetentionHLC, LegalHold: m.LegalHold, HoldHLC: m.HoldHLC, ACL: m.ACL, ACLHLC: m.ACLHLC}
}

// DigestAnswer holds one digest per partition asked for, in the order asked.
type DigestAnswer struct {
	Digests []uint64 `json:"digests"`
}

// PartsAnswerOf returns p's wire form.
func PartsAnswerOf(p *object.PartsPage) *PartsAnswer {
	a := &PartsAnswer{Upload: MetaOf(p.Upload), Truncated: p.Truncated, End: UploadEndOf(p.End)}
	for _, pt := range p.Parts {
		a.Parts = append(a.Parts, Part{Number: pt.Number, Meta: MetaOf(pt.Object)})
	}
	return a
}

// Page returns the page a describes.
func (a *PartsAnswer) Page() *object.PartsPage {
	p := &object.PartsPage{Upload: a.Upload.Object(), Truncated: a.Truncated, End: a.End.UploadEnd()}
	for _, pt := range a.Parts {
		if pt.Meta != nil {
			p.Parts = append(p.Parts, object.Part{Number: pt.Number, Object: pt.Meta.Object()})
		}
	}
	return p
}
