package s3api

import (
	"context"
	"encoding/xml"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/cairnfs/cairn/internal/object"
)

// CORS: a bucket's CORSConfiguration (PutBucketCors, kept as the bucket configuration of
// kind "cors"), the preflight OPTIONS request answered from its rules without
// authentication, and the Access-Control-* headers of actual requests that carry an Origin.
// A request without Origin costs nothing here; one with Origin to a bucket without CORS
// costs the bucket lookup (the cluster map's, in a cluster).

const (
	corsKind     = "cors"   // the bucket configuration kind
	maxCORSRules = 100      // S3's limit
	maxCORSDoc   = 64 << 10 // the request body limit of PutBucketCors
	maxCORSID    = 255
)

// corsConfig is a CORSConfiguration document, as sent and as stored (re-encoded).
type corsConfig struct {
	XMLName xml.Name   `xml:"CORSConfiguration"`
	Xmlns   string     `xml:"xmlns,attr,omitempty"`
	Rules   []corsRule `xml:"CORSRule"`
}

type corsRule struct {
	ID             string   `xml:"ID,omitempty"`
	AllowedHeaders []string `xml:"AllowedHeader"`
	AllowedMethods []string `xml:"AllowedMethod"`
	AllowedOrigins []string `xml:"AllowedOrigin"`
	ExposeHeaders  []string `xml:"ExposeHeader"`
	MaxAgeSeconds  *int     `xml:"MaxAgeSeconds"`
}

var (
	errNoSuchCORS   = &apiError{"NoSuchCORSConfiguration", "The CORS configuration does not exist", 404}
	errCORSDisabled = &apiError{"AccessForbidden", "CORSResponse: CORS is not enabled for this bucket.", 403}
	errCORSDenied   = &apiError{"AccessForbidden", "CORSResponse: This CORS request is not allowed. No CORS rule of the bucket allows its Origin with its Access-Control-Request-Method and every one of its Access-Control-Request-Headers.", 403}
)

// parseCORS decodes and validates a CORSConfiguration as S3 does: MalformedXML for a
// document that does not decode or lacks required elements (no rule, more than 100, a
// rule without origin or method), InvalidRequest for values S3 refuses.
func parseCORS(data []byte) (*corsConfig, error) {
	var c corsConfig
	if err := xml.Unmarshal(data, &c); err != nil {
		return nil, errMalformedXML
	}
	return &c, c.validate()
}

// validate checks a decoded configuration (see parseCORS).
func (c *corsConfig) validate() error {
	if len(c.Rules) == 0 || len(c.Rules) > maxCORSRules {
		return errMalformedXML
	}
	for i := range c.Rules {
		rl := &c.Rules[i]
		if len(rl.AllowedOrigins) == 0 || len(rl.AllowedMethods) == 0 {
			return errMalformedXML
		}
		if len(rl.ID) > maxCORSID {
			return errf(400, "InvalidArgument", "The ID of a CORS rule must be at most %d characters.", maxCORSID)
		}
		for _, m := range rl.AllowedMethods {
			if !corsMethod(m) {
				return errf(400, "InvalidRequest", "Found unsupported HTTP method in CORS config. Unsupported method is %s", m)
			}
		}
		for _, o := range rl.AllowedOrigins {
			if strings.Count(o, "*") > 1 {
				return errf(400, "InvalidRequest", "AllowedOrigin %q can not have more than one wildcard.", o)
			}
		}
		for _, hd := range rl.AllowedHeaders {
			if strings.Count(hd, "*") > 1 {
				return errf(400, "InvalidRequest", "AllowedHeader %q can not have more than one wildcard.", hd)
			}
		}
		for _, hd := range rl.ExposeHeaders {
			if strings.Contains(hd, "*") {
				return errf(400, "InvalidRequest", "ExposeHeader %q contains wildcard. We currently do not support wildcard for ExposeHeader.", hd)
			}
		}
		if rl.MaxAgeSeconds != nil && *rl.MaxAgeSeconds < 0 {
			return errMalformedXML
		}
	}
	return nil
}

