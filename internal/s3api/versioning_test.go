package s3api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// listVersions returns every version of bucket as "key@id[*]" (* latest, dm: a delete
// marker), paging max at a time.
func listVersions(t *testing.T, c *s3.Client, bucket string, max int32) []string {
	t.Helper()
	var out []string
	in := &s3.ListObjectVersionsInput{Bucket: aws.String(bucket), MaxKeys: aws.Int32(max)}
	for {
		res, err := c.ListObjectVersions(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		// Versions and delete markers come in separate lists: merge them back in
		// order (key, then newest first: ids grow with time, null aside).
		type e struct {
			key, id string
			latest  bool
			marker  bool
		}
		var es []e
		for _, v := range res.Versions {
			es = append(es, e{aws.ToString(v.Key), aws.ToString(v.VersionId), aws.ToBool(v.IsLatest), false})
		}
		for _, m := range res.DeleteMarkers {
			es = append(es, e{aws.ToString(m.Key), aws.ToString(m.VersionId), aws.ToBool(m.IsLatest), true})
		}
		for _, x := range es {
			s := x.key + "@" + x.id
			if x.marker {
				s += "dm"
			}
			if x.latest {
				s += "*"
			}
			out = append(out, s)
		}
		if !aws.ToBool(res.IsTruncated) {
			slices.Sort(out) // the SDK splits versions from delete markers: compare as sets
			return out
		}
		in.KeyMarker, in.VersionIdMarker = res.NextKeyMarker, res.NextVersionIdMarker
	}
}

func getVersion(t *testing.T, c *s3.Client, bucket, key, id string) ([]byte, error) {
	t.Helper()
	out, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), VersionId: aws.String(id)})
	if err != nil {
		return nil, err
	}
	defer out.Body.Close()
	if aws.ToString(out.VersionId) != id {
		t.Fatalf("GET of version %s answered version %s", id, aws.ToString(out.VersionId))
	}
	return io.ReadAll(out.Body)
}

func sortedList(s ...string) string {
	slices.Sort(s)
	return fmt.Sprint(s)
}

