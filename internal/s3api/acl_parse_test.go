package s3api

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

var testIDs = aclIDs{owner: ownerOf("alice").ID, bucketOwner: ownerOf("bob").ID}

func grantXML(typ, field, value, perm string) string {
	return `<Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="` + typ + `"><` + field + `>` + value + `</` + field + `></Grantee><Permission>` + perm + `</Permission></Grant>`
}

func aclXML(owner string, grants ...string) string {
	o := ""
	if owner != "" {
		o = `<Owner><ID>` + owner + `</ID></Owner>`
	}
	return `<AccessControlPolicy xmlns="http://s3.amazonaws.com/doc/2006-03-01/">` + o + `<AccessControlList>` + strings.Join(grants, "") + `</AccessControlList></AccessControlPolicy>`
}

var (
	ownerFull = grantXML("CanonicalUser", "ID", testIDs.owner, "FULL_CONTROL")
	aclDocs   = []struct {
		name, doc, want, code string
	}{
		{"private", aclXML(testIDs.owner, ownerFull), aclPrivate, ""},
		{"private without the owner's grant", aclXML(""), "", "NotImplemented"}, // the owner would lose its grant: cairn cannot keep that
		{"public-read", aclXML(testIDs.owner, ownerFull, grantXML("Group", "URI", groupAllUsers, "READ")), aclPublicRead, ""},
		{"public-read-write", aclXML("", ownerFull, grantXML("Group", "URI", groupAllUsers, "WRITE"), grantXML("Group", "URI", groupAllUsers, "READ")), aclPublicReadWrite, ""},
		{"authenticated-read", aclXML("", ownerFull, grantXML("Group", "URI", groupAuthenticated, "READ")), aclAuthenticated, ""},
		{"bucket-owner-full-control", aclXML("", ownerFull, grantXML("CanonicalUser", "ID", testIDs.bucketOwner, "FULL_CONTROL")), aclBucketOwnerFull, ""},
		{"the owner's grants in parts", aclXML("", grantXML("CanonicalUser", "ID", testIDs.owner, "READ"), grantXML("CanonicalUser", "ID", testIDs.owner, "WRITE"),
			grantXML("CanonicalUser", "ID", testIDs.owner, "READ_ACP"), grantXML("CanonicalUser", "ID", testIDs.owner, "WRITE_ACP")), aclPrivate, ""},
		{"the owner READ and WRITE_ACP only", aclXML("", grantXML("CanonicalUser", "ID", testIDs.owner, "READ"), grantXML("CanonicalUser", "ID", testIDs.owner, "WRITE_ACP")), "", "NotImplemented"},
		{"the owner WRITE only", aclXML(testIDs.owner, grantXML("CanonicalUser", "ID", testIDs.owner, "WRITE")), "", "NotImplemented"},
		{"public-read without the owner", aclXML("", grantXML("Group", "URI", groupAllUsers, "READ")), "", "NotImplemented"},
		{"bucket owner READ", aclXML("", ownerFull, grantXML("CanonicalUser", "ID", testIDs.bucketOwner, "READ")), "", "NotImplemented"},
		{"another user", aclXML("", ownerFull, grantXML("CanonicalUser", "ID", ownerOf("carol").ID, "READ")), "", "NotImplemented"},
		{"LogDelivery", aclXML("", ownerFull, grantXML("Group", "URI", groupLogDelivery, "WRITE")), "", "NotImplemented"},
		{"e-mail", aclXML("", ownerFull, grantXML("AmazonCustomerByEmail", "EmailAddress", "a@example.com", "READ")), "", "NotImplemented"},
		{"AllUsers FULL_CONTROL", aclXML("", ownerFull, grantXML("Group", "URI", groupAllUsers, "FULL_CONTROL")), "", "NotImplemented"},
		{"unknown group", aclXML("", grantXML("Group", "URI", "http://example.com/all", "READ")), "", "InvalidArgument"},
		{"unknown permission", aclXML("", grantXML("Group", "URI", groupAllUsers, "LIST")), "", "MalformedACLError"},
		{"no grantee", aclXML("", `<Grant><Permission>READ</Permission></Grant>`), "", "MalformedACLError"},
		{"another owner", aclXML(ownerOf("carol").ID, ownerFull), "", "AccessDenied"},
		{"another root", `<Tagging/>`, "", "MalformedACLError"},
		{"not XML", `<AccessControlPolicy`, "", "MalformedACLError"},
	}
)

