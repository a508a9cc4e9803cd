package s3api_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/internal/checksum"
	"github.com/cairnfs/cairn/internal/proc"
	"github.com/cairnfs/cairn/internal/s3api"
	"github.com/cairnfs/cairn/internal/sigv4"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// signed builds a request signed with UNSIGNED-PAYLOAD (or the given payload hash).
func signed(t *testing.T, method, url string, body []byte, hdr map[string]string, now time.Time) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	ph := "UNSIGNED-PAYLOAD"
	for k, v := range hdr {
		r.Header.Set(k, v)
		if strings.EqualFold(k, "x-amz-content-sha256") {
			ph = v
		}
	}
	sigv4.SignRequest(r, testutil.AccessKey, testutil.SecretKey, "us-east-1", ph, now)
	return r
}

func do(t *testing.T, r *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func expectS3Error(t *testing.T, status int, body string, wantStatus int, code string) {
	t.Helper()
	if status != wantStatus || !strings.Contains(body, "<Code>"+code+"</Code>") {
		t.Fatalf("want %d %s, got %d %s", wantStatus, code, status, body)
	}
}

func TestMalformedRequests(t *testing.T) {
	srv, c := setup(t)
	mustCreateBucket(t, c, "bkt")
	now := time.Now()
	cases := []struct {
		name   string
		method string
		path   string
		body   string
		hdr    map[string]string
		status int
		code   string
	}{
		{"delete objects not xml", "POST", "/bkt?delete", "<Delete><Object><Key>a</Key>", nil, 400, "MalformedXML"},
		{"delete objects empty", "POST", "/bkt?delete", "<Delete></Delete>", nil, 400, "MalformedXML"},
		{"complete garbage", "POST", "/bkt/k?uploadId=00000000000000000000000000000000", "garbage<<", nil, 400, "MalformedXML"},
		{"complete no such upload", "POST", "/bkt/k?uploadId=00000000000000000000000000000000", "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>", nil, 404, "NoSuchUpload"},
		{"bad part number", "PUT", "/bkt/k?partNumber=0&uploadId=x", "x", nil, 400, "InvalidArgument"},
		{"bad max-keys", "GET", "/bkt?max-keys=-1", "", nil, 400, "InvalidArgument"},
		{"bad continuation token", "GET", "/bkt?list-type=2&continuation-token=%25%25", "", nil, 400, "InvalidArgument"},
		{"bad storage class", "PUT", "/bkt/k", "x", map[string]string{"x-amz-storage-class": "PLATINUM"}, 400, "InvalidStorageClass"},
		{"key too long", "PUT", "/bkt/" + strings.Repeat("a", 1025), "x", nil, 400, "KeyTooLongError"},
		{"bad metadata directive", "PUT", "/bkt/k2", "", map[string]string{"x-amz-copy-source": "bkt/k", "x-amz-metadata-directive": "MOVE"}, 400, "InvalidArgument"},
		{"copy source garbage", "PUT", "/bkt/k2", "", map[string]string{"x-amz-copy-source": "nobucketkey"}, 400, "InvalidArgument"},
		{"unsupported subresource", "GET", "/bkt?website", "", nil, 501, "NotImplemented"},
		{"method not allowed", "PATCH", "/bkt/k", "", nil, 405, "MethodNotAllowed"},
		{"invalid checksum header", "PUT", "/bkt/k", "x", map[string]string{"x-amz-checksum-crc32": "%%%"}, 400, "InvalidRequest"},
		{"empty content-md5", "PUT", "/bkt/k", "x", map[string]string{"Content-MD5": ""}, 400, "InvalidDigest"},
		{"content-md5 not base64", "PUT", "/bkt/k", "x", map[string]string{"Content-MD5": "not base64!"}, 400, "InvalidDigest"},
		{"content-md5 mismatch", "PUT", "/bkt/k", "x", map[string]string{"Content-MD5": "1B2M2Y8AsgTpgAmY7PhCfg=="}, 400, "BadDigest"},
		{"crc32 mismatch", "PUT", "/bkt/k", "x", map[string]string{"x-amz-checksum-crc32": "AAAAAA=="}, 400, "BadDigest"},
		{"sha256 mismatch", "PUT", "/bkt/k", "x", map[string]string{"x-amz-checksum-sha256": "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="}, 400, "BadDigest"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, body := do(t, signed(t, tc.method, srv.URL+tc.path, []byte(tc.body), tc.hdr, now))
			expectS3Error(t, st, body, tc.status, tc.code)
		})
	}
	if _, err := srv.Store.StatObject("bkt", "k"); err == nil {
		t.Fatal("a refused request stored an object")
	}
}

