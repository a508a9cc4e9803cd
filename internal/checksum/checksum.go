// Package checksum implements the S3 "flexible checksums": the CRC32, CRC32C,
// CRC64NVME, SHA1 and SHA256 digests a client may attach to an upload, either
// as an x-amz-checksum-<algorithm> request header or as a trailing header of an
// aws-chunked body.
//
// The package knows the algorithms, their header names and the base64 form of
// their digests, and it finds in a request's headers which checksum the client
// declared. Comparing the declared value with the digest of the received bytes is
// left to the caller, which answers a mismatch with S3's BadDigest.
package checksum

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"hash/crc32"
	"net/http"
	"strings"

	"github.com/minio/crc64nvme"
)

// Algorithm names a checksum algorithm as S3 spells it, for example in the
// x-amz-sdk-checksum-algorithm header and in XML responses.
type Algorithm string

// The algorithms S3 supports for flexible checksums.
const (
	CRC32     Algorithm = "CRC32"     // CRC-32 (IEEE polynomial), 4 bytes
	CRC32C    Algorithm = "CRC32C"    // CRC-32C (Castagnoli polynomial), 4 bytes
	CRC64NVME Algorithm = "CRC64NVME" // CRC-64/NVME, 8 bytes
	SHA1      Algorithm = "SHA1"      // SHA-1, 20 bytes
	SHA256    Algorithm = "SHA256"    // SHA-256, 32 bytes
)

// Header names, in lowercase canonical form.
const (
	// HeaderPrefix begins the name of every checksum value header.
	HeaderPrefix = "x-amz-checksum-"
	// HeaderTrailer names the trailing headers an aws-chunked body will carry.
	HeaderTrailer = "x-amz-trailer"
	// HeaderSDKAlgorithm announces the algorithm an SDK uses for the request.
	HeaderSDKAlgorithm = "x-amz-sdk-checksum-algorithm"
)

// Algorithms lists every supported algorithm.
func Algorithms() []Algorithm {
	return []Algorithm{CRC32, CRC32C, CRC64NVME, SHA1, SHA256}
}

// ParseAlgorithm returns the algorithm named s, ignoring case.
// It reports false if s names no supported algorithm.
func ParseAlgorithm(s string) (Algorithm, bool) {
	switch {
	case strings.EqualFold(s, string(CRC32)):
		return CRC32, true
	case strings.EqualFold(s, string(CRC32C)):
		return CRC32C, true
	case strings.EqualFold(s, string(CRC64NVME)):
		return CRC64NVME, true
	case strings.EqualFold(s, string(SHA1)):
		return SHA1, true
	case strings.EqualFold(s, string(SHA256)):
		return SHA256, true
	}
	return "", false
}

// Valid reports whether a is one of the supported algorithms.
func (a Algorithm) Valid() bool {
	return a.Size() > 0
}

// Size returns the length in bytes of a's digest, or 0 if a is not valid.
func (a Algorithm) Size() int {
	switch a {
	case CRC32, CRC32C:
		return 4
	case CRC64NVME:
		return 8
	case SHA1:
		return sha1.Size
	case SHA256:
		return sha256.Size
	}
	return 0
}

// HeaderName returns the name of the header carrying a's value, in lowercase,
// for example "x-amz-checksum-crc32c". It returns "" if a is not valid.
func (a Algorithm) HeaderName() string {
	switch a {
	case CRC32:
		return "x-amz-checksum-crc32"
	case CRC32C:
		return "x-amz-checksum-crc32c"
	case CRC64NVME:
		return "x-amz-checksum-crc64nvme"
	case SHA1:
		return "x-amz-checksum-sha1"
	case SHA256:
		return "x-amz-checksum-sha256"
	}
	return ""
}

// New returns a new hash computing a's digest. Its Sum is the digest in the
// byte order S3 encodes (big-endian for the CRCs). New returns nil if a is not
// valid.
func (a Algorithm) New() hash.Hash {
	switch a {
	case CRC32:
		return crc32.NewIEEE()
	case CRC32C:
		// MakeTable returns a table built once by the standard library.
		return crc32.New(crc32.MakeTable(crc32.Castagnoli))
	case CRC64NVME:
		return crc64nvme.New()
	case SHA1:
		return sha1.New()
	case SHA256:
		return sha256.New()
	}
	return nil
}

// ValidValue reports whether s is the standard (padded) base64 encoding of a
// digest of a's size, in canonical form (unused bits zero).
func (a Algorithm) ValidValue(s string) bool {
	var buf [sha256.Size]byte
	n := a.Size()
	return n > 0 && decode(buf[:n], s)
}

// decode decodes the canonical base64 encoding of exactly len(dst) bytes from
// s into dst, without allocating. It reports false if s is anything else.
func decode(dst []byte, s string) bool {
	const maxEnc = (sha256.Size + 2) / 3 * 4
	if len(dst) > sha256.Size || len(s) != base64.StdEncoding.EncodedLen(len(dst)) {
		return false
	}
	var src, enc [maxEnc]byte
	var out [sha256.Size + 3]byte // DecodedLen of the longest value
	copy(src[:], s)
	n, err := base64.StdEncoding.Decode(out[:], src[:len(s)])
	if err != nil || n != len(dst) {
		return false
	}
	// Reject encodings with non-zero padding bits, so that a valid value is
	// always equal to Encode of its digest.
	base64.StdEncoding.Encode(enc[:], out[:n])
	if string(enc[:len(s)]) != s {
		return false
	}
	copy(dst, out[:n])
	return true
}

