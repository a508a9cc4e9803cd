package s3api_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/cairnfs/cairn/internal/checksum"
	"github.com/cairnfs/cairn/internal/s3api"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil"
)

func newClient(t testing.TB, url, ak, sk string, mods ...func(*s3.Options)) *s3.Client {
	t.Helper()
	return s3.New(s3.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(url),
		UsePathStyle:     true,
		Credentials:      credentials.NewStaticCredentialsProvider(ak, sk, ""),
		RetryMaxAttempts: 1,
	}, mods...)
}

// setup starts a server with small chunks (so chunk boundaries are exercised cheaply) and
// returns a client.
func setup(t *testing.T) (*testutil.Server, *s3.Client) {
	t.Helper()
	srv := testutil.StartServer(t, store.Config{InlineMax: 4 << 10, ChunkSize: 256 << 10, SegmentSize: 8 << 20, Reserve: 1}, nil)
	return srv, newClient(t, srv.URL, testutil.AccessKey, testutil.SecretKey)
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want error %s, got success", code)
	}
	if got := apiCode(err); got != code {
		t.Fatalf("want error %s, got %q (%v)", code, got, err)
	}
}

func mustCreateBucket(t *testing.T, c *s3.Client, name string) {
	t.Helper()
	if _, err := c.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
}

func mustPut(t *testing.T, c *s3.Client, bucket, key string, data []byte) *s3.PutObjectOutput {
	t.Helper()
	out, err := c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data)})
	if err != nil {
		t.Fatalf("put %s/%s: %v", bucket, key, err)
	}
	return out
}

func mustGet(t *testing.T, c *s3.Client, bucket, key string) []byte {
	t.Helper()
	out, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get %s/%s: %v", bucket, key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("read %s/%s: %v", bucket, key, err)
	}
	return b
}

func md5hex(b []byte) string { return fmt.Sprintf("%x", md5.Sum(b)) }

// TestCreateBucketOtherRegion: outside us-east-1 a create of one's own bucket is
// BucketAlreadyOwnedByYou, and the region's own location constraint is accepted.
func TestCreateBucketOtherRegion(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{}, func(c *s3api.Config) { c.Region = "eu-west-1" })
	c := newClient(t, srv.URL, testutil.AccessKey, testutil.SecretKey, func(o *s3.Options) { o.Region = "eu-west-1" })
	ctx := context.Background()
	in := &s3.CreateBucketInput{Bucket: aws.String("alpha"),
		CreateBucketConfiguration: &types.CreateBucketConfiguration{LocationConstraint: types.BucketLocationConstraintEuWest1}}
	if _, err := c.CreateBucket(ctx, in); err != nil {
		t.Fatal(err)
	}
	_, err := c.CreateBucket(ctx, in)
	wantCode(t, err, "BucketAlreadyOwnedByYou")
	_, err = c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("beta"),
		CreateBucketConfiguration: &types.CreateBucketConfiguration{LocationConstraint: types.BucketLocationConstraintUsWest2}})
	wantCode(t, err, "IllegalLocationConstraintException")
}

func TestBuckets(t *testing.T) {
	_, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "alpha")
	mustCreateBucket(t, c, "beta.example")
	// us-east-1 answers a create of one's own bucket with success.
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("alpha")}); err != nil {
		t.Fatalf("create of an owned bucket in us-east-1: %v", err)
	}
	_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("gamma"),
		CreateBucketConfiguration: &types.CreateBucketConfiguration{LocationConstraint: types.BucketLocationConstraintEuWest1}})
	wantCode(t, err, "IllegalLocationConstraintException")
	for _, bad := range []string{"ab", "Upper", "a_b", "-ab", "ab-", "a..b", "192.168.1.1", strings.Repeat("a", 64)} {
		_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bad)})
		wantCode(t, err, "InvalidBucketName")
	}
	lb, err := c.ListBuckets(ctx, &s3.ListBucketsInput{})
	if err != nil {
		t.Fatal(err)
	}
	if len(lb.Buckets) != 2 || *lb.Buckets[0].Name != "alpha" || *lb.Buckets[1].Name != "beta.example" {
		t.Fatalf("buckets %+v", lb.Buckets)
	}
	if _, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("alpha")}); err != nil {
		t.Fatal(err)
	}
	_, err = c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("nope-nope")})
	var nf *types.NotFound
	if !errors.As(err, &nf) {
		t.Fatalf("head missing bucket: %v", err)
	}
	loc, err := c.GetBucketLocation(ctx, &s3.GetBucketLocationInput{Bucket: aws.String("alpha")})
	if err != nil || loc.LocationConstraint != "" {
		t.Fatalf("location %v %v", loc, err)
	}
	mustPut(t, c, "alpha", "x", []byte("x"))
	_, err = c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("alpha")})
	wantCode(t, err, "BucketNotEmpty")
	c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("alpha"), Key: aws.String("x")})
	if _, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("alpha")}); err != nil {
		t.Fatal(err)
	}
	_, err = c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("alpha")})
	wantCode(t, err, "NoSuchBucket")
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("alpha"), Key: aws.String("k"), Body: strings.NewReader("x")})
	wantCode(t, err, "NoSuchBucket")
}

