package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairnfs/cairn/internal/sigv4"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// TestClusterS3Features runs GetObjectAttributes, bodies without a length and object ACLs
// through every gateway of one 3-node cluster: what one gateway stored, every other
// answers. (Tagging, CORS and POST uploads have their own cluster tests.)
func TestClusterS3Features(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := context.Background()
	tc.createBucket(0, "feat")
	c := func(i int) *s3.Client { return tc.procs[i].client() }

	t.Run("attributes", func(t *testing.T) {
		cr, err := c(0).CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("feat"), Key: aws.String("mp"),
			ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c, ChecksumType: types.ChecksumTypeFullObject})
		if err != nil {
			t.Fatal(err)
		}
		var parts []types.CompletedPart
		sizes := []int{5 << 20, 1000}
		for i, n := range sizes {
			up, err := c(i).UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("feat"), Key: aws.String("mp"), UploadId: cr.UploadId,
				PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(bytes.Repeat([]byte{byte(i)}, n)), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c})
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, types.CompletedPart{ETag: up.ETag, PartNumber: aws.Int32(int32(i + 1)), ChecksumCRC32C: up.ChecksumCRC32C})
		}
		done, err := c(1).CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("feat"), Key: aws.String("mp"), UploadId: cr.UploadId,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
		if err != nil {
			t.Fatal(err)
		}
		for i := range tc.procs {
			a, err := c(i).GetObjectAttributes(ctx, &s3.GetObjectAttributesInput{Bucket: aws.String("feat"), Key: aws.String("mp"),
				ObjectAttributes: []types.ObjectAttributes{types.ObjectAttributesEtag, types.ObjectAttributesChecksum, types.ObjectAttributesObjectParts, types.ObjectAttributesObjectSize}})
			if err != nil {
				t.Fatalf("node %d: %v", i, err)
			}
			if `"`+aws.ToString(a.ETag)+`"` != aws.ToString(done.ETag) || aws.ToInt64(a.ObjectSize) != 5<<20+1000 || a.ObjectParts == nil ||
				aws.ToInt32(a.ObjectParts.TotalPartsCount) != 2 || len(a.ObjectParts.Parts) != 2 || aws.ToInt64(a.ObjectParts.Parts[1].Size) != 1000 ||
				a.Checksum == nil || aws.ToString(a.Checksum.ChecksumCRC32C) != aws.ToString(done.ChecksumCRC32C) {
				t.Fatalf("node %d: etag %s size %d checksum %+v parts %+v; completed %s %s", i, aws.ToString(a.ETag), aws.ToInt64(a.ObjectSize), a.Checksum, a.ObjectParts, aws.ToString(done.ETag), aws.ToString(done.ChecksumCRC32C))
			}
			for j, p := range a.ObjectParts.Parts {
				if aws.ToString(p.ChecksumCRC32C) != aws.ToString(parts[j].ChecksumCRC32C) {
					t.Fatalf("node %d: part %d checksum %q, want %q", i, j+1, aws.ToString(p.ChecksumCRC32C), aws.ToString(parts[j].ChecksumCRC32C))
				}
			}
		}
	})

	t.Run("chunked without a length", func(t *testing.T) {
		data := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16) // past the small-body path: streamed to the replicas
		r, err := http.NewRequest("PUT", tc.procs[2].URL()+"/feat/chunked", io.NopCloser(bytes.NewReader(data)))
		if err != nil {
			t.Fatal(err)
		}
		r.ContentLength = -1 // net/http sends it chunked
		sigv4.SignRequest(r, testAccess, testSecret, "us-east-1", "UNSIGNED-PAYLOAD", time.Now())
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("put: %d %s", resp.StatusCode, b)
		}
		for i := range tc.procs {
			got, err := getBody(ctx, c(i), "feat", "chunked")
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("node %d: %d bytes, %v", i, len(got), err)
			}
		}
	})

	t.Run("object ACL", func(t *testing.T) {
		// Object Ownership that enables ACLs is a level-5 configuration: the leader takes
		// it once every node has answered its probes at that level.
		tc.createBucket(0, "aclb")
		proctest.WaitFor(t, 20*time.Second, func() error {
			_, err := c(0).PutBucketOwnershipControls(ctx, &s3.PutBucketOwnershipControlsInput{Bucket: aws.String("aclb"),
				OwnershipControls: &types.OwnershipControls{Rules: []types.OwnershipControlsRule{{ObjectOwnership: types.ObjectOwnershipObjectWriter}}}})
			return err
		})
		if _, err := c(1).PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("aclb"), Key: aws.String("k"), Body: bytes.NewReader([]byte("public soon"))}); err != nil {
			t.Fatal(err)
		}
		anonGET := func(i int) int {
			resp, err := http.Get(tc.procs[i].URL() + "/aclb/k")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}
		for i := range tc.procs { // read once, so that a gateway could have it cached
			if st := anonGET(i); st != 403 {
				t.Fatalf("node %d: anonymous GET of a private object: %d", i, st)
			}
		}
		setACL := func(i int, acl types.ObjectCannedACL) {
			proctest.WaitFor(t, 20*time.Second, func() error { // the map's feature level may be on its way
				_, err := c(i).PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("aclb"), Key: aws.String("k"), ACL: acl})
				return err
			})
		}
		// Made public through node 2: every node (deciding from its own map and the
		// object's record) lets anonymous GETs through; private again through node 0:
		// none does.
		for _, step := range []struct {
			node int
			acl  types.ObjectCannedACL
			want int
		}{{2, types.ObjectCannedACLPublicRead, 200}, {0, types.ObjectCannedACLPrivate, 403}} {
			setACL(step.node, step.acl)
			for i := range tc.procs {
				proctest.WaitFor(t, 10*time.Second, func() error {
					if st := anonGET(i); st != step.want {
						return fmt.Errorf("node %d: anonymous GET after %s through node %d: %d, want %d", i, step.acl, step.node, st, step.want)
					}
					return nil
				})
			}
			got, err := c(1).GetObjectAcl(ctx, &s3.GetObjectAclInput{Bucket: aws.String("aclb"), Key: aws.String("k")})
			if err != nil || (len(got.Grants) == 2) != (step.acl == types.ObjectCannedACLPublicRead) {
				t.Fatalf("GetObjectAcl through node 1 after %s: %+v %v", step.acl, got, err)
			}
		}

		// Explicit grants to another user (feature level 9): a bucket grant set through
		// node 0 and an object grant through node 2 hold on every node; a new ACL through
		// node 1 revokes both everywhere.
		out, err := tc.admin(1, "--json", "user", "add", "grantee")
		var k newKeyJSON
		if err != nil || json.Unmarshal([]byte(out), &k) != nil || k.AccessKey == "" {
			t.Fatalf("user add: %v %s", err, out)
		}
		sum := sha256.Sum256([]byte("cairn-user:grantee"))
		grant := aws.String(`id="` + hex.EncodeToString(sum[:]) + `"`)
		proctest.WaitFor(t, 20*time.Second, func() error {
			_, err := c(0).PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("aclb"), GrantRead: grant})
			return err
		})
		proctest.WaitFor(t, 20*time.Second, func() error {
			_, err := c(2).PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("aclb"), Key: aws.String("k"), GrantRead: grant})
			return err
		})
		can := func(i int, want string) {
			u := tc.userClient(i, k.AccessKey, k.SecretKey)
			proctest.WaitFor(t, 10*time.Second, func() error {
				_, lerr := u.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("aclb")})
				_, gerr := u.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("aclb"), Key: aws.String("k")})
				_, perr := u.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("aclb"), Key: aws.String("g"), Body: strings.NewReader("x")})
				if s3Code(lerr) != want || s3Code(gerr) != want || s3Code(perr) != "AccessDenied" {
					return fmt.Errorf("node %d: the grantee's list %v, get %v, put %v; want %s", i, lerr, gerr, perr, want)
				}
				return nil
			})
		}
		for i := range tc.procs {
			can(i, "ok")
		}
		if _, err := c(1).PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("aclb"), ACL: types.BucketCannedACLPrivate}); err != nil {
			t.Fatal(err)
		}
		if _, err := c(1).PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String("aclb"), Key: aws.String("k"), ACL: types.ObjectCannedACLPrivate}); err != nil {
			t.Fatal(err)
		}
		for i := range tc.procs {
			can(i, "AccessDenied")
		}
	})
}
