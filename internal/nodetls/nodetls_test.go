package nodetls

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/wire"
)

var now = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func newCA(t testing.TB) *CA {
	t.Helper()
	ca, err := NewCA("test CA", now)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// enrol runs the signing side and the checking side of one enrolment for id.
func enrol(t testing.TB, ca *CA, id string, hosts ...string) (*tls.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	der, err := NewCSR(key, id, hosts)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(wire.EnrolRequest{Node: id, CSR: der})
	req, csr, err := ParseEnrolRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	pemCert, err := ca.Sign(csr, req.Node, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := CheckAnswer(wire.EnrolAnswer{Cert: string(pemCert), CA: string(ca.CertPEM)}, key, id, ca, now)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func TestEnrolRoundTrip(t *testing.T) {
	ca := newCA(t)
	c, _ := enrol(t, ca, "node1", "127.0.0.1", "n1.example")
	leaf := c.Leaf
	if id, err := Verify(ca, leaf, now); err != nil || id != "node1" {
		t.Fatalf("Verify: %q %v", id, err)
	}
	if err := leaf.VerifyHostname("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if err := leaf.VerifyHostname("n1.example"); err != nil {
		t.Fatal(err)
	}
	if got := leaf.NotAfter.Sub(now); got != CertLifetime {
		t.Fatalf("lifetime %v, want %v", got, CertLifetime)
	}
	if NeedsRenewal(leaf, []string{"127.0.0.1"}, now) {
		t.Fatal("a new certificate needs renewal")
	}
	if !NeedsRenewal(leaf, []string{"127.0.0.1"}, now.Add(CertLifetime*2/3+time.Hour)) {
		t.Fatal("a certificate with less than a third of its life left does not need renewal")
	}
	if !NeedsRenewal(leaf, []string{"10.0.0.9"}, now) {
		t.Fatal("a certificate that does not name the node's host does not need renewal")
	}
	// Another CA's certificate does not verify.
	other := newCA(t)
	if _, err := Verify(other, leaf, now); !errors.Is(errors.Permission, err) {
		t.Fatalf("verified against another CA: %v", err)
	}
	if _, err := Verify(ca, leaf, now.Add(CertLifetime+2*time.Hour)); err == nil {
		t.Fatal("an expired certificate verified")
	}
}

func TestParseCSRRefuses(t *testing.T) {
	key, _ := NewKey()
	good, _ := NewCSR(key, "node1", []string{"127.0.0.1"})
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	ed, _ := NewCSR(edKey, "node1", nil)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	big384, _ := NewCSR(p384, "node1", nil)
	many := make([]string, MaxHosts+1)
	for i := range many {
		many[i] = net.IPv4(10, 0, 0, byte(i)).String()
	}
	tooMany, _ := NewCSR(key, "node1", many)
	withURI, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "node1"},
		EmailAddresses: []string{"a@example.com"}}, key)
	tampered := append([]byte(nil), good...)
	tampered[len(tampered)-5] ^= 0xff
	cases := []struct {
		name, id string
		der      []byte
		want     string
	}{
		{"good", "node1", good, ""},
		{"other node", "node2", good, "for \"node1\""},
		{"empty id", "", good, "node id"},
		{"id with a space", "node 1", good, "character"},
		{"not DER", "node1", []byte("garbage"), "malformed"},
		{"bad signature", "node1", tampered, ""},
		{"ed25519", "node1", ed, "want ECDSA P-256"},
		{"P-384", "node1", big384, "P-256"},
		{"too many hosts", "node1", tooMany, "at most"},
		{"e-mail", "node1", withURI, "e-mail"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseCSR(c.der, c.id)
			switch {
			case c.name == "good":
				if err != nil {
					t.Fatal(err)
				}
			case c.name == "bad signature":
				if err == nil {
					t.Fatal("accepted a changed request")
				}
			case err == nil || !strings.Contains(err.Error(), c.want):
				t.Fatalf("err %v, want one saying %q", err, c.want)
			}
		})
	}
}