func TestPutGetObject(t *testing.T) {
	_, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "bkt")
	for i, n := range []int{0, 1, 4<<10 - 1, 4 << 10, 4<<10 + 1, 256<<10 - 1, 256 << 10, 256<<10 + 1, 3<<20 + 5} {
		data := randBytes(uint64(i), n)
		key := fmt.Sprintf("dir/obj-%d", n)
		out := mustPut(t, c, "bkt", key, data)
		if want := `"` + md5hex(data) + `"`; *out.ETag != want {
			t.Fatalf("size %d: etag %s want %s", n, *out.ETag, want)
		}
		if got := mustGet(t, c, "bkt", key); !bytes.Equal(got, data) {
			t.Fatalf("size %d: body differs", n)
		}
		h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("bkt"), Key: aws.String(key)})
		if err != nil || *h.ContentLength != int64(n) || *h.ETag != *out.ETag {
			t.Fatalf("head %d: %+v %v", n, h, err)
		}
	}
	_, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("missing")})
	wantCode(t, err, "NoSuchKey")
}

func TestMetadataRoundTrip(t *testing.T) {
	_, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "bkt")
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	_, err := c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String("bkt"), Key: aws.String("m"), Body: strings.NewReader("hello"),
		ContentType: aws.String("text/plain"), ContentEncoding: aws.String("gzip"),
		ContentDisposition: aws.String(`attachment; filename="a.txt"`), CacheControl: aws.String("max-age=60"),
		ContentLanguage: aws.String("en"), Expires: aws.Time(exp),
		Metadata:     map[string]string{"color": "blue", "Camel-Case": "v2"},
		StorageClass: types.StorageClassStandardIa,
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("bkt"), Key: aws.String("m")})
	if err != nil {
		t.Fatal(err)
	}
	if *h.ContentType != "text/plain" || *h.ContentEncoding != "gzip" || *h.ContentDisposition != `attachment; filename="a.txt"` ||
		*h.CacheControl != "max-age=60" || *h.ContentLanguage != "en" || h.Metadata["color"] != "blue" ||
		h.Metadata["camel-case"] != "v2" || h.StorageClass != types.StorageClassStandardIa {
		t.Fatalf("head %+v meta %v", h, h.Metadata)
	}
	// response-* overrides.
	g, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("m"),
		ResponseContentType: aws.String("application/x-test"), ResponseContentDisposition: aws.String("inline"),
		ResponseCacheControl: aws.String("no-cache")})
	if err != nil {
		t.Fatal(err)
	}
	g.Body.Close()
	if *g.ContentType != "application/x-test" || *g.ContentDisposition != "inline" || *g.CacheControl != "no-cache" {
		t.Fatalf("overrides not applied: %+v", g)
	}
}

func TestContentMD5AndChecksums(t *testing.T) {
	srv, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "bkt")
	data := randBytes(3, 300<<10)
	sum := md5.Sum(data)
	good := base64.StdEncoding.EncodeToString(sum[:])
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("ok"), Body: bytes.NewReader(data), ContentMD5: aws.String(good)}); err != nil {
		t.Fatal(err)
	}
	bad := md5.Sum([]byte("other"))
	_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("bad"), Body: bytes.NewReader(data), ContentMD5: aws.String(base64.StdEncoding.EncodeToString(bad[:]))})
	wantCode(t, err, "BadDigest")
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("bad"), Body: bytes.NewReader(data), ContentMD5: aws.String("notbase64!!")})
	wantCode(t, err, "InvalidDigest")
	if _, err := srv.Store.StatObject("bkt", "bad"); err == nil {
		t.Fatal("object stored despite a bad digest")
	}
	for _, algo := range []types.ChecksumAlgorithm{types.ChecksumAlgorithmCrc32, types.ChecksumAlgorithmCrc32c, types.ChecksumAlgorithmCrc64nvme, types.ChecksumAlgorithmSha1, types.ChecksumAlgorithmSha256} {
		key := "ck-" + string(algo)
		out, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String(key), Body: bytes.NewReader(data), ChecksumAlgorithm: algo})
		if err != nil {
			t.Fatalf("%s: %v", algo, err)
		}
		g, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String(key), ChecksumMode: types.ChecksumModeEnabled})
		if err != nil {
			t.Fatalf("%s get: %v", algo, err)
		}
		body, err := io.ReadAll(g.Body) // the SDK validates the returned checksum while reading
		g.Body.Close()
		if err != nil || !bytes.Equal(body, data) {
			t.Fatalf("%s: get body: %v", algo, err)
		}
		var sent, got *string
		switch algo {
		case types.ChecksumAlgorithmCrc32:
			sent, got = out.ChecksumCRC32, g.ChecksumCRC32
		case types.ChecksumAlgorithmCrc32c:
			sent, got = out.ChecksumCRC32C, g.ChecksumCRC32C
		case types.ChecksumAlgorithmCrc64nvme:
			sent, got = out.ChecksumCRC64NVME, g.ChecksumCRC64NVME
		case types.ChecksumAlgorithmSha1:
			sent, got = out.ChecksumSHA1, g.ChecksumSHA1
		case types.ChecksumAlgorithmSha256:
			sent, got = out.ChecksumSHA256, g.ChecksumSHA256
		}
		if sent == nil || got == nil || *sent != *got {
			t.Fatalf("%s: checksum put %v get %v", algo, sent, got)
		}
		// A copy that asks for the algorithm states the copy's checksum in its
		// CopyObjectResult, as S3 does.
		cp, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("bkt"), Key: aws.String(key + "-copy"),
			CopySource: aws.String("bkt/" + key), ChecksumAlgorithm: algo})
		if err != nil {
			t.Fatalf("%s copy: %v", algo, err)
		}
		r := cp.CopyObjectResult
		copied := map[types.ChecksumAlgorithm]*string{types.ChecksumAlgorithmCrc32: r.ChecksumCRC32, types.ChecksumAlgorithmCrc32c: r.ChecksumCRC32C,
			types.ChecksumAlgorithmCrc64nvme: r.ChecksumCRC64NVME, types.ChecksumAlgorithmSha1: r.ChecksumSHA1, types.ChecksumAlgorithmSha256: r.ChecksumSHA256}[algo]
		if copied == nil || *copied != *sent || r.ChecksumType != types.ChecksumTypeFullObject {
			t.Fatalf("%s: CopyObjectResult checksum %v (%s), want %s", algo, copied, r.ChecksumType, *sent)
		}
	}
	// A wrong checksum value is refused and nothing is stored.
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("wrongck"), Body: bytes.NewReader(data), ChecksumCRC32C: aws.String("AAAAAA==")})
	wantCode(t, err, "BadDigest")
	if _, err := srv.Store.StatObject("bkt", "wrongck"); err == nil {
		t.Fatal("object stored despite a bad checksum")
	}
}