// TestUnicodeMetadata: user metadata that is not US-ASCII, sent as raw UTF-8 or as RFC 2047
// encoded-words, is stored as its text and returned as encoded-words, as S3 does.
func TestUnicodeMetadata(t *testing.T) {
	srv, c := setup(t)
	mustCreateBucket(t, c, "bkt")
	const text = "élan ☃ 日本"
	for name, sent := range map[string]string{"raw": text, "encoded": mime.BEncoding.Encode("UTF-8", text), "quoted": mime.QEncoding.Encode("UTF-8", text)} {
		t.Run(name, func(t *testing.T) {
			st, body := do(t, signed(t, "PUT", srv.URL+"/bkt/"+name, []byte("x"), map[string]string{"x-amz-meta-name": sent, "x-amz-meta-plain": "ascii ok"}, time.Now()))
			if st != 200 {
				t.Fatalf("put: %d %s", st, body)
			}
			o, err := srv.Store.StatObject("bkt", name)
			if err != nil || len(o.UserMeta) != 2 || o.UserMeta[0] != [2]string{"name", text} {
				t.Fatalf("stored %+v %v", o, err)
			}
			resp, err := http.DefaultClient.Do(signed(t, "HEAD", srv.URL+"/bkt/"+name, nil, nil, time.Now()))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := resp.Header.Get("x-amz-meta-name")
			dec, err := new(mime.WordDecoder).DecodeHeader(got)
			if err != nil || dec != text || !strings.HasPrefix(got, "=?UTF-8?b?") {
				t.Fatalf("returned %q (decodes to %q, %v)", got, dec, err)
			}
			if p := resp.Header.Get("x-amz-meta-plain"); p != "ascii ok" {
				t.Fatalf("ascii value returned as %q", p)
			}
		})
	}
}

