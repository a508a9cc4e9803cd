package s3api

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/lifecycle"
	"github.com/cairnfs/cairn/internal/object"
)

// Lifecycle: a bucket's LifecycleConfiguration (PutBucketLifecycleConfiguration, kept as
// the bucket configuration of kind "lifecycle" in the cluster map, so every gateway
// serves it). Package lifecycle parses and validates it; the background runner (package
// repair) applies it. docs/design/lifecycle.md.

// lifecycleKind is the bucket configuration kind (also the runner's).
const lifecycleKind = "lifecycle"

var errNoncurrentTransitionUpgrade = &apiError{"ServiceUnavailable", "The cluster is being upgraded: lifecycle NoncurrentVersionTransition rules work once every node runs a build of feature level 10.", 503}
var errLifecycleUpgrade = &apiError{"ServiceUnavailable", "The cluster is being upgraded: lifecycle Transition rules work once every node runs a build of feature level 9.", 503}

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
	if cfg.Transitions() {
		// An older runner refuses to parse Transitions, and would expire nothing here.
		if !h.levelAtLeast(9) {
			return errLifecycleUpgrade
		}
		// A runner of level 9 parses Transitions but refuses NoncurrentVersionTransitions.
		if cfg.NoncurrentTransitions() && !h.levelAtLeast(10) {
			return errNoncurrentTransitionUpgrade
		}
		known := func(tier string) bool { return h.cfg.ArchiveTier != nil && h.cfg.ArchiveTier(tier) }
		if err := cfg.CheckTiers(known); err != nil {
			return lifecycleError(err)
		}
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

// lifecycleCache keeps the parsed form of the lifecycle documents in use, keyed by the
// document, so that the x-amz-expiration header of a GET does not parse XML. It is
// emptied when full.
type lifecycleCache struct {
	mu sync.Mutex
	m  map[string]*lifecycle.Config
}

const maxLifecycleCache = 256

func (c *lifecycleCache) get(doc string) *lifecycle.Config {
	c.mu.Lock()
	cfg, ok := c.m[doc]
	c.mu.Unlock()
	if ok {
		return cfg
	}
	cfg, err := lifecycle.Parse([]byte(doc))
	if err != nil {
		cfg = nil // stored documents were validated; one that no longer parses expires nothing
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxLifecycleCache {
		c.m = make(map[string]*lifecycle.Config)
	}
	c.m[doc] = cfg
	c.mu.Unlock()
	return cfg
}

// expirationHeader sets x-amz-expiration on the answer to a PUT, copy, multipart
// completion, GET or HEAD of the current version o of bucket/key when a current-version Expiration rule of the bucket
// matches it: when it expires (S3's rounding to midnight UTC) and the rule's ID. A bucket
// without rules costs the bucket lookup (the map's).
func (h *Handler) expirationHeader(ctx context.Context, hd http.Header, bucket, key string, o *object.Object) {
	if o == nil || o.DeleteMarker {
		return
	}
	b, err := h.store.HeadBucket(ctx, bucket)
	if err != nil || b.Config[lifecycleKind] == "" {
		return
	}
	cfg := h.lifecycle.get(b.Config[lifecycleKind])
	if cfg == nil {
		return
	}
	at, id, ok := cfg.Expiry(key, lifecycle.Version{HLC: o.HLC, ModTime: time.Unix(0, o.ModTime), Size: o.Size, Tags: o.Tags})
	if !ok {
		return
	}
	hd.Set("x-amz-expiration", fmt.Sprintf(`expiry-date="%s", rule-id="%s"`, at.UTC().Format(http.TimeFormat), id))
}
