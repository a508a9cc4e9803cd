package s3api_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/internal/s3api"
	"github.com/cairnfs/cairn/internal/sigv4"
	"github.com/cairnfs/cairn/internal/testutil"
)

// TestPresignedCopySource is the reported bypass: a SigV4 presigned PUT URL for
// uploads/avatar.png, sent with an unsigned x-amz-copy-source naming a private object,
// became a CopyObject; an unsigned x-amz-meta-* was stored. Both are refused now, and
// nothing is written.
func TestPresignedCopySource(t *testing.T) {
	srv, c := setup(t)
	mustCreateBucket(t, c, "private-vault")
	mustCreateBucket(t, c, "uploads")
	mustPut(t, c, "private-vault", "payroll.csv", []byte("salaries"))
	u, err := sigv4.Presign("PUT", srv.URL+"/uploads/avatar.png", testutil.AccessKey, testutil.SecretKey, "us-east-1", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []map[string]string{
		{"X-Amz-Copy-Source": "/private-vault/payroll.csv"},
		{"X-Amz-Meta-Owner": "attacker"},
	} {
		r, _ := http.NewRequest("PUT", u, bytes.NewReader([]byte("png")))
		for k, v := range h {
			r.Header.Set(k, v)
		}
		st, body := do(t, r)
		expectS3Error(t, st, body, 403, "AccessDenied")
	}
	if _, err := c.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String("uploads"), Key: aws.String("avatar.png")}); apiCode(err) != "NotFound" {
		t.Fatalf("uploads/avatar.png after refused requests: %v, want NotFound", err)
	}
	// The URL itself still works.
	r, _ := http.NewRequest("PUT", u, bytes.NewReader([]byte("png")))
	if st, body := do(t, r); st != 200 {
		t.Fatalf("presigned PUT: %d %s", st, body)
	}
}

// TestUnsignedAmzHeaders closes the class: every x-amz-* request header S3 defines (the
// refusal table's) and an unknown one, added unsigned to a request of every operation,
// signed in each of the four ways (SigV4 header and presigned, SigV2 header and
// presigned), is refused with 403 and changes nothing.
func TestUnsignedAmzHeaders(t *testing.T) {
	srv, c := setup(t)
	ctx := context.Background()
	for _, b := range []string{"bkt", "empty"} {
		mustCreateBucket(t, c, b)
	}
	mustPut(t, c, "bkt", "obj", []byte("hello, signatures"))
	mu, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("mp")})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"X-Amz-Foo"}
	for _, e := range s3api.Features() {
		if e.Header && strings.HasPrefix(e.Name, "X-Amz-") && !strings.HasSuffix(e.Name, "*") &&
			e.Name != "X-Amz-Date" && e.Name != "X-Amz-Content-Sha256" {
			names = append(names, e.Name)
		}
	}
	names = append(names, "X-Amz-Meta-Unsigned")
	type mode struct {
		name string
		sign func(r *http.Request) *http.Request // returns the request to send
		code string
	}
	now := time.Now()
	modes := []mode{
		{"v4-header", func(r *http.Request) *http.Request {
			sigv4.SignRequest(r, testutil.AccessKey, testutil.SecretKey, "us-east-1", "UNSIGNED-PAYLOAD", now)
			return r
		}, "AccessDenied"},
		{"v4-presigned", func(r *http.Request) *http.Request {
			u, err := sigv4.Presign(r.Method, r.URL.String(), testutil.AccessKey, testutil.SecretKey, "us-east-1", time.Hour, now)
			if err != nil {
				t.Fatal(err)
			}
			p, _ := http.NewRequest(r.Method, u, r.Body)
			p.Header = r.Header
			return p
		}, "AccessDenied"},
		{"v2-header", func(r *http.Request) *http.Request {
			sigv4.SignV2Header(r, testutil.AccessKey, testutil.SecretKey, now)
			return r
		}, "SignatureDoesNotMatch"},
		{"v2-presigned", func(r *http.Request) *http.Request {
			u, err := sigv4.SignV2Query(r.Method, r.URL.String(), testutil.AccessKey, testutil.SecretKey, now.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			p, _ := http.NewRequest(r.Method, u, r.Body)
			p.Header = r.Header
			return p
		}, "SignatureDoesNotMatch"},
	}
	before := snapshot(t, srv.Store)
	sent := 0
	for _, m := range modes {
		for _, s := range featureSamples(aws.ToString(mu.UploadId)) {
			u := srv.URL + s.path
			if len(s.query) > 0 {
				u += "?" + strings.Join(s.query, "&")
			}
			for _, name := range names {
				r, err := http.NewRequest(s.method, u, strings.NewReader(s.body))
				if err != nil {
					t.Fatal(err)
				}
				for k, v := range s.hdr {
					r.Header.Set(k, v)
				}
				r = m.sign(r)
				r.Header.Add(name, "1") // added after signing: unsigned
				resp, err := http.DefaultClient.Do(r)
				if err != nil {
					t.Fatal(err)
				}
				var body bytes.Buffer
				body.ReadFrom(resp.Body)
				resp.Body.Close()
				sent++
				code := m.code
				if _, signed := s.hdr[name]; signed && m.name != "v4-presigned" {
					code = "SignatureDoesNotMatch" // a second value of a signed header
				}
				if resp.StatusCode != 403 || (s.method != "HEAD" && !strings.Contains(body.String(), "<Code>"+code+"</Code>")) {
					t.Errorf("%s %s with unsigned %s: %d %s, want 403 %s", m.name, s.op, name, resp.StatusCode, body.String(), m.code)
				}
			}
		}
		if after := snapshot(t, srv.Store); after != before {
			t.Fatalf("%s: the store changed under refused requests:\nbefore:\n%s\nafter:\n%s", m.name, before, after)
		}
	}
	t.Logf("%d requests with an unsigned x-amz-* header (%d headers), all refused", sent, len(names))
}

// TestSigV2ExpiresCapped: a SigV2 presigned URL valid for longer than the server's limit
// (7 days by default, as SigV4) is refused; one just within it works.
func TestSigV2ExpiresCapped(t *testing.T) {
	srv, c := setup(t)
	mustCreateBucket(t, c, "bkt")
	mustPut(t, c, "bkt", "k", []byte("v2"))
	get := func(exp time.Time) (int, string) {
		u, err := sigv4.SignV2Query("GET", srv.URL+"/bkt/k", testutil.AccessKey, testutil.SecretKey, exp)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := http.NewRequest("GET", u, nil)
		return do(t, r)
	}
	st, body := get(time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC))
	expectS3Error(t, st, body, 403, "AccessDenied")
	st, body = get(time.Now().Add(8 * 24 * time.Hour))
	expectS3Error(t, st, body, 403, "AccessDenied")
	if st, body := get(time.Now().Add(6 * 24 * time.Hour)); st != 200 || body != "v2" {
		t.Fatalf("SigV2 URL valid 6 days: %d %s", st, body)
	}
}
