package s3api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"hash/crc32"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairnfs/cairn/internal/s3api"
	"github.com/cairnfs/cairn/internal/sigv4"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil"
)

// postUpload sends a browser-style multipart/form-data POST of fields (sorted) then the
// file, and returns the response with its body read.
func postUpload(t testing.TB, u string, fields map[string]string, filename string, file []byte) (*http.Response, string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		mw.WriteField(k, fields[k])
	}
	if file != nil {
		fw, _ := mw.CreateFormFile("file", filename)
		fw.Write(file)
	}
	mw.Close()
	req, _ := http.NewRequest("POST", u, &b)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// policyFields signs a policy document (JSON conditions) with Signature Version 4, dated
// now, and returns the form's fields: the policy, its signature fields and extra.
func policyFields(conditions string, expires, now time.Time, extra map[string]string) map[string]string {
	cred := testutil.AccessKey + "/" + now.UTC().Format("20060102") + "/us-east-1/s3/aws4_request"
	doc := `{"expiration":"` + expires.UTC().Format("2006-01-02T15:04:05.000Z") + `","conditions":[` +
		`{"x-amz-algorithm":"AWS4-HMAC-SHA256"},{"x-amz-credential":"` + cred + `"},{"x-amz-date":"` + now.UTC().Format("20060102T150405Z") + `"}`
	if conditions != "" {
		doc += "," + conditions
	}
	doc += "]}"
	a := sigv4.SignPOST(base64.StdEncoding.EncodeToString([]byte(doc)), testutil.AccessKey, testutil.SecretKey, "us-east-1", now)
	f := map[string]string{"policy": a.Policy, "x-amz-algorithm": a.Algorithm, "x-amz-credential": a.Credential, "x-amz-date": a.Date, "x-amz-signature": a.Signature}
	for k, v := range extra {
		f[k] = v
	}
	return f
}

// TestPostObjectSDK: a form presigned by aws-sdk-go-v2's PresignPostObject uploads, and the
// object reads back; a condition the form violates is refused.
func TestPostObjectSDK(t *testing.T) {
	srv, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "upl")
	pc := s3.NewPresignClient(c)
	pre, err := pc.PresignPostObject(ctx, &s3.PutObjectInput{Bucket: aws.String("upl"), Key: aws.String("docs/${filename}")}, func(o *s3.PresignPostOptions) {
		o.Expires = 5 * time.Minute
		o.Conditions = []any{[]any{"content-length-range", 1, 1 << 20}, []any{"starts-with", "$Content-Type", "text/"}}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(pre.URL, srv.URL) {
		t.Fatalf("url %s", pre.URL)
	}
	data := randBytes(7, 300<<10)
	fields := map[string]string{"Content-Type": "text/plain"}
	for k, v := range pre.Values {
		fields[k] = v
	}
	resp, body := postUpload(t, pre.URL, fields, "report.txt", data)
	if resp.StatusCode != 204 || resp.Header.Get("ETag") != `"`+md5hex(data)+`"` {
		t.Fatalf("post: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if got := mustGet(t, c, "upl", "docs/report.txt"); !bytes.Equal(got, data) {
		t.Fatal("object differs from the upload")
	}
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("upl"), Key: aws.String("docs/report.txt")})
	if err != nil || aws.ToString(head.ContentType) != "text/plain" {
		t.Fatalf("head: %v %v", head, err)
	}
	// A Content-Type outside the policy's prefix.
	fields["Content-Type"] = "image/png"
	resp, body = postUpload(t, pre.URL, fields, "pic.png", data)
	expectS3Error(t, resp.StatusCode, body, 403, "AccessDenied")
	if !strings.Contains(body, `Invalid according to Policy: Policy Condition failed: [&#34;starts-with&#34;,&#34;$Content-Type&#34;,&#34;text/&#34;]`) {
		t.Fatalf("message: %s", body)
	}
}

