package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/sigv4"
)

// client sends sigv4-signed requests to one server, one at a time, on a kept-alive
// connection. Every request has a timeout.
type client struct {
	base    string
	hc      *http.Client
	timeout time.Duration
}

func newClient(addr string, timeout time.Duration) *client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		DisableCompression:  true,
		MaxIdleConnsPerHost: headWorkers,
		IdleConnTimeout:     60 * time.Second,
	}
	return &client{base: "http://" + addr, hc: &http.Client{Transport: tr, Timeout: timeout}, timeout: timeout}
}

func (c *client) close() { c.hc.CloseIdleConnections() }

// do signs and sends a request with an empty body and reads the whole response. The
// duration is from sending the request to having read the last byte (signing excluded).
func (c *client) do(ctx context.Context, method, path string, q url.Values) ([]byte, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, 0, err
	}
	sigv4.SignRequest(req, accessKey, secretKey, region, sigv4.UnsignedPayload, time.Now())
	start := time.Now()
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s: %w", method, u, err)
	}
	body, err := io.ReadAll(resp.Body)
	d := time.Since(start)
	resp.Body.Close()
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s: reading response: %w", method, u, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, 0, fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, strings.TrimSpace(string(body[:min(len(body), 500)])))
	}
	return body, d, nil
}

// head sends a HEAD of bucket/key and returns the object's size (Content-Length). The
// duration is from sending the request to having its answer.
func (c *client) head(ctx context.Context, bucket, key string) (int64, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := c.base + "/" + bucket + "/" + key
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
	if err != nil {
		return 0, 0, err
	}
	sigv4.SignRequest(req, accessKey, secretKey, region, sigv4.UnsignedPayload, time.Now())
	start := time.Now()
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("HEAD %s: %w", u, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("HEAD %s: %s", u, resp.Status)
	}
	return resp.ContentLength, d, nil
}

func (c *client) createBucket(ctx context.Context, name string) error {
	_, _, err := c.do(ctx, http.MethodPut, "/"+name, nil)
	return err
}

// listPage is the part of a ListObjectsV2 response the benchmark checks.
type listPage struct {
	KeyCount              int
	IsTruncated           bool
	NextContinuationToken string
	Contents              []listEntry
	CommonPrefixes        []commonPrefix
}

type listEntry struct {
	Key  string
	Size int64
}

type commonPrefix struct {
	Prefix string
}

// listParams are the query parameters of a ListObjectsV2 request.
type listParams struct {
	prefix, delimiter, startAfter, token string
	maxKeys                              int
}

func (p listParams) values() url.Values {
	q := url.Values{"list-type": {"2"}, "max-keys": {fmt.Sprint(p.maxKeys)}}
	if p.prefix != "" {
		q.Set("prefix", p.prefix)
	}
	if p.delimiter != "" {
		q.Set("delimiter", p.delimiter)
	}
	if p.startAfter != "" {
		q.Set("start-after", p.startAfter)
	}
	if p.token != "" {
		q.Set("continuation-token", p.token)
	}
	return q
}

// list sends one ListObjectsV2 request and decodes the page. The duration excludes decoding.
// With strict, the page is decoded with encoding/xml and must match the fast decoding.
func (c *client) list(ctx context.Context, bucket string, p listParams, strict bool) (*listPage, time.Duration, error) {
	body, d, err := c.do(ctx, http.MethodGet, "/"+bucket, p.values())
	if err != nil {
		return nil, 0, err
	}
	page, err := parseList(body)
	if err != nil {
		return nil, 0, fmt.Errorf("ListObjectsV2 response: %w", err)
	}
	if strict {
		var ref listPage
		if err := xml.Unmarshal(body, &ref); err != nil {
			return nil, 0, fmt.Errorf("ListObjectsV2 response: %w", err)
		}
		if !reflect.DeepEqual(normalize(&ref), normalize(page)) {
			return nil, 0, fmt.Errorf("ListObjectsV2 response: fast and encoding/xml decodings differ")
		}
	}
	if page.KeyCount != len(page.Contents)+len(page.CommonPrefixes) {
		return nil, 0, fmt.Errorf("ListObjectsV2: KeyCount %d but %d keys and %d prefixes", page.KeyCount, len(page.Contents), len(page.CommonPrefixes))
	}
	if page.IsTruncated && page.NextContinuationToken == "" {
		return nil, 0, fmt.Errorf("ListObjectsV2: truncated page without NextContinuationToken")
	}
	return page, d, nil
}