func TestRangesAndConditionals(t *testing.T) {
	_, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "bkt")
	data := randBytes(5, 700<<10)
	put := mustPut(t, c, "bkt", "r", data)
	n := int64(len(data))
	for _, tc := range []struct {
		rg       string
		off, len int64
	}{
		{"bytes=0-0", 0, 1}, {"bytes=10-99", 10, 90}, {"bytes=262140-262150", 262140, 11},
		{"bytes=500000-", 500000, n - 500000}, {"bytes=-100", n - 100, 100}, {"bytes=0-99999999", 0, n},
	} {
		out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("r"), Range: aws.String(tc.rg)})
		if err != nil {
			t.Fatalf("%s: %v", tc.rg, err)
		}
		got, _ := io.ReadAll(out.Body)
		out.Body.Close()
		if !bytes.Equal(got, data[tc.off:tc.off+tc.len]) {
			t.Fatalf("%s: wrong bytes (%d)", tc.rg, len(got))
		}
		if want := fmt.Sprintf("bytes %d-%d/%d", tc.off, tc.off+tc.len-1, n); *out.ContentRange != want {
			t.Fatalf("%s: content-range %s want %s", tc.rg, *out.ContentRange, want)
		}
	}
	_, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("r"), Range: aws.String(fmt.Sprintf("bytes=%d-", n))})
	wantCode(t, err, "InvalidRange")

	etag := *put.ETag
	past := time.Now().Add(-time.Hour)
	future := time.Now().Add(time.Hour)
	cases := []struct {
		name string
		in   s3.GetObjectInput
		code string // "" = 200, "NotModified" = 304
	}{
		{"if-match ok", s3.GetObjectInput{IfMatch: aws.String(etag)}, ""},
		{"if-match fail", s3.GetObjectInput{IfMatch: aws.String(`"nope"`)}, "PreconditionFailed"},
		{"if-none-match hit", s3.GetObjectInput{IfNoneMatch: aws.String(etag)}, "NotModified"},
		{"if-none-match miss", s3.GetObjectInput{IfNoneMatch: aws.String(`"nope"`)}, ""},
		{"if-modified-since past", s3.GetObjectInput{IfModifiedSince: aws.Time(past)}, ""},
		{"if-modified-since future", s3.GetObjectInput{IfModifiedSince: aws.Time(future)}, "NotModified"},
		{"if-unmodified-since past", s3.GetObjectInput{IfUnmodifiedSince: aws.Time(past)}, "PreconditionFailed"},
		{"if-unmodified-since future", s3.GetObjectInput{IfUnmodifiedSince: aws.Time(future)}, ""},
		{"if-match beats unmodified-since", s3.GetObjectInput{IfMatch: aws.String(etag), IfUnmodifiedSince: aws.Time(past)}, ""},
	}
	for _, tc := range cases {
		in := tc.in
		in.Bucket, in.Key = aws.String("bkt"), aws.String("r")
		out, err := c.GetObject(ctx, &in)
		if tc.code == "" {
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			out.Body.Close()
			continue
		}
		if tc.code == "NotModified" {
			var re interface{ HTTPStatusCode() int }
			if !errors.As(err, &re) || re.HTTPStatusCode() != 304 {
				t.Fatalf("%s: want 304, got %v", tc.name, err)
			}
			continue
		}
		wantCode(t, err, tc.code)
	}
	// Conditional create.
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("r"), Body: strings.NewReader("x"), IfNoneMatch: aws.String("*")})
	wantCode(t, err, "PreconditionFailed")
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("new"), Body: strings.NewReader("x"), IfNoneMatch: aws.String("*")}); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, c, "bkt", "r"); !bytes.Equal(got, data) {
		t.Fatal("conditional create overwrote the object")
	}
}

