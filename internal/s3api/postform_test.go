package s3api

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"mime/multipart"
	"strings"
	"testing"
	"time"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// policyCases are the table of parsePostPolicy; they also seed FuzzPostPolicy.
var policyCases = []struct {
	name string
	doc  string
	code string // "" accepted
}{
	{"simple", `{"expiration":"2030-01-01T00:00:00.000Z","conditions":[{"bucket":"b"},["starts-with","$key","u/"],["content-length-range",1,1024]]}`, ""},
	{"no millis", `{"expiration":"2030-01-01T00:00:00Z","conditions":[]}`, ""},
	{"eq and strings for sizes", `{"expiration":"2030-01-01T00:00:00Z","conditions":[["eq","$Content-Type","text/plain"],["content-length-range","0","10"]]}`, ""},
	{"empty prefix", `{"expiration":"2030-01-01T00:00:00Z","conditions":[["starts-with","$x-amz-meta-a",""]]}`, ""},
	{"not json", `{"expiration":`, "InvalidPolicyDocument"},
	{"trailing data", `{"expiration":"2030-01-01T00:00:00Z","conditions":[]} {}`, "InvalidPolicyDocument"},
	{"no expiration", `{"conditions":[]}`, "InvalidPolicyDocument"},
	{"no conditions", `{"expiration":"2030-01-01T00:00:00Z"}`, "InvalidPolicyDocument"},
	{"bad expiration", `{"expiration":"tomorrow","conditions":[]}`, "InvalidPolicyDocument"},
	{"unknown op", `{"expiration":"2030-01-01T00:00:00Z","conditions":[["ends-with","$key","x"]]}`, "InvalidPolicyDocument"},
	{"two elements", `{"expiration":"2030-01-01T00:00:00Z","conditions":[["eq","$key"]]}`, "InvalidPolicyDocument"},
	{"field without $", `{"expiration":"2030-01-01T00:00:00Z","conditions":[["eq","key","a"]]}`, "InvalidPolicyDocument"},
	{"number value", `{"expiration":"2030-01-01T00:00:00Z","conditions":[{"success_action_status":201}]}`, "InvalidPolicyDocument"},
	{"bad range", `{"expiration":"2030-01-01T00:00:00Z","conditions":[["content-length-range",10,1]]}`, "InvalidPolicyDocument"},
	{"negative range", `{"expiration":"2030-01-01T00:00:00Z","conditions":[["content-length-range",-1,1]]}`, "InvalidPolicyDocument"},
	{"upper-case conditions", `{"expiration":"2030-01-01T00:00:00Z","CONDITIONS":[]}`, "InvalidPolicyDocument"},
	{"upper-case expiration", `{"EXPIRATION":"2030-01-01T00:00:00Z","conditions":[]}`, "InvalidPolicyDocument"},
	{"capitalized expiration", `{"Expiration":"2030-01-01T00:00:00Z","conditions":[]}`, "InvalidPolicyDocument"},
	{"expiration not a string", `{"expiration":1,"conditions":[]}`, "InvalidPolicyDocument"},
	{"null conditions", `{"expiration":"2030-01-01T00:00:00Z","conditions":null}`, "InvalidPolicyDocument"},
	{"condition not a list", `{"expiration":"2030-01-01T00:00:00Z","conditions":[123]}`, "InvalidPolicyDocument"},
}

func TestParsePostPolicy(t *testing.T) {
	for _, c := range policyCases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parsePostPolicy(b64(c.doc))
			if c.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ae *apiError
			if !errors.As(err, &ae) || ae.Code != c.code {
				t.Fatalf("want %s, got %v", c.code, err)
			}
		})
	}
	if _, err := parsePostPolicy("!not base64"); err == nil {
		t.Fatal("accepted a policy that is not base64")
	}
}

func TestPostPolicyCheck(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	pol, err := parsePostPolicy(b64(`{"expiration":"2026-11-25T13:00:00Z","conditions":[
		{"bucket":"up"},["starts-with","$key","user/"],{"x-amz-credential":"AK/20261125/us-east-1/s3/aws4_request"},
		["eq","$success_action_status","201"],["starts-with","$Content-Type","image/"],["starts-with","$x-amz-meta-note",""],
		["content-length-range",10,100],["content-length-range",0,50]]}`))
	if err != nil {
		t.Fatal(err)
	}
	if pol.minSize != 10 || pol.maxSize != 50 {
		t.Fatalf("range %d-%d", pol.minSize, pol.maxSize)
	}
	base := map[string]string{"key": "user/a.png", "x-amz-credential": "AK/20261125/us-east-1/s3/aws4_request", "success_action_status": "201",
		"content-type": "image/png", "policy": "p", "x-amz-signature": "s", "x-ignore-me": "1"}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range base {
			m[a] = b
		}
		if v == "\x00" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, c := range []struct {
		name   string
		fields map[string]string
		bucket string
		now    time.Time
		msg    string // "" passes
	}{
		{"ok", base, "up", now, ""},
		{"meta with empty prefix", with("x-amz-meta-note", "anything"), "up", now, ""},
		{"content types", with("content-type", "image/png, image/gif"), "up", now, ""},
		{"one content type not allowed", with("content-type", "image/png,text/html"), "up", now, `Policy Condition failed: ["starts-with","$Content-Type","image/"]`},
		{"expired", base, "up", now.Add(time.Hour), "Policy expired."},
		{"other bucket", base, "down", now, `Policy Condition failed: {"bucket":"up"}`},
		{"key outside prefix", with("key", "admin/a.png"), "up", now, `Policy Condition failed: ["starts-with","$key","user/"]`},
		{"status differs", with("success_action_status", "200"), "up", now, `Policy Condition failed: ["eq","$success_action_status","201"]`},
		{"missing field", with("success_action_status", "\x00"), "up", now, `Policy Condition failed: ["eq","$success_action_status","201"]`},
		{"extra field", with("x-amz-meta-other", "1"), "up", now, "Extra input fields: x-amz-meta-other"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := pol.check(c.fields, c.bucket, c.now)
			if c.msg == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ae *apiError
			if !errors.As(err, &ae) || ae.Code != "AccessDenied" || ae.Status != 403 || ae.Message != "Invalid according to Policy: "+c.msg {
				t.Fatalf("want AccessDenied %q, got %v", c.msg, err)
			}
		})
	}
}

