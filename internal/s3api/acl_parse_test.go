package s3api

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
)

// testScope: alice's object in bob's bucket, in a cluster of alice, bob and carol (and
// the root user), at feature level 9; legacyScope the same before level 9.
var (
	testScope   = aclScope{owner: "alice", bucketOwner: "bob", users: func() []string { return []string{"alice", "bob", "carol"} }, explicit: true}
	legacyScope = aclScope{owner: "alice", bucketOwner: "bob", users: testScope.users}
)

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

func userXML(name, perm string) string {
	return grantXML("CanonicalUser", "ID", ownerOf(name).ID, perm)
}

var (
	aliceID   = ownerOf("alice").ID
	ownerFull = userXML("alice", "FULL_CONTROL")
	// aclDocs: want is the ACL kept at level 9, legacy before it ("" with code: refused).
	aclDocs = []struct {
		name, doc, want, code, legacy, legacyCode string
	}{
		{"private", aclXML(aliceID, ownerFull), aclPrivate, "", aclPrivate, ""},
		{"no grants", aclXML(""), "grants:", "", "", "NotImplemented"},
		{"public-read", aclXML(aliceID, ownerFull, grantXML("Group", "URI", groupAllUsers, "READ")), aclPublicRead, "", aclPublicRead, ""},
		{"public-read-write", aclXML("", ownerFull, grantXML("Group", "URI", groupAllUsers, "WRITE"), grantXML("Group", "URI", groupAllUsers, "READ")), aclPublicReadWrite, "", aclPublicReadWrite, ""},
		{"authenticated-read", aclXML("", ownerFull, grantXML("Group", "URI", groupAuthenticated, "READ")), aclAuthenticated, "", aclAuthenticated, ""},
		{"bucket-owner-full-control", aclXML("", ownerFull, userXML("bob", "FULL_CONTROL")), aclBucketOwnerFull, "", aclBucketOwnerFull, ""},
		{"the owner's grants in parts", aclXML("", userXML("alice", "READ"), userXML("alice", "WRITE"), userXML("alice", "READ_ACP"), userXML("alice", "WRITE_ACP")), aclPrivate, "", aclPrivate, ""},
		{"the owner READ and WRITE_ACP only", aclXML("", userXML("alice", "READ"), userXML("alice", "WRITE_ACP")), "grants:READ u:alice;WRITE_ACP u:alice", "", "", "NotImplemented"},
		{"public-read without the owner", aclXML("", grantXML("Group", "URI", groupAllUsers, "READ")), "grants:READ g:AllUsers", "", "", "NotImplemented"},
		{"bucket owner READ", aclXML("", ownerFull, userXML("bob", "READ")), "grants:FULL_CONTROL u:alice;READ u:bob", "", "", "NotImplemented"},
		{"another user", aclXML("", ownerFull, userXML("carol", "READ"), userXML("carol", "WRITE_ACP")), "grants:FULL_CONTROL u:alice;READ u:carol;WRITE_ACP u:carol", "", "", "NotImplemented"},
		{"the root user", aclXML("", ownerFull, userXML("root", "READ_ACP")), "grants:FULL_CONTROL u:alice;READ_ACP u:root", "", "", "NotImplemented"},
		{"AllUsers FULL_CONTROL", aclXML("", ownerFull, grantXML("Group", "URI", groupAllUsers, "FULL_CONTROL")), "grants:FULL_CONTROL u:alice;FULL_CONTROL g:AllUsers", "", "", "NotImplemented"},
		{"no type", aclXML("", `<Grant><Grantee><ID>`+aliceID+`</ID></Grantee><Permission>FULL_CONTROL</Permission></Grant>`), aclPrivate, "", aclPrivate, ""},
		{"unknown user", aclXML("", ownerFull, userXML("dave", "READ")), "", "InvalidArgument", "", "InvalidArgument"},
		{"LogDelivery", aclXML("", ownerFull, grantXML("Group", "URI", groupLogDelivery, "WRITE")), "", "NotImplemented", "", "NotImplemented"},
		{"e-mail", aclXML("", ownerFull, grantXML("AmazonCustomerByEmail", "EmailAddress", "a@example.com", "READ")), "", "UnresolvableGrantByEmailAddress", "", "UnresolvableGrantByEmailAddress"},
		{"unknown group", aclXML("", grantXML("Group", "URI", "http://example.com/all", "READ")), "", "InvalidArgument", "", "InvalidArgument"},
		{"unknown type", aclXML("", grantXML("Robot", "ID", aliceID, "READ")), "", "InvalidArgument", "", "InvalidArgument"},
		{"type without its field", aclXML("", grantXML("Group", "ID", aliceID, "READ")), "", "MalformedACLError", "", "MalformedACLError"},
		{"unknown permission", aclXML("", grantXML("Group", "URI", groupAllUsers, "LIST")), "", "MalformedACLError", "", "MalformedACLError"},
		{"no grantee", aclXML("", `<Grant><Permission>READ</Permission></Grant>`), "", "MalformedACLError", "", "MalformedACLError"},
		{"another owner", aclXML(ownerOf("carol").ID, ownerFull), "", "AccessDenied", "", "AccessDenied"},
		{"101 grants", aclXML("", slices.Repeat([]string{ownerFull}, 101)...), "", "MalformedACLError", "", "MalformedACLError"},
		{"100 grants", aclXML("", slices.Repeat([]string{ownerFull}, 100)...), aclPrivate, "", aclPrivate, ""},
		{"another root", `<Tagging/>`, "", "MalformedACLError", "", "MalformedACLError"},
		{"not XML", `<AccessControlPolicy`, "", "MalformedACLError", "", "MalformedACLError"},
	}
)

