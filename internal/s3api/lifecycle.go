package s3api

import (
	"encoding/xml"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/cairnfs/cairn/internal/lifecycle"
)

// Lifecycle: a bucket's LifecycleConfiguration (PutBucketLifecycleConfiguration, kept as
// the bucket configuration of kind "lifecycle" in the cluster map, so every gateway
// serves it). Package lifecycle parses and validates it; the background runner (package
// repair) applies it. docs/design/lifecycle.md.

// lifecycleKind is the bucket configuration kind (also the runner's).
const lifecycleKind = "lifecycle"

var errNoSuchLifecycle = &apiError{"NoSuchLifecycleConfiguration", "The lifecycle configuration does not exist", 404}

// lifecycleError turns a refusal of package lifecycle into the S3 error.
func lifecycleError(err error) error {
	var e *lifecycle.Error
	if errors.As(err, &e) {
		return &apiError{e.Code, e.Message, e.Status}
	}
	return err
}

// hasBodyDigest reports whether a request declares a digest of its body: Content-MD5 or
// a flexible checksum (a header, or a trailer). S3 requires one for
// PutBucketLifecycleConfiguration (the SDKs send a CRC32 checksum by default).
func hasBodyDigest(r *http.Request) bool {
	if r.Header.Get("Content-Md5") != "" {
		return true
	}
	for k := range r.Header {
		if strings.HasPrefix(k, "X-Amz-Checksum-") && k != "X-Amz-Checksum-Mode" && k != "X-Amz-Checksum-Algorithm" && k != "X-Amz-Checksum-Type" {
			return true
		}
	}
	return strings.Contains(strings.ToLower(r.Header.Get("X-Amz-Trailer")), "x-amz-checksum-")
}

func (h *Handler) putBucketLifecycle(w http.ResponseWriter, r *http.Request, rq *request) error {
	if !hasBodyDigest(r) {
		return errf(400, "InvalidRequest", "Missing required header for this request: Content-Md5.")
	}
	data, err := readBody(r, rq, lifecycle.MaxDoc)
	if err != nil {
		return err
	}
	cfg, err := lifecycle.Parse(data)
	if err != nil {
		return lifecycleError(err)
	}
	doc, err := cfg.Marshal()
	if err != nil {
		return err
	}
	if err := h.store.SetBucketConfig(r.Context(), rq.bucket, lifecycleKind, doc); err != nil {
		return err
	}
	w.Header().Set("X-Amz-Transition-Default-Minimum-Object-Size", "all_storage_classes_128K")
	w.WriteHeader(http.StatusOK)
	return nil
}

func (h *Handler) getBucketLifecycle(w http.ResponseWriter, r *http.Request, rq *request) error {
	b, err := h.store.HeadBucket(r.Context(), rq.bucket)
	if err != nil {
		return err
	}
	doc := b.Config[lifecycleKind]
	if doc == "" {
		return errNoSuchLifecycle
	}
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(xml.Header)+len(doc)))
	w.Header().Set("X-Amz-Transition-Default-Minimum-Object-Size", "all_storage_classes_128K")
	w.WriteHeader(http.StatusOK)
	w.Write([]byte(xml.Header))
	w.Write([]byte(doc))
	return nil
}

func (h *Handler) deleteBucketLifecycle(w http.ResponseWriter, r *http.Request, rq *request) error {
	if err := h.store.SetBucketConfig(r.Context(), rq.bucket, lifecycleKind, nil); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
