// Package nodetls is the cluster's certificate authority for internode mutual TLS: it
// makes the CA (ECDSA P-256, crypto/x509 only), node key pairs and certificate requests,
// signs a request into a node certificate (the node id in the subject, the node's
// advertised host in the SANs, client and server use), checks what a node is handed back
// at enrolment, and builds the TLS 1.3 configurations of the node address. It also issues
// NBD client certificates (client use only, naming the volumes they open) and builds the
// TLS configuration of an NBD listener that requires them (nbd.go). It keeps no
// state and does no I/O but the reading and writing of its PEM files; who holds the CA key
// and when a node enrols is package server's business (docs/design/internode-tls.md).
package nodetls

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/wire"
)

// Lifetimes and limits.
const (
	// CALifetime is how long a CA made at bootstrap is valid. It is not rotated: a cluster
	// that outlives it is given a new one by its operator (docs/operations.md).
	CALifetime = 20 * 365 * 24 * time.Hour
	// CertLifetime is how long a node certificate is valid; a node asks for a new one
	// when less than a third of it is left (NeedsRenewal).
	CertLifetime = 90 * 24 * time.Hour
	// MaxHosts bounds the names (IP addresses, DNS names) a certificate request may ask for.
	MaxHosts = 16
	// MaxEnrolRequest bounds the body of an enrolment request.
	MaxEnrolRequest = 16 << 10
	// backdate is how far before now a certificate becomes valid (clocks differ a little).
	backdate = time.Hour
)

// nodeOrg is the organization of every node certificate's subject.
const nodeOrg = "cairn node"

// CA is the cluster's certificate authority: its certificate, and its key where this
// process holds it (a voting manager).
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     crypto.Signer // nil: the certificate only
}

// NewCA makes a CA named name valid from an hour before now for CALifetime.
func NewCA(name string, now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, errors.E(errors.IO, err)
	}
	tmpl := &x509.Certificate{SerialNumber: randSerial(), Subject: pkix.Name{CommonName: name, Organization: []string{"cairn"}},
		NotBefore: now.Add(-backdate), NotAfter: now.Add(CALifetime),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, errors.E(errors.Invalid, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, errors.E(errors.Invalid, err)
	}
	return &CA{Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), key: key}, nil
}

// ParseCA reads a CA certificate (PEM) and, if keyPEM is not empty, its private key (PEM:
// PKCS #8, SEC 1 EC or PKCS #1 RSA); the key must match the certificate, which must be a
// CA allowed to sign certificates.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	const op errors.Op = "nodetls.ParseCA"
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, errors.E(op, errors.Invalid, fmt.Errorf("CA certificate: %w", err))
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, errors.E(op, errors.Invalid, "the certificate is not a CA that may sign certificates")
	}
	ca := &CA{Cert: cert, CertPEM: pemBlock("CERTIFICATE", cert.Raw)}
	if len(keyPEM) == 0 {
		return ca, nil
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, errors.E(op, errors.Invalid, fmt.Errorf("CA key: %w", err))
	}
	if !publicEqual(key.Public(), cert.PublicKey) {
		return nil, errors.E(op, errors.Invalid, "the CA key does not belong to the CA certificate")
	}
	ca.key = key
	return ca, nil
}

// HasKey says whether ca can sign.
func (ca *CA) HasKey() bool { return ca.key != nil }

// KeyPEM is the CA's private key (PKCS #8 PEM).
func (ca *CA) KeyPEM() ([]byte, error) {
	if ca.key == nil {
		return nil, errors.E(errors.NotExist, "this node does not hold the CA key")
	}
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, errors.E(errors.Invalid, err)
	}
	return pemBlock("PRIVATE KEY", der), nil
}

// Fingerprint is the hex SHA-256 of the CA certificate's DER.
func (ca *CA) Fingerprint() string { return Fingerprint(ca.Cert) }

// Fingerprint is the hex SHA-256 of c's DER.
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// Pool is a pool that trusts only ca.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// NewKey makes a node's key pair (ECDSA P-256).
func NewKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, errors.E(errors.IO, err)
	}
	return k, nil
}

