package s3api_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/s3api"
	"github.com/cairnfs/cairn/internal/sse"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil"
)

// testKeyring is a master keyring of one key.
func testKeyring(t testing.TB) *sse.Keyring {
	t.Helper()
	kr, err := sse.NewKeyring(sse.MasterKey{Name: "test-1", Key: bytes.Repeat([]byte{1}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// sseServer starts an HTTPS server with a master keyring, a small minimum part size and
// small chunks, and returns a client of it.
func sseServer(t *testing.T, keys s3api.MasterKeys, mod func(*s3api.Config)) (*testutil.Server, *s3.Client) {
	t.Helper()
	srv := testutil.StartTLSServer(t, store.Config{InlineMax: 4 << 10, ChunkSize: 256 << 10, SegmentSize: 8 << 20, Reserve: 1}, func(c *s3api.Config) {
		if keys != nil {
			c.MasterKeys = keys
		}
		c.MinPartSize = 100 << 10
		if mod != nil {
			mod(c)
		}
	})
	return srv, newClient(t, srv.URL, testutil.AccessKey, testutil.SecretKey, func(o *s3.Options) { o.HTTPClient = srv.Client() })
}

// marked returns n bytes of random data with marker written at several places.
func marked(seed uint64, n int, marker string) []byte {
	b := randBytes(seed, n)
	for _, at := range []int{0, n / 3, n - len(marker)} {
		copy(b[at:], marker)
	}
	return b
}

// assertNoPlaintext fails if any file under dir holds marker.
func assertNoPlaintext(t *testing.T, dir, marker string) {
	t.Helper()
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if bytes.Contains(data, []byte(marker)) {
			t.Errorf("%s holds the plaintext marker", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatalf("no files under %s", dir)
	}
}

// customer is an SSE-C key.
type customer []byte

func (k customer) put(in *s3.PutObjectInput) {
	in.SSECustomerAlgorithm, in.SSECustomerKey, in.SSECustomerKeyMD5 = aws.String("AES256"), aws.String(b64(k)), aws.String(b64md5(k))
}
func (k customer) get(in *s3.GetObjectInput) {
	in.SSECustomerAlgorithm, in.SSECustomerKey, in.SSECustomerKeyMD5 = aws.String("AES256"), aws.String(b64(k)), aws.String(b64md5(k))
}

func httpStatus(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// body is a test's reader of GET answers: bodyOf(t).of(c.GetObject(...)).
type body struct{ t *testing.T }

func (b body) of(out *s3.GetObjectOutput, err error) []byte {
	t := b.t
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// sseRanges are Range headers around package (64 KiB) boundaries and the ends.
func sseRanges(size int) []string {
	p := sse.PackageSize
	return []string{"bytes=0-0", "bytes=0-99", fmt.Sprintf("bytes=%d-%d", p-1, p), fmt.Sprintf("bytes=%d-%d", p, 2*p+5),
		fmt.Sprintf("bytes=%d-", size-10), "bytes=-7", fmt.Sprintf("bytes=100-%d", size+100)}
}

func rangeOf(b []byte, rg string) []byte {
	spec := strings.TrimPrefix(rg, "bytes=")
	a, z, _ := strings.Cut(spec, "-")
	var first, last int
	if a == "" {
		fmt.Sscan(z, &last)
		return b[len(b)-last:]
	}
	fmt.Sscan(a, &first)
	last = len(b) - 1
	if z != "" {
		fmt.Sscan(z, &last)
	}
	return b[first:min(last+1, len(b))]
}

// TestSSES3: AES256 objects round-trip whole and in ranges, report their plaintext
// size and MD5 ETag everywhere, say how they are stored, and no stored file holds their
// plaintext; copies re-encrypt.
func TestSSES3(t *testing.T) {
	srv, c := sseServer(t, testKeyring(t), nil)
	ctx := context.Background()
	mustCreateBucket(t, c, "enc")
	const marker = "PLAINTEXT-MARKER-sse-s3-7f3a"
	data := marked(1, 3*sse.PackageSize+1234, marker)
	out, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("enc"), Key: aws.String("k"), Body: bytes.NewReader(data),
		ServerSideEncryption: types.ServerSideEncryptionAes256})
	if err != nil {
		t.Fatal(err)
	}
	if out.ServerSideEncryption != types.ServerSideEncryptionAes256 || strings.Trim(*out.ETag, `"`) != md5hex(data) {
		t.Fatalf("PUT answered %q, ETag %s", out.ServerSideEncryption, *out.ETag)
	}
	rec, err := srv.Store.StatObject("enc", "k")
	if err != nil {
		t.Fatal(err)
	}
	if rec.SSE.Algorithm != sse.S3 || rec.SSE.KeyID != "test-1" || rec.SSE.PlainSize != int64(len(data)) || rec.Size != sse.CipherSize(int64(len(data))) {
		t.Fatalf("record: %+v size %d", rec.SSE, rec.Size)
	}
	g, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("enc"), Key: aws.String("k")})
	if g != nil && (g.ServerSideEncryption != types.ServerSideEncryptionAes256 || *g.ContentLength != int64(len(data))) {
		t.Fatalf("GET: %q, length %d", g.ServerSideEncryption, *g.ContentLength)
	}
	if got := bodyOf(t).of(g, err); !bytes.Equal(got, data) {
		t.Fatal("GET returned other bytes")
	}
	h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("enc"), Key: aws.String("k")})
	if err != nil || *h.ContentLength != int64(len(data)) || h.ServerSideEncryption != types.ServerSideEncryptionAes256 {
		t.Fatalf("HEAD: %v %+v", err, h)
	}
	for _, rg := range sseRanges(len(data)) {
		got := bodyOf(t).of(c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("enc"), Key: aws.String("k"), Range: aws.String(rg)}))
		if !bytes.Equal(got, rangeOf(data, rg)) {
			t.Fatalf("range %s: %d bytes, want %d", rg, len(got), len(rangeOf(data, rg)))
		}
	}
	l, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("enc")})
	if err != nil || len(l.Contents) != 1 || *l.Contents[0].Size != int64(len(data)) {
		t.Fatalf("list: %v %+v", err, l)
	}
	v, err := c.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String("enc")})
	if err != nil || len(v.Versions) != 1 || *v.Versions[0].Size != int64(len(data)) {
		t.Fatalf("versions: %v", err)
	}
	at, err := c.GetObjectAttributes(ctx, &s3.GetObjectAttributesInput{Bucket: aws.String("enc"), Key: aws.String("k"),
		ObjectAttributes: []types.ObjectAttributes{types.ObjectAttributesObjectSize, types.ObjectAttributesEtag}})
	if err != nil || *at.ObjectSize != int64(len(data)) {
		t.Fatalf("attributes: %v", err)
	}
	// Copies: encrypted to encrypted (a new data key), to a plain object (decrypted), and
	// in place back to AES256.
	cp, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("enc"), Key: aws.String("k2"), CopySource: aws.String("enc/k"),
		ServerSideEncryption: types.ServerSideEncryptionAes256})
	if err != nil || cp.ServerSideEncryption != types.ServerSideEncryptionAes256 || strings.Trim(*cp.CopyObjectResult.ETag, `"`) != md5hex(data) {
		t.Fatalf("copy: %v", err)
	}
	if rec2, _ := srv.Store.StatObject("enc", "k2"); bytes.Equal(rec2.SSE.SealedKey, rec.SSE.SealedKey) || !bytes.Equal(mustGet(t, c, "enc", "k2"), data) {
		t.Fatal("the copy")
	}
	other := randBytes(3, 70000)
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("enc"), Key: aws.String("other"), Body: bytes.NewReader(other),
		ServerSideEncryption: types.ServerSideEncryptionAes256}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("enc"), Key: aws.String("plain"), CopySource: aws.String("enc/other")}); err != nil {
		t.Fatal(err)
	}
	if rec, _ := srv.Store.StatObject("enc", "plain"); rec.SSE.Encrypted() || rec.Size != int64(len(other)) || !bytes.Equal(mustGet(t, c, "enc", "plain"), other) {
		t.Fatalf("a copy without encryption: %+v", rec.SSE)
	}
	cp, err = c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("enc"), Key: aws.String("plain"), CopySource: aws.String("enc/plain"),
		ServerSideEncryption: types.ServerSideEncryptionAes256})
	if err != nil || cp.ServerSideEncryption != types.ServerSideEncryptionAes256 || strings.Trim(*cp.CopyObjectResult.ETag, `"`) != md5hex(other) {
		t.Fatalf("copy in place to encrypt: %v", err)
	}
	if rec, _ := srv.Store.StatObject("enc", "plain"); !rec.SSE.Encrypted() || !bytes.Equal(mustGet(t, c, "enc", "plain"), other) {
		t.Fatal("the copy in place did not encrypt")
	}
	// Small and empty bodies.
	for _, n := range []int{0, 1, 100} {
		key := fmt.Sprintf("small%d", n)
		body := randBytes(uint64(n), n)
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("enc"), Key: aws.String(key), Body: bytes.NewReader(body),
			ServerSideEncryption: types.ServerSideEncryptionAes256}); err != nil {
			t.Fatal(err)
		}
		if got := mustGet(t, c, "enc", key); !bytes.Equal(got, body) {
			t.Fatalf("%d bytes: got %d", n, len(got))
		}
	}
	// SSE-C headers for an SSE-S3 object are refused.
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("enc"), Key: aws.String("k"), SSECustomerAlgorithm: aws.String("AES256"),
		SSECustomerKey: aws.String(b64(make([]byte, 32))), SSECustomerKeyMD5: aws.String(b64md5(make([]byte, 32)))})
	wantCode(t, err, "InvalidRequest")
	srv.Store.Close() // flush, and nothing writes while the files are read
	assertNoPlaintext(t, srv.Dir, marker)
}