// corsMethod reports whether m is one of the methods a CORS rule may allow.
func corsMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete, http.MethodHead:
		return true
	}
	return false
}

// wildcardMatch matches s against a pattern with at most one '*', which stands for any
// run of characters. fold compares case-insensitively.
func wildcardMatch(pattern, s string, fold bool) bool {
	if fold {
		pattern, s = strings.ToLower(pattern), strings.ToLower(s)
	}
	pre, suf, star := strings.Cut(pattern, "*")
	if !star {
		return pattern == s
	}
	return len(s) >= len(pre)+len(suf) && strings.HasPrefix(s, pre) && strings.HasSuffix(s, suf)
}

// match returns the first rule that allows origin to use method with every one of
// headers (lower case), and whether that rule's matching origin pattern is "*" alone.
func (c *corsConfig) match(origin, method string, headers []string) (*corsRule, bool) {
	for i := range c.Rules {
		rl := &c.Rules[i]
		wild, ok := false, false
		for _, o := range rl.AllowedOrigins {
			if wildcardMatch(o, origin, false) {
				ok, wild = true, o == "*"
				break
			}
		}
		if !ok {
			continue
		}
		ok = false
		for _, m := range rl.AllowedMethods {
			if m == method {
				ok = true
				break
			}
		}
		if !ok {
			continue
		}
		for _, hd := range headers {
			ok = false
			for _, a := range rl.AllowedHeaders {
				if wildcardMatch(a, hd, true) {
					ok = true
					break
				}
			}
			if !ok {
				break
			}
		}
		if ok {
			return rl, wild
		}
	}
	return nil, false
}

// setAllow sets the headers a matching rule grants: the origin (or "*" for a rule open
// to every origin, which then grants no credentials), the methods, the headers the page
// may read and how long a preflight may be cached.
func (rl *corsRule) setAllow(hd http.Header, origin string, wild bool) {
	if wild {
		hd.Set("Access-Control-Allow-Origin", "*")
	} else {
		hd.Set("Access-Control-Allow-Origin", origin)
		hd.Set("Access-Control-Allow-Credentials", "true")
	}
	hd.Set("Access-Control-Allow-Methods", strings.Join(rl.AllowedMethods, ", "))
	if len(rl.ExposeHeaders) > 0 {
		hd.Set("Access-Control-Expose-Headers", strings.Join(rl.ExposeHeaders, ", "))
	}
	if rl.MaxAgeSeconds != nil {
		hd.Set("Access-Control-Max-Age", strconv.Itoa(*rl.MaxAgeSeconds))
	}
}

// corsCache keeps the parsed form of the CORS documents in use, keyed by the document, so
// that a request with an Origin header does not parse XML. It is emptied when full.
type corsCache struct {
	mu sync.Mutex
	m  map[string]*corsConfig
}

const maxCORSCache = 1024

