package sigv4

import (
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// unsignedHeaders are headers SignRequest leaves out of the signature because
// proxies and transports may add, drop or change them.
func unsignedHeader(canonicalKey string) bool {
	switch canonicalKey {
	case "Authorization", "User-Agent", "Expect", "Transfer-Encoding", "Connection",
		"Accept-Encoding", "X-Amzn-Trace-Id", "Content-Length":
		return true
	}
	return false
}

// SignRequest signs r in the Authorization header, as an S3 client would, for
// service s3 in region at time now. It sets X-Amz-Date and
// X-Amz-Content-Sha256 (payloadHash; "" means UNSIGNED-PAYLOAD) and signs host
// and every other header present except a few hop-by-hop or transport-managed
// ones (User-Agent, Expect, Accept-Encoding, Content-Length, ...). It also sets
// r.URL.RawPath so that the path is sent URI-encoded exactly as signed.
//
// For aws-chunked bodies, pass the STREAMING-* payload hash; the signature in
// the Authorization header seeds the chunk signatures.
func SignRequest(r *http.Request, accessKey, secret, region string, payloadHash string, now time.Time) {
	if payloadHash == "" {
		payloadHash = UnsignedPayload
	}
	if r.Header == nil {
		r.Header = make(http.Header)
	}
	amzDate := now.UTC().Format(timeFormat)
	r.Header.Del("Authorization")
	r.Header.Set("X-Amz-Date", amzDate)
	r.Header.Set("X-Amz-Content-Sha256", payloadHash)

	path := r.URL.Path
	if path == "" {
		path = "/"
	}
	encoded := string(appendURIEncode(nil, path, true))
	if r.URL.Path != "" {
		r.URL.RawPath = encoded
	}

	names := []string{"host"}
	for k := range r.Header {
		if !unsignedHeader(k) && !strings.EqualFold(k, "host") {
			names = append(names, strings.ToLower(k))
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)

	scope := amzDate[:8] + "/" + region + "/" + service + "/" + terminator
	s := signed{
		scope:         scope,
		signedHeaders: strings.Join(names, ";"),
		amzDate:       amzDate,
		payload:       payloadHash,
	}
	params := parseQuery(nil, r.URL.RawQuery)
	key := deriveKey(secret, amzDate[:8], region)
	sig := signature(nil, &key, r, &s, params, encoded, false)
	r.Header.Set("Authorization", algorithm+" Credential="+accessKey+"/"+scope+
		", SignedHeaders="+s.signedHeaders+", Signature="+hex.EncodeToString(sig[:]))
}

// Presign returns rawURL presigned for method, valid for expires from now
// (between one second and a week), for service s3 in region. Only the host
// header is signed and the payload is UNSIGNED-PAYLOAD. The URL's path is
// URI-encoded as S3 expects and its query canonicalized.
func Presign(method, rawURL, accessKey, secret, region string, expires time.Duration, now time.Time) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", err
	}
	if u.Host == "" {
		return "", errors.New("sigv4: presign: URL has no host")
	}
	if expires < time.Second || expires > MaxPresignExpires {
		return "", errors.New("sigv4: presign: expiry must be between one second and a week")
	}
	amzDate := now.UTC().Format(timeFormat)
	scope := amzDate[:8] + "/" + region + "/" + service + "/" + terminator
	params := parseQuery(nil, u.RawQuery)
	for _, p := range params {
		if strings.HasPrefix(p.key, "X-Amz-") {
			switch p.key {
			case "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
				"X-Amz-SignedHeaders", "X-Amz-Signature":
				return "", errors.New("sigv4: presign: URL already has " + p.key)
			}
		}
	}
	params = append(params,
		queryParam{"X-Amz-Algorithm", algorithm},
		queryParam{"X-Amz-Credential", accessKey + "/" + scope},
		queryParam{"X-Amz-Date", amzDate},
		queryParam{"X-Amz-Expires", strconv.FormatInt(int64(expires/time.Second), 10)},
		queryParam{"X-Amz-SignedHeaders", "host"},
	)
	path := u.Path
	if path == "" {
		path = "/"
	}
	encoded := string(appendURIEncode(nil, path, true))
	s := signed{
		scope:         scope,
		signedHeaders: "host",
		amzDate:       amzDate,
		payload:       UnsignedPayload,
		presigned:     true,
	}
	r := &http.Request{Method: method, Host: u.Host, URL: u}
	key := deriveKey(secret, amzDate[:8], region)
	sig := signature(nil, &key, r, &s, params, encoded, false)

	query := appendCanonicalQuery(nil, params, true)
	query = append(query, "&X-Amz-Signature="...)
	query = append(query, hex.EncodeToString(sig[:])...)
	return u.Scheme + "://" + u.Host + encoded + "?" + string(query), nil
}
