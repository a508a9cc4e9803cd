package s3api_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

func tagSet(kv ...string) []types.Tag {
	var ts []types.Tag
	for i := 0; i+1 < len(kv); i += 2 {
		ts = append(ts, types.Tag{Key: aws.String(kv[i]), Value: aws.String(kv[i+1])})
	}
	return ts
}

func tagStrings(ts []types.Tag) []string {
	var out []string
	for _, t := range ts {
		out = append(out, aws.ToString(t.Key)+"="+aws.ToString(t.Value))
	}
	return out
}

func objectTags(t *testing.T, c *s3.Client, bucket, key string) []string {
	t.Helper()
	out, err := c.GetObjectTagging(context.Background(), &s3.GetObjectTaggingInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get tagging of %s/%s: %v", bucket, key, err)
	}
	if out.TagSet == nil {
		t.Fatalf("get tagging of %s/%s: no TagSet element", bucket, key)
	}
	return tagStrings(out.TagSet)
}

func wantTags(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("tags %q, want %q", got, want)
	}
}

// TestObjectTagging: Put/Get/DeleteObjectTagging through aws-sdk-go-v2, the tagging count
// on GET and HEAD, and that a tagging change keeps the body, ETag and Last-Modified.
func TestObjectTagging(t *testing.T) {
	_, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "tags")
	data := randBytes(1, 300<<10) // chunked
	put := mustPut(t, c, "tags", "obj", data)
	wantTags(t, objectTags(t, c, "tags", "obj")) // none: an empty TagSet
	head0, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("tags"), Key: aws.String("obj")})
	if err != nil {
		t.Fatal(err)
	}
	if head0.TagCount != nil {
		t.Fatalf("tag count %d on an object without tags", *head0.TagCount)
	}
	time.Sleep(1100 * time.Millisecond) // a new Last-Modified would show
	if _, err := c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String("tags"), Key: aws.String("obj"),
		Tagging: &types.Tagging{TagSet: tagSet("team", "storage", "env", "prod & test <1>")}}); err != nil {
		t.Fatal(err)
	}
	wantTags(t, objectTags(t, c, "tags", "obj"), "env=prod & test <1>", "team=storage")
	got, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("tags"), Key: aws.String("obj")})
	if err != nil {
		t.Fatal(err)
	}
	got.Body.Close()
	if aws.ToInt32(got.TagCount) != 2 || aws.ToString(got.ETag) != aws.ToString(put.ETag) || !got.LastModified.Equal(*head0.LastModified) {
		t.Fatalf("GET after tagging: count %v etag %s (want %s) modified %v (want %v)", got.TagCount, aws.ToString(got.ETag), aws.ToString(put.ETag), got.LastModified, head0.LastModified)
	}
	if !bytes.Equal(mustGet(t, c, "tags", "obj"), data) {
		t.Fatal("body changed by tagging")
	}
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("tags"), Key: aws.String("obj")})
	if err != nil || aws.ToInt32(head.TagCount) != 2 {
		t.Fatalf("HEAD tag count: %v, %v", head.TagCount, err)
	}
	// Replaced whole, then removed.
	if _, err := c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String("tags"), Key: aws.String("obj"),
		Tagging: &types.Tagging{TagSet: tagSet("one", "")}}); err != nil {
		t.Fatal(err)
	}
	wantTags(t, objectTags(t, c, "tags", "obj"), "one=")
	if _, err := c.DeleteObjectTagging(ctx, &s3.DeleteObjectTaggingInput{Bucket: aws.String("tags"), Key: aws.String("obj")}); err != nil {
		t.Fatal(err)
	}
	wantTags(t, objectTags(t, c, "tags", "obj"))
	// versionId=null is this object.
	if _, err := c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String("tags"), Key: aws.String("obj"), VersionId: aws.String("null"),
		Tagging: &types.Tagging{TagSet: tagSet("v", "null")}}); err != nil {
		t.Fatal(err)
	}
	if out, err := c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String("tags"), Key: aws.String("obj"), VersionId: aws.String("null")}); err != nil ||
		!slices.Equal(tagStrings(out.TagSet), []string{"v=null"}) {
		t.Fatalf("tagging of versionId=null: %v, %v", out, err)
	}
	// An overwrite is a new version with its own tags (none).
	mustPut(t, c, "tags", "obj", []byte("new"))
	wantTags(t, objectTags(t, c, "tags", "obj"))
}

