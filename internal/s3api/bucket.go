package s3api

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

const xmlns = "http://s3.amazonaws.com/doc/2006-03-01/"

type owner struct {
	ID          string
	DisplayName string
}

// owner is the requester as an S3 owner.
func (h *Handler) owner(rq *request) owner { return ownerOf(rq.who.owner()) }

// bucketOwner is the owner of the request's bucket, which owns its objects unless a
// writer owns one (Object.Owner, under ObjectWriter or BucketOwnerPreferred).
func (h *Handler) bucketOwner(rq *request) owner {
	if rq.hasBkt { // authorize looked it up: a principal other than the root user
		return ownerOf(rq.bkt.Owner)
	}
	if b, err := h.store.LocalBucket(rq.bucket); err == nil {
		return ownerOf(b.Owner)
	}
	return h.owner(rq)
}

// versionOwner is the owner of version o in a listing: its writer's if it has one,
// else own (the bucket's owner).
func versionOwner(o *object.Object, own owner) owner {
	if o.Owner != "" {
		return ownerOf(o.Owner)
	}
	return own
}

// ownerOf is a user as an S3 owner ("": the root user): the canonical ID is a hash of the
// name, stable across keys.
func ownerOf(user string) owner {
	if user == "" {
		user = "root"
	}
	sum := sha256.Sum256([]byte("cairn-user:" + user))
	return owner{ID: hex.EncodeToString(sum[:]), DisplayName: user}
}

func (h *Handler) listBuckets(w http.ResponseWriter, r *http.Request, rq *request) error {
	q := r.URL.Query()
	max := 10000
	if v, ok := q["max-buckets"]; ok {
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 1 || n > 10000 {
			return errf(400, "InvalidArgument", "Argument max-buckets must be an integer between 1 and 10000")
		}
		max = n
	}
	after := ""
	if v, ok := q["continuation-token"]; ok {
		raw, err := base64.RawURLEncoding.DecodeString(v[0])
		if err != nil || v[0] == "" {
			return errf(400, "InvalidArgument", "The continuation token provided is incorrect")
		}
		after = string(raw)
	}
	prefix := q.Get("prefix")
	bs, err := h.store.ListBuckets(r.Context())
	if err != nil {
		return err
	}
	if !rq.who.Root { // a user lists the buckets it owns; the root user every bucket
		bs = slices.DeleteFunc(bs, func(b object.Bucket) bool { return b.Owner != rq.who.User })
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].Name < bs[j].Name })
	type bucket struct {
		Name         string
		CreationDate string
		BucketRegion string
	}
	res := struct {
		XMLName           xml.Name `xml:"ListAllMyBucketsResult"`
		Xmlns             string   `xml:"xmlns,attr"`
		Owner             owner
		Buckets           []bucket `xml:"Buckets>Bucket"`
		ContinuationToken string   `xml:",omitempty"`
		Prefix            string   `xml:",omitempty"`
	}{Xmlns: xmlns, Owner: h.owner(rq), Prefix: prefix}
	if reg := q.Get("bucket-region"); reg != "" && reg != h.cfg.Region {
		bs = nil // every bucket is in the one region
	}
	for _, b := range bs {
		if b.Name <= after || !strings.HasPrefix(b.Name, prefix) {
			continue
		}
		if len(res.Buckets) == max {
			res.ContinuationToken = base64.RawURLEncoding.EncodeToString([]byte(res.Buckets[max-1].Name))
			break
		}
		res.Buckets = append(res.Buckets, bucket{Name: b.Name, CreationDate: isoTime(b.Created), BucketRegion: h.cfg.Region})
	}
	return writeXML(w, res)
}

