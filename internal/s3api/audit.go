package s3api

import (
	"net/http"
	"strings"
	"time"
)

// AccessRecord is one S3 request as the access log records it (Config.AccessLog): who
// made it (the user and key that signed it; for a refused one, the key it claimed), what
// it asked, and what it got.
type AccessRecord struct {
	Time      time.Time     `json:"time"`
	RequestID string        `json:"request_id"`
	Remote    string        `json:"remote"` // the client's address
	User      string        `json:"user,omitempty"`
	AccessKey string        `json:"access_key,omitempty"`
	Anonymous bool          `json:"anonymous,omitempty"` // no credentials at all
	Op        string        `json:"op"`
	Method    string        `json:"method"`
	Bucket    string        `json:"bucket,omitempty"`
	Key       string        `json:"key,omitempty"`
	Status    int           `json:"status"`
	Error     string        `json:"error,omitempty"` // the S3 error code
	BytesIn   int64         `json:"bytes_in"`
	BytesOut  int64         `json:"bytes_out"`
	Duration  time.Duration `json:"duration_ns"`
	UserAgent string        `json:"user_agent,omitempty"`
	URI       string        `json:"uri"`  // the request's path and query
	Host      string        `json:"host"` // its Host header
	Referer   string        `json:"referer,omitempty"`
	AuthType  string        `json:"auth_type,omitempty"` // AuthHeader, QueryString or POST (a form)
	TLS       bool          `json:"tls,omitempty"`
}

// accessRecord builds the record of a finished request.
func (h *Handler) accessRecord(r *http.Request, rq *request, start time.Time, out int64) AccessRecord {
	rec := AccessRecord{Time: start.UTC(), RequestID: rq.id, Remote: r.RemoteAddr, Op: rq.op, Method: r.Method,
		Bucket: rq.bucket, Key: rq.key, Status: rq.status, Error: rq.code, BytesIn: rq.bytesIn, BytesOut: out,
		Duration: time.Since(start), UserAgent: r.UserAgent(), URI: r.URL.RequestURI(), Host: r.Host, Referer: r.Referer(),
		TLS: r.TLS != nil}
	switch {
	case rq.op == "PostObject":
		rec.AuthType = "POST"
	case r.Header.Get("Authorization") != "":
		rec.AuthType = "AuthHeader"
	case r.URL.RawQuery != "" && (r.URL.Query().Has("X-Amz-Signature") || r.URL.Query().Has("Signature")):
		rec.AuthType = "QueryString"
	}
	if rq.who.Anonymous {
		rec.Anonymous = true
	} else if rq.auth != nil {
		rec.AccessKey = rq.auth.AccessKey
		rec.User = rq.who.User
		if rq.who.Root {
			rec.User = "root"
		}
	} else {
		rec.AccessKey = claimedKey(r)
		rec.Anonymous = rec.AccessKey == ""
	}
	return rec
}

// claimedKey is the access key a request names, whether or not its signature is good:
// in a SigV4 or V2 Authorization header, or a presigned URL's query.
func claimedKey(r *http.Request) string {
	if a := r.Header.Get("Authorization"); a != "" {
		if _, rest, ok := strings.Cut(a, "Credential="); ok {
			k, _, _ := strings.Cut(rest, "/")
			return k
		}
		if rest, ok := strings.CutPrefix(a, "AWS "); ok {
			k, _, _ := strings.Cut(rest, ":")
			return k
		}
		return ""
	}
	q := r.URL.Query()
	if c := q.Get("X-Amz-Credential"); c != "" {
		k, _, _ := strings.Cut(c, "/")
		return k
	}
	return q.Get("AWSAccessKeyId")
}