func TestAuthRaw(t *testing.T) {
	srv, c := setup(t)
	mustCreateBucket(t, c, "bkt")
	// Clock skew beyond 15 minutes.
	st, body := do(t, signed(t, "GET", srv.URL+"/bkt", nil, nil, time.Now().Add(-20*time.Minute)))
	expectS3Error(t, st, body, 403, "RequestTimeTooSkewed")
	st, body = do(t, signed(t, "PUT", srv.URL+"/bkt/skew", []byte("x"), nil, time.Now().Add(16*time.Minute)))
	expectS3Error(t, st, body, 403, "RequestTimeTooSkewed")
	// Expired presigned URL.
	u, err := sigv4.Presign("GET", srv.URL+"/bkt/x", testutil.AccessKey, testutil.SecretKey, "us-east-1", time.Minute, time.Now().Add(-2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	expectS3Error(t, resp.StatusCode, string(b), 403, "AccessDenied")
	// A body changed after signing a payload hash.
	data := []byte("the signed body")
	sum := sha256.Sum256(data)
	r := signed(t, "PUT", srv.URL+"/bkt/sha", []byte("the evil body!!"), map[string]string{"x-amz-content-sha256": hex.EncodeToString(sum[:])}, time.Now())
	st, body = do(t, r)
	expectS3Error(t, st, body, 400, "XAmzContentSHA256Mismatch")
	if _, err := srv.Store.StatObject("bkt", "sha"); err == nil {
		t.Fatal("object stored despite a payload hash mismatch")
	}
	r = signed(t, "PUT", srv.URL+"/bkt/sha", data, map[string]string{"x-amz-content-sha256": hex.EncodeToString(sum[:])}, time.Now())
	if st, body := do(t, r); st != 200 {
		t.Fatalf("signed payload: %d %s", st, body)
	}
	// Virtual-host-style addressing.
	r = signed(t, "GET", srv.URL+"/sha", nil, nil, time.Now())
	r.Host = "bkt.localhost"
	r.Header.Del("Authorization")
	sigv4.SignRequest(r, testutil.AccessKey, testutil.SecretKey, "us-east-1", "UNSIGNED-PAYLOAD", time.Now())
	if st, body := do(t, r); st != 200 || body != string(data) {
		t.Fatalf("virtual-host GET: %d %s", st, body)
	}
}

// rawPut sends a PUT over a raw connection with Content-Length n but only part of the body,
// then half-closes: the server must store nothing.
func TestShortBodyStoresNothing(t *testing.T) {
	srv, c := setup(t)
	mustCreateBucket(t, c, "bkt")
	for _, size := range []int{1000, 3 << 20} {
		r := signed(t, "PUT", srv.URL+"/bkt/short", nil, nil, time.Now())
		conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		var head bytes.Buffer
		fmt.Fprintf(&head, "PUT /bkt/short HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", r.Host, size)
		for k, v := range r.Header {
			fmt.Fprintf(&head, "%s: %s\r\n", k, v[0])
		}
		head.WriteString("\r\n")
		conn.Write(head.Bytes())
		conn.Write(bytes.Repeat([]byte("x"), size/2))
		conn.(*net.TCPConn).CloseWrite()
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode == 200 {
				t.Fatalf("short body accepted: %s", b)
			}
		}
		conn.Close()
		if _, err := srv.Store.StatObject("bkt", "short"); err == nil {
			t.Fatalf("size %d: short body stored", size)
		}
	}
	// A chunked body without a length that ends before its last chunk.
	r := signed(t, "PUT", srv.URL+"/bkt/short", nil, nil, time.Now())
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var head bytes.Buffer
	fmt.Fprintf(&head, "PUT /bkt/short HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n", r.Host)
	for k, v := range r.Header {
		fmt.Fprintf(&head, "%s: %s\r\n", k, v[0])
	}
	head.WriteString("\r\n400\r\n")
	head.Write(bytes.Repeat([]byte("x"), 100))
	conn.Write(head.Bytes())
	conn.(*net.TCPConn).CloseWrite()
	if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil && resp.StatusCode == 200 {
		t.Fatal("a truncated chunked body was accepted")
	}
	if _, err := srv.Store.StatObject("bkt", "short"); err == nil {
		t.Fatal("a truncated chunked body was stored")
	}
}

// TestMissingContentLength: an HTTP/1.1 PutObject or UploadPart with neither
// Content-Length nor Transfer-Encoding declares no body: S3 answers 411
// MissingContentLength and stores nothing; Content-Length: 0 is an empty object.
func TestMissingContentLength(t *testing.T) {
	srv, c := setup(t)
	mustCreateBucket(t, c, "bkt")
	up, err := c.CreateMultipartUpload(context.Background(), &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("mp")})
	if err != nil {
		t.Fatal(err)
	}
	send := func(target, length string) (int, string) {
		t.Helper()
		r := signed(t, "PUT", srv.URL+target, nil, nil, time.Now())
		conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var head bytes.Buffer
		fmt.Fprintf(&head, "PUT %s HTTP/1.1\r\nHost: %s\r\n%s", target, r.Host, length)
		for k, v := range r.Header {
			fmt.Fprintf(&head, "%s: %s\r\n", k, v[0])
		}
		head.WriteString("\r\n")
		if _, err := conn.Write(head.Bytes()); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	st, body := send("/bkt/none", "")
	expectS3Error(t, st, body, 411, "MissingContentLength")
	if _, err := srv.Store.StatObject("bkt", "none"); err == nil {
		t.Fatal("a PUT without Content-Length stored an object")
	}
	st, body = send("/bkt/mp?partNumber=1&uploadId="+url.QueryEscape(aws.ToString(up.UploadId)), "")
	expectS3Error(t, st, body, 411, "MissingContentLength")
	if st, body := send("/bkt/empty", "Content-Length: 0\r\n"); st != 200 {
		t.Fatalf("PUT with Content-Length: 0: %d %s", st, body)
	}
	if o, err := srv.Store.StatObject("bkt", "empty"); err != nil || o.Size != 0 {
		t.Fatalf("empty object: %+v %v", o, err)
	}
}

// TestChunkedWithoutLength: a PUT with Transfer-Encoding: chunked and no length (curl -T -,
// streaming SDKs) is stored whole, and one longer than the object size limit is refused
// with EntityTooLarge and stores nothing.
func TestChunkedWithoutLength(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{}, func(c *s3api.Config) { c.MaxObjectSize = 1 << 20 })
	c := newClient(t, srv.URL, testutil.AccessKey, testutil.SecretKey)
	mustCreateBucket(t, c, "bkt")
	for _, n := range []int{0, 3, 200 << 10, 1 << 20} {
		data := randBytes(uint64(n), n)
		r := signed(t, "PUT", srv.URL+"/bkt/k", nil, nil, time.Now())
		r.Body = io.NopCloser(bytes.NewReader(data)) // no length: net/http sends it chunked
		r.ContentLength = -1
		if st, body := do(t, r); st != 200 {
			t.Fatalf("%d bytes: %d %s", n, st, body)
		}
		if got := mustGet(t, c, "bkt", "k"); !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: read back %d bytes", n, len(got))
		}
	}
	r := signed(t, "PUT", srv.URL+"/bkt/big", nil, nil, time.Now())
	r.Body = io.NopCloser(bytes.NewReader(make([]byte, 1<<20+1)))
	r.ContentLength = -1
	st, body := do(t, r)
	expectS3Error(t, st, body, 400, "EntityTooLarge")
	if _, err := srv.Store.StatObject("bkt", "big"); err == nil {
		t.Fatal("an object over the size limit was stored")
	}
}

