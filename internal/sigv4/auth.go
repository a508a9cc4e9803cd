package sigv4

import "strings"

// authorization is a parsed Authorization header.
type authorization struct {
	credential    string // AKID/date/region/service/aws4_request
	signedHeaders string // semicolon-separated lowercase header names
	signature     [32]byte
}

// parseAuthorization parses the value of an Authorization header of the form
//
//	AWS4-HMAC-SHA256 Credential=AKID/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature=<64 hex>
//
// The three components may come in any order, separated by commas and/or
// white space. Errors are *Error values.
func parseAuthorization(h string) (authorization, *Error) {
	var a authorization
	h = strings.TrimLeft(h, " \t")
	rest, ok := strings.CutPrefix(h, algorithm)
	if !ok || rest != "" && !isSep(rest[0]) {
		if scheme, _, _ := strings.Cut(h, " "); scheme == "AWS" || scheme == "AWS4-ECDSA-P256-SHA256" {
			return a, errUnsupported()
		}
		return a, errMalformed("the authorization header requires the AWS4-HMAC-SHA256 algorithm.")
	}
	var sig string
	var seen [3]bool
	for rest != "" {
		// Skip separators, then take a component up to the next one.
		i := 0
		for i < len(rest) && isSep(rest[i]) {
			i++
		}
		rest = rest[i:]
		if rest == "" {
			break
		}
		j := 0
		for j < len(rest) && !isSep(rest[j]) {
			j++
		}
		field := rest[:j]
		rest = rest[j:]

		k, val, ok := strings.Cut(field, "=")
		if !ok {
			return a, errMalformed("the authorization component \"" + field + "\" is malformed.")
		}
		var idx int
		switch {
		case strings.EqualFold(k, "Credential"):
			idx = 0
			a.credential = val
		case strings.EqualFold(k, "SignedHeaders"):
			idx = 1
			a.signedHeaders = val
		case strings.EqualFold(k, "Signature"):
			idx = 2
			sig = val
		default:
			return a, errMalformed("the authorization component \"" + field + "\" is malformed.")
		}
		if seen[idx] {
			return a, errMalformed("the authorization component \"" + k + "\" is given more than once.")
		}
		seen[idx] = true
	}
	switch {
	case !seen[0] || a.credential == "":
		return a, errMalformed("the authorization header requires a Credential.")
	case !seen[1]:
		return a, errMalformed("the authorization header requires SignedHeaders.")
	case !seen[2]:
		return a, errMalformed("the authorization header requires a Signature.")
	}
	if len(sig) != 64 || !isHex(sig) {
		return a, errMalformed("the Signature must be 64 hexadecimal digits.")
	}
	decodeHex(a.signature[:], sig)
	if msg := checkSignedHeaders(a.signedHeaders); msg != "" {
		return a, errMalformed(msg)
	}
	return a, nil
}

func isSep(c byte) bool { return c == ',' || c == ' ' || c == '\t' }

// checkSignedHeaders reports what is wrong with a SignedHeaders list, or "".
func checkSignedHeaders(s string) string {
	if s == "" {
		return "SignedHeaders is empty."
	}
	for name := range strings.SplitSeq(s, ";") {
		if name == "" {
			return "SignedHeaders has an empty header name."
		}
		for i := 0; i < len(name); i++ {
			if !isTokenChar(name[i]) {
				return "SignedHeaders has an invalid header name."
			}
		}
	}
	return ""
}

// isTokenChar reports whether c may appear in an HTTP header name (RFC 9110 tchar).
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// credential is a parsed credential: AKID/date/region/service/aws4_request.
type credential struct {
	accessKey string
	scope     string // everything after the access key and its slash
	date      string
	region    string
}

// parseCredential parses a credential string. The access key is everything
// before the last four slash-separated parts. It returns a message describing
// the problem, or "".
func parseCredential(c string) (credential, string) {
	const form = "the Credential is mal-formed; expecting \"<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request\"."
	var cr credential
	var parts [4]string // date, region, service, terminator
	rest := c
	for i := 3; i >= 0; i-- {
		j := strings.LastIndexByte(rest, '/')
		if j < 0 {
			return cr, form
		}
		parts[i] = rest[j+1:]
		rest = rest[:j]
	}
	cr.accessKey = rest
	cr.scope = c[len(rest)+1:]
	cr.date, cr.region = parts[0], parts[1]
	switch {
	case cr.accessKey == "" || cr.region == "":
		return cr, form
	case len(cr.date) != 8 || !isDigits(cr.date):
		return cr, "invalid credential date \"" + cr.date + "\"."
	case parts[2] != service:
		return cr, "Credential should be scoped to correct service: 's3'."
	case parts[3] != terminator:
		return cr, "Credential should be scoped with a valid terminator: 'aws4_request', not '" + parts[3] + "'."
	}
	for i := 0; i < len(cr.region); i++ {
		if !isTokenChar(cr.region[i]) {
			return cr, form
		}
	}
	return cr, ""
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