// formBody builds a multipart/form-data body of fields, then a file field if file != nil.
func formBody(fields [][2]string, filename string, file []byte) ([]byte, string) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for _, f := range fields {
		mw.WriteField(f[0], f[1])
	}
	if file != nil {
		fw, _ := mw.CreateFormFile("file", filename)
		fw.Write(file)
	}
	mw.Close()
	return b.Bytes(), mw.Boundary()
}

func TestReadPostForm(t *testing.T) {
	body, bd := formBody([][2]string{{"Key", "a/${filename}"}, {"X-Amz-Meta-A", "1"}}, "f.txt", []byte("content"))
	f, err := readPostForm(bytes.NewReader(body), bd)
	if err != nil {
		t.Fatal(err)
	}
	if f.fields["key"] != "a/${filename}" || f.fields["x-amz-meta-a"] != "1" || f.filename != "f.txt" || strings.Join(f.names, ",") != "Key,X-Amz-Meta-A" {
		t.Fatalf("%+v", f)
	}
	if b, _ := io.ReadAll(f.file); string(b) != "content" {
		t.Fatalf("file %q", b)
	}
	for _, c := range []struct {
		name string
		body []byte
		bd   string
		code string
	}{
		{"no file", func() []byte { b, _ := formBody([][2]string{{"key", "k"}}, "", nil); return b }(), "", "InvalidArgument"},
		{"duplicate field", func() []byte { b, _ := formBody([][2]string{{"key", "k"}, {"KEY", "j"}}, "f", []byte("x")); return b }(), "", "InvalidArgument"},
		{"fields too large", func() []byte {
			b, _ := formBody([][2]string{{"x-ignore-a", strings.Repeat("a", maxPostFields)}}, "f", []byte("x"))
			return b
		}(), "", "MaxPostPreDataLengthExceededError"},
		{"not multipart", []byte("key=k&file=x"), "xyz", "MalformedPOSTRequest"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bd := c.bd
			if bd == "" {
				bd = string(bytes.TrimPrefix(bytes.SplitN(c.body, []byte("\r\n"), 2)[0], []byte("--")))
			}
			_, err := readPostForm(bytes.NewReader(c.body), bd)
			var ae *apiError
			if !errors.As(err, &ae) || ae.Code != c.code {
				t.Fatalf("want %s, got %v", c.code, err)
			}
		})
	}
}

// FuzzPostForm feeds arbitrary bodies to the form reader: no panic, the field limits hold,
// and the file part can be read to its end.
func FuzzPostForm(f *testing.F) {
	body, bd := formBody([][2]string{{"key", "a/${filename}"}, {"policy", "e30="}, {"x-amz-meta-a", "1"}}, "f.txt", []byte("content"))
	f.Add(body, bd)
	body, bd = formBody([][2]string{{"key", "k"}}, "", nil)
	f.Add(body, bd)
	f.Add([]byte("--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x\"\r\n\r\nabc\r\n--b--\r\n"), "b")
	f.Add([]byte("--b\r\nContent-Disposition: form-data; name=\"key\"\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\na=3Db\r\n--b\r\n"), "b")
	f.Fuzz(func(t *testing.T, body []byte, boundary string) {
		if boundary == "" {
			return
		}
		form, err := readPostForm(bytes.NewReader(body), boundary)
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.Status != 400 {
				t.Fatalf("error %v", err)
			}
			return
		}
		total := 0
		for k, v := range form.fields {
			total += len(k) + len(v)
		}
		if total > maxPostFields || len(form.fields) > maxPostFieldCount {
			t.Fatalf("%d bytes in %d fields", total, len(form.fields))
		}
		io.Copy(io.Discard, form.file)
	})
}

// FuzzPostPolicy feeds arbitrary documents to the policy parser and the parsed policy to
// the check: no panic, the size bounds are not negative, and a check refuses only with AccessDenied.
func FuzzPostPolicy(f *testing.F) {
	for _, c := range policyCases {
		f.Add(c.doc, "key", "user/a")
	}
	f.Fuzz(func(t *testing.T, doc, field, value string) {
		pol, err := parsePostPolicy(b64(doc))
		if err != nil {
			return
		}
		if pol.minSize < 0 || pol.maxSize < 0 {
			t.Fatalf("range %d-%d", pol.minSize, pol.maxSize)
		}
		err = pol.check(map[string]string{strings.ToLower(field): value}, "bkt", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		var ae *apiError
		if err != nil && (!errors.As(err, &ae) || ae.Code != "AccessDenied") {
			t.Fatalf("check: %v", err)
		}
	})
}