// unsignedTrailerBody frames data as STREAMING-UNSIGNED-PAYLOAD-TRAILER with a trailer.
func unsignedTrailerBody(data []byte, chunk int, trailerName, trailerValue string) []byte {
	var b bytes.Buffer
	for off := 0; off < len(data); off += chunk {
		end := min(off+chunk, len(data))
		fmt.Fprintf(&b, "%x\r\n", end-off)
		b.Write(data[off:end])
		b.WriteString("\r\n")
	}
	fmt.Fprintf(&b, "0\r\n%s:%s\r\n\r\n", trailerName, trailerValue)
	return b.Bytes()
}

func TestStreamingUnsignedTrailer(t *testing.T) {
	srv, c := setup(t)
	mustCreateBucket(t, c, "bkt")
	data := randBytes(21, 700<<10)
	crc := crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))
	good := checksum.Encode([]byte{byte(crc >> 24), byte(crc >> 16), byte(crc >> 8), byte(crc)})
	put := func(key, value string) (int, string) {
		body := unsignedTrailerBody(data, 64<<10, "x-amz-checksum-crc32c", value)
		r := signed(t, "PUT", srv.URL+"/bkt/"+key, body, map[string]string{
			"x-amz-content-sha256":         "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
			"Content-Encoding":             "aws-chunked",
			"x-amz-decoded-content-length": fmt.Sprint(len(data)),
			"x-amz-trailer":                "x-amz-checksum-crc32c",
		}, time.Now())
		return do(t, r)
	}
	if st, body := put("good", good); st != 200 {
		t.Fatalf("unsigned trailer PUT: %d %s", st, body)
	}
	if got := mustGet(t, c, "bkt", "good"); !bytes.Equal(got, data) {
		t.Fatal("body differs")
	}
	h, err := c.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String("bkt"), Key: aws.String("good"), ChecksumMode: "ENABLED"})
	if err != nil || h.ChecksumCRC32C == nil || *h.ChecksumCRC32C != good {
		t.Fatalf("checksum not returned: %v %v", h.ChecksumCRC32C, err)
	}
	if h.ContentEncoding != nil && strings.Contains(*h.ContentEncoding, "aws-chunked") {
		t.Fatal("aws-chunked stored as the object's content encoding")
	}
	st, body := put("bad", "AAAAAA==")
	expectS3Error(t, st, body, 400, "BadDigest")
	if _, err := srv.Store.StatObject("bkt", "bad"); err == nil {
		t.Fatal("object stored despite a bad trailing checksum")
	}
}

