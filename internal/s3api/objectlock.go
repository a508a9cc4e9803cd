package s3api

import (
	"context"
	"encoding/xml"
	"net/http"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/object"
)

// Object Lock (docs/design/object-lock.md). A bucket with Object Lock has its
// configuration of kind "object-lock" (the ObjectLockConfiguration document, with an
// optional default retention) and versioning Enabled for good. A version's retention and
// legal hold are in-place metadata of its record. Removing a version for good is refused
// while it is under a legal hold or a retention in force; a GOVERNANCE retention yields
// to x-amz-bypass-governance-retention from a user allowed s3:BypassGovernanceRetention,
// a COMPLIANCE retention to nobody (every holder refuses it too, and no merge of
// replicas shortens one). Time is the handler's clock (Config.Now).

const objectLockKind = "object-lock"

var (
	errNoLockConfig = errf(400, "InvalidRequest", "Bucket is missing Object Lock Configuration")
	errLocked       = &apiError{"AccessDenied", "Access Denied because object protected by object lock.", 403}
)

// lockConfig is an ObjectLockConfiguration document.
type lockConfig struct {
	XMLName           xml.Name  `xml:"ObjectLockConfiguration"`
	Xmlns             string    `xml:"xmlns,attr,omitempty"`
	ObjectLockEnabled string    `xml:"ObjectLockEnabled,omitempty"`
	Rule              *lockRule `xml:"Rule,omitempty"`
}

type lockRule struct {
	DefaultRetention struct {
		Mode  string
		Days  int `xml:",omitempty"`
		Years int `xml:",omitempty"`
	}
}

// bucketLock returns bucket b's Object Lock configuration (nil: none).
func bucketLock(b object.Bucket) *lockConfig {
	doc := b.Config[objectLockKind]
	if doc == "" {
		return nil
	}
	var c lockConfig
	if xml.Unmarshal([]byte(doc), &c) != nil {
		return nil
	}
	return &c
}

// enableLock gives a bucket Object Lock: versioning Enabled, then the configuration.
func (h *Handler) enableLock(ctx context.Context, bucket string, c *lockConfig) error {
	if err := h.store.SetBucketConfig(ctx, bucket, versioningKind, []byte(versioningEnabled)); err != nil {
		return err
	}
	c.Xmlns, c.ObjectLockEnabled = xmlns, "Enabled"
	doc, err := xml.Marshal(c)
	if err != nil {
		return err
	}
	return h.store.SetBucketConfig(ctx, bucket, objectLockKind, doc)
}

func (h *Handler) getObjectLockConfiguration(w http.ResponseWriter, r *http.Request, rq *request) error {
	b, err := h.store.HeadBucket(r.Context(), rq.bucket)
	if err != nil {
		return err
	}
	c := bucketLock(b)
	if c == nil {
		return errf(404, "ObjectLockConfigurationNotFoundError", "Object Lock configuration does not exist for this bucket")
	}
	c.Xmlns = xmlns
	return writeXML(w, c)
}

