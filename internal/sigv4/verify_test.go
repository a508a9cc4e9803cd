package sigv4

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

const (
	testAccessKey = "AKIAIOSFODNN7EXAMPLE"
	testSecret    = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
)

// testTime is the signing time of most tests.
var testTime = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

func testLookup(ak string) (string, bool) {
	switch ak {
	case testAccessKey:
		return testSecret, true
	case "other":
		return "other-secret", true
	}
	return "", false
}

func newVerifier(now time.Time) *Verifier {
	return &Verifier{Lookup: testLookup, Now: func() time.Time { return now }}
}

// sdkSigner is the independent oracle: the AWS SDK's signer configured as the
// S3 client configures it.
func sdkSigner() *v4.Signer {
	return v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
}

func sdkCreds() aws.Credentials {
	return aws.Credentials{AccessKeyID: testAccessKey, SecretAccessKey: testSecret}
}

// toServer sends a client request through its wire form and parses it back as
// a server would see it.
func toServer(t testing.TB, req *http.Request) *http.Request {
	t.Helper()
	var buf bytes.Buffer
	if err := req.Write(&buf); err != nil {
		t.Fatalf("writing request: %v", err)
	}
	sr, err := http.ReadRequest(bufio.NewReader(&buf))
	if err != nil {
		t.Fatalf("reading request back: %v\n%s", err, buf.String())
	}
	return sr
}

// wantCode fails unless err is an *Error with the given code.
func wantCode(t testing.TB, err error, code string) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want *Error %s", err, err, code)
	}
	if e.Code != code {
		t.Fatalf("error %v, want code %s", err, code)
	}
	if e.Status == 0 || e.Message == "" {
		t.Fatalf("incomplete error %+v", e)
	}
	return e
}

// s3Path builds a URL path the way S3 clients send it: each byte outside the
// unreserved set percent-encoded, slashes kept.
func s3URL(host, path, rawQuery string) *url.URL {
	return &url.URL{Scheme: "http", Host: host, Path: path,
		RawPath: string(appendURIEncode(nil, path, true)), RawQuery: rawQuery}
}

type reqCase struct {
	name    string
	method  string
	host    string
	path    string
	goPath  bool // let net/url escape the path (RawPath empty) instead of S3 rules
	query   string
	headers [][2]string
	body    string
	region  string
}

var headerCases = []reqCase{
	{name: "root", method: "GET", path: "/"},
	{name: "list buckets no slash", method: "GET", path: ""},
	{name: "simple", method: "GET", path: "/bucket/key.txt"},
	{name: "spaces", method: "GET", path: "/bucket/a b  c.txt"},
	{name: "unicode", method: "GET", path: "/bucket/ünïcødé/日本語 ファイル.txt"},
	{name: "specials", method: "GET", path: "/bucket/a+b=c~d!$&'()*,;:@[]%.txt"},
	{name: "specials go escaping", method: "GET", path: "/bucket/a+b=c~d!$&'()*,;:@.txt", goPath: true},
	{name: "spaces go escaping", method: "GET", path: "/bucket/a b/ü", goPath: true},
	{name: "double slashes", method: "GET", path: "/bucket//a//b/"},
	{name: "dot segments", method: "GET", path: "/bucket/./a/../b"},
	{name: "list query", method: "GET", path: "/bucket", query: "list-type=2&prefix=a%20b%2Fc&delimiter=%2F&max-keys=10"},
	{name: "repeated and empty values", method: "GET", path: "/bucket", query: "b=2&a=2&a=1&a=&z&acl"},
	{name: "subresource", method: "GET", path: "/bucket/key", query: "uploads"},
	{name: "plus and equals in query", method: "GET", path: "/bucket", query: "prefix=a%2Bb%3Dc&marker=x+y&k%7E=v~"},
	{name: "unicode query", method: "GET", path: "/bucket", query: "prefix=%E6%97%A5%E6%9C%AC"},
	{name: "headers", method: "PUT", path: "/bucket/obj", body: "hello world",
		headers: [][2]string{
			{"Content-Type", "text/plain"},
			{"X-Amz-Meta-Spaces", "  a   b    c  "},
			{"X-Amz-Meta-Multi", "one"},
			{"X-Amz-Meta-Multi", "two"},
			{"X-Amz-Storage-Class", "STANDARD"},
			{"Content-Md5", "XrY7u+Ae7tCTyyK7j1rNww=="},
		}},
	{name: "range", method: "GET", path: "/bucket/obj", headers: [][2]string{{"Range", "bytes=0-9"}}},
	{name: "delete", method: "DELETE", path: "/bucket/obj", query: "versionId=abc"},
	{name: "head", method: "HEAD", path: "/bucket/obj"},
	{name: "post", method: "POST", path: "/bucket", query: "delete", body: "<Delete/>"},
	{name: "virtual host with port", method: "GET", host: "bucket.localhost:9000", path: "/key"},
	{name: "other region", method: "GET", path: "/bucket/key", region: "eu-west-3"},
	{name: "custom region", method: "GET", path: "/bucket/key", region: "cairn-local"},
}

