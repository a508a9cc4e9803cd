package s3api

import (
	"context"
	"encoding/xml"
	"net/http"
	"strconv"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/object"
)

// Versioning (docs/design/versioning.md). A bucket's versioning status is its
// configuration of kind "versioning": "" (never enabled), "Enabled" or "Suspended". A
// version written while it is Enabled is kept beside the others and has a version id of
// its own, the hex of its HLC; every other write makes the key's null version, replacing
// the one before.

const versioningKind = "versioning"

// Versioning states, as S3 spells them.
const (
	versioningEnabled   = "Enabled"
	versioningSuspended = "Suspended"
)

// nullVersion is the version id of a null version: an object written while versioning
// was never enabled or was suspended.
const nullVersion = "null"

// versionIDOf is o's S3 version id.
func versionIDOf(o *object.Object) string {
	if o.Versioned {
		return hlcID(o.HLC)
	}
	return nullVersion
}

// hlcID is the version id of version h: its 16 hex digits (fmt's %016x, without fmt on
// every versioned request).
func hlcID(h uint64) string {
	const digits = "0123456789abcdef"
	var b [16]byte
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = digits[h&15]
		h >>= 4
	}
	return string(b[:])
}

// versionRef is a version named by a request: none, the null version, or an HLC.
type versionRef struct {
	set, null bool
	hlc       uint64
}

var errInvalidVersion = errf(400, "InvalidArgument", "Invalid version id specified")

// parseVersionID parses a version id a client sent ("" names none).
func parseVersionID(s string) (versionRef, error) {
	switch {
	case s == "":
		return versionRef{}, nil
	case s == nullVersion:
		return versionRef{set: true, null: true}, nil
	case len(s) != 16:
		return versionRef{}, errInvalidVersion
	}
	h, err := strconv.ParseUint(s, 16, 64)
	if err != nil || h == 0 {
		return versionRef{}, errInvalidVersion
	}
	return versionRef{set: true, hlc: h}, nil
}

// queryVersion is the versionId of a request's query (present but empty is invalid).
func queryVersion(r *http.Request) (versionRef, error) {
	q := queryOf(r)
	if _, ok := q["versionId"]; !ok {
		return versionRef{}, nil
	}
	if q.Get("versionId") == "" {
		return versionRef{}, errInvalidVersion
	}
	return parseVersionID(q.Get("versionId"))
}

// versioning returns bucket's versioning status.
func (h *Handler) versioning(ctx context.Context, bucket string) (string, error) {
	b, err := h.store.HeadBucket(ctx, bucket)
	if err != nil {
		return "", err
	}
	return b.Config[versioningKind], nil
}

// versionWrite marks meta as a version of its own if bucket's versioning is enabled,
// gives it the Object Lock the request or the bucket's default asks for.
// hd holds the request's headers (a browser upload's form fields, for PostObject).
func (h *Handler) versionWrite(ctx context.Context, hd http.Header, bucket string, meta *object.Object) error {
	b, err := h.store.HeadBucket(ctx, bucket)
	if err != nil {
		return err
	}
	status := b.Config[versioningKind]
	meta.Versioned = status == versioningEnabled
	return h.lockWrite(hd, b, meta)
}

// versionHeader sets x-amz-version-id on the answer to a write of o: S3 names the
// version a write to an Enabled bucket made, and leaves the header out for the null
// version a write makes while versioning was never enabled or is Suspended (the
// PutObject reference's "versioning suspended" example has none; GET and HEAD of that
// version still answer "null").
func versionHeader(hd http.Header, o *object.Object) {
	if o.Versioned {
		hd.Set("x-amz-version-id", versionIDOf(o))
	}
}

// versioningConfigured reports whether the request's bucket has a versioning status
// (Enabled or Suspended): S3 then names the version a GET or HEAD answers even when it is
// the null one ("null"), and leaves the header out only in a bucket never versioned.
func (h *Handler) versioningConfigured(rq *request) bool {
	b := rq.bkt
	if !rq.hasBkt {
		var err error
		if b, err = h.store.LocalBucket(rq.bucket); err != nil {
			return false
		}
	}
	return b.Config[versioningKind] != ""
}