// TestObjectTaggingErrors: every refusal of the tagging operations, as S3 answers it, and
// that a refused request changes nothing.
func TestObjectTaggingErrors(t *testing.T) {
	srv, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "tags")
	mustPut(t, c, "tags", "obj", []byte("x"))
	if _, err := c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String("tags"), Key: aws.String("obj"),
		Tagging: &types.Tagging{TagSet: tagSet("keep", "me")}}); err != nil {
		t.Fatal(err)
	}
	var eleven []string
	for i := range 11 {
		eleven = append(eleven, fmt.Sprintf("k%d", i), "v")
	}
	for _, tc := range []struct {
		name string
		tags []types.Tag
		code string
	}{
		{"eleven tags", tagSet(eleven...), "InvalidTag"},
		{"key too long", tagSet(strings.Repeat("k", 129), "v"), "InvalidTag"},
		{"value too long", tagSet("k", strings.Repeat("v", 257)), "InvalidTag"},
		{"empty key", tagSet("", "v"), "InvalidTag"},
		{"duplicate keys", tagSet("k", "1", "k", "2"), "InvalidTag"},
		{"aws: prefix", tagSet("aws:cloudformation", "x"), "InvalidTag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String("tags"), Key: aws.String("obj"), Tagging: &types.Tagging{TagSet: tc.tags}})
			wantCode(t, err, tc.code)
			wantTags(t, objectTags(t, c, "tags", "obj"), "keep=me")
		})
	}
	// 128 and 256 Unicode characters are within the limits (more than 128 and 256 bytes).
	if _, err := c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String("tags"), Key: aws.String("obj"),
		Tagging: &types.Tagging{TagSet: tagSet(strings.Repeat("é", 128), strings.Repeat("日", 256))}}); err != nil {
		t.Fatalf("tag at the Unicode limits: %v", err)
	}
	_, err := c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String("tags"), Key: aws.String("nope")})
	wantCode(t, err, "NoSuchKey")
	_, err = c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String("tags"), Key: aws.String("nope"), Tagging: &types.Tagging{TagSet: tagSet("a", "b")}})
	wantCode(t, err, "NoSuchKey")
	_, err = c.DeleteObjectTagging(ctx, &s3.DeleteObjectTaggingInput{Bucket: aws.String("tags"), Key: aws.String("nope")})
	wantCode(t, err, "NoSuchKey")
	_, err = c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String("nobucket"), Key: aws.String("obj")})
	wantCode(t, err, "NoSuchBucket")
	_, err = c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String("tags"), Key: aws.String("obj"), VersionId: aws.String("3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY")})
	wantCode(t, err, "InvalidArgument") // not a version id cairn makes

	// Raw requests: malformed documents, a bad Content-MD5.
	u := srv.URL + "/tags/obj?tagging"
	for _, tc := range []struct{ body, code string }{
		{`<Tagging><TagSet><Tag><Key>k</Key></Tag></TagSet></Tagging>`, "MalformedXML"},
		{`<Tagging>`, "MalformedXML"},
		{`<Other><TagSet/></Other>`, "MalformedXML"},
		{`<Tagging/>`, "MalformedXML"},
	} {
		st, body := do(t, signed(t, "PUT", u, []byte(tc.body), nil, time.Now()))
		expectS3Error(t, st, body, 400, tc.code)
	}
	doc := []byte(`<Tagging><TagSet><Tag><Key>a</Key><Value>b</Value></Tag></TagSet></Tagging>`)
	st, body := do(t, signed(t, "PUT", u, doc, map[string]string{"Content-MD5": b64md5([]byte("other"))}, time.Now()))
	expectS3Error(t, st, body, 400, "BadDigest")
	wantTags(t, objectTags(t, c, "tags", "obj"), strings.Repeat("é", 128)+"="+strings.Repeat("日", 256))
	// The answers' shapes: 200 with no body, 204, and the document with S3's namespace.
	if st, body := do(t, signed(t, "PUT", u, doc, map[string]string{"Content-MD5": b64md5(doc)}, time.Now())); st != 200 || body != "" {
		t.Fatalf("PutObjectTagging: %d %q", st, body)
	}
	if st, body := do(t, signed(t, "GET", u, nil, nil, time.Now())); st != 200 ||
		body != `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+`<Tagging xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><TagSet><Tag><Key>a</Key><Value>b</Value></Tag></TagSet></Tagging>` {
		t.Fatalf("GetObjectTagging: %d %q", st, body)
	}
	if st, _ := do(t, signed(t, "DELETE", u, nil, nil, time.Now())); st != http.StatusNoContent {
		t.Fatalf("DeleteObjectTagging: %d", st)
	}
}

// TestTaggingOnWrite: x-amz-tagging on PutObject, CreateMultipartUpload (the completed
// object gets the upload's tags) and CopyObject with both tagging directives.
func TestTaggingOnWrite(t *testing.T) {
	_, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "tags")
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("tags"), Key: aws.String("src"), Body: strings.NewReader("source"),
		Tagging: aws.String("b=2&a=1&sp%20ace=x%26y")}); err != nil {
		t.Fatal(err)
	}
	wantTags(t, objectTags(t, c, "tags", "src"), "a=1", "b=2", "sp ace=x&y")
	for _, tc := range []struct{ name, tagging, code string }{
		{"eleven", "a=1&b=1&c=1&d=1&e=1&f=1&g=1&h=1&i=1&j=1&k=1", "InvalidTag"},
		{"duplicate", "a=1&a=2", "InvalidArgument"},
		{"bad escape", "a=%zz", "InvalidArgument"},
		{"reserved", "aws:x=1", "InvalidTag"},
	} {
		t.Run("put/"+tc.name, func(t *testing.T) {
			_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("tags"), Key: aws.String("refused"), Body: strings.NewReader("x"), Tagging: aws.String(tc.tagging)})
			wantCode(t, err, tc.code)
			_, err = c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("tags"), Key: aws.String("refused")})
			if err == nil {
				t.Fatal("a refused PUT stored the object")
			}
		})
	}

	// Multipart.
	mu, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("tags"), Key: aws.String("mp"), Tagging: aws.String("stage=upload")})
	if err != nil {
		t.Fatal(err)
	}
	part, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("tags"), Key: aws.String("mp"), UploadId: mu.UploadId, PartNumber: aws.Int32(1), Body: strings.NewReader("part")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("tags"), Key: aws.String("mp"), UploadId: mu.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: part.ETag}}}}); err != nil {
		t.Fatal(err)
	}
	wantTags(t, objectTags(t, c, "tags", "mp"), "stage=upload")
	_, err = c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("tags"), Key: aws.String("mp2"), Tagging: aws.String("a=1&a=1")})
	wantCode(t, err, "InvalidArgument")

	// Copy: the source's tags by default and with COPY; the request's with REPLACE (none
	// if it names none), also when the metadata is replaced.
	for _, tc := range []struct {
		name      string
		directive types.TaggingDirective
		metaDir   types.MetadataDirective
		tagging   *string
		want      []string
	}{
		{"default", "", "", aws.String("ignored=1"), []string{"a=1", "b=2", "sp ace=x&y"}},
		{"copy", types.TaggingDirectiveCopy, types.MetadataDirectiveReplace, nil, []string{"a=1", "b=2", "sp ace=x&y"}},
		{"replace", types.TaggingDirectiveReplace, "", aws.String("new=tag"), []string{"new=tag"}},
		{"replace with none", types.TaggingDirectiveReplace, types.MetadataDirectiveReplace, nil, nil},
	} {
		t.Run("copy/"+tc.name, func(t *testing.T) {
			if _, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("tags"), Key: aws.String("dst-" + tc.name), CopySource: aws.String("tags/src"),
				TaggingDirective: tc.directive, MetadataDirective: tc.metaDir, Tagging: tc.tagging}); err != nil {
				t.Fatal(err)
			}
			wantTags(t, objectTags(t, c, "tags", "dst-"+tc.name), tc.want...)
		})
	}
	_, err = c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("tags"), Key: aws.String("dst-bad"), CopySource: aws.String("tags/src"), TaggingDirective: "MERGE"})
	wantCode(t, err, "InvalidArgument")
	_, err = c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("tags"), Key: aws.String("dst-bad"), CopySource: aws.String("tags/src"),
		TaggingDirective: types.TaggingDirectiveReplace, Tagging: aws.String("a=1&a=2")})
	wantCode(t, err, "InvalidArgument")
}

// TestBucketTagging: Put/Get/DeleteBucketTagging through aws-sdk-go-v2, S3's 404
// NoSuchTagSet for a bucket without tags, the 50-tag limit and the other refusals.
func TestBucketTagging(t *testing.T) {
	srv, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "tagged")
	_, err := c.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: aws.String("tagged")})
	wantCode(t, err, "NoSuchTagSet")
	var fifty []string
	for i := range 50 {
		fifty = append(fifty, fmt.Sprintf("k%02d", i), fmt.Sprint(i))
	}
	if _, err := c.PutBucketTagging(ctx, &s3.PutBucketTaggingInput{Bucket: aws.String("tagged"), Tagging: &types.Tagging{TagSet: tagSet(fifty...)}}); err != nil {
		t.Fatal(err)
	}
	out, err := c.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: aws.String("tagged")})
	if err != nil || len(out.TagSet) != 50 || tagStrings(out.TagSet)[49] != "k49=49" {
		t.Fatalf("bucket tags: %v, %v", out, err)
	}
	for _, tc := range []struct {
		name string
		tags []types.Tag
	}{
		{"fifty-one", tagSet(append(fifty, "k50", "x")...)},
		{"key too long", tagSet(strings.Repeat("k", 129), "v")},
		{"duplicate", tagSet("a", "1", "a", "2")},
		{"aws: prefix", tagSet("aws:x", "1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.PutBucketTagging(ctx, &s3.PutBucketTaggingInput{Bucket: aws.String("tagged"), Tagging: &types.Tagging{TagSet: tc.tags}})
			wantCode(t, err, "InvalidTag")
		})
	}
	if out, err := c.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: aws.String("tagged")}); err != nil || len(out.TagSet) != 50 {
		t.Fatalf("refused puts changed the tags: %v, %v", out, err)
	}
	st, body := do(t, signed(t, "PUT", srv.URL+"/tagged?tagging", []byte(`<Tagging><TagSet><Tag><Value>v</Value></Tag></TagSet></Tagging>`), nil, time.Now()))
	expectS3Error(t, st, body, 400, "MalformedXML")
	doc := []byte(`<Tagging><TagSet><Tag><Key>env</Key><Value>prod</Value></Tag></TagSet></Tagging>`)
	if st, body := do(t, signed(t, "PUT", srv.URL+"/tagged?tagging", doc, nil, time.Now())); st != http.StatusNoContent {
		t.Fatalf("PutBucketTagging: %d %s", st, body)
	}
	if st, body := do(t, signed(t, "GET", srv.URL+"/tagged?tagging", nil, nil, time.Now())); st != 200 ||
		!strings.HasSuffix(body, `<Tagging xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><TagSet><Tag><Key>env</Key><Value>prod</Value></Tag></TagSet></Tagging>`) {
		t.Fatalf("GetBucketTagging: %d %s", st, body)
	}
	if _, err := c.DeleteBucketTagging(ctx, &s3.DeleteBucketTaggingInput{Bucket: aws.String("tagged")}); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: aws.String("tagged")})
	wantCode(t, err, "NoSuchTagSet")
	if _, err := c.DeleteBucketTagging(ctx, &s3.DeleteBucketTaggingInput{Bucket: aws.String("tagged")}); err != nil {
		t.Fatalf("deleting absent bucket tags: %v", err)
	}
	_, err = c.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: aws.String("nobucket")})
	wantCode(t, err, "NoSuchBucket")
	_, err = c.PutBucketTagging(ctx, &s3.PutBucketTaggingInput{Bucket: aws.String("nobucket"), Tagging: &types.Tagging{TagSet: tagSet("a", "b")}})
	wantCode(t, err, "NoSuchBucket")
}
