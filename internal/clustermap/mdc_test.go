package clustermap

import (
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/testutil/testcert"
)

func testCAPEM(t testing.TB) string {
	t.Helper()
	ca, err := testcert.NewCA("link test CA")
	if err != nil {
		t.Fatal(err)
	}
	return string(ca.CertPEM)
}

// TestValidateLink: a link's name, endpoint, sealed secret and CA (a private CA only
// for an https endpoint, and only PEM certificates that parse).
func TestValidateLink(t *testing.T) {
	ca := testCAPEM(t)
	ok := Link{Name: "dc2", Endpoint: "https://s3.dc2.example:9000", Secret: "v1.sealed", Send: true}
	for _, tc := range []struct {
		name  string
		edit  func(l *Link)
		valid bool
	}{
		{"plain", func(*Link) {}, true},
		{"private CA", func(l *Link) { l.CA = ca }, true},
		{"two CAs", func(l *Link) { l.CA = ca + ca }, true},
		{"CA for http", func(l *Link) { l.Endpoint, l.CA = "http://s3.dc2.example:9000", ca }, false},
		{"CA without a certificate", func(l *Link) { l.CA = "not pem" }, false},
		{"CA that does not parse", func(l *Link) { l.CA = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n" }, false},
		{"bad name", func(l *Link) { l.Name = "a b" }, false},
		{"bad endpoint", func(l *Link) { l.Endpoint = "ftp://x" }, false},
		{"unsealed secret", func(l *Link) { l.Secret = "plain" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := ok
			tc.edit(&l)
			err := validateLink(&l)
			if tc.valid != (err == nil) {
				t.Fatalf("validateLink = %v, want valid %v", err, tc.valid)
			}
			if err != nil && !errors.Is(errors.Invalid, err) {
				t.Fatalf("%v: not Invalid", err)
			}
		})
	}
}

// FuzzLinkCAPool: any text either gives a pool or an Invalid error, never a panic.
func FuzzLinkCAPool(f *testing.F) {
	ca := testCAPEM(f)
	for _, s := range []string{ca, ca + ca, "not pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
		"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pool, err := LinkCAPool(s)
		if (pool == nil) == (err == nil) {
			t.Fatalf("pool %v, err %v", pool, err)
		}
		if err != nil && !errors.Is(errors.Invalid, err) {
			t.Fatalf("%v: not Invalid", err)
		}
	})
}