// NewCSR makes a certificate request (DER) for node id with key, naming hosts (IP
// addresses or DNS names: the host of the node's advertised address).
func NewCSR(key crypto.Signer, id string, hosts []string) ([]byte, error) {
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: id, Organization: []string{nodeOrg}}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return nil, errors.E(errors.Invalid, err)
	}
	return der, nil
}

// ParseEnrolRequest decodes an enrolment request (JSON, wire.EnrolRequest) and checks its
// certificate request: well formed, signed by its own key (an ECDSA P-256 or Ed25519
// key: the holder of the key asked), for the node the request names, with at most
// MaxHosts names and no name of another kind (no e-mail address, no URI).
func ParseEnrolRequest(data []byte) (wire.EnrolRequest, *x509.CertificateRequest, error) {
	const op errors.Op = "nodetls.ParseEnrolRequest"
	var req wire.EnrolRequest
	if len(data) > MaxEnrolRequest {
		return req, nil, errors.E(op, errors.TooLarge, "enrolment request too large")
	}
	if err := json.Unmarshal(data, &req); err != nil {
		return req, nil, errors.E(op, errors.Invalid, fmt.Errorf("malformed enrolment request: %v", err))
	}
	csr, err := ParseCSR(req.CSR, req.Node)
	if err != nil {
		return req, nil, errors.E(op, err)
	}
	return req, csr, nil
}

// ParseCSR checks a certificate request (DER) for node id: see ParseEnrolRequest.
func ParseCSR(der []byte, id string) (*x509.CertificateRequest, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, errors.E(errors.Invalid, fmt.Errorf("malformed certificate request: %v", err))
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, errors.E(errors.Invalid, fmt.Errorf("the certificate request is not signed by its key: %v", err))
	}
	switch k := csr.PublicKey.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return nil, errors.E(errors.Invalid, "the certificate request's key is not on P-256")
		}
	default:
		return nil, errors.E(errors.Invalid, fmt.Sprintf("the certificate request's key is a %T, want ECDSA P-256", csr.PublicKey))
	}
	if csr.Subject.CommonName != id {
		return nil, errors.E(errors.Invalid, fmt.Sprintf("the certificate request is for %q, the request for node %q", csr.Subject.CommonName, id))
	}
	if n := len(csr.IPAddresses) + len(csr.DNSNames); n > MaxHosts {
		return nil, errors.E(errors.Invalid, fmt.Sprintf("the certificate request names %d hosts, at most %d", n, MaxHosts))
	}
	if len(csr.EmailAddresses) > 0 || len(csr.URIs) > 0 {
		return nil, errors.E(errors.Invalid, "the certificate request names e-mail addresses or URIs")
	}
	return csr, nil
}

// validID accepts a node id as a certificate may carry it: 1 to 128 printable ASCII
// characters.
func validID(id string) error {
	if id == "" || len(id) > 128 {
		return errors.E(errors.Invalid, "a node id of 1 to 128 characters is required")
	}
	for _, r := range id {
		if r <= ' ' || r > '~' {
			return errors.E(errors.Invalid, fmt.Sprintf("node id %q has a character a certificate cannot carry", id))
		}
	}
	return nil
}

// Sign issues the certificate csr (checked by ParseCSR) asks for, for node id, valid from
// an hour before now for lifetime (0: CertLifetime, never past the CA's own expiry), for
// both ends of a TLS connection. It returns the certificate as PEM.
func (ca *CA) Sign(csr *x509.CertificateRequest, id string, now time.Time, lifetime time.Duration) ([]byte, error) {
	const op errors.Op = "nodetls.Sign"
	if ca.key == nil {
		return nil, errors.E(op, errors.NotExist, "this node does not hold the CA key")
	}
	if lifetime <= 0 {
		lifetime = CertLifetime
	}
	notAfter := now.Add(lifetime)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{SerialNumber: randSerial(), Subject: pkix.Name{CommonName: id, Organization: []string{nodeOrg}},
		NotBefore: now.Add(-backdate), NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: csr.IPAddresses, DNSNames: csr.DNSNames, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, csr.PublicKey, ca.key)
	if err != nil {
		return nil, errors.E(op, errors.Invalid, err)
	}
	return pemBlock("CERTIFICATE", der), nil
}

