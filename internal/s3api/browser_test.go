package s3api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
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

	"github.com/cairnfs/cairn/internal/testutil/browser"
)

// The browser tests drive Debian's Chromium (internal/testutil/browser) against a real
// server on 127.0.0.1, with the pages served from other loopback listeners (other origins).
// They run in `make test-long`; -short and the race lane skip them.

func skipBrowser(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("browser test: not with -short")
	}
	if raceEnabled {
		t.Skip("browser test: run by make test-long, not under the race detector")
	}
}

// pageServer serves html at every path of a new loopback listener (a new origin).
func pageServer(t *testing.T, page func(r *http.Request) string) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, page(r))
	}))
	t.Cleanup(s.Close)
	return s
}

// TestBrowserPostForm: an HTML form with a policy presigned by aws-sdk-go-v2 uploads a file
// from Chromium, first as a plain form submission answered with a redirect, then with
// fetch() and FormData answered 201 with the PostResponse document.
func TestBrowserPostForm(t *testing.T) {
	skipBrowser(t)
	_, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "forms")

	var formHTML string
	pages := pageServer(t, func(r *http.Request) string {
		if r.URL.Path == "/done" {
			q := r.URL.Query()
			return `<!doctype html><p id="result">` + html.EscapeString(q.Get("bucket")+"|"+q.Get("key")+"|"+q.Get("etag")) + `</p>`
		}
		return formHTML
	})
	if _, err := c.PutBucketCors(ctx, &s3.PutBucketCorsInput{Bucket: aws.String("forms"), CORSConfiguration: &types.CORSConfiguration{
		CORSRules: []types.CORSRule{{AllowedOrigins: []string{pages.URL}, AllowedMethods: []string{"POST"}, ExposeHeaders: []string{"ETag"}}}}}); err != nil {
		t.Fatal(err)
	}
	pre, err := s3.NewPresignClient(c).PresignPostObject(ctx, &s3.PutObjectInput{Bucket: aws.String("forms"), Key: aws.String("uploads/${filename}")},
		func(o *s3.PresignPostOptions) {
			o.Expires = 5 * time.Minute
			o.Conditions = []any{
				[]any{"content-length-range", 1, 10 << 20},
				[]any{"starts-with", "$success_action_redirect", ""},
				[]any{"starts-with", "$success_action_status", ""},
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	var fields strings.Builder
	for k, v := range pre.Values {
		fmt.Fprintf(&fields, `<input type="hidden" name="%s" value="%s">`+"\n", html.EscapeString(k), html.EscapeString(v))
	}
	formHTML = `<!doctype html><form id="f" action="` + html.EscapeString(pre.URL) + `" method="post" enctype="multipart/form-data">
` + fields.String() + `<input type="hidden" name="success_action_redirect" value="` + pages.URL + `/done">
<input id="file" type="file" name="file"><button id="go" type="submit">Upload</button></form><p id="result"></p>`

	dir := t.TempDir()
	data := randBytes(11, 2<<20+123)
	path := filepath.Join(dir, "photo one.bin")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}

	b := browser.New(t, 30*time.Second)
	b.Navigate(pages.URL + "/form")
	b.SetFiles("#file", path)
	b.Click("#go")
	want := "forms|uploads/photo one.bin|\"" + md5hex(data) + "\""
	b.WaitText("#result", 15*time.Second, func(s string) bool { return s != "" })
	if got := b.Text("#result"); got != want {
		t.Fatalf("redirect page shows %q, want %q (at %s)", got, want, b.Location())
	}
	if got := mustGet(t, c, "forms", "uploads/photo one.bin"); !bytes.Equal(got, data) {
		t.Fatal("the object read back differs from the file the browser uploaded")
	}

	// The same form through fetch() from the page's origin (CORS allows POST), asking for
	// 201: the page reads the PostResponse and the exposed ETag.
	data2 := randBytes(12, 70<<10)
	path2 := filepath.Join(dir, "second.bin")
	os.WriteFile(path2, data2, 0o644)
	b.Navigate(pages.URL + "/form")
	b.SetFiles("#file", path2)
	out, err := browser.Eval[string](b, `(async () => {
		const fd = new FormData(document.getElementById("f"));
		fd.delete("success_action_redirect");
		const file = fd.get("file"); fd.delete("file");
		fd.append("success_action_status", "201");
		fd.append("file", file);
		const r = await fetch(document.getElementById("f").action, {method: "POST", body: fd});
		const text = await r.text();
		const key = new DOMParser().parseFromString(text, "application/xml").querySelector("PostResponse > Key");
		return r.status + "|" + (key ? key.textContent : text) + "|" + r.headers.get("ETag");
	})()`)
	if err != nil {
		t.Fatal(err)
	}
	if want := "201|uploads/second.bin|\"" + md5hex(data2) + "\""; out != want {
		t.Fatalf("fetch upload: %q, want %q", out, want)
	}
	if got := mustGet(t, c, "forms", "uploads/second.bin"); !bytes.Equal(got, data2) {
		t.Fatal("the object read back differs from the second upload")
	}
}

// TestBrowserCORS: pages on two other origins call cairn with fetch(): a presigned PUT with
// a metadata header (which makes the browser send a preflight) and a presigned GET. The
// allowed origin succeeds and reads the exposed ETag; the other sees a TypeError, and its
// PUT never reaches the bucket.
func TestBrowserCORS(t *testing.T) {
	skipBrowser(t)
	_, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "site")
	page := func(*http.Request) string { return `<!doctype html><title>page</title>` }
	allowed, other := pageServer(t, page), pageServer(t, page)
	if _, err := c.PutBucketCors(ctx, &s3.PutBucketCorsInput{Bucket: aws.String("site"), CORSConfiguration: &types.CORSConfiguration{
		CORSRules: []types.CORSRule{{AllowedOrigins: []string{allowed.URL}, AllowedMethods: []string{"GET", "PUT"},
			AllowedHeaders: []string{"x-amz-*", "content-type"}, ExposeHeaders: []string{"ETag"}, MaxAgeSeconds: aws.Int32(1)}}}}); err != nil {
		t.Fatal(err)
	}
	pc := s3.NewPresignClient(c)
	put := func(key string) string {
		req, err := pc.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("site"), Key: aws.String(key), Metadata: map[string]string{"from": "browser"}})
		if err != nil {
			t.Fatal(err)
		}
		hd := map[string]string{}
		for k, v := range req.SignedHeader {
			if !strings.EqualFold(k, "Host") {
				hd[k] = v[0]
			}
		}
		js, _ := json.Marshal(map[string]any{"url": req.URL, "headers": hd})
		return string(js)
	}
	mustPut(t, c, "site", "hello.txt", []byte("hello, browser"))
	get, err := pc.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("site"), Key: aws.String("hello.txt")})
	if err != nil {
		t.Fatal(err)
	}
	getJS, _ := json.Marshal(get.URL)

	b := browser.New(t, 30*time.Second)
	run := func(origin, js string) string {
		t.Helper()
		b.Navigate(origin + "/")
		out, err := browser.Eval[string](b, `(async () => { try { `+js+` } catch (e) { return e.name } })()`)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	putJS := func(key string) string {
		return `const p = ` + put(key) + `;
			const r = await fetch(p.url, {method: "PUT", headers: p.headers, body: "from the page"});
			return "status " + r.status + " etag " + r.headers.get("ETag");`
	}
	readJS := `const r = await fetch(` + string(getJS) + `); return "status " + r.status + " " + await r.text();`

	if got, want := run(allowed.URL, putJS("ok.txt")), "status 200 etag \""+md5hex([]byte("from the page"))+"\""; got != want {
		t.Fatalf("allowed origin PUT: %q, want %q", got, want)
	}
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("site"), Key: aws.String("ok.txt")})
	if err != nil || head.Metadata["from"] != "browser" {
		t.Fatalf("object put from the page: %+v %v", head, err)
	}
	if got := run(allowed.URL, readJS); got != "status 200 hello, browser" {
		t.Fatalf("allowed origin presigned GET: %q", got)
	}
	if got := run(other.URL, putJS("denied.txt")); got != "TypeError" {
		t.Fatalf("other origin PUT: %q, want TypeError", got)
	}
	if _, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("site"), Key: aws.String("denied.txt")}); apiCode(err) != "NotFound" {
		t.Fatalf("the denied PUT reached the bucket: %v", err)
	}
	if got := run(other.URL, readJS); got != "TypeError" {
		t.Fatalf("other origin presigned GET: %q, want TypeError", got)
	}
}
