package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// userClient is an S3 client of node i signing with a user's key.
func (tc *testCluster) userClient(i int, access, secret string) *s3.Client {
	return s3.New(s3.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(tc.procs[i].URL()),
		UsePathStyle:     true,
		Credentials:      credentials.NewStaticCredentialsProvider(access, secret, ""),
		RetryMaxAttempts: 1,
		HTTPClient:       &http.Client{Timeout: 30 * time.Second},
	})
}

type newKeyJSON struct {
	User      string `json:"user"`
	AccessKey string `json:"access_key"`
	SecretKey string `json:"secret_key"`
}

func s3Code(err error) string {
	var ae interface{ ErrorCode() string }
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// TestUsersAndKeys: users made with cairn admin through one node sign requests on every
// node; each user lists only its buckets and is refused another's (reads, writes,
// listings, copies from it, and creating it) beyond its grants (a prefix to read and
// write, a bucket to own); a revoked key is refused by every node
// within seconds, presigned URLs made with it too; a disabled user's keys are refused
// until it is enabled again; a user that owns buckets cannot be removed; no node stores
// a user's secret in the clear; a bucket policy opens a bucket to anonymous reads on every
// node, and Block Public Access closes it.
func TestUsersAndKeys(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := context.Background()
	admin := func(args ...string) string {
		t.Helper()
		out, err := tc.admin(1, args...)
		if err != nil {
			t.Fatalf("cairn admin %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	newUser := func(name string) newKeyJSON {
		var k newKeyJSON
		if err := json.Unmarshal([]byte(admin("--json", "user", "add", name)), &k); err != nil || k.AccessKey == "" || k.SecretKey == "" || k.User != name {
			t.Fatalf("user add %s: %+v %v", name, k, err)
		}
		return k
	}
	alice, bob := newUser("alice"), newUser("bob")
	ac, bc := tc.userClient(2, alice.AccessKey, alice.SecretKey), tc.userClient(0, bob.AccessKey, bob.SecretKey)
	// A node learns of a new key with the map: wait for the first request to pass.
	proctest.WaitFor(t, 10*time.Second, func() error {
		_, err := ac.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("alice-b")})
		return err
	})
	proctest.WaitFor(t, 10*time.Second, func() error {
		_, err := bc.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("bob-b")})
		return err
	})
	tc.createBucket(0, "root-b")
	if _, err := ac.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("alice-b"), Key: aws.String("k"), Body: strings.NewReader("alice's")}); err != nil {
		t.Fatal(err)
	}

	names := func(c *s3.Client) []string {
		out, err := c.ListBuckets(ctx, &s3.ListBucketsInput{})
		if err != nil {
			t.Fatal(err)
		}
		var ns []string
		for _, b := range out.Buckets {
			ns = append(ns, *b.Name)
		}
		return ns
	}
	if got := names(ac); !slices.Equal(got, []string{"alice-b"}) {
		t.Fatalf("alice lists %v", got)
	}
	if got := names(bc); !slices.Equal(got, []string{"bob-b"}) {
		t.Fatalf("bob lists %v", got)
	}
	// root-b was made through node 1; node 2's map learns it by Raft replication, a moment
	// after the create was answered (a bucket list through another gateway is not
	// read-after-write: docs/design/20261123_cluster.md).
	proctest.WaitFor(t, 10*time.Second, func() error {
		if got := names(tc.procs[1].client()); !slices.Equal(got, []string{"alice-b", "bob-b", "root-b"}) {
			return fmt.Errorf("root lists %v", got)
		}
		return nil
	})

	for _, tcase := range []struct {
		name string
		call func() error
		want string
	}{
		{"get", func() error {
			_, err := bc.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("alice-b"), Key: aws.String("k")})
			return err
		}, "AccessDenied"},
		{"put", func() error {
			_, err := bc.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("alice-b"), Key: aws.String("x"), Body: strings.NewReader("bob's")})
			return err
		}, "AccessDenied"},
		{"list", func() error {
			_, err := bc.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("alice-b")})
			return err
		}, "AccessDenied"},
		{"delete", func() error {
			_, err := bc.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("alice-b"), Key: aws.String("k")})
			return err
		}, "AccessDenied"},
		{"copy from", func() error {
			_, err := bc.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("bob-b"), Key: aws.String("stolen"), CopySource: aws.String("alice-b/k")})
			return err
		}, "AccessDenied"},
		{"root's bucket", func() error {
			_, err := bc.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("root-b"), Key: aws.String("x"), Body: strings.NewReader("bob's")})
			return err
		}, "AccessDenied"},
		{"create another's", func() error {
			_, err := bc.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("alice-b")})
			return err
		}, "BucketAlreadyExists"},
		{"create own again", func() error {
			_, err := ac.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("alice-b")})
			return err
		}, "ok"},
		{"missing bucket", func() error {
			_, err := bc.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("nobody-b")})
			return err
		}, "NoSuchBucket"},
		{"root reads alice's", func() error {
			_, err := tc.procs[2].client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("alice-b"), Key: aws.String("k")})
			return err
		}, "ok"},
	} {
		if got := s3Code(tcase.call()); got != tcase.want {
			t.Errorf("%s: %s, want %s", tcase.name, got, tcase.want)
		}
	}

	// Grants: dave may read and write root-b's keys under logs/, and own bob-b.
	dave := newUser("dave")
	dc := tc.userClient(1, dave.AccessKey, dave.SecretKey)
	admin("user", "grant", "dave", "root-b/logs/", "readwrite")
	admin("user", "grant", "dave", "bob-b", "owner")
	if _, err := tc.procs[0].client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("root-b"), Key: aws.String("other/x"), Body: strings.NewReader("root's")}); err != nil {
		t.Fatal(err)
	}
	proctest.WaitFor(t, 10*time.Second, func() error {
		_, err := dc.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("root-b"), Key: aws.String("logs/a"), Body: strings.NewReader("dave's")})
		return err
	})
	for _, tcase := range []struct {
		name string
		call func() error
		want string
	}{
		{"get under the prefix", func() error {
			_, err := dc.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("root-b"), Key: aws.String("logs/a")})
			return err
		}, "ok"},
		{"list the prefix", func() error {
			_, err := dc.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("root-b"), Prefix: aws.String("logs/")})
			return err
		}, "ok"},
		{"list the bucket", func() error {
			_, err := dc.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("root-b")})
			return err
		}, "AccessDenied"},
		{"get beside the prefix", func() error {
			_, err := dc.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("root-b"), Key: aws.String("other/x")})
			return err
		}, "AccessDenied"},
		{"put beside the prefix", func() error {
			_, err := dc.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("root-b"), Key: aws.String("other/y"), Body: strings.NewReader("no")})
			return err
		}, "AccessDenied"},
		{"copy out of the prefix", func() error {
			_, err := dc.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("root-b"), Key: aws.String("logs/copy"), CopySource: aws.String("root-b/other/x")})
			return err
		}, "AccessDenied"},
		{"bucket configuration", func() error {
			_, err := dc.DeleteBucketCors(ctx, &s3.DeleteBucketCorsInput{Bucket: aws.String("root-b")})
			return err
		}, "AccessDenied"},
		{"owner grant", func() error {
			_, err := dc.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bob-b"), Key: aws.String("anything"), Body: strings.NewReader("dave's")})
			return err
		}, "ok"},
	} {
		if got := s3Code(tcase.call()); got != tcase.want {
			t.Errorf("grant: %s: %s, want %s", tcase.name, got, tcase.want)
		}
	}
	del, err := dc.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("root-b"), Delete: &types.Delete{Objects: []types.ObjectIdentifier{{Key: aws.String("logs/a")}, {Key: aws.String("other/x")}}}})
	if err != nil || len(del.Deleted) != 1 || *del.Deleted[0].Key != "logs/a" || len(del.Errors) != 1 || *del.Errors[0].Code != "AccessDenied" {
		t.Fatalf("DeleteObjects across the prefix: %+v %v", del, err)
	}
	if _, err := tc.procs[0].client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("root-b"), Key: aws.String("other/x")}); err != nil {
		t.Fatalf("the object beside the prefix: %v", err)
	}
	admin("user", "grant", "dave", "root-b/logs/", "none")
	proctest.WaitFor(t, 10*time.Second, func() error {
		_, err := dc.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("root-b"), Key: aws.String("logs/copy")})
		if s3Code(err) != "Forbidden" && s3Code(err) != "AccessDenied" {
			return fmt.Errorf("after the grant was removed: %v", err)
		}
		return nil
	})

	// A bucket policy set through one node opens the bucket to anonymous reads on every
	// node; Block Public Access set through another closes it again everywhere.
	rootC := tc.procs[0].client()
	if _, err := rootC.PutBucketPolicy(ctx, &s3.PutBucketPolicyInput{Bucket: aws.String("root-b"), Policy: aws.String(
		`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::root-b/other/*"}]}`)}); err != nil {
		t.Fatal(err)
	}
	anon := func(i int) int {
		resp, err := http.Get(tc.procs[i].URL() + "/root-b/other/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range tc.procs {
		proctest.WaitFor(t, 10*time.Second, func() error {
			if st := anon(i); st != 200 {
				return fmt.Errorf("node %d: anonymous GET of a public object: %d", i, st)
			}
			return nil
		})
	}
	if _, err := tc.procs[1].client().PutPublicAccessBlock(ctx, &s3.PutPublicAccessBlockInput{Bucket: aws.String("root-b"),
		PublicAccessBlockConfiguration: &types.PublicAccessBlockConfiguration{RestrictPublicBuckets: aws.Bool(true)}}); err != nil {
		t.Fatal(err)
	}
	for i := range tc.procs {
		proctest.WaitFor(t, 10*time.Second, func() error {
			if st := anon(i); st != 403 {
				return fmt.Errorf("node %d: anonymous GET with RestrictPublicBuckets: %d", i, st)
			}
			return nil
		})
	}

	if out, err := tc.admin(0, "user", "remove", "alice"); err == nil || !strings.Contains(out, "alice-b") {
		t.Fatalf("removing a user that owns a bucket: %v\n%s", err, out)
	}
	if out := admin("user", "list"); !strings.Contains(out, "alice") || !strings.Contains(out, "root") {
		t.Fatalf("user list:\n%s", out)
	}
	for i, p := range tc.procs {
		for _, k := range []newKeyJSON{alice, bob} {
			if files := filesHolding(t, p.DataDir(), k.SecretKey); len(files) > 0 {
				t.Fatalf("node %d holds %s's secret in the clear in %v", i, k.User, files)
			}
		}
	}

	// A presigned URL made with alice's key works, then not once the key is revoked:
	// on every node, within seconds.
	var urls []string // one per node: the host is signed
	for i := range tc.procs {
		req, err := s3.NewPresignClient(tc.userClient(i, alice.AccessKey, alice.SecretKey)).PresignGetObject(ctx,
			&s3.GetObjectInput{Bucket: aws.String("alice-b"), Key: aws.String("k")}, s3.WithPresignExpires(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, req.URL)
	}
	presigned := func(i int) (int, string) {
		resp, err := http.Get(urls[i])
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i := range tc.procs {
		if st, body := presigned(i); st != 200 || body != "alice's" {
			t.Fatalf("presigned GET through node %d before revoking: %d %s", i, st, body)
		}
	}
	admin("key", "revoke", "alice", alice.AccessKey)
	start := time.Now()
	for i := range tc.procs {
		proctest.WaitFor(t, 10*time.Second, func() error {
			if st, body := presigned(i); st != 403 || !strings.Contains(body, "InvalidAccessKeyId") {
				return fmt.Errorf("node %d answers a presigned URL of a revoked key with %d %s", i, st, body)
			}
			if _, err := tc.userClient(i, alice.AccessKey, alice.SecretKey).ListBuckets(ctx, &s3.ListBucketsInput{}); s3Code(err) != "InvalidAccessKeyId" {
				return fmt.Errorf("node %d: a revoked key: %v", i, err)
			}
			return nil
		})
	}
	t.Logf("the revoked key was refused by every node %v after the revoke returned", time.Since(start).Round(time.Millisecond))

	// Disabled, bob's key is refused everywhere; enabled again, accepted.
	admin("user", "disable", "bob")
	for i := range tc.procs {
		proctest.WaitFor(t, 10*time.Second, func() error {
			if _, err := tc.userClient(i, bob.AccessKey, bob.SecretKey).ListBuckets(ctx, &s3.ListBucketsInput{}); s3Code(err) != "InvalidAccessKeyId" {
				return fmt.Errorf("node %d: a disabled user's key: %v", i, err)
			}
			return nil
		})
	}
	admin("user", "enable", "bob")
	proctest.WaitFor(t, 10*time.Second, func() error {
		_, err := bc.ListBuckets(ctx, &s3.ListBucketsInput{})
		return err
	})
	// A second key of bob's works beside the first; the root user cannot be disabled.
	var k2 newKeyJSON
	if err := json.Unmarshal([]byte(admin("--json", "key", "create", "bob")), &k2); err != nil || k2.AccessKey == bob.AccessKey {
		t.Fatalf("key create: %+v %v", k2, err)
	}
	proctest.WaitFor(t, 10*time.Second, func() error {
		_, err := tc.userClient(1, k2.AccessKey, k2.SecretKey).HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("bob-b")})
		return err
	})
	if out, err := tc.admin(0, "user", "disable", "root"); err == nil {
		t.Fatalf("disabling the root user was accepted:\n%s", out)
	}
	if out := admin("key", "list", "bob"); strings.Count(out, "bob") != 2 || strings.Contains(out, k2.SecretKey) {
		t.Fatalf("key list bob:\n%s", out)
	}
}