func (c *corsCache) get(doc string) *corsConfig {
	c.mu.Lock()
	cfg, ok := c.m[doc]
	c.mu.Unlock()
	if ok {
		return cfg
	}
	cfg, err := parseCORS([]byte(doc))
	if err != nil || cfg == nil {
		cfg = nil // stored documents were validated; one that no longer parses allows nothing
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCORSCache {
		c.m = make(map[string]*corsConfig)
	}
	c.m[doc] = cfg
	c.mu.Unlock()
	return cfg
}

// bucketCORS returns the bucket's CORS configuration, nil if it has none. For a preflight
// (unauthenticated) it looks only at this node's map: an anonymous request must not make
// the node ask the Raft leader about a bucket it does not know.
func (h *Handler) bucketCORS(ctx context.Context, bucket string, anonymous bool) (*corsConfig, error) {
	var b object.Bucket
	var err error
	if anonymous {
		b, err = h.store.LocalBucket(bucket)
	} else {
		b, err = h.store.HeadBucket(ctx, bucket)
	}
	if err != nil {
		return nil, err
	}
	doc, ok := b.Config[corsKind]
	if !ok || doc == "" {
		return nil, nil
	}
	return h.cors.get(doc), nil
}

// corsHeaders adds the CORS headers of an actual (not preflight), authenticated request
// (or a POST upload) that carries an Origin header: Vary: Origin when the bucket has CORS, and what the first rule matching
// the origin and the request's method grants. Errors (no bucket, ...) add nothing: the
// request itself reports them. writeError keeps these headers, so that a page can read
// the S3 error too.
func (h *Handler) corsHeaders(w http.ResponseWriter, r *http.Request, rq *request, anonymous bool) {
	origin := r.Header.Get("Origin")
	if origin == "" || rq.bucket == "" || rq.op == "Preflight" || !validBucketName(rq.bucket) {
		return
	}
	cfg, err := h.bucketCORS(r.Context(), rq.bucket, anonymous)
	if err != nil || cfg == nil {
		return
	}
	hd := w.Header()
	hd.Add("Vary", "Origin")
	if rl, wild := cfg.match(origin, r.Method, nil); rl != nil {
		rl.setAllow(hd, origin, wild)
	}
}

// preflight answers an OPTIONS request from the bucket's CORS rules. It is not
// authenticated (browsers send no credentials with it).
func (h *Handler) preflight(w http.ResponseWriter, r *http.Request, rq *request) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return errf(400, "BadRequest", "Insufficient information. Origin request header needed.")
	}
	method := r.Header.Get("Access-Control-Request-Method")
	if method == "" {
		return errf(400, "BadRequest", "Invalid Access-Control-Request-Method: null")
	}
	if rq.bucket == "" {
		return errCORSDisabled
	}
	if !validBucketName(rq.bucket) {
		return errNoSuchBucket // without a lookup
	}
	cfg, err := h.bucketCORS(r.Context(), rq.bucket, true)
	if err != nil {
		return err
	}
	if cfg == nil {
		return errCORSDisabled
	}
	var headers []string
	for _, v := range r.Header.Values("Access-Control-Request-Headers") {
		for hd := range strings.SplitSeq(v, ",") {
			if hd = strings.ToLower(strings.TrimSpace(hd)); hd != "" {
				headers = append(headers, hd)
			}
		}
	}
	rl, wild := cfg.match(origin, method, headers)
	if rl == nil {
		return errCORSDenied
	}
	hd := w.Header()
	rl.setAllow(hd, origin, wild)
	if len(headers) > 0 {
		hd.Set("Access-Control-Allow-Headers", strings.Join(headers, ", "))
	}
	hd.Set("Vary", "Origin, Access-Control-Request-Headers, Access-Control-Request-Method")
	hd.Set("Content-Length", "0")
	w.WriteHeader(http.StatusOK)
	return nil
}

func (h *Handler) putBucketCors(w http.ResponseWriter, r *http.Request, rq *request) error {
	var cfg corsConfig
	if err := readXML(r, rq, maxCORSDoc, &cfg); err != nil {
		return err
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	cfg.Xmlns = xmlns
	doc, err := xml.Marshal(&cfg)
	if err != nil {
		return err
	}
	if err := h.store.SetBucketConfig(r.Context(), rq.bucket, corsKind, doc); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (h *Handler) getBucketCors(w http.ResponseWriter, r *http.Request, rq *request) error {
	b, err := h.store.HeadBucket(r.Context(), rq.bucket)
	if err != nil {
		return err
	}
	doc := b.Config[corsKind]
	if doc == "" {
		return errNoSuchCORS
	}
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(xml.Header)+len(doc)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write([]byte(xml.Header))
		w.Write([]byte(doc))
	}
	return nil
}

func (h *Handler) deleteBucketCors(w http.ResponseWriter, r *http.Request, rq *request) error {
	if err := h.store.SetBucketConfig(r.Context(), rq.bucket, corsKind, nil); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