func hmacSum(key, msg []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return m.Sum(nil)
}

// signedChunkedBody frames data as STREAMING-AWS4-HMAC-SHA256-PAYLOAD, chaining chunk
// signatures from the request's seed signature (computed here, independently of package sigv4).
func signedChunkedBody(data []byte, chunk int, seed, amzDate, scope string, key []byte, tamper bool) []byte {
	emptyHash := sha256.Sum256(nil)
	prev := seed
	var b bytes.Buffer
	emit := func(p []byte) {
		h := sha256.Sum256(p)
		sts := "AWS4-HMAC-SHA256-PAYLOAD\n" + amzDate + "\n" + scope + "\n" + prev + "\n" + hex.EncodeToString(emptyHash[:]) + "\n" + hex.EncodeToString(h[:])
		sig := hex.EncodeToString(hmacSum(key, []byte(sts)))
		fmt.Fprintf(&b, "%x;chunk-signature=%s\r\n", len(p), sig)
		b.Write(p)
		b.WriteString("\r\n")
		prev = sig
	}
	for off := 0; off < len(data); off += chunk {
		emit(data[off:min(off+chunk, len(data))])
	}
	emit(nil)
	out := b.Bytes()
	if tamper {
		i := bytes.Index(out, []byte("\r\n")) + 2 + 10
		out[i] ^= 1
	}
	return out
}

func TestStreamingSignedChunks(t *testing.T) {
	srv, c := setup(t)
	mustCreateBucket(t, c, "bkt")
	data := randBytes(22, 300<<10)
	for _, tamper := range []bool{false, true} {
		now := time.Now().UTC()
		amzDate := now.Format("20060102T150405Z")
		r, _ := http.NewRequest("PUT", srv.URL+"/bkt/signed", nil)
		r.Header.Set("Content-Encoding", "aws-chunked")
		r.Header.Set("x-amz-decoded-content-length", fmt.Sprint(len(data)))
		r.Header.Set("x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
		sigv4.SignRequest(r, testutil.AccessKey, testutil.SecretKey, "us-east-1", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", now)
		auth := r.Header.Get("Authorization")
		seed := auth[strings.Index(auth, "Signature=")+len("Signature="):]
		key := hmacSum([]byte("AWS4"+testutil.SecretKey), []byte(now.Format("20060102")))
		key = hmacSum(key, []byte("us-east-1"))
		key = hmacSum(key, []byte("s3"))
		key = hmacSum(key, []byte("aws4_request"))
		scope := now.Format("20060102") + "/us-east-1/s3/aws4_request"
		body := signedChunkedBody(data, 64<<10, seed, amzDate, scope, key, tamper)
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		st, resp := do(t, r)
		if !tamper {
			if st != 200 {
				t.Fatalf("signed chunked PUT: %d %s", st, resp)
			}
			if got := mustGet(t, c, "bkt", "signed"); !bytes.Equal(got, data) {
				t.Fatal("body differs")
			}
			c.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String("bkt"), Key: aws.String("signed")})
			continue
		}
		expectS3Error(t, st, resp, 403, "SignatureDoesNotMatch")
		if _, err := srv.Store.StatObject("bkt", "signed"); err == nil {
			t.Fatal("object stored despite a bad chunk signature")
		}
	}
}