// openVersion opens the version ref names (the current one if none), or, for head, may
// only stat it.
func (h *Handler) openVersion(ctx context.Context, bucket, key string, ref versionRef, head bool) (*object.Object, gateway.ObjectReader, error) {
	if !ref.set {
		if head {
			o, err := h.store.StatObject(ctx, bucket, key)
			return o, nil, err
		}
		rd, err := h.store.OpenObject(ctx, bucket, key)
		if err != nil {
			return nil, nil, err
		}
		return rd.Info(), rd, nil
	}
	if ref.null {
		// Usually the current version: one read finds it.
		if rd, err := h.store.OpenObject(ctx, bucket, key); err == nil {
			if o := rd.Info(); !o.Versioned {
				return o, rd, nil
			}
			rd.Close()
		}
	}
	rd, err := h.store.OpenVersion(ctx, bucket, key, ref.hlc)
	if err != nil {
		return nil, nil, err
	}
	return rd.Info(), rd, nil
}

// readError is the answer to a read that failed: a delete marker is named in headers
// (x-amz-delete-marker, x-amz-version-id), and reading one by its version id is
// MethodNotAllowed, as S3 answers.
func readError(hd http.Header, err error) error {
	var dm *object.DeleteMarkerError
	if !errors.As(err, &dm) {
		return err
	}
	hd.Set("x-amz-delete-marker", "true")
	hd.Set("x-amz-version-id", versionIDOf(dm.Marker))
	if dm.Current {
		return errNoSuchKey
	}
	hd.Set("Last-Modified", time.Unix(0, dm.Marker.ModTime).UTC().Format(http.TimeFormat))
	return &apiError{"MethodNotAllowed", "The specified method is not allowed against this resource.", 405}
}

// deleteVersion deletes bucket/key as S3 does given the bucket's versioning and the
// version named, and says what it did: the version id removed or made (the delete
// marker's), and whether that is a delete marker.
func (h *Handler) deleteVersion(ctx context.Context, bucket, key string, ref versionRef, bypass bool) (vid string, marker bool, err error) {
	status, err := h.versioning(ctx, bucket)
	if err != nil {
		return "", false, err
	}
	switch {
	case !ref.set && status == "":
		return "", false, h.store.DeleteObject(ctx, bucket, key)
	case !ref.set:
		d := object.Object{DeleteMarker: true, Versioned: status == versioningEnabled}
		rec, err := h.store.DeleteRecord(ctx, bucket, key, d)
		if err != nil {
			return "", false, err
		}
		return versionIDOf(rec), true, nil
	case ref.null && status == "":
		return nullVersion, false, h.store.DeleteObject(ctx, bucket, key)
	}
	// A version named: what is it?
	var rec *object.Object
	rd, err := h.store.OpenVersion(ctx, bucket, key, ref.hlc)
	var dm *object.DeleteMarkerError
	switch {
	case err == nil:
		rec = rd.Info()
		rd.Close()
	case errors.As(err, &dm):
		rec, marker = dm.Marker, true
	case errors.IsErr(err, object.ErrNoSuchVersion):
		// Nothing to delete (S3 answers as if it deleted it).
		if ref.null {
			return nullVersion, false, nil
		}
		return hlcID(ref.hlc), false, nil
	default:
		return "", false, err
	}
	if err := h.lockedVersion(rec, bypass); err != nil {
		return "", false, err
	}
	if !rec.Versioned {
		// The null version: a tombstone of the null version, newer than it.
		_, err = h.store.DeleteRecord(ctx, bucket, key, object.Object{})
		return nullVersion, marker, err
	}
	_, err = h.store.DeleteRecord(ctx, bucket, key, object.Object{HLC: rec.HLC, Versioned: true, Purged: true, Bypass: bypass})
	return versionIDOf(rec), marker, err
}

// deleteHeaders names what a DELETE did.
func deleteHeaders(hd http.Header, vid string, marker bool) {
	if vid != "" {
		hd.Set("x-amz-version-id", vid)
	}
	if marker {
		hd.Set("x-amz-delete-marker", "true")
	}
}

func (h *Handler) getBucketVersioning(w http.ResponseWriter, r *http.Request, rq *request) error {
	status, err := h.versioning(r.Context(), rq.bucket)
	if err != nil {
		return err
	}
	return writeXML(w, struct {
		XMLName xml.Name `xml:"VersioningConfiguration"`
		Xmlns   string   `xml:"xmlns,attr"`
		Status  string   `xml:",omitempty"`
	}{Xmlns: xmlns, Status: status})
}

