package s3api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/internal/s3api"
	"github.com/cairnfs/cairn/internal/sigv4"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil"
)

// tenStatements is a bucket policy of ten statements, the one that allows alice last.
func tenStatements(bucket string) string {
	var st []string
	for i := 0; i < 9; i++ {
		st = append(st, fmt.Sprintf(`{"Sid":"s%d","Effect":"Allow","Principal":{"AWS":"arn:aws:iam::1:user/u%d"},"Action":["s3:GetObject","s3:PutObject"],"Resource":"arn:aws:s3:::%s/team%d/*","Condition":{"IpAddress":{"aws:SourceIp":"10.%d.0.0/16"}}}`, i, i, bucket, i, i))
	}
	st = append(st, fmt.Sprintf(`{"Sid":"alice","Effect":"Allow","Principal":{"AWS":"arn:aws:iam::1:user/alice"},"Action":["s3:GetObject","s3:PutObject"],"Resource":"arn:aws:s3:::%s/*","Condition":{"Bool":{"aws:SecureTransport":"false"}}}`, bucket))
	return `{"Version":"2012-10-17","Statement":[` + strings.Join(st, ",") + `]}`
}

// BenchmarkPolicy measures 4 KiB GETs and PUTs of a user allowed by a grant (no bucket
// policy) against the same user allowed by the last of ten policy statements: the cost of
// evaluating a bucket policy per request. Compare the sub-benchmarks of one run.
func BenchmarkPolicy(b *testing.B) {
	srv := testutil.StartServer(b, store.Config{Reserve: 1}, func(c *s3api.Config) {
		c.Lookup = func(ak string) (string, bool) {
			return "secret-" + ak, ak == "GRANTED" || ak == "POLICIED" || ak == testutil.AccessKey
		}
		c.Principal = func(ak string) s3api.Principal {
			switch ak {
			case "GRANTED":
				return s3api.Principal{User: "alice", Grants: []s3api.Grant{{Bucket: "nopol", Read: true, Write: true}}}
			case "POLICIED":
				return s3api.Principal{User: "alice"}
			}
			return s3api.Principal{User: "root", Root: true}
		}
	})
	root := newClient(b, srv.URL, testutil.AccessKey, "secret-"+testutil.AccessKey)
	ctx := context.Background()
	for _, bk := range []string{"nopol", "pol"} {
		if _, err := root.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bk)}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := root.PutBucketPolicy(ctx, &s3.PutBucketPolicyInput{Bucket: aws.String("pol"), Policy: aws.String(tenStatements("pol"))}); err != nil {
		b.Fatal(err)
	}
	data := bytes.Repeat([]byte("x"), 4096)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	do := func(b *testing.B, method, url, key string, body []byte) {
		r, _ := http.NewRequest(method, url, bytes.NewReader(body))
		sigv4.SignRequest(r, key, "secret-"+key, "us-east-1", "UNSIGNED-PAYLOAD", time.Now())
		resp, err := client.Do(r)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("%s %s: %v %v", method, url, resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for _, c := range []struct{ name, bucket, key string }{{"grant", "nopol", "GRANTED"}, {"policy10", "pol", "POLICIED"}} {
		for i := 0; i < 100; i++ {
			do(b, "PUT", fmt.Sprintf("%s/%s/k%d", srv.URL, c.bucket, i), c.key, data)
		}
		b.Run("GET/"+c.name, func(b *testing.B) {
			b.SetBytes(4096)
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					do(b, "GET", fmt.Sprintf("%s/%s/k%d", srv.URL, c.bucket, i%100), c.key, nil)
				}
			})
		})
		b.Run("PUT/"+c.name, func(b *testing.B) {
			b.SetBytes(4096)
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					do(b, "PUT", fmt.Sprintf("%s/%s/k%d", srv.URL, c.bucket, i%100), c.key, data)
				}
			})
		})
	}
}
