package s3api

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"net/http"

	"github.com/cairnfs/cairn/internal/access"
)

// Bucket configuration kinds of the bucket policy and the Block Public Access settings.
const (
	policyKind            = "policy"
	publicAccessBlockKind = "publicAccessBlock"
)

var (
	errNoSuchBucketPolicy  = &apiError{"NoSuchBucketPolicy", "The bucket policy does not exist", http.StatusNotFound}
	errNoSuchPAB           = &apiError{"NoSuchPublicAccessBlockConfiguration", "The public access block configuration was not found", http.StatusNotFound}
	errPublicPolicyBlocked = &apiError{"AccessDenied", "Access Denied: the bucket policy is public and the bucket's BlockPublicPolicy setting blocks public policies", http.StatusForbidden}
)

// bucketPolicy answers Get/Put/DeleteBucketPolicy and GetBucketPolicyStatus.
func (h *Handler) bucketPolicy(w http.ResponseWriter, r *http.Request, rq *request) error {
	switch rq.op {
	case "PutBucketPolicy":
		doc, err := readBody(r, rq, access.MaxPolicySize)
		if err != nil {
			return err
		}
		b, err := h.store.HeadBucket(r.Context(), rq.bucket)
		if err != nil {
			return err
		}
		pol, err := access.Parse(doc, rq.bucket)
		if err != nil {
			var pe *access.Error
			if errors.As(err, &pe) && pe.NotImplemented {
				return errf(http.StatusNotImplemented, "NotImplemented", "%s", pe.Msg)
			}
			return errf(http.StatusBadRequest, "MalformedPolicy", "%v", err)
		}
		if pol.IsPublic() && parsePAB(b.Config[publicAccessBlockKind]).BlockPublicPolicy {
			return errPublicPolicyBlocked
		}
		if err := h.store.SetBucketConfig(r.Context(), rq.bucket, policyKind, doc); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	case "DeleteBucketPolicy":
		return h.deleteBucketConfig(w, r, rq, policyKind)
	}
	b, err := h.store.HeadBucket(r.Context(), rq.bucket)
	if err != nil {
		return err
	}
	doc := b.Config[policyKind]
	if doc == "" {
		return errNoSuchBucketPolicy
	}
	if rq.op == "GetBucketPolicy" {
		w.Header().Set("Content-Type", "application/json")
		_, err := w.Write([]byte(doc))
		return err
	}
	pol, err := h.policies.get(rq.bucket, doc)
	if err != nil {
		return err
	}
	return writeXML(w, struct {
		XMLName  xml.Name `xml:"PolicyStatus"`
		Xmlns    string   `xml:"xmlns,attr"`
		IsPublic bool
	}{Xmlns: xmlns, IsPublic: pol.IsPublic()})
}

// pab is a bucket's Block Public Access settings. There are no ACLs (Object Ownership
// is BucketOwnerEnforced), so the two ACL settings hold by construction; the two policy
// settings are enforced: BlockPublicPolicy refuses a public policy, RestrictPublicBuckets
// makes the public statements of one count only for the bucket's owner.
type pab struct {
	XMLName               xml.Name `xml:"PublicAccessBlockConfiguration" json:"-"`
	Xmlns                 string   `xml:"xmlns,attr,omitempty" json:"-"`
	BlockPublicAcls       bool
	IgnorePublicAcls      bool
	BlockPublicPolicy     bool
	RestrictPublicBuckets bool
}

func parsePAB(doc string) pab {
	var p pab
	if doc != "" {
		json.Unmarshal([]byte(doc), &p)
	}
	return p
}

// publicAccessBlock answers Get/Put/DeletePublicAccessBlock.
func (h *Handler) publicAccessBlock(w http.ResponseWriter, r *http.Request, rq *request) error {
	switch rq.op {
	case "PutPublicAccessBlock":
		var p pab
		if err := readXML(r, rq, 4<<10, &p); err != nil {
			return err
		}
		doc, _ := json.Marshal(p)
		if err := h.store.SetBucketConfig(r.Context(), rq.bucket, publicAccessBlockKind, doc); err != nil {
			return err
		}
		w.WriteHeader(http.StatusOK)
		return nil
	case "DeletePublicAccessBlock":
		return h.deleteBucketConfig(w, r, rq, publicAccessBlockKind)
	}
	b, err := h.store.HeadBucket(r.Context(), rq.bucket)
	if err != nil {
		return err
	}
	doc := b.Config[publicAccessBlockKind]
	if doc == "" {
		return errNoSuchPAB
	}
	p := parsePAB(doc)
	p.Xmlns = xmlns
	return writeXML(w, p)
}

// deleteBucketConfig removes the bucket's configuration of a kind (204, also when it had
// none; NoSuchBucket for a bucket that does not exist).
func (h *Handler) deleteBucketConfig(w http.ResponseWriter, r *http.Request, rq *request, kind string) error {
	if _, err := h.store.HeadBucket(r.Context(), rq.bucket); err != nil {
		return err
	}
	if err := h.store.SetBucketConfig(r.Context(), rq.bucket, kind, nil); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
