package s3api_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairnfs/cairn/internal/testutil"
)

// grantHeader is the value of an x-amz-grant-* header naming users by canonical ID.
func grantHeader(users ...string) *string {
	var parts []string
	for _, u := range users {
		if strings.HasPrefix(u, "http://") {
			parts = append(parts, `uri="`+u+`"`)
		} else {
			parts = append(parts, `id="`+canonicalID(u)+`"`)
		}
	}
	return aws.String(strings.Join(parts, ", "))
}

// access is what a user can do in a bucket and to one of its objects, as error codes
// ("" allowed).
type access struct {
	list, put, getBucketACL, putBucketACL, get, getObjectACL, putObjectACL string
}

func accessOf(t *testing.T, c *s3.Client, bucket, key string) access {
	t.Helper()
	ctx := context.Background()
	var a access
	_, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	a.list = apiCode(err)
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("probe"), Body: strings.NewReader("p")})
	a.put = apiCode(err)
	acl, err := c.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: aws.String(bucket)})
	a.getBucketACL = apiCode(err)
	if err == nil {
		// Write back what it read: the same ACL, so that probing changes nothing.
		_, err = c.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String(bucket), AccessControlPolicy: &types.AccessControlPolicy{Owner: acl.Owner, Grants: acl.Grants}})
	} else {
		_, err = c.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String(bucket), GrantFullControl: grantHeader("root")})
	}
	a.putBucketACL = apiCode(err)
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	a.get = apiCode(err)
	oacl, err := c.GetObjectAcl(ctx, &s3.GetObjectAclInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	a.getObjectACL = apiCode(err)
	if err == nil {
		_, err = c.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String(bucket), Key: aws.String(key), AccessControlPolicy: &types.AccessControlPolicy{Owner: oacl.Owner, Grants: oacl.Grants}})
	} else {
		_, err = c.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String(bucket), Key: aws.String(key), GrantFullControl: grantHeader("root")})
	}
	a.putObjectACL = apiCode(err)
	return a
}

const denied = "AccessDenied"

