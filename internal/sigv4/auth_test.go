package sigv4

import (
	"strings"
	"testing"
)

const sig64 = "fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024"

var authHeaderCases = []struct {
	name   string
	in     string
	cred   string
	signed string
	code   string // "" if valid
}{
	{name: "aws example", in: "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;range;x-amz-date, Signature=" + sig64,
		cred: "AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request", signed: "host;range;x-amz-date"},
	{name: "no spaces", in: "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request,SignedHeaders=host,Signature=" + sig64,
		cred: "AK/20130524/us-east-1/s3/aws4_request", signed: "host"},
	{name: "reordered", in: "AWS4-HMAC-SHA256 Signature=" + sig64 + ", SignedHeaders=host;x-amz-date, Credential=AK/20130524/eu-west-1/s3/aws4_request",
		cred: "AK/20130524/eu-west-1/s3/aws4_request", signed: "host;x-amz-date"},
	{name: "extra white space", in: "  AWS4-HMAC-SHA256   Credential=AK/20130524/r/s3/aws4_request ,\tSignedHeaders=host ,  Signature=" + strings.ToUpper(sig64) + "  ",
		cred: "AK/20130524/r/s3/aws4_request", signed: "host"},
	{name: "spaces only", in: "AWS4-HMAC-SHA256 Credential=AK/20130524/r/s3/aws4_request SignedHeaders=host Signature=" + sig64,
		cred: "AK/20130524/r/s3/aws4_request", signed: "host"},
	{name: "lowercase keys", in: "AWS4-HMAC-SHA256 credential=AK/20130524/r/s3/aws4_request, signedheaders=host, signature=" + sig64,
		cred: "AK/20130524/r/s3/aws4_request", signed: "host"},
	{name: "empty", in: "", code: CodeAuthorizationHeaderMalformed},
	{name: "algorithm only", in: "AWS4-HMAC-SHA256", code: CodeAuthorizationHeaderMalformed},
	{name: "glued", in: "AWS4-HMAC-SHA256Credential=AK/20130524/r/s3/aws4_request,SignedHeaders=host,Signature=" + sig64, code: CodeAuthorizationHeaderMalformed},
	{name: "other algorithm", in: "AWS4-HMAC-SHA512 Credential=AK/20130524/r/s3/aws4_request,SignedHeaders=host,Signature=" + sig64, code: CodeAuthorizationHeaderMalformed},
	{name: "sigv2", in: "AWS AKIAIOSFODNN7EXAMPLE:frJIUN8DYpKDtOLCwo//yllqDzg=", code: CodeInvalidRequest},
	{name: "sigv4a", in: "AWS4-ECDSA-P256-SHA256 Credential=AK/20130524/s3/aws4_request, SignedHeaders=host, Signature=00", code: CodeInvalidRequest},
	{name: "missing credential", in: "AWS4-HMAC-SHA256 SignedHeaders=host, Signature=" + sig64, code: CodeAuthorizationHeaderMalformed},
	{name: "missing signed headers", in: "AWS4-HMAC-SHA256 Credential=AK/20130524/r/s3/aws4_request, Signature=" + sig64, code: CodeAuthorizationHeaderMalformed},
	{name: "missing signature", in: "AWS4-HMAC-SHA256 Credential=AK/20130524/r/s3/aws4_request, SignedHeaders=host", code: CodeAuthorizationHeaderMalformed},
	{name: "duplicate", in: "AWS4-HMAC-SHA256 Credential=AK/20130524/r/s3/aws4_request, Credential=AK/20130524/r/s3/aws4_request, SignedHeaders=host, Signature=" + sig64, code: CodeAuthorizationHeaderMalformed},
	{name: "unknown component", in: "AWS4-HMAC-SHA256 Credential=AK/20130524/r/s3/aws4_request, SignedHeaders=host, Signature=" + sig64 + ", Foo=bar", code: CodeAuthorizationHeaderMalformed},
	{name: "no equals", in: "AWS4-HMAC-SHA256 Credential, SignedHeaders=host, Signature=" + sig64, code: CodeAuthorizationHeaderMalformed},
	{name: "short signature", in: "AWS4-HMAC-SHA256 Credential=AK/20130524/r/s3/aws4_request, SignedHeaders=host, Signature=" + sig64[1:], code: CodeAuthorizationHeaderMalformed},
	{name: "non-hex signature", in: "AWS4-HMAC-SHA256 Credential=AK/20130524/r/s3/aws4_request, SignedHeaders=host, Signature=" + strings.Repeat("g", 64), code: CodeAuthorizationHeaderMalformed},
	{name: "empty signed header", in: "AWS4-HMAC-SHA256 Credential=AK/20130524/r/s3/aws4_request, SignedHeaders=host;;x, Signature=" + sig64, code: CodeAuthorizationHeaderMalformed},
	{name: "empty signed headers", in: "AWS4-HMAC-SHA256 Credential=AK/20130524/r/s3/aws4_request, SignedHeaders=, Signature=" + sig64, code: CodeAuthorizationHeaderMalformed},
	{name: "bad signed header", in: "AWS4-HMAC-SHA256 Credential=AK/20130524/r/s3/aws4_request, SignedHeaders=host;a\"b, Signature=" + sig64, code: CodeAuthorizationHeaderMalformed},
}

