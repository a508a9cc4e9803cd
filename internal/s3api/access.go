package s3api

import (
	"encoding/xml"
	"net/http"

	"github.com/cairnfs/cairn/internal/errors"
)

// Principal is who signed a request: a user of the cluster map. Until bucket policies
// and ACLs exist, a user may use the buckets it owns, and the root user every bucket.
type Principal struct {
	User string
	Root bool
}

// owner is the owner a bucket created by p gets: "" for the root user, as the buckets
// made before users existed have.
func (p Principal) owner() string {
	if p.Root {
		return ""
	}
	return p.User
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

// authorize refuses a request of a user that is not the root user for a bucket another
// user owns, and a copy from such a bucket. A bucket this node's map does not have yet is
// looked up through the leader (it may have been created through another gateway a
// moment ago); one that does not exist is left to the operation (NoSuchBucket).
func (h *Handler) authorize(r *http.Request, rq *request) error {
	switch {
	case rq.who.Root, rq.op == "ListBuckets", rq.op == "CreateBucket":
		return nil
	case rq.op == "PostObject" && rq.auth == nil:
		return nil // authorized by postObject once its form's signature is verified
	}
	if err := h.mayUse(r, rq, rq.bucket); err != nil {
		return err
	}
	if rq.op == "CopyObject" || rq.op == "UploadPartCopy" {
		if sb, _, err := copySource(r.Header.Get("x-amz-copy-source")); err == nil {
			return h.mayUse(r, rq, sb)
		}
	}
	return nil
}

func (h *Handler) mayUse(r *http.Request, rq *request, bucket string) error {
	if bucket == "" {
		return nil
	}
	b, err := h.store.LocalBucket(bucket)
	if err != nil {
		if b, err = h.store.HeadBucket(r.Context(), bucket); err != nil {
			if errors.Is(errors.NotExist, err) {
				return nil
			}
			return err
		}
	}
	if b.Owner != rq.who.User {
		return errAccessDenied
	}
	return nil
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