func TestDeleteObjects(t *testing.T) {
	_, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "bkt")
	var ids []types.ObjectIdentifier
	for i := 0; i < 10; i++ {
		k := fmt.Sprintf("k%d", i)
		mustPut(t, c, "bkt", k, []byte(k))
		ids = append(ids, types.ObjectIdentifier{Key: aws.String(k)})
	}
	ids = append(ids, types.ObjectIdentifier{Key: aws.String("never-existed")})
	out, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("bkt"), Delete: &types.Delete{Objects: ids}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Deleted) != 11 || len(out.Errors) != 0 {
		t.Fatalf("deleted %d errors %v", len(out.Deleted), out.Errors)
	}
	l, _ := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("bkt")})
	if len(l.Contents) != 0 {
		t.Fatalf("%d objects left", len(l.Contents))
	}
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("bkt"), Key: aws.String("never")}); err != nil {
		t.Fatalf("delete of a missing key: %v", err)
	}
}

func TestCopyObject(t *testing.T) {
	_, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "src")
	mustCreateBucket(t, c, "dst")
	data := randBytes(8, 600<<10)
	c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("src"), Key: aws.String("a b+c"), Body: bytes.NewReader(data),
		ContentType: aws.String("image/png"), Metadata: map[string]string{"k": "v"}})
	out, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("dst"), Key: aws.String("copy"), CopySource: aws.String("src/a%20b%2Bc")})
	if err != nil {
		t.Fatal(err)
	}
	if *out.CopyObjectResult.ETag != `"`+md5hex(data)+`"` {
		t.Fatalf("copy etag %s", *out.CopyObjectResult.ETag)
	}
	if got := mustGet(t, c, "dst", "copy"); !bytes.Equal(got, data) {
		t.Fatal("copy differs")
	}
	h, _ := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("dst"), Key: aws.String("copy")})
	if *h.ContentType != "image/png" || h.Metadata["k"] != "v" {
		t.Fatalf("COPY directive lost metadata: %+v", h)
	}
	_, err = c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("dst"), Key: aws.String("copy"), CopySource: aws.String("dst/copy"),
		MetadataDirective: types.MetadataDirectiveReplace, ContentType: aws.String("text/x"), Metadata: map[string]string{"n": "w"}})
	if err != nil {
		t.Fatal(err)
	}
	h, _ = c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("dst"), Key: aws.String("copy")})
	if *h.ContentType != "text/x" || h.Metadata["n"] != "w" || h.Metadata["k"] != "" {
		t.Fatalf("REPLACE directive: %+v", h)
	}
	if got := mustGet(t, c, "dst", "copy"); !bytes.Equal(got, data) {
		t.Fatal("copy onto itself changed the body")
	}
	_, err = c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("dst"), Key: aws.String("copy"), CopySource: aws.String("dst/copy")})
	wantCode(t, err, "InvalidRequest")
	_, err = c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("dst"), Key: aws.String("x"), CopySource: aws.String("src/missing")})
	wantCode(t, err, "NoSuchKey")
	_, err = c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("dst"), Key: aws.String("x"), CopySource: aws.String("src/a%20b%2Bc"), CopySourceIfMatch: aws.String(`"0000"`)})
	wantCode(t, err, "PreconditionFailed")
}

func TestListing(t *testing.T) {
	_, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "bkt")
	keys := []string{"a.txt", "photos/2024/x.jpg", "photos/2024/y.jpg", "photos/2025/z.jpg", "photos/top.jpg", "zeta", "sp ace/+plus", "ünï/cödé"}
	for _, k := range keys {
		mustPut(t, c, "bkt", k, []byte(k))
	}
	// V2 paging through everything, one key per page.
	var got []string
	var token *string
	for {
		out, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("bkt"), MaxKeys: aws.Int32(1), ContinuationToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range out.Contents {
			got = append(got, *o.Key)
		}
		if !*out.IsTruncated {
			break
		}
		token = out.NextContinuationToken
	}
	if len(got) != len(keys) {
		t.Fatalf("paged listing %v", got)
	}
	// Delimiter at the root.
	out, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("bkt"), Delimiter: aws.String("/")})
	if err != nil {
		t.Fatal(err)
	}
	var cps []string
	for _, p := range out.CommonPrefixes {
		cps = append(cps, *p.Prefix)
	}
	if fmt.Sprint(cps) != "[photos/ sp ace/ ünï/]" || len(out.Contents) != 2 || *out.KeyCount != 5 {
		t.Fatalf("root listing prefixes %v contents %d keycount %d", cps, len(out.Contents), *out.KeyCount)
	}
	// Prefix + delimiter, with paging across common prefixes.
	var seen []string
	token = nil
	for {
		out, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("bkt"), Prefix: aws.String("photos/"), Delimiter: aws.String("/"), MaxKeys: aws.Int32(1), ContinuationToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range out.CommonPrefixes {
			seen = append(seen, *p.Prefix)
		}
		for _, o := range out.Contents {
			seen = append(seen, *o.Key)
		}
		if !*out.IsTruncated {
			break
		}
		token = out.NextContinuationToken
	}
	if fmt.Sprint(seen) != "[photos/2024/ photos/2025/ photos/top.jpg]" {
		t.Fatalf("paged delimiter listing %v", seen)
	}
	// start-after.
	out, _ = c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("bkt"), StartAfter: aws.String("photos/2025/z.jpg")})
	if len(out.Contents) != 4 || *out.Contents[0].Key != "photos/top.jpg" {
		t.Fatalf("start-after: %d first %s", len(out.Contents), *out.Contents[0].Key)
	}
	// encoding-type=url: the SDK does not decode, so we see the encoded form.
	out, _ = c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("bkt"), Prefix: aws.String("sp"), EncodingType: types.EncodingTypeUrl})
	if len(out.Contents) != 1 || *out.Contents[0].Key != "sp%20ace/%2Bplus" {
		t.Fatalf("url encoding: %v", *out.Contents[0].Key)
	}
	// V1 with marker.
	var v1 []string
	var marker *string
	for {
		out, err := c.ListObjects(ctx, &s3.ListObjectsInput{Bucket: aws.String("bkt"), MaxKeys: aws.Int32(3), Marker: marker, Delimiter: aws.String("/")})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range out.Contents {
			v1 = append(v1, *o.Key)
		}
		for _, p := range out.CommonPrefixes {
			v1 = append(v1, *p.Prefix)
		}
		if !*out.IsTruncated {
			break
		}
		marker = out.NextMarker
	}
	if len(v1) != 5 {
		t.Fatalf("v1 listing %v", v1)
	}
	_, err = c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("missing-bucket")})
	wantCode(t, err, "NoSuchBucket")
}