func codeOf(err error) string {
	if err == nil {
		return ""
	}
	return toAPIError(err).Code
}

// TestParseACL: a grant list equal to a canned ACL is kept as it; from level 9 any other
// is kept as itself, before it refused; grantees cairn cannot resolve are refused with
// S3's error.
func TestParseACL(t *testing.T) {
	for _, tc := range aclDocs {
		got, err := parseACL([]byte(tc.doc), testScope)
		if got != tc.want || codeOf(err) != tc.code {
			t.Errorf("%s: %q %q, want %q %q", tc.name, got, codeOf(err), tc.want, tc.code)
		}
		got, err = parseACL([]byte(tc.doc), legacyScope)
		if got != tc.legacy || codeOf(err) != tc.legacyCode {
			t.Errorf("%s before level 9: %q %q, want %q %q", tc.name, got, codeOf(err), tc.legacy, tc.legacyCode)
		}
	}
}

// TestHeaderACL: x-amz-acl and the x-amz-grant-* headers.
func TestHeaderACL(t *testing.T) {
	carol := `id="` + ownerOf("carol").ID + `"`
	for _, tc := range []struct {
		name       string
		hd         map[string]string
		want, code string
	}{
		{"none", nil, "", ""},
		{"canned", map[string]string{"X-Amz-Acl": "public-read"}, aclPublicRead, ""},
		{"unknown canned", map[string]string{"X-Amz-Acl": "aws-exec-read"}, "", "InvalidArgument"},
		{"grants", map[string]string{"X-Amz-Grant-Read": `uri="` + groupAllUsers + `"`, "X-Amz-Grant-Full-Control": `id="` + aliceID + `"`}, aclPublicRead, ""},
		{"grants, two grantees", map[string]string{"X-Amz-Grant-Full-Control": `id=` + aliceID + `, id="` + ownerOf("bob").ID + `"`}, aclBucketOwnerFull, ""},
		{"without the owner", map[string]string{"X-Amz-Grant-Read": `uri="` + groupAllUsers + `"`}, "grants:READ g:AllUsers", ""},
		{"another user", map[string]string{"X-Amz-Grant-Read": carol, "X-Amz-Grant-Write-Acp": carol + `,uri="` + groupAuthenticated + `"`},
			"grants:READ u:carol;WRITE_ACP u:carol;WRITE_ACP g:AuthenticatedUsers", ""},
		{"both", map[string]string{"X-Amz-Acl": "private", "X-Amz-Grant-Read": `uri="` + groupAllUsers + `"`}, "", "InvalidRequest"},
		{"both, an unknown grantee", map[string]string{"X-Amz-Acl": "private", "X-Amz-Grant-Read": `id="nobody"`}, "", "InvalidRequest"},
		{"malformed grant", map[string]string{"X-Amz-Grant-Read": `everyone`}, "", "InvalidArgument"},
		{"unknown grantee kind", map[string]string{"X-Amz-Grant-Read": `group="x"`}, "", "InvalidArgument"},
		{"unknown id", map[string]string{"X-Amz-Grant-Read": `id="0123"`}, "", "InvalidArgument"},
		{"e-mail", map[string]string{"X-Amz-Grant-Read": `emailAddress="a@example.com"`}, "", "UnresolvableGrantByEmailAddress"},
		{"LogDelivery", map[string]string{"X-Amz-Grant-Write": `uri="` + groupLogDelivery + `"`}, "", "NotImplemented"},
		{"101 grants", map[string]string{"X-Amz-Grant-Read": strings.Repeat(carol+",", 100) + carol}, "", "MalformedACLError"},
	} {
		hd := http.Header{}
		for k, v := range tc.hd {
			hd.Set(k, v)
		}
		got, ok, err := headerACL(hd, testScope)
		if got != tc.want || codeOf(err) != tc.code || ok != (tc.want != "") {
			t.Errorf("%s: %q %v %q, want %q %q", tc.name, got, ok, codeOf(err), tc.want, tc.code)
		}
	}
}

