package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// TestBucketLogging: with PutBucketLogging, the requests on a bucket arrive as S3 access
// log records in objects under the target prefix; records spooled (synced) by a node
// killed before it delivered them are delivered after its restart.
func TestBucketLogging(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	p := startProc(t, data, "--bucket-log-interval", "1h")
	ctx := context.Background()
	c := p.client()
	for _, b := range []string{"src", "logs"} {
		if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.PutBucketLogging(ctx, &s3.PutBucketLoggingInput{Bucket: aws.String("src"), BucketLoggingStatus: &types.BucketLoggingStatus{
		LoggingEnabled: &types.LoggingEnabled{TargetBucket: aws.String("logs"), TargetPrefix: aws.String("src-logs/")}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutBucketLogging(ctx, &s3.PutBucketLoggingInput{Bucket: aws.String("src"), BucketLoggingStatus: &types.BucketLoggingStatus{
		LoggingEnabled: &types.LoggingEnabled{TargetBucket: aws.String("nosuchbucket"), TargetPrefix: aws.String("x/")}}}); s3Code(err) != "InvalidTargetBucketForLogging" {
		t.Fatalf("a target that does not exist: %v", err)
	}
	got, err := c.GetBucketLogging(ctx, &s3.GetBucketLoggingInput{Bucket: aws.String("src")})
	if err != nil || got.LoggingEnabled == nil || *got.LoggingEnabled.TargetBucket != "logs" || *got.LoggingEnabled.TargetPrefix != "src-logs/" {
		t.Fatalf("GetBucketLogging: %+v %v", got, err)
	}
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("src"), Key: aws.String("a.txt"), Body: strings.NewReader("hello")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("src"), Key: aws.String("a.txt")}); err != nil {
		t.Fatal(err)
	}
	c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("src"), Key: aws.String("missing")})
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("src"), Key: aws.String("a.txt")}); err != nil {
		t.Fatal(err)
	}
	// The records are synced to the spool within a second (the node's metric says when);
	// kill the node before it delivers them (its interval is an hour) and restart it
	// delivering every second.
	spool := filepath.Join(data, "bucket-logs", "src.log")
	proctest.WaitFor(t, 10*time.Second, func() error {
		b, err := os.ReadFile(spool)
		if err != nil || strings.Count(string(b), "\n") < 4 {
			return fmt.Errorf("spool: %d bytes, %v", len(b), err)
		}
		if got := metricValue(t, p, "cairn_bucket_log_spooled_bytes"); got != float64(len(b)) {
			return fmt.Errorf("%v of the spool's %d bytes synced", got, len(b))
		}
		return nil
	})
	p.Restart("--bucket-log-interval", "1s")
	var text string
	proctest.WaitFor(t, 20*time.Second, func() error {
		out, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("logs"), Prefix: aws.String("src-logs/")})
		if err != nil {
			return err
		}
		var b strings.Builder
		for _, o := range out.Contents {
			r, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("logs"), Key: o.Key})
			if err != nil {
				return err
			}
			io.Copy(&b, r.Body)
			r.Body.Close()
		}
		text = b.String()
		if strings.Count(text, "\n") < 4 {
			return fmt.Errorf("%d objects, records:\n%s", len(out.Contents), text)
		}
		return nil
	})
	for _, want := range []string{"REST.PUT.OBJECT a.txt \"PUT /src/a.txt", "REST.GET.OBJECT a.txt", "REST.GET.OBJECT missing", " 404 NoSuchKey ", "REST.DELETE.OBJECT a.txt"} {
		if !strings.Contains(text, want) {
			t.Errorf("the delivered records lack %q:\n%s", want, text)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if f := strings.Fields(line); len(f) < 20 || f[1] != "src" || !strings.HasPrefix(f[2], "[") {
			t.Errorf("not an S3 access log record: %q", line)
		}
	}
	if _, err := os.Stat(spool); err == nil {
		if b, _ := os.ReadFile(spool); len(b) > 0 {
			t.Errorf("the spool still holds %d bytes after the delivery", len(b))
		}
	}
}
