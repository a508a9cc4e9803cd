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
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairnfs/cairn/internal/sigv4"
	"github.com/cairnfs/cairn/internal/testutil"
)

func corsRules() []types.CORSRule {
	return []types.CORSRule{
		{
			ID:             aws.String("app"),
			AllowedOrigins: []string{"http://app.test"},
			AllowedMethods: []string{"GET", "PUT", "POST"},
			AllowedHeaders: []string{"x-amz-*", "content-type"},
			ExposeHeaders:  []string{"ETag", "x-amz-request-id"},
			MaxAgeSeconds:  aws.Int32(600),
		},
		{AllowedOrigins: []string{"*"}, AllowedMethods: []string{"HEAD"}},
	}
}

// TestBucketCors: put, get and delete a CORS configuration through aws-sdk-go-v2, and the
// errors of each.
func TestBucketCors(t *testing.T) {
	_, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "web")

	_, err := c.GetBucketCors(ctx, &s3.GetBucketCorsInput{Bucket: aws.String("web")})
	wantCode(t, err, "NoSuchCORSConfiguration")
	_, err = c.GetBucketCors(ctx, &s3.GetBucketCorsInput{Bucket: aws.String("nobucket")})
	wantCode(t, err, "NoSuchBucket")
	_, err = c.PutBucketCors(ctx, &s3.PutBucketCorsInput{Bucket: aws.String("nobucket"), CORSConfiguration: &types.CORSConfiguration{CORSRules: corsRules()}})
	wantCode(t, err, "NoSuchBucket")

	if _, err := c.PutBucketCors(ctx, &s3.PutBucketCorsInput{Bucket: aws.String("web"), CORSConfiguration: &types.CORSConfiguration{CORSRules: corsRules()}}); err != nil {
		t.Fatal(err)
	}
	out, err := c.GetBucketCors(ctx, &s3.GetBucketCorsInput{Bucket: aws.String("web")})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.CORSRules) != 2 {
		t.Fatalf("rules %+v", out.CORSRules)
	}
	r0 := out.CORSRules[0]
	if aws.ToString(r0.ID) != "app" || strings.Join(r0.AllowedOrigins, ",") != "http://app.test" ||
		strings.Join(r0.AllowedMethods, ",") != "GET,PUT,POST" || strings.Join(r0.AllowedHeaders, ",") != "x-amz-*,content-type" ||
		strings.Join(r0.ExposeHeaders, ",") != "ETag,x-amz-request-id" || aws.ToInt32(r0.MaxAgeSeconds) != 600 {
		t.Fatalf("rule 0 %+v", r0)
	}
	if r1 := out.CORSRules[1]; r1.ID != nil || r1.MaxAgeSeconds != nil || strings.Join(r1.AllowedMethods, ",") != "HEAD" {
		t.Fatalf("rule 1 %+v", r1)
	}

	for _, bad := range []struct {
		rule types.CORSRule
		code string
	}{
		{types.CORSRule{AllowedOrigins: []string{"*"}, AllowedMethods: []string{"PATCH"}}, "InvalidRequest"},
		{types.CORSRule{AllowedOrigins: []string{"http://*.*.test"}, AllowedMethods: []string{"GET"}}, "InvalidRequest"},
		{types.CORSRule{AllowedOrigins: []string{"*"}, AllowedMethods: []string{"GET"}, AllowedHeaders: []string{"*-*"}}, "InvalidRequest"},
	} {
		_, err := c.PutBucketCors(ctx, &s3.PutBucketCorsInput{Bucket: aws.String("web"), CORSConfiguration: &types.CORSConfiguration{CORSRules: []types.CORSRule{bad.rule}}})
		wantCode(t, err, bad.code)
	}
	many := make([]types.CORSRule, 101)
	for i := range many {
		many[i] = types.CORSRule{AllowedOrigins: []string{"*"}, AllowedMethods: []string{"GET"}}
	}
	_, err = c.PutBucketCors(ctx, &s3.PutBucketCorsInput{Bucket: aws.String("web"), CORSConfiguration: &types.CORSConfiguration{CORSRules: many}})
	wantCode(t, err, "MalformedXML")
	// A refused configuration left the stored one alone.
	if out, err := c.GetBucketCors(ctx, &s3.GetBucketCorsInput{Bucket: aws.String("web")}); err != nil || len(out.CORSRules) != 2 {
		t.Fatalf("after refusals: %v %v", out, err)
	}

	if _, err := c.DeleteBucketCors(ctx, &s3.DeleteBucketCorsInput{Bucket: aws.String("web")}); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetBucketCors(ctx, &s3.GetBucketCorsInput{Bucket: aws.String("web")})
	wantCode(t, err, "NoSuchCORSConfiguration")
	if _, err := c.DeleteBucketCors(ctx, &s3.DeleteBucketCorsInput{Bucket: aws.String("web")}); err != nil {
		t.Fatalf("delete again: %v", err)
	}
}

