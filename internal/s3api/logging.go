package s3api

import (
	"encoding/json"
	"encoding/xml"
	"net/http"
	"strings"
)

// LoggingKind is the bucket configuration kind of server access logging: a JSON
// LoggingConfig. The server delivers the records (package server).
const LoggingKind = "logging"

// LoggingConfig is where a bucket's server access log records go: objects under
// TargetPrefix in TargetBucket.
type LoggingConfig struct {
	TargetBucket string `json:"target_bucket"`
	TargetPrefix string `json:"target_prefix"`
}

type loggingStatus struct {
	XMLName        xml.Name `xml:"BucketLoggingStatus"`
	Xmlns          string   `xml:"xmlns,attr,omitempty"`
	LoggingEnabled *struct {
		TargetBucket string
		TargetPrefix string
		TargetGrants *struct {
			Grant []struct{} `xml:"Grant"`
		} `xml:"TargetGrants,omitempty"`
	} `xml:"LoggingEnabled,omitempty"`
}

var (
	errInvalidLoggingTarget = &apiError{"InvalidTargetBucketForLogging", "The target bucket for logging does not exist, or is owned by another user than the bucket to be logged.", http.StatusBadRequest}
)

// bucketLogging answers Get/PutBucketLogging. A target must exist and have the logged
// bucket's owner (so nobody ships records into a bucket of someone else); grants in the
// target are ACLs, refused.
func (h *Handler) bucketLogging(w http.ResponseWriter, r *http.Request, rq *request) error {
	if rq.op == "GetBucketLogging" {
		b, err := h.store.HeadBucket(r.Context(), rq.bucket)
		if err != nil {
			return err
		}
		st := loggingStatus{Xmlns: xmlns}
		if doc := b.Config[LoggingKind]; doc != "" {
			var c LoggingConfig
			if json.Unmarshal([]byte(doc), &c) == nil {
				st.LoggingEnabled = &struct {
					TargetBucket string
					TargetPrefix string
					TargetGrants *struct {
						Grant []struct{} `xml:"Grant"`
					} `xml:"TargetGrants,omitempty"`
				}{TargetBucket: c.TargetBucket, TargetPrefix: c.TargetPrefix}
			}
		}
		return writeXML(w, st)
	}
	var st loggingStatus
	if err := readXML(r, rq, 16<<10, &st); err != nil {
		return err
	}
	b, err := h.store.HeadBucket(r.Context(), rq.bucket)
	if err != nil {
		return err
	}
	var doc []byte
	if le := st.LoggingEnabled; le != nil {
		if le.TargetGrants != nil && len(le.TargetGrants.Grant) > 0 {
			return errACLNotSupported
		}
		if !validBucketName(le.TargetBucket) || len(le.TargetPrefix) > 512 || strings.ContainsRune(le.TargetPrefix, 0) {
			return errInvalidLoggingTarget
		}
		t, err := h.store.HeadBucket(r.Context(), le.TargetBucket)
		if err != nil || t.Owner != b.Owner {
			return errInvalidLoggingTarget
		}
		doc, _ = json.Marshal(LoggingConfig{TargetBucket: le.TargetBucket, TargetPrefix: le.TargetPrefix})
	}
	if err := h.store.SetBucketConfig(r.Context(), rq.bucket, LoggingKind, doc); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}
