package s3api_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// TestListObjectVersions: on a bucket that was never versioned every object is its one
// version, "null", the latest, with no delete markers; the SDK's paginator pages through
// key-marker and version-id-marker, with and without a delimiter; the clean-up loop SDK
// tools run (list versions, delete each by version id) empties the bucket.
func TestListObjectVersions(t *testing.T) {
	_, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "bkt")
	keys := []string{"a.txt", "photos/2024/x.jpg", "photos/2024/y.jpg", "photos/2025/z.jpg", "photos/top.jpg", "sp ace/+plus", "zeta"}
	etags := map[string]string{}
	for _, k := range keys {
		etags[k] = *mustPut(t, c, "bkt", k, []byte("body of "+k)).ETag
	}
	mustPut(t, c, "bkt", "deleted", []byte("x"))
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("bkt"), Key: aws.String("deleted")}); err != nil {
		t.Fatal(err)
	}

	list := func(in *s3.ListObjectVersionsInput) (versions, prefixes []string, pages int) {
		t.Helper()
		p := s3.NewListObjectVersionsPaginator(c, in)
		for p.HasMorePages() {
			out, err := p.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(out.DeleteMarkers) != 0 {
				t.Fatalf("delete markers in an unversioned bucket: %+v", out.DeleteMarkers)
			}
			for _, v := range out.Versions {
				if aws.ToString(v.VersionId) != "null" || !aws.ToBool(v.IsLatest) || aws.ToString(v.ETag) != etags[*v.Key] ||
					aws.ToInt64(v.Size) != int64(len("body of "+*v.Key)) || v.StorageClass != types.ObjectVersionStorageClassStandard || v.Owner == nil {
					t.Fatalf("version %+v", v)
				}
				versions = append(versions, *v.Key)
			}
			for _, cp := range out.CommonPrefixes {
				prefixes = append(prefixes, *cp.Prefix)
			}
		}
		return versions, prefixes, pages
	}
	if v, p, n := list(&s3.ListObjectVersionsInput{Bucket: aws.String("bkt")}); fmt.Sprint(v) != fmt.Sprint(keys) || len(p) != 0 || n != 1 {
		t.Fatalf("all versions: %q %q in %d pages", v, p, n)
	}
	if v, _, n := list(&s3.ListObjectVersionsInput{Bucket: aws.String("bkt"), MaxKeys: aws.Int32(2)}); fmt.Sprint(v) != fmt.Sprint(keys) || n != 4 {
		t.Fatalf("paged by 2: %q in %d pages", v, n)
	}
	v, p, _ := list(&s3.ListObjectVersionsInput{Bucket: aws.String("bkt"), Prefix: aws.String("photos/"), Delimiter: aws.String("/"), MaxKeys: aws.Int32(1)})
	if fmt.Sprint(v) != "[photos/top.jpg]" || fmt.Sprint(p) != "[photos/2024/ photos/2025/]" {
		t.Fatalf("delimiter, paged by 1: versions %q prefixes %q", v, p)
	}
	out, err := c.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String("bkt"), KeyMarker: aws.String("photos/top.jpg"), VersionIdMarker: aws.String("null")})
	if err != nil || len(out.Versions) != 2 || *out.Versions[0].Key != "sp ace/+plus" {
		t.Fatalf("after photos/top.jpg: %v %+v", err, out)
	}

	for _, tc := range []struct {
		name string
		in   *s3.ListObjectVersionsInput
		code string
	}{
		{"version marker without key marker", &s3.ListObjectVersionsInput{Bucket: aws.String("bkt"), VersionIdMarker: aws.String("null")}, "InvalidArgument"},
		{"unknown version marker", &s3.ListObjectVersionsInput{Bucket: aws.String("bkt"), KeyMarker: aws.String("a.txt"), VersionIdMarker: aws.String("3HL4kqtJlcpXroDTDmJ")}, "InvalidArgument"},
		{"missing bucket", &s3.ListObjectVersionsInput{Bucket: aws.String("missing-bucket")}, "NoSuchBucket"},
	} {
		_, err := c.ListObjectVersions(ctx, tc.in)
		t.Run(tc.name, func(t *testing.T) { wantCode(t, err, tc.code) })
	}

	// The clean-up loop of SDK-based tools: every version deleted by its id.
	p2 := s3.NewListObjectVersionsPaginator(c, &s3.ListObjectVersionsInput{Bucket: aws.String("bkt"), MaxKeys: aws.Int32(3)})
	for p2.HasMorePages() {
		page, err := p2.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []types.ObjectIdentifier
		for _, v := range page.Versions {
			ids = append(ids, types.ObjectIdentifier{Key: v.Key, VersionId: v.VersionId})
		}
		if len(ids) == 0 {
			continue
		}
		res, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("bkt"), Delete: &types.Delete{Objects: ids}})
		if err != nil || len(res.Errors) != 0 {
			t.Fatalf("deleting versions: %v %+v", err, res.Errors)
		}
	}
	if _, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("bkt")}); err != nil {
		t.Fatalf("the bucket is not empty after every version was deleted: %v", err)
	}
}