func (h *Handler) putBucketVersioning(w http.ResponseWriter, r *http.Request, rq *request) error {
	var req struct {
		XMLName   xml.Name `xml:"VersioningConfiguration"`
		Status    string
		MfaDelete string
	}
	if err := readXML(r, rq, 64<<10, &req); err != nil {
		return err
	}
	switch req.MfaDelete {
	case "", "Disabled":
	case "Enabled":
		return errf(501, "NotImplemented", "MFA delete is not implemented.")
	default:
		return errMalformedXML
	}
	b, err := h.store.HeadBucket(r.Context(), rq.bucket)
	if err != nil {
		return err
	}
	status := b.Config[versioningKind]
	if req.Status == versioningSuspended && bucketLock(b) != nil {
		return errf(409, "InvalidBucketState", "An Object Lock configuration is present on this bucket, so the versioning state cannot be changed.")
	}
	switch req.Status {
	case versioningEnabled, versioningSuspended:
	case "":
		// No status: nothing changes (S3 accepts it).
		w.WriteHeader(http.StatusOK)
		return nil
	default:
		return errMalformedXML
	}
	if req.Status != status {
		if err := h.store.SetBucketConfig(r.Context(), rq.bucket, versioningKind, []byte(req.Status)); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// listObjectVersions answers ListObjectVersions: every version of every key (the null
// version of keys written while versioning was never enabled), keys in order, each key's
// versions newest first, delete markers among them.
func (h *Handler) listObjectVersions(w http.ResponseWriter, r *http.Request, rq *request) error {
	q := r.URL.Query()
	max, err := maxKeys(q.Get("max-keys"))
	if err != nil {
		return err
	}
	enc, esc := listEncoding(q)
	keyMarker, vidMarker := q.Get("key-marker"), q.Get("version-id-marker")
	opts := object.VersionListOptions{Prefix: q.Get("prefix"), Delimiter: q.Get("delimiter"), Max: max, KeyMarker: keyMarker}
	if vidMarker != "" {
		if keyMarker == "" {
			return errf(400, "InvalidArgument", "A version-id marker cannot be specified without a key marker.")
		}
		ref, err := parseVersionID(vidMarker)
		if err != nil {
			return err
		}
		opts.VersionMarker, opts.AfterNull = ref.hlc, ref.null
	}
	res, err := h.store.ListVersions(r.Context(), rq.bucket, opts)
	if err != nil {
		return err
	}
	x := newXMLWriter()
	x.open("ListVersionsResult", `xmlns="`+xmlns+`"`)
	x.elem("Name", rq.bucket)
	x.elem("Prefix", esc(opts.Prefix))
	x.elem("KeyMarker", esc(keyMarker))
	x.elem("VersionIdMarker", vidMarker)
	if res.Truncated {
		x.elem("NextKeyMarker", esc(res.NextKey))
		switch {
		case res.NextVersion == 0:
		case res.NextNull:
			x.elem("NextVersionIdMarker", nullVersion)
		default:
			x.elem("NextVersionIdMarker", hlcID(res.NextVersion))
		}
	}
	x.elemInt("MaxKeys", int64(max))
	if opts.Delimiter != "" {
		x.elem("Delimiter", esc(opts.Delimiter))
	}
	if enc != "" {
		x.elem("EncodingType", enc)
	}
	x.elemBool("IsTruncated", res.Truncated)
	own := h.bucketOwner(rq)
	for _, e := range res.Versions {
		o := e.Object
		if o.DeleteMarker {
			x.open("DeleteMarker", "")
			writeOwner(x, versionOwner(o, own))
			x.elem("Key", esc(e.Key))
			x.elem("VersionId", versionIDOf(o))
			x.elemBool("IsLatest", e.Current)
			x.elemTime("LastModified", time.Unix(0, o.ModTime))
			x.close("DeleteMarker")
			continue
		}
		x.open("Version", "")
		x.elem("Key", esc(e.Key))
		x.elem("VersionId", versionIDOf(o))
		x.elemBool("IsLatest", e.Current)
		x.elemTime("LastModified", time.Unix(0, o.ModTime))
		x.elem("ETag", quote(o.ETag))
		x.elemInt("Size", plainSize(o))
		x.elem("StorageClass", storageClass(o))
		writeOwner(x, versionOwner(o, own))
		x.close("Version")
	}
	writePrefixes(x, res.CommonPrefixes, esc)
	x.close("ListVersionsResult")
	return x.send(w)
}

// statRequested returns the record of the version the request's versionId names (the
// current one if none), and names it in x-amz-version-id.
func (h *Handler) statRequested(w http.ResponseWriter, r *http.Request, rq *request) (*object.Object, error) {
	ref, err := queryVersion(r)
	if err != nil {
		return nil, err
	}
	o, rd, err := h.openVersion(r.Context(), rq.bucket, rq.key, ref, true)
	if err != nil {
		return nil, readError(w.Header(), err)
	}
	if rd != nil {
		rd.Close()
	}
	if ref.set || o.Versioned {
		w.Header().Set("x-amz-version-id", versionIDOf(o))
	}
	return o, nil
}
