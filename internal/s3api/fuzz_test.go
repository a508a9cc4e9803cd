package s3api

import (
	"encoding/xml"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
)

// FuzzRequestXML feeds arbitrary bytes to the decoders of the XML request bodies
// (CompleteMultipartUpload, DeleteObjects, CreateBucketConfiguration, Object Lock's
// documents, version ids): no panic, and the
// limits the handlers apply hold for whatever decodes.
func FuzzRequestXML(f *testing.F) {
	f.Add([]byte(`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"abc"</ETag><ChecksumCRC32>AAAAAA==</ChecksumCRC32></Part></CompleteMultipartUpload>`))
	f.Add([]byte(`<Delete><Quiet>true</Quiet><Object><Key>a/b</Key></Object><Object><Key>c</Key><VersionId>null</VersionId></Object></Delete>`))
	f.Add([]byte(`<CreateBucketConfiguration><LocationConstraint>eu-west-1</LocationConstraint></CreateBucketConfiguration>`))
	f.Add([]byte(`<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><Delete><Object><Key>&a;</Key></Object></Delete>`))
	f.Add([]byte(`<Delete><Object><Key>` + "\x00" + `</Key></Object>`))
	f.Add([]byte(`<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled><Rule><DefaultRetention><Mode>GOVERNANCE</Mode><Days>1</Days></DefaultRetention></Rule></ObjectLockConfiguration>`))
	f.Add([]byte(`<Retention><Mode>COMPLIANCE</Mode><RetainUntilDate>2030-01-01T00:00:00Z</RetainUntilDate></Retention>`))
	f.Add([]byte(`<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>`))
	f.Add([]byte(`0000000000000001`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var lc lockConfig
		_ = xml.Unmarshal(b, &lc)
		var rd retentionDoc
		if xml.Unmarshal(b, &rd) == nil {
			h := &Handler{}
			_, _ = h.parseRetention(rd.Mode, rd.RetainUntilDate)
		}
		// A version id cairn accepts is one it could have made.
		if ref, err := parseVersionID(string(b)); err == nil && ref.set && !ref.null {
			if got := versionIDOf(&object.Object{HLC: ref.hlc, Versioned: true}); got != strings.ToLower(string(b)) {
				t.Fatalf("version id %q parsed to %d, which prints as %q", b, ref.hlc, got)
			}
		}
		_, _, _, _ = copySourceVersion(string(b))
		var c completeRequest
		if xml.Unmarshal(b, &c) == nil {
			for _, p := range c.Parts {
				_ = p.PartNumber
			}
		}
		var d deleteRequest
		_ = xml.Unmarshal(b, &d)
		var cfg struct{ LocationConstraint string }
		_ = xml.Unmarshal(b, &cfg)
		_, _, _, _ = parseRange(string(b), 1000)
		_, _, _ = copySource(string(b))
		_ = s3Escape(string(b))
	})
}

// FuzzParseRange checks that an accepted range always lies inside the object.
func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"bytes=0-0", "bytes=-5", "bytes=5-", "bytes=3-2", "bytes=0-99999999999999999999", "bytes=-0", "items=1-2", "bytes=1-2,4-5"} {
		f.Add(s, int64(100))
	}
	f.Fuzz(func(t *testing.T, h string, size int64) {
		if size < 0 {
			size = -size
		}
		off, n, ok, err := parseRange(h, size)
		if err != nil || !ok {
			return
		}
		if off < 0 || n <= 0 || off+n > size {
			t.Fatalf("range %q on %d bytes gave off %d len %d", h, size, off, n)
		}
	})
}

// FuzzCheckFeatures feeds arbitrary query strings and headers to the refusal-table check,
// whose query parser is its own: whatever net/url finds in the query (which is what the
// handlers act on), the check must have seen too, so every parameter the table refuses in
// the operation is refused.
func FuzzCheckFeatures(f *testing.F) {
	for _, s := range []string{"acl", "tagging&x-id=PutObject", "versionId=abc", "versionId=null", "list-type=2&prefix=a%2Fb",
		"uploads=&uploadId=1", "t%61gging", "x-amz-acl=public-read", "a=1&&b", "partNumber=1&uploadId=x", "%zz", "ta+gging", ";acl"} {
		f.Add(s, "X-Amz-Acl", "private", uint8(12))
	}
	f.Add("", "X-Amz-Server-Side-Encryption", "AES256", uint8(0))
	f.Add("", "x-amz-meta-a", "b", uint8(3))
	f.Fuzz(func(t *testing.T, rawQuery, hname, hvalue string, opIndex uint8) {
		op := opNames[int(opIndex)%len(opNames)]
		r, err := http.NewRequest("GET", "http://127.0.0.1/bkt/key", nil)
		if err != nil {
			t.Skip()
		}
		r.URL.RawQuery = rawQuery
		if hname != "" {
			r.Header[hname] = []string{hvalue}
		}
		got := checkFeatures(r, op)
		if got != nil {
			var ae *apiError
			if !errors.As(got, &ae) || (ae.Status != 400 && ae.Status != 501) {
				t.Fatalf("refusal %v", got)
			}
			return
		}
		q, _ := url.ParseQuery(rawQuery)
		for name, vs := range q {
			rl := queryRules[name]
			if rl == nil {
				continue
			}
			for _, v := range vs {
				if !rl.mask.has(opBits[op]) || (rl.values != nil && !oneOf(rl.values, v)) {
					t.Fatalf("query %q: ?%s=%q is refused in %s, but the check let it through", rawQuery, name, v, op)
				}
			}
		}
	})
}