// TestVersioning runs S3 versioning through the SDK on one node: overwrite, delete,
// restore, permanent deletes, suspension and the null version, listings and paging.
func TestVersioning(t *testing.T) {
	_, c := setup(t)
	ctx := context.Background()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("vers")}); err != nil {
		t.Fatal(err)
	}
	// Never enabled: one null version per key, and GetBucketVersioning says nothing.
	mustPut(t, c, "vers", "a", []byte("a0"))
	if got := listVersions(t, c, "vers", 1000); fmt.Sprint(got) != "[a@null*]" {
		t.Fatalf("unversioned listing: %q", got)
	}
	if vc, err := c.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String("vers")}); err != nil || vc.Status != "" {
		t.Fatalf("versioning of a new bucket: %+v %v", vc, err)
	}
	if hd, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("vers"), Key: aws.String("a")}); err != nil || hd.VersionId != nil {
		t.Fatalf("HEAD in a bucket never versioned names a version: %v %v", hd, err)
	}
	setVersioning := func(s types.BucketVersioningStatus) {
		t.Helper()
		if _, err := c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String("vers"),
			VersioningConfiguration: &types.VersioningConfiguration{Status: s}}); err != nil {
			t.Fatal(err)
		}
		if vc, err := c.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String("vers")}); err != nil || vc.Status != s {
			t.Fatalf("versioning after setting %s: %+v %v", s, vc, err)
		}
	}
	setVersioning(types.BucketVersioningStatusEnabled)

	// Three versions of "a" on top of the null one.
	var ids []string
	for i := 1; i <= 3; i++ {
		out := mustPut(t, c, "vers", "a", []byte(fmt.Sprintf("a%d", i)))
		if out.VersionId == nil || *out.VersionId == "null" {
			t.Fatalf("PUT in a versioned bucket answered version %v", out.VersionId)
		}
		ids = append(ids, *out.VersionId)
	}
	for i, id := range ids {
		if b, err := getVersion(t, c, "vers", "a", id); err != nil || string(b) != fmt.Sprintf("a%d", i+1) {
			t.Fatalf("version %d: %q %v", i+1, b, err)
		}
	}
	if b, err := getVersion(t, c, "vers", "a", "null"); err != nil || string(b) != "a0" {
		t.Fatalf("null version: %q %v", b, err)
	}
	if got := string(mustGet(t, c, "vers", "a")); got != "a3" {
		t.Fatalf("current: %q", got)
	}

	// A delete makes a marker: the key is gone, its versions stay.
	del, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("vers"), Key: aws.String("a")})
	if err != nil || !aws.ToBool(del.DeleteMarker) || del.VersionId == nil {
		t.Fatalf("delete: %+v %v", del, err)
	}
	marker := *del.VersionId
	if _, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("vers"), Key: aws.String("a")}); apiCode(err) != "NoSuchKey" {
		t.Fatalf("GET after delete: %v", err)
	}
	if _, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("vers"), Key: aws.String("a"), VersionId: aws.String(marker)}); err == nil {
		t.Fatal("HEAD of a delete marker by its id succeeded")
	}
	want := sortedList("a@"+marker+"dm*", "a@"+ids[2], "a@"+ids[1], "a@"+ids[0], "a@null")
	if got := listVersions(t, c, "vers", 1000); fmt.Sprint(got) != want {
		t.Fatalf("after delete:\n got %q\nwant %s", got, want)
	}
	// Paging one entry at a time gives the same listing.
	if got := listVersions(t, c, "vers", 1); fmt.Sprint(got) != want {
		t.Fatalf("paged by one:\n got %q\nwant %s", got, want)
	}
	// Restore: delete the marker, the newest version is back.
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("vers"), Key: aws.String("a"), VersionId: aws.String(marker)}); err != nil {
		t.Fatal(err)
	}
	if got := string(mustGet(t, c, "vers", "a")); got != "a3" {
		t.Fatalf("after removing the marker: %q", got)
	}
	// Restore an older version by copying it over the key.
	cp, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("vers"), Key: aws.String("a"), CopySource: aws.String("vers/a?versionId=" + ids[0])})
	if err != nil || aws.ToString(cp.CopySourceVersionId) != ids[0] {
		t.Fatalf("copy of a version: %+v %v", cp, err)
	}
	if got := string(mustGet(t, c, "vers", "a")); got != "a1" {
		t.Fatalf("after restoring by copy: %q", got)
	}
	// Tags of a noncurrent version, set and read by its id; the current one's stay.
	if _, err := c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String("vers"), Key: aws.String("a"), VersionId: aws.String(ids[2]),
		Tagging: &types.Tagging{TagSet: []types.Tag{{Key: aws.String("old"), Value: aws.String("yes")}}}}); err != nil {
		t.Fatal(err)
	}
	if tg, err := c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String("vers"), Key: aws.String("a"), VersionId: aws.String(ids[2])}); err != nil ||
		len(tg.TagSet) != 1 || aws.ToString(tg.VersionId) != ids[2] {
		t.Fatalf("tags of a noncurrent version: %+v %v", tg, err)
	}
	if tg, err := c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String("vers"), Key: aws.String("a")}); err != nil || len(tg.TagSet) != 0 {
		t.Fatalf("tags of the current version: %+v %v", tg, err)
	}
	// Permanent deletes: a middle version, then the current one.
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("vers"), Key: aws.String("a"), VersionId: aws.String(ids[1])}); err != nil {
		t.Fatal(err)
	}
	if _, err := getVersion(t, c, "vers", "a", ids[1]); apiCode(err) != "NoSuchVersion" {
		t.Fatalf("GET of a deleted version: %v", err)
	}
	cur := aws.ToString(cp.VersionId)
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("vers"), Key: aws.String("a"), VersionId: aws.String(cur)}); err != nil {
		t.Fatal(err)
	}
	if got := string(mustGet(t, c, "vers", "a")); got != "a3" {
		t.Fatalf("after deleting the current version for good: %q", got)
	}

	// Suspended: writes replace the null version, other versions stay.
	setVersioning(types.BucketVersioningStatusSuspended)
	// A write while suspended makes the null version and answers no x-amz-version-id
	// (the PutObject reference's "versioning suspended" example), nor does a copy or a
	// completed multipart upload.
	out := mustPut(t, c, "vers", "a", []byte("s1"))
	if out.VersionId != nil {
		t.Fatalf("PUT while suspended answered version %q", *out.VersionId)
	}
	cpS, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("vers"), Key: aws.String("copy"), CopySource: aws.String("vers/a")})
	if err != nil || cpS.VersionId != nil {
		t.Fatalf("CopyObject while suspended: version %v, %v", cpS, err)
	}
	mp, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("vers"), Key: aws.String("mp")})
	if err != nil {
		t.Fatal(err)
	}
	part, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("vers"), Key: aws.String("mp"), UploadId: mp.UploadId,
		PartNumber: aws.Int32(1), Body: strings.NewReader("p")})
	if err != nil {
		t.Fatal(err)
	}
	done, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("vers"), Key: aws.String("mp"), UploadId: mp.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{ETag: part.ETag, PartNumber: aws.Int32(1)}}}})
	if err != nil || done.VersionId != nil {
		t.Fatalf("CompleteMultipartUpload while suspended: version %v, %v", done, err)
	}
	// Reads of the null version name it, once the bucket has a versioning status.
	if hd, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("vers"), Key: aws.String("a")}); err != nil || aws.ToString(hd.VersionId) != "null" {
		t.Fatalf("HEAD of the null version while suspended: %v %v", hd, err)
	}
	if g, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("vers"), Key: aws.String("a")}); err != nil || aws.ToString(g.VersionId) != "null" {
		t.Fatalf("GET of the null version while suspended: %v %v", g, err)
	} else {
		g.Body.Close()
	}
	for _, k := range []string{"copy", "mp"} {
		if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("vers"), Key: aws.String(k), VersionId: aws.String("null")}); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := getVersion(t, c, "vers", "a", "null"); err != nil || string(b) != "s1" {
		t.Fatalf("null version while suspended: %q %v", b, err)
	}
	want = sortedList("a@null*", "a@"+ids[2], "a@"+ids[0])
	if got := listVersions(t, c, "vers", 1000); fmt.Sprint(got) != want {
		t.Fatalf("suspended:\n got %q\nwant %s", got, want)
	}
	// A delete while suspended is a null delete marker.
	del, err = c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("vers"), Key: aws.String("a")})
	if err != nil || !aws.ToBool(del.DeleteMarker) || aws.ToString(del.VersionId) != "null" {
		t.Fatalf("delete while suspended: %+v %v", del, err)
	}

	// Multi-delete with versions; a bucket with versions is not empty.
	res, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("vers"), Delete: &types.Delete{Objects: []types.ObjectIdentifier{
		{Key: aws.String("a"), VersionId: aws.String(ids[0])}, {Key: aws.String("a"), VersionId: aws.String(ids[2])}}}})
	if err != nil || len(res.Deleted) != 2 || len(res.Errors) != 0 {
		t.Fatalf("multi-delete of versions: %+v %v", res, err)
	}
	if _, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("vers")}); apiCode(err) != "BucketNotEmpty" {
		t.Fatalf("delete of a bucket holding a delete marker: %v", err)
	}
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("vers"), Key: aws.String("a"), VersionId: aws.String("null")}); err != nil {
		t.Fatal(err)
	}
	if got := listVersions(t, c, "vers", 1000); len(got) != 0 {
		t.Fatalf("versions left: %q", got)
	}
	if _, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("vers")}); err != nil {
		t.Fatal(err)
	}
}