func TestParseAuthorization(t *testing.T) {
	for _, tt := range authHeaderCases {
		t.Run(tt.name, func(t *testing.T) {
			a, err := parseAuthorization(tt.in)
			if tt.code != "" {
				if err == nil {
					t.Fatalf("parsed as %+v", a)
				}
				wantCode(t, err, tt.code)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.credential != tt.cred || a.signedHeaders != tt.signed {
				t.Errorf("got %q %q", a.credential, a.signedHeaders)
			}
			if a.signature[0] != 0xfe || a.signature[31] != 0x24 {
				t.Errorf("signature %x", a.signature)
			}
		})
	}
}

func TestParseCredential(t *testing.T) {
	tests := []struct {
		in                           string
		accessKey, scope, date, regn string
		ok                           bool
	}{
		{"AK/20130524/us-east-1/s3/aws4_request", "AK", "20130524/us-east-1/s3/aws4_request", "20130524", "us-east-1", true},
		{"A/K/20130524/r/s3/aws4_request", "A/K", "20130524/r/s3/aws4_request", "20130524", "r", true},
		{"/20130524/r/s3/aws4_request", "", "", "", "", false},
		{"AK/20130524//s3/aws4_request", "", "", "", "", false},
		{"AK/2013052/r/s3/aws4_request", "", "", "", "", false},
		{"AK/2013052x/r/s3/aws4_request", "", "", "", "", false},
		{"AK/20130524/r/ec2/aws4_request", "", "", "", "", false},
		{"AK/20130524/r/s3/aws4_requests", "", "", "", "", false},
		{"AK/20130524/r/s3", "", "", "", "", false},
		{"AK/20130524/r g/s3/aws4_request", "", "", "", "", false},
		{"", "", "", "", "", false},
	}
	for _, tt := range tests {
		c, msg := parseCredential(tt.in)
		if ok := msg == ""; ok != tt.ok {
			t.Errorf("parseCredential(%q): %q", tt.in, msg)
			continue
		}
		if tt.ok && (c.accessKey != tt.accessKey || c.scope != tt.scope || c.date != tt.date || c.region != tt.regn) {
			t.Errorf("parseCredential(%q) = %+v", tt.in, c)
		}
	}
}

func FuzzParseAuthorization(f *testing.F) {
	for _, tt := range authHeaderCases {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := parseAuthorization(s)
		if err != nil {
			if err.Code == "" || err.Status == 0 {
				t.Fatalf("incomplete error %+v", err)
			}
			return
		}
		if a.credential == "" || a.signedHeaders == "" || checkSignedHeaders(a.signedHeaders) != "" {
			t.Fatalf("accepted %q as %+v", s, a)
		}
		if strings.ContainsAny(a.credential+a.signedHeaders, ", \t") {
			t.Fatalf("separator in a component: %+v", a)
		}
		c, msg := parseCredential(a.credential)
		if msg == "" && (c.accessKey == "" || len(c.date) != 8 || c.region == "" ||
			c.accessKey+"/"+c.scope != a.credential) {
			t.Fatalf("credential %q parsed as %+v", a.credential, c)
		}
	})
}