func TestMultipartUpload(t *testing.T) {
	srv, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "bkt")
	const partSize = 5 << 20
	data := randBytes(11, 2*partSize+1234)
	cr, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("mp"), ContentType: aws.String("video/mp4")})
	if err != nil {
		t.Fatal(err)
	}
	id := cr.UploadId
	var parts []types.CompletedPart
	md := md5.New()
	for i := 0; i*partSize < len(data); i++ {
		chunk := data[i*partSize : min(len(data), (i+1)*partSize)]
		up, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("bkt"), Key: aws.String("mp"), UploadId: id, PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(chunk)})
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, types.CompletedPart{ETag: up.ETag, PartNumber: aws.Int32(int32(i + 1))})
		s := md5.Sum(chunk)
		md.Write(s[:])
	}
	lu, err := c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("bkt")})
	if err != nil || len(lu.Uploads) != 1 || *lu.Uploads[0].UploadId != *id {
		t.Fatalf("list uploads %+v %v", lu, err)
	}
	lp, err := c.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String("bkt"), Key: aws.String("mp"), UploadId: id, MaxParts: aws.Int32(2)})
	if err != nil || len(lp.Parts) != 2 || !*lp.IsTruncated || *lp.NextPartNumberMarker != "2" {
		t.Fatalf("list parts %+v %v", lp, err)
	}
	// Out of order, unknown part, wrong ETag.
	_, err = c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("mp"), UploadId: id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{parts[1], parts[0]}}})
	wantCode(t, err, "InvalidPartOrder")
	_, err = c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("mp"), UploadId: id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{parts[0], {ETag: parts[1].ETag, PartNumber: aws.Int32(9)}}}})
	wantCode(t, err, "InvalidPart")
	_, err = c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("mp"), UploadId: id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{ETag: aws.String(`"00"`), PartNumber: aws.Int32(1)}}}})
	wantCode(t, err, "InvalidPart")
	done, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("mp"), UploadId: id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`"%x-%d"`, md.Sum(nil), len(parts)); *done.ETag != want {
		t.Fatalf("etag %s want %s", *done.ETag, want)
	}
	if got := mustGet(t, c, "bkt", "mp"); !bytes.Equal(got, data) {
		t.Fatal("multipart object differs")
	}
	// GET by part number.
	g, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("mp"), PartNumber: aws.Int32(2)})
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := io.ReadAll(g.Body)
	g.Body.Close()
	if !bytes.Equal(p2, data[partSize:2*partSize]) || *g.PartsCount != 3 {
		t.Fatalf("part 2: %d bytes, parts count %v", len(p2), g.PartsCount)
	}
	_, err = c.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String("bkt"), Key: aws.String("mp"), UploadId: id})
	wantCode(t, err, "NoSuchUpload")

	// Too-small parts and abort.
	cr2, _ := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("small")})
	var small []types.CompletedPart
	for i := 1; i <= 2; i++ {
		up, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("bkt"), Key: aws.String("small"), UploadId: cr2.UploadId, PartNumber: aws.Int32(int32(i)), Body: bytes.NewReader([]byte("tiny"))})
		if err != nil {
			t.Fatal(err)
		}
		small = append(small, types.CompletedPart{ETag: up.ETag, PartNumber: aws.Int32(int32(i))})
	}
	_, err = c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("small"), UploadId: cr2.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: small}})
	wantCode(t, err, "EntityTooSmall")
	if _, err := c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("small"), UploadId: cr2.UploadId}); err != nil {
		t.Fatal(err)
	}
	_, err = c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("bkt"), Key: aws.String("small"), UploadId: cr2.UploadId, PartNumber: aws.Int32(3), Body: bytes.NewReader([]byte("x"))})
	wantCode(t, err, "NoSuchUpload")
	if _, err := srv.Store.StatObject("bkt", "small"); err == nil {
		t.Fatal("aborted upload created an object")
	}

	// UploadPartCopy from the completed object.
	cr3, _ := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("pc")})
	pc1, err := c.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: aws.String("bkt"), Key: aws.String("pc"), UploadId: cr3.UploadId, PartNumber: aws.Int32(1),
		CopySource: aws.String("bkt/mp"), CopySourceRange: aws.String(fmt.Sprintf("bytes=0-%d", partSize-1))})
	if err != nil {
		t.Fatal(err)
	}
	pc2, err := c.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: aws.String("bkt"), Key: aws.String("pc"), UploadId: cr3.UploadId, PartNumber: aws.Int32(2),
		CopySource: aws.String("bkt/mp"), CopySourceRange: aws.String(fmt.Sprintf("bytes=%d-%d", 2*partSize, len(data)-1))})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("pc"), UploadId: cr3.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{
			{ETag: pc1.CopyPartResult.ETag, PartNumber: aws.Int32(1)}, {ETag: pc2.CopyPartResult.ETag, PartNumber: aws.Int32(2)}}}})
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, data[:partSize]...), data[2*partSize:]...)
	if got := mustGet(t, c, "bkt", "pc"); !bytes.Equal(got, want) {
		t.Fatal("part-copy object differs")
	}

	// A copy range must lie within the source and name both ends: unlike a GET's Range,
	// it is not clamped (S3: 400 InvalidArgument, "Range specified is not valid for source
	// object of size").
	cr4, _ := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("pc2")})
	for _, rg := range []string{
		fmt.Sprintf("bytes=0-%d", len(data)), fmt.Sprintf("bytes=%d-%d", len(data), len(data)+10),
		"bytes=10-5", "bytes=-5", "bytes=5-", "bytes=a-b", "0-5",
	} {
		_, err := c.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: aws.String("bkt"), Key: aws.String("pc2"), UploadId: cr4.UploadId, PartNumber: aws.Int32(1),
			CopySource: aws.String("bkt/mp"), CopySourceRange: aws.String(rg)})
		wantCode(t, err, "InvalidArgument")
	}
	lp4, err := c.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String("bkt"), Key: aws.String("pc2"), UploadId: cr4.UploadId})
	if err != nil || len(lp4.Parts) != 0 {
		t.Fatalf("refused part copies stored parts: %v %v", lp4, err)
	}
}

