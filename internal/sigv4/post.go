package sigv4

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"time"
)

// Browser-based uploads (S3 POST Object) are signed differently from other requests: the
// string to sign is the base64-encoded policy document as the form carries it, nothing of
// the HTTP request. Signature Version 4 signs it with the usual signing key of the
// credential scope (hex signature); Version 2 with HMAC-SHA1 of the secret (base64).

// PostAuth holds the authentication fields of a POST upload form, as sent. A form uses
// one of the two versions: Algorithm, Credential, Date and Signature (Version 4), or
// AccessKeyID and SignatureV2 (Version 2).
type PostAuth struct {
	// Policy is the base64-encoded policy document (the "policy" field): the string to sign.
	Policy string

	Algorithm  string // x-amz-algorithm: AWS4-HMAC-SHA256
	Credential string // x-amz-credential: AKID/YYYYMMDD/region/s3/aws4_request
	Date       string // x-amz-date: 20060102T150405Z, whose date must be the credential's
	Signature  string // x-amz-signature: 64 hex digits

	AccessKeyID string // AWSAccessKeyId
	SignatureV2 string // signature: base64 HMAC-SHA1 of Policy
}

// V4 reports whether the form uses Signature Version 4 (any of its fields is present).
func (a *PostAuth) V4() bool {
	return a.Algorithm != "" || a.Credential != "" || a.Date != "" || a.Signature != ""
}

// V2 reports whether the form uses Signature Version 2 (any of its fields is present).
func (a *PostAuth) V2() bool { return a.AccessKeyID != "" || a.SignatureV2 != "" }

func errPostField(name string) *Error {
	return newError(CodeInvalidArgument, http.StatusBadRequest,
		"Bucket POST must contain a field named '"+name+"'.  If it is specified, please check the order of the fields.")
}

// VerifyPOST checks the signature of a POST upload form and returns the access key that
// signed it. It checks only the signature: the caller checks the policy (its expiration
// and conditions), which the signature makes trustworthy. Errors are *Error values:
// InvalidArgument for a missing or malformed field, InvalidAccessKeyId, SignatureDoesNotMatch,
// AccessDenied for a form with neither version's fields.
func (v *Verifier) VerifyPOST(a PostAuth) (accessKey string, err error) {
	switch {
	case a.V4():
		return v.verifyPOSTv4(a)
	case a.V2():
		return v.verifyPOSTv2(a)
	}
	return "", newError(CodeAccessDenied, http.StatusForbidden, "Access Denied. Anonymous access is not supported.")
}

func (v *Verifier) verifyPOSTv4(a PostAuth) (string, error) {
	for _, f := range [...]struct{ name, v string }{
		{"x-amz-algorithm", a.Algorithm}, {"x-amz-credential", a.Credential},
		{"x-amz-date", a.Date}, {"x-amz-signature", a.Signature}, {"policy", a.Policy},
	} {
		if f.v == "" {
			return "", errPostField(f.name)
		}
	}
	if a.Algorithm != algorithm {
		return "", newError(CodeInvalidArgument, http.StatusBadRequest, "x-amz-algorithm only supports \""+algorithm+"\"")
	}
	cred, msg := parseCredential(a.Credential)
	if msg != "" {
		return "", newError(CodeInvalidArgument, http.StatusBadRequest, "Invalid x-amz-credential: "+msg)
	}
	if _, ok := parseAmzDate(a.Date); !ok {
		return "", newError(CodeInvalidArgument, http.StatusBadRequest, "Invalid x-amz-date \""+a.Date+"\": expecting the form 20060102T150405Z.")
	}
	if a.Date[:8] != cred.date {
		return "", newError(CodeInvalidArgument, http.StatusBadRequest,
			"Invalid credential date \""+cred.date+"\". This date is not the same as X-Amz-Date: \""+a.Date[:8]+"\".")
	}
	secret, ok := v.Lookup(cred.accessKey)
	if !ok {
		return "", newError(CodeInvalidAccessKeyID, http.StatusForbidden, "The AWS Access Key Id you provided does not exist in our records.")
	}
	if len(a.Signature) != 64 || !isHex(a.Signature) {
		return "", errSignature()
	}
	var want [32]byte
	decodeHex(want[:], a.Signature)
	key, cached := v.keys.get(cred.accessKey, secret, cred.date, cred.region)
	got := hmacSHA256(key[:], []byte(a.Policy))
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		return "", errSignature()
	}
	if !cached {
		v.keys.put(cred.accessKey, secret, cred.date, cred.region, key)
	}
	return cred.accessKey, nil
}

func (v *Verifier) verifyPOSTv2(a PostAuth) (string, error) {
	for _, f := range [...]struct{ name, v string }{
		{"AWSAccessKeyId", a.AccessKeyID}, {"signature", a.SignatureV2}, {"policy", a.Policy},
	} {
		if f.v == "" {
			return "", errPostField(f.name)
		}
	}
	secret, ok := v.Lookup(a.AccessKeyID)
	if !ok {
		return "", newError(CodeInvalidAccessKeyID, http.StatusForbidden, "The AWS Access Key Id you provided does not exist in our records.")
	}
	want, err := base64.StdEncoding.DecodeString(a.SignatureV2)
	if err != nil {
		return "", errSignature()
	}
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(a.Policy))
	if subtle.ConstantTimeCompare(m.Sum(nil), want) != 1 {
		return "", errSignature()
	}
	return a.AccessKeyID, nil
}

// SignPOST fills in the Signature Version 4 fields of a POST form for policy (base64), as
// a client presigning an upload form would: for tests and tools.
func SignPOST(policy, accessKey, secret, region string, now time.Time) PostAuth {
	amzDate := now.UTC().Format(timeFormat)
	key := deriveKey(secret, amzDate[:8], region)
	sig := hmacSHA256(key[:], []byte(policy))
	return PostAuth{
		Policy:     policy,
		Algorithm:  algorithm,
		Credential: accessKey + "/" + amzDate[:8] + "/" + region + "/" + service + "/" + terminator,
		Date:       amzDate,
		Signature:  hex.EncodeToString(sig[:]),
	}
}

// SignPOSTv2 fills in the Signature Version 2 fields of a POST form for policy (base64).
func SignPOSTv2(policy, accessKey, secret string) PostAuth {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(policy))
	return PostAuth{Policy: policy, AccessKeyID: accessKey, SignatureV2: base64.StdEncoding.EncodeToString(m.Sum(nil))}
}