// TestSSEC: SSE-C objects need their key on every read (missing: 400, wrong: 403), have
// an ETag that is not their MD5, and copy with a source key and a target key.
func TestSSEC(t *testing.T) {
	srv, c := sseServer(t, nil, nil) // SSE-C needs no master key
	ctx := context.Background()
	mustCreateBucket(t, c, "enc")
	k1, k2 := customer(bytes.Repeat([]byte{0xa1}, 32)), customer(bytes.Repeat([]byte{0xb2}, 32))
	const marker = "PLAINTEXT-MARKER-sse-c-91bd"
	data := marked(2, 2*sse.PackageSize+77, marker)
	in := &s3.PutObjectInput{Bucket: aws.String("enc"), Key: aws.String("k"), Body: bytes.NewReader(data)}
	k1.put(in)
	out, err := c.PutObject(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if *out.SSECustomerAlgorithm != "AES256" || *out.SSECustomerKeyMD5 != b64md5(k1) || strings.Trim(*out.ETag, `"`) == md5hex(data) || len(strings.Trim(*out.ETag, `"`)) != 32 {
		t.Fatalf("PUT answered %v %v ETag %s", out.SSECustomerAlgorithm, out.SSECustomerKeyMD5, *out.ETag)
	}
	get := func(k customer, rg string) (*s3.GetObjectOutput, error) {
		in := &s3.GetObjectInput{Bucket: aws.String("enc"), Key: aws.String("k")}
		if k != nil {
			k.get(in)
		}
		if rg != "" {
			in.Range = aws.String(rg)
		}
		return c.GetObject(ctx, in)
	}
	g, err := get(k1, "")
	if got := bodyOf(t).of(g, err); !bytes.Equal(got, data) || *g.SSECustomerKeyMD5 != b64md5(k1) || *g.ETag != *out.ETag {
		t.Fatal("GET with the key")
	}
	for _, rg := range sseRanges(len(data)) {
		if got := bodyOf(t).of(get(k1, rg)); !bytes.Equal(got, rangeOf(data, rg)) {
			t.Fatalf("range %s", rg)
		}
	}
	_, err = get(nil, "")
	wantCode(t, err, "InvalidRequest")
	_, err = get(k2, "")
	wantCode(t, err, "AccessDenied")
	_, err = c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("enc"), Key: aws.String("k")})
	if httpStatus(err) != 400 {
		t.Fatalf("HEAD without the key: %v", err)
	}
	_, err = c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("enc"), Key: aws.String("k"), SSECustomerAlgorithm: aws.String("AES256"),
		SSECustomerKey: aws.String(b64(k2)), SSECustomerKeyMD5: aws.String(b64md5(k2))})
	if httpStatus(err) != 403 {
		t.Fatalf("HEAD with another key: %v", err)
	}
	_, err = c.GetObjectAttributes(ctx, &s3.GetObjectAttributesInput{Bucket: aws.String("enc"), Key: aws.String("k"), ObjectAttributes: []types.ObjectAttributes{types.ObjectAttributesObjectSize}})
	wantCode(t, err, "InvalidRequest")
	// A key whose MD5 does not match, and one of another length, are refused on a write.
	bad := &s3.PutObjectInput{Bucket: aws.String("enc"), Key: aws.String("bad"), Body: strings.NewReader("x"), SSECustomerAlgorithm: aws.String("AES256"),
		SSECustomerKey: aws.String(b64(k1)), SSECustomerKeyMD5: aws.String(b64md5(k2))}
	_, err = c.PutObject(ctx, bad)
	wantCode(t, err, "InvalidArgument")
	bad.SSECustomerKey, bad.SSECustomerKeyMD5 = aws.String(b64(k1[:16])), aws.String(b64md5(k1[:16]))
	_, err = c.PutObject(ctx, bad)
	wantCode(t, err, "InvalidArgument")
	// Copy: the source's key in the copy-source headers, the target's own key.
	cin := &s3.CopyObjectInput{Bucket: aws.String("enc"), Key: aws.String("copy"), CopySource: aws.String("enc/k"),
		CopySourceSSECustomerAlgorithm: aws.String("AES256"), CopySourceSSECustomerKey: aws.String(b64(k1)), CopySourceSSECustomerKeyMD5: aws.String(b64md5(k1)),
		SSECustomerAlgorithm: aws.String("AES256"), SSECustomerKey: aws.String(b64(k2)), SSECustomerKeyMD5: aws.String(b64md5(k2))}
	if _, err := c.CopyObject(ctx, cin); err != nil {
		t.Fatal(err)
	}
	gin := &s3.GetObjectInput{Bucket: aws.String("enc"), Key: aws.String("copy")}
	k2.get(gin)
	if got := bodyOf(t).of(c.GetObject(ctx, gin)); !bytes.Equal(got, data) {
		t.Fatal("the copy under the target key")
	}
	k1.get(gin)
	_, err = c.GetObject(ctx, gin)
	wantCode(t, err, "AccessDenied")
	cin.CopySourceSSECustomerKey, cin.CopySourceSSECustomerKeyMD5 = aws.String(b64(k2)), aws.String(b64md5(k2))
	_, err = c.CopyObject(ctx, cin)
	wantCode(t, err, "AccessDenied")
	cin.CopySourceSSECustomerAlgorithm, cin.CopySourceSSECustomerKey, cin.CopySourceSSECustomerKeyMD5 = nil, nil, nil
	_, err = c.CopyObject(ctx, cin)
	wantCode(t, err, "InvalidRequest")
	srv.Store.Close()
	assertNoPlaintext(t, srv.Dir, marker)
}

