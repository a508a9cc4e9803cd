package sigv4

import (
	"errors"
	"testing"
	"time"
)

func TestVerifyPOST(t *testing.T) {
	const ak, sk = "AKIDPOST", "secretPOST"
	v := &Verifier{Lookup: func(k string) (string, bool) { return sk, k == ak }}
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	policy := "eyJleHBpcmF0aW9uIjoiMjAyNi0xMi0wMVQwMDowMDowMFoiLCJjb25kaXRpb25zIjpbXX0="
	good := SignPOST(policy, ak, sk, "eu-west-1", now)
	goodV2 := SignPOSTv2(policy, ak, sk)
	edit := func(a PostAuth, f func(*PostAuth)) PostAuth { f(&a); return a }
	cases := []struct {
		name string
		auth PostAuth
		code string
	}{
		{"v4", good, ""},
		{"v2", goodV2, ""},
		{"anonymous", PostAuth{Policy: policy}, CodeAccessDenied},
		{"v4 no signature", edit(good, func(a *PostAuth) { a.Signature = "" }), CodeInvalidArgument},
		{"v4 no policy", edit(good, func(a *PostAuth) { a.Policy = "" }), CodeInvalidArgument},
		{"v4 other algorithm", edit(good, func(a *PostAuth) { a.Algorithm = "AWS4-ECDSA-P256-SHA256" }), CodeInvalidArgument},
		{"v4 bad credential", edit(good, func(a *PostAuth) { a.Credential = "AKIDPOST/20261125/eu-west-1/ec2/aws4_request" }), CodeInvalidArgument},
		{"v4 date not the scope's", edit(good, func(a *PostAuth) { a.Date = "20261124T120000Z" }), CodeInvalidArgument},
		{"v4 bad date", edit(good, func(a *PostAuth) { a.Date = "2026-11-25" }), CodeInvalidArgument},
		{"v4 unknown key", SignPOST(policy, "NOPE", sk, "us-east-1", now), CodeInvalidAccessKeyID},
		{"v4 wrong secret", SignPOST(policy, ak, "wrong", "us-east-1", now), CodeSignatureDoesNotMatch},
		{"v4 other policy", edit(good, func(a *PostAuth) { a.Policy = "e30=" }), CodeSignatureDoesNotMatch},
		{"v4 short signature", edit(good, func(a *PostAuth) { a.Signature = "abcd" }), CodeSignatureDoesNotMatch},
		{"v2 no signature", edit(goodV2, func(a *PostAuth) { a.SignatureV2 = "" }), CodeInvalidArgument},
		{"v2 unknown key", SignPOSTv2(policy, "NOPE", sk), CodeInvalidAccessKeyID},
		{"v2 wrong secret", SignPOSTv2(policy, ak, "wrong"), CodeSignatureDoesNotMatch},
		{"v2 not base64", edit(goodV2, func(a *PostAuth) { a.SignatureV2 = "!!" }), CodeSignatureDoesNotMatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for range 2 { // the second time with the signing key cached
				got, err := v.VerifyPOST(c.auth)
				if c.code == "" {
					if err != nil || got != ak {
						t.Fatalf("got %q, %v", got, err)
					}
					continue
				}
				var se *Error
				if !errors.As(err, &se) || se.Code != c.code {
					t.Fatalf("want %s, got %v", c.code, err)
				}
			}
		})
	}
}
