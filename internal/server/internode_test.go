package server

import (
	"crypto/tls"
	"crypto/x509"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/nodetls"
	"github.com/cairnfs/cairn/internal/wire"
)

// nodeCert issues a certificate of ca for node id.
func nodeCert(t *testing.T, ca *nodetls.CA, id string) *x509.Certificate {
	t.Helper()
	key, _ := nodetls.NewKey()
	der, _ := nodetls.NewCSR(key, id, []string{"127.0.0.1"})
	csr, err := nodetls.ParseCSR(der, id)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Sign(csr, id, time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := nodetls.CheckAnswer(wire.EnrolAnswer{Cert: string(p), CA: string(ca.CertPEM)}, key, id, ca, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf
}

// The internode listener's HTTP rules: what a request may reach by how it came (plain or
// TLS, with or without a verified certificate) and whether TLS is required, and that a
// verified certificate must name the node that signed.
func TestInternodePeerRules(t *testing.T) {
	ca, err := nodetls.NewCA("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	leaf := nodeCert(t, ca, "node2")
	verified := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf, ca.Cert}}}
	bare := &tls.ConnectionState{}
	cases := []struct {
		name     string
		state    *tls.ConnectionState
		path     string
		required bool
		signer   string
		refused  bool
	}{
		{"plain, not required", nil, wire.PathMap, false, "node2", false},
		{"plain, required", nil, wire.PathMap, true, "node2", true},
		{"plain enrolment, required", nil, wire.PathEnrol, true, "node2", true},
		{"no certificate: enrolment", bare, wire.PathEnrol, true, "node9", false},
		{"no certificate: the map", bare, wire.PathMap, true, "node9", true},
		{"no certificate: the CA key", bare, wire.PathCAKey, false, "node9", true},
		{"no certificate: an object", bare, wire.PathObject, false, "node9", true},
		{"verified: the map", verified, wire.PathMap, true, "node2", false},
		{"verified, signed as another node", verified, wire.PathMap, true, "node3", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			it := &internodeTLS{}
			it.required.Store(c.required)
			r := httptest.NewRequest("GET", "http://node"+c.path, nil)
			r.TLS = c.state
			err := it.checkPeer(r)
			if err == nil {
				err = checkSigner(r, c.signer)
			}
			if refused := err != nil; refused != c.refused {
				t.Fatalf("refused %v (%v), want %v", refused, err, c.refused)
			}
			if err != nil && !errors.Is(errors.Permission, err) {
				t.Fatalf("refusal of kind %v", err)
			}
		})
	}
}
