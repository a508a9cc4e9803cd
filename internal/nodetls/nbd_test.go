package nodetls

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
)

// nbdClient issues an NBD client certificate for name opening volumes.
func nbdClient(t testing.TB, ca *CA, name string, volumes ...string) *tls.Certificate {
	t.Helper()
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := NewNBDClientCSR(key, name)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.SignNBDClient(csr, name, volumes, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(p)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{c.Raw}, PrivateKey: key, Leaf: c}
}

func TestNBDClientCertificate(t *testing.T) {
	ca := newCA(t)
	c := nbdClient(t, ca, "hv1", "vm1", "db-*")
	if _, err := c.Leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("not a client certificate of the CA: %v", err)
	}
	if _, err := c.Leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("an NBD client certificate is valid for a server")
	}
	if _, err := NodeID(c.Leaf); err == nil {
		t.Error("an NBD client certificate passes for a node certificate")
	}
	cl, err := NBDClientOf(c.Leaf)
	if err != nil || cl.Name != "hv1" || strings.Join(cl.Volumes, ",") != "vm1,db-*" {
		t.Fatalf("NBDClientOf: %+v %v", cl, err)
	}
	for export, want := range map[string]bool{"vm1": true, "vm1@snap": true, "vm10": false, "vm": false, "db-": true, "db-x@s": true, "db": false, "other": false, "": false} {
		if cl.Allows(export) != want {
			t.Errorf("Allows(%q) = %v", export, !want)
		}
	}
	if all := (NBDClient{Volumes: []string{"*"}}); !all.Allows("anything@s") {
		t.Error(`"*" does not open every volume`)
	}
	node, _ := enrol(t, ca, "node1", "127.0.0.1")
	if _, err := NBDClientOf(node.Leaf); err == nil {
		t.Error("a node certificate passes for an NBD client certificate")
	}
}

func TestNBDVolumePatterns(t *testing.T) {
	for _, ok := range [][]string{{"vm1"}, {"*"}, {"db-*", "a.b_c"}} {
		if err := ValidNBDVolumes(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range [][]string{nil, {""}, {"a*b"}, {"**"}, {"vm/1"}, {"vm 1"}, {"vm@snap"}, make([]string, MaxNBDVolumes+1)} {
		if err := ValidNBDVolumes(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	ca := newCA(t)
	key, _ := NewKey()
	csr, _ := NewNBDClientCSR(key, "hv1")
	if _, err := ca.SignNBDClient(csr, "hv2", []string{"vm1"}, now, 0); err == nil {
		t.Error("signed a request for another name")
	}
	if _, err := ca.SignNBDClient(csr, "hv1", []string{"a*b"}, now, 0); err == nil {
		t.Error("signed a bad volume pattern")
	}
	certOnly, _ := ParseCA(ca.CertPEM, nil)
	if _, err := certOnly.SignNBDClient(csr, "hv1", []string{"vm1"}, now, 0); err == nil {
		t.Error("signed without the CA key")
	}
}