// TestSSEMultipart: parts of SSE-S3 and SSE-C uploads are encrypted on their own; the
// object reads whole, across parts, by part number; sizes are the plaintext's; an SSE-C
// part needs the upload's key.
func TestSSEMultipart(t *testing.T) {
	_, c := sseServer(t, testKeyring(t), nil)
	ctx := context.Background()
	mustCreateBucket(t, c, "mpu")
	ck := customer(bytes.Repeat([]byte{0xc3}, 32))
	sizes := []int{150<<10 + 3, 100 << 10, 70<<10 + 11}
	for _, tc := range []struct {
		name string
		key  customer
	}{{"sse-s3", nil}, {"sse-c", ck}} {
		t.Run(tc.name, func(t *testing.T) {
			key := "obj-" + tc.name
			sseC := func(a, k, m **string) {
				if tc.key != nil {
					*a, *k, *m = aws.String("AES256"), aws.String(b64(tc.key)), aws.String(b64md5(tc.key))
				}
			}
			cin := &s3.CreateMultipartUploadInput{Bucket: aws.String("mpu"), Key: aws.String(key), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32, ChecksumType: types.ChecksumTypeFullObject}
			if tc.key == nil {
				cin.ServerSideEncryption = types.ServerSideEncryptionAes256
			}
			sseC(&cin.SSECustomerAlgorithm, &cin.SSECustomerKey, &cin.SSECustomerKeyMD5)
			mu, err := c.CreateMultipartUpload(ctx, cin)
			if err != nil {
				t.Fatal(err)
			}
			if tc.key == nil && mu.ServerSideEncryption != types.ServerSideEncryptionAes256 {
				t.Fatalf("create answered %q", mu.ServerSideEncryption)
			}
			var all []byte
			var done []types.CompletedPart
			for i, n := range sizes {
				body := randBytes(uint64(10+i), n)
				all = append(all, body...)
				in := &s3.UploadPartInput{Bucket: aws.String("mpu"), Key: aws.String(key), UploadId: mu.UploadId, PartNumber: aws.Int32(int32(i + 1)),
					Body: bytes.NewReader(body), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32}
				if tc.key != nil && i == 1 {
					// The part must come with the upload's key.
					_, err := c.UploadPart(ctx, in)
					wantCode(t, err, "InvalidRequest")
					other := customer(bytes.Repeat([]byte{9}, 32))
					in.SSECustomerAlgorithm, in.SSECustomerKey, in.SSECustomerKeyMD5 = aws.String("AES256"), aws.String(b64(other)), aws.String(b64md5(other))
					in.Body = bytes.NewReader(body)
					_, err = c.UploadPart(ctx, in)
					wantCode(t, err, "AccessDenied")
					in.Body = bytes.NewReader(body)
				}
				sseC(&in.SSECustomerAlgorithm, &in.SSECustomerKey, &in.SSECustomerKeyMD5)
				p, err := c.UploadPart(ctx, in)
				if err != nil {
					t.Fatal(err)
				}
				if (tc.key == nil) != (strings.Trim(*p.ETag, `"`) == md5hex(body)) {
					t.Fatalf("part %d ETag %s (SSE-C: not the MD5; SSE-S3: the MD5)", i+1, *p.ETag)
				}
				done = append(done, types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: p.ETag, ChecksumCRC32: p.ChecksumCRC32})
			}
			lp, err := c.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String("mpu"), Key: aws.String(key), UploadId: mu.UploadId})
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range lp.Parts {
				if *p.Size != int64(sizes[i]) {
					t.Fatalf("ListParts: part %d is %d bytes, want %d", i+1, *p.Size, sizes[i])
				}
			}
			comp := &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpu"), Key: aws.String(key), UploadId: mu.UploadId,
				MultipartUpload: &types.CompletedMultipartUpload{Parts: done}}
			sseC(&comp.SSECustomerAlgorithm, &comp.SSECustomerKey, &comp.SSECustomerKeyMD5)
			co, err := c.CompleteMultipartUpload(ctx, comp)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(strings.Trim(*co.ETag, `"`), "-3") {
				t.Fatalf("ETag %s", *co.ETag)
			}
			get := func(rg string, part int32) ([]byte, *s3.GetObjectOutput) {
				in := &s3.GetObjectInput{Bucket: aws.String("mpu"), Key: aws.String(key)}
				if rg != "" {
					in.Range = aws.String(rg)
				}
				if part > 0 {
					in.PartNumber = aws.Int32(part)
				}
				sseC(&in.SSECustomerAlgorithm, &in.SSECustomerKey, &in.SSECustomerKeyMD5)
				out, err := c.GetObject(ctx, in)
				return bodyOf(t).of(out, err), out
			}
			if got, _ := get("", 0); !bytes.Equal(got, all) {
				t.Fatal("whole object")
			}
			for _, rg := range append(sseRanges(len(all)), fmt.Sprintf("bytes=%d-%d", sizes[0]-5, sizes[0]+sizes[1]+5)) {
				if got, _ := get(rg, 0); !bytes.Equal(got, rangeOf(all, rg)) {
					t.Fatalf("range %s", rg)
				}
			}
			got, out := get("", 2)
			if !bytes.Equal(got, all[sizes[0]:sizes[0]+sizes[1]]) || *out.PartsCount != 3 {
				t.Fatalf("partNumber=2: %d bytes", len(got))
			}
			ain := &s3.GetObjectAttributesInput{Bucket: aws.String("mpu"), Key: aws.String(key),
				ObjectAttributes: []types.ObjectAttributes{types.ObjectAttributesObjectSize, types.ObjectAttributesObjectParts}}
			sseC(&ain.SSECustomerAlgorithm, &ain.SSECustomerKey, &ain.SSECustomerKeyMD5)
			at, err := c.GetObjectAttributes(ctx, ain)
			if err != nil || *at.ObjectSize != int64(len(all)) || *at.ObjectParts.Parts[2].Size != int64(sizes[2]) {
				t.Fatalf("attributes: %v", err)
			}
		})
	}
	// UploadPartCopy from an encrypted source into an encrypted upload, with a range.
	src := randBytes(77, 200<<10)
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("mpu"), Key: aws.String("src"), Body: bytes.NewReader(src), ServerSideEncryption: types.ServerSideEncryptionAes256}); err != nil {
		t.Fatal(err)
	}
	mu, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("mpu"), Key: aws.String("copied"), ServerSideEncryption: types.ServerSideEncryptionAes256})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := c.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: aws.String("mpu"), Key: aws.String("copied"), UploadId: mu.UploadId, PartNumber: aws.Int32(1),
		CopySource: aws.String("mpu/src"), CopySourceRange: aws.String("bytes=1000-150999")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpu"), Key: aws.String("copied"), UploadId: mu.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: pc.CopyPartResult.ETag}}}}); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, c, "mpu", "copied"); !bytes.Equal(got, src[1000:151000]) {
		t.Fatal("UploadPartCopy of an encrypted source")
	}
}