// sdkRequest builds the client request of a case and signs it with the SDK.
func sdkRequest(t testing.TB, c reqCase, payloadHash string, when time.Time) *http.Request {
	t.Helper()
	host := c.host
	if host == "" {
		host = "localhost:9000"
	}
	u := s3URL(host, c.path, c.query)
	if c.goPath {
		u.RawPath = ""
	}
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req, err := http.NewRequest(c.method, u.String(), body)
	if err != nil {
		t.Fatal(err)
	}
	if c.path == "" {
		req.URL.Path = ""
	}
	for _, h := range c.headers {
		req.Header.Add(h[0], h[1])
	}
	if payloadHash == "" {
		sum := sha256.Sum256([]byte(c.body))
		payloadHash = hex.EncodeToString(sum[:])
	}
	req.Header.Set("X-Amz-Content-Sha256", payloadHash)
	region := c.region
	if region == "" {
		region = "us-east-1"
	}
	if err := sdkSigner().SignHTTP(context.Background(), sdkCreds(), req, payloadHash, "s3", region, when); err != nil {
		t.Fatal(err)
	}
	return req
}

func TestVerifySDKHeaderAuth(t *testing.T) {
	for _, c := range headerCases {
		for _, payload := range []string{"", UnsignedPayload} {
			t.Run(c.name+"/"+map[string]string{"": "sha256", UnsignedPayload: "unsigned"}[payload], func(t *testing.T) {
				sr := toServer(t, sdkRequest(t, c, payload, testTime))
				res, err := newVerifier(testTime.Add(time.Minute)).Verify(sr)
				if err != nil {
					t.Fatalf("Verify: %v\nAuthorization: %s\nURI: %s", err, sr.Header.Get("Authorization"), sr.RequestURI)
				}
				if res.AccessKey != testAccessKey || res.Streaming {
					t.Errorf("result %+v", res)
				}
				got, err := io.ReadAll(res.Body)
				if err != nil || string(got) != c.body {
					t.Errorf("body %q, %v; want %q", got, err, c.body)
				}
				if res.DecodedLength != int64(len(c.body)) {
					t.Errorf("DecodedLength %d, want %d", res.DecodedLength, len(c.body))
				}
				if res.Trailers() != nil {
					t.Errorf("unexpected trailers")
				}
			})
		}
	}
}