func TestCheckAnswerRefuses(t *testing.T) {
	ca := newCA(t)
	other := newCA(t)
	key, _ := NewKey()
	otherKey, _ := NewKey()
	csr := func(k *ecdsa.PrivateKey, id string) *x509.CertificateRequest {
		der, err := NewCSR(k, id, []string{"127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		c, err := ParseCSR(der, id)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	sign := func(ca *CA, k *ecdsa.PrivateKey, id string) string {
		p, err := ca.Sign(csr(k, id), id, now, 0)
		if err != nil {
			t.Fatal(err)
		}
		return string(p)
	}
	cases := []struct {
		name    string
		ans     wire.EnrolAnswer
		trusted *CA
		want    string
	}{
		{"good", wire.EnrolAnswer{Cert: sign(ca, key, "node1"), CA: string(ca.CertPEM)}, nil, ""},
		{"good, CA known", wire.EnrolAnswer{Cert: sign(ca, key, "node1"), CA: string(ca.CertPEM)}, ca, ""},
		{"substituted CA", wire.EnrolAnswer{Cert: sign(other, key, "node1"), CA: string(other.CertPEM)}, ca, "another CA"},
		{"cert of another CA", wire.EnrolAnswer{Cert: sign(other, key, "node1"), CA: string(ca.CertPEM)}, nil, "not valid"},
		{"another node", wire.EnrolAnswer{Cert: sign(ca, key, "node2"), CA: string(ca.CertPEM)}, nil, "names node"},
		{"another key", wire.EnrolAnswer{Cert: sign(ca, otherKey, "node1"), CA: string(ca.CertPEM)}, nil, "key"},
		{"no CA", wire.EnrolAnswer{Cert: sign(ca, key, "node1")}, nil, "CA certificate"},
		{"a leaf as CA", wire.EnrolAnswer{Cert: sign(ca, key, "node1"), CA: sign(ca, key, "node1")}, nil, "not a CA"},
		{"no cert", wire.EnrolAnswer{CA: string(ca.CertPEM)}, nil, "no PEM"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := CheckAnswer(c.ans, key, "node1", c.trusted, now)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one saying %q", err, c.want)
			}
		})
	}
}

func TestCAFilesAndKey(t *testing.T) {
	ca := newCA(t)
	f := Files{Dir: filepath.Join(t.TempDir(), "internode")}
	if _, err := f.LoadCA(); !errors.Is(errors.NotExist, err) {
		t.Fatalf("LoadCA of nothing: %v", err)
	}
	if err := f.SaveCA(ca); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(f.CAKey()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA key file: %v %v", fi, err)
	}
	got, err := f.LoadCA()
	if err != nil || !got.HasKey() || got.Fingerprint() != ca.Fingerprint() {
		t.Fatalf("LoadCA: %v", err)
	}
	// The key of another CA does not load with this certificate.
	other := newCA(t)
	okp, _ := other.KeyPEM()
	if _, err := ParseCA(ca.CertPEM, okp); err == nil || !strings.Contains(err.Error(), "does not belong") {
		t.Fatalf("a foreign key: %v", err)
	}
	if err := f.RemoveCAKey(); err != nil {
		t.Fatal(err)
	}
	certOnly, err := f.LoadCA()
	if err != nil || certOnly.HasKey() {
		t.Fatalf("after RemoveCAKey: %v", err)
	}
	if _, err := certOnly.Sign(nil, "x", now, 0); !errors.Is(errors.NotExist, err) {
		t.Fatalf("Sign without the key: %v", err)
	}
	// The node's pair.
	c, _ := enrol(t, ca, "node1", "127.0.0.1")
	if _, err := f.LoadCert(); !errors.Is(errors.NotExist, err) {
		t.Fatalf("LoadCert of nothing: %v", err)
	}
	if err := f.SaveCert(c); err != nil {
		t.Fatal(err)
	}
	back, err := f.LoadCert()
	if err != nil || back.Leaf == nil || Fingerprint(back.Leaf) != Fingerprint(c.Leaf) {
		t.Fatalf("LoadCert: %v", err)
	}
	if f.IsRequired() {
		t.Fatal("required before SetRequired")
	}
	if err := f.SetRequired(); err != nil || !f.IsRequired() {
		t.Fatalf("SetRequired: %v", err)
	}
}