// TestCORSRequests: preflight OPTIONS (unauthenticated) and the CORS headers of actual
// requests, presigned ones and errors included.
func TestCORSRequests(t *testing.T) {
	srv, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "web")
	mustCreateBucket(t, c, "plain")
	mustPut(t, c, "web", "obj", []byte("hello"))
	mustPut(t, c, "plain", "obj", []byte("hello"))
	if _, err := c.PutBucketCors(ctx, &s3.PutBucketCorsInput{Bucket: aws.String("web"), CORSConfiguration: &types.CORSConfiguration{CORSRules: corsRules()}}); err != nil {
		t.Fatal(err)
	}

	preflight := func(path string, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		r, _ := http.NewRequest(http.MethodOptions, srv.URL+path, nil)
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	for _, tc := range []struct {
		name   string
		path   string
		hdr    map[string]string
		status int
		code   string
		want   map[string]string
	}{
		{"allowed", "/web/obj", map[string]string{"Origin": "http://app.test", "Access-Control-Request-Method": "PUT", "Access-Control-Request-Headers": "X-Amz-Meta-A, content-type"}, 200, "", map[string]string{
			"Access-Control-Allow-Origin": "http://app.test", "Access-Control-Allow-Methods": "GET, PUT, POST",
			"Access-Control-Allow-Headers": "x-amz-meta-a, content-type", "Access-Control-Max-Age": "600",
			"Access-Control-Expose-Headers": "ETag, x-amz-request-id", "Access-Control-Allow-Credentials": "true",
			"Vary": "Origin, Access-Control-Request-Headers, Access-Control-Request-Method"}},
		{"bucket", "/web", map[string]string{"Origin": "http://app.test", "Access-Control-Request-Method": "POST"}, 200, "", map[string]string{"Access-Control-Allow-Origin": "http://app.test"}},
		{"presigned query", "/web/obj?X-Amz-Algorithm=AWS4-HMAC-SHA256&uploads", map[string]string{"Origin": "http://app.test", "Access-Control-Request-Method": "GET"}, 200, "", nil},
		{"wildcard origin", "/web/obj", map[string]string{"Origin": "http://other.test", "Access-Control-Request-Method": "HEAD"}, 200, "", map[string]string{"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Credentials": ""}},
		{"other origin", "/web/obj", map[string]string{"Origin": "http://other.test", "Access-Control-Request-Method": "PUT"}, 403, "AccessForbidden", map[string]string{"Access-Control-Allow-Origin": ""}},
		{"header not allowed", "/web/obj", map[string]string{"Origin": "http://app.test", "Access-Control-Request-Method": "PUT", "Access-Control-Request-Headers": "x-custom"}, 403, "AccessForbidden", nil},
		{"method not allowed", "/web/obj", map[string]string{"Origin": "http://app.test", "Access-Control-Request-Method": "DELETE"}, 403, "AccessForbidden", nil},
		{"no cors", "/plain/obj", map[string]string{"Origin": "http://app.test", "Access-Control-Request-Method": "GET"}, 403, "AccessForbidden", nil},
		{"no bucket", "/nobucket/obj", map[string]string{"Origin": "http://app.test", "Access-Control-Request-Method": "GET"}, 404, "NoSuchBucket", nil},
		{"no origin", "/web/obj", map[string]string{"Access-Control-Request-Method": "GET"}, 400, "BadRequest", nil},
		{"no method", "/web/obj", map[string]string{"Origin": "http://app.test"}, 400, "BadRequest", nil},
	} {
		t.Run("preflight "+tc.name, func(t *testing.T) {
			resp, body := preflight(tc.path, tc.hdr)
			if resp.StatusCode != tc.status || (tc.code != "" && !strings.Contains(body, "<Code>"+tc.code+"</Code>")) {
				t.Fatalf("got %d %s, want %d %s", resp.StatusCode, body, tc.status, tc.code)
			}
			for k, v := range tc.want {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
		})
	}

	get := func(r *http.Request) *http.Response {
		t.Helper()
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	t.Run("actual", func(t *testing.T) {
		now := time.Now()
		r := signed(t, "GET", srv.URL+"/web/obj", nil, map[string]string{"Origin": "http://app.test"}, now)
		resp := get(r)
		if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "http://app.test" ||
			resp.Header.Get("Access-Control-Expose-Headers") != "ETag, x-amz-request-id" || resp.Header.Get("Vary") != "Origin" ||
			resp.Header.Get("Access-Control-Allow-Credentials") != "true" {
			t.Fatalf("%d %v", resp.StatusCode, resp.Header)
		}
		// A method the rule does not allow: Vary only.
		resp = get(signed(t, "DELETE", srv.URL+"/web/nothing", nil, map[string]string{"Origin": "http://app.test"}, now))
		if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "" || resp.Header.Get("Vary") != "Origin" {
			t.Fatalf("delete: %d %v", resp.StatusCode, resp.Header)
		}
		// An error keeps the CORS headers, so the page can read it.
		resp = get(signed(t, "GET", srv.URL+"/web/missing", nil, map[string]string{"Origin": "http://app.test"}, now))
		if resp.StatusCode != 404 || resp.Header.Get("Access-Control-Allow-Origin") != "http://app.test" {
			t.Fatalf("missing: %d %v", resp.StatusCode, resp.Header)
		}
		// An anonymous request (no bucket policy allows it here) is refused, with the
		// headers of the rules in this node's map, so the page can read the refusal.
		bad, _ := http.NewRequest("GET", srv.URL+"/web/obj", nil)
		bad.Header.Set("Origin", "http://app.test")
		resp = get(bad)
		if resp.StatusCode != 403 || resp.Header.Get("Access-Control-Allow-Origin") != "http://app.test" {
			t.Fatalf("anonymous: %d %v", resp.StatusCode, resp.Header)
		}
		// A presigned URL.
		u, err := sigv4.Presign("GET", srv.URL+"/web/obj", testutil.AccessKey, testutil.SecretKey, "us-east-1", time.Minute, now)
		if err != nil {
			t.Fatal(err)
		}
		pr, _ := http.NewRequest("GET", u, nil)
		pr.Header.Set("Origin", "http://elsewhere.test")
		resp = get(pr)
		if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "" || resp.Header.Get("Vary") != "Origin" {
			t.Fatalf("presigned other origin: %d %v", resp.StatusCode, resp.Header)
		}
		pr.Header.Set("Origin", "http://app.test")
		resp = get(pr)
		if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "http://app.test" {
			t.Fatalf("presigned: %d %v", resp.StatusCode, resp.Header)
		}
		// No CORS on the bucket: nothing added.
		resp = get(signed(t, "GET", srv.URL+"/plain/obj", nil, map[string]string{"Origin": "http://app.test"}, now))
		if resp.StatusCode != 200 || resp.Header.Get("Vary") != "" || resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("plain: %d %v", resp.StatusCode, resp.Header)
		}
	})
}

// TestPutBucketCorsRaw: bodies the SDKs would not send: not XML, no rule, a rule without a
// method, and a document over 64 KiB.
func TestPutBucketCorsRaw(t *testing.T) {
	srv, c := setup(t)
	mustCreateBucket(t, c, "raw")
	rule := `<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod><ID>` + strings.Repeat("x", 200) + `</ID></CORSRule>`
	big := `<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod><AllowedHeader>` + strings.Repeat("h", 750) + `</AllowedHeader></CORSRule>`
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"not xml", "{}", 400, "MalformedXML"},
		{"no rule", "<CORSConfiguration></CORSConfiguration>", 400, "MalformedXML"},
		{"no method", "<CORSConfiguration><CORSRule><AllowedOrigin>*</AllowedOrigin></CORSRule></CORSConfiguration>", 400, "MalformedXML"},
		{"over 64 KiB", "<CORSConfiguration>" + strings.Repeat(big, 90) + "</CORSConfiguration>", 400, "MalformedXML"}, // 90 rules: the size, not the count
		{"ok", "<CORSConfiguration>" + rule + "</CORSConfiguration>", 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, body := do(t, signed(t, "PUT", srv.URL+"/raw?cors", []byte(tc.body), nil, time.Now()))
			if tc.code == "" {
				if st != tc.status {
					t.Fatalf("%d %s", st, body)
				}
				return
			}
			expectS3Error(t, st, body, tc.status, tc.code)
		})
	}
}
