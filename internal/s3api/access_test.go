package s3api_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil"
)

// Object Ownership is BucketOwnerEnforced, read back and settable to itself only; the
// settings that would enable ACLs are NotImplemented, and a bucket that does not exist is
// NoSuchBucket.
func TestOwnershipControls(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{Reserve: 1}, nil)
	c := newClient(t, srv.URL, testutil.AccessKey, testutil.SecretKey)
	mustCreateBucket(t, c, "bkt")
	ctx := context.Background()
	out, err := c.GetBucketOwnershipControls(ctx, &s3.GetBucketOwnershipControlsInput{Bucket: aws.String("bkt")})
	if err != nil || len(out.OwnershipControls.Rules) != 1 || out.OwnershipControls.Rules[0].ObjectOwnership != types.ObjectOwnershipBucketOwnerEnforced {
		t.Fatalf("GetBucketOwnershipControls: %+v %v", out, err)
	}
	for _, tc := range []struct {
		bucket string
		own    types.ObjectOwnership
		want   string
	}{
		{"bkt", types.ObjectOwnershipBucketOwnerEnforced, ""},
		{"bkt", types.ObjectOwnershipBucketOwnerPreferred, "NotImplemented"},
		{"bkt", types.ObjectOwnershipObjectWriter, "NotImplemented"},
		{"nobkt", types.ObjectOwnershipBucketOwnerEnforced, "NoSuchBucket"},
	} {
		_, err := c.PutBucketOwnershipControls(ctx, &s3.PutBucketOwnershipControlsInput{Bucket: aws.String(tc.bucket),
			OwnershipControls: &types.OwnershipControls{Rules: []types.OwnershipControlsRule{{ObjectOwnership: tc.own}}}})
		if got := apiCode(err); got != tc.want {
			t.Errorf("PutBucketOwnershipControls %s %s: %q, want %q", tc.bucket, tc.own, got, tc.want)
		}
	}
	if _, err := c.DeleteBucketOwnershipControls(ctx, &s3.DeleteBucketOwnershipControlsInput{Bucket: aws.String("bkt")}); apiCode(err) != "NotImplemented" {
		t.Errorf("DeleteBucketOwnershipControls: %v", err)
	}
}