// AlgorithmFromHeaderName returns the algorithm whose value header is h,
// ignoring case: "X-Amz-Checksum-Crc32c" gives CRC32C. It reports false for
// any other header, including x-amz-checksum-type, x-amz-checksum-mode and
// x-amz-checksum-algorithm.
func AlgorithmFromHeaderName(h string) (Algorithm, bool) {
	if len(h) <= len(HeaderPrefix) || !strings.EqualFold(h[:len(HeaderPrefix)], HeaderPrefix) {
		return "", false
	}
	return ParseAlgorithm(h[len(HeaderPrefix):])
}

// Encode returns the standard base64 encoding of sum, the form S3 uses in
// checksum headers and XML.
func Encode(sum []byte) string {
	return base64.StdEncoding.EncodeToString(sum)
}

// Matches reports whether value, a base64 checksum as a client sends it, is the
// encoding of sum. Unlike comparing with Encode(sum) it does not allocate.
func Matches(value string, sum []byte) bool {
	var buf [sha256.Size]byte
	if len(sum) > len(buf) {
		return false
	}
	return decode(buf[:len(sum)], value) && string(buf[:len(sum)]) == string(sum)
}

// Expect is the checksum a client declared for a request body.
//
// Algo is "" when the client declared none. Otherwise exactly one of these holds:
// Value is set (the x-amz-checksum-<algo> header gave the value up front);
// Trailer is true (x-amz-trailer announced the value as a trailing header of an
// aws-chunked body); or neither, when only x-amz-sdk-checksum-algorithm named
// the algorithm and the server should compute and store that checksum without
// anything to compare it with.
type Expect struct {
	Algo    Algorithm
	Value   string // base64 digest; "" if it arrives in a trailer or not at all
	Trailer bool   // the value arrives as a trailing header named Algo.HeaderName()
}

// Error codes an *Error carries, as S3 names them.
const (
	CodeInvalidRequest  = "InvalidRequest"
	CodeInvalidArgument = "InvalidArgument"
)

// Error is a problem with the checksum headers of a request. Code is the S3
// error code to answer with (CodeInvalidRequest or CodeInvalidArgument, both
// HTTP 400) and Message the text S3 uses.
type Error struct {
	Code    string
	Message string
}

// Error returns the code and message.
func (e *Error) Error() string {
	return "checksum: " + e.Code + ": " + e.Message
}

const (
	msgMultiple     = "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed."
	msgSDKAlgorithm = "Value for x-amz-sdk-checksum-algorithm header is invalid."
	msgTrailer      = "The value specified in the x-amz-trailer header is not supported"
)

// FromHeaders finds the checksum the client declared in the request headers h.
//
// A value header x-amz-checksum-<algo>: <base64> declares the checksum and its
// value; more than one such header, or one with several values, is an error, as
// is a value that is not base64 of the right length. Alternatively the
// x-amz-trailer header may name x-amz-checksum-<algo>, in which case the value
// arrives later as a trailing header (Expect.Trailer). Other x-amz-checksum-*
// headers (x-amz-checksum-type, -mode, -algorithm) are ignored.
//
// x-amz-sdk-checksum-algorithm, if present, must name a supported algorithm and
// agree with the declared one; alone, it sets Expect.Algo with no value.
//
// Errors are of type *Error.
func FromHeaders(h http.Header) (Expect, error) {
	var (
		exp   Expect
		count int
		raw   []string
	)
	for k, vs := range h {
		a, ok := AlgorithmFromHeaderName(k)
		if !ok {
			continue
		}
		count += len(vs)
		exp.Algo, raw = a, vs
	}
	if count > 1 {
		return Expect{}, &Error{CodeInvalidRequest, msgMultiple}
	}
	if count == 1 {
		v := strings.TrimSpace(raw[0])
		if !exp.Algo.ValidValue(v) {
			return Expect{}, &Error{CodeInvalidRequest, "Value for " + exp.Algo.HeaderName() + " header is invalid."}
		}
		exp.Value = v
	}

	for _, line := range headerValues(h, "X-Amz-Trailer") {
		for name := range strings.SplitSeq(line, ",") {
			name = strings.TrimSpace(name)
			if name == "" {
				continue
			}
			a, ok := AlgorithmFromHeaderName(name)
			if !ok {
				return Expect{}, &Error{CodeInvalidArgument, msgTrailer}
			}
			if exp.Algo != "" {
				return Expect{}, &Error{CodeInvalidRequest, msgMultiple}
			}
			exp = Expect{Algo: a, Trailer: true}
		}
	}

	if vs := headerValues(h, "X-Amz-Sdk-Checksum-Algorithm"); len(vs) > 0 {
		a, ok := ParseAlgorithm(strings.TrimSpace(vs[0]))
		if len(vs) > 1 || !ok || (exp.Algo != "" && exp.Algo != a) {
			return Expect{}, &Error{CodeInvalidRequest, msgSDKAlgorithm}
		}
		exp.Algo = a
	}
	return exp, nil
}

// headerValues returns the values of the header whose canonical key is key,
// whether h holds it under that key (as net/http does) or under another case.
func headerValues(h http.Header, key string) []string {
	if vs, ok := h[key]; ok {
		return vs
	}
	for k, vs := range h {
		if len(k) == len(key) && strings.EqualFold(k, key) {
			return vs
		}
	}
	return nil
}