// NodeID is the node a verified certificate names (its subject's common name), or an
// error if it is not a node certificate.
func NodeID(c *x509.Certificate) (string, error) {
	if len(c.Subject.Organization) != 1 || c.Subject.Organization[0] != nodeOrg || validID(c.Subject.CommonName) != nil {
		return "", errors.E(errors.Permission, "not a cairn node certificate")
	}
	return c.Subject.CommonName, nil
}

// Verify checks that cert chains to ca at now, for use by either end of a connection,
// and returns the node id it names.
func Verify(ca *CA, cert *x509.Certificate, now time.Time) (string, error) {
	_, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
	if err != nil {
		return "", errors.E(errors.Permission, fmt.Errorf("certificate not valid for the cluster CA: %v", err))
	}
	return NodeID(cert)
}

// CheckAnswer checks an enrolment answer for node id that asked with key: the
// certificate parses, chains to the answer's CA now, names id and holds key's public
// key. If trusted is not nil (a node that already has the CA), the answer's CA must be
// it. It returns the certificate with key, and the CA.
func CheckAnswer(ans wire.EnrolAnswer, key crypto.Signer, id string, trusted *CA, now time.Time) (*tls.Certificate, *CA, error) {
	const op errors.Op = "nodetls.CheckAnswer"
	ca, err := ParseCA([]byte(ans.CA), nil)
	if err != nil {
		return nil, nil, errors.E(op, err)
	}
	if trusted != nil && !bytes.Equal(trusted.Cert.Raw, ca.Cert.Raw) {
		return nil, nil, errors.E(op, errors.Permission, "the answer names another CA than the cluster's")
	}
	cert, err := parseCert([]byte(ans.Cert))
	if err != nil {
		return nil, nil, errors.E(op, errors.Invalid, err)
	}
	got, err := Verify(ca, cert, now)
	if err != nil {
		return nil, nil, errors.E(op, err)
	}
	if got != id {
		return nil, nil, errors.E(op, errors.Permission, fmt.Sprintf("the certificate names node %q, not %q", got, id))
	}
	if !publicEqual(key.Public(), cert.PublicKey) {
		return nil, nil, errors.E(op, errors.Permission, "the certificate is not for this node's key")
	}
	return &tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}, ca, nil
}

// NeedsRenewal says whether a node should ask for a new certificate: it expires within
// a third of its lifetime, or does not name every one of hosts.
func NeedsRenewal(c *x509.Certificate, hosts []string, now time.Time) bool {
	life := c.NotAfter.Sub(c.NotBefore)
	if now.After(c.NotAfter.Add(-life / 3)) {
		return true
	}
	for _, h := range hosts {
		if h != "" && c.VerifyHostname(h) != nil {
			return true
		}
	}
	return false
}

// ServerConfig is the TLS configuration of the node address: TLS 1.3 only, cert (called
// at each handshake: renewals apply to new connections), a client certificate verified
// against the CA pool if one is given (a connection without one reaches only enrolment:
// package server and rpc.Mux see to it), Raft or HTTP/1.1 by ALPN.
//
// A client certificate of the CA that is not a node certificate (an NBD client's) is
// refused at the handshake.
func ServerConfig(cert func() *tls.Certificate, pool *x509.CertPool) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert(), nil },
		NextProtos:     []string{wire.ALPNRaft, wire.ALPNHTTP},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return nil // enrolment only: package server sees to it
			}
			_, err := NodeID(cs.PeerCertificates[0])
			return err
		}}
}

// ClientConfig is the TLS configuration of a node dialling another: TLS 1.3, the server
// verified against pool for the host dialled (set ServerName per connection), cert
// presented.
func ClientConfig(cert func() *tls.Certificate, pool *x509.CertPool) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert(), nil }}
}

// Files are a node's internode TLS files in its data directory (DATA/internode).
type Files struct{ Dir string }

// Paths of the files.
func (f Files) CACert() string   { return filepath.Join(f.Dir, "ca.pem") }
func (f Files) CAKey() string    { return filepath.Join(f.Dir, "ca.key") }
func (f Files) Cert() string     { return filepath.Join(f.Dir, "node.pem") }
func (f Files) Key() string      { return filepath.Join(f.Dir, "node.key") }
func (f Files) Required() string { return filepath.Join(f.Dir, "required") }

