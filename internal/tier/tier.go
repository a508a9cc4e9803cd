// Package tier is the client of an external archive tier (docs/design/tiering.md): one
// bucket of an S3 endpoint (another cairn cluster, or any S3 service), addressed path-style
// and signed with AWS Signature V4. Every request has deadlines: the connection, the TLS
// handshake and the response headers are bounded by the Config's timeouts, and the
// caller's context bounds the whole request, body included.
//
// The package does no retries and keeps no state beyond its connection pool: the caller
// (the migration and recall machinery) decides what a failed request means. Errors carry
// the kinds of package errors: NotExist for a missing bucket or object, Permission for
// refused credentials, Transient for an endpoint that cannot be reached, times out or
// answers 5xx, Corrupt for a body that does not match its checksum.
package tier

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/sigv4"
)

// Config addresses one bucket of an S3 endpoint.
type Config struct {
	// Endpoint is the http:// or https:// URL of the S3 service, without a path.
	Endpoint string
	Bucket   string
	// Region is the signing region ("": us-east-1).
	Region    string
	AccessKey string
	SecretKey string
	// DialTimeout bounds connecting, and the TLS handshake (0: 5 s); HeaderTimeout the
	// wait for the response headers after the request is sent (0: 30 s).
	DialTimeout   time.Duration
	HeaderTimeout time.Duration
	// Transport, if set, replaces the client's own (tests; the timeouts above are then
	// the transport's business).
	Transport http.RoundTripper
	// Now is the signing clock (nil: time.Now).
	Now func() time.Time
}

// Client sends requests to one tier bucket. It is safe for concurrent use.
type Client struct {
	cfg  Config
	base *url.URL
	hc   *http.Client
}

