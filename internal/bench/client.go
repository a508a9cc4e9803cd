package bench

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/tls"
	"encoding/base64"
	"encoding/xml"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/sigv4"
)

// verHeader carries an object's version on PUT; servers return it on GET as user metadata,
// so a GET can check the body against the version it actually got, even while other
// clients overwrite the key.
const verHeader = "X-Amz-Meta-Cairn-Bench-Ver"

// client sends signed path-style S3 requests for one bucket. It is safe for concurrent use.
type client struct {
	base      *url.URL // scheme and host of the endpoint
	bucket    string
	accessKey string
	secretKey string
	region    string
	hc        *http.Client
	pat       *pattern
}

// newClient makes the one client (and transport) of a run, with idle connections for
// conns concurrent requests.
func newClient(cfg *Config, conns int, pat *pattern) (*client, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("bad --endpoint %q: want http://host:port or https://host", cfg.Endpoint)
	}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          2 * conns,
		MaxIdleConnsPerHost:   2 * conns,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: cfg.Timeout,
		DisableCompression:    true,
		WriteBufferSize:       64 << 10,
		ReadBufferSize:        64 << 10,
	}
	if cfg.Insecure || cfg.RootCAs != nil {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: cfg.Insecure, RootCAs: cfg.RootCAs}
	}
	return &client{
		base:      &url.URL{Scheme: u.Scheme, Host: u.Host},
		bucket:    cfg.Bucket,
		accessKey: cfg.AccessKey,
		secretKey: cfg.SecretKey,
		region:    cfg.Region,
		hc:        &http.Client{Transport: tr, Timeout: cfg.Timeout},
		pat:       pat,
	}, nil
}

// close drops the idle connections.
func (c *client) close() { c.hc.CloseIdleConnections() }

// request builds a request for key in the bucket ("" for the bucket itself).
func (c *client) request(ctx context.Context, method, key, query string) (*http.Request, error) {
	u := *c.base
	u.Path = "/" + c.bucket
	if key != "" {
		u.Path += "/" + key
	}
	u.RawQuery = query
	req, err := http.NewRequestWithContext(ctx, method, "", nil)
	if err != nil {
		return nil, err
	}
	req.URL, req.Host = &u, u.Host
	return req, nil
}

// do signs and sends req and returns the response if its status is 2xx; otherwise it
// drains the response and returns an *s3Error.
func (c *client) do(req *http.Request) (*http.Response, error) {
	sigv4.SignRequest(req, c.accessKey, c.secretKey, c.region, sigv4.UnsignedPayload, time.Now())
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, responseError(resp)
	}
	return resp, nil
}

// drain reads and closes a response body so that its connection is reused.
func drain(resp *http.Response) error {
	_, err := io.Copy(io.Discard, resp.Body)
	if cerr := resp.Body.Close(); err == nil {
		err = cerr
	}
	return err
}

// put stores version ver of key, size bytes of the pattern.
func (c *client) put(ctx context.Context, key string, ver uint32, size int64) error {
	req, err := c.request(ctx, http.MethodPut, key, "")
	if err != nil {
		return err
	}
	if size > 0 {
		body := c.pat.body(key, ver, size)
		req.Body, req.ContentLength = body, size
		req.GetBody = func() (io.ReadCloser, error) { return c.pat.body(key, ver, size), nil }
	}
	req.Header.Set(verHeader, strconv.FormatUint(uint64(ver), 10))
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	return drain(resp)
}

// getResult is what a GET read.
type getResult struct {
	n        int64 // body bytes
	verified bool  // the content was compared with the pattern
}