// TestACLGrants: the evaluation of a kept ACL, denials first: a grant gives exactly its
// permission (FULL_CONTROL all four) to exactly its grantee; groups count for nothing
// where public ACLs are ignored; AuthenticatedUsers is a signed request of a user.
func TestACLGrants(t *testing.T) {
	anon := Principal{Anonymous: true}
	carol, dave := Principal{User: "carol"}, Principal{User: "dave"}
	revoked := Principal{User: "\x00revoked"}
	for _, tc := range []struct {
		name   string
		acl    string
		who    Principal
		p      perm
		ignore bool
		want   bool
	}{
		{"private", "", carol, permRead, false, false},
		{"user READ", "grants:READ u:carol", carol, permRead, false, true},
		{"user READ, other user", "grants:READ u:carol", dave, permRead, false, false},
		{"user READ, anonymous", "grants:READ u:carol", anon, permRead, false, false},
		{"user READ is not WRITE", "grants:READ u:carol", carol, permWrite, false, false},
		{"user READ is not READ_ACP", "grants:READ u:carol", carol, permReadACP, false, false},
		{"user WRITE_ACP", "grants:WRITE_ACP u:carol", carol, permWriteACP, false, true},
		{"user FULL_CONTROL", "grants:FULL_CONTROL u:carol", carol, permReadACP, false, true},
		{"user grants are not public", "grants:READ u:carol", carol, permRead, true, true},
		{"no permission asked", "grants:FULL_CONTROL u:carol", carol, 0, false, false},
		{"two permissions asked", "grants:READ u:carol", carol, permRead | permWrite, false, false},
		{"AllUsers", "grants:READ g:AllUsers", anon, permRead, false, true},
		{"AllUsers ignored", "grants:READ g:AllUsers", anon, permRead, true, false},
		{"AllUsers ignored for users too", "grants:READ g:AllUsers", carol, permRead, true, false},
		{"AuthenticatedUsers, a user", "grants:WRITE g:AuthenticatedUsers", dave, permWrite, false, true},
		{"AuthenticatedUsers, anonymous", "grants:WRITE g:AuthenticatedUsers", anon, permWrite, false, false},
		{"AuthenticatedUsers, a revoked key", "grants:WRITE g:AuthenticatedUsers", revoked, permWrite, false, false},
		{"AuthenticatedUsers ignored", "grants:WRITE g:AuthenticatedUsers", dave, permWrite, true, false},
		{"undecodable entries", "grants:READ;READ u:;READ g:Everyone;READ x:carol;SOME u:carol", carol, permRead, false, false},
		{"empty list", "grants:", carol, permRead, false, false},
		{"a name that is no canned ACL", "grants", carol, permRead, false, false},
		{"canned public-read", aclPublicRead, anon, permRead, false, true},
		{"canned public-read, not WRITE", aclPublicRead, anon, permWrite, false, false},
		{"canned authenticated-read, anonymous", aclAuthenticated, anon, permRead, false, false},
		{"canned authenticated-read, revoked", aclAuthenticated, revoked, permRead, false, false},
		{"canned public-read-write ignored", aclPublicReadWrite, anon, permWrite, true, false},
	} {
		if got := aclGrants(tc.acl, tc.who, tc.p, tc.ignore); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if !publicACL("grants:READ u:carol;READ_ACP g:AuthenticatedUsers") || publicACL("grants:FULL_CONTROL u:carol") || publicACL("") {
		t.Error("publicACL: a list is public exactly when it grants a group something")
	}
	// ACLs count only where Object Ownership is not BucketOwnerEnforced.
	rq := &request{who: carol, bucket: "b"}
	b := &object.Bucket{Config: map[string]string{aclKind: "grants:FULL_CONTROL u:carol"}}
	if aclAllowed(rq, b, "b", "", "s3:ListBucket") {
		t.Error("an ACL counted in a BucketOwnerEnforced bucket")
	}
	b.Config[ownershipKind] = ownWriter
	if !aclAllowed(rq, b, "b", "", "s3:ListBucket") || !aclAllowed(rq, b, "b", "", "s3:PutBucketAcl") || aclAllowed(rq, b, "b", "", "s3:DeleteBucket") {
		t.Error("FULL_CONTROL on a bucket is READ, WRITE, READ_ACP and WRITE_ACP, nothing else")
	}
}

// FuzzParseACL: no document panics the parser; what it accepts is a canned ACL cairn
// keeps or a list that encodes back to itself, and never grants an unknown user.
func FuzzParseACL(f *testing.F) {
	for _, tc := range aclDocs {
		f.Add([]byte(tc.doc))
	}
	canned := strings.Fields(cannedACLsSupported)
	check := func(t *testing.T, what string, got string) {
		if slices.Contains(canned, got) {
			return
		}
		list := decodeGrants(got)
		if !strings.HasPrefix(got, explicitPrefix) || encodeGrants(list) != got || len(list) > maxGrants {
			t.Fatalf("%s parsed to %q", what, got)
		}
		for _, e := range list {
			if e.user != "" && !slices.Contains([]string{"alice", "bob", "carol", "root"}, e.user) {
				t.Fatalf("%s grants %q", what, e.user)
			}
		}
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if got, err := parseACL(doc, testScope); err == nil {
			check(t, string(doc), got)
		}
		if got, err := parseACL(doc, legacyScope); err == nil && !slices.Contains(canned, got) {
			t.Fatalf("%q parsed to %q before level 9", doc, got)
		}
		hd := http.Header{"X-Amz-Grant-Read": {string(doc)}}
		if got, ok, err := headerACL(hd, testScope); err == nil {
			if !ok {
				t.Fatalf("grant header %q parsed to nothing", doc)
			}
			check(t, "grant header "+string(doc), got)
		}
	})
}
