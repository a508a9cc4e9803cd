package s3api

import (
	"encoding/xml"
	"net/http"
	"strings"

	"github.com/cairnfs/cairn/internal/errors"
)

// Principal is who signed a request: a user of the cluster map. A user may use the
// buckets it owns, and others as far as its grants allow; the root user every bucket.
// (Bucket policies and ACLs are not built yet.)
type Principal struct {
	User   string
	Root   bool
	Grants []Grant
}

// Grant is a user's access to a bucket it does not own (package clustermap's Grant):
// objects under Prefix for reading or writing, or the whole bucket as its owner.
type Grant struct {
	Bucket, Prefix     string
	Read, Write, Owner bool
}

// owner is the owner a bucket created by p gets: "" for the root user, as the buckets
// made before users existed have.
func (p Principal) owner() string {
	if p.Root {
		return ""
	}
	return p.User
}

// What an operation needs of the principal on its bucket.
type need int

const (
	needOwner need = iota // the bucket's configuration, deletion, ACLs
	needAny               // any grant on the bucket (HeadBucket, GetBucketLocation)
	needRead              // reading the request's key (or listing under its prefix)
	needWrite             // writing or deleting the request's key
)

// opNeeds says what each operation needs; one not listed needs the owner.
var opNeeds = map[string]need{
	"HeadBucket": needAny, "GetBucketLocation": needAny, "GetBucketVersioning": needAny,
	"ListObjects": needRead, "ListObjectsV2": needRead, "ListObjectVersions": needRead, "ListMultipartUploads": needRead,
	"GetObject": needRead, "HeadObject": needRead, "GetObjectAttributes": needRead, "GetObjectTagging": needRead,
	"PutObject": needWrite, "CopyObject": needWrite, "PostObject": needWrite, "DeleteObject": needWrite,
	"PutObjectTagging": needWrite, "DeleteObjectTagging": needWrite,
	"CreateMultipartUpload": needWrite, "UploadPart": needWrite, "UploadPartCopy": needWrite,
	"CompleteMultipartUpload": needWrite, "AbortMultipartUpload": needWrite, "ListParts": needWrite,
	// Each key is checked by deleteObjects: the request needs a grant to write somewhere.
	"DeleteObjects": needAny,
}

// may reports whether p's grants on bucket allow n for key (for a listing, the prefix
// listed: a grant under a prefix lists only within it).
func (p Principal) may(bucket, key string, n need) bool {
	for _, g := range p.Grants {
		if g.Bucket != bucket {
			continue
		}
		switch {
		case g.Owner:
			return true
		case n == needOwner:
		case n == needAny:
			return true
		case n == needRead && g.Read && strings.HasPrefix(key, g.Prefix):
			return true
		case n == needWrite && g.Write && strings.HasPrefix(key, g.Prefix):
			return true
		}
	}
	return false
}

var (
	errAccessDenied        = &apiError{"AccessDenied", "Access Denied", http.StatusForbidden}
	errBucketAlreadyExists = &apiError{"BucketAlreadyExists", "The requested bucket name is not available. The bucket namespace is shared by all users of the system. Please select a different name and try again.", http.StatusConflict}
)

func (h *Handler) principal(accessKey string) Principal {
	if h.cfg.Principal == nil {
		return Principal{User: accessKey, Root: true}
	}
	return h.cfg.Principal(accessKey)
}

// authorize refuses a request that the principal may not make: on a bucket another user
// owns beyond the principal's grants, or a copy from an object it may not read. A bucket
// this node's map does not have yet is looked up through the leader (it may have been
// created through another gateway a moment ago); one that does not exist is left to the
// operation (NoSuchBucket).
func (h *Handler) authorize(r *http.Request, rq *request) error {
	switch {
	case rq.who.Root:
		rq.full = true
		return nil
	case rq.op == "ListBuckets", rq.op == "CreateBucket":
		return nil
	case rq.op == "PostObject" && rq.auth == nil:
		return nil // authorized by postObject once its form's signature is verified
	}
	n, ok := opNeeds[rq.op]
	if !ok {
		n = needOwner
	}
	key := rq.key
	if n == needRead && rq.key == "" { // a listing: of its prefix
		key = r.URL.Query().Get("prefix")
	}
	full, err := h.mayUse(r, rq, rq.bucket, key, n)
	if err != nil {
		return err
	}
	rq.full = full
	if rq.op == "CopyObject" || rq.op == "UploadPartCopy" {
		if sb, sk, err := copySource(r.Header.Get("x-amz-copy-source")); err == nil {
			_, err := h.mayUse(r, rq, sb, sk, needRead)
			return err
		}
	}
	return nil
}

// mayUse checks that the principal may do n with key in bucket, and reports whether it
// may do everything there (it owns the bucket, or has an owner grant).
func (h *Handler) mayUse(r *http.Request, rq *request, bucket, key string, n need) (bool, error) {
	if bucket == "" {
		return false, nil
	}
	b, err := h.store.LocalBucket(bucket)
	if err != nil {
		if b, err = h.store.HeadBucket(r.Context(), bucket); err != nil {
			if errors.Is(errors.NotExist, err) {
				return false, nil
			}
			return false, err
		}
	}
	if b.Owner == rq.who.User || rq.who.may(bucket, "", needOwner) {
		return true, nil
	}
	if rq.who.may(bucket, key, n) {
		return false, nil
	}
	return false, errAccessDenied
}

// objectOwnership is the one Object Ownership cairn has: the bucket owner owns every
// object and ACLs are disabled (AWS's default for new buckets since 2023).
const objectOwnership = "BucketOwnerEnforced"

type ownershipControls struct {
	XMLName xml.Name `xml:"OwnershipControls"`
	Xmlns   string   `xml:"xmlns,attr,omitempty"`
	Rules   []struct {
		ObjectOwnership string
	} `xml:"Rule"`
}

func (h *Handler) getOwnershipControls(w http.ResponseWriter, r *http.Request, rq *request) error {
	if _, err := h.store.HeadBucket(r.Context(), rq.bucket); err != nil {
		return err
	}
	doc := ownershipControls{Xmlns: xmlns}
	doc.Rules = append(doc.Rules, struct{ ObjectOwnership string }{objectOwnership})
	return writeXML(w, doc)
}

// putOwnershipControls accepts BucketOwnerEnforced, which changes nothing; the settings
// that enable ACLs are NotImplemented.
func (h *Handler) putOwnershipControls(w http.ResponseWriter, r *http.Request, rq *request) error {
	data, err := readBody(r, rq, 4<<10)
	if err != nil {
		return err
	}
	if _, err := h.store.HeadBucket(r.Context(), rq.bucket); err != nil {
		return err
	}
	var doc ownershipControls
	if err := xml.Unmarshal(data, &doc); err != nil || len(doc.Rules) != 1 {
		return errMalformedXML
	}
	switch doc.Rules[0].ObjectOwnership {
	case objectOwnership:
	case "BucketOwnerPreferred", "ObjectWriter":
		return errf(http.StatusNotImplemented, "NotImplemented", "cairn does not support ACLs: the only Object Ownership is BucketOwnerEnforced.")
	default:
		return errMalformedXML
	}
	w.WriteHeader(http.StatusOK)
	return nil
}
