package s3api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairnfs/cairn/internal/s3api"
	"github.com/cairnfs/cairn/internal/sigv4"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil"
)

const (
	allUsers  = "http://acs.amazonaws.com/groups/global/AllUsers"
	authUsers = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"
)

// aclServer serves the root user and two users without buckets, alice and bob.
func aclServer(t *testing.T) (srv *testutil.Server, root, alice, bob *s3.Client) {
	return aclServerAt(t, 0)
}

// aclServerAt is aclServer in a cluster at feature level level (0: this build's).
func aclServerAt(t *testing.T, level int) (srv *testutil.Server, root, alice, bob *s3.Client) {
	users := map[string]string{"ALICEKEY": "alice", "BOBKEY": "bob"}
	srv = testutil.StartServer(t, store.Config{Reserve: 1}, func(c *s3api.Config) {
		c.Lookup = func(ak string) (string, bool) {
			if ak == testutil.AccessKey {
				return testutil.SecretKey, true
			}
			if u, ok := users[ak]; ok {
				return u + "-secret", true
			}
			return "", false
		}
		c.Principal = func(ak string) s3api.Principal {
			if u, ok := users[ak]; ok {
				return s3api.Principal{User: u}
			}
			return s3api.Principal{User: "root", Root: true}
		}
		c.Users = func() []string { return []string{"root", "alice", "bob"} }
		if level != 0 {
			c.FeatureLevel = func() int { return level }
		}
	})
	return srv, newClient(t, srv.URL, testutil.AccessKey, testutil.SecretKey),
		newClient(t, srv.URL, "ALICEKEY", "alice-secret"), newClient(t, srv.URL, "BOBKEY", "bob-secret")
}

// canonicalID is the canonical ID cairn shows for a user.
func canonicalID(user string) string {
	sum := sha256.Sum256([]byte("cairn-user:" + user))
	return hex.EncodeToString(sum[:])
}

// grantList renders grants as sorted "who:PERMISSION" strings (a user by display name,
// checked against its canonical ID; a group by its last path element).
func grantList(t *testing.T, grants []types.Grant) string {
	t.Helper()
	var out []string
	for _, g := range grants {
		switch g.Grantee.Type {
		case types.TypeCanonicalUser:
			name := aws.ToString(g.Grantee.DisplayName)
			if aws.ToString(g.Grantee.ID) != canonicalID(name) {
				t.Errorf("grantee %s has ID %s", name, aws.ToString(g.Grantee.ID))
			}
			out = append(out, name+":"+string(g.Permission))
		case types.TypeGroup:
			uri := aws.ToString(g.Grantee.URI)
			out = append(out, uri[strings.LastIndex(uri, "/")+1:]+":"+string(g.Permission))
		default:
			t.Errorf("grantee of type %q", g.Grantee.Type)
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func createWith(t *testing.T, c *s3.Client, bucket string, own types.ObjectOwnership, acl types.BucketCannedACL) {
	t.Helper()
	if _, err := c.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(bucket), ObjectOwnership: own, ACL: acl}); err != nil {
		t.Fatalf("create %s (%s, %s): %v", bucket, own, acl, err)
	}
}

func putACL(c *s3.Client, bucket, key string, acl types.ObjectCannedACL) error {
	_, err := c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader("data of " + key), ACL: acl})
	return err
}