func TestBitRotNeverServed(t *testing.T) {
	srv, c := setup(t)
	mustCreateBucket(t, c, "bkt")
	data := randBytes(31, 1<<20)
	mustPut(t, c, "bkt", "rot", data)
	mustPut(t, c, "bkt", "fine", []byte("unaffected small object"))
	segs, _ := filepath.Glob(filepath.Join(srv.Dir, "segments", "*.seg"))
	var path string
	for _, s := range segs {
		if st, _ := os.Stat(s); st.Size() > 0 {
			path = s
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	f.ReadAt(b[:], 600<<10)
	b[0] ^= 0x40
	f.WriteAt(b[:], 600<<10)
	f.Close()
	out, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("rot")})
	if err == nil {
		got, rerr := io.ReadAll(out.Body)
		out.Body.Close()
		if rerr == nil {
			t.Fatalf("corrupted object served without error (%d bytes)", len(got))
		}
		if !bytes.Equal(got, data[:len(got)]) {
			t.Fatal("corrupted bytes were served")
		}
	}
	// Ranges that avoid the damaged chunk still work; HEAD works; other objects are fine.
	g, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("rot"), Range: aws.String("bytes=0-99")})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := io.ReadAll(g.Body)
	g.Body.Close()
	if !bytes.Equal(first, data[:100]) {
		t.Fatal("undamaged range differs")
	}
	if got := mustGet(t, c, "bkt", "fine"); string(got) != "unaffected small object" {
		t.Fatal("other object damaged")
	}
}

// TestDiskFull runs the server on a small real filesystem (tmpfs) and fills it.
func TestDiskFull(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=48m"); err != nil {
		t.Skipf("mounting a tmpfs needs root (CAP_SYS_ADMIN), which CI has: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	srv := testutil.StartServer(t, store.Config{Dir: filepath.Join(dir, "data"), InlineMax: 4 << 10, ChunkSize: 256 << 10, SegmentSize: 4 << 20, Reserve: 8 << 20}, nil)
	c := newClient(t, srv.URL, testutil.AccessKey, testutil.SecretKey)
	mustCreateBucket(t, c, "bkt")
	ctx := context.Background()
	kept := map[string][]byte{}
	var full error
	for i := 0; i < 100 && full == nil; i++ {
		key := fmt.Sprintf("obj%03d", i)
		data := randBytes(uint64(i), 1<<20)
		_, full = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String(key), Body: bytes.NewReader(data)})
		if full == nil {
			kept[key] = data
		}
	}
	if full == nil {
		t.Fatal("48 MiB filesystem never filled")
	}
	var sfs syscall.Statfs_t
	if syscall.Statfs(dir, &sfs) == nil {
		t.Logf("full after %d objects, %d bytes free", len(kept), int64(sfs.Bavail)*sfs.Bsize)
	}
	wantCode(t, full, "InsufficientStorage")
	var re interface{ HTTPStatusCode() int }
	if !asStatus(full, &re) || re.HTTPStatusCode() != 507 {
		t.Fatalf("disk full status: %v", full)
	}
	// Smaller objects fit until the reserve is reached, then they are refused too.
	var err error
	for i := 0; i < 200 && err == nil; i++ {
		key := fmt.Sprintf("small%03d", i)
		data := randBytes(uint64(1000+i), 100<<10)
		if _, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String(key), Body: bytes.NewReader(data)}); err == nil {
			kept[key] = data
		}
	}
	wantCode(t, err, "InsufficientStorage")
	for k, v := range kept {
		if got := mustGet(t, c, "bkt", k); !bytes.Equal(got, v) {
			t.Fatalf("%s damaged after disk full", k)
		}
	}
	// Deleting and compacting frees space; writes work again. Delete in key order and keep
	// the last two (small objects), so the space freed does not depend on map order.
	keys := make([]string, 0, len(kept))
	for k := range kept {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys[:len(keys)-2] {
		if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("bkt"), Key: aws.String(k)}); err != nil {
			t.Fatalf("delete %s: %v", k, err)
		}
		delete(kept, k)
	}
	for {
		did, err := srv.Store.CompactOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !did {
			break
		}
	}
	// The free-space figure is cached for a second: writes are refused until it is renewed.
	proctest.WaitFor(t, 10*time.Second, func() error {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("after"), Body: bytes.NewReader(randBytes(99, 1<<20))})
		if err != nil && !strings.Contains(err.Error(), "InsufficientStorage") {
			return proc.Permanent(fmt.Errorf("put after compaction: %w", err))
		}
		return err
	})
	for k, v := range kept {
		if got := mustGet(t, c, "bkt", k); !bytes.Equal(got, v) {
			t.Fatalf("%s damaged after compaction", k)
		}
	}
}

