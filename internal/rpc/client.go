package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/wire"
)

// Client sends signed requests to other nodes. It is safe for concurrent use.
type Client struct {
	Secret *Secret
	Node   string        // this node's id
	Epoch  func() uint64 // this node's current map epoch
	// OnEpoch, if set, is called when a response carries a newer epoch than ours, with
	// the address that answered (the caller fetches the newer map from it).
	OnEpoch func(epoch uint64, addr string)
	HTTP    *http.Client
	// CapTTL is the lifetime of minted capabilities (default 5 minutes).
	CapTTL time.Duration

	sent, received atomic.Int64
}

// Sent returns the request body bytes sent to other nodes so far.
func (c *Client) Sent() int64 { return c.sent.Load() }

// Received returns the response body bytes received from other nodes so far.
func (c *Client) Received() int64 { return c.received.Load() }

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

type countingBody struct {
	countingReader
	io.Closer
}

// NewTransport returns an HTTP transport tuned for internode traffic: keep-alive, many
// idle connections per peer, no compression, no proxy.
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ResponseHeaderTimeout: 0, // large bodies: the caller's context bounds the call
		WriteBufferSize:       256 << 10,
		ReadBufferSize:        256 << 10,
	}
}

// Request is one internode call.
type Request struct {
	Method string
	Addr   string // host:port of the node
	Path   string
	Query  url.Values
	Header http.Header
	Body   io.Reader
	Size   int64 // body length, -1 if unknown (chunked; needed for trailers)
	// Trailer names trailers the body will fill in before it returns EOF.
	Trailer http.Header
	// Cap, if set, is the operation, bucket and key for which a capability is minted.
	Cap *Cap
}

// Do sends r. A response with a status of 400 or more is turned into an error carrying
// the remote error's kind (its body is consumed); a network failure is Transient.
func (c *Client) Do(ctx context.Context, r *Request) (*http.Response, error) {
	u := "http://" + r.Addr + r.Path
	if len(r.Query) > 0 {
		u += "?" + r.Query.Encode()
	}
	body := r.Body
	if body != nil && r.Size > 0 && r.Size <= maxHashedBody {
		// Small: in memory before it is sent, so that its hash goes into the signature.
		br, err := smallBody(body, r.Size)
		if err != nil {
			return nil, err
		}
		c.sent.Add(r.Size)
		body = br
	} else if body != nil {
		body = countingReader{r: body, n: &c.sent}
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u, body)
	if err != nil {
		return nil, errors.E(errors.Invalid, err)
	}
	for k, v := range r.Header {
		req.Header[k] = v
	}
	if r.Body != nil {
		req.ContentLength = r.Size
		if r.Size == 0 {
			req.Body = http.NoBody
		}
	}
	req.Trailer = r.Trailer
	now := time.Now()
	if r.Cap != nil {
		ttl := c.CapTTL
		if ttl <= 0 {
			ttl = 5 * time.Minute
		}
		req.Header.Set(HdrCap, c.Secret.MintCap(r.Cap.Op, r.Cap.Bucket, r.Cap.Key, now, ttl))
	}
	var epoch uint64
	if c.Epoch != nil {
		epoch = c.Epoch()
	}
	c.Secret.Sign(req, c.Node, epoch, now)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, errors.E(ctx.Err())
		}
		return nil, errors.E(errors.Transient, fmt.Errorf("node %s: %w", r.Addr, err))
	}
	if err := c.Secret.VerifyResponse(resp, req.Header.Get(HdrNonce)); err != nil {
		defer resp.Body.Close()
		if resp.StatusCode >= 400 {
			// A refusal we cannot verify: most likely the node has another secret.
			return nil, errors.E(errors.Permission, fmt.Errorf("node %s: %v; it answered: %v", r.Addr, err, wire.DecodeError(resp)))
		}
		// An answer we cannot trust: the request may have been applied.
		return nil, errors.E(errors.Transient, fmt.Errorf("node %s: %w", r.Addr, err))
	}
	if e, err := strconv.ParseUint(resp.Header.Get(HdrEpoch), 10, 64); err == nil && e > epoch && c.OnEpoch != nil {
		c.OnEpoch(e, r.Addr)
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		return nil, wire.DecodeError(resp)
	}
	resp.Body = countingBody{countingReader{r: resp.Body, n: &c.received}, resp.Body}
	return resp, nil
}

// smallBody returns body, of size bytes (at most maxHashedBody), as a bytes.Reader, which
// http.NewRequest can replay (GetBody) for the signature's hash: body itself if it is one
// holding exactly size bytes (a gateway's in-memory body, sent to each replica: no copy),
// else the bytes read from it into a buffer of that size.
func smallBody(body io.Reader, size int64) (*bytes.Reader, error) {
	if br, ok := body.(*bytes.Reader); ok && int64(br.Len()) == size {
		return br, nil
	}
	buf := make([]byte, size+1) // one more: a longer body is refused
	n, err := io.ReadFull(body, buf)
	switch {
	case err == io.ErrUnexpectedEOF || (err == nil && n == len(buf)):
	case err == io.EOF:
		n = 0
	case err != nil:
		return nil, errors.E(errors.IO, err)
	}
	if int64(n) != size {
		if int64(n) > size {
			return nil, errors.E(errors.Invalid, fmt.Errorf("request body longer than the %d bytes declared", size))
		}
		return nil, errors.E(errors.Invalid, fmt.Errorf("request body of %d bytes, %d declared", n, size))
	}
	return bytes.NewReader(buf[:n]), nil
}

// DoJSON sends r and decodes a JSON answer into out (if non-nil).
func (c *Client) DoJSON(ctx context.Context, r *Request, out any) error {
	resp, err := c.Do(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return errors.E(errors.IO, fmt.Errorf("node %s: malformed answer: %w", r.Addr, err))
	}
	return nil
}
