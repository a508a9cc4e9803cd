package server

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/nodetls"
)

// A listener that is not on loopback needs TLS or an allow-list; with TLS and no list,
// every address may connect (the certificate decides).
func TestListenNBDRules(t *testing.T) {
	// 192.0.2.1 is a documentation address no host has: past the check, binding fails.
	_, err := listenNBD("192.0.2.1:10809", nil, false)
	if !errors.Is(errors.Invalid, err) || !strings.Contains(err.Error(), "--nbd-tls require") {
		t.Errorf("plain, no allow-list: %v", err)
	}
	for _, c := range []struct {
		allow []netip.Prefix
		tls   bool
	}{{nil, true}, {[]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, false}} {
		if _, err := listenNBD("192.0.2.1:10809", c.allow, c.tls); errors.Is(errors.Invalid, err) {
			t.Errorf("%+v refused: %v", c, err)
		}
	}
	if allowNBD(nil, true) != nil {
		t.Error("TLS without an allow-list filters addresses")
	}
	allow := allowNBD([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, true)
	if allow(&net.TCPAddr{IP: net.ParseIP("192.0.2.9"), Port: 1}) || !allow(&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 1}) {
		t.Error("TLS with an allow-list: the list is not applied")
	}
	if err := (&Config{Roles: []string{"gateway"}, Replicas: 1, Partitions: 1, Voters: 1, NBDTLS: true, NBDListen: "127.0.0.1:0", Internode: InternodeTLS{Off: true}}).validate(); err == nil {
		t.Error("--nbd-tls require with --internode-tls off accepted")
	}
}

// The export rule under TLS: an NBD client certificate opens what it names; a node
// certificate, or a plain connection on a listener that requires TLS, opens nothing.
func TestAuthorizeNBD(t *testing.T) {
	ca, err := nodetls.NewCA("c", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := nodetls.NewKey()
	csr, _ := nodetls.NewNBDClientCSR(key, "hv1")
	p, err := ca.SignNBDClient(csr, "hv1", []string{"vm1", "db-*"}, time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(p)
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	cs := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
	auth := authorizeNBD(true)
	for export, want := range map[string]bool{"vm1": true, "vm1@s": true, "db-a": true, "vm2": false} {
		if auth(cs, export) != want {
			t.Errorf("%s: %v", export, !want)
		}
	}
	if auth(nil, "vm1") {
		t.Error("a plain connection opens an export of a TLS-required listener")
	}
	if !authorizeNBD(false)(nil, "vm1") {
		t.Error("a plain listener refuses a plain connection")
	}
}