func TestVerifyTampered(t *testing.T) {
	base := reqCase{method: "PUT", path: "/bucket/a b+c", query: "x-id=PutObject&tagging",
		headers: [][2]string{{"X-Amz-Meta-A", "1"}, {"Content-Type", "text/plain"}}, body: "data"}
	tests := []struct {
		name   string
		tamper func(r *http.Request)
		code   string
	}{
		{"header value", func(r *http.Request) { r.Header.Set("X-Amz-Meta-A", "2") }, CodeSignatureDoesNotMatch},
		{"header removed", func(r *http.Request) { r.Header.Del("Content-Type") }, CodeSignatureDoesNotMatch},
		{"header repeated", func(r *http.Request) { r.Header.Add("X-Amz-Meta-A", "1") }, CodeSignatureDoesNotMatch},
		{"host", func(r *http.Request) { r.Host = "evil:9000" }, CodeSignatureDoesNotMatch},
		{"method", func(r *http.Request) { r.Method = "POST" }, CodeSignatureDoesNotMatch},
		{"path", func(r *http.Request) { r.URL.Path = "/bucket/a b+d"; r.URL.RawPath = "" }, CodeSignatureDoesNotMatch},
		{"path case", func(r *http.Request) { r.URL.Path = "/Bucket/a b+c"; r.URL.RawPath = "" }, CodeSignatureDoesNotMatch},
		{"query added", func(r *http.Request) { r.URL.RawQuery += "&acl" }, CodeSignatureDoesNotMatch},
		{"query value", func(r *http.Request) { r.URL.RawQuery = strings.Replace(r.URL.RawQuery, "PutObject", "GetObject", 1) }, CodeSignatureDoesNotMatch},
		{"query removed", func(r *http.Request) { r.URL.RawQuery = "x-id=PutObject" }, CodeSignatureDoesNotMatch},
		{"signature", func(r *http.Request) {
			a := r.Header.Get("Authorization")
			last := a[len(a)-1]
			r.Header.Set("Authorization", a[:len(a)-1]+map[bool]string{true: "1", false: "0"}[last == '0'])
		}, CodeSignatureDoesNotMatch},
		{"payload hash", func(r *http.Request) { r.Header.Set("X-Amz-Content-Sha256", UnsignedPayload) }, CodeSignatureDoesNotMatch},
		{"date", func(r *http.Request) { r.Header.Set("X-Amz-Date", testTime.Add(time.Second).Format(timeFormat)) }, CodeSignatureDoesNotMatch},
		{"unknown key", func(r *http.Request) {
			r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), testAccessKey, "AKIDUNKNOWN", 1))
		}, CodeInvalidAccessKeyID},
		{"other key", func(r *http.Request) {
			r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), testAccessKey, "other", 1))
		}, CodeSignatureDoesNotMatch},
		{"region", func(r *http.Request) {
			r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), "/us-east-1/", "/us-west-2/", 1))
		}, CodeSignatureDoesNotMatch},
		{"service", func(r *http.Request) {
			r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), "/s3/", "/iam/", 1))
		}, CodeAuthorizationHeaderMalformed},
		{"scope date", func(r *http.Request) {
			r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), "/20260314/", "/20260313/", 1))
		}, CodeAuthorizationHeaderMalformed},
		{"no content sha", func(r *http.Request) { r.Header.Del("X-Amz-Content-Sha256") }, CodeInvalidRequest},
		{"bad content sha", func(r *http.Request) { r.Header.Set("X-Amz-Content-Sha256", "abc") }, CodeInvalidArgument},
		{"sigv4a streaming", func(r *http.Request) {
			r.Header.Set("X-Amz-Content-Sha256", "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD")
		}, CodeNotImplemented},
		{"no date", func(r *http.Request) { r.Header.Del("X-Amz-Date") }, CodeAccessDenied},
		{"bad date", func(r *http.Request) { r.Header.Set("X-Amz-Date", "2026-03-14T15:09:26Z") }, CodeAccessDenied},
		{"no auth", func(r *http.Request) { r.Header.Del("Authorization") }, CodeAccessDenied},
		{"two auth headers", func(r *http.Request) { r.Header.Add("Authorization", r.Header.Get("Authorization")) }, CodeAuthorizationHeaderMalformed},
		{"header and query auth", func(r *http.Request) { r.URL.RawQuery += "&X-Amz-Algorithm=AWS4-HMAC-SHA256" }, CodeInvalidArgument},
		{"sigv2", func(r *http.Request) {
			r.Header.Set("Authorization", "AWS "+testAccessKey+":frJIUN8DYpKDtOLCwo//yllqDzg=")
		}, CodeAccessDenied}, // SigV2 is accepted, but this request has no RFC 1123 date

		{"sigv2 query", func(r *http.Request) {
			r.Header.Del("Authorization")
			r.URL.RawQuery = "AWSAccessKeyId=AKID&Expires=1&Signature=abc"
		}, CodeAccessDenied}, // expired in 1970

		{"garbage", func(r *http.Request) { r.Header.Set("Authorization", "Bearer xyz") }, CodeAuthorizationHeaderMalformed},
		{"host unsigned", func(r *http.Request) {
			r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), "host;", "", 1))
		}, CodeAuthorizationHeaderMalformed},
	}
	// The untampered request verifies.
	sr := toServer(t, sdkRequest(t, base, "", testTime))
	if _, err := newVerifier(testTime).Verify(sr); err != nil {
		t.Fatalf("untampered: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sr := toServer(t, sdkRequest(t, base, "", testTime))
			tt.tamper(sr)
			res, err := newVerifier(testTime).Verify(sr)
			if res != nil {
				t.Fatalf("tampered request verified")
			}
			wantCode(t, err, tt.code)
		})
	}
}