// TestSigV2 covers Signature Version 2, which botocore uses by default for presigned URLs.
func TestSigV2(t *testing.T) {
	srv, c := setup(t)
	mustCreateBucket(t, c, "bkt")
	mustPut(t, c, "bkt", "dir/a b+c.txt", []byte("v2 body"))
	u, err := sigv4.SignV2Query("GET", srv.URL+"/bkt/dir/a%20b%2Bc.txt", testutil.AccessKey, testutil.SecretKey, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	get := func(u string) (int, string) {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := get(u); st != 200 || body != "v2 body" {
		t.Fatalf("v2 presigned GET: %d %s", st, body)
	}
	st, body := get(strings.Replace(u, "Signature=", "Signature=AAAA", 1))
	expectS3Error(t, st, body, 403, "SignatureDoesNotMatch")
	expired, _ := sigv4.SignV2Query("GET", srv.URL+"/bkt/dir/a%20b%2Bc.txt", testutil.AccessKey, testutil.SecretKey, time.Now().Add(-time.Second))
	st, body = get(expired)
	expectS3Error(t, st, body, 403, "AccessDenied")
	unknown, _ := sigv4.SignV2Query("GET", srv.URL+"/bkt/dir/a%20b%2Bc.txt", "NOPE", testutil.SecretKey, time.Now().Add(time.Minute))
	st, body = get(unknown)
	expectS3Error(t, st, body, 403, "InvalidAccessKeyId")

	// Bucket operations presigned as botocore does: the path is /bucket, the signed
	// resource /bucket/.
	do := func(method, bucket string) (int, string) {
		t.Helper()
		exp := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
		m := hmac.New(sha1.New, []byte(testutil.SecretKey))
		fmt.Fprintf(m, "%s\n\n\n%s\n/%s/", method, exp, bucket)
		q := url.Values{"AWSAccessKeyId": {testutil.AccessKey}, "Expires": {exp}, "Signature": {base64.StdEncoding.EncodeToString(m.Sum(nil))}}
		req, _ := http.NewRequest(method, srv.URL+"/"+bucket+"?"+q.Encode(), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := do("PUT", "presigned-bucket"); st != 200 {
		t.Fatalf("presigned CreateBucket: %d %s", st, body)
	}
	if st, body := do("GET", "presigned-bucket"); st != 200 || !strings.Contains(body, "<ListBucketResult") {
		t.Fatalf("presigned ListObjects: %d %s", st, body)
	}
	if st, body := do("DELETE", "presigned-bucket"); st != 204 {
		t.Fatalf("presigned DeleteBucket: %d %s", st, body)
	}
}

// TestStalledUpload checks that a client that stops sending mid-body is cut off after the
// idle timeout, and nothing is stored.
func TestStalledUpload(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{Reserve: 1}, func(c *s3api.Config) { c.IdleTimeout = 300 * time.Millisecond })
	c := newClient(t, srv.URL, testutil.AccessKey, testutil.SecretKey)
	mustCreateBucket(t, c, "bkt")
	r := signed(t, "PUT", srv.URL+"/bkt/stalled", nil, nil, time.Now())
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var head bytes.Buffer
	fmt.Fprintf(&head, "PUT /bkt/stalled HTTP/1.1\r\nHost: %s\r\nContent-Length: 1000000\r\n", r.Host)
	for k, v := range r.Header {
		fmt.Fprintf(&head, "%s: %s\r\n", k, v[0])
	}
	head.WriteString("\r\n")
	conn.Write(head.Bytes())
	conn.Write(bytes.Repeat([]byte("x"), 1000))
	// Send nothing more: the server must give up on its own.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	io.ReadAll(conn) // returns when the server closes the connection (or a response then close)
	if waited := time.Since(start); waited > 8*time.Second {
		t.Fatalf("server kept a stalled upload open for %v", waited)
	}
	if _, err := srv.Store.StatObject("bkt", "stalled"); err == nil {
		t.Fatal("stalled upload stored")
	}
}