// The TLS configurations: a handshake between two nodes of one CA succeeds with each
// side seeing the other's node id; a client of another CA is refused at the handshake;
// a client without a certificate gets through the handshake (enrolment) unverified.
func TestHandshake(t *testing.T) {
	ca := newCA(t)
	srv, _ := enrol(t, ca, "node1", "127.0.0.1")
	cli, _ := enrol(t, ca, "node2", "127.0.0.1")
	other := newCA(t)
	stranger, _ := enrol(t, other, "node3", "127.0.0.1")
	cases := []struct {
		name     string
		cert     *tls.Certificate
		wantErr  bool
		verified bool
	}{
		{"same CA", cli, false, true},
		{"another CA", stranger, true, false},
		{"no certificate", nil, false, false},
		// An NBD client's certificate of the cluster CA is no node's: refused.
		{"NBD client certificate", nbdClient(t, ca, "hv1", "*"), true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			scfg := ServerConfig(func() *tls.Certificate { return srv }, ca.Pool())
			scfg.Time = func() time.Time { return now }
			ccfg := ClientConfig(func() *tls.Certificate {
				if c.cert == nil {
					return &tls.Certificate{}
				}
				return c.cert
			}, ca.Pool())
			ccfg.ServerName, ccfg.Time = "127.0.0.1", func() time.Time { return now }
			s := tls.Server(a, scfg)
			errc := make(chan error, 1)
			go func() { errc <- tls.Client(b, ccfg).Handshake(); b.Close() }()
			err := s.Handshake()
			cerr := <-errc
			if c.wantErr {
				if err == nil {
					t.Fatalf("server accepted the handshake (client: %v)", cerr)
				}
				return
			}
			if err != nil || cerr != nil {
				t.Fatalf("handshake: server %v, client %v", err, cerr)
			}
			st := s.ConnectionState()
			if got := len(st.VerifiedChains) > 0; got != c.verified {
				t.Fatalf("verified %v, want %v", got, c.verified)
			}
			if c.verified {
				if id, err := NodeID(st.PeerCertificates[0]); err != nil || id != "node2" {
					t.Fatalf("peer %q %v", id, err)
				}
			}
		})
	}
}

// FuzzParseEnrolRequest: no input makes the decoder panic, and what it accepts is a
// request whose CSR names the node and passes ParseCSR again.
func FuzzParseEnrolRequest(f *testing.F) {
	key, _ := NewKey()
	for _, id := range []string{"node1", "a-very-long-node-id-0123456789"} {
		der, _ := NewCSR(key, id, []string{"127.0.0.1", "localhost"})
		body, _ := json.Marshal(wire.EnrolRequest{Node: id, CSR: der})
		f.Add(body)
		body, _ = json.Marshal(wire.EnrolRequest{Node: "other", CSR: der, Forwarded: true})
		f.Add(body)
	}
	f.Add([]byte(`{"node":"n","csr":"AAAA"}`))
	f.Add([]byte(`{`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, csr, err := ParseEnrolRequest(data)
		if err != nil {
			return
		}
		if csr.Subject.CommonName != req.Node {
			t.Fatalf("accepted a request for %q with a CSR for %q", req.Node, csr.Subject.CommonName)
		}
		if _, err := ParseCSR(req.CSR, req.Node); err != nil {
			t.Fatalf("accepted, then refused: %v", err)
		}
	})
}
