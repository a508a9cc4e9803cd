package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/internal/s3api"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

func readAccessLog(t *testing.T, path string) []s3api.AccessRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []s3api.AccessRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r s3api.AccessRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("a line of the access log is not JSON: %q: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	return recs
}

// TestAccessLog: --access-log records authenticated requests with their user, key,
// operation, bucket, key, status and bytes, and refused ones with the key they claimed
// (or as anonymous); the file is private, and a rename plus SIGHUP rotates it.
func TestAccessLog(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "access.log")
	p := startProc(t, filepath.Join(dir, "data"), "--access-log", logPath)
	ctx := context.Background()
	c := p.client()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("audited")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("audited"), Key: aws.String("k"), Body: strings.NewReader("eleven byte")}); err != nil {
		t.Fatal(err)
	}
	bad := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(p.URL()), UsePathStyle: true, RetryMaxAttempts: 1,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: testAccess, SecretAccessKey: "wrong"}, nil
		})})
	bad.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("audited"), Key: aws.String("k")})
	resp, err := http.Get(p.URL() + "/audited/k")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	want := func(path string, n int) []s3api.AccessRecord {
		var recs []s3api.AccessRecord
		proctest.WaitFor(t, 10*time.Second, func() error { // written within a second
			recs = readAccessLog(t, path)
			if len(recs) < n {
				return fmt.Errorf("%d records of %d in %s", len(recs), n, path)
			}
			return nil
		})
		return recs
	}
	recs := want(logPath, 4)
	put := recs[1]
	if put.Op != "PutObject" || put.User != "root" || put.AccessKey != testAccess || put.Bucket != "audited" || put.Key != "k" ||
		put.Status != 200 || put.BytesIn != 11 || !strings.HasPrefix(put.Remote, "127.0.0.1:") || put.RequestID == "" {
		t.Fatalf("PutObject record %+v", put)
	}
	if r := recs[2]; r.Status != 403 || r.Error != "SignatureDoesNotMatch" || r.AccessKey != testAccess || r.User != "" {
		t.Fatalf("refused record %+v", r)
	}
	if r := recs[3]; r.Status != 403 || !r.Anonymous || r.AccessKey != "" || r.Op != "GetObject" {
		t.Fatalf("anonymous record %+v", r)
	}
	if st, err := os.Stat(logPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("access log mode: %v %v", st.Mode(), err)
	}

	// Rotation: move the file away, SIGHUP, and the next request goes to a new file.
	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	proctest.WaitFor(t, 10*time.Second, func() error {
		if _, err := os.Stat(logPath); err != nil {
			return err
		}
		return nil
	})
	if _, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("audited"), Key: aws.String("k")}); err != nil {
		t.Fatal(err)
	}
	if r := want(logPath, 1)[0]; r.Op != "HeadObject" {
		t.Fatalf("after the rotation: %+v", r)
	}
	if n := len(readAccessLog(t, logPath+".1")); n != 4 {
		t.Fatalf("the rotated file has %d records, want 4", n)
	}
}
