package sigv4

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Signature Version 2, which botocore (boto3, aws cli v1) still uses by default for
// presigned S3 URLs: "?AWSAccessKeyId=..&Expires=..&Signature=..", and the older
// "Authorization: AWS AK:signature" header. The string to sign is
//
//	METHOD \n Content-MD5 \n Content-Type \n Expires-or-Date \n CanonicalizedAmzHeaders CanonicalizedResource
//
// and the signature is base64(HMAC-SHA1(secret, string to sign)). The payload is not
// signed: the caller's own checks (Content-MD5, checksums) are all that cover the body.

// v2SubResources are the query parameters that are part of the canonical resource.
var v2SubResources = map[string]bool{
	"acl": true, "cors": true, "delete": true, "lifecycle": true, "location": true, "logging": true,
	"notification": true, "partNumber": true, "policy": true, "requestPayment": true, "restore": true,
	"tagging": true, "torrent": true, "uploadId": true, "uploads": true, "versionId": true,
	"versioning": true, "versions": true, "website": true, "select": true, "select-type": true,
	"object-lock": true, "retention": true, "legal-hold": true, "encryption": true, "replication": true,
	"response-content-type": true, "response-content-language": true, "response-expires": true,
	"response-cache-control": true, "response-content-disposition": true, "response-content-encoding": true,
}

func (v *Verifier) verifyV2Query(r *http.Request) (*Result, error) {
	q := r.URL.Query()
	ak, sig, exp := q.Get("AWSAccessKeyId"), q.Get("Signature"), q.Get("Expires")
	if ak == "" || sig == "" || exp == "" {
		return nil, newError(CodeAccessDenied, http.StatusForbidden, "Query-string authentication requires the Signature, Expires and AWSAccessKeyId parameters")
	}
	secs, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return nil, newError(CodeAccessDenied, http.StatusForbidden, "Invalid date (should be seconds since epoch): "+exp)
	}
	now := v.now()
	if now.Unix() > secs {
		return nil, newError(CodeAccessDenied, http.StatusForbidden, "Request has expired")
	}
	limit := v.MaxPresignV2
	if limit <= 0 {
		limit = MaxPresignExpires
	}
	if secs-now.Unix() > int64(limit/time.Second) {
		return nil, newError(CodeAccessDenied, http.StatusForbidden, fmt.Sprintf(
			"Expires is more than %s ahead: this server refuses presigned URLs valid that long", limit))
	}
	return v.checkV2(r, ak, sig, exp)
}

func (v *Verifier) verifyV2Header(r *http.Request, authz string) (*Result, error) {
	cred := strings.TrimPrefix(authz, "AWS ")
	ak, sig, ok := strings.Cut(cred, ":")
	if !ok || ak == "" || sig == "" {
		return nil, errMalformed("malformed AWS signature version 2 Authorization header")
	}
	var t time.Time
	var perr error
	if d := header(r, "X-Amz-Date"); len(d) > 0 {
		t, perr = parseHTTPDate(d[0])
	} else if d := header(r, "Date"); len(d) > 0 {
		t, perr = parseHTTPDate(d[0])
	} else {
		return nil, newError(CodeAccessDenied, http.StatusForbidden, "AWS authentication requires a valid Date or x-amz-date header")
	}
	if perr != nil {
		return nil, newError(CodeAccessDenied, http.StatusForbidden, "AWS authentication requires a valid Date or x-amz-date header")
	}
	// Sub saturates: a date centuries away is the minimum Duration, whose negation
	// overflows, so the bounds are compared without negating d.
	if d := v.now().Sub(t); d > v.maxSkew() || d < -v.maxSkew() {
		return nil, newError(CodeRequestTimeTooSkewed, http.StatusForbidden, "The difference between the request time and the current time is too large.")
	}
	date := ""
	if len(header(r, "X-Amz-Date")) == 0 {
		date = header(r, "Date")[0]
	}
	return v.checkV2(r, ak, sig, date)
}

