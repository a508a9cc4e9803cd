package s3api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairnfs/cairn/internal/s3api"
	"github.com/cairnfs/cairn/internal/sigv4"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil"
)

// policyServer serves the root user's key and alice's (a user without buckets).
func policyServer(t *testing.T) (srv *testutil.Server, root, alice *s3.Client) {
	srv = testutil.StartServer(t, store.Config{Reserve: 1}, func(c *s3api.Config) {
		c.Lookup = func(ak string) (string, bool) {
			switch ak {
			case testutil.AccessKey:
				return testutil.SecretKey, true
			case "ALICEKEY":
				return "alice-secret", true
			}
			return "", false
		}
		c.Principal = func(ak string) s3api.Principal {
			if ak == "ALICEKEY" {
				return s3api.Principal{User: "alice"}
			}
			return s3api.Principal{User: "root", Root: true}
		}
	})
	return srv, newClient(t, srv.URL, testutil.AccessKey, testutil.SecretKey), newClient(t, srv.URL, "ALICEKEY", "alice-secret")
}

func anonymous(t *testing.T, method, url, body string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestBucketPolicy: a bucket policy opens a bucket to anonymous requests and to other
// users as far as it allows; an explicit Deny wins over an Allow; Block Public Access
// overrides public statements (RestrictPublicBuckets) and refuses public policies
// (BlockPublicPolicy); the policy operations are the owner's; malformed and unsupported
// policies are refused with S3's errors.
func TestBucketPolicy(t *testing.T) {
	srv, root, alice := policyServer(t)
	ctx := context.Background()
	mustCreateBucket(t, root, "pub")
	mustPut(t, root, "pub", "photo.jpg", []byte("jpeg"))
	mustPut(t, root, "pub", "private/x", []byte("secret"))
	obj := srv.URL + "/pub/photo.jpg"
	if st := anonymous(t, "GET", obj, ""); st != 403 {
		t.Fatalf("anonymous GET without a policy: %d", st)
	}
	put := func(doc string) error {
		_, err := root.PutBucketPolicy(ctx, &s3.PutBucketPolicyInput{Bucket: aws.String("pub"), Policy: aws.String(doc)})
		return err
	}
	const public = `{"Version":"2012-10-17","Statement":[
		{"Sid":"PublicRead","Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::pub/*"},
		{"Sid":"NotPrivate","Effect":"Deny","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::pub/private/*"},
		{"Sid":"AliceUploads","Effect":"Allow","Principal":{"AWS":"arn:aws:iam::000000000000:user/alice"},"Action":"s3:PutObject","Resource":"arn:aws:s3:::pub/up/${aws:username}/*"}]}`
	if err := put(public); err != nil {
		t.Fatal(err)
	}
	got, err := root.GetBucketPolicy(ctx, &s3.GetBucketPolicyInput{Bucket: aws.String("pub")})
	if err != nil || *got.Policy != public {
		t.Fatalf("GetBucketPolicy: %v %v", got, err)
	}
	st, err := root.GetBucketPolicyStatus(ctx, &s3.GetBucketPolicyStatusInput{Bucket: aws.String("pub")})
	if err != nil || !*st.PolicyStatus.IsPublic {
		t.Fatalf("GetBucketPolicyStatus: %+v %v", st, err)
	}
	for _, tc := range []struct {
		method, url string
		want        int
	}{
		{"GET", obj, 200},
		{"HEAD", obj, 200},
		{"GET", srv.URL + "/pub/private/x", 403}, // the Deny
		{"PUT", srv.URL + "/pub/new", 403},
		{"GET", srv.URL + "/pub", 403}, // no s3:ListBucket
		{"DELETE", obj, 403},
		{"GET", srv.URL + "/", 403}, // ListBuckets
		{"GET", srv.URL + "/nobucket/k", 403},
		// Response header overrides need a signed request (S3: 400 InvalidRequest).
		{"GET", obj + "?response-content-type=text/html", 400},
		{"HEAD", obj + "?response-content-disposition=attachment", 400},
	} {
		if got := anonymous(t, tc.method, tc.url, ""); got != tc.want {
			t.Errorf("anonymous %s %s: %d, want %d", tc.method, tc.url, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"alice reads a public object", func() error {
			_, err := alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("pub"), Key: aws.String("photo.jpg")})
			return err
		}, ""},
		{"alice uploads under her prefix", func() error {
			_, err := alice.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("pub"), Key: aws.String("up/alice/a"), Body: strings.NewReader("a")})
			return err
		}, ""},
		{"alice uploads beside it", func() error {
			_, err := alice.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("pub"), Key: aws.String("up/bob/a"), Body: strings.NewReader("a")})
			return err
		}, "AccessDenied"},
		{"alice reads a private object", func() error {
			_, err := alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("pub"), Key: aws.String("private/x")})
			return err
		}, "AccessDenied"},
		{"alice reads the policy", func() error {
			_, err := alice.GetBucketPolicy(ctx, &s3.GetBucketPolicyInput{Bucket: aws.String("pub")})
			return err
		}, "AccessDenied"},
		{"alice deletes the policy", func() error {
			_, err := alice.DeleteBucketPolicy(ctx, &s3.DeleteBucketPolicyInput{Bucket: aws.String("pub")})
			return err
		}, "AccessDenied"},
		{"the root user reads a private object", func() error {
			_, err := root.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("pub"), Key: aws.String("private/x")})
			return err
		}, ""},
		{"malformed", func() error { return put(`{"Version":"2012-10-17","Statement":[{"Effect":"Perhaps"}]}`) }, "MalformedPolicy"},
		{"another bucket's resource", func() error {
			return put(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::other/*"}]}`)
		}, "MalformedPolicy"},
		{"NotPrincipal", func() error {
			return put(`{"Version":"2012-10-17","Statement":[{"Effect":"Deny","NotPrincipal":{"AWS":"arn:aws:iam::1:user/a"},"Action":"s3:*","Resource":"arn:aws:s3:::pub/*"}]}`)
		}, "NotImplemented"},
	} {
		if got := apiCode(tc.call()); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}

	// Block Public Access: RestrictPublicBuckets makes the public statements count for
	// nobody but the owner; BlockPublicPolicy refuses a public policy.
	pabIn := func(restrict, block bool) *s3.PutPublicAccessBlockInput {
		return &s3.PutPublicAccessBlockInput{Bucket: aws.String("pub"), PublicAccessBlockConfiguration: &types.PublicAccessBlockConfiguration{
			RestrictPublicBuckets: aws.Bool(restrict), BlockPublicPolicy: aws.Bool(block)}}
	}
	if _, err := root.GetPublicAccessBlock(ctx, &s3.GetPublicAccessBlockInput{Bucket: aws.String("pub")}); apiCode(err) != "NoSuchPublicAccessBlockConfiguration" {
		t.Fatalf("GetPublicAccessBlock before any: %v", err)
	}
	if _, err := root.PutPublicAccessBlock(ctx, pabIn(true, false)); err != nil {
		t.Fatal(err)
	}
	if got := anonymous(t, "GET", obj, ""); got != 403 {
		t.Fatalf("anonymous GET with RestrictPublicBuckets: %d", got)
	}
	if _, err := alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("pub"), Key: aws.String("photo.jpg")}); apiCode(err) != "AccessDenied" {
		t.Fatalf("alice with RestrictPublicBuckets: %v", err)
	}
	if _, err := root.PutPublicAccessBlock(ctx, pabIn(false, true)); err != nil {
		t.Fatal(err)
	}
	pab, err := root.GetPublicAccessBlock(ctx, &s3.GetPublicAccessBlockInput{Bucket: aws.String("pub")})
	if err != nil || !*pab.PublicAccessBlockConfiguration.BlockPublicPolicy || *pab.PublicAccessBlockConfiguration.RestrictPublicBuckets {
		t.Fatalf("GetPublicAccessBlock: %+v %v", pab, err)
	}
	if err := put(public); apiCode(err) != "AccessDenied" {
		t.Fatalf("a public policy with BlockPublicPolicy: %v", err)
	}
	if _, err := root.DeletePublicAccessBlock(ctx, &s3.DeletePublicAccessBlockInput{Bucket: aws.String("pub")}); err != nil {
		t.Fatal(err)
	}
	if got := anonymous(t, "GET", obj, ""); got != 200 {
		t.Fatalf("anonymous GET after the block was deleted: %d", got)
	}
	if _, err := root.DeleteBucketPolicy(ctx, &s3.DeleteBucketPolicyInput{Bucket: aws.String("pub")}); err != nil {
		t.Fatal(err)
	}
	if got := anonymous(t, "GET", obj, ""); got != 403 {
		t.Fatalf("anonymous GET after the policy was deleted: %d", got)
	}
	if _, err := root.GetBucketPolicy(ctx, &s3.GetBucketPolicyInput{Bucket: aws.String("pub")}); apiCode(err) != "NoSuchBucketPolicy" {
		t.Fatalf("GetBucketPolicy after delete: %v", err)
	}
}

// A listing's prefix is a condition (s3:prefix) of s3:ListBucket on the bucket's ARN, not
// part of the resource: a policy allowing listings under one prefix allows exactly those.
func TestPolicyListPrefix(t *testing.T) {
	srv, root, _ := policyServer(t)
	ctx := context.Background()
	mustCreateBucket(t, root, "lst")
	mustPut(t, root, "lst", "home/a", []byte("a"))
	const doc = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:ListBucket",
		"Resource":"arn:aws:s3:::lst","Condition":{"StringLike":{"s3:prefix":"home/*"}}}]}`
	if _, err := root.PutBucketPolicy(ctx, &s3.PutBucketPolicyInput{Bucket: aws.String("lst"), Policy: aws.String(doc)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		url  string
		want int
	}{
		{srv.URL + "/lst?prefix=home/", 200},
		{srv.URL + "/lst?list-type=2&prefix=home/x", 200},
		{srv.URL + "/lst?prefix=other/", 403},
		{srv.URL + "/lst", 403},
	} {
		if got := anonymous(t, "GET", tc.url, ""); got != tc.want {
			t.Errorf("anonymous GET %s: %d, want %d", tc.url, got, tc.want)
		}
	}
}

// TestPolicyExistingObjectTag: s3:ExistingObjectTag/KEY conditions are about the tags of
// the object the request names (the version its versionId names; for a copy, the
// source's): an Allow opens only the objects tagged so, a Deny closes them even to a user
// an Allow opens the bucket to, and a key that names no object has no tags. Tag keys are
// case-sensitive.
func TestPolicyExistingObjectTag(t *testing.T) {
	_, root, alice := policyServer(t)
	ctx := context.Background()
	mustCreateBucket(t, root, "tagged")
	tag := func(key, k, v string) {
		t.Helper()
		mustPut(t, root, "tagged", key, []byte(key))
		if _, err := root.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String("tagged"), Key: aws.String(key),
			Tagging: &types.Tagging{TagSet: []types.Tag{{Key: aws.String(k), Value: aws.String(v)}, {Key: aws.String("other"), Value: aws.String("x")}}}}); err != nil {
			t.Fatal(err)
		}
	}
	tag("public", "security", "public")
	tag("private", "security", "private")
	tag("upper", "Security", "public")
	tag("secret", "class", "secret")
	const doc = `{"Version":"2012-10-17","Statement":[
		{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::000000000000:user/alice"},"Action":["s3:GetObject","s3:GetObjectVersion","s3:GetObjectTagging"],"Resource":"arn:aws:s3:::tagged/*",
		 "Condition":{"StringEquals":{"s3:ExistingObjectTag/security":"public"}}},
		{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::000000000000:user/alice"},"Action":"s3:PutObject","Resource":"arn:aws:s3:::tagged/*"},
		{"Effect":"Deny","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::tagged/*","Condition":{"StringEquals":{"s3:ExistingObjectTag/class":"secret"}}}]}`
	if _, err := root.PutBucketPolicy(ctx, &s3.PutBucketPolicyInput{Bucket: aws.String("tagged"), Policy: aws.String(doc)}); err != nil {
		t.Fatal(err)
	}
	get := func(c *s3.Client, key string) error {
		out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("tagged"), Key: aws.String(key)})
		if err == nil {
			out.Body.Close()
		}
		return err
	}
	if err := get(alice, "public"); err != nil {
		t.Fatalf("GET of an object whose tag the Allow names: %v", err)
	}
	if _, err := alice.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String("tagged"), Key: aws.String("public")}); err != nil {
		t.Fatalf("GetObjectTagging of an object whose tag the Allow names: %v", err)
	}
	for _, key := range []string{"private", "upper", "secret", "missing"} {
		wantCode(t, get(alice, key), "AccessDenied")
	}
	// The Deny binds every user but the root, whatever opens the bucket to them.
	if err := get(root, "secret"); err != nil {
		t.Fatalf("the root user: %v", err)
	}
	// A copy's source is checked against the source's tags.
	if _, err := alice.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("tagged"), Key: aws.String("copy1"), CopySource: aws.String("tagged/public")}); err != nil {
		t.Fatalf("copy of a public-tagged source: %v", err)
	}
	_, err := alice.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("tagged"), Key: aws.String("copy2"), CopySource: aws.String("tagged/private")})
	wantCode(t, err, "AccessDenied")
	// Retagging changes the decision.
	if _, err := root.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String("tagged"), Key: aws.String("private"),
		Tagging: &types.Tagging{TagSet: []types.Tag{{Key: aws.String("security"), Value: aws.String("public")}}}}); err != nil {
		t.Fatal(err)
	}
	if err := get(alice, "private"); err != nil {
		t.Fatalf("GET after retagging: %v", err)
	}
	// With versions, the version a request names is the one whose tags count.
	if _, err := root.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String("tagged"),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}); err != nil {
		t.Fatal(err)
	}
	v1, err := root.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("tagged"), Key: aws.String("v"), Body: strings.NewReader("v1"), Tagging: aws.String("security=public")})
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, root, "tagged", "v", []byte("v2")) // untagged current version
	wantCode(t, get(alice, "v"), "AccessDenied")
	out, err := alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("tagged"), Key: aws.String("v"), VersionId: v1.VersionId})
	if err != nil {
		t.Fatalf("GET of the tagged version: %v", err)
	}
	out.Body.Close()
	if _, err := alice.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("tagged"), Key: aws.String("vcopy"),
		CopySource: aws.String("tagged/v?versionId=" + aws.ToString(v1.VersionId))}); err != nil {
		t.Fatalf("copy of the tagged version: %v", err)
	}
	_, err = alice.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("tagged"), Key: aws.String("vcopy2"), CopySource: aws.String("tagged/v")})
	wantCode(t, err, "AccessDenied")
}

// TestAnonymousStreamingUpload: an anonymous upload a policy allows, sent as SDKs send an
// unsigned upload (aws-chunked, STREAMING-UNSIGNED-PAYLOAD-TRAILER, a trailing
// checksum), stores the decoded body and checks its checksum; a signed streaming payload
// without a signature is refused. (The framing was stored as the object's bytes, or the
// trailer reported missing.)
func TestAnonymousStreamingUpload(t *testing.T) {
	srv, root, _ := policyServer(t)
	ctx := context.Background()
	mustCreateBucket(t, root, "drop")
	const doc = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:PutObject","Resource":"arn:aws:s3:::drop/*"}]}`
	if _, err := root.PutBucketPolicy(ctx, &s3.PutBucketPolicyInput{Bucket: aws.String("drop"), Policy: aws.String(doc)}); err != nil {
		t.Fatal(err)
	}
	data := []byte("hello, anonymous world")
	sum := crc32.ChecksumIEEE(data)
	good := base64.StdEncoding.EncodeToString([]byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)})
	put := func(key, payload, crc string) (int, string) {
		t.Helper()
		body := fmt.Sprintf("%x\r\n%s\r\n0\r\nx-amz-checksum-crc32:%s\r\n\r\n", len(data), data, crc)
		req, _ := http.NewRequest("PUT", srv.URL+"/drop/"+key, strings.NewReader(body))
		req.Header.Set("Content-Encoding", "aws-chunked")
		req.Header.Set("X-Amz-Content-Sha256", payload)
		req.Header.Set("X-Amz-Decoded-Content-Length", strconv.Itoa(len(data)))
		req.Header.Set("X-Amz-Trailer", "x-amz-checksum-crc32")
		req.Header.Set("X-Amz-Sdk-Checksum-Algorithm", "CRC32")
		return do(t, req)
	}
	if st, body := put("ok", sigv4.StreamingUnsignedPayloadTrailer, good); st != 200 {
		t.Fatalf("anonymous streaming upload: %d %s", st, body)
	}
	if got := mustGet(t, root, "drop", "ok"); !bytes.Equal(got, data) {
		t.Fatalf("stored %q, want %q", got, data)
	}
	st, body := put("bad", sigv4.StreamingUnsignedPayloadTrailer, "AAAAAA==")
	expectS3Error(t, st, body, 400, "BadDigest")
	st, body = put("signed", sigv4.StreamingPayload, good)
	expectS3Error(t, st, body, 400, "InvalidRequest")
	for _, k := range []string{"bad", "signed"} {
		if _, err := srv.Store.StatObject("drop", k); err == nil {
			t.Fatalf("refused upload %s stored an object", k)
		}
	}
}