func normalize(p *listPage) *listPage {
	q := *p
	if len(q.Contents) == 0 {
		q.Contents = nil
	}
	if len(q.CommonPrefixes) == 0 {
		q.CommonPrefixes = nil
	}
	return &q
}

// parseList decodes the fields of listPage from a ListObjectsV2 response much faster than
// encoding/xml (which would otherwise dominate a scan's wall time on the client side). It
// relies on the response being flat, as S3's is: each field is a simple element, text only;
// entities are decoded.
func parseList(body []byte) (*listPage, error) {
	if !bytes.Contains(body, []byte("<ListBucketResult")) {
		return nil, fmt.Errorf("not a ListBucketResult: %.200q", body)
	}
	page := &listPage{}
	rest := body
	var err error
	text := func(name string) (string, bool) {
		open := "<" + name + ">"
		i := bytes.Index(rest, []byte(open))
		if i < 0 {
			return "", false
		}
		v := rest[i+len(open):]
		j := bytes.IndexByte(v, '<')
		if j < 0 || !bytes.HasPrefix(v[j:], []byte("</"+name+">")) {
			err = fmt.Errorf("malformed <%s> element", name)
			return "", false
		}
		rest = v[j+len(name)+3:]
		return unescape(v[:j]), true
	}
	// Header fields come before the first <Contents> or <CommonPrefixes>.
	head := body
	if i := bytes.Index(body, []byte("<Contents>")); i >= 0 {
		head = body[:i]
	} else if i := bytes.Index(body, []byte("<CommonPrefixes>")); i >= 0 {
		head = body[:i]
	}
	rest = head
	if v, ok := text("KeyCount"); ok {
		page.KeyCount, _ = strconv.Atoi(v)
	}
	rest = head
	if v, ok := text("IsTruncated"); ok {
		page.IsTruncated = v == "true"
	}
	rest = head
	if v, ok := text("NextContinuationToken"); ok {
		page.NextContinuationToken = v
	}
	rest = body[len(head):]
	for err == nil {
		i := bytes.Index(rest, []byte("<Contents>"))
		if i < 0 {
			break
		}
		rest = rest[i:]
		end := bytes.Index(rest, []byte("</Contents>"))
		if end < 0 {
			return nil, fmt.Errorf("unterminated <Contents>")
		}
		entry, after := rest[:end], rest[end:]
		rest = entry
		key, ok := text("Key")
		if !ok {
			return nil, fmt.Errorf("<Contents> without <Key>")
		}
		sz, _ := text("Size")
		size, perr := strconv.ParseInt(sz, 10, 64)
		if perr != nil {
			return nil, fmt.Errorf("bad <Size> %q", sz)
		}
		page.Contents = append(page.Contents, listEntry{Key: key, Size: size})
		rest = after
	}
	rest = body[len(head):]
	for err == nil {
		i := bytes.Index(rest, []byte("<CommonPrefixes>"))
		if i < 0 {
			break
		}
		rest = rest[i:]
		p, ok := text("Prefix")
		if !ok {
			return nil, fmt.Errorf("<CommonPrefixes> without <Prefix>")
		}
		page.CommonPrefixes = append(page.CommonPrefixes, commonPrefix{Prefix: p})
	}
	if err != nil {
		return nil, err
	}
	return page, nil
}

func unescape(b []byte) string {
	if bytes.IndexByte(b, '&') < 0 {
		return string(b)
	}
	return html.UnescapeString(string(b))
}