// TestExplicitGrants: a grant to another user gives exactly its permission on the bucket
// (READ lists, WRITE writes, READ_ACP/WRITE_ACP the ACL, FULL_CONTROL those four) or the
// object (READ reads, READ_ACP/WRITE_ACP its ACL), to that user alone; a new ACL revokes
// it; Get*Acl shows the grants as given.
func TestExplicitGrants(t *testing.T) {
	_, root, alice, bob := aclServer(t)
	ctx := context.Background()
	createWith(t, root, "egb", types.ObjectOwnershipObjectWriter, "")
	mustPut(t, root, "egb", "o", []byte("object"))
	none := access{denied, denied, denied, denied, denied, denied, denied}
	for _, tc := range []struct {
		name          string
		bucket, obj   s3.PutBucketAclInput // obj: the object's grants, as a bucket input
		alice, grants string
		want          access
	}{
		{"private", s3.PutBucketAclInput{ACL: types.BucketCannedACLPrivate}, s3.PutBucketAclInput{}, "", "root:FULL_CONTROL", none},
		{"bucket READ", s3.PutBucketAclInput{GrantRead: grantHeader("alice"), GrantFullControl: grantHeader("root")}, s3.PutBucketAclInput{}, "",
			"alice:READ root:FULL_CONTROL", access{"", denied, denied, denied, denied, denied, denied}},
		{"bucket WRITE", s3.PutBucketAclInput{GrantWrite: grantHeader("alice")}, s3.PutBucketAclInput{}, "",
			"alice:WRITE", access{denied, "", denied, denied, denied, denied, denied}},
		{"bucket READ_ACP", s3.PutBucketAclInput{GrantReadACP: grantHeader("alice")}, s3.PutBucketAclInput{}, "",
			"alice:READ_ACP", access{denied, denied, "", denied, denied, denied, denied}},
		{"bucket WRITE_ACP", s3.PutBucketAclInput{GrantWriteACP: grantHeader("alice")}, s3.PutBucketAclInput{}, "",
			"alice:WRITE_ACP", access{denied, denied, denied, "", denied, denied, denied}},
		{"bucket FULL_CONTROL", s3.PutBucketAclInput{GrantFullControl: grantHeader("alice", "root")}, s3.PutBucketAclInput{}, "",
			"alice:FULL_CONTROL root:FULL_CONTROL", access{"", "", "", "", denied, denied, denied}},
		{"object READ", s3.PutBucketAclInput{ACL: types.BucketCannedACLPrivate}, s3.PutBucketAclInput{GrantRead: grantHeader("alice")}, "alice:READ",
			"root:FULL_CONTROL", access{denied, denied, denied, denied, "", denied, denied}},
		{"object READ_ACP", s3.PutBucketAclInput{}, s3.PutBucketAclInput{GrantReadACP: grantHeader("alice")}, "alice:READ_ACP",
			"root:FULL_CONTROL", access{denied, denied, denied, denied, denied, "", denied}},
		{"object WRITE_ACP", s3.PutBucketAclInput{}, s3.PutBucketAclInput{GrantWriteACP: grantHeader("alice")}, "alice:WRITE_ACP",
			"root:FULL_CONTROL", access{denied, denied, denied, denied, denied, denied, ""}},
		{"object FULL_CONTROL", s3.PutBucketAclInput{}, s3.PutBucketAclInput{GrantFullControl: grantHeader("alice")}, "alice:FULL_CONTROL",
			"root:FULL_CONTROL", access{denied, denied, denied, denied, "", "", ""}},
		{"object WRITE grants no bucket write", s3.PutBucketAclInput{}, s3.PutBucketAclInput{GrantWrite: grantHeader("alice")}, "alice:WRITE",
			"root:FULL_CONTROL", none},
		{"revoked", s3.PutBucketAclInput{ACL: types.BucketCannedACLPrivate}, s3.PutBucketAclInput{ACL: types.BucketCannedACLPrivate}, "root:FULL_CONTROL",
			"root:FULL_CONTROL", none},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.bucket != (s3.PutBucketAclInput{}) {
				in := tc.bucket
				in.Bucket = aws.String("egb")
				if _, err := root.PutBucketAcl(ctx, &in); err != nil {
					t.Fatal(err)
				}
			}
			if tc.obj != (s3.PutBucketAclInput{}) {
				o := tc.obj
				if _, err := root.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("egb"), Key: aws.String("o"), ACL: types.ObjectCannedACL(o.ACL),
					GrantRead: o.GrantRead, GrantReadACP: o.GrantReadACP, GrantWrite: o.GrantWrite, GrantWriteACP: o.GrantWriteACP, GrantFullControl: o.GrantFullControl}); err != nil {
					t.Fatal(err)
				}
				got, err := root.GetObjectAcl(ctx, &s3.GetObjectAclInput{Bucket: aws.String("egb"), Key: aws.String("o")})
				if err != nil || grantList(t, got.Grants) != tc.alice {
					t.Fatalf("GetObjectAcl: %v %v, want %s", got, err, tc.alice)
				}
			}
			got, err := root.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: aws.String("egb")})
			if err != nil || grantList(t, got.Grants) != tc.grants {
				t.Fatalf("GetBucketAcl: %v, want %s", err, tc.grants)
			}
			if a := accessOf(t, alice, "egb", "o"); a != tc.want {
				t.Errorf("alice: %+v, want %+v", a, tc.want)
			}
			if a := accessOf(t, bob, "egb", "o"); a != none {
				t.Errorf("bob, granted nothing: %+v", a)
			}
		})
	}
	// FULL_CONTROL of a bucket is not its ownership.
	if _, err := root.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("egb"), GrantFullControl: grantHeader("alice")}); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.DeleteBucketPolicy(ctx, &s3.DeleteBucketPolicyInput{Bucket: aws.String("egb")}); apiCode(err) != denied {
		t.Errorf("alice with FULL_CONTROL deleted the bucket's policy: %v", err)
	}
	if _, err := alice.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String("egb")}); apiCode(err) != denied {
		t.Errorf("alice with FULL_CONTROL read the bucket's versioning: %v", err)
	}
	// An explicit Deny of the bucket policy beats a grant.
	if _, err := root.PutBucketPolicy(ctx, &s3.PutBucketPolicyInput{Bucket: aws.String("egb"), Policy: aws.String(`{"Version":"2012-10-17","Statement":[
		{"Effect":"Deny","Principal":{"AWS":"arn:aws:iam::000000000000:user/alice"},"Action":["s3:ListBucket","s3:PutBucketAcl"],"Resource":"arn:aws:s3:::egb"}]}`)}); err != nil {
		t.Fatal(err)
	}
	if a := accessOf(t, alice, "egb", "o"); a.list != denied || a.putBucketACL != denied || a.put != "" {
		t.Errorf("alice with FULL_CONTROL and a Deny of listing and PutBucketAcl: %+v", a)
	}
}