// TestVersionsPaging lists many keys with several versions each, with a delimiter and
// small pages.
func TestVersionsPaging(t *testing.T) {
	_, c := setup(t)
	ctx := context.Background()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("pages")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String("pages"),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for k := 0; k < 7; k++ {
		for v := 0; v <= k%3; v++ {
			mustPut(t, c, "pages", fmt.Sprintf("d%d/k%d", k%2, k), bytes.Repeat([]byte{'x'}, v))
			n++
		}
	}
	full := listVersions(t, c, "pages", 1000)
	if len(full) != n {
		t.Fatalf("%d versions listed, %d written", len(full), n)
	}
	for _, page := range []int32{1, 2, 3, 5} {
		if got := listVersions(t, c, "pages", page); fmt.Sprint(got) != fmt.Sprint(full) {
			t.Fatalf("pages of %d:\n got %q\nwant %q", page, got, full)
		}
	}
	res, err := c.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String("pages"), Delimiter: aws.String("/")})
	if err != nil || len(res.CommonPrefixes) != 2 || len(res.Versions) != 0 {
		t.Fatalf("with a delimiter: %+v %v", res, err)
	}
}

// A multipart upload completed over a versioned key keeps the version it supersedes
// (found by the versioned fault soak: the completion replaced it in place).
func TestVersioningMultipart(t *testing.T) {
	_, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "mpv")
	if _, err := c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String("mpv"),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}); err != nil {
		t.Fatal(err)
	}
	first := mustPut(t, c, "mpv", "k", []byte("the first version"))
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("mpv"), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	big := randBytes(5, 5<<20+100)
	var parts []types.CompletedPart
	for i, b := range [][]byte{big[:5<<20], big[5<<20:]} {
		p, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("mpv"), Key: aws.String("k"), UploadId: up.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(b)})
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: p.ETag})
	}
	done, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpv"), Key: aws.String("k"), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
	if err != nil || done.VersionId == nil || *done.VersionId == *first.VersionId {
		t.Fatalf("complete: %+v %v", done, err)
	}
	if b, err := getVersion(t, c, "mpv", "k", *first.VersionId); err != nil || string(b) != "the first version" {
		t.Fatalf("the version the upload superseded: %q %v", b, err)
	}
	if b, err := getVersion(t, c, "mpv", "k", *done.VersionId); err != nil || !bytes.Equal(b, big) {
		t.Fatalf("the uploaded version: %d bytes %v", len(b), err)
	}
	// A second upload completed over it: three versions.
	up2, _ := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("mpv"), Key: aws.String("k")})
	p, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("mpv"), Key: aws.String("k"), UploadId: up2.UploadId, PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("small"))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpv"), Key: aws.String("k"), UploadId: up2.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: p.ETag}}}}); err != nil {
		t.Fatal(err)
	}
	if got := listVersions(t, c, "mpv", 1000); len(got) != 3 {
		t.Fatalf("versions: %q", got)
	}
	if b, err := getVersion(t, c, "mpv", "k", *done.VersionId); err != nil || !bytes.Equal(b, big) {
		t.Fatalf("the first upload's version after the second: %d bytes %v", len(b), err)
	}
}
