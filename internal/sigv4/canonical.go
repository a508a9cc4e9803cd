package sigv4

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// queryParam is one decoded query parameter.
type queryParam struct {
	key, val string
}

// parseQuery appends the parameters of a raw query string to dst, decoded as
// url.ParseQuery does ('+' is a space). A component that does not decode is
// kept as sent. Empty components ("a&&b") are skipped. Components that need no
// decoding are not copied.
func parseQuery(dst []queryParam, raw string) []queryParam {
	for raw != "" {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		dst = append(dst, queryParam{unescapeQuery(k), unescapeQuery(v)})
	}
	return dst
}

func unescapeQuery(s string) string {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s
	}
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// unreserved reports whether c is left as is by URI encoding: A-Z a-z 0-9 - . _ ~
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// appendURIEncode appends s URI-encoded as SigV4 specifies: every byte but the
// unreserved characters as %XX with uppercase hex digits, and '/' too unless
// keepSlash.
func appendURIEncode(dst []byte, s string, keepSlash bool) []byte {
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c) || c == '/' && keepSlash {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&15])
	}
	return dst
}

// uriEncode returns s URI-encoded (slashes too), without copying if it needs
// no encoding.
func uriEncode(s string) string {
	for i := 0; i < len(s); i++ {
		if !unreserved(s[i]) {
			return string(appendURIEncode(make([]byte, 0, len(s)+16), s, false))
		}
	}
	return s
}

// appendCanonicalQuery appends the canonical query string: the encoded
// parameters sorted by name then value, joined with '&'. For presigned requests
// X-Amz-Signature is left out.
func appendCanonicalQuery(dst []byte, params []queryParam, presigned bool) []byte {
	var ea [16]queryParam
	enc := ea[:0]
	for _, p := range params {
		if presigned && p.key == "X-Amz-Signature" {
			continue
		}
		enc = append(enc, queryParam{uriEncode(p.key), uriEncode(p.val)})
	}
	slices.SortFunc(enc, compareParams)
	for i, p := range enc {
		if i > 0 {
			dst = append(dst, '&')
		}
		dst = append(dst, p.key...)
		dst = append(dst, '=')
		dst = append(dst, p.val...)
	}
	return dst
}

// appendCanonicalRequest appends the canonical request for r. path is the
// canonical URI if !encode, else the decoded path to encode.
func appendCanonicalRequest(dst []byte, r *http.Request, s *signed, params []queryParam, path string, encode bool) []byte {
	dst = append(dst, r.Method...)
	dst = append(dst, '\n')
	if encode {
		dst = appendURIEncode(dst, path, true)
	} else {
		dst = append(dst, path...)
	}
	dst = append(dst, '\n')
	dst = appendCanonicalQuery(dst, params, s.presigned)
	dst = append(dst, '\n')
	dst = appendCanonicalHeaders(dst, r, s.signedHeaders)
	dst = append(dst, '\n')
	dst = append(dst, s.signedHeaders...)
	dst = append(dst, '\n')
	dst = append(dst, s.payload...)
	return dst
}

// appendCanonicalHeaders appends "name:value\n" for each header named in the
// semicolon-separated signedHeaders, in that order. Values are trimmed, runs of
// spaces collapsed, and repeated headers joined with commas. host comes from
// r.Host; content-length and transfer-encoding, which net/http may take out of
// r.Header, from r.ContentLength and r.TransferEncoding.
func appendCanonicalHeaders(dst []byte, r *http.Request, signedHeaders string) []byte {
	for name := range strings.SplitSeq(signedHeaders, ";") {
		dst = append(dst, name...)
		dst = append(dst, ':')
		switch {
		case strings.EqualFold(name, "host"):
			host := r.Host
			if host == "" && r.URL != nil {
				host = r.URL.Host
			}
			dst = appendTrimmed(dst, host)
		default:
			vs, ok := lookupHeader(r.Header, name)
			if !ok {
				switch {
				case strings.EqualFold(name, "content-length") && r.ContentLength >= 0:
					dst = strconv.AppendInt(dst, r.ContentLength, 10)
				case strings.EqualFold(name, "transfer-encoding"):
					vs = r.TransferEncoding
				}
			}
			for i, v := range vs {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = appendTrimmed(dst, v)
			}
		}
		dst = append(dst, '\n')
	}
	return dst
}

// lookupHeader returns the values of the header with the given name, whatever
// its case, without allocating for names of up to 128 bytes.
func lookupHeader(h http.Header, name string) ([]string, bool) {
	var buf [128]byte
	if len(name) <= len(buf) {
		// Canonical MIME form: upper case after start and after '-'.
		upper := true
		for i := 0; i < len(name); i++ {
			c := name[i]
			if upper && 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			} else if !upper && 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			buf[i] = c
			upper = c == '-'
		}
		if vs, ok := h[string(buf[:len(name)])]; ok {
			return vs, true
		}
	}
	for k, vs := range h {
		if len(k) == len(name) && strings.EqualFold(k, name) {
			return vs, true
		}
	}
	return nil, false
}

// appendTrimmed appends v without leading and trailing white space and with
// each run of spaces replaced by one space.
func appendTrimmed(dst []byte, v string) []byte {
	v = strings.TrimSpace(v)
	for i := 0; i < len(v); i++ {
		if v[i] == ' ' && i > 0 && v[i-1] == ' ' {
			continue
		}
		dst = append(dst, v[i])
	}
	return dst
}

// appendStringToSign appends the string to sign for a canonical request.
func appendStringToSign(dst []byte, amzDate, scope string, canonicalRequest []byte) []byte {
	sum := sha256.Sum256(canonicalRequest)
	dst = append(dst, algorithm+"\n"...)
	dst = append(dst, amzDate...)
	dst = append(dst, '\n')
	dst = append(dst, scope...)
	dst = append(dst, '\n')
	return hex.AppendEncode(dst, sum[:])
}

// compareParams orders query parameters by name then value.
func compareParams(a, b queryParam) int {
	return cmp.Or(strings.Compare(a.key, b.key), strings.Compare(a.val, b.val))
}