func TestAuthFailures(t *testing.T) {
	srv, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "bkt")
	mustPut(t, c, "bkt", "k", []byte("secret data"))

	wrong := newClient(t, srv.URL, testutil.AccessKey, "wrong-secret")
	_, err := wrong.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("k")})
	wantCode(t, err, "SignatureDoesNotMatch")
	_, err = wrong.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("k"), Body: strings.NewReader("evil")})
	wantCode(t, err, "SignatureDoesNotMatch")
	unknown := newClient(t, srv.URL, "NOSUCHKEY", testutil.SecretKey)
	_, err = unknown.ListBuckets(ctx, &s3.ListBucketsInput{})
	wantCode(t, err, "InvalidAccessKeyId")
	skewed := newClient(t, srv.URL, testutil.AccessKey, testutil.SecretKey, func(o *s3.Options) {
		o.HTTPSignerV4 = nil
		o.ClientLogMode = 0
	}, s3.WithSigV4SigningRegion("us-east-1"))
	_ = skewed
	// Anonymous request.
	resp, err := http.Get(srv.URL + "/b/k")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(body), "<Code>AccessDenied</Code>") {
		t.Fatalf("anonymous GET: %d %s", resp.StatusCode, body)
	}
	if got := mustGet(t, c, "bkt", "k"); string(got) != "secret data" {
		t.Fatal("a refused request changed the object")
	}
}

func TestPresignedURLs(t *testing.T) {
	srv, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "bkt")
	mustPut(t, c, "bkt", "doc.txt", []byte("presigned body"))
	ps := s3.NewPresignClient(c)
	req, err := ps.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("doc.txt")}, s3.WithPresignExpires(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(req.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "presigned body" {
		t.Fatalf("presigned GET: %d %s", resp.StatusCode, body)
	}
	// Tampered signature.
	i := strings.Index(req.URL, "X-Amz-Signature=") + len("X-Amz-Signature=")
	flip := map[byte]byte{'0': '1'}
	c2, ok := flip[req.URL[i]]
	if !ok {
		c2 = '0'
	}
	resp, _ = http.Get(req.URL[:i] + string(c2) + req.URL[i+1:])
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("tampered presign: %d", resp.StatusCode)
	}
	// Presigned PUT.
	preq, err := ps.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("up.txt")}, s3.WithPresignExpires(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	hr, _ := http.NewRequest(http.MethodPut, preq.URL, strings.NewReader("uploaded"))
	for k, v := range preq.SignedHeader {
		hr.Header[k] = v
	}
	resp, err = srv.Client().Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || string(mustGet(t, c, "bkt", "up.txt")) != "uploaded" {
		t.Fatalf("presigned PUT: %d", resp.StatusCode)
	}
}

func TestKeysAreNotPaths(t *testing.T) {
	srv, c := setup(t)
	mustCreateBucket(t, c, "bkt")
	keys := []string{"../../etc/passwd", "../../../../tmp/cairn-escape", "a/../../b", "/leading", "nul\x00inside", "dot/./x", "trailing/"}
	for i, k := range keys {
		data := []byte(fmt.Sprint("value ", i))
		if _, err := c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String(k), Body: bytes.NewReader(data)}); err != nil {
			t.Fatalf("put %q: %v", k, err)
		}
		if got := mustGet(t, c, "bkt", k); !bytes.Equal(got, data) {
			t.Fatalf("key %q: got %q", k, got)
		}
	}
	if _, err := os.Stat("/tmp/cairn-escape"); err == nil {
		t.Fatal("a key became a file outside the data directory")
	}
	// Nothing but the store's own files exist in the data directory.
	filepath.Walk(srv.Dir, func(p string, info os.FileInfo, err error) error {
		if strings.Contains(p, "passwd") || strings.Contains(p, "escape") {
			t.Errorf("key became a path: %s", p)
		}
		return nil
	})
	_, err := c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String(strings.Repeat("k", 1025)), Body: strings.NewReader("x")})
	wantCode(t, err, "KeyTooLongError")
}