func TestVerifySkew(t *testing.T) {
	c := reqCase{method: "GET", path: "/bucket/key"}
	tests := []struct {
		now     time.Duration // server clock minus request time
		maxSkew time.Duration
		ok      bool
	}{
		{0, 0, true},
		{14 * time.Minute, 0, true},
		{-14 * time.Minute, 0, true},
		{16 * time.Minute, 0, false},
		{-16 * time.Minute, 0, false},
		{2 * time.Minute, time.Minute, false},
		{30 * time.Second, time.Minute, true},
	}
	for _, tt := range tests {
		sr := toServer(t, sdkRequest(t, c, "", testTime))
		v := newVerifier(testTime.Add(tt.now))
		v.MaxSkew = tt.maxSkew
		_, err := v.Verify(sr)
		if tt.ok && err != nil {
			t.Errorf("skew %v (max %v): %v", tt.now, tt.maxSkew, err)
		}
		if !tt.ok {
			if e := wantCode(t, err, CodeRequestTimeTooSkewed); e.Status != http.StatusForbidden {
				t.Errorf("status %d", e.Status)
			}
		}
	}
}

// TestVerifyDateHeader checks a request dated with Date rather than X-Amz-Date.
func TestVerifyDateHeader(t *testing.T) {
	req, _ := http.NewRequest("GET", "http://localhost/bucket/key", nil)
	req.Header.Set("Date", testTime.Format(http.TimeFormat))
	SignRequest(req, testAccessKey, testSecret, "us-east-1", EmptySHA256, testTime)
	// Re-sign with Date only: build the signature by hand from SignRequest's
	// canonical form but without X-Amz-Date.
	req.Header.Del("X-Amz-Date")
	req.Header.Del("Authorization")
	verifyDateOnly(t, req)
}

// TestVerifyDateHeaderNumericZone checks a Date header in RFC 1123 form with a numeric
// zone ("-0000", as botocore writes a caller's Date): a valid HTTP date, accepted like GMT.
func TestVerifyDateHeaderNumericZone(t *testing.T) {
	req, _ := http.NewRequest("GET", "http://localhost/bucket/key", nil)
	req.Header.Set("Date", testTime.Format(time.RFC1123Z))
	req.Header.Set("X-Amz-Content-Sha256", EmptySHA256)
	verifyDateOnly(t, req)
}

// verifyDateOnly signs req by hand with its Date header and no X-Amz-Date (SignRequest
// always adds X-Amz-Date) and checks that the verifier accepts it.
func verifyDateOnly(t *testing.T, req *http.Request) {
	t.Helper()
	s := signed{
		scope:         "20260314/us-east-1/s3/aws4_request",
		signedHeaders: "date;host;x-amz-content-sha256",
		amzDate:       testTime.Format(timeFormat),
		payload:       EmptySHA256,
	}
	key := deriveKey(testSecret, "20260314", "us-east-1")
	sig := signature(nil, &key, req, &s, nil, "/bucket/key", false)
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+testAccessKey+"/"+s.scope+
		",SignedHeaders="+s.signedHeaders+",Signature="+hex.EncodeToString(sig[:]))
	if _, err := newVerifier(testTime).Verify(toServer(t, req)); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyV2Skew checks that a Signature Version 2 request dated far from the server's
// clock, in either direction and however far (a year-9999 date once passed: the
// difference saturated and its negation overflowed), is RequestTimeTooSkewed.
func TestVerifyV2Skew(t *testing.T) {
	for _, tt := range []struct {
		name string
		date time.Time
		ok   bool
	}{
		{"now", testTime, true},
		{"numeric zone", testTime, true},
		{"an hour ahead", testTime.Add(time.Hour), false},
		{"an hour behind", testTime.Add(-time.Hour), false},
		{"year 9999", time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), false},
		{"year 1", time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", "http://localhost/bucket/key", nil)
			SignV2Header(req, testAccessKey, testSecret, tt.date)
			if tt.name == "numeric zone" {
				// Same instant, other spelling: the string to sign takes the header as sent.
				req.Header.Set("Date", tt.date.Format(time.RFC1123Z))
				sts := stringToSignV2(req, req.Header.Get("Date"), "", req.URL.EscapedPath())
				m := hmac.New(sha1.New, []byte(testSecret))
				m.Write([]byte(sts))
				req.Header.Set("Authorization", "AWS "+testAccessKey+":"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
			}
			_, err := newVerifier(testTime).Verify(toServer(t, req))
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if e := wantCode(t, err, CodeRequestTimeTooSkewed); e.Status != http.StatusForbidden {
				t.Errorf("status %d", e.Status)
			}
		})
	}
}