// get reads key into buf (a scratch buffer). A body shorter than its Content-Length, of
// another size than want (if want >= 0), or (if verify and the server returned the
// version header) with other content than the pattern's is a *checkError.
func (c *client) get(ctx context.Context, key string, want int64, verify bool, buf []byte) (getResult, error) {
	var res getResult
	req, err := c.request(ctx, http.MethodGet, key, "")
	if err != nil {
		return res, err
	}
	resp, err := c.do(req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	var v verifier
	if verify {
		if ver, err := strconv.ParseUint(resp.Header.Get(verHeader), 10, 32); err == nil {
			v, res.verified = c.pat.verifier(key, uint32(ver)), true
		}
	}
	for {
		n, err := resp.Body.Read(buf)
		if res.verified {
			v.check(buf[:n])
		}
		res.n += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return res, err
		}
	}
	switch {
	case resp.ContentLength >= 0 && res.n != resp.ContentLength:
		return res, &checkError{"ShortBody", fmt.Sprintf("GET %s: %d body bytes, Content-Length %d", key, res.n, resp.ContentLength)}
	case want >= 0 && res.n != want:
		return res, &checkError{"SizeMismatch", fmt.Sprintf("GET %s: %d bytes, want %d", key, res.n, want)}
	case res.verified && !v.ok:
		return res, &checkError{"ContentMismatch", fmt.Sprintf("GET %s: body differs from what was PUT", key)}
	}
	return res, nil
}

// head stats key and returns its size.
func (c *client) head(ctx context.Context, key string) (int64, error) {
	req, err := c.request(ctx, http.MethodHead, key, "")
	if err != nil {
		return 0, err
	}
	resp, err := c.do(req)
	if err != nil {
		return 0, err
	}
	return resp.ContentLength, drain(resp)
}

// del deletes key.
func (c *client) del(ctx context.Context, key string) error {
	req, err := c.request(ctx, http.MethodDelete, key, "")
	if err != nil {
		return err
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	return drain(resp)
}

// listQuery is the query of a ListObjectsV2 page.
func listQuery(prefix, token string, maxKeys int) string {
	q := "list-type=2&max-keys=" + strconv.Itoa(maxKeys) + "&prefix=" + url.QueryEscape(prefix)
	if token != "" {
		q += "&continuation-token=" + url.QueryEscape(token)
	}
	return q
}

// listPage reads one ListObjectsV2 page into *buf (grown as needed) and returns how many
// keys it held and the continuation token of the next page ("" after the last). The
// response is scanned, not parsed, so that the client keeps up with fast servers.
func (c *client) listPage(ctx context.Context, prefix, token string, maxKeys int, buf *bytes.Buffer) (keys int, next string, err error) {
	req, err := c.request(ctx, http.MethodGet, "", listQuery(prefix, token, maxKeys))
	if err != nil {
		return 0, "", err
	}
	resp, err := c.do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	buf.Reset()
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return 0, "", err
	}
	body := buf.Bytes()
	keys = bytes.Count(body, []byte("<Key>"))
	if bytes.Contains(body, []byte("<IsTruncated>true</IsTruncated>")) {
		next = html.UnescapeString(xmlField(string(body), "NextContinuationToken"))
		if next == "" {
			return keys, "", &checkError{"BadListing", "truncated listing without NextContinuationToken"}
		}
	}
	return keys, next, nil
}

// listedObject is one object of a full listing.
type listedObject struct {
	Key  string `xml:"Key"`
	Size int64  `xml:"Size"`
}

// listAll lists every object under prefix (parsed properly; not measured).
func (c *client) listAll(ctx context.Context, prefix string) ([]listedObject, error) {
	var out []listedObject
	token := ""
	for {
		req, err := c.request(ctx, http.MethodGet, "", listQuery(prefix, token, 1000))
		if err != nil {
			return nil, err
		}
		resp, err := c.do(req)
		if err != nil {
			return nil, err
		}
		var page struct {
			Contents              []listedObject `xml:"Contents"`
			IsTruncated           bool           `xml:"IsTruncated"`
			NextContinuationToken string         `xml:"NextContinuationToken"`
		}
		err = xml.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", c.bucket, err)
		}
		out = append(out, page.Contents...)
		if !page.IsTruncated || page.NextContinuationToken == "" {
			return out, nil
		}
		token = page.NextContinuationToken
	}
}

// headBucket returns the status of HEAD on the bucket (200, 404, 403, ...).
func (c *client) headBucket(ctx context.Context) (int, error) {
	req, err := c.request(ctx, http.MethodHead, "", "")
	if err != nil {
		return 0, err
	}
	sigv4.SignRequest(req, c.accessKey, c.secretKey, c.region, sigv4.UnsignedPayload, time.Now())
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	drain(resp)
	return resp.StatusCode, nil
}