// New returns a client for cfg. It does no I/O (see Probe).
func New(cfg Config) (*Client, error) {
	const op errors.Op = "tier.New"
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" {
		return nil, errors.Errorf(op, errors.Invalid, "endpoint %q is not an http:// or https:// URL without a path", cfg.Endpoint)
	}
	if cfg.Bucket == "" || cfg.AccessKey == "" || cfg.SecretKey == "" {
		return nil, errors.E(op, errors.Invalid, "a tier needs a bucket, an access key and a secret key")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	rt := cfg.Transport
	if rt == nil {
		rt = &http.Transport{
			Proxy:                 nil, // a tier is addressed directly, never through the environment's proxy
			DialContext:           (&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   cfg.DialTimeout,
			ResponseHeaderTimeout: cfg.HeaderTimeout,
			ExpectContinueTimeout: time.Second,
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       90 * time.Second,
		}
	}
	u.Path = ""
	return &Client{cfg: cfg, base: u, hc: &http.Client{Transport: rt}}, nil
}

// Endpoint returns the endpoint and bucket the client addresses, for messages.
func (c *Client) Endpoint() string { return c.base.String() + "/" + c.cfg.Bucket }

func (c *Client) request(ctx context.Context, method, key string, body io.Reader, size int64, hdr http.Header) (*http.Response, error) {
	u := *c.base
	u.Path = "/" + c.cfg.Bucket
	if key != "" {
		u.Path += "/" + key
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, errors.E(errors.Invalid, err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if body != nil {
		req.ContentLength = size
	}
	sigv4.SignRequest(req, c.cfg.AccessKey, c.cfg.SecretKey, c.cfg.Region, "", c.cfg.Now())
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil && ctx.Err() == context.Canceled {
			return nil, errors.E(errors.Transient, ctx.Err())
		}
		return nil, errors.E(errors.Transient, fmt.Errorf("tier endpoint %s does not answer: %w", c.base.Host, err))
	}
	return resp, nil
}

// statusError turns a response that is not a success into an error (and closes its body).
func (c *Client) statusError(what string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	code := ""
	if i := strings.Index(string(b), "<Code>"); i >= 0 {
		if j := strings.Index(string(b[i:]), "</Code>"); j > 0 {
			code = ": " + string(b[i+6:i+j])
		}
	}
	msg := fmt.Sprintf("%s at %s: %s%s", what, c.Endpoint(), resp.Status, code)
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return errors.E(errors.NotExist, msg)
	case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized:
		return errors.E(errors.Permission, msg)
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return errors.E(errors.Transient, msg)
	}
	return errors.E(errors.Invalid, msg)
}

// Probe checks that the endpoint answers and that the bucket exists and the credentials
// are accepted for it (HEAD of the bucket).
func (c *Client) Probe(ctx context.Context) error {
	const op errors.Op = "tier.Probe"
	resp, err := c.request(ctx, http.MethodHead, "", nil, 0, nil)
	if err != nil {
		return errors.E(op, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		resp.Body.Close()
		return nil
	case http.StatusNotFound:
		resp.Body.Close()
		return errors.Errorf(op, errors.NotExist, "%s: no such bucket (404)", c.Endpoint())
	case http.StatusForbidden:
		resp.Body.Close()
		return errors.Errorf(op, errors.Permission, "%s: the access key or secret key is refused (403)", c.Endpoint())
	}
	return errors.E(op, c.statusError("bucket "+c.cfg.Bucket, resp))
}

// Put stores size bytes of body as key, with the body's MD5 (md5sum, 16 bytes) as its
// Content-MD5, so the endpoint refuses a body damaged on the way; it then checks that
// the ETag the endpoint answers is that MD5 (an S3 single-part ETag). It returns the
// ETag.
func (c *Client) Put(ctx context.Context, key string, body io.Reader, size int64, md5sum []byte) (string, error) {
	const op errors.Op = "tier.Put"
	if len(md5sum) != md5.Size {
		return "", errors.E(op, errors.Invalid, "an MD5 of the body is needed")
	}
	hdr := http.Header{"Content-Md5": {base64.StdEncoding.EncodeToString(md5sum)}, "Content-Type": {"application/octet-stream"}}
	resp, err := c.request(ctx, http.MethodPut, key, body, size, hdr)
	if err != nil {
		return "", errors.E(op, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", errors.E(op, c.statusError("put "+key, resp))
	}
	resp.Body.Close()
	etag := strings.Trim(resp.Header.Get("ETag"), `"`)
	if want := hex.EncodeToString(md5sum); etag != want {
		return "", errors.Errorf(op, errors.Corrupt, "put %s at %s: the endpoint answered ETag %q for a body of MD5 %s", key, c.Endpoint(), etag, want)
	}
	return etag, nil
}

// Get returns the body of key and its size. The caller closes the body; the context
// bounds the reading of it.
func (c *Client) Get(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	const op errors.Op = "tier.Get"
	resp, err := c.request(ctx, http.MethodGet, key, nil, 0, nil)
	if err != nil {
		return nil, 0, errors.E(op, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, 0, errors.E(op, c.statusError("get "+key, resp))
	}
	n, err := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64)
	if err != nil {
		resp.Body.Close()
		return nil, 0, errors.Errorf(op, errors.Invalid, "get %s at %s: no Content-Length", key, c.Endpoint())
	}
	return resp.Body, n, nil
}

// GetRange returns n bytes of key from off (n > 0). The caller closes the body.
func (c *Client) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	const op errors.Op = "tier.GetRange"
	if off < 0 || n <= 0 {
		return nil, errors.E(op, errors.Invalid, "bad range")
	}
	hdr := http.Header{"Range": {fmt.Sprintf("bytes=%d-%d", off, off+n-1)}}
	resp, err := c.request(ctx, http.MethodGet, key, nil, 0, hdr)
	if err != nil {
		return nil, errors.E(op, err)
	}
	if resp.StatusCode != http.StatusPartialContent && resp.StatusCode != http.StatusOK {
		return nil, errors.E(op, c.statusError("get "+key, resp))
	}
	if resp.StatusCode == http.StatusOK && off != 0 {
		resp.Body.Close()
		return nil, errors.Errorf(op, errors.Invalid, "get %s at %s: the endpoint ignored the range", key, c.Endpoint())
	}
	return resp.Body, nil
}

// Empty reports whether the tier's bucket holds no object (a ListObjectsV2 of one key).
func (c *Client) Empty(ctx context.Context) (bool, error) {
	const op errors.Op = "tier.Empty"
	u := *c.base
	u.Path = "/" + c.cfg.Bucket
	u.RawQuery = "list-type=2&max-keys=1"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return false, errors.E(op, errors.Invalid, err)
	}
	sigv4.SignRequest(req, c.cfg.AccessKey, c.cfg.SecretKey, c.cfg.Region, "", c.cfg.Now())
	resp, err := c.hc.Do(req)
	if err != nil {
		return false, errors.E(op, errors.Transient, fmt.Errorf("tier endpoint %s does not answer: %w", c.base.Host, err))
	}
	if resp.StatusCode != http.StatusOK {
		return false, errors.E(op, c.statusError("list", resp))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return false, errors.E(op, errors.Transient, err)
	}
	return !strings.Contains(string(b), "<Contents>"), nil
}

// Delete removes key; a key that is not there is not an error (S3 answers 204 either way).
func (c *Client) Delete(ctx context.Context, key string) error {
	const op errors.Op = "tier.Delete"
	resp, err := c.request(ctx, http.MethodDelete, key, nil, 0, nil)
	if err != nil {
		return errors.E(op, err)
	}
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
		return errors.E(op, c.statusError("delete "+key, resp))
	}
	resp.Body.Close()
	return nil
}