func TestPostObject(t *testing.T) {
	srv, c := setup(t)
	mustCreateBucket(t, c, "upl")
	now := time.Now()
	exp := now.Add(10 * time.Minute)
	u := srv.URL + "/upl"
	cond := `{"bucket":"upl"},["starts-with","$key","in/"],["content-length-range",1,1000000],` +
		`["starts-with","$success_action_status",""],["starts-with","$success_action_redirect",""],` +
		`["starts-with","$x-amz-meta-owner",""],["starts-with","$Content-Type",""],["starts-with","$Cache-Control",""]`
	file := randBytes(1, 5000)

	t.Run("status 201", func(t *testing.T) {
		resp, body := postUpload(t, u, policyFields(cond, exp, now, map[string]string{"key": "in/${filename}", "success_action_status": "201",
			"x-amz-meta-owner": "ada", "Content-Type": "application/x-test", "Cache-Control": "no-cache"}), `C:\docs\a.bin`, file)
		if resp.StatusCode != 201 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		want := `<PostResponse><Location>` + srv.URL + `/upl/in/a.bin</Location><Bucket>upl</Bucket><Key>in/a.bin</Key><ETag>&#34;` + md5hex(file) + `&#34;</ETag></PostResponse>`
		if !strings.Contains(body, want) || resp.Header.Get("Location") != srv.URL+"/upl/in/a.bin" {
			t.Fatalf("body %s, location %s", body, resp.Header.Get("Location"))
		}
		head, err := c.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String("upl"), Key: aws.String("in/a.bin")})
		if err != nil || head.Metadata["owner"] != "ada" || aws.ToString(head.ContentType) != "application/x-test" || aws.ToString(head.CacheControl) != "no-cache" {
			t.Fatalf("head %+v %v", head, err)
		}
	})
	t.Run("status 200", func(t *testing.T) {
		resp, body := postUpload(t, u, policyFields(cond, exp, now, map[string]string{"key": "in/b", "success_action_status": "200"}), "b", file)
		if resp.StatusCode != 200 || body != "" {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	})
	t.Run("redirect", func(t *testing.T) {
		resp, body := postUpload(t, u, policyFields(cond, exp, now, map[string]string{"key": "in/c d", "success_action_redirect": "http://app.test/done?x=1"}), "c", file)
		loc, _ := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != 303 || loc == nil || loc.Host != "app.test" || loc.Query().Get("x") != "1" || loc.Query().Get("bucket") != "upl" ||
			loc.Query().Get("key") != "in/c d" || loc.Query().Get("etag") != `"`+md5hex(file)+`"` {
			t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
		}
		// The URL's own query first, then bucket, key and etag in that order, as S3 does.
		if want := "x=1&bucket=upl&key=in%2Fc+d&etag=%22" + md5hex(file) + "%22"; loc.RawQuery != want {
			t.Fatalf("redirect query %q, want %q", loc.RawQuery, want)
		}
		if got := mustGet(t, c, "upl", "in/c d"); !bytes.Equal(got, file) {
			t.Fatal("object differs")
		}
	})
	t.Run("checksum", func(t *testing.T) {
		sum := crc32.ChecksumIEEE(file)
		b64 := base64.StdEncoding.EncodeToString([]byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)})
		resp, body := postUpload(t, u, policyFields(cond+`,["starts-with","$x-amz-checksum-crc32",""]`, exp, now,
			map[string]string{"key": "in/sum", "x-amz-checksum-crc32": b64}), "s", file)
		if resp.StatusCode != 204 || resp.Header.Get("X-Amz-Checksum-Crc32") != b64 {
			t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
		}
	})
	t.Run("signature v2", func(t *testing.T) {
		doc := `{"expiration":"` + exp.UTC().Format(time.RFC3339) + `","conditions":[{"bucket":"upl"},{"key":"v2/obj"}]}`
		a := sigv4.SignPOSTv2(base64.StdEncoding.EncodeToString([]byte(doc)), testutil.AccessKey, testutil.SecretKey)
		resp, body := postUpload(t, u, map[string]string{"key": "v2/obj", "AWSAccessKeyId": a.AccessKeyID, "policy": a.Policy, "signature": a.SignatureV2}, "f", file)
		if resp.StatusCode != 204 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		a = sigv4.SignPOSTv2(a.Policy, testutil.AccessKey, "wrong")
		resp, body = postUpload(t, u, map[string]string{"key": "v2/obj", "AWSAccessKeyId": a.AccessKeyID, "policy": a.Policy, "signature": a.SignatureV2}, "f", file)
		expectS3Error(t, resp.StatusCode, body, 403, "SignatureDoesNotMatch")
	})

	good := func(extra map[string]string) map[string]string {
		m := map[string]string{"key": "in/x"}
		for k, v := range extra {
			m[k] = v
		}
		return policyFields(cond, exp, now, m)
	}
	tampered := good(nil)
	tampered["x-amz-signature"] = strings.Repeat("0", 64)
	unknown := good(nil)
	unknown["x-amz-credential"] = "NOBODY/" + now.UTC().Format("20060102") + "/us-east-1/s3/aws4_request"
	noKey := good(nil)
	delete(noKey, "key")
	for _, tc := range []struct {
		name   string
		fields map[string]string
		file   []byte
		status int
		code   string
		msg    string
	}{
		{"expired", policyFields(cond, now.Add(-time.Second), now, map[string]string{"key": "in/x"}), file, 403, "AccessDenied", "Invalid according to Policy: Policy expired."},
		{"key outside prefix", good(map[string]string{"key": "out/x"}), file, 403, "AccessDenied", `Policy Condition failed: [&#34;starts-with&#34;,&#34;$key&#34;,&#34;in/&#34;]`},
		{"extra field", good(map[string]string{"x-amz-meta-other": "1"}), file, 403, "AccessDenied", "Extra input fields: x-amz-meta-other"},
		{"too large", good(nil), randBytes(2, 1000001), 400, "EntityTooLarge", ""},
		{"too small", good(nil), []byte{}, 400, "EntityTooSmall", ""},
		{"bad signature", tampered, file, 403, "SignatureDoesNotMatch", ""},
		{"unknown key", unknown, file, 403, "InvalidAccessKeyId", ""},
		{"no key field", noKey, file, 400, "InvalidArgument", "must contain a field named &#39;key&#39;"},
		{"no file", good(nil), nil, 400, "InvalidArgument", "exactly one file"},
		{"anonymous", map[string]string{"key": "in/x"}, file, 403, "AccessDenied", ""},
		{"malformed tagging", policyFields(cond+`,["starts-with","$tagging",""]`, exp, now, map[string]string{"key": "in/x", "tagging": "<Tagging><TagSet>"}), file, 400, "MalformedXML", ""},
		{"too many tags", policyFields(cond+`,["starts-with","$tagging",""]`, exp, now, map[string]string{"key": "in/x", "tagging": "<Tagging><TagSet>" +
			strings.Repeat("<Tag><Key>k</Key><Value>v</Value></Tag>", 11) + "</TagSet></Tagging>"}), file, 400, "InvalidTag", ""},
		{"checksum mismatch", policyFields(cond+`,["starts-with","$x-amz-checksum-crc32",""]`, exp, now, map[string]string{"key": "in/x", "x-amz-checksum-crc32": "AAAAAA=="}), file, 400, "BadDigest", ""},
		{"encryption", policyFields(cond+`,["starts-with","$x-amz-server-side-encryption",""]`, exp, now, map[string]string{"key": "in/x", "x-amz-server-side-encryption": "AES256"}), file, 501, "NotImplemented", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := postUpload(t, u, tc.fields, "x", tc.file)
			expectS3Error(t, resp.StatusCode, body, tc.status, tc.code)
			if !strings.Contains(body, tc.msg) {
				t.Fatalf("message: %s", body)
			}
		})
	}
	// Nothing of the refused uploads was stored.
	if _, err := c.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String("upl"), Key: aws.String("in/x")}); apiCode(err) != "NotFound" {
		t.Fatalf("in/x after refusals: %v", err)
	}

	t.Run("not a form", func(t *testing.T) {
		resp, err := http.Post(u, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		expectS3Error(t, resp.StatusCode, string(b), 412, "PreconditionFailed")
	})
	t.Run("no bucket", func(t *testing.T) {
		resp, body := postUpload(t, srv.URL+"/nobucket", policyFields(`["starts-with","$key",""]`, exp, now, map[string]string{"key": "k"}), "x", file)
		expectS3Error(t, resp.StatusCode, body, 404, "NoSuchBucket")
	})
	t.Run("tagging", func(t *testing.T) {
		doc := "<Tagging><TagSet><Tag><Key>project</Key><Value>blue</Value></Tag><Tag><Key>tier</Key><Value></Value></Tag></TagSet></Tagging>"
		resp, body := postUpload(t, u, policyFields(`{"bucket":"upl"},{"key":"tagged"},{"tagging":"`+strings.ReplaceAll(doc, `"`, `\"`)+`"}`, exp, now,
			map[string]string{"key": "tagged", "tagging": doc}), "x", file)
		if resp.StatusCode != 204 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		out, err := c.GetObjectTagging(context.Background(), &s3.GetObjectTaggingInput{Bucket: aws.String("upl"), Key: aws.String("tagged")})
		if err != nil || len(out.TagSet) != 2 || aws.ToString(out.TagSet[0].Key) != "project" || aws.ToString(out.TagSet[0].Value) != "blue" || aws.ToString(out.TagSet[1].Key) != "tier" {
			t.Fatalf("tags %+v %v", out, err)
		}
	})
	t.Run("virtual host", func(t *testing.T) {
		fields := policyFields(`{"bucket":"upl"},{"key":"vh"}`, exp, now, map[string]string{"key": "vh"})
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		for k, v := range fields {
			mw.WriteField(k, v)
		}
		fw, _ := mw.CreateFormFile("file", "f")
		fw.Write(file)
		mw.Close()
		req, _ := http.NewRequest("POST", srv.URL+"/", &b)
		req.Host = "upl.localhost"
		req.Header.Set("Content-Type", mw.FormDataContentType())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 204 || resp.Header.Get("Location") != "http://upl.localhost/vh" {
			t.Fatalf("%d %v", resp.StatusCode, resp.Header)
		}
		if got := mustGet(t, c, "upl", "vh"); !bytes.Equal(got, file) {
			t.Fatal("object differs")
		}
	})
}