// TestVerifyAWSExample checks the GET Object example of the S3 documentation
// ("Signature Calculations for the Authorization Header: Transferring Payload
// in a Single Chunk").
func TestVerifyAWSExample(t *testing.T) {
	raw := "GET /test.txt HTTP/1.1\r\n" +
		"Host: examplebucket.s3.amazonaws.com\r\n" +
		"Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41\r\n" +
		"Range: bytes=0-9\r\n" +
		"x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\r\n" +
		"x-amz-date: 20130524T000000Z\r\n\r\n"
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newVerifier(time.Date(2013, 5, 24, 0, 5, 0, 0, time.UTC)).Verify(r); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyPayloadHash(t *testing.T) {
	c := reqCase{method: "PUT", path: "/bucket/obj", body: strings.Repeat("0123456789", 1000)}
	tests := []struct {
		name string
		body string
		ok   bool
	}{
		{"match", c.body, true},
		{"mismatch", c.body[:len(c.body)-1] + "x", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := sdkRequest(t, c, "", testTime)
			req.Body = io.NopCloser(strings.NewReader(tt.body))
			res, err := newVerifier(testTime).Verify(toServer(t, req))
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(res.Body)
			if tt.ok {
				if err != nil || string(got) != tt.body {
					t.Fatalf("read %d bytes, %v", len(got), err)
				}
				return
			}
			wantCode(t, err, CodeXAmzContentSHA256Mismatch)
			// The error is sticky.
			if _, err := res.Body.Read(make([]byte, 1)); err == nil || err == io.EOF {
				t.Errorf("second read: %v", err)
			}
		})
	}
}