// LoadCA reads the CA certificate and, if present, its key; NotExist if there is no CA
// certificate.
func (f Files) LoadCA() (*CA, error) {
	cp, err := os.ReadFile(f.CACert())
	if os.IsNotExist(err) {
		return nil, errors.E(errors.NotExist, "no internode CA")
	} else if err != nil {
		return nil, errors.E(errors.IO, err)
	}
	kp, err := os.ReadFile(f.CAKey())
	if err != nil && !os.IsNotExist(err) {
		return nil, errors.E(errors.IO, err)
	}
	return ParseCA(cp, kp)
}

// SaveCA writes the CA certificate and, if ca has it, its key (0600).
func (f Files) SaveCA(ca *CA) error {
	if err := os.MkdirAll(f.Dir, 0o700); err != nil {
		return errors.E(errors.IO, err)
	}
	if ca.key != nil {
		kp, err := ca.KeyPEM()
		if err != nil {
			return err
		}
		if err := writeAtomic(f.CAKey(), kp, 0o600); err != nil {
			return err
		}
	}
	return writeAtomic(f.CACert(), ca.CertPEM, 0o644)
}

// RemoveCAKey deletes the CA key (a manager that stops being a voter).
func (f Files) RemoveCAKey() error {
	if err := os.Remove(f.CAKey()); err != nil && !os.IsNotExist(err) {
		return errors.E(errors.IO, err)
	}
	return nil
}

// LoadCert reads the node's certificate and key; NotExist if there is none.
func (f Files) LoadCert() (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(f.Cert(), f.Key())
	if err != nil {
		if _, serr := os.Stat(f.Cert()); os.IsNotExist(serr) {
			return nil, errors.E(errors.NotExist, "no node certificate")
		}
		return nil, errors.E(errors.Invalid, fmt.Errorf("node certificate %s: %v", f.Cert(), err))
	}
	return &c, nil
}

// SaveCert writes the node's certificate and key (0600), the key first.
func (f Files) SaveCert(c *tls.Certificate) error {
	if err := os.MkdirAll(f.Dir, 0o700); err != nil {
		return errors.E(errors.IO, err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		return errors.E(errors.Invalid, err)
	}
	if err := writeAtomic(f.Key(), pemBlock("PRIVATE KEY", der), 0o600); err != nil {
		return err
	}
	var certs []byte
	for _, d := range c.Certificate {
		certs = append(certs, pemBlock("CERTIFICATE", d)...)
	}
	return writeAtomic(f.Cert(), certs, 0o644)
}

// RemoveCert deletes the node's certificate and key (a join that failed).
func (f Files) RemoveCert() {
	os.Remove(f.Cert())
	os.Remove(f.Key())
}

// IsRequired says whether this node has seen its cluster refuse plain connections: once
// it has, it refuses them too from its start, before its map is up to date.
func (f Files) IsRequired() bool {
	_, err := os.Stat(f.Required())
	return err == nil
}

// SetRequired records that the cluster refuses plain connections.
func (f Files) SetRequired() error {
	if err := os.MkdirAll(f.Dir, 0o700); err != nil {
		return errors.E(errors.IO, err)
	}
	return writeAtomic(f.Required(), []byte("internode TLS is required: plain connections are refused\n"), 0o644)
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return errors.E(errors.IO, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return errors.E(errors.IO, err)
	}
	return nil
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

// parseCert reads the first certificate of a PEM text.
func parseCert(data []byte) (*x509.Certificate, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, fmt.Errorf("no PEM certificate")
		}
		if b.Type == "CERTIFICATE" {
			return x509.ParseCertificate(b.Bytes)
		}
	}
}

// parseKey reads a PEM private key.
func parseKey(data []byte) (crypto.Signer, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, fmt.Errorf("no PEM private key")
		}
		if !strings.HasSuffix(b.Type, "PRIVATE KEY") {
			continue
		}
		var k any
		var err error
		switch b.Type {
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(b.Bytes)
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(b.Bytes)
		default:
			k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
		}
		if err != nil {
			return nil, err
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("a %T cannot sign", k)
		}
		return s, nil
	}
}

func publicEqual(a, b crypto.PublicKey) bool {
	e, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && e.Equal(b)
}

func randSerial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n.Add(n, big.NewInt(1))
}