func (h *Handler) putObjectLockConfiguration(w http.ResponseWriter, r *http.Request, rq *request) error {
	var c lockConfig
	if err := readXML(r, rq, 64<<10, &c); err != nil {
		return err
	}
	if c.ObjectLockEnabled != "Enabled" {
		return errMalformedXML
	}
	if c.Rule != nil {
		d := c.Rule.DefaultRetention
		if d.Mode != object.LockGovernance && d.Mode != object.LockCompliance {
			return errMalformedXML
		}
		if d.Days != 0 && d.Years != 0 {
			return errMalformedXML // days or years, not both
		}
		if d.Days < 0 || d.Years < 0 || (d.Days == 0 && d.Years == 0) || d.Days > 36500 || d.Years > 100 {
			return errf(400, "InvalidRetentionPeriod", "Default retention period must be a positive integer value of at most 100 years.")
		}
	}
	status, err := h.versioning(r.Context(), rq.bucket)
	if err != nil {
		return err
	}
	if status != versioningEnabled {
		return errf(409, "InvalidBucketState", "Versioning must be 'Enabled' on the bucket to apply a Object Lock configuration")
	}
	if err := h.enableLock(r.Context(), rq.bucket, &c); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// lockWrite applies the Object Lock of a write to meta: the retention and legal hold
// headers, or the bucket's default retention. Lock headers on a bucket without Object
// Lock are refused.
func (h *Handler) lockWrite(hd http.Header, b object.Bucket, meta *object.Object) error {
	// A new version: nothing of a copy source's lock (or tags' history) carries over.
	meta.Retention, meta.LegalHold, meta.RetentionHLC, meta.HoldHLC, meta.TagsHLC = object.Retention{}, false, 0, 0, 0
	mode, until, hold := hd.Get("x-amz-object-lock-mode"), hd.Get("x-amz-object-lock-retain-until-date"), hd.Get("x-amz-object-lock-legal-hold")
	lc := bucketLock(b)
	if lc == nil {
		if mode != "" || until != "" || hold != "" {
			return errNoLockConfig
		}
		return nil
	}
	switch {
	case mode != "" || until != "":
		if mode == "" || until == "" {
			return errf(400, "InvalidArgument", "x-amz-object-lock-retain-until-date and x-amz-object-lock-mode must both be supplied")
		}
		ret, err := h.parseRetention(mode, until)
		if err != nil {
			return err
		}
		meta.Retention = ret
	case lc.Rule != nil:
		d := lc.Rule.DefaultRetention
		end := h.now().AddDate(d.Years, 0, d.Days)
		meta.Retention = object.Retention{Mode: d.Mode, Until: end.UnixNano()}
	}
	switch hold {
	case "":
	case "ON":
		meta.LegalHold = true
	case "OFF":
	default:
		return errf(400, "InvalidArgument", "Legal Hold must be either of 'ON' or 'OFF'")
	}
	return nil
}

// parseRetention checks a retention's mode and date (in the future).
func (h *Handler) parseRetention(mode, until string) (object.Retention, error) {
	if mode != object.LockGovernance && mode != object.LockCompliance {
		return object.Retention{}, errf(400, "InvalidArgument", "Unknown wormMode directive.")
	}
	t, err := time.Parse(time.RFC3339Nano, until)
	if err != nil {
		return object.Retention{}, errf(400, "InvalidArgument", "The retain until date must be provided in ISO 8601 format")
	}
	if !t.After(h.now()) {
		return object.Retention{}, errf(400, "InvalidArgument", "The retain until date must be in the future!")
	}
	return object.Retention{Mode: mode, Until: t.UnixNano()}, nil
}

// bypass reports whether the request asks to bypass GOVERNANCE retentions and its
// signer may (s3:BypassGovernanceRetention).
func (h *Handler) bypass(r *http.Request, rq *request, key string) bool {
	if !strings.EqualFold(r.Header.Get("x-amz-bypass-governance-retention"), "true") {
		return false
	}
	_, err := h.allowed(r, rq, rq.bucket, key, needOwner, "s3:BypassGovernanceRetention")
	return err == nil
}

// lockHeaders names a version's Object Lock in a GET or HEAD answer.
func lockHeaders(hd http.Header, o *object.Object) {
	if o.Retention.Mode != "" {
		hd.Set("x-amz-object-lock-mode", o.Retention.Mode)
		hd.Set("x-amz-object-lock-retain-until-date", time.Unix(0, o.Retention.Until).UTC().Format(time.RFC3339))
	}
	if o.LegalHold {
		hd.Set("x-amz-object-lock-legal-hold", "ON")
	} else if o.HoldHLC != 0 {
		hd.Set("x-amz-object-lock-legal-hold", "OFF")
	}
}

// lockedVersion refuses the removal of version o now, unless bypass and only a
// GOVERNANCE retention protects it.
func (h *Handler) lockedVersion(o *object.Object, bypass bool) error {
	if o.Locked(h.now().UnixNano(), bypass) {
		return errLocked
	}
	return nil
}

// requestedVersion is statRequested for the Object Lock sub-resources: the bucket must
// have Object Lock.
func (h *Handler) requestedVersion(w http.ResponseWriter, r *http.Request, rq *request) (*object.Object, error) {
	b, err := h.store.HeadBucket(r.Context(), rq.bucket)
	if err != nil {
		return nil, err
	}
	if bucketLock(b) == nil {
		return nil, errNoLockConfig
	}
	return h.statRequested(w, r, rq)
}

type retentionDoc struct {
	XMLName         xml.Name `xml:"Retention"`
	Xmlns           string   `xml:"xmlns,attr,omitempty"`
	Mode            string   `xml:",omitempty"`
	RetainUntilDate string   `xml:",omitempty"`
}

func (h *Handler) getObjectRetention(w http.ResponseWriter, r *http.Request, rq *request) error {
	o, err := h.requestedVersion(w, r, rq)
	if err != nil {
		return err
	}
	if o.Retention.Mode == "" {
		return errf(404, "NoSuchObjectLockConfiguration", "The specified object does not have a ObjectLock configuration")
	}
	return writeXML(w, retentionDoc{Xmlns: xmlns, Mode: o.Retention.Mode, RetainUntilDate: time.Unix(0, o.Retention.Until).UTC().Format(time.RFC3339Nano)})
}

func (h *Handler) putObjectRetention(w http.ResponseWriter, r *http.Request, rq *request) error {
	var doc retentionDoc
	if err := readXML(r, rq, 64<<10, &doc); err != nil {
		return err
	}
	var ret object.Retention
	if doc.Mode != "" && doc.Mode != object.LockGovernance && doc.Mode != object.LockCompliance {
		return errMalformedXML
	}
	if doc.Mode != "" || doc.RetainUntilDate != "" {
		var err error
		if ret, err = h.parseRetention(doc.Mode, doc.RetainUntilDate); err != nil {
			return err
		}
	}
	o, err := h.requestedVersion(w, r, rq)
	if err != nil {
		return err
	}
	if !object.RetentionChangeAllowed(o.Retention, ret, h.now().UnixNano(), h.bypass(r, rq, rq.key)) {
		return errLocked
	}
	if _, err := h.store.ChangeMeta(r.Context(), rq.bucket, rq.key, versionOf(o), gateway.MetaChange{Retention: &ret}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

type legalHoldDoc struct {
	XMLName xml.Name `xml:"LegalHold"`
	Xmlns   string   `xml:"xmlns,attr,omitempty"`
	Status  string
}

func (h *Handler) getObjectLegalHold(w http.ResponseWriter, r *http.Request, rq *request) error {
	o, err := h.requestedVersion(w, r, rq)
	if err != nil {
		return err
	}
	if !o.LegalHold && o.HoldHLC == 0 {
		return errf(404, "NoSuchObjectLockConfiguration", "The specified object does not have a ObjectLock configuration")
	}
	status := "OFF"
	if o.LegalHold {
		status = "ON"
	}
	return writeXML(w, legalHoldDoc{Xmlns: xmlns, Status: status})
}

func (h *Handler) putObjectLegalHold(w http.ResponseWriter, r *http.Request, rq *request) error {
	var doc legalHoldDoc
	if err := readXML(r, rq, 64<<10, &doc); err != nil {
		return err
	}
	if doc.Status != "ON" && doc.Status != "OFF" {
		return errMalformedXML
	}
	o, err := h.requestedVersion(w, r, rq)
	if err != nil {
		return err
	}
	on := doc.Status == "ON"
	if _, err := h.store.ChangeMeta(r.Context(), rq.bucket, rq.key, versionOf(o), gateway.MetaChange{LegalHold: &on}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// versionOf names version o for ChangeMeta: its HLC (any version, current or not).
func versionOf(o *object.Object) uint64 { return o.HLC }