// TestGroupGrants: AllUsers grants are anonymous access, AuthenticatedUsers any user's,
// and Block Public Access treats both as the public canned ACLs.
func TestGroupGrants(t *testing.T) {
	srv, root, alice, _ := aclServer(t)
	ctx := context.Background()
	createWith(t, root, "ggb", types.ObjectOwnershipBucketOwnerPreferred, "")
	if _, err := root.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("ggb"), Key: aws.String("pub"), Body: strings.NewReader("x"), GrantRead: grantHeader(allUsers)}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("ggb"), Key: aws.String("auth"), Body: strings.NewReader("x"),
		GrantRead: grantHeader(authUsers), GrantFullControl: grantHeader("root")}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("ggb"), GrantWrite: grantHeader(authUsers), GrantRead: grantHeader(allUsers)}); err != nil {
		t.Fatal(err)
	}
	check := func(what string, anonList, anonPub, anonAuth int, aliceAuth, alicePut string) {
		t.Helper()
		for _, c := range []struct {
			path string
			want int
		}{{"/ggb", anonList}, {"/ggb/pub", anonPub}, {"/ggb/auth", anonAuth}} {
			if st := anonymous(t, "GET", srv.URL+c.path, ""); st != c.want {
				t.Errorf("%s: anonymous GET %s: %d, want %d", what, c.path, st, c.want)
			}
		}
		if st := anonymous(t, "PUT", srv.URL+"/ggb/anon", "x"); st != 403 {
			t.Errorf("%s: anonymous PUT with AuthenticatedUsers WRITE: %d", what, st)
		}
		_, err := alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("ggb"), Key: aws.String("auth")})
		if apiCode(err) != aliceAuth {
			t.Errorf("%s: alice GET of AuthenticatedUsers READ: %v, want %q", what, err, aliceAuth)
		}
		if err := putACL(alice, "ggb", "by-alice", ""); apiCode(err) != alicePut {
			t.Errorf("%s: alice PUT with AuthenticatedUsers WRITE: %v, want %q", what, err, alicePut)
		}
	}
	check("no Block Public Access", 200, 200, 403, "", "")
	setPAB := func(block, ignore bool) {
		t.Helper()
		if _, err := root.PutPublicAccessBlock(ctx, &s3.PutPublicAccessBlockInput{Bucket: aws.String("ggb"), PublicAccessBlockConfiguration: &types.PublicAccessBlockConfiguration{
			BlockPublicAcls: aws.Bool(block), IgnorePublicAcls: aws.Bool(ignore)}}); err != nil {
			t.Fatal(err)
		}
	}
	setPAB(false, true)
	check("IgnorePublicAcls", 403, 403, 403, denied, denied)
	setPAB(true, false)
	check("BlockPublicAcls", 200, 200, 403, "", "")
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"PutObject AllUsers", func() error {
			_, err := root.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("ggb"), Key: aws.String("x"), Body: strings.NewReader("x"), GrantRead: grantHeader("alice", allUsers)})
			return err
		}(), denied},
		{"PutObjectAcl AuthenticatedUsers READ_ACP", func() error {
			_, err := root.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("ggb"), Key: aws.String("pub"), GrantReadACP: grantHeader(authUsers)})
			return err
		}(), denied},
		{"PutBucketAcl document with AllUsers", func() error {
			_, err := root.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("ggb"), AccessControlPolicy: &types.AccessControlPolicy{
				Owner:  &types.Owner{ID: aws.String(canonicalID("root"))},
				Grants: []types.Grant{{Grantee: &types.Grantee{Type: types.TypeGroup, URI: aws.String(allUsers)}, Permission: types.PermissionWrite}}}})
			return err
		}(), denied},
		{"PutObject a user's grant", func() error {
			_, err := root.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("ggb"), Key: aws.String("x"), Body: strings.NewReader("x"), GrantRead: grantHeader("alice")})
			return err
		}(), ""},
	} {
		if got := apiCode(tc.err); got != tc.want {
			t.Errorf("BlockPublicAcls, %s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestGrantWrites: the grants of new objects (PutObject, CopyObject, multipart uploads)
// and buckets (CreateBucket); the refusals: unknown users, malformed documents,
// conflicting headers, ACLs disabled, and explicit lists before feature level 9.
func TestGrantWrites(t *testing.T) {
	srv, root, alice, bob := aclServer(t)
	ctx := context.Background()
	if _, err := root.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("gwb"), ObjectOwnership: types.ObjectOwnershipObjectWriter,
		GrantRead: grantHeader("alice"), GrantFullControl: grantHeader("root")}); err != nil {
		t.Fatal(err)
	}
	got, err := root.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: aws.String("gwb")})
	if err != nil || grantList(t, got.Grants) != "alice:READ root:FULL_CONTROL" {
		t.Fatalf("GetBucketAcl of a bucket created with grants: %v %v", got, err)
	}
	if _, err := alice.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("gwb")}); err != nil {
		t.Errorf("alice cannot list with READ: %v", err)
	}
	if _, err := root.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("gwb"), Key: aws.String("put"), Body: strings.NewReader("x"), GrantRead: grantHeader("bob")}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("gwb"), Key: aws.String("copy"), CopySource: aws.String("gwb/put"), GrantRead: grantHeader("alice")}); err != nil {
		t.Fatal(err)
	}
	up, err := root.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("gwb"), Key: aws.String("mp"), GrantRead: grantHeader("alice", "bob")})
	if err != nil {
		t.Fatal(err)
	}
	part, err := root.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("gwb"), Key: aws.String("mp"), UploadId: up.UploadId, PartNumber: aws.Int32(1), Body: strings.NewReader("part")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("gwb"), Key: aws.String("mp"), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{ETag: part.ETag, PartNumber: aws.Int32(1)}}}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key        string
		alice, bob string
	}{{"put", denied, ""}, {"copy", "", denied}, {"mp", "", ""}} {
		_, err := alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("gwb"), Key: aws.String(tc.key)})
		_, err2 := bob.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("gwb"), Key: aws.String(tc.key)})
		if apiCode(err) != tc.alice || apiCode(err2) != tc.bob {
			t.Errorf("GET %s: alice %v, bob %v; want %q %q", tc.key, err, err2, tc.alice, tc.bob)
		}
	}
	// A missing key: NoSuchKey for alice (she may list), AccessDenied for bob.
	_, err = alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("gwb"), Key: aws.String("nokey")})
	_, err2 := bob.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("gwb"), Key: aws.String("nokey")})
	if apiCode(err) != "NoSuchKey" || apiCode(err2) != denied {
		t.Errorf("GET of a missing key: alice %v, bob %v", err, err2)
	}

	// Refusals, none of which changes the ACL.
	for _, tc := range []struct {
		name   string
		path   string
		body   string
		hdr    []string
		status int
		code   string
	}{
		{"unknown id", "/gwb?acl", "", []string{"X-Amz-Grant-Read", `id="` + canonicalID("carol") + `"`}, 400, "InvalidArgument"},
		{"unknown id in a document", "/gwb?acl", aclDoc(canonicalID("root"), "CanonicalUser", "ID", canonicalID("carol")), nil, 400, "InvalidArgument"},
		{"e-mail", "/gwb/put?acl", "", []string{"X-Amz-Grant-Read", `emailAddress="alice@example.com"`}, 400, "UnresolvableGrantByEmailAddress"},
		{"LogDelivery", "/gwb?acl", "", []string{"X-Amz-Grant-Write", `uri="http://acs.amazonaws.com/groups/s3/LogDelivery"`}, 501, "NotImplemented"},
		{"malformed", "/gwb?acl", `<AccessControlPolicy><AccessControlList><Grant><Grantee>`, nil, 400, "MalformedACLError"},
		{"malformed permission", "/gwb/put?acl", aclDoc(canonicalID("root"), "Group", "URI", allUsers+`</URI></Grantee><Permission>ALL</Permission></Grant><Grant><Grantee><URI>`+allUsers), nil, 400, "MalformedACLError"},
		{"canned and grants", "/gwb?acl", "", []string{"X-Amz-Acl", "private", "X-Amz-Grant-Read", `id="` + canonicalID("bob") + `"`}, 400, "InvalidRequest"},
		{"canned and grants on PUT", "/gwb/new", "x", []string{"X-Amz-Acl", "private", "X-Amz-Grant-Read", `id="` + canonicalID("bob") + `"`}, 400, "InvalidRequest"},
		{"document and grants", "/gwb?acl", aclDoc(canonicalID("root"), "CanonicalUser", "ID", canonicalID("bob")), []string{"X-Amz-Grant-Read", `id="` + canonicalID("bob") + `"`}, 400, "UnexpectedContent"},
		{"another owner", "/gwb?acl", aclDoc(canonicalID("alice"), "CanonicalUser", "ID", canonicalID("bob")), nil, 403, "AccessDenied"},
	} {
		st, body := do(t, signedAs(t, "PUT", srv.URL+tc.path, []byte(tc.body), testutil.AccessKey, testutil.SecretKey, tc.hdr...))
		if st != tc.status || !strings.Contains(body, "<Code>"+tc.code+"</Code>") {
			t.Errorf("%s: %d %s, want %d %s", tc.name, st, body, tc.status, tc.code)
		}
	}
	if got, err := root.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: aws.String("gwb")}); err != nil || grantList(t, got.Grants) != "alice:READ root:FULL_CONTROL" {
		t.Errorf("the refusals changed the bucket's ACL: %v %v", got, err)
	}
	if _, err := root.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("gwb"), Key: aws.String("new")}); apiCode(err) != "NotFound" {
		t.Errorf("a refused PUT stored the object: %v", err)
	}

	// ACLs disabled (BucketOwnerEnforced): a list that is the owner's alone is taken.
	createWith(t, root, "gw-enforced", "", "")
	if _, err := root.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("gw-enforced"), GrantRead: grantHeader("alice")}); apiCode(err) != "AccessControlListNotSupported" {
		t.Errorf("a grant in a BucketOwnerEnforced bucket: %v", err)
	}
	if _, err := root.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("gw-enforced"), GrantFullControl: grantHeader("root")}); err != nil {
		t.Errorf("the owner's FULL_CONTROL alone in a BucketOwnerEnforced bucket: %v", err)
	}
	if _, err := root.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("gw-enforced"), Key: aws.String("k"), Body: strings.NewReader("x"), GrantRead: grantHeader("alice")}); apiCode(err) != "AccessControlListNotSupported" {
		t.Errorf("a grant on a PUT in a BucketOwnerEnforced bucket: %v", err)
	}
	if _, err := root.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("gw-enforced2"), GrantRead: grantHeader("alice")}); apiCode(err) != "InvalidBucketAclWithObjectOwnership" {
		t.Errorf("CreateBucket with a grant and ACLs disabled: %v", err)
	}
}

