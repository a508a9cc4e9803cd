// Package sigv4 verifies AWS Signature Version 4 on incoming S3 requests.
//
// A Verifier checks requests signed in the Authorization header and presigned
// URLs (query-string authentication), and decodes aws-chunked streaming
// payloads, verifying their chunk and trailer signatures as the body is read.
// Errors are *Error values carrying the S3 error code and HTTP status to answer
// with.
//
// The package also holds a small client side, SignRequest and Presign, used by
// cairn's own tests and tools.
//
// Only the service "s3" is accepted; any region is, the signing key being derived
// from the credential scope the client sent. Anonymous requests are refused.
package sigv4

import (
	"crypto/hmac"
	"crypto/sha256"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Payload hash values of x-amz-content-sha256 (or the X-Amz-Content-Sha256
// query parameter) that are not a hex SHA-256.
const (
	// UnsignedPayload means the body is not covered by the signature.
	UnsignedPayload = "UNSIGNED-PAYLOAD"
	// StreamingPayload means an aws-chunked body whose chunks are each signed.
	StreamingPayload = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	// StreamingPayloadTrailer means an aws-chunked body as for
	// StreamingPayload, followed by signed trailing headers.
	StreamingPayloadTrailer = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
	// StreamingUnsignedPayloadTrailer means an aws-chunked body without
	// signatures, followed by trailing headers.
	StreamingUnsignedPayloadTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	// EmptySHA256 is the hex SHA-256 of the empty string.
	EmptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
)

// Limits.
const (
	// DefaultMaxSkew is the largest difference between the request time and
	// the server clock that a Verifier with MaxSkew 0 accepts.
	DefaultMaxSkew = 15 * time.Minute
	// MaxPresignExpires is the longest validity of a presigned URL: a week.
	MaxPresignExpires = 7 * 24 * time.Hour
	// MaxChunkSize is the largest chunk a signed aws-chunked body may use. Each
	// chunk is buffered whole until its signature is verified.
	MaxChunkSize = 16 << 20
	// maxLineLen bounds a chunk-header line (and each trailer line).
	maxLineLen = 4 << 10
	// maxTrailerLen bounds the whole trailer section.
	maxTrailerLen = 16 << 10
)

const (
	algorithm  = "AWS4-HMAC-SHA256"
	service    = "s3"
	terminator = "aws4_request"
	timeFormat = "20060102T150405Z"
	dateFormat = "20060102"
)

// S3 error codes carried by *Error.
const (
	CodeAccessDenied                      = "AccessDenied"                      // 403: no or unusable authentication, expired presigned URL
	CodeInvalidAccessKeyID                = "InvalidAccessKeyId"                // 403: unknown access key
	CodeSignatureDoesNotMatch             = "SignatureDoesNotMatch"             // 403: wrong request, chunk or trailer signature
	CodeRequestTimeTooSkewed              = "RequestTimeTooSkewed"              // 403: request time too far from the server clock
	CodeAuthorizationHeaderMalformed      = "AuthorizationHeaderMalformed"      // 400: unparsable Authorization header or credential
	CodeAuthorizationQueryParametersError = "AuthorizationQueryParametersError" // 400: bad presigned-URL parameters
	CodeInvalidRequest                    = "InvalidRequest"                    // 400: e.g. missing x-amz-content-sha256, bad chunk framing, unsupported auth scheme
	CodeInvalidArgument                   = "InvalidArgument"                   // 400: e.g. bad x-amz-content-sha256 value, two auth mechanisms
	CodeXAmzContentSHA256Mismatch         = "XAmzContentSHA256Mismatch"         // 400: body does not match x-amz-content-sha256
	CodeIncompleteBody                    = "IncompleteBody"                    // 400: truncated body, decoded length mismatch
	CodeMalformedTrailerError             = "MalformedTrailerError"             // 400: bad trailing headers
	CodeNotImplemented                    = "NotImplemented"                    // 501: SigV4a streaming payloads
)

// Error is an authentication failure with its S3 error code and HTTP status.
type Error struct {
	Code    string // S3 error code, one of the Code* constants
	Message string // human-readable message for the S3 error document
	Status  int    // HTTP status code
}

// Error returns the code and message.
func (e *Error) Error() string {
	return "sigv4: " + e.Code + ": " + e.Message
}

func newError(code string, status int, msg string) *Error {
	return &Error{Code: code, Message: msg, Status: status}
}

func errMalformed(msg string) *Error {
	return newError(CodeAuthorizationHeaderMalformed, http.StatusBadRequest, "The authorization header is malformed; "+msg)
}

func errQuery(msg string) *Error {
	return newError(CodeAuthorizationQueryParametersError, http.StatusBadRequest, msg)
}

func errSignature() *Error {
	return newError(CodeSignatureDoesNotMatch, http.StatusForbidden,
		"The request signature we calculated does not match the signature you provided. Check your key and signing method.")
}

func errInvalidRequest(msg string) *Error {
	return newError(CodeInvalidRequest, http.StatusBadRequest, msg)
}

func errIncomplete(msg string) *Error {
	return newError(CodeIncompleteBody, http.StatusBadRequest, msg)
}

func errTrailer(msg string) *Error {
	return newError(CodeMalformedTrailerError, http.StatusBadRequest,
		"The request contained trailing data that was not well-formed or did not conform to our published schema: "+msg)
}

// SecretLookup returns the secret key for an access key, ok=false if unknown.
type SecretLookup func(accessKey string) (secret string, ok bool)

// Verifier verifies SigV4-signed requests. Its zero value is not usable: Lookup
// must be set. A Verifier is safe for concurrent use; it caches derived signing
// keys and must not be copied after first use.
type Verifier struct {
	Lookup  SecretLookup
	Now     func() time.Time // nil means time.Now
	MaxSkew time.Duration    // 0 means DefaultMaxSkew
	// MaxPresignV2 is how far ahead a Signature Version 2 presigned URL's Expires may be
	// (0 means MaxPresignExpires, the 7 days Signature Version 4 allows). S3 sets no
	// limit for Version 2; cairn does, so that no URL grants access for years.
	MaxPresignV2 time.Duration

	keys keyCache
	// VirtualHostBucket, if set, returns the bucket of a virtual-host-style request ("" for
	// path style): Signature Version 2 signs "/bucket" followed by the path.
	VirtualHostBucket func(r *http.Request) string
}

// Result describes an authenticated request.
type Result struct {
	// AccessKey is the access key that signed the request.
	AccessKey string
	// Body replaces r.Body. For aws-chunked streaming payloads it is the decoded
	// payload: in the signed variants each chunk is buffered whole and released
	// only once its signature verifies, and a failure is an *Error returned at the
	// failing chunk. For a hex x-amz-content-sha256 it returns an *Error with code
	// XAmzContentSHA256Mismatch instead of io.EOF if the body does not match. For
	// UNSIGNED-PAYLOAD it is r.Body as is. Errors of the underlying body other
	// than a premature EOF are passed through unchanged.
	Body io.ReadCloser
	// DecodedLength is x-amz-decoded-content-length for aws-chunked bodies (-1 if
	// the header is absent), else r.ContentLength (-1 if unknown).
	DecodedLength int64
	// Trailers returns the trailing headers (e.g. X-Amz-Checksum-Crc32c, keys in
	// canonical form) once Body has returned io.EOF; nil before that or if there
	// are none. It is never nil itself.
	Trailers func() http.Header
	// Streaming reports an aws-chunked payload.
	Streaming bool
}

// header returns the values of the header with the given canonical name,
// tolerating a non-canonical key in r.Header.
func header(r *http.Request, name string) []string {
	vs, _ := lookupHeader(r.Header, name)
	return vs
}

// noTrailers is Result.Trailers for bodies that cannot carry trailers.
func noTrailers() http.Header { return nil }

// HasAuth reports whether r carries any authentication: an Authorization header
// or presigned-URL query parameters (of Signature Version 4 or 2).
func HasAuth(r *http.Request) bool {
	if len(header(r, "Authorization")) > 0 {
		return true
	}
	q := r.URL.RawQuery
	for q != "" {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Signature", "AWSAccessKeyId", "Signature":
			return true
		}
	}
	return false
}

// Verify authenticates r, which must be a server request (r.Host set, r.URL
// parsed from the request line). On success the caller must read the body from
// Result.Body rather than r.Body. Errors are *Error values.
//
// The canonical URI is r.URL.Path URI-encoded per segment with the S3 rules;
// if that does not verify and the client's own encoding (r.URL.EscapedPath())
// differs, that is tried too.
//
// Verify checks everything that precedes the body; failures found while the
// body is read (chunk signatures, framing, payload hash) are returned by
// Result.Body's Read, so the caller must not commit an upload before Body has
// returned io.EOF.
func (v *Verifier) Verify(r *http.Request) (*Result, error) {
	var qa [16]queryParam
	params := parseQuery(qa[:0], r.URL.RawQuery)

	authz := header(r, "Authorization")
	presigned := false
	v2 := false
	for i := range params {
		switch params[i].key {
		case "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Signature":
			presigned = true
		case "AWSAccessKeyId", "Signature":
			v2 = true
		}
	}
	switch {
	case len(authz) > 0 && presigned:
		return nil, newError(CodeInvalidArgument, http.StatusBadRequest,
			"Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, Signature query string parameter or the Authorization header should be specified")
	case len(authz) > 0:
		if len(authz) > 1 {
			return nil, errMalformed("more than one Authorization header")
		}
		if strings.HasPrefix(authz[0], "AWS ") {
			return v.verifyV2Header(r, authz[0])
		}
		return v.verifyHeader(r, authz[0], params)
	case presigned:
		return v.verifyPresigned(r, params)
	case v2:
		return v.verifyV2Query(r)
	}
	return nil, ErrAnonymous
}

// ErrAnonymous is Verify's answer to a request without credentials (no Authorization
// header, no presigned query): the caller decides whether such a request may go on.
var ErrAnonymous = newError(CodeAccessDenied, http.StatusForbidden, "Access Denied.")

func errUnsupported() *Error {
	return errInvalidRequest("The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.")
}

// parseAmzDate parses a time in the ISO 8601 basic format of X-Amz-Date,
// exactly 16 characters: 20060102T150405Z.
func parseAmzDate(s string) (time.Time, bool) {
	if len(s) != len(timeFormat) {
		return time.Time{}, false
	}
	t, err := time.Parse(timeFormat, s)
	return t, err == nil
}

// parseHTTPDate parses a Date header (or SigV2's X-Amz-Date): the formats of
// http.ParseTime, and RFC 1123 with a numeric zone ("Tue, 01 Dec 2026 18:15:38 -0000"),
// which RFC 7231 lets a recipient accept and botocore sends when a caller sets Date.
func parseHTTPDate(s string) (time.Time, error) {
	t, err := http.ParseTime(s)
	if err != nil {
		if tz, zerr := time.Parse(time.RFC1123Z, s); zerr == nil {
			return tz, nil
		}
	}
	return t, err
}

func (v *Verifier) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

func (v *Verifier) maxSkew() time.Duration {
	if v.MaxSkew > 0 {
		return v.MaxSkew
	}
	return DefaultMaxSkew
}

// signed is what Verify needs to check a signature, from either mechanism.
type signed struct {
	accessKey     string
	scope         string // date/region/s3/aws4_request
	date          string // YYYYMMDD of the scope
	region        string
	signedHeaders string
	signature     [32]byte
	amzDate       string // request time in ISO 8601 basic format
	payload       string // payload hash as signed
	presigned     bool
}

func (v *Verifier) verifyHeader(r *http.Request, authz string, params []queryParam) (*Result, error) {
	a, err := parseAuthorization(authz)
	if err != nil {
		return nil, err
	}
	cred, cerr := parseCredential(a.credential)
	if cerr != "" {
		return nil, errMalformed(cerr)
	}
	s := signed{
		accessKey:     cred.accessKey,
		scope:         cred.scope,
		date:          cred.date,
		region:        cred.region,
		signedHeaders: a.signedHeaders,
		signature:     a.signature,
	}
	if !hasHost(s.signedHeaders) {
		return nil, errMalformed("SignedHeaders must include host.")
	}

	var t time.Time
	if d := header(r, "X-Amz-Date"); len(d) > 0 {
		var ok bool
		if t, ok = parseAmzDate(d[0]); !ok {
			return nil, newError(CodeAccessDenied, http.StatusForbidden, "AWS authentication requires a valid Date or x-amz-date header")
		}
		s.amzDate = d[0]
	} else if d := header(r, "Date"); len(d) > 0 {
		var perr error
		t, perr = parseHTTPDate(d[0])
		if perr != nil {
			return nil, newError(CodeAccessDenied, http.StatusForbidden, "AWS authentication requires a valid Date or x-amz-date header")
		}
		s.amzDate = t.UTC().Format(timeFormat)
	} else {
		return nil, newError(CodeAccessDenied, http.StatusForbidden, "AWS authentication requires a valid Date or x-amz-date header")
	}
	if s.amzDate[:8] != s.date {
		return nil, errMalformed("Invalid credential date \"" + s.date + "\". This date is not the same as X-Amz-Date: \"" + s.amzDate[:8] + "\".")
	}
	if skew := v.now().Sub(t); skew > v.maxSkew() || skew < -v.maxSkew() {
		return nil, newError(CodeRequestTimeTooSkewed, http.StatusForbidden,
			"The difference between the request time and the current time is too large.")
	}

	ph := header(r, "X-Amz-Content-Sha256")
	if len(ph) == 0 {
		return nil, errInvalidRequest("Missing required header for this request: x-amz-content-sha256")
	}
	s.payload = ph[0]
	return v.finish(r, &s, params)
}

func (v *Verifier) verifyPresigned(r *http.Request, params []queryParam) (*Result, error) {
	var algo, credential, date, expires, signedHeaders, signature, payload string
	for i := range params {
		var dst *string
		switch params[i].key {
		case "X-Amz-Algorithm":
			dst = &algo
		case "X-Amz-Credential":
			dst = &credential
		case "X-Amz-Date":
			dst = &date
		case "X-Amz-Expires":
			dst = &expires
		case "X-Amz-SignedHeaders":
			dst = &signedHeaders
		case "X-Amz-Signature":
			dst = &signature
		case "X-Amz-Content-Sha256":
			dst = &payload
		default:
			continue
		}
		if *dst != "" {
			return nil, errQuery("Query-string authentication parameter " + params[i].key + " is given more than once.")
		}
		*dst = params[i].val
	}
	if algo == "" || credential == "" || date == "" || expires == "" || signedHeaders == "" || signature == "" {
		return nil, errQuery("Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters.")
	}
	if algo != algorithm {
		return nil, errQuery("X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\"")
	}
	cred, cerr := parseCredential(credential)
	if cerr != "" {
		return nil, errQuery("Error parsing the X-Amz-Credential parameter; " + cerr)
	}
	t, ok := parseAmzDate(date)
	if !ok {
		return nil, errQuery("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"")
	}
	secs, err := strconv.ParseInt(expires, 10, 64)
	if err != nil || secs < 1 {
		return nil, errQuery("X-Amz-Expires must be a positive integer number of seconds")
	}
	if secs > int64(MaxPresignExpires/time.Second) {
		return nil, errQuery("X-Amz-Expires must be less than a week (in seconds) that is 604800")
	}
	if len(signature) != 64 {
		return nil, errQuery("X-Amz-Signature must be 64 hexadecimal digits")
	}
	s := signed{
		accessKey:     cred.accessKey,
		scope:         cred.scope,
		date:          cred.date,
		region:        cred.region,
		signedHeaders: signedHeaders,
		amzDate:       date,
		payload:       payload,
		presigned:     true,
	}
	if !isHex(signature) {
		return nil, errQuery("X-Amz-Signature must be 64 hexadecimal digits")
	}
	decodeHex(s.signature[:], signature)
	if err := checkSignedHeaders(signedHeaders); err != "" {
		return nil, errQuery("X-Amz-SignedHeaders is invalid: " + err)
	}
	if !hasHost(signedHeaders) {
		return nil, errQuery("X-Amz-SignedHeaders must include host.")
	}
	if date[:8] != cred.date {
		return nil, errQuery("Invalid credential date \"" + cred.date + "\". This date is not the same as X-Amz-Date: \"" + date[:8] + "\".")
	}
	now := v.now()
	if t.Sub(now) > v.maxSkew() {
		return nil, newError(CodeAccessDenied, http.StatusForbidden, "Request is not valid yet")
	}
	if now.Sub(t) > time.Duration(secs)*time.Second {
		return nil, newError(CodeAccessDenied, http.StatusForbidden, "Request has expired")
	}
	if s.payload == "" {
		s.payload = UnsignedPayload
	}
	return v.finish(r, &s, params)
}

// finish checks the payload hash, looks up the secret, verifies the signature
// and prepares the body.
func (v *Verifier) finish(r *http.Request, s *signed, params []queryParam) (*Result, error) {
	if h := unsignedAmzHeader(r.Header, s.signedHeaders); h != "" {
		// As S3: every x-amz-* header must be signed, or whoever holds a presigned URL
		// (or sits on the path) could add one (a copy source, metadata) to a signed
		// request and change what it does.
		return nil, newError(CodeAccessDenied, http.StatusForbidden,
			"There were headers present in the request which were not signed: "+strings.ToLower(h))
	}
	kind, perr := payloadKind(s.payload)
	if perr != nil {
		return nil, perr
	}
	secret, ok := v.Lookup(s.accessKey)
	if !ok {
		return nil, newError(CodeInvalidAccessKeyID, http.StatusForbidden,
			"The AWS Access Key Id you provided does not exist in our records.")
	}
	key, cached := v.keys.get(s.accessKey, secret, s.date, s.region)

	var buf [1024]byte
	path := r.URL.Path
	if path == "" {
		path = "/"
	}
	sig := signature(buf[:0], &key, r, s, params, path, true)
	if !hmac.Equal(sig[:], s.signature[:]) {
		raw := r.URL.EscapedPath()
		if raw == "" {
			raw = "/"
		}
		if raw == string(appendURIEncode(buf[:0], path, true)) {
			return nil, errSignature()
		}
		if sig = signature(buf[:0], &key, r, s, params, raw, false); !hmac.Equal(sig[:], s.signature[:]) {
			return nil, errSignature()
		}
	}
	if !cached {
		v.keys.put(s.accessKey, secret, s.date, s.region, key)
	}

	res := &Result{
		AccessKey:     s.accessKey,
		Body:          r.Body,
		DecodedLength: r.ContentLength,
		Trailers:      noTrailers,
	}
	if res.Body == nil {
		res.Body = http.NoBody
	}
	switch kind {
	case payloadUnsigned:
	case payloadHash:
		if r.ContentLength == 0 && s.payload == EmptySHA256 {
			break
		}
		h := &hashReader{src: res.Body, h: sha256.New()}
		decodeHex(h.want[:], s.payload) // validated by payloadKind
		res.Body = h
	default:
		c, err := chunked(r, res, kind)
		if err != nil {
			return nil, err
		}
		if kind != payloadUnsignedTrailer {
			c.setSigning(&key, s.amzDate, s.scope, &s.signature)
		}
	}
	return res, nil
}

// chunked makes res.Body the decoder of r's aws-chunked body of the given kind, with the
// length and trailers its headers declare.
func chunked(r *http.Request, res *Result, kind payloadType) (*chunkReader, *Error) {
	n := int64(-1)
	if d := header(r, "X-Amz-Decoded-Content-Length"); len(d) > 0 {
		var err error
		n, err = strconv.ParseInt(d[0], 10, 64)
		if err != nil || n < 0 || len(d) > 1 {
			return nil, newError(CodeInvalidArgument, http.StatusBadRequest, "Invalid x-amz-decoded-content-length header")
		}
	}
	var want []string
	for _, line := range header(r, "X-Amz-Trailer") {
		for name := range strings.SplitSeq(line, ",") {
			if name = strings.TrimSpace(name); name != "" {
				want = append(want, strings.ToLower(name))
			}
		}
	}
	c := newChunkReader(res.Body, kind, n, want)
	res.Body = c
	res.DecodedLength = n
	res.Trailers = c.trailerHeader
	res.Streaming = true
	return c, nil
}

// UnsignedBody is the Result of a request without credentials (Verify's ErrAnonymous),
// with no AccessKey: its body decoded as its x-amz-content-sha256 declares it, as Verify
// does for a signed one. STREAMING-UNSIGNED-PAYLOAD-TRAILER (what SDKs send for an
// unsigned upload with a checksum) is decoded from aws-chunked with its trailers, a hex
// hash is verified, UNSIGNED-PAYLOAD or no header leaves the body as is; a signed
// streaming payload cannot be verified without a signature and is refused.
func UnsignedBody(r *http.Request) (*Result, error) {
	res := &Result{Body: r.Body, DecodedLength: r.ContentLength, Trailers: noTrailers}
	if res.Body == nil {
		res.Body = http.NoBody
	}
	p := header(r, "X-Amz-Content-Sha256")
	if len(p) == 0 {
		return res, nil
	}
	kind, perr := payloadKind(p[0])
	if perr != nil {
		return nil, perr
	}
	switch kind {
	case payloadUnsigned:
	case payloadHash:
		if r.ContentLength == 0 && p[0] == EmptySHA256 {
			break
		}
		h := &hashReader{src: res.Body, h: sha256.New()}
		decodeHex(h.want[:], p[0])
		res.Body = h
	case payloadUnsignedTrailer:
		if _, err := chunked(r, res, kind); err != nil {
			return nil, err
		}
	default:
		return nil, errInvalidRequest("A signed streaming payload (" + p[0] + ") needs a signed request.")
	}
	return res, nil
}

// signature computes the request signature with the given canonical URI path;
// encode says whether path still needs URI-encoding.
func signature(buf []byte, key *[32]byte, r *http.Request, s *signed, params []queryParam, path string, encode bool) [32]byte {
	buf = appendCanonicalRequest(buf, r, s, params, path, encode)
	var sts [256]byte
	return hmacSHA256(key[:], appendStringToSign(sts[:0], s.amzDate, s.scope, buf))
}

type payloadType uint8

const (
	payloadUnsigned payloadType = iota
	payloadHash
	payloadSigned
	payloadSignedTrailer
	payloadUnsignedTrailer
)

func payloadKind(p string) (payloadType, *Error) {
	switch p {
	case UnsignedPayload:
		return payloadUnsigned, nil
	case StreamingPayload:
		return payloadSigned, nil
	case StreamingPayloadTrailer:
		return payloadSignedTrailer, nil
	case StreamingUnsignedPayloadTrailer:
		return payloadUnsignedTrailer, nil
	}
	if strings.HasPrefix(p, "STREAMING-AWS4-ECDSA-P256-SHA256-") {
		return 0, newError(CodeNotImplemented, http.StatusNotImplemented, "Signature Version 4A streaming payloads are not supported.")
	}
	if len(p) == 64 && isHex(p) {
		return payloadHash, nil
	}
	return 0, newError(CodeInvalidArgument, http.StatusBadRequest,
		"x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, STREAMING-AWS4-HMAC-SHA256-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER or a valid sha256 value.")
}

// decodeHex decodes the hexadecimal digits s, which must be valid and
// 2*len(dst) long, into dst.
func decodeHex[T string | []byte](dst []byte, s T) {
	for i := range dst {
		dst[i] = unhex(s[2*i])<<4 | unhex(s[2*i+1])
	}
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// isHex reports whether s is all hexadecimal digits.
func isHex[T string | []byte](s T) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// unsignedAmzHeader returns the first x-amz-* header of h that the semicolon-separated
// list signedHeaders does not name ("" if every one is signed).
func unsignedAmzHeader(h http.Header, signedHeaders string) string {
	for k := range h {
		if len(k) < 6 || !strings.EqualFold(k[:6], "x-amz-") {
			continue
		}
		found := false
		for n := range strings.SplitSeq(signedHeaders, ";") {
			if strings.EqualFold(n, k) {
				found = true
				break
			}
		}
		if !found {
			return k
		}
	}
	return ""
}

// hasHost reports whether the semicolon-separated list includes host.
func hasHost(signedHeaders string) bool {
	for h := range strings.SplitSeq(signedHeaders, ";") {
		if strings.EqualFold(h, "host") {
			return true
		}
	}
	return false
}
