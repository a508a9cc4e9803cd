package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/sigv4"
)

const (
	unsignedPayload = "UNSIGNED-PAYLOAD"
	emptySHA256     = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
)

// newTransport is the one transport of a run: keep-alive, no compression, no proxy, idle
// connections for every client.
func newTransport(clients int) *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          4 * clients,
		MaxIdleConnsPerHost:   2 * clients,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		DisableKeepAlives:     false,
		ForceAttemptHTTP2:     false,
		ExpectContinueTimeout: 0,
		WriteBufferSize:       64 << 10,
		ReadBufferSize:        64 << 10,
	}
}

// target is a server the phases send signed path-style requests to.
type target struct {
	name      string // "bare" or "cairn"
	base      string // http://host:port
	bucket    string
	accessKey string
	secretKey string
	region    string
	client    *http.Client
}

// objectURL appends the URL of key to buf[:0] and returns it as a string (the one
// allocation per request the harness makes outside net/http).
func (t *target) objectURL(buf *[]byte, key []byte) string {
	b := append((*buf)[:0], t.base...)
	b = append(b, '/')
	b = append(b, t.bucket...)
	b = append(b, '/')
	b = append(b, key...)
	*buf = b
	return string(b)
}

func (t *target) do(req *http.Request, payloadHash string) (*http.Response, error) {
	sigv4.SignRequest(req, t.accessKey, t.secretKey, t.region, payloadHash, time.Now())
	return t.client.Do(req)
}

// put stores body at url.
func (t *target) put(ctx context.Context, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := t.do(req, unsignedPayload)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := statusError(resp); err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// get reads url. If want is set, the body must equal it (buf, at least len(want)+1 long,
// receives it); otherwise the body is discarded and must be size bytes long.
func (t *target) get(ctx context.Context, url string, size int64, want, buf []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := t.do(req, emptySHA256)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := statusError(resp); err != nil {
		return err
	}
	if want == nil {
		n, err := io.Copy(io.Discard, resp.Body)
		if err == nil && n != size {
			err = fmt.Errorf("GET %s: body is %d bytes, want %d", req.URL.Path, n, size)
		}
		return err
	}
	n, err := io.ReadFull(resp.Body, buf[:len(want)+1])
	switch {
	case err != io.ErrUnexpectedEOF && err != nil:
		return err
	case n != len(want):
		return fmt.Errorf("GET %s: body is %d+ bytes, want %d", req.URL.Path, n, len(want))
	case !bytes.Equal(buf[:n], want):
		return fmt.Errorf("GET %s: body differs from what was PUT", req.URL.Path)
	}
	return nil
}

// createBucket creates the bucket; it may exist already.
func (t *target) createBucket(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, t.base+"/"+t.bucket, nil)
	if err != nil {
		return err
	}
	resp, err := t.do(req, emptySHA256)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	err = statusError(resp)
	if se, ok := errors.AsType[*httpError](err); ok && se.code == "BucketAlreadyOwnedByYou" {
		return nil
	}
	return err
}

// httpError is a non-2xx response.
type httpError struct {
	method, path string
	status       string
	code         string // the S3 error code, if the body had one
	message      string
}

func (e *httpError) Error() string {
	s := fmt.Sprintf("%s %s: %s", e.method, e.path, e.status)
	if e.code != "" {
		s += " " + e.code
	}
	if e.message != "" {
		s += ": " + e.message
	}
	return s
}

// statusError returns an *httpError for a non-2xx response, after draining its body.
func statusError(resp *http.Response) error {
	if resp.StatusCode/100 == 2 {
		return nil
	}
	var b [1024]byte
	n, _ := io.ReadFull(resp.Body, b[:])
	io.Copy(io.Discard, resp.Body)
	body := string(b[:n])
	return &httpError{method: resp.Request.Method, path: resp.Request.URL.Path, status: resp.Status,
		code: xmlField(body, "Code"), message: xmlField(body, "Message")}
}

func xmlField(body, name string) string {
	_, rest, ok := strings.Cut(body, "<"+name+">")
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, "</"+name+">")
	return v
}