func TestVerifyOwnClient(t *testing.T) {
	for _, c := range headerCases {
		t.Run(c.name, func(t *testing.T) {
			host := c.host
			if host == "" {
				host = "127.0.0.1:9000"
			}
			u := &url.URL{Scheme: "http", Host: host, Path: c.path, RawQuery: c.query}
			req, err := http.NewRequest(c.method, u.String(), strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range c.headers {
				req.Header.Add(h[0], h[1])
			}
			region := c.region
			if region == "" {
				region = "us-east-1"
			}
			SignRequest(req, testAccessKey, testSecret, region, "", testTime)
			res, err := newVerifier(testTime).Verify(toServer(t, req))
			if err != nil {
				t.Fatalf("%v\n%s", err, req.Header.Get("Authorization"))
			}
			if res.AccessKey != testAccessKey {
				t.Errorf("access key %q", res.AccessKey)
			}
		})
	}
}

// sdkPresign presigns a GET with the SDK and returns the server request.
func sdkPresign(t testing.TB, c reqCase, expires string, when time.Time) *http.Request {
	t.Helper()
	host := c.host
	if host == "" {
		host = "localhost:9000"
	}
	u := s3URL(host, c.path, c.query)
	if c.goPath {
		u.RawPath = ""
	}
	if expires != "" {
		q := u.RawQuery
		if q != "" {
			q += "&"
		}
		u.RawQuery = q + "X-Amz-Expires=" + expires
	}
	req, err := http.NewRequest(c.method, u.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range c.headers {
		req.Header.Add(h[0], h[1])
	}
	region := c.region
	if region == "" {
		region = "us-east-1"
	}
	signedURL, hdr, err := sdkSigner().PresignHTTP(context.Background(), sdkCreds(), req, UnsignedPayload, "s3", region, when)
	if err != nil {
		t.Fatal(err)
	}
	preq, err := http.NewRequest(c.method, signedURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range hdr {
		if !strings.EqualFold(k, "host") {
			preq.Header[k] = vs
		}
	}
	return toServer(t, preq)
}

func TestVerifySDKPresigned(t *testing.T) {
	for _, c := range headerCases {
		t.Run(c.name, func(t *testing.T) {
			sr := sdkPresign(t, c, "900", testTime)
			res, err := newVerifier(testTime.Add(10 * time.Minute)).Verify(sr)
			if err != nil {
				t.Fatalf("%v\n%s", err, sr.RequestURI)
			}
			if res.AccessKey != testAccessKey {
				t.Errorf("access key %q", res.AccessKey)
			}
		})
	}
}

func TestVerifyPresignedErrors(t *testing.T) {
	c := reqCase{method: "GET", path: "/bucket/key", query: "versionId=1"}
	replace := func(old, new string) func(r *http.Request) {
		return func(r *http.Request) { r.URL.RawQuery = strings.Replace(r.URL.RawQuery, old, new, 1) }
	}
	tests := []struct {
		name    string
		expires string
		now     time.Duration
		tamper  func(r *http.Request)
		code    string
		msg     string
	}{
		{name: "ok at expiry", expires: "60", now: 60 * time.Second},
		{name: "ok a week", expires: "604800", now: 604800 * time.Second},
		{name: "expired", expires: "60", now: 61 * time.Second, code: CodeAccessDenied, msg: "Request has expired"},
		{name: "not yet valid", expires: "60", now: -time.Hour, code: CodeAccessDenied},
		{name: "expires too long", expires: "604801", code: CodeAuthorizationQueryParametersError},
		{name: "expires zero", expires: "0", code: CodeAuthorizationQueryParametersError},
		{name: "expires negative", expires: "-5", code: CodeAuthorizationQueryParametersError},
		{name: "expires junk", expires: "1h", code: CodeAuthorizationQueryParametersError},
		{name: "expires missing", code: CodeAuthorizationQueryParametersError},
		{name: "tampered query", expires: "60", tamper: replace("versionId=1", "versionId=2"), code: CodeSignatureDoesNotMatch},
		{name: "added query", expires: "60", tamper: func(r *http.Request) { r.URL.RawQuery += "&acl=" }, code: CodeSignatureDoesNotMatch},
		{name: "tampered expires", expires: "60", tamper: replace("X-Amz-Expires=60", "X-Amz-Expires=61"), code: CodeSignatureDoesNotMatch},
		{name: "tampered path", expires: "60", tamper: func(r *http.Request) { r.URL.Path = "/bucket/other" }, code: CodeSignatureDoesNotMatch},
		{name: "tampered signature", expires: "60", tamper: replace("X-Amz-Signature=", "X-Amz-Signature=0"), code: CodeAuthorizationQueryParametersError},
		{name: "bad algorithm", expires: "60", tamper: replace("AWS4-HMAC-SHA256", "AWS4-HMAC-SHA512"), code: CodeAuthorizationQueryParametersError},
		{name: "bad date", expires: "60", tamper: replace("X-Amz-Date=2026", "X-Amz-Date=1999"), code: CodeAuthorizationQueryParametersError},
		{name: "bad date format", expires: "60", tamper: replace("X-Amz-Date=2026", "X-Amz-Date=x"), code: CodeAuthorizationQueryParametersError},
		{name: "missing signature", expires: "60", tamper: replace("X-Amz-Signature=", "X-Amz-Foo="), code: CodeAuthorizationQueryParametersError},
		{name: "duplicate param", expires: "60", tamper: func(r *http.Request) { r.URL.RawQuery += "&X-Amz-Expires=60" }, code: CodeAuthorizationQueryParametersError},
		{name: "bad credential", expires: "60", tamper: replace("%2Fs3%2F", "%2Fs4%2F"), code: CodeAuthorizationQueryParametersError},
		{name: "unknown key", expires: "60", tamper: replace(testAccessKey, "NOSUCHKEY"), code: CodeInvalidAccessKeyID},
		{name: "host header", expires: "60", tamper: func(r *http.Request) { r.Host = "other" }, code: CodeSignatureDoesNotMatch},
		{name: "authorization too", expires: "60", tamper: func(r *http.Request) { r.Header.Set("Authorization", "x") }, code: CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sr := sdkPresign(t, c, tt.expires, testTime)
			if tt.tamper != nil {
				tt.tamper(sr)
			}
			_, err := newVerifier(testTime.Add(tt.now)).Verify(sr)
			if tt.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			e := wantCode(t, err, tt.code)
			if tt.msg != "" && e.Message != tt.msg {
				t.Errorf("message %q, want %q", e.Message, tt.msg)
			}
		})
	}
}

func TestPresign(t *testing.T) {
	for _, c := range headerCases {
		t.Run(c.name, func(t *testing.T) {
			host := c.host
			if host == "" {
				host = "localhost:9000"
			}
			u := &url.URL{Scheme: "http", Host: host, Path: c.path, RawQuery: c.query}
			s, err := Presign(c.method, u.String(), testAccessKey, testSecret, "us-east-1", 5*time.Minute, testTime)
			if err != nil {
				t.Fatal(err)
			}
			req, err := http.NewRequest(c.method, s, nil)
			if err != nil {
				t.Fatal(err)
			}
			v := newVerifier(testTime.Add(5 * time.Minute))
			if _, err := v.Verify(toServer(t, req)); err != nil {
				t.Fatalf("%v\n%s", err, s)
			}
			v.Now = func() time.Time { return testTime.Add(5*time.Minute + time.Second) }
			_, err = v.Verify(toServer(t, req))
			wantCode(t, err, CodeAccessDenied)
		})
	}
	for _, bad := range []struct {
		url     string
		expires time.Duration
	}{
		{"http://h/b", 0},
		{"http://h/b", 8 * 24 * time.Hour},
		{"/no/host", time.Minute},
		{"http://h/b?X-Amz-Signature=x", time.Minute},
		{"http://h/%zz", time.Minute},
	} {
		if _, err := Presign("GET", bad.url, "a", "s", "r", bad.expires, testTime); err == nil {
			t.Errorf("Presign(%q, %v) succeeded", bad.url, bad.expires)
		}
	}
}

func TestHasAuth(t *testing.T) {
	tests := []struct {
		query  string
		header string
		want   bool
	}{
		{"", "", false},
		{"acl&versionId=1", "", false},
		{"", "AWS4-HMAC-SHA256 Credential=x", true},
		{"X-Amz-Algorithm=AWS4-HMAC-SHA256", "", true},
		{"a=1&X-Amz-Signature=00", "", true},
		{"X-Amz-Credential", "", true},
		{"AWSAccessKeyId=a&Signature=b&Expires=1", "", true},
		{"x=X-Amz-Signature", "", false},
	}
	for _, tt := range tests {
		r := &http.Request{URL: &url.URL{Path: "/", RawQuery: tt.query}, Header: http.Header{}}
		if tt.header != "" {
			r.Header.Set("Authorization", tt.header)
		}
		if got := HasAuth(r); got != tt.want {
			t.Errorf("HasAuth(%q, %q) = %v", tt.query, tt.header, got)
		}
	}
}

func TestKeyCache(t *testing.T) {
	v := newVerifier(testTime)
	c := reqCase{method: "GET", path: "/bucket/key"}
	for range 3 {
		if _, err := v.Verify(toServer(t, sdkRequest(t, c, "", testTime))); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(v.keys.m); n != 1 {
		t.Fatalf("%d cached keys, want 1", n)
	}
	// A forged request does not add a key.
	sr := toServer(t, sdkRequest(t, c, "", testTime))
	sr.Header.Set("Authorization", strings.Replace(sr.Header.Get("Authorization"), "us-east-1", "xx-forged-1", 1))
	if _, err := v.Verify(sr); err == nil {
		t.Fatal("forged request verified")
	}
	if n := len(v.keys.m); n != 1 {
		t.Fatalf("%d cached keys after forgery, want 1", n)
	}
	// A rotated secret is noticed.
	v.Lookup = func(string) (string, bool) { return "rotated", true }
	if _, err := v.Verify(toServer(t, sdkRequest(t, c, "", testTime))); err == nil {
		t.Fatal("verified with a rotated secret")
	}
	// Concurrent use.
	v.Lookup = testLookup
	sr = toServer(t, sdkRequest(t, c, "", testTime))
	done := make(chan error)
	for i := range 8 {
		go func() {
			r := sr.Clone(context.Background())
			if i%2 == 0 {
				r.Header = r.Header.Clone()
				r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), "us-east-1", "r"+strconv.Itoa(i), 1))
				_, err := v.Verify(r)
				if err == nil {
					err = errors.New("forged request verified")
				} else {
					err = nil
				}
				done <- err
				return
			}
			_, err := v.Verify(r)
			done <- err
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

func TestHMAC(t *testing.T) {
	// RFC 4231 test case 2, and long keys and messages that take the fallback.
	got := hmacSHA256([]byte("Jefe"), []byte("what do ya want for nothing?"))
	if hex.EncodeToString(got[:]) != "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843" {
		t.Errorf("RFC 4231 case 2: %x", got)
	}
	for _, kl := range []int{0, 1, 63, 64, 65, 200, 600} {
		for _, ml := range []int{0, 1, 100, 512, 513, 4000} {
			key := bytes.Repeat([]byte{0xaa}, kl)
			msg := bytes.Repeat([]byte{0xdd}, ml)
			got := hmacSHA256(key, msg)
			want := hmacRef(key, msg)
			if !bytes.Equal(got[:], want) {
				t.Errorf("key %d msg %d: %x, want %x", kl, ml, got, want)
			}
		}
	}
}

func BenchmarkVerifyHeader(b *testing.B) {
	c := reqCase{method: "GET", path: "/bucket/some/object key.txt", query: "versionId=3",
		headers: [][2]string{{"Range", "bytes=0-1023"}, {"X-Amz-Meta-A", "b"}}}
	sr := toServer(b, sdkRequest(b, c, EmptySHA256, testTime))
	v := newVerifier(testTime)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(sr); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyPresigned(b *testing.B) {
	sr := sdkPresign(b, reqCase{method: "GET", path: "/bucket/some/object.txt"}, "3600", testTime)
	v := newVerifier(testTime)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(sr); err != nil {
			b.Fatal(err)
		}
	}
}

// TestVerifyPresignedPayloadHash checks a presigned PUT whose URL carries
// X-Amz-Content-Sha256.
func TestVerifyPresignedPayloadHash(t *testing.T) {
	body := "presigned body"
	sum := sha256.Sum256([]byte(body))
	hash := hex.EncodeToString(sum[:])
	for _, tt := range []struct {
		name string
		send string
		code string
	}{
		{"match", body, ""},
		{"mismatch", body + "!", CodeXAmzContentSHA256Mismatch},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := s3URL("localhost:9000", "/bucket/key", "X-Amz-Expires=60&X-Amz-Content-Sha256="+hash)
			req, _ := http.NewRequest("PUT", u.String(), nil)
			signedURL, _, err := sdkSigner().PresignHTTP(context.Background(), sdkCreds(), req, hash, "s3", "us-east-1", testTime)
			if err != nil {
				t.Fatal(err)
			}
			preq, _ := http.NewRequest("PUT", signedURL, strings.NewReader(tt.send))
			res, err := newVerifier(testTime).Verify(toServer(t, preq))
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(res.Body)
			if tt.code == "" {
				if err != nil || string(got) != tt.send {
					t.Fatalf("%q, %v", got, err)
				}
				return
			}
			wantCode(t, err, tt.code)
		})
	}
}

func TestVerifyPresignedParams(t *testing.T) {
	// Hand-made presigned requests whose signature is irrelevant: each fails
	// on its parameters first.
	valid := map[string]string{
		"X-Amz-Algorithm":     "AWS4-HMAC-SHA256",
		"X-Amz-Credential":    testAccessKey + "/20260314/us-east-1/s3/aws4_request",
		"X-Amz-Date":          "20260314T150926Z",
		"X-Amz-Expires":       "60",
		"X-Amz-SignedHeaders": "host",
		"X-Amz-Signature":     sig64,
	}
	tests := []struct {
		name string
		set  map[string]string
		code string
	}{
		{"valid params, wrong signature", nil, CodeSignatureDoesNotMatch},
		{"non-hex signature", map[string]string{"X-Amz-Signature": strings.Repeat("z", 64)}, CodeAuthorizationQueryParametersError},
		{"host unsigned", map[string]string{"X-Amz-SignedHeaders": "x-amz-date"}, CodeAuthorizationQueryParametersError},
		{"bad signed headers", map[string]string{"X-Amz-SignedHeaders": "host;;"}, CodeAuthorizationQueryParametersError},
		{"bad payload hash", map[string]string{"X-Amz-Content-Sha256": "xyz"}, CodeInvalidArgument},
		{"bad credential terminator", map[string]string{"X-Amz-Credential": testAccessKey + "/20260314/us-east-1/s3/aws5_request"}, CodeAuthorizationQueryParametersError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := url.Values{}
			for k, v := range valid {
				q.Set(k, v)
			}
			for k, v := range tt.set {
				q.Set(k, v)
			}
			r, _ := http.NewRequest("GET", "http://localhost/bucket/key?"+q.Encode(), nil)
			_, err := newVerifier(testTime).Verify(toServer(t, r))
			wantCode(t, err, tt.code)
		})
	}
}

// TestVerifyAllocs guards the allocation-light hot path of header auth.
func TestVerifyAllocs(t *testing.T) {
	c := reqCase{method: "GET", path: "/bucket/some/object key.txt", query: "versionId=3&partNumber=1",
		headers: [][2]string{{"Range", "bytes=0-1023"}, {"X-Amz-Meta-A", "b  c"}}}
	sr := toServer(t, sdkRequest(t, c, EmptySHA256, testTime))
	v := newVerifier(testTime)
	n := testing.AllocsPerRun(100, func() {
		if _, err := v.Verify(sr); err != nil {
			t.Fatal(err)
		}
	})
	if n > 3 {
		t.Errorf("Verify allocates %v times per request", n)
	}
}