// TestCannedBucketACL: each canned ACL of a bucket opens exactly what it grants: listings
// (READ) and writes (WRITE) to everyone or to authenticated users, never the ACL itself;
// GetBucketAcl shows the grants.
func TestCannedBucketACL(t *testing.T) {
	srv, root, _, bob := aclServer(t)
	ctx := context.Background()
	for i, tc := range []struct {
		acl                    types.BucketCannedACL
		grants                 string
		anonList, anonPut      int
		bobList, bobPut, bobGA string // error codes ("" success)
	}{
		{types.BucketCannedACLPrivate, "root:FULL_CONTROL", 403, 403, "AccessDenied", "AccessDenied", "AccessDenied"},
		{types.BucketCannedACLPublicRead, "AllUsers:READ root:FULL_CONTROL", 200, 403, "", "AccessDenied", "AccessDenied"},
		{types.BucketCannedACLPublicReadWrite, "AllUsers:READ AllUsers:WRITE root:FULL_CONTROL", 200, 200, "", "", "AccessDenied"},
		{types.BucketCannedACLAuthenticatedRead, "AuthenticatedUsers:READ root:FULL_CONTROL", 403, 403, "", "AccessDenied", "AccessDenied"},
		{"bucket-owner-full-control", "root:FULL_CONTROL", 403, 403, "AccessDenied", "AccessDenied", "AccessDenied"},
	} {
		t.Run(string(tc.acl), func(t *testing.T) {
			b := fmt.Sprintf("canned%d", i)
			createWith(t, root, b, types.ObjectOwnershipObjectWriter, tc.acl)
			mustPut(t, root, b, "k", []byte("private object"))
			got, err := root.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: aws.String(b)})
			if err != nil {
				t.Fatal(err)
			}
			if aws.ToString(got.Owner.DisplayName) != "root" || aws.ToString(got.Owner.ID) != canonicalID("root") || grantList(t, got.Grants) != tc.grants {
				t.Fatalf("GetBucketAcl: owner %s grants %s, want %s", aws.ToString(got.Owner.DisplayName), grantList(t, got.Grants), tc.grants)
			}
			for _, c := range []struct {
				method, path string
				want         int
			}{
				{"GET", "/" + b, tc.anonList},
				{"HEAD", "/" + b, tc.anonList},
				{"PUT", "/" + b + "/anon", tc.anonPut},
				{"GET", "/" + b + "/k", 403}, // the object is private
				{"GET", "/" + b + "?acl", 403},
				{"PUT", "/" + b + "?acl", 403},
			} {
				if st := anonymous(t, c.method, srv.URL+c.path, ""); st != c.want {
					t.Errorf("anonymous %s %s: %d, want %d", c.method, c.path, st, c.want)
				}
			}
			_, err = bob.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(b)})
			if apiCode(err) != tc.bobList {
				t.Errorf("bob lists: %v, want %q", err, tc.bobList)
			}
			if err := putACL(bob, b, "bob", ""); apiCode(err) != tc.bobPut {
				t.Errorf("bob writes: %v, want %q", err, tc.bobPut)
			}
			_, err = bob.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: aws.String(b)})
			if apiCode(err) != tc.bobGA {
				t.Errorf("bob reads the ACL: %v, want %q", err, tc.bobGA)
			}
		})
	}
}