func (h *Handler) createBucket(w http.ResponseWriter, r *http.Request, rq *request) error {
	if !validBucketName(rq.bucket) {
		return errInvalidBucketName
	}
	var cfg struct {
		LocationConstraint string
	}
	if r.ContentLength != 0 {
		if err := readXML(r, rq, 64<<10, &cfg); err != nil {
			// An empty (chunked) body is fine.
			if ae, ok := err.(*apiError); !ok || ae != errMalformedXML {
				return err
			}
		}
	}
	if lc := cfg.LocationConstraint; lc != "" && lc != h.cfg.Region {
		// The bucket would be somewhere cairn does not put it.
		return errf(400, "IllegalLocationConstraintException",
			"The %s location constraint is incompatible for the region specific endpoint this request was sent to (cairn's region is %s).", lc, h.cfg.Region)
	}
	lock := false
	switch strings.ToLower(r.Header.Get("x-amz-bucket-object-lock-enabled")) {
	case "", "false":
	case "true":
		lock = true
	default:
		return errf(400, "InvalidArgument", "x-amz-bucket-object-lock-enabled must be true or false")
	}
	ownCfg, aclCfg, err := h.createBucketACL(r.Header, rq)
	if err != nil {
		return err
	}
	if err := h.store.CreateBucket(r.Context(), rq.bucket, rq.who.owner()); err != nil {
		if errors.Is(errors.Exist, err) {
			if b, herr := h.store.HeadBucket(r.Context(), rq.bucket); herr == nil && b.Owner != rq.who.owner() {
				return errBucketAlreadyExists
			}
		}
		if errors.Is(errors.Exist, err) && h.cfg.Region == "us-east-1" {
			// S3's us-east-1 answers a create of a bucket the caller already owns with
			// success (and changes nothing); every other region with
			// BucketAlreadyOwnedByYou.
			w.Header().Set("Location", "/"+rq.bucket)
			w.WriteHeader(http.StatusOK)
			return nil
		}
		return err
	}
	if lock {
		if err := h.enableLock(r.Context(), rq.bucket, &lockConfig{}); err != nil {
			return err
		}
	}
	if ownCfg != nil {
		if err := h.store.SetBucketConfig(r.Context(), rq.bucket, ownershipKind, ownCfg); err != nil {
			return err
		}
	}
	if aclCfg != nil {
		if err := h.store.SetBucketConfig(r.Context(), rq.bucket, aclKind, aclCfg); err != nil {
			return err
		}
	}
	w.Header().Set("Location", "/"+rq.bucket)
	w.WriteHeader(http.StatusOK)
	return nil
}

func (h *Handler) headBucket(w http.ResponseWriter, r *http.Request, rq *request) error {
	if _, err := h.store.HeadBucket(r.Context(), rq.bucket); err != nil {
		return err
	}
	w.Header().Set("x-amz-bucket-region", h.cfg.Region)
	w.WriteHeader(http.StatusOK)
	return nil
}

func (h *Handler) deleteBucket(w http.ResponseWriter, r *http.Request, rq *request) error {
	if err := h.store.DeleteBucket(r.Context(), rq.bucket); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) getBucketLocation(w http.ResponseWriter, r *http.Request, rq *request) error {
	if _, err := h.store.HeadBucket(r.Context(), rq.bucket); err != nil {
		return err
	}
	loc := h.cfg.Region
	if loc == "us-east-1" {
		loc = "" // S3 reports the classic region as empty
	}
	return writeXML(w, struct {
		XMLName xml.Name `xml:"LocationConstraint"`
		Xmlns   string   `xml:"xmlns,attr"`
		Value   string   `xml:",chardata"`
	}{Xmlns: xmlns, Value: loc})
}

type commonPrefix struct {
	Prefix string
}

// s3Escape encodes a key for encoding-type=url: every byte but unreserved characters and
// '/' is percent-encoded (so both unquote and unquote_plus decode it).
func s3Escape(s string) string {
	const hexd = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' || c == '/' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexd[c>>4])
		b.WriteByte(hexd[c&15])
	}
	return b.String()
}

// listEncoding returns a listing's encoding-type (the refusal table lets only "url"
// through) and the function that encodes keys and prefixes for it.
func listEncoding(q url.Values) (string, func(string) string) {
	if enc := q.Get("encoding-type"); enc == "url" {
		return enc, s3Escape
	}
	return "", func(s string) string { return s }
}

// writeOwner writes a listing entry's Owner element.
func writeOwner(x *xmlWriter, o owner) {
	x.open("Owner", "")
	x.elem("ID", o.ID)
	x.elem("DisplayName", o.DisplayName)
	x.close("Owner")
}

// writePrefixes writes a listing's CommonPrefixes elements.
func writePrefixes(x *xmlWriter, prefixes []string, esc func(string) string) {
	for _, p := range prefixes {
		x.open("CommonPrefixes", "")
		x.elem("Prefix", esc(p))
		x.close("CommonPrefixes")
	}
}

func maxKeys(q string) (int, error) {
	if q == "" {
		return 1000, nil
	}
	n, err := strconv.Atoi(q)
	if err != nil || n < 0 {
		return 0, errf(400, "InvalidArgument", "Argument max-keys must be an integer between 0 and 2147483647")
	}
	return min(n, 1000), nil
}