// TestPostObjectLarge streams a file larger than the server's object limit allows: the
// upload is cut off with EntityTooLarge once the limit is passed, and one within it works,
// without the handler holding the file.
func TestPostObjectLarge(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{}, func(c *s3api.Config) { c.MaxObjectSize = 4 << 20 })
	c := newClient(t, srv.URL, testutil.AccessKey, testutil.SecretKey)
	mustCreateBucket(t, c, "big")
	now := time.Now()
	fields := policyFields(`{"bucket":"big"},["starts-with","$key",""]`, now.Add(time.Minute), now, map[string]string{"key": "k"})
	resp, body := postUpload(t, srv.URL+"/big", fields, "f", randBytes(3, 4<<20))
	if resp.StatusCode != 204 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	resp, body = postUpload(t, srv.URL+"/big", fields, "f", randBytes(3, 4<<20+1))
	expectS3Error(t, resp.StatusCode, body, 400, "EntityTooLarge")
}

// Object Lock form fields of a browser upload lock the version (a bucket with Object
// Lock), or are refused (a bucket without): never accepted and ignored.
func TestPostObjectLock(t *testing.T) {
	srv, c := setup(t)
	ctx := context.Background()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("lockpost"), ObjectLockEnabledForBucket: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	mustCreateBucket(t, c, "plainpost")
	now := time.Now()
	until := now.Add(time.Hour).UTC().Format(time.RFC3339)
	cond := `["starts-with","$key",""],["starts-with","$x-amz-object-lock-mode",""],["starts-with","$x-amz-object-lock-retain-until-date",""]`
	fields := map[string]string{"key": "k", "x-amz-object-lock-mode": "COMPLIANCE", "x-amz-object-lock-retain-until-date": until}
	resp, body := postUpload(t, srv.URL+"/lockpost", policyFields(`{"bucket":"lockpost"},`+cond, now.Add(time.Minute), now, fields), "k", []byte("locked"))
	if resp.StatusCode != 204 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("lockpost"), Key: aws.String("k")})
	if err != nil || head.ObjectLockMode != types.ObjectLockModeCompliance {
		t.Fatalf("a browser upload with a retention: %+v %v", head, err)
	}
	resp, body = postUpload(t, srv.URL+"/plainpost", policyFields(`{"bucket":"plainpost"},`+cond, now.Add(time.Minute), now, fields), "k", []byte("x"))
	if resp.StatusCode != 400 || !strings.Contains(body, "InvalidRequest") {
		t.Fatalf("lock fields on a bucket without Object Lock: %d %s", resp.StatusCode, body)
	}
}