// TestCannedObjectACL: an object's canned ACL opens reads of it (GET, HEAD) to everyone
// or to authenticated users; the writer of an object owns it under ObjectWriter, the
// bucket's owner under BucketOwnerPreferred with bucket-owner-full-control; ACLs come
// with PutObject, CopyObject, multipart uploads and PutObjectAcl, per version.
func TestCannedObjectACL(t *testing.T) {
	srv, root, _, bob := aclServer(t)
	ctx := context.Background()
	createWith(t, root, "objs", types.ObjectOwnershipObjectWriter, types.BucketCannedACLPublicReadWrite)
	getAs := func(c *s3.Client, key string) string {
		_, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("objs"), Key: aws.String(key)})
		return apiCode(err)
	}
	objectACL := func(c *s3.Client, key string) (string, string) {
		t.Helper()
		got, err := c.GetObjectAcl(ctx, &s3.GetObjectAclInput{Bucket: aws.String("objs"), Key: aws.String(key)})
		if err != nil {
			t.Fatalf("GetObjectAcl %s: %v", key, err)
		}
		if aws.ToString(got.Owner.ID) != canonicalID(aws.ToString(got.Owner.DisplayName)) {
			t.Fatalf("owner %+v", got.Owner)
		}
		return aws.ToString(got.Owner.DisplayName), grantList(t, got.Grants)
	}
	for _, tc := range []struct {
		acl             types.ObjectCannedACL
		grants          string
		anon            int
		bob             string
		anonACL, bobACL int
	}{
		{types.ObjectCannedACLPrivate, "root:FULL_CONTROL", 403, "AccessDenied", 403, 403},
		{types.ObjectCannedACLPublicRead, "AllUsers:READ root:FULL_CONTROL", 200, "", 403, 403},
		{types.ObjectCannedACLPublicReadWrite, "AllUsers:READ AllUsers:WRITE root:FULL_CONTROL", 200, "", 403, 403},
		{types.ObjectCannedACLAuthenticatedRead, "AuthenticatedUsers:READ root:FULL_CONTROL", 403, "", 403, 403},
		{types.ObjectCannedACLBucketOwnerFullControl, "root:FULL_CONTROL", 403, "AccessDenied", 403, 403},
	} {
		key := "o-" + string(tc.acl)
		if err := putACL(root, "objs", key, tc.acl); err != nil {
			t.Fatal(err)
		}
		if owner, grants := objectACL(root, key); owner != "root" || grants != tc.grants {
			t.Errorf("%s: owner %s grants %s, want %s", key, owner, grants, tc.grants)
		}
		for _, m := range []string{"GET", "HEAD"} {
			if st := anonymous(t, m, srv.URL+"/objs/"+key, ""); st != tc.anon {
				t.Errorf("anonymous %s %s: %d, want %d", m, key, st, tc.anon)
			}
		}
		if st := anonymous(t, "GET", srv.URL+"/objs/"+key+"?acl", ""); st != tc.anonACL {
			t.Errorf("anonymous GetObjectAcl %s: %d, want %d", key, st, tc.anonACL)
		}
		if got := getAs(bob, key); got != tc.bob {
			t.Errorf("bob GET %s: %q, want %q", key, got, tc.bob)
		}
	}
	// A key that does not exist is told only to who may list the bucket.
	if st := anonymous(t, "GET", srv.URL+"/objs/missing", ""); st != 404 {
		t.Errorf("anonymous GET of a missing key in a public-read-write bucket: %d", st)
	}

	// ObjectWriter: bob's object (written through the bucket's public-read-write) is his:
	// he reads it and its ACL, and so does the bucket's owner; listings show him.
	if err := putACL(bob, "objs", "bobs", types.ObjectCannedACLPrivate); err != nil {
		t.Fatal(err)
	}
	if got := getAs(bob, "bobs"); got != "" {
		t.Fatalf("bob reads his own object: %s", got)
	}
	if owner, grants := objectACL(bob, "bobs"); owner != "bob" || grants != "bob:FULL_CONTROL" {
		t.Fatalf("bob's object: owner %s grants %s", owner, grants)
	}
	if owner, _ := objectACL(root, "bobs"); owner != "bob" {
		t.Fatalf("bob's object as root sees it: owner %s", owner)
	}
	list, err := root.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("objs"), Prefix: aws.String("bobs"), FetchOwner: aws.Bool(true)})
	if err != nil || len(list.Contents) != 1 || aws.ToString(list.Contents[0].Owner.DisplayName) != "bob" || aws.ToString(list.Contents[0].Owner.ID) != canonicalID("bob") {
		t.Fatalf("listing of bob's object: %+v %v", list, err)
	}
	// bucket-owner-full-control from another writer: the bucket's owner gets a grant.
	if err := putACL(bob, "objs", "bobs-bofc", types.ObjectCannedACLBucketOwnerFullControl); err != nil {
		t.Fatal(err)
	}
	if owner, grants := objectACL(bob, "bobs-bofc"); owner != "bob" || grants != "bob:FULL_CONTROL root:FULL_CONTROL" {
		t.Fatalf("bob's object with bucket-owner-full-control: owner %s grants %s", owner, grants)
	}
	// PutObjectAcl: the object's owner (bob) changes it; another user may not.
	if _, err := bob.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("objs"), Key: aws.String("bobs"), ACL: types.ObjectCannedACLPublicRead}); err != nil {
		t.Fatalf("bob's PutObjectAcl of his object: %v", err)
	}
	if st := anonymous(t, "GET", srv.URL+"/objs/bobs", ""); st != 200 {
		t.Fatalf("anonymous GET after public-read: %d", st)
	}
	if _, err := bob.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("objs"), Key: aws.String("o-public-read"), ACL: types.ObjectCannedACLPrivate}); apiCode(err) != "AccessDenied" {
		t.Fatalf("bob's PutObjectAcl of root's object: %v", err)
	}
	if _, err := root.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("objs"), Key: aws.String("o-public-read"), ACL: types.ObjectCannedACLPrivate}); err != nil {
		t.Fatal(err)
	}
	if st := anonymous(t, "GET", srv.URL+"/objs/o-public-read", ""); st != 403 {
		t.Fatalf("anonymous GET after private: %d", st)
	}

	// BucketOwnerPreferred: bucket-owner-full-control gives the object to the bucket's owner.
	createWith(t, root, "preferred", types.ObjectOwnershipBucketOwnerPreferred, types.BucketCannedACLPublicReadWrite)
	for _, tc := range []struct {
		acl   types.ObjectCannedACL
		owner string
	}{{types.ObjectCannedACLBucketOwnerFullControl, "root"}, {types.ObjectCannedACLPrivate, "bob"}} {
		if err := putACL(bob, "preferred", string(tc.acl), tc.acl); err != nil {
			t.Fatal(err)
		}
		got, err := root.GetObjectAcl(ctx, &s3.GetObjectAclInput{Bucket: aws.String("preferred"), Key: aws.String(string(tc.acl))})
		if err != nil || aws.ToString(got.Owner.DisplayName) != tc.owner {
			t.Fatalf("BucketOwnerPreferred, %s: %+v %v, want owner %s", tc.acl, got, err, tc.owner)
		}
	}

	// The other ways in: copies (the request's ACL, not the source's) and multipart uploads.
	if _, err := root.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("objs"), Key: aws.String("copy"), CopySource: aws.String("objs/o-public-read-write")}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("objs"), Key: aws.String("copy-public"), CopySource: aws.String("objs/o-private"), ACL: types.ObjectCannedACLPublicRead}); err != nil {
		t.Fatal(err)
	}
	mu, err := root.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("objs"), Key: aws.String("mp"), ACL: types.ObjectCannedACLPublicRead})
	if err != nil {
		t.Fatal(err)
	}
	up, err := root.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("objs"), Key: aws.String("mp"), UploadId: mu.UploadId, PartNumber: aws.Int32(1), Body: strings.NewReader("part")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("objs"), Key: aws.String("mp"), UploadId: mu.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{ETag: up.ETag, PartNumber: aws.Int32(1)}}}}); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]int{"copy": 403, "copy-public": 200, "mp": 200} {
		if st := anonymous(t, "GET", srv.URL+"/objs/"+key, ""); st != want {
			t.Errorf("anonymous GET %s: %d, want %d", key, st, want)
		}
	}

	// Versions: each has its own ACL; ?versionId= reads and changes one.
	if _, err := root.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String("objs"),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}); err != nil {
		t.Fatal(err)
	}
	v1, err := root.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("objs"), Key: aws.String("v"), Body: strings.NewReader("one"), ACL: types.ObjectCannedACLPublicRead})
	if err != nil {
		t.Fatal(err)
	}
	if err := putACL(root, "objs", "v", types.ObjectCannedACLPrivate); err != nil {
		t.Fatal(err)
	}
	vid := aws.ToString(v1.VersionId)
	for path, want := range map[string]int{"/objs/v": 403, "/objs/v?versionId=" + vid: 200} {
		if st := anonymous(t, "GET", srv.URL+path, ""); st != want {
			t.Errorf("anonymous GET %s: %d, want %d", path, st, want)
		}
	}
	got, err := root.GetObjectAcl(ctx, &s3.GetObjectAclInput{Bucket: aws.String("objs"), Key: aws.String("v"), VersionId: v1.VersionId})
	if err != nil || grantList(t, got.Grants) != "AllUsers:READ root:FULL_CONTROL" {
		t.Fatalf("GetObjectAcl of version 1: %+v %v", got, err)
	}
	if _, err := root.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("objs"), Key: aws.String("v"), VersionId: v1.VersionId, ACL: types.ObjectCannedACLPrivate}); err != nil {
		t.Fatal(err)
	}
	if st := anonymous(t, "GET", srv.URL+"/objs/v?versionId="+vid, ""); st != 403 {
		t.Errorf("anonymous GET of version 1 made private: %d", st)
	}
}