func (h *Handler) listObjects(w http.ResponseWriter, r *http.Request, rq *request, v2 bool) error {
	q := r.URL.Query()
	max, err := maxKeys(q.Get("max-keys"))
	if err != nil {
		return err
	}
	enc, esc := listEncoding(q)
	opts := object.ListOptions{Prefix: q.Get("prefix"), Delimiter: q.Get("delimiter"), Max: max}
	token := q.Get("continuation-token")
	if v2 {
		opts.After = q.Get("start-after")
		if _, ok := q["continuation-token"]; ok {
			raw, err := base64.RawURLEncoding.DecodeString(token)
			if err != nil || token == "" {
				return errf(400, "InvalidArgument", "The continuation token provided is incorrect")
			}
			opts.After = string(raw)
		}
	} else {
		opts.After = q.Get("marker")
	}
	res, err := h.store.List(r.Context(), rq.bucket, opts)
	if err != nil {
		return err
	}
	fetchOwner := !v2 || q.Get("fetch-owner") == "true"
	x := newXMLWriter()
	x.open("ListBucketResult", `xmlns="`+xmlns+`"`)
	x.elem("Name", rq.bucket)
	x.elem("Prefix", esc(opts.Prefix))
	if v2 {
		if opts.Delimiter != "" {
			x.elem("Delimiter", esc(opts.Delimiter))
		}
		x.elemInt("MaxKeys", int64(max))
		if enc != "" {
			x.elem("EncodingType", enc)
		}
		x.elemInt("KeyCount", int64(len(res.Objects)+len(res.CommonPrefixes)))
		x.elemBool("IsTruncated", res.Truncated)
		if token != "" {
			x.elem("ContinuationToken", token)
		}
		if res.Truncated {
			x.elem("NextContinuationToken", base64.RawURLEncoding.EncodeToString([]byte(res.Next)))
		}
		if sa := q.Get("start-after"); sa != "" {
			x.elem("StartAfter", esc(sa))
		}
	} else {
		x.elem("Marker", esc(opts.After))
		if res.Truncated {
			x.elem("NextMarker", esc(res.Next))
		}
		x.elemInt("MaxKeys", int64(max))
		if opts.Delimiter != "" {
			x.elem("Delimiter", esc(opts.Delimiter))
		}
		if enc != "" {
			x.elem("EncodingType", enc)
		}
		x.elemBool("IsTruncated", res.Truncated)
	}
	o := h.bucketOwner(rq)
	for _, e := range res.Objects {
		x.open("Contents", "")
		x.elem("Key", esc(e.Key))
		x.elemTime("LastModified", time.Unix(0, e.Object.ModTime))
		x.elem("ETag", quote(e.Object.ETag))
		x.elemInt("Size", plainSize(e.Object))
		x.elem("StorageClass", storageClass(e.Object))
		if fetchOwner {
			writeOwner(x, versionOwner(e.Object, o))
		}
		x.close("Contents")
	}
	writePrefixes(x, res.CommonPrefixes, esc)
	x.close("ListBucketResult")
	return x.send(w)
}

func storageClass(o *object.Object) string {
	if o.StorageClass != "" {
		return o.StorageClass
	}
	return "STANDARD"
}

// deleteRequest is the body of DeleteObjects.
type deleteRequest struct {
	XMLName xml.Name `xml:"Delete"`
	Quiet   bool
	Objects []struct {
		Key       string
		VersionID string `xml:"VersionId"`
	} `xml:"Object"`
}

func (h *Handler) deleteObjects(w http.ResponseWriter, r *http.Request, rq *request) error {
	var req deleteRequest
	if err := readXML(r, rq, 2<<20, &req); err != nil {
		return err
	}
	if len(req.Objects) > 1000 || len(req.Objects) == 0 {
		return errMalformedXML
	}
	if _, err := h.store.HeadBucket(r.Context(), rq.bucket); err != nil {
		return err
	}
	type deleted struct {
		Key                   string
		VersionId             string `xml:",omitempty"`
		DeleteMarker          bool   `xml:",omitempty"`
		DeleteMarkerVersionId string `xml:",omitempty"`
	}
	type delErr struct {
		Key       string
		VersionId string `xml:",omitempty"`
		Code      string
		Message   string
	}
	res := struct {
		XMLName xml.Name `xml:"DeleteResult"`
		Xmlns   string   `xml:"xmlns,attr"`
		Deleted []deleted
		Errors  []delErr `xml:"Error"`
	}{Xmlns: xmlns}
	for _, o := range req.Objects {
		var err error
		var vid string
		var marker bool
		action := "s3:DeleteObject"
		if o.VersionID != "" {
			action = "s3:DeleteObjectVersion"
		}
		ref, verr := parseVersionID(o.VersionID)
		if len(o.Key) > 1024 {
			err = errKeyTooLong
		} else if o.Key == "" {
			err = errf(400, "InvalidArgument", "Key must not be empty")
		} else if verr != nil {
			err = verr
		} else if _, aerr := h.allowed(r, rq, rq.bucket, o.Key, needWrite, action); !rq.full && aerr != nil {
			err = aerr
		} else {
			vid, marker, err = h.deleteVersion(r.Context(), rq.bucket, o.Key, ref, h.bypass(r, rq, o.Key))
		}
		if err != nil {
			ae := toAPIError(err)
			res.Errors = append(res.Errors, delErr{Key: o.Key, VersionId: o.VersionID, Code: ae.Code, Message: ae.Message})
			continue
		}
		if !req.Quiet {
			d := deleted{Key: o.Key, VersionId: o.VersionID, DeleteMarker: marker}
			if marker && o.VersionID == "" {
				d.DeleteMarkerVersionId = vid // the marker this delete made
			}
			res.Deleted = append(res.Deleted, d)
		}
	}
	return writeXML(w, res)
}