// bucketError explains a refused HEAD on the bucket: HEAD responses have no body, so it
// asks for an empty listing, whose error says why (InvalidAccessKeyId, AccessDenied, ...).
func (c *client) bucketError(ctx context.Context) error {
	req, err := c.request(ctx, http.MethodGet, "", listQuery("", "", 0))
	if err != nil {
		return err
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// createBucket creates the bucket (with a location constraint outside us-east-1).
func (c *client) createBucket(ctx context.Context) error {
	req, err := c.request(ctx, http.MethodPut, "", "")
	if err != nil {
		return err
	}
	if c.region != "" && c.region != "us-east-1" {
		body := "<CreateBucketConfiguration><LocationConstraint>" + c.region +
			"</LocationConstraint></CreateBucketConfiguration>"
		req.Body, req.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	return drain(resp)
}

// deleteBucket deletes the (empty) bucket.
func (c *client) deleteBucket(ctx context.Context) error {
	req, err := c.request(ctx, http.MethodDelete, "", "")
	if err != nil {
		return err
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	return drain(resp)
}

// deleteObjects deletes up to 1,000 keys with one DeleteObjects request and returns how
// many the server reported as not deleted.
func (c *client) deleteObjects(ctx context.Context, keys []string) (failed int, err error) {
	var b bytes.Buffer
	b.WriteString("<Delete><Quiet>true</Quiet>")
	for _, k := range keys {
		b.WriteString("<Object><Key>")
		xml.EscapeText(&b, []byte(k))
		b.WriteString("</Key></Object>")
	}
	b.WriteString("</Delete>")
	sum := md5.Sum(b.Bytes())
	req, err := c.request(ctx, http.MethodPost, "", "delete=")
	if err != nil {
		return 0, err
	}
	body := b.Bytes()
	req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	req.Header.Set("Content-MD5", base64.StdEncoding.EncodeToString(sum[:]))
	req.Header.Set("Content-Type", "application/xml")
	resp, err := c.do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return bytes.Count(out, []byte("<Error>")), nil
}

// s3Error is a non-2xx response.
type s3Error struct {
	method, path string
	status       int
	code         string // the S3 error code, if the body had one
	message      string
}

func (e *s3Error) Error() string {
	s := fmt.Sprintf("%s %s: HTTP %d", e.method, e.path, e.status)
	if e.code != "" {
		s += " " + e.code
	}
	if e.message != "" {
		s += ": " + e.message
	}
	return s
}

// responseError makes an *s3Error of a non-2xx response, reading at most 4 KiB of its body.
func responseError(resp *http.Response) error {
	var b [4096]byte
	n, _ := io.ReadFull(resp.Body, b[:])
	io.Copy(io.Discard, resp.Body)
	body := string(b[:n])
	return &s3Error{method: resp.Request.Method, path: resp.Request.URL.Path, status: resp.StatusCode,
		code: xmlField(body, "Code"), message: html.UnescapeString(xmlField(body, "Message"))}
}

// xmlField is the text of the first <name> element of body.
func xmlField(body, name string) string {
	_, rest, ok := strings.Cut(body, "<"+name+">")
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, "</"+name+">")
	return v
}

// checkError is a response that arrived but was wrong: short, of the wrong size, or
// with other content than was written.
type checkError struct {
	code string
	msg  string
}

func (e *checkError) Error() string { return e.msg }

// errorCode classifies an error for the errors-by-code counts: the S3 error code of the
// response, "HTTP nnn" when it had none, the check that failed, or "timeout" and
// "connection" for transport errors.
func errorCode(err error) string {
	if se, ok := errors.AsType[*s3Error](err); ok {
		if se.code != "" {
			return se.code
		}
		return "HTTP " + strconv.Itoa(se.status)
	}
	if ce, ok := errors.AsType[*checkError](err); ok {
		return ce.code
	}
	if te, ok := errors.AsType[interface {
		error
		Timeout() bool
	}](err); (ok && te.Timeout()) || errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return "connection"
}

// transportMessage is the most specific part of a transport error ("connect: connection
// refused"), for one-line messages.
func transportMessage(err error) string {
	if oe, ok := errors.AsType[*net.OpError](err); ok {
		return oe.Err.Error()
	}
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err.Error()
	}
	return err.Error()
}