// TestObjectOwnership: BucketOwnerEnforced (the default) takes only the ACLs that grant
// the owner alone, and a bucket ACL must be private for it; the other settings enable
// ACLs; after DeleteBucketOwnershipControls the bucket behaves as ObjectWriter.
func TestObjectOwnership(t *testing.T) {
	srv, root, _, _ := aclServer(t)
	ctx := context.Background()
	mustCreateBucket(t, root, "own")
	ownership := func() (types.ObjectOwnership, string) {
		out, err := root.GetBucketOwnershipControls(ctx, &s3.GetBucketOwnershipControlsInput{Bucket: aws.String("own")})
		if err != nil {
			return "", apiCode(err)
		}
		return out.OwnershipControls.Rules[0].ObjectOwnership, ""
	}
	setOwnership := func(o types.ObjectOwnership) error {
		_, err := root.PutBucketOwnershipControls(ctx, &s3.PutBucketOwnershipControlsInput{Bucket: aws.String("own"),
			OwnershipControls: &types.OwnershipControls{Rules: []types.OwnershipControlsRule{{ObjectOwnership: o}}}})
		return err
	}
	bucketACL := func(acl types.BucketCannedACL) error {
		_, err := root.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("own"), ACL: acl})
		return err
	}
	objACL := func(acl types.ObjectCannedACL) error {
		_, err := root.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("own"), Key: aws.String("k"), ACL: acl})
		return err
	}
	if o, code := ownership(); o != types.ObjectOwnershipBucketOwnerEnforced || code != "" {
		t.Fatalf("a new bucket's ownership: %s %s", o, code)
	}
	mustPut(t, root, "own", "k", []byte("k"))
	steps := []struct {
		name string
		do   func() error
		want string
	}{
		{"enforced: PutObject public-read", func() error { return putACL(root, "own", "x", types.ObjectCannedACLPublicRead) }, "AccessControlListNotSupported"},
		{"enforced: PutObject private", func() error { return putACL(root, "own", "x", types.ObjectCannedACLPrivate) }, ""},
		{"enforced: PutObject bucket-owner-full-control", func() error { return putACL(root, "own", "x", types.ObjectCannedACLBucketOwnerFullControl) }, ""},
		{"enforced: PutBucketAcl public-read", func() error { return bucketACL(types.BucketCannedACLPublicRead) }, "AccessControlListNotSupported"},
		{"enforced: PutBucketAcl private", func() error { return bucketACL(types.BucketCannedACLPrivate) }, ""},
		{"enforced: PutObjectAcl authenticated-read", func() error { return objACL(types.ObjectCannedACLAuthenticatedRead) }, "AccessControlListNotSupported"},
		{"ObjectWriter", func() error { return setOwnership(types.ObjectOwnershipObjectWriter) }, ""},
		{"writer: PutBucketAcl public-read", func() error { return bucketACL(types.BucketCannedACLPublicRead) }, ""},
		{"writer: PutObjectAcl public-read", func() error { return objACL(types.ObjectCannedACLPublicRead) }, ""},
		{"back to enforced with a public bucket ACL", func() error { return setOwnership(types.ObjectOwnershipBucketOwnerEnforced) }, "InvalidBucketAclWithObjectOwnership"},
		{"writer: PutBucketAcl private", func() error { return bucketACL(types.BucketCannedACLPrivate) }, ""},
		{"enforced", func() error { return setOwnership(types.ObjectOwnershipBucketOwnerEnforced) }, ""},
		{"bad ownership", func() error { return setOwnership("Anyone") }, "MalformedXML"},
	}
	for _, s := range steps {
		if got := apiCode(s.do()); got != s.want {
			t.Fatalf("%s: %q, want %q", s.name, got, s.want)
		}
	}
	// ACLs disabled again: the object's public-read no longer counts, and reads of it
	// show the owner's full control alone.
	if st := anonymous(t, "GET", srv.URL+"/own/k", ""); st != 403 {
		t.Fatalf("anonymous GET of a public-read object in an enforced bucket: %d", st)
	}
	got, err := root.GetObjectAcl(ctx, &s3.GetObjectAclInput{Bucket: aws.String("own"), Key: aws.String("k")})
	if err != nil || grantList(t, got.Grants) != "root:FULL_CONTROL" {
		t.Fatalf("GetObjectAcl in an enforced bucket: %+v %v", got, err)
	}
	// Deleted: not found, and the bucket behaves as ObjectWriter.
	if _, err := root.DeleteBucketOwnershipControls(ctx, &s3.DeleteBucketOwnershipControlsInput{Bucket: aws.String("own")}); err != nil {
		t.Fatal(err)
	}
	if _, code := ownership(); code != "OwnershipControlsNotFoundError" {
		t.Fatalf("GetBucketOwnershipControls after delete: %q", code)
	}
	if err := putACL(root, "own", "after", types.ObjectCannedACLPublicRead); err != nil {
		t.Fatalf("public-read after DeleteBucketOwnershipControls: %v", err)
	}
	if st := anonymous(t, "GET", srv.URL+"/own/after", ""); st != 200 {
		t.Fatalf("anonymous GET after DeleteBucketOwnershipControls: %d", st)
	}
	// A key that does not exist is not told to who may not list the bucket.
	if st := anonymous(t, "GET", srv.URL+"/own/missing", ""); st != 403 {
		t.Fatalf("anonymous GET of a missing key in a private bucket: %d", st)
	}
	// CreateBucket: a public ACL needs an ownership that enables ACLs.
	for _, tc := range []struct {
		own  types.ObjectOwnership
		acl  types.BucketCannedACL
		want string
	}{
		{"", types.BucketCannedACLPublicRead, "InvalidBucketAclWithObjectOwnership"},
		{types.ObjectOwnershipBucketOwnerEnforced, types.BucketCannedACLAuthenticatedRead, "InvalidBucketAclWithObjectOwnership"},
		{types.ObjectOwnershipBucketOwnerEnforced, types.BucketCannedACLPrivate, ""},
		{"Nobody", "", "InvalidArgument"},
	} {
		_, err := root.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("new-" + strings.ToLower(string(tc.acl))), ObjectOwnership: tc.own, ACL: tc.acl})
		if got := apiCode(err); got != tc.want {
			t.Errorf("CreateBucket %s %s: %q, want %q", tc.own, tc.acl, got, tc.want)
		}
	}
	if _, err := root.GetBucketOwnershipControls(ctx, &s3.GetBucketOwnershipControlsInput{Bucket: aws.String("nobkt")}); apiCode(err) != "NoSuchBucket" {
		t.Fatalf("GetBucketOwnershipControls of no bucket: %v", err)
	}
}

