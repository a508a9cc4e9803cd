package s3api_test

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// TestConditionalWrites: If-Match and If-None-Match on PutObject, CopyObject (conditions
// on the destination) and CompleteMultipartUpload, through aws-sdk-go-v2, answered as the
// S3 reference says: 412 PreconditionFailed when the condition is false, 404 NoSuchKey
// for If-Match on no object, and NotImplemented for If-None-Match with an ETag (S3 takes
// only '*'). A refused write changes nothing.
func TestConditionalWrites(t *testing.T) {
	_, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "bkt")
	put := func(key, body string, ifMatch, ifNoneMatch *string) (*s3.PutObjectOutput, error) {
		return c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String(key), Body: strings.NewReader(body), IfMatch: ifMatch, IfNoneMatch: ifNoneMatch})
	}

	// PutObject.
	_, err := put("k", "one", aws.String(`"0123456789abcdef0123456789abcdef"`), nil)
	wantCode(t, err, "NoSuchKey")
	one, err := put("k", "one", nil, aws.String("*"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = put("k", "two", nil, aws.String("*"))
	wantCode(t, err, "PreconditionFailed")
	_, err = put("k", "two", aws.String(`"0123456789abcdef0123456789abcdef"`), nil)
	wantCode(t, err, "PreconditionFailed")
	_, err = put("k", "two", nil, one.ETag)
	wantCode(t, err, "NotImplemented")
	if got := string(mustGet(t, c, "bkt", "k")); got != "one" {
		t.Fatalf("after refused writes: %q", got)
	}
	two, err := put("k", "two", one.ETag, nil)
	if err != nil {
		t.Fatalf("If-Match of the current ETag: %v", err)
	}

	// CopyObject: the conditions are on the destination.
	copyTo := func(dst string, ifMatch, ifNoneMatch *string) error {
		_, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("bkt"), Key: aws.String(dst), CopySource: aws.String("bkt/k"), IfMatch: ifMatch, IfNoneMatch: ifNoneMatch})
		return err
	}
	wantCode(t, copyTo("k2", one.ETag, nil), "NoSuchKey")
	if err := copyTo("k2", nil, aws.String("*")); err != nil {
		t.Fatalf("copy with If-None-Match to a free key: %v", err)
	}
	wantCode(t, copyTo("k2", nil, aws.String("*")), "PreconditionFailed")
	wantCode(t, copyTo("k2", one.ETag, nil), "PreconditionFailed")
	if err := copyTo("k2", two.ETag, nil); err != nil { // the copy of "two" has two's ETag
		t.Fatalf("copy with If-Match of the destination's ETag: %v", err)
	}

	// CompleteMultipartUpload.
	complete := func(key string, ifMatch, ifNoneMatch *string) (*s3.CompleteMultipartUploadOutput, error) {
		mu, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		pt, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("bkt"), Key: aws.String(key), UploadId: mu.UploadId,
			PartNumber: aws.Int32(1), Body: strings.NewReader("the only part")})
		if err != nil {
			t.Fatal(err)
		}
		return c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String(key), UploadId: mu.UploadId,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: pt.ETag}}},
			IfMatch:         ifMatch, IfNoneMatch: ifNoneMatch})
	}
	_, err = complete("k", nil, aws.String("*"))
	wantCode(t, err, "PreconditionFailed")
	_, err = complete("k", one.ETag, nil)
	wantCode(t, err, "PreconditionFailed")
	_, err = complete("m", aws.String(`"0123456789abcdef0123456789abcdef"`), nil)
	wantCode(t, err, "NoSuchKey")
	if string(mustGet(t, c, "bkt", "k")) != "two" {
		t.Fatal("a refused completion replaced the object")
	}
	if _, err := complete("m", nil, aws.String("*")); err != nil {
		t.Fatalf("completion with If-None-Match on a free key: %v", err)
	}
	if _, err := complete("k", two.ETag, nil); err != nil {
		t.Fatalf("completion with If-Match of the ETag: %v", err)
	}
	if got := string(mustGet(t, c, "bkt", "k")); got != "the only part" {
		t.Fatalf("after the completion: %q", got)
	}
}