// TestPostObjectACL: a browser upload's acl field is the object's canned ACL, checked as
// the header would be: refused where ACLs are disabled, public where they are not.
func TestPostObjectACL(t *testing.T) {
	srv, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "enforcedpost")
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("aclpost"), ObjectOwnership: types.ObjectOwnershipObjectWriter}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, tc := range []struct {
		bucket, acl string
		status      int
		anon        int
	}{
		{"aclpost", "public-read", 204, 200},
		{"aclpost", "private", 204, 403},
		{"enforcedpost", "public-read", 400, 0},
	} {
		fields := map[string]string{"key": tc.acl, "acl": tc.acl}
		cond := `{"bucket":"` + tc.bucket + `"},["starts-with","$key",""],{"acl":"` + tc.acl + `"}`
		resp, body := postUpload(t, srv.URL+"/"+tc.bucket, policyFields(cond, now.Add(time.Minute), now, fields), "f", []byte("posted"))
		if resp.StatusCode != tc.status || (tc.status == 400 && !strings.Contains(body, "AccessControlListNotSupported")) {
			t.Fatalf("%s %s: %d %s", tc.bucket, tc.acl, resp.StatusCode, body)
		}
		if tc.anon != 0 {
			if st := anonymous(t, "GET", srv.URL+"/"+tc.bucket+"/"+tc.acl, ""); st != tc.anon {
				t.Errorf("anonymous GET of a POST upload with acl %s: %d, want %d", tc.acl, st, tc.anon)
			}
		}
	}
	// A form without policy or signature is an anonymous upload: refused unless the bucket
	// lets anyone write (here its ACL, public-read-write), as in S3.
	anonForm := map[string]string{"key": "anon/${filename}"}
	if resp, body := postUpload(t, srv.URL+"/aclpost", anonForm, "a.txt", []byte("anon")); resp.StatusCode != 403 || !strings.Contains(body, "AccessDenied") {
		t.Fatalf("anonymous POST to a private bucket: %d %s", resp.StatusCode, body)
	}
	if _, err := srv.Store.StatObject("aclpost", "anon/a.txt"); err == nil {
		t.Fatal("a refused anonymous POST stored an object")
	}
	if _, err := c.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("aclpost"), ACL: types.BucketCannedACLPublicReadWrite}); err != nil {
		t.Fatal(err)
	}
	if resp, body := postUpload(t, srv.URL+"/aclpost", anonForm, "a.txt", []byte("anon")); resp.StatusCode != 204 {
		t.Fatalf("anonymous POST to a public-read-write bucket: %d %s", resp.StatusCode, body)
	}
	if got := mustGet(t, c, "aclpost", "anon/a.txt"); string(got) != "anon" {
		t.Fatalf("anonymous POST stored %q", got)
	}
	// A form with a policy but no signature is not anonymous: refused.
	if resp, body := postUpload(t, srv.URL+"/aclpost", map[string]string{"key": "anon/p", "policy": "e30="}, "p", []byte("p")); resp.StatusCode < 400 {
		t.Fatalf("unsigned POST with a policy: %d %s", resp.StatusCode, body)
	}
}
