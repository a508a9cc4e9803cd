package nodetls

import (
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
)

// NBD client certificates: issued by the cluster CA to the hypervisors and tools that
// open block volumes over NBD with TLS. Each names its holder (the subject's common name,
// organization nbdClientOrg) and the volumes it may open (URI names
// "cairn-nbd:volume:PATTERN"), and is valid for client authentication only: it is no
// node certificate (NodeID refuses it, so does the node address) and cannot serve TLS.
const (
	nbdClientOrg = "cairn nbd client"
	nbdURIScheme = "cairn-nbd"
	nbdURIPrefix = "volume:"
	// NBDClientLifetime is how long an NBD client certificate is valid unless asked
	// otherwise; it is not renewed by cairn (issue a new one).
	NBDClientLifetime = 365 * 24 * time.Hour
	// MaxNBDVolumes bounds the volume patterns one certificate names.
	MaxNBDVolumes = 32
)

// NBDClient is what a verified NBD client certificate says.
type NBDClient struct {
	Name string
	// Volumes are the patterns of the volumes it opens: a volume's name (the volume and
	// its snapshots' exports NAME@SNAP), a prefix ending in "*" (every volume whose name
	// starts with it, and their snapshots), or "*" (every volume).
	Volumes []string
}

// Allows says whether the client may see and open the NBD export named export (a volume,
// or a snapshot VOLUME@SNAP).
func (c NBDClient) Allows(export string) bool {
	vol, _, _ := strings.Cut(export, "@")
	for _, p := range c.Volumes {
		if pre, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(vol, pre) {
				return true
			}
		} else if p == vol {
			return true
		}
	}
	return false
}

// ValidNBDVolumes checks a list of volume patterns (see NBDClient.Volumes): 1 to
// MaxNBDVolumes of them, each made of letters, digits, '_', '.' and '-' as volume names
// are, with at most a final '*'.
func ValidNBDVolumes(ps []string) error {
	if len(ps) == 0 || len(ps) > MaxNBDVolumes {
		return errors.E(errors.Invalid, fmt.Sprintf("an NBD client certificate names 1 to %d volumes or prefixes, not %d", MaxNBDVolumes, len(ps)))
	}
	for _, p := range ps {
		body := strings.TrimSuffix(p, "*")
		if p == "" || len(p) > 64 || (body == "" && p != "*") {
			return errors.E(errors.Invalid, fmt.Sprintf("volume pattern %q: a volume name, a prefix ending in *, or *", p))
		}
		for _, r := range body {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
				return errors.E(errors.Invalid, fmt.Sprintf("volume pattern %q: a volume name, a prefix ending in *, or *", p))
			}
		}
	}
	return nil
}

// NewNBDClientCSR makes a certificate request (DER) for NBD client name with key: the
// request says only who asks; the volumes are the issuer's decision (SignNBDClient).
func NewNBDClientCSR(key crypto.Signer, name string) ([]byte, error) {
	if err := validID(name); err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: name, Organization: []string{nbdClientOrg}}}, key)
	if err != nil {
		return nil, errors.E(errors.Invalid, err)
	}
	return der, nil
}

// SignNBDClient issues an NBD client certificate for name, with the key of csr (checked
// as ParseCSR checks a node's: well formed, self-signed, P-256; its names are ignored),
// opening volumes (ValidNBDVolumes), valid from an hour before now for lifetime (0:
// NBDClientLifetime, never past the CA's expiry). It returns the certificate as PEM.
func (ca *CA) SignNBDClient(csrDER []byte, name string, volumes []string, now time.Time, lifetime time.Duration) ([]byte, error) {
	const op errors.Op = "nodetls.SignNBDClient"
	if ca.key == nil {
		return nil, errors.E(op, errors.NotExist, "this node does not hold the CA key")
	}
	if err := ValidNBDVolumes(volumes); err != nil {
		return nil, errors.E(op, err)
	}
	csr, err := ParseCSR(csrDER, name)
	if err != nil {
		return nil, errors.E(op, err)
	}
	if lifetime <= 0 {
		lifetime = NBDClientLifetime
	}
	notAfter := now.Add(lifetime)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{SerialNumber: randSerial(), Subject: pkix.Name{CommonName: name, Organization: []string{nbdClientOrg}},
		NotBefore: now.Add(-backdate), NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, BasicConstraintsValid: true}
	for _, v := range volumes {
		tmpl.URIs = append(tmpl.URIs, &url.URL{Scheme: nbdURIScheme, Opaque: nbdURIPrefix + v})
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, csr.PublicKey, ca.key)
	if err != nil {
		return nil, errors.E(op, errors.Invalid, err)
	}
	return pemBlock("CERTIFICATE", der), nil
}

// NBDClientOf reads an NBD client certificate (verified by the caller): its holder and
// volumes, or an error (Permission) if it is not one.
func NBDClientOf(c *x509.Certificate) (NBDClient, error) {
	if len(c.Subject.Organization) != 1 || c.Subject.Organization[0] != nbdClientOrg || validID(c.Subject.CommonName) != nil {
		return NBDClient{}, errors.E(errors.Permission, "not a cairn NBD client certificate")
	}
	cl := NBDClient{Name: c.Subject.CommonName}
	for _, u := range c.URIs {
		if v, ok := strings.CutPrefix(u.Opaque, nbdURIPrefix); ok && u.Scheme == nbdURIScheme {
			cl.Volumes = append(cl.Volumes, v)
		}
	}
	if err := ValidNBDVolumes(cl.Volumes); err != nil {
		return NBDClient{}, errors.E(errors.Permission, fmt.Errorf("NBD client certificate of %q: %v", cl.Name, err))
	}
	return cl, nil
}

// NBDServerConfig is the TLS configuration of an NBD listener that authenticates its
// clients by the cluster CA: TLS 1.3, cert presented (called at each handshake), a client
// certificate required, verified against pool and checked to be an NBD client
// certificate (a node certificate is refused), no session tickets (every connection
// shows its certificate). check, if set, may refuse a verified client certificate too (a
// revoked one): its error fails the handshake.
func NBDServerConfig(cert func() (*tls.Certificate, error), pool *x509.CertPool, check func(*x509.Certificate) error) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool,
		SessionTicketsDisabled: true,
		GetCertificate:         func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert() },
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.E(errors.Permission, "an NBD client certificate is required")
			}
			if _, err := NBDClientOf(cs.PeerCertificates[0]); err != nil {
				return err
			}
			if check != nil {
				return check(cs.PeerCertificates[0])
			}
			return nil
		}}
}