// TestSSEBucketDefault: a bucket's default encryption makes new objects SSE-S3 unless
// the request asks for SSE-C; aws:kms is NotImplemented; without a master key it is
// refused rather than ignored.
func TestSSEBucketDefault(t *testing.T) {
	srv, c := sseServer(t, testKeyring(t), nil)
	ctx := context.Background()
	mustCreateBucket(t, c, "def")
	_, err := c.GetBucketEncryption(ctx, &s3.GetBucketEncryptionInput{Bucket: aws.String("def")})
	wantCode(t, err, "ServerSideEncryptionConfigurationNotFoundError")
	rule := func(algo types.ServerSideEncryption, bucketKey bool) *s3.PutBucketEncryptionInput {
		return &s3.PutBucketEncryptionInput{Bucket: aws.String("def"), ServerSideEncryptionConfiguration: &types.ServerSideEncryptionConfiguration{
			Rules: []types.ServerSideEncryptionRule{{ApplyServerSideEncryptionByDefault: &types.ServerSideEncryptionByDefault{SSEAlgorithm: algo}, BucketKeyEnabled: aws.Bool(bucketKey)}}}}
	}
	_, err = c.PutBucketEncryption(ctx, rule(types.ServerSideEncryptionAwsKms, false))
	wantCode(t, err, "NotImplemented")
	_, err = c.PutBucketEncryption(ctx, rule(types.ServerSideEncryptionAes256, true))
	wantCode(t, err, "NotImplemented")
	if _, err := c.PutBucketEncryption(ctx, rule(types.ServerSideEncryptionAes256, false)); err != nil {
		t.Fatal(err)
	}
	ge, err := c.GetBucketEncryption(ctx, &s3.GetBucketEncryptionInput{Bucket: aws.String("def")})
	if err != nil || ge.ServerSideEncryptionConfiguration.Rules[0].ApplyServerSideEncryptionByDefault.SSEAlgorithm != types.ServerSideEncryptionAes256 {
		t.Fatalf("GetBucketEncryption: %v", err)
	}
	out := mustPut(t, c, "def", "auto", []byte("encrypted by default"))
	if out.ServerSideEncryption != types.ServerSideEncryptionAes256 {
		t.Fatalf("PUT in a default-encrypted bucket answered %q", out.ServerSideEncryption)
	}
	if rec, _ := srv.Store.StatObject("def", "auto"); rec.SSE.Algorithm != sse.S3 {
		t.Fatal("not stored encrypted")
	}
	ck := customer(bytes.Repeat([]byte{4}, 32))
	in := &s3.PutObjectInput{Bucket: aws.String("def"), Key: aws.String("cust"), Body: strings.NewReader("customer's")}
	ck.put(in)
	if _, err := c.PutObject(ctx, in); err != nil {
		t.Fatal(err)
	}
	if rec, _ := srv.Store.StatObject("def", "cust"); rec.SSE.Algorithm != sse.Customer {
		t.Fatal("SSE-C in a default-encrypted bucket")
	}
	mu, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("def"), Key: aws.String("mpu")})
	if err != nil || mu.ServerSideEncryption != types.ServerSideEncryptionAes256 {
		t.Fatalf("multipart in a default-encrypted bucket: %v", err)
	}
	if _, err := c.DeleteBucketEncryption(ctx, &s3.DeleteBucketEncryptionInput{Bucket: aws.String("def")}); err != nil {
		t.Fatal(err)
	}
	if out := mustPut(t, c, "def", "plain", []byte("x")); out.ServerSideEncryption != "" {
		t.Fatal("encrypted after DeleteBucketEncryption")
	}
	// A server without a master key refuses SSE-S3, and PutBucketEncryption.
	_, nc := sseServer(t, nil, nil)
	mustCreateBucket(t, nc, "nokey")
	_, err = nc.PutBucketEncryption(ctx, &s3.PutBucketEncryptionInput{Bucket: aws.String("nokey"), ServerSideEncryptionConfiguration: rule(types.ServerSideEncryptionAes256, false).ServerSideEncryptionConfiguration})
	wantCode(t, err, "NotImplemented")
	_, err = nc.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("nokey"), Key: aws.String("k"), Body: strings.NewReader("x"), ServerSideEncryption: types.ServerSideEncryptionAes256})
	wantCode(t, err, "NotImplemented")
	// Below feature level 5 (a rolling upgrade), nothing is encrypted: refused.
	_, uc := sseServer(t, testKeyring(t), func(c *s3api.Config) { c.FeatureLevel = func() int { return 4 } })
	mustCreateBucket(t, uc, "upg")
	_, err = uc.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("upg"), Key: aws.String("k"), Body: strings.NewReader("x"), ServerSideEncryption: types.ServerSideEncryptionAes256})
	wantCode(t, err, "ServiceUnavailable")
}

