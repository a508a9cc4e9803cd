package rpc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/wire"
)

// dialTimeout bounds a TCP connect and a TLS handshake to another node.
const dialTimeout = 3 * time.Second

// ErrNoCertificate is returned by a Dialer that must use TLS and has no certificate yet.
var ErrNoCertificate = errors.E(errors.Transient, "internode TLS is required and this node has no certificate yet")

// Dialer opens this node's connections to other nodes: TLS with its certificate (the
// server verified against the cluster CA for the host dialled) when the TLSSource has
// one, plain otherwise. While TLS is not required, a TLS handshake that fails is followed
// by a plain attempt (a peer that has no certificate yet, while TLS is being turned on);
// once TLS is required, nothing is ever dialled plain.
type Dialer struct {
	Secret *Secret
	TLS    TLSSource // nil: plain only
}

func (d *Dialer) dial(ctx context.Context, addr, proto string) (net.Conn, error) {
	var cfg *tls.Config
	required := false
	if d.TLS != nil {
		cfg, required = d.TLS.ClientConfig(), d.TLS.Required()
	}
	nd := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	if cfg == nil {
		if required {
			return nil, ErrNoCertificate
		}
		return nd.DialContext(ctx, "tcp", addr)
	}
	c, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	tc, err := clientHandshake(ctx, c, cfg, addr, proto)
	if err == nil {
		return tc, nil
	}
	if required {
		return nil, err
	}
	return nd.DialContext(ctx, "tcp", addr)
}

// clientHandshake runs a TLS handshake on c (closed on failure) for addr's host.
func clientHandshake(ctx context.Context, c net.Conn, cfg *tls.Config, addr, proto string) (*tls.Conn, error) {
	cfg = cfg.Clone()
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			c.Close()
			return nil, err
		}
		cfg.ServerName = host
	}
	cfg.NextProtos = []string{proto}
	hctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(hctx); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// DialContext opens a connection for internode HTTP (an http.Transport's DialContext).
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return d.dial(ctx, addr, wire.ALPNHTTP)
}

// DialRaft opens a Raft connection to addr: TLS (or plain, as for HTTP), then the
// challenge-response of raftconn.go and framed traffic inside.
func (d *Dialer) DialRaft(addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := d.dial(ctx, addr, wire.ALPNRaft)
	if err != nil {
		return nil, err
	}
	return d.Secret.raftClient(c, timeout)
}

// Transport is NewTransport dialling through d.
func (d *Dialer) Transport() *http.Transport {
	t := NewTransport()
	t.DialContext = d.DialContext
	return t
}

// NewEnrolTransport is the transport of a node that has no certificate and asks for one
// (enrolment): TLS without a client certificate and without verifying the server (the
// node does not have the CA yet: the answer is authenticated by the cluster secret, and
// seen is given the server's certificate to check against the CA the answer names), or
// plain if the TLS handshake fails (a cluster without internode TLS, whose answer is
// authenticated the same way). Keep-alive is off: the transport serves one request.
func NewEnrolTransport(seen func(*x509.Certificate)) *http.Transport {
	t := NewTransport()
	t.DisableKeepAlives = true
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		nd := &net.Dialer{Timeout: dialTimeout}
		c, err := nd.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		tc, err := clientHandshake(ctx, c, &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}, addr, wire.ALPNHTTP)
		if err != nil {
			return nd.DialContext(ctx, "tcp", addr)
		}
		if pcs := tc.ConnectionState().PeerCertificates; len(pcs) > 0 && seen != nil {
			seen(pcs[0])
		}
		return tc, nil
	}
	return t
}