// TestParseACL: a grant list is kept as the canned ACL it equals; others are refused
// with S3's error.
func TestParseACL(t *testing.T) {
	for _, tc := range aclDocs {
		got, err := parseACL([]byte(tc.doc), testIDs)
		code := ""
		if err != nil {
			code = toAPIError(err).Code
		}
		if got != tc.want || code != tc.code {
			t.Errorf("%s: %q %q, want %q %q", tc.name, got, code, tc.want, tc.code)
		}
	}
}

// TestHeaderACL: x-amz-acl and the x-amz-grant-* headers.
func TestHeaderACL(t *testing.T) {
	for _, tc := range []struct {
		name       string
		hd         map[string]string
		want, code string
	}{
		{"none", nil, "", ""},
		{"canned", map[string]string{"X-Amz-Acl": "public-read"}, aclPublicRead, ""},
		{"unknown canned", map[string]string{"X-Amz-Acl": "aws-exec-read"}, "", "InvalidArgument"},
		{"grants", map[string]string{"X-Amz-Grant-Read": `uri="` + groupAllUsers + `"`, "X-Amz-Grant-Full-Control": `id="` + testIDs.owner + `"`}, aclPublicRead, ""},
		{"grants, two grantees", map[string]string{"X-Amz-Grant-Full-Control": `id=` + testIDs.owner + `, id="` + testIDs.bucketOwner + `"`}, aclBucketOwnerFull, ""},
		{"both", map[string]string{"X-Amz-Acl": "private", "X-Amz-Grant-Read": `uri="` + groupAllUsers + `"`}, "", "InvalidRequest"},
		{"malformed grant", map[string]string{"X-Amz-Grant-Read": `everyone`}, "", "InvalidArgument"},
		{"unknown grantee kind", map[string]string{"X-Amz-Grant-Read": `group="x"`}, "", "InvalidArgument"},
		{"e-mail", map[string]string{"X-Amz-Grant-Read": `emailAddress="a@example.com"`}, "", "NotImplemented"},
	} {
		hd := http.Header{}
		for k, v := range tc.hd {
			hd.Set(k, v)
		}
		got, ok, err := headerACL(hd, testIDs)
		code := ""
		if err != nil {
			code = toAPIError(err).Code
		}
		if got != tc.want || code != tc.code || ok != (tc.want != "") {
			t.Errorf("%s: %q %v %q, want %q %q", tc.name, got, ok, code, tc.want, tc.code)
		}
	}
}

// FuzzParseACL: no document panics the parser, what it accepts is a canned ACL cairn
// keeps, and the grant list of each canned ACL parses back to it.
func FuzzParseACL(f *testing.F) {
	for _, tc := range aclDocs {
		f.Add([]byte(tc.doc))
	}
	canned := strings.Fields(cannedACLsSupported)
	f.Fuzz(func(t *testing.T, doc []byte) {
		got, err := parseACL(doc, testIDs)
		if err == nil && !slices.Contains(canned, got) {
			t.Fatalf("%q parsed to %q", doc, got)
		}
		hd := http.Header{"X-Amz-Grant-Read": {string(doc)}}
		if got, ok, err := headerACL(hd, testIDs); err == nil && (!ok || !slices.Contains(canned, got)) {
			t.Fatalf("grant header %q parsed to %q %v", doc, got, ok)
		}
	})
}