// aclDoc is an AccessControlPolicy of owner with one READ grant.
func aclDoc(owner, typ, field, value string) string {
	return `<AccessControlPolicy xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Owner><ID>` + owner + `</ID></Owner><AccessControlList>` +
		`<Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="` + typ + `"><` + field + `>` + value + `</` + field + `></Grantee><Permission>READ</Permission></Grant>` +
		`</AccessControlList></AccessControlPolicy>`
}

// TestGrantsBeforeLevel9: until every node keeps explicit lists, a list no canned ACL has
// is refused as before (501), one that is a canned ACL's is kept as that.
func TestGrantsBeforeLevel9(t *testing.T) {
	_, root, alice, _ := aclServerAt(t, 8)
	ctx := context.Background()
	createWith(t, root, "old", types.ObjectOwnershipObjectWriter, "")
	_, err := root.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("old"), GrantRead: grantHeader("alice"), GrantFullControl: grantHeader("root")})
	var ae interface{ ErrorCode() string }
	if !errors.As(err, &ae) || ae.ErrorCode() != "NotImplemented" {
		t.Fatalf("a user's grant before level 9: %v", err)
	}
	if _, err := alice.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("old")}); apiCode(err) != denied {
		t.Errorf("alice lists after a refused grant: %v", err)
	}
	if _, err := root.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("old"), GrantRead: grantHeader(authUsers)}); err != nil {
		t.Fatal(err)
	}
	got, err := root.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: aws.String("old")})
	if err != nil || grantList(t, got.Grants) != "AuthenticatedUsers:READ root:FULL_CONTROL" {
		t.Errorf("grant headers of authenticated-read before level 9: %v %v", got, err)
	}
}
