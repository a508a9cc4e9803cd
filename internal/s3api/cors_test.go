package s3api

import (
	"encoding/xml"
	"errors"
	"strings"
	"testing"
)

func corsDoc(rules ...string) string {
	return "<CORSConfiguration>" + strings.Join(rules, "") + "</CORSConfiguration>"
}

// corsCases are the table of parseCORS; they also seed FuzzCORS.
var corsCases = []struct {
	name string
	doc  string
	code string // "" accepted
}{
	{"one rule", corsDoc(`<CORSRule><AllowedOrigin>http://a.example</AllowedOrigin><AllowedMethod>GET</AllowedMethod></CORSRule>`), ""},
	{"full rule", corsDoc(`<CORSRule><ID>r1</ID><AllowedOrigin>https://*.example.com</AllowedOrigin><AllowedMethod>PUT</AllowedMethod><AllowedMethod>POST</AllowedMethod><AllowedHeader>x-amz-*</AllowedHeader><AllowedHeader>content-type</AllowedHeader><ExposeHeader>ETag</ExposeHeader><MaxAgeSeconds>3000</MaxAgeSeconds></CORSRule>`), ""},
	{"namespace", `<CORSConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>HEAD</AllowedMethod></CORSRule></CORSConfiguration>`, ""},
	{"not xml", "<CORSConfiguration", "MalformedXML"},
	{"other root", `<Tagging><CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod></CORSRule></Tagging>`, "MalformedXML"},
	{"no rule", corsDoc(), "MalformedXML"},
	{"no origin", corsDoc(`<CORSRule><AllowedMethod>GET</AllowedMethod></CORSRule>`), "MalformedXML"},
	{"no method", corsDoc(`<CORSRule><AllowedOrigin>*</AllowedOrigin></CORSRule>`), "MalformedXML"},
	{"101 rules", corsDoc(strings.Repeat(`<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod></CORSRule>`, 101)), "MalformedXML"},
	{"100 rules", corsDoc(strings.Repeat(`<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod></CORSRule>`, 100)), ""},
	{"bad method", corsDoc(`<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>PATCH</AllowedMethod></CORSRule>`), "InvalidRequest"},
	{"lower-case method", corsDoc(`<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>get</AllowedMethod></CORSRule>`), "InvalidRequest"},
	{"two origin wildcards", corsDoc(`<CORSRule><AllowedOrigin>http://*.*.example</AllowedOrigin><AllowedMethod>GET</AllowedMethod></CORSRule>`), "InvalidRequest"},
	{"two header wildcards", corsDoc(`<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod><AllowedHeader>x-*-*</AllowedHeader></CORSRule>`), "InvalidRequest"},
	{"expose wildcard", corsDoc(`<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod><ExposeHeader>*</ExposeHeader></CORSRule>`), "InvalidRequest"},
	{"long id", corsDoc(`<CORSRule><ID>` + strings.Repeat("i", 256) + `</ID><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod></CORSRule>`), "InvalidArgument"},
	{"max age not a number", corsDoc(`<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod><MaxAgeSeconds>soon</MaxAgeSeconds></CORSRule>`), "MalformedXML"},
	{"negative max age", corsDoc(`<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod><MaxAgeSeconds>-1</MaxAgeSeconds></CORSRule>`), "MalformedXML"},
}

func TestParseCORS(t *testing.T) {
	for _, c := range corsCases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseCORS([]byte(c.doc))
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
}

func TestCORSMatch(t *testing.T) {
	cfg, err := parseCORS([]byte(corsDoc(
		`<CORSRule><ID>writers</ID><AllowedOrigin>https://*.example.com</AllowedOrigin><AllowedMethod>PUT</AllowedMethod><AllowedMethod>POST</AllowedMethod><AllowedHeader>x-amz-*</AllowedHeader><AllowedHeader>Content-Type</AllowedHeader></CORSRule>`,
		`<CORSRule><ID>readers</ID><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod><AllowedMethod>HEAD</AllowedMethod></CORSRule>`,
		`<CORSRule><ID>exact</ID><AllowedOrigin>http://app.test</AllowedOrigin><AllowedMethod>DELETE</AllowedMethod><AllowedHeader>*</AllowedHeader></CORSRule>`)))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		origin, method string
		headers        []string
		id             string // "" no match
		wild           bool
	}{
		{"https://www.example.com", "PUT", []string{"x-amz-meta-a", "content-type"}, "writers", false},
		{"https://.example.com", "POST", nil, "writers", false},
		{"https://example.com", "PUT", nil, "", false},
		{"http://www.example.com", "PUT", nil, "", false},
		{"https://www.example.com", "PUT", []string{"authorization"}, "", false},
		{"https://www.example.com", "GET", nil, "readers", true},
		{"http://elsewhere", "HEAD", []string{"range"}, "", false},
		{"http://elsewhere", "GET", nil, "readers", true},
		{"http://app.test", "DELETE", []string{"x-anything", "range"}, "exact", false},
		{"http://app.test:80", "DELETE", nil, "", false},
		{"HTTP://APP.TEST", "DELETE", nil, "", false},
		{"http://app.test", "PATCH", nil, "", false},
	} {
		rl, wild := cfg.match(c.origin, c.method, c.headers)
		got := ""
		if rl != nil {
			got = rl.ID
		}
		if got != c.id || wild != c.wild {
			t.Errorf("%s %s %v: rule %q wild %v, want %q %v", c.origin, c.method, c.headers, got, wild, c.id, c.wild)
		}
	}
}

// FuzzCORS: no panic; an accepted configuration re-encodes to one that parses the same, and
// matching never panics.
func FuzzCORS(f *testing.F) {
	for _, c := range corsCases {
		f.Add([]byte(c.doc), "http://a.example", "GET", "x-amz-date")
	}
	f.Fuzz(func(t *testing.T, doc []byte, origin, method, header string) {
		cfg, err := parseCORS(doc)
		if err != nil {
			return
		}
		cfg.match(origin, method, []string{strings.ToLower(header)})
		cfg.Xmlns = xmlns
		out, err := xml.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseCORS(out)
		if err != nil || len(again.Rules) != len(cfg.Rules) {
			t.Fatalf("re-encoded %s: %v", out, err)
		}
	})
}