func asStatus(err error, target *interface{ HTTPStatusCode() int }) bool {
	return errors.As(err, target)
}

func TestMultipartChecksums(t *testing.T) {
	_, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "bkt")
	const partSize = 5 << 20
	data := randBytes(41, 2*partSize+777)
	for _, tc := range []struct {
		algo types.ChecksumAlgorithm
		typ  types.ChecksumType
	}{
		{types.ChecksumAlgorithmCrc32c, types.ChecksumTypeFullObject},
		{types.ChecksumAlgorithmCrc64nvme, types.ChecksumTypeFullObject},
		{types.ChecksumAlgorithmCrc32, types.ChecksumTypeComposite},
		{types.ChecksumAlgorithmSha256, types.ChecksumTypeComposite},
	} {
		t.Run(string(tc.algo)+"/"+string(tc.typ), func(t *testing.T) {
			key := "mp-" + string(tc.algo)
			cr, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String(key), ChecksumAlgorithm: tc.algo, ChecksumType: tc.typ})
			if err != nil {
				t.Fatal(err)
			}
			var parts []types.CompletedPart
			for i := 0; i*partSize < len(data); i++ {
				up, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("bkt"), Key: aws.String(key), UploadId: cr.UploadId,
					PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(data[i*partSize : min(len(data), (i+1)*partSize)]), ChecksumAlgorithm: tc.algo})
				if err != nil {
					t.Fatal(err)
				}
				parts = append(parts, types.CompletedPart{ETag: up.ETag, PartNumber: aws.Int32(int32(i + 1)),
					ChecksumCRC32: up.ChecksumCRC32, ChecksumCRC32C: up.ChecksumCRC32C, ChecksumCRC64NVME: up.ChecksumCRC64NVME, ChecksumSHA256: up.ChecksumSHA256})
			}
			if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String(key), UploadId: cr.UploadId,
				MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}); err != nil {
				t.Fatal(err)
			}
			h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("bkt"), Key: aws.String(key), ChecksumMode: types.ChecksumModeEnabled})
			if err != nil {
				t.Fatal(err)
			}
			var got *string
			switch tc.algo {
			case types.ChecksumAlgorithmCrc32:
				got = h.ChecksumCRC32
			case types.ChecksumAlgorithmCrc32c:
				got = h.ChecksumCRC32C
			case types.ChecksumAlgorithmCrc64nvme:
				got = h.ChecksumCRC64NVME
			case types.ChecksumAlgorithmSha256:
				got = h.ChecksumSHA256
			}
			if got == nil {
				t.Fatal("no checksum returned")
			}
			if tc.typ == types.ChecksumTypeFullObject {
				a, _ := checksum.ParseAlgorithm(string(tc.algo))
				hs := a.New()
				hs.Write(data)
				if want := checksum.Encode(hs.Sum(nil)); *got != want {
					t.Fatalf("full-object checksum %s, want %s", *got, want)
				}
			} else if !strings.HasSuffix(*got, "-3") {
				t.Fatalf("composite checksum %s", *got)
			}
			// The SDK validates a full-object checksum while reading.
			g, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String(key), ChecksumMode: types.ChecksumModeEnabled})
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(g.Body)
			g.Body.Close()
			if err != nil || !bytes.Equal(body, data) {
				t.Fatalf("get: %v", err)
			}
		})
	}
}

// TestListingEscapes checks the hand-written listing XML with keys that need escaping.
func TestListingEscapes(t *testing.T) {
	_, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "bkt")
	keys := []string{`a&b`, `<tag>`, `quote"s`, `apos'`, "tab\tkey", "ünïcode/ключ", "x]]>y"}
	for _, k := range keys {
		mustPut(t, c, "bkt", k, []byte(k))
	}
	for _, v2 := range []bool{true, false} {
		var got []string
		if v2 {
			out, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("bkt"), FetchOwner: aws.Bool(true)})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range out.Contents {
				got = append(got, *o.Key)
				if o.Owner == nil || *o.Owner.DisplayName != "root" || *o.Size != int64(len(*o.Key)) {
					t.Fatalf("entry %+v", o)
				}
			}
		} else {
			out, err := c.ListObjects(ctx, &s3.ListObjectsInput{Bucket: aws.String("bkt")})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range out.Contents {
				got = append(got, *o.Key)
			}
		}
		if len(got) != len(keys) {
			t.Fatalf("v2=%v: listed %q", v2, got)
		}
		seen := map[string]bool{}
		for _, k := range got {
			seen[k] = true
		}
		for _, k := range keys {
			if !seen[k] {
				t.Fatalf("v2=%v: key %q missing from %q", v2, k, got)
			}
		}
	}
}