func (v *Verifier) checkV2(r *http.Request, ak, sig, dateOrExpires string) (*Result, error) {
	secret, ok := v.Lookup(ak)
	if !ok {
		return nil, newError(CodeInvalidAccessKeyID, http.StatusForbidden, "The AWS Access Key Id you provided does not exist in our records.")
	}
	want, err := base64.StdEncoding.DecodeString(sig)
	if err != nil {
		return nil, errSignature()
	}
	bucket := ""
	if v.VirtualHostBucket != nil {
		bucket = v.VirtualHostBucket(r)
	}
	// The resource is the path as the client encoded it; try the decoded form's canonical
	// encoding too, as clients differ in which characters they escape.
	paths := []string{r.URL.EscapedPath()}
	if alt := uriEncode(r.URL.Path); alt != paths[0] {
		paths = append(paths, alt)
	}
	// botocore signs a path-style request for a bucket alone (/bucket: CreateBucket,
	// DeleteBucket, a listing) with the resource /bucket/, as a virtual-host request.
	if p := paths[0]; bucket == "" && len(p) > 1 && !strings.Contains(p[1:], "/") {
		paths = append(paths, p+"/")
	}
	for _, p := range paths {
		sts := stringToSignV2(r, dateOrExpires, bucket, p)
		m := hmac.New(sha1.New, []byte(secret))
		m.Write([]byte(sts))
		if subtle.ConstantTimeCompare(m.Sum(nil), want) == 1 {
			return &Result{AccessKey: ak, Body: r.Body, DecodedLength: r.ContentLength, Trailers: noTrailers}, nil
		}
	}
	return nil, errSignature()
}

func stringToSignV2(r *http.Request, dateOrExpires, vhostBucket, escapedPath string) string {
	var b strings.Builder
	b.WriteString(r.Method)
	b.WriteByte('\n')
	b.WriteString(r.Header.Get("Content-MD5"))
	b.WriteByte('\n')
	b.WriteString(r.Header.Get("Content-Type"))
	b.WriteByte('\n')
	b.WriteString(dateOrExpires)
	b.WriteByte('\n')
	// Canonicalized x-amz-* headers.
	var names []string
	for k := range r.Header {
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "x-amz-") {
			names = append(names, lk)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		vals := r.Header.Values(n)
		for i := range vals {
			vals[i] = strings.TrimSpace(vals[i])
		}
		b.WriteString(n)
		b.WriteByte(':')
		b.WriteString(strings.Join(vals, ","))
		b.WriteByte('\n')
	}
	// Canonicalized resource.
	if vhostBucket != "" {
		b.WriteByte('/')
		b.WriteString(vhostBucket)
	}
	b.WriteString(escapedPath)
	q, _ := url.ParseQuery(r.URL.RawQuery)
	var subs []string
	for k := range q {
		if v2SubResources[k] {
			subs = append(subs, k)
		}
	}
	sort.Strings(subs)
	for i, k := range subs {
		if i == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		b.WriteString(k)
		if v := q.Get(k); v != "" {
			b.WriteByte('=')
			b.WriteString(v)
		}
	}
	return b.String()
}

// SignV2Query presigns a URL with Signature Version 2, for tests of that path.
func SignV2Query(method, rawURL, accessKey, secret string, expires time.Time) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", err
	}
	r := &http.Request{Method: method, URL: u, Header: http.Header{}}
	exp := strconv.FormatInt(expires.Unix(), 10)
	sts := stringToSignV2(r, exp, "", u.EscapedPath())
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(sts))
	q := u.Query()
	q.Set("AWSAccessKeyId", accessKey)
	q.Set("Expires", exp)
	q.Set("Signature", base64.StdEncoding.EncodeToString(m.Sum(nil)))
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// SignV2Header signs r with Signature Version 2 in its Authorization header, dated now:
// for clients and tests of servers that still accept it.
func SignV2Header(r *http.Request, accessKey, secret string, now time.Time) {
	date := now.UTC().Format(http.TimeFormat)
	r.Header.Set("Date", date)
	r.Header.Del("X-Amz-Date")
	sts := stringToSignV2(r, date, "", r.URL.EscapedPath())
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(sts))
	r.Header.Set("Authorization", "AWS "+accessKey+":"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
}