// TestBlockPublicACLs: BlockPublicAcls refuses public ACLs on every way in;
// IgnorePublicAcls makes the public grants of bucket and object ACLs grant nothing; an
// explicit Deny of the bucket policy beats an ACL's allow.
func TestBlockPublicACLs(t *testing.T) {
	srv, root, _, bob := aclServer(t)
	ctx := context.Background()
	createWith(t, root, "pab", types.ObjectOwnershipObjectWriter, types.BucketCannedACLPublicRead)
	if err := putACL(root, "pab", "pub", types.ObjectCannedACLPublicRead); err != nil {
		t.Fatal(err)
	}
	if err := putACL(root, "pab", "auth", types.ObjectCannedACLAuthenticatedRead); err != nil {
		t.Fatal(err)
	}
	setPAB := func(block, ignore bool) {
		t.Helper()
		if _, err := root.PutPublicAccessBlock(ctx, &s3.PutPublicAccessBlockInput{Bucket: aws.String("pab"), PublicAccessBlockConfiguration: &types.PublicAccessBlockConfiguration{
			BlockPublicAcls: aws.Bool(block), IgnorePublicAcls: aws.Bool(ignore)}}); err != nil {
			t.Fatal(err)
		}
	}
	reads := func(want int, bobWant string) {
		t.Helper()
		for _, p := range []string{"/pab", "/pab/pub"} {
			if st := anonymous(t, "GET", srv.URL+p, ""); st != want {
				t.Errorf("anonymous GET %s: %d, want %d", p, st, want)
			}
		}
		_, err := bob.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("pab"), Key: aws.String("auth")})
		if apiCode(err) != bobWant {
			t.Errorf("bob GET of an authenticated-read object: %v, want %q", err, bobWant)
		}
	}
	reads(200, "")
	setPAB(false, true)
	reads(403, "AccessDenied")
	setPAB(true, false)
	reads(200, "")
	for _, tc := range []struct {
		name string
		do   func() error
		want string
	}{
		{"PutObject public-read", func() error { return putACL(root, "pab", "x", types.ObjectCannedACLPublicRead) }, "AccessDenied"},
		{"PutObject authenticated-read", func() error { return putACL(root, "pab", "x", types.ObjectCannedACLAuthenticatedRead) }, "AccessDenied"},
		{"PutObject private", func() error { return putACL(root, "pab", "x", types.ObjectCannedACLPrivate) }, ""},
		{"PutObjectAcl public-read-write", func() error {
			_, err := root.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("pab"), Key: aws.String("x"), ACL: types.ObjectCannedACLPublicReadWrite})
			return err
		}, "AccessDenied"},
		{"PutBucketAcl public-read-write", func() error {
			_, err := root.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("pab"), ACL: types.BucketCannedACLPublicReadWrite})
			return err
		}, "AccessDenied"},
		{"PutBucketAcl by grant headers", func() error {
			_, err := root.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("pab"), GrantRead: aws.String(`uri="` + allUsers + `"`)})
			return err
		}, "AccessDenied"},
		{"CreateMultipartUpload public-read", func() error {
			_, err := root.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("pab"), Key: aws.String("m"), ACL: types.ObjectCannedACLPublicRead})
			return err
		}, "AccessDenied"},
	} {
		if got := apiCode(tc.do()); got != tc.want {
			t.Errorf("BlockPublicAcls, %s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if _, err := root.DeletePublicAccessBlock(ctx, &s3.DeletePublicAccessBlockInput{Bucket: aws.String("pab")}); err != nil {
		t.Fatal(err)
	}
	// An explicit Deny wins over the ACLs' grants.
	if _, err := root.PutBucketPolicy(ctx, &s3.PutBucketPolicyInput{Bucket: aws.String("pab"), Policy: aws.String(`{"Version":"2012-10-17","Statement":[
		{"Effect":"Deny","Principal":"*","Action":["s3:GetObject","s3:ListBucket"],"Resource":["arn:aws:s3:::pab","arn:aws:s3:::pab/pub"]}]}`)}); err != nil {
		t.Fatal(err)
	}
	reads(403, "")
}

// TestACLDocuments: Put*Acl takes a header, grant headers or an AccessControlPolicy
// document equal to a canned ACL; grants no canned ACL has are refused, never kept in
// part.
func TestACLDocuments(t *testing.T) {
	srv, root, _, _ := aclServer(t)
	ctx := context.Background()
	createWith(t, root, "docs", types.ObjectOwnershipObjectWriter, "")
	mustPut(t, root, "docs", "k", []byte("k"))
	owner := &types.Owner{ID: aws.String(canonicalID("root"))}
	me := types.Grant{Grantee: &types.Grantee{Type: types.TypeCanonicalUser, ID: aws.String(canonicalID("root"))}, Permission: types.PermissionFullControl}
	group := func(uri string, p types.Permission) types.Grant {
		return types.Grant{Grantee: &types.Grantee{Type: types.TypeGroup, URI: aws.String(uri)}, Permission: p}
	}
	user := func(id string, p types.Permission) types.Grant {
		return types.Grant{Grantee: &types.Grantee{Type: types.TypeCanonicalUser, ID: aws.String(id)}, Permission: p}
	}
	for _, tc := range []struct {
		name   string
		in     s3.PutBucketAclInput
		want   string // error code
		grants string // GetBucketAcl after
	}{
		{"document public-read", s3.PutBucketAclInput{AccessControlPolicy: &types.AccessControlPolicy{Owner: owner, Grants: []types.Grant{me, group(allUsers, types.PermissionRead)}}},
			"", "AllUsers:READ root:FULL_CONTROL"},
		{"document private", s3.PutBucketAclInput{AccessControlPolicy: &types.AccessControlPolicy{Owner: owner, Grants: []types.Grant{me}}}, "", "root:FULL_CONTROL"},
		{"grant headers authenticated-read", s3.PutBucketAclInput{GrantRead: aws.String(`uri="` + authUsers + `"`), GrantFullControl: aws.String(`id="` + canonicalID("root") + `"`)},
			"", "AuthenticatedUsers:READ root:FULL_CONTROL"},
		// Grant headers are kept as given: without the owner's grant if they do not name it
		// (the owner keeps every permission: docs/design/acl.md).
		{"grant headers public-read-write", s3.PutBucketAclInput{GrantRead: aws.String(`uri="` + allUsers + `"`), GrantWrite: aws.String(`uri=` + allUsers)},
			"", "AllUsers:READ AllUsers:WRITE"},
		{"another user", s3.PutBucketAclInput{AccessControlPolicy: &types.AccessControlPolicy{Owner: owner, Grants: []types.Grant{me, user(canonicalID("bob"), types.PermissionRead)}}},
			"", "bob:READ root:FULL_CONTROL"},
		{"unknown user", s3.PutBucketAclInput{AccessControlPolicy: &types.AccessControlPolicy{Owner: owner, Grants: []types.Grant{me, user(canonicalID("carol"), types.PermissionRead)}}},
			"InvalidArgument", "bob:READ root:FULL_CONTROL"},
		{"document revoking every grant", s3.PutBucketAclInput{AccessControlPolicy: &types.AccessControlPolicy{Owner: owner, Grants: []types.Grant{}}},
			"", "none"},
		{"document the owner WRITE only", s3.PutBucketAclInput{AccessControlPolicy: &types.AccessControlPolicy{Owner: owner, Grants: []types.Grant{user(canonicalID("root"), types.PermissionWrite)}}},
			"", "root:WRITE"},
		{"log delivery", s3.PutBucketAclInput{GrantWrite: aws.String(`uri="http://acs.amazonaws.com/groups/s3/LogDelivery"`)}, "NotImplemented", "root:WRITE"},
		{"e-mail", s3.PutBucketAclInput{GrantRead: aws.String(`emailAddress="bob@example.com"`)}, "UnresolvableGrantByEmailAddress", "root:WRITE"},
		{"public READ_ACP", s3.PutBucketAclInput{GrantReadACP: aws.String(`uri="` + allUsers + `"`)}, "", "AllUsers:READ_ACP"},
		{"canned and grants", s3.PutBucketAclInput{ACL: types.BucketCannedACLPrivate, GrantRead: aws.String(`uri="` + allUsers + `"`)}, "InvalidRequest", ""},
		{"another owner", s3.PutBucketAclInput{AccessControlPolicy: &types.AccessControlPolicy{Owner: &types.Owner{ID: aws.String(canonicalID("bob"))}, Grants: []types.Grant{me}}}, "AccessDenied", ""},
		{"bad group", s3.PutBucketAclInput{GrantRead: aws.String(`uri="http://example.com/everyone"`)}, "InvalidArgument", ""},
	} {
		in := tc.in
		in.Bucket = aws.String("docs")
		_, err := root.PutBucketAcl(ctx, &in)
		if got := apiCode(err); got != tc.want {
			t.Errorf("%s: %q (%v), want %q", tc.name, got, err, tc.want)
			continue
		}
		if tc.grants == "" {
			continue
		}
		want := tc.grants
		if want == "none" {
			want = ""
		}
		got, err := root.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: aws.String("docs")})
		if err != nil || grantList(t, got.Grants) != want {
			t.Errorf("%s: GetBucketAcl %v %v, want %s", tc.name, got, err, tc.grants)
		}
	}
	// An object's document and the raw shape of GetObjectAcl.
	if _, err := root.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("docs"), Key: aws.String("k"),
		AccessControlPolicy: &types.AccessControlPolicy{Owner: owner, Grants: []types.Grant{me, group(allUsers, types.PermissionRead)}}}); err != nil {
		t.Fatal(err)
	}
	st, body := do(t, signedAs(t, "GET", srv.URL+"/docs/k?acl", nil, testutil.AccessKey, testutil.SecretKey))
	want := `<AccessControlPolicy xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Owner><ID>` + canonicalID("root") + `</ID><DisplayName>root</DisplayName></Owner><AccessControlList>` +
		`<Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="CanonicalUser"><ID>` + canonicalID("root") + `</ID><DisplayName>root</DisplayName></Grantee><Permission>FULL_CONTROL</Permission></Grant>` +
		`<Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="Group"><URI>` + allUsers + `</URI></Grantee><Permission>READ</Permission></Grant></AccessControlList></AccessControlPolicy>`
	if st != 200 || !strings.HasSuffix(body, want) {
		t.Fatalf("GetObjectAcl: %d %s\nwant %s", st, body, want)
	}
	// Neither a header nor a document; both.
	st, body = do(t, signedAs(t, "PUT", srv.URL+"/docs?acl", nil, testutil.AccessKey, testutil.SecretKey))
	expectS3Error(t, st, body, 400, "MissingSecurityHeader")
	r := signedAs(t, "PUT", srv.URL+"/docs?acl", []byte(`<AccessControlPolicy/>`), testutil.AccessKey, testutil.SecretKey, "X-Amz-Acl", "private")
	st, body = do(t, r)
	expectS3Error(t, st, body, 400, "UnexpectedContent")
	st, body = do(t, signedAs(t, "PUT", srv.URL+"/docs?acl", []byte(`<AccessControlPolicy><AccessControlList><Grant>`), testutil.AccessKey, testutil.SecretKey))
	expectS3Error(t, st, body, 400, "MalformedACLError")
	st, body = do(t, signedAs(t, "PUT", srv.URL+"/docs/k", []byte("x"), testutil.AccessKey, testutil.SecretKey, "X-Amz-Acl", "log-delivery-write"))
	expectS3Error(t, st, body, 501, "NotImplemented")
	// A value that is no canned ACL of S3's is invalid (400 InvalidArgument), on the
	// bucket, an object and a new object alike, and changes nothing.
	for _, u := range []string{"/docs?acl", "/docs/k?acl", "/docs/k2"} {
		st, body = do(t, signedAs(t, "PUT", srv.URL+u, nil, testutil.AccessKey, testutil.SecretKey, "X-Amz-Acl", "public-ready"))
		expectS3Error(t, st, body, 400, "InvalidArgument")
	}
	if _, err := root.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("docs"), Key: aws.String("k2")}); apiCode(err) != "NotFound" {
		t.Fatalf("a PUT with an invalid canned ACL stored the object: %v", err)
	}
}

// signedAs builds a request signed by a user's key with UNSIGNED-PAYLOAD; hdr are
// header name, value pairs.
func signedAs(t *testing.T, method, url string, body []byte, ak, sk string, hdr ...string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	sigv4.SignRequest(r, ak, sk, "us-east-1", "UNSIGNED-PAYLOAD", time.Now())
	return r
}