// TestSSERotation: after a new master key is added as the newest, new objects are sealed
// with it and old ones stay readable; a gateway without the old key says which is missing.
func TestSSERotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "master.keys")
	k1, k2 := sse.NewDataKey(), sse.NewDataKey()
	if err := os.WriteFile(path, []byte("old "+b64(k1)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kr, err := sse.LoadKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	srv, c := sseServer(t, kr, nil)
	ctx := context.Background()
	mustCreateBucket(t, c, "rot")
	put := func(key string, body []byte) {
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("rot"), Key: aws.String(key), Body: bytes.NewReader(body),
			ServerSideEncryption: types.ServerSideEncryptionAes256}); err != nil {
			t.Fatal(err)
		}
	}
	old, young := randBytes(5, 100<<10), randBytes(6, 1000)
	put("old", old)
	if err := os.WriteFile(path, []byte("old "+b64(k1)+"\nnew "+b64(k2)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := kr.Reload(); err != nil {
		t.Fatal(err)
	}
	put("new", young)
	for key, want := range map[string]string{"old": "old", "new": "new"} {
		if rec, _ := srv.Store.StatObject("rot", key); rec.SSE.KeyID != want {
			t.Fatalf("%s sealed by %q, want %q", key, rec.SSE.KeyID, want)
		}
	}
	if !bytes.Equal(mustGet(t, c, "rot", "old"), old) || !bytes.Equal(mustGet(t, c, "rot", "new"), young) {
		t.Fatal("objects after the rotation")
	}
	// Another gateway over the same store with only the new key.
	onlyNew, _ := sse.NewKeyring(sse.MasterKey{Name: "new", Key: k2})
	hs := httptest.NewTLSServer(s3api.New(s3api.Config{Store: gateway.Local(srv.Store, testutil.NewLogger(t)), MasterKeys: onlyNew,
		Lookup: func(ak string) (string, bool) { return testutil.SecretKey, ak == testutil.AccessKey }, Logger: testutil.NewLogger(t)}))
	defer hs.Close()
	c2 := newClient(t, hs.URL, testutil.AccessKey, testutil.SecretKey, func(o *s3.Options) { o.HTTPClient = hs.Client() })
	_, err = c2.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("rot"), Key: aws.String("old")})
	wantCode(t, err, "MasterKeyNotFound")
	if !bytes.Equal(mustGet(t, c2, "rot", "new"), young) {
		t.Fatal("the new object through the other gateway")
	}
}

// TestSSEPostObjectField: a browser upload with the SSE-S3 form field is encrypted.
func TestSSEPostObjectField(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{Reserve: 1}, func(c *s3api.Config) { c.MasterKeys = testKeyring(t) })
	c := newClient(t, srv.URL, testutil.AccessKey, testutil.SecretKey)
	mustCreateBucket(t, c, "post")
	now := time.Now()
	cond := `{"bucket":"post"},["starts-with","$key",""],{"x-amz-server-side-encryption":"AES256"}`
	fields := map[string]string{"key": "up", "x-amz-server-side-encryption": "AES256"}
	resp, body := postUpload(t, srv.URL+"/post", policyFields(cond, now.Add(time.Minute), now, fields), "up", []byte("posted secret"))
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("x-amz-server-side-encryption") != "AES256" {
		t.Fatalf("POST: %d %s", resp.StatusCode, body)
	}
	if rec, err := srv.Store.StatObject("post", "up"); err != nil || rec.SSE.Algorithm != sse.S3 {
		t.Fatalf("POST stored %v, %v", rec, err)
	}
	if got := mustGet(t, c, "post", "up"); string(got) != "posted secret" {
		t.Fatalf("got %q", got)
	}
}

func bodyOf(t *testing.T) body { return body{t} }