// TestGetObjectAttributes: every attribute of a plain and of a multipart object, parts
// paged, and the errors.
func TestGetObjectAttributes(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{}, func(c *s3api.Config) { c.MinPartSize = 1 << 10 })
	c := newClient(t, srv.URL, testutil.AccessKey, testutil.SecretKey)
	ctx := context.Background()
	mustCreateBucket(t, c, "bkt")
	all := []types.ObjectAttributes{types.ObjectAttributesEtag, types.ObjectAttributesChecksum, types.ObjectAttributesObjectParts,
		types.ObjectAttributesStorageClass, types.ObjectAttributesObjectSize}
	data := randBytes(7, 3000)
	put, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("plain"), Body: bytes.NewReader(data),
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c})
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.GetObjectAttributes(ctx, &s3.GetObjectAttributesInput{Bucket: aws.String("bkt"), Key: aws.String("plain"), ObjectAttributes: all})
	if err != nil {
		t.Fatal(err)
	}
	if `"`+aws.ToString(a.ETag)+`"` != aws.ToString(put.ETag) || aws.ToInt64(a.ObjectSize) != 3000 || a.StorageClass != types.StorageClassStandard ||
		a.Checksum == nil || aws.ToString(a.Checksum.ChecksumCRC32C) != aws.ToString(put.ChecksumCRC32C) || a.Checksum.ChecksumType != types.ChecksumTypeFullObject ||
		a.ObjectParts != nil || a.LastModified == nil {
		t.Fatalf("plain object attributes: %+v (put %+v)", a, put)
	}
	// Only what is asked for.
	a, err = c.GetObjectAttributes(ctx, &s3.GetObjectAttributesInput{Bucket: aws.String("bkt"), Key: aws.String("plain"),
		ObjectAttributes: []types.ObjectAttributes{types.ObjectAttributesObjectSize}})
	if err != nil || a.ETag != nil || a.Checksum != nil || a.StorageClass != "" || aws.ToInt64(a.ObjectSize) != 3000 {
		t.Fatalf("size only: %+v %v", a, err)
	}

	// A multipart object of five parts, with CRC32 checksums.
	cr, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("mp"),
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32, ChecksumType: types.ChecksumTypeComposite})
	if err != nil {
		t.Fatal(err)
	}
	var parts []types.CompletedPart
	sizes := []int{2000, 2000, 2000, 2000, 123}
	for i, n := range sizes {
		up, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("bkt"), Key: aws.String("mp"), UploadId: cr.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(randBytes(uint64(i), n)), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32})
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, types.CompletedPart{ETag: up.ETag, PartNumber: aws.Int32(int32(i + 1)), ChecksumCRC32: up.ChecksumCRC32})
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("mp"), UploadId: cr.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}); err != nil {
		t.Fatal(err)
	}
	var got []types.ObjectPart
	marker := ""
	for page := 0; ; page++ {
		a, err := c.GetObjectAttributes(ctx, &s3.GetObjectAttributesInput{Bucket: aws.String("bkt"), Key: aws.String("mp"), ObjectAttributes: all,
			MaxParts: aws.Int32(2), PartNumberMarker: aws.String(marker)})
		if err != nil {
			t.Fatal(err)
		}
		op := a.ObjectParts
		if op == nil || aws.ToInt32(op.TotalPartsCount) != 5 || aws.ToInt32(op.MaxParts) != 2 || aws.ToInt64(a.ObjectSize) != 8123 ||
			a.Checksum == nil || !strings.HasSuffix(aws.ToString(a.Checksum.ChecksumCRC32), "-5") || a.Checksum.ChecksumType != types.ChecksumTypeComposite {
			t.Fatalf("page %d: %+v %+v", page, a, op)
		}
		got = append(got, op.Parts...)
		if !aws.ToBool(op.IsTruncated) {
			break
		}
		marker = aws.ToString(op.NextPartNumberMarker)
		if page > 3 {
			t.Fatal("parts never end")
		}
	}
	if len(got) != 5 {
		t.Fatalf("%d parts listed", len(got))
	}
	for i, p := range got {
		if aws.ToInt32(p.PartNumber) != int32(i+1) || aws.ToInt64(p.Size) != int64(sizes[i]) ||
			aws.ToString(p.ChecksumCRC32) != aws.ToString(parts[i].ChecksumCRC32) {
			t.Fatalf("part %d: %+v, want checksum %s", i+1, p, aws.ToString(parts[i].ChecksumCRC32))
		}
	}
	// A part read returns the part's own checksum.
	g, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("mp"), PartNumber: aws.Int32(2), ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		t.Fatal(err)
	}
	g.Body.Close()
	if aws.ToString(g.ChecksumCRC32) != aws.ToString(parts[1].ChecksumCRC32) {
		t.Fatalf("part 2 read: checksum %q, want %q", aws.ToString(g.ChecksumCRC32), aws.ToString(parts[1].ChecksumCRC32))
	}

	// Errors.
	_, err = c.GetObjectAttributes(ctx, &s3.GetObjectAttributesInput{Bucket: aws.String("bkt"), Key: aws.String("nope"), ObjectAttributes: all})
	wantCode(t, err, "NoSuchKey")
	_, err = c.GetObjectAttributes(ctx, &s3.GetObjectAttributesInput{Bucket: aws.String("bkt"), Key: aws.String("plain"), ObjectAttributes: []types.ObjectAttributes{"Colour"}})
	wantCode(t, err, "InvalidArgument")
	st, body := do(t, signed(t, "GET", srv.URL+"/bkt/plain?attributes", nil, nil, time.Now()))
	expectS3Error(t, st, body, 400, "InvalidArgument")
	st, body = do(t, signed(t, "GET", srv.URL+"/bkt/plain?attributes", nil, map[string]string{"x-amz-object-attributes": "ETag", "x-amz-max-parts": "-1"}, time.Now()))
	expectS3Error(t, st, body, 400, "InvalidArgument")
}
