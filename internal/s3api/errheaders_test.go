package s3api_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/s3api"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil"
)

// unreadable serves every object whose key begins with "broken" as an erasure-coded
// object whose first stripe cannot be read: too few shards answer.
type unreadable struct{ s3api.Backend }

func (u unreadable) OpenObject(ctx context.Context, bucket, key string) (gateway.ObjectReader, error) {
	rd, err := u.Backend.OpenObject(ctx, bucket, key)
	if err != nil || !strings.HasPrefix(key, "broken") {
		return rd, err
	}
	return shortOfShards{rd}, nil
}

type shortOfShards struct{ gateway.ObjectReader }

func (s shortOfShards) Info() *object.Object {
	o := *s.ObjectReader.Info()
	o.StorageClass = "EC42"
	return &o
}

// Prepare fails as the erasure-coded reader does when too few shards answer: a transient
// error, answered 503.
func (shortOfShards) Prepare(ctx context.Context, off, n int64) error {
	return errors.E(errors.Op("gateway.Prepare"), errors.Transient, "stripe 0: 3 of 6 shards answered, 4 needed")
}

// objectHeaders are the headers that describe an object; no error may carry them.
var objectHeaders = []string{"ETag", "Last-Modified", "Accept-Ranges", "Content-Range", "X-Amz-Storage-Class",
	"Content-Disposition", "Content-Encoding", "Content-Language", "Cache-Control", "Expires",
	"X-Amz-Mp-Parts-Count", "X-Amz-Checksum-Crc32", "X-Amz-Checksum-Type", "X-Amz-Meta-Color"}

func doHeaders(t *testing.T, r *http.Request) (int, http.Header, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestErrorsCarryNoObjectHeaders is the reproduction: a 503 for an erasure-coded
// GET that cannot be read carried the object's ETag, Last-Modified and storage class, and
// boto3 took it for an object. It also covers the other errors raised after the object's
// headers were set (a part or range that does not exist), on GET and HEAD.
func TestErrorsCarryNoObjectHeaders(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{Reserve: 1}, func(c *s3api.Config) { c.Store = unreadable{c.Store} })
	c := newClient(t, srv.URL, testutil.AccessKey, testutil.SecretKey)
	mustCreateBucket(t, c, "bkt")
	ctx := context.Background()
	for _, k := range []string{"broken", "fine"} {
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String(k), Body: strings.NewReader("twelve bytes"),
			Metadata: map[string]string{"color": "blue"}, ContentDisposition: aws.String("attachment"), CacheControl: aws.String("no-cache"),
			ChecksumAlgorithm: "CRC32"}); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name, method, path string
		hdr                map[string]string
		status             int
	}{
		{"ec get short of shards", "GET", "/bkt/broken", nil, 503},
		{"ec ranged get short of shards", "GET", "/bkt/broken", map[string]string{"Range": "bytes=2-5"}, 503},
		{"ec get with checksum mode", "GET", "/bkt/broken", map[string]string{"X-Amz-Checksum-Mode": "ENABLED"}, 503},
		{"get part that does not exist", "GET", "/bkt/fine?partNumber=3", nil, 416},
		{"head part that does not exist", "HEAD", "/bkt/fine?partNumber=3", nil, 416},
		{"get range past the end", "GET", "/bkt/fine", map[string]string{"Range": "bytes=100-"}, 416},
		{"head range past the end", "HEAD", "/bkt/fine", map[string]string{"Range": "bytes=100-"}, 416},
		{"get bad part number", "GET", "/bkt/fine?partNumber=0", nil, 400},
		{"get precondition failed", "GET", "/bkt/fine", map[string]string{"If-Match": `"nope"`}, 412},
		{"head precondition failed", "HEAD", "/bkt/fine", map[string]string{"If-Match": `"nope"`}, 412},
	}
	for _, tc := range cases {
		st, hd, body := doHeaders(t, signed(t, tc.method, srv.URL+tc.path, nil, tc.hdr, time.Now()))
		if st != tc.status {
			t.Fatalf("%s: status %d, want %d: %s", tc.name, st, tc.status, body)
		}
		for _, h := range objectHeaders {
			if v := hd.Get(h); v != "" {
				t.Errorf("%s: the %d error carries the object header %s: %s", tc.name, st, h, v)
			}
		}
		if tc.method == "GET" && !strings.HasPrefix(hd.Get("Content-Type"), "application/xml") {
			t.Errorf("%s: error Content-Type %q", tc.name, hd.Get("Content-Type"))
		}
		if hd.Get("X-Amz-Request-Id") == "" {
			t.Errorf("%s: error without a request id", tc.name)
		}
	}
	// 304 Not Modified is not an error to the client: it keeps the validators S3 sends.
	h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("bkt"), Key: aws.String("fine")})
	if err != nil {
		t.Fatal(err)
	}
	st, hd, _ := doHeaders(t, signed(t, "GET", srv.URL+"/bkt/fine", nil, map[string]string{"If-None-Match": *h.ETag}, time.Now()))
	if st != 304 || hd.Get("ETag") != *h.ETag || hd.Get("Last-Modified") == "" || hd.Get("X-Amz-Meta-Color") != "" {
		t.Fatalf("304: %d %v", st, hd)
	}
}
