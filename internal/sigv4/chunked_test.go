package sigv4

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hmacRef is HMAC-SHA256 from the standard library, independent of hmacSHA256.
func hmacRef(key, msg []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return m.Sum(nil)
}

// refSigningKey derives a signing key with hmacRef, following the SigV4
// specification.
func refSigningKey(secret, date, region string) []byte {
	k := hmacRef([]byte("AWS4"+secret), []byte(date))
	k = hmacRef(k, []byte(region))
	k = hmacRef(k, []byte("s3"))
	return hmacRef(k, []byte("aws4_request"))
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// encoder writes aws-chunked bodies as the AWS documentation describes them.
type encoder struct {
	mode    string // one of the STREAMING-* payload hashes
	key     []byte
	amzDate string
	scope   string
	prev    string // previous signature, seeded with the request signature
}

func (e *encoder) signed() bool { return e.mode != StreamingUnsignedPayloadTrailer }

func (e *encoder) chunk(buf *bytes.Buffer, data []byte) {
	if !e.signed() {
		fmt.Fprintf(buf, "%x\r\n", len(data))
	} else {
		sts := "AWS4-HMAC-SHA256-PAYLOAD\n" + e.amzDate + "\n" + e.scope + "\n" + e.prev + "\n" +
			sha256Hex(nil) + "\n" + sha256Hex(data)
		e.prev = hex.EncodeToString(hmacRef(e.key, []byte(sts)))
		fmt.Fprintf(buf, "%x;chunk-signature=%s\r\n", len(data), e.prev)
	}
	if len(data) > 0 {
		buf.Write(data)
		buf.WriteString("\r\n")
	}
}

// encode encodes data in chunks of chunkSize followed by the final chunk and
// the trailers (name, value pairs, names in lowercase and sorted).
func (e *encoder) encode(data []byte, chunkSize int, trailers [][2]string) []byte {
	var buf bytes.Buffer
	for len(data) > 0 {
		n := min(chunkSize, len(data))
		e.chunk(&buf, data[:n])
		data = data[n:]
	}
	e.chunk(&buf, nil)
	var canon strings.Builder
	for _, t := range trailers {
		fmt.Fprintf(&buf, "%s:%s\r\n", t[0], t[1])
		fmt.Fprintf(&canon, "%s:%s\n", t[0], t[1])
	}
	if e.mode == StreamingPayloadTrailer {
		sts := "AWS4-HMAC-SHA256-TRAILER\n" + e.amzDate + "\n" + e.scope + "\n" + e.prev + "\n" +
			sha256Hex([]byte(canon.String()))
		fmt.Fprintf(&buf, "x-amz-trailer-signature:%s\r\n", hex.EncodeToString(hmacRef(e.key, []byte(sts))))
	}
	buf.WriteString("\r\n")
	return buf.Bytes()
}

func crc32cValue(data []byte) string {
	v := crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))
	return base64.StdEncoding.EncodeToString([]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func testData(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*131 + i>>10)
	}
	return b
}

// streamingRequest builds an aws-chunked PUT signed by the SDK and returns the
// server request with the original data.
func streamingRequest(t testing.TB, mode string, data []byte, chunkSize int, trailers [][2]string, decodedLen string) *http.Request {
	t.Helper()
	amzDate := testTime.Format(timeFormat)
	scope := amzDate[:8] + "/us-east-1/s3/aws4_request"
	enc := &encoder{mode: mode, key: refSigningKey(testSecret, amzDate[:8], "us-east-1"),
		amzDate: amzDate, scope: scope, prev: strings.Repeat("0", 64)}
	length := len(enc.encode(data, chunkSize, trailers))

	req, err := http.NewRequest("PUT", "http://localhost:9000/bucket/stream%20obj", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(length)
	req.Header.Set("Content-Encoding", "aws-chunked")
	req.Header.Set("X-Amz-Content-Sha256", mode)
	if decodedLen == "" {
		decodedLen = strconv.Itoa(len(data))
	}
	if decodedLen != "-" {
		req.Header.Set("X-Amz-Decoded-Content-Length", decodedLen)
	}
	if len(trailers) > 0 {
		var names []string
		for _, tr := range trailers {
			names = append(names, tr[0])
		}
		req.Header.Set("X-Amz-Trailer", strings.Join(names, ","))
	}
	if err := sdkSigner().SignHTTP(context.Background(), sdkCreds(), req, mode, "s3", "us-east-1", testTime); err != nil {
		t.Fatal(err)
	}
	authz := req.Header.Get("Authorization")
	enc.prev = authz[strings.LastIndex(authz, "=")+1:]
	body := enc.encode(data, chunkSize, trailers)
	req.Body = io.NopCloser(bytes.NewReader(body))
	return toServer(t, req)
}

func TestStreaming(t *testing.T) {
	modes := []string{StreamingPayload, StreamingPayloadTrailer, StreamingUnsignedPayloadTrailer}
	sizes := []struct{ data, chunk int }{
		{0, 65536}, {1, 65536}, {100, 1}, {65536, 65536}, {2*65536 + 17, 65536}, {100000, 8192}, {3 << 20, 1 << 20},
	}
	for _, mode := range modes {
		for _, sz := range sizes {
			for _, withTrailer := range []bool{false, true} {
				if withTrailer && mode == StreamingPayload {
					continue
				}
				name := fmt.Sprintf("%s/%d-%d/trailer=%v", mode, sz.data, sz.chunk, withTrailer)
				t.Run(name, func(t *testing.T) {
					data := testData(sz.data)
					var trailers [][2]string
					if withTrailer {
						trailers = [][2]string{{"x-amz-checksum-crc32c", crc32cValue(data)}}
					}
					sr := streamingRequest(t, mode, data, sz.chunk, trailers, "")
					res, err := newVerifier(testTime).Verify(sr)
					if err != nil {
						t.Fatal(err)
					}
					if !res.Streaming || res.DecodedLength != int64(len(data)) {
						t.Errorf("Streaming %v DecodedLength %d", res.Streaming, res.DecodedLength)
					}
					if res.Trailers() != nil {
						t.Errorf("trailers before EOF")
					}
					got, err := io.ReadAll(res.Body)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, data) {
						t.Fatalf("decoded %d bytes, want %d", len(got), len(data))
					}
					tr := res.Trailers()
					if withTrailer {
						if v := tr.Get("x-amz-checksum-crc32c"); v != trailers[0][1] {
							t.Errorf("trailer %q, want %q (%v)", v, trailers[0][1], tr)
						}
					} else if tr != nil {
						t.Errorf("unexpected trailers %v", tr)
					}
					if n, err := res.Body.Read(make([]byte, 10)); n != 0 || err != io.EOF {
						t.Errorf("read after EOF: %d, %v", n, err)
					}
					if err := res.Body.Close(); err != nil {
						t.Error(err)
					}
				})
			}
		}
	}
}

func TestStreamingNoDecodedLength(t *testing.T) {
	data := testData(1000)
	sr := streamingRequest(t, StreamingUnsignedPayloadTrailer, data, 300, nil, "-")
	res, err := newVerifier(testTime).Verify(sr)
	if err != nil {
		t.Fatal(err)
	}
	if res.DecodedLength != -1 {
		t.Errorf("DecodedLength %d", res.DecodedLength)
	}
	if got, err := io.ReadAll(res.Body); err != nil || !bytes.Equal(got, data) {
		t.Errorf("%d bytes, %v", len(got), err)
	}
	sr = streamingRequest(t, StreamingPayload, data, 300, nil, "x")
	_, err = newVerifier(testTime).Verify(sr)
	wantCode(t, err, CodeInvalidArgument)
}

// TestStreamingAWSExample checks the example of the S3 documentation
// "Signature Calculations for the Authorization Header: Transferring Payload in
// Multiple Chunks".
func TestStreamingAWSExample(t *testing.T) {
	head := "PUT /examplebucket/chunkObject.txt HTTP/1.1\r\n" +
		"Host: s3.amazonaws.com\r\n" +
		"x-amz-date: 20130524T000000Z\r\n" +
		"x-amz-storage-class: REDUCED_REDUNDANCY\r\n" +
		"Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class,Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9\r\n" +
		"x-amz-content-sha256: STREAMING-AWS4-HMAC-SHA256-PAYLOAD\r\n" +
		"Content-Encoding: aws-chunked\r\n" +
		"x-amz-decoded-content-length: 66560\r\n" +
		"Content-Length: 66824\r\n\r\n"
	body := "10000;chunk-signature=ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648\r\n" +
		strings.Repeat("a", 65536) + "\r\n" +
		"400;chunk-signature=0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497\r\n" +
		strings.Repeat("a", 1024) + "\r\n" +
		"0;chunk-signature=b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9\r\n\r\n"
	if len(body) != 66824 {
		t.Fatalf("body length %d", len(body))
	}
	r, err := http.ReadRequest(bufioReader(head + body))
	if err != nil {
		t.Fatal(err)
	}
	res, err := newVerifier(time.Date(2013, 5, 24, 0, 0, 0, 0, time.UTC)).Verify(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(res.Body)
	if err != nil || string(got) != strings.Repeat("a", 66560) {
		t.Fatalf("%d bytes, %v", len(got), err)
	}
}

// testChunkReader returns a reader of the given kind over body, signing state
// seeded as an encoder with newTestEncoder is.
func testChunkReader(body []byte, kind payloadType, expected int64, want []string) *chunkReader {
	c := newChunkReader(io.NopCloser(bytes.NewReader(body)), kind, expected, want)
	if kind != payloadUnsignedTrailer {
		var key, seed [32]byte
		copy(key[:], refSigningKey(testSecret, "20260314", "us-east-1"))
		seed[0] = 1
		c.setSigning(&key, "20260314T150926Z", "20260314/us-east-1/s3/aws4_request", &seed)
	}
	return c
}

func newTestEncoder(mode string) *encoder {
	seed := make([]byte, 32)
	seed[0] = 1
	return &encoder{mode: mode, key: refSigningKey(testSecret, "20260314", "us-east-1"),
		amzDate: "20260314T150926Z", scope: "20260314/us-east-1/s3/aws4_request", prev: hex.EncodeToString(seed)}
}

func kindOf(mode string) payloadType {
	k, _ := payloadKind(mode)
	return k
}

func TestChunkedErrors(t *testing.T) {
	data := testData(3000)
	crc := [][2]string{{"x-amz-checksum-crc32c", crc32cValue(data)}}
	enc := func(mode string, trailers [][2]string) []byte {
		return newTestEncoder(mode).encode(data, 1000, trailers)
	}
	signed := enc(StreamingPayload, nil)
	signedTr := enc(StreamingPayloadTrailer, crc)
	unsigned := enc(StreamingUnsignedPayloadTrailer, crc)
	replace := func(b []byte, old, new string) []byte {
		if !bytes.Contains(b, []byte(old)) {
			panic("no " + old)
		}
		return bytes.Replace(b, []byte(old), []byte(new), 1)
	}
	secondSig := func(b []byte) int { // offset of the second chunk's signature
		return bytes.Index(b[1:], []byte(";chunk-signature=")) + 1 + len(";chunk-signature=")
	}
	flip := func(b []byte, off int) []byte {
		b = bytes.Clone(b)
		if b[off] == '0' {
			b[off] = '1'
		} else {
			b[off] = '0'
		}
		return b
	}
	tests := []struct {
		name     string
		body     []byte
		mode     string
		expected int64
		want     []string
		code     string
		// maxGood is the most payload bytes the reader may return before failing
		// (for signed bodies: only verified chunks).
		maxGood int
	}{
		{name: "signed ok", body: signed, mode: StreamingPayload, expected: 3000},
		{name: "signed trailer ok", body: signedTr, mode: StreamingPayloadTrailer, expected: 3000, want: []string{"x-amz-checksum-crc32c"}},
		{name: "unsigned ok", body: unsigned, mode: StreamingUnsignedPayloadTrailer, expected: 3000, want: []string{"x-amz-checksum-crc32c"}},
		{name: "unsigned no trailer ok", body: []byte("3\r\nabc\r\n0\r\n\r\n"), mode: StreamingUnsignedPayloadTrailer, expected: 3},
		{name: "unsigned no final crlf ok", body: []byte("3\r\nabc\r\n0\r\n"), mode: StreamingUnsignedPayloadTrailer, expected: 3},
		{name: "unsigned extension ignored", body: []byte("3;foo=bar\r\nabc\r\n0\r\n\r\n"), mode: StreamingUnsignedPayloadTrailer, expected: 3},
		{name: "blank line before trailers ok", body: []byte("3\r\nabc\r\n0\r\n\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n"),
			mode: StreamingUnsignedPayloadTrailer, expected: 3, want: []string{"x-amz-checksum-crc32"}},
		{name: "trailer whitespace ok", body: []byte("3\r\nabc\r\n0\r\nx-amz-checksum-crc32 : AAAAAA== \r\n\r\n"),
			mode: StreamingUnsignedPayloadTrailer, expected: 3, want: []string{"x-amz-checksum-crc32"}},

		{name: "corrupt chunk signature", body: flip(signed, secondSig(signed)), mode: StreamingPayload, expected: 3000,
			code: CodeSignatureDoesNotMatch, maxGood: 1000},
		{name: "corrupt first signature", body: flip(signed, len("3e8;chunk-signature=")), mode: StreamingPayload, expected: 3000,
			code: CodeSignatureDoesNotMatch},
		{name: "corrupt data", body: flip(signed, bytes.Index(signed, []byte("\r\n"))+500), mode: StreamingPayload, expected: 3000,
			code: CodeSignatureDoesNotMatch},
		{name: "corrupt final signature", body: flip(signed, len(signed)-10), mode: StreamingPayload, expected: 3000,
			code: CodeSignatureDoesNotMatch, maxGood: 3000},
		{name: "reordered chunks", body: swapFirstChunks(signed), mode: StreamingPayload, expected: 3000, code: CodeSignatureDoesNotMatch},
		{name: "corrupt trailer signature", body: flip(signedTr, len(signedTr)-10), mode: StreamingPayloadTrailer, expected: 3000,
			want: []string{"x-amz-checksum-crc32c"}, code: CodeSignatureDoesNotMatch, maxGood: 3000},
		{name: "corrupt trailer value", body: replace(signedTr, crc[0][1], "AAAAAA=="), mode: StreamingPayloadTrailer, expected: 3000,
			want: []string{"x-amz-checksum-crc32c"}, code: CodeSignatureDoesNotMatch, maxGood: 3000},
		{name: "missing trailer signature", body: newTestEncoder(StreamingUnsignedPayloadTrailer).encode(data, 1000, crc),
			mode: StreamingPayloadTrailer, expected: 3000, code: CodeInvalidRequest},
		{name: "unsigned chunks in signed mode", body: unsigned, mode: StreamingPayload, code: CodeInvalidRequest},
		{name: "signed trailer in non-trailer mode", body: signedTr, mode: StreamingPayload, expected: 3000,
			code: CodeMalformedTrailerError, maxGood: 3000},
		{name: "unannounced trailer", body: unsigned, mode: StreamingUnsignedPayloadTrailer, expected: 3000,
			code: CodeMalformedTrailerError, maxGood: 3000},
		{name: "missing announced trailer", body: []byte("3\r\nabc\r\n0\r\n\r\n"), mode: StreamingUnsignedPayloadTrailer,
			want: []string{"x-amz-checksum-crc32"}, expected: 3, code: CodeMalformedTrailerError, maxGood: 3},
		{name: "duplicate trailer", body: []byte("0\r\nx-amz-checksum-crc32:AAAAAA==\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n"),
			mode: StreamingUnsignedPayloadTrailer, want: []string{"x-amz-checksum-crc32"}, expected: -1, code: CodeMalformedTrailerError},
		{name: "trailer without colon", body: []byte("0\r\nx-amz-checksum-crc32\r\n\r\n"),
			mode: StreamingUnsignedPayloadTrailer, want: []string{"x-amz-checksum-crc32"}, expected: -1, code: CodeMalformedTrailerError},
		{name: "trailer bare lf", body: []byte("0\r\nx-amz-checksum-crc32:AAAAAA==\n\r\n"),
			mode: StreamingUnsignedPayloadTrailer, want: []string{"x-amz-checksum-crc32"}, expected: -1, code: CodeMalformedTrailerError},
		{name: "trailers too long", body: []byte("0\r\n" + strings.Repeat("x-amz-meta-a:"+strings.Repeat("b", 1000)+"\r\n", 20) + "\r\n"),
			mode: StreamingUnsignedPayloadTrailer, expected: -1, code: CodeMalformedTrailerError},
		{name: "truncated in data", body: signed[:1500], mode: StreamingPayload, expected: 3000, code: CodeIncompleteBody, maxGood: 1000},
		{name: "truncated in header", body: signed[:bytes.Index(signed, []byte("\r\n"))-3], mode: StreamingPayload, expected: 3000, code: CodeIncompleteBody},
		{name: "truncated before final", body: signed[:bytes.LastIndex(signed, []byte("0;chunk"))], mode: StreamingPayload,
			expected: 3000, code: CodeIncompleteBody, maxGood: 3000},
		{name: "truncated unsigned", body: unsigned[:1500], mode: StreamingUnsignedPayloadTrailer, expected: 3000, code: CodeIncompleteBody, maxGood: 3000},
		{name: "truncated unsigned in trailer", body: unsigned[:len(unsigned)-6], mode: StreamingUnsignedPayloadTrailer,
			expected: 3000, want: []string{"x-amz-checksum-crc32c"}, code: CodeIncompleteBody, maxGood: 3000},
		{name: "truncated before data crlf", body: []byte("3\r\nabc"), mode: StreamingUnsignedPayloadTrailer, expected: -1, code: CodeIncompleteBody, maxGood: 3},
		{name: "empty body", body: nil, mode: StreamingUnsignedPayloadTrailer, expected: -1, code: CodeIncompleteBody},
		{name: "bad hex size", body: []byte("zz\r\nabc\r\n0\r\n\r\n"), mode: StreamingUnsignedPayloadTrailer, expected: -1, code: CodeInvalidRequest},
		{name: "negative size", body: []byte("-3\r\nabc\r\n0\r\n\r\n"), mode: StreamingUnsignedPayloadTrailer, expected: -1, code: CodeInvalidRequest},
		{name: "empty size", body: []byte(";chunk-signature=00\r\n"), mode: StreamingPayload, expected: -1, code: CodeInvalidRequest},
		{name: "huge size", body: []byte("fffffffffffffffff\r\nabc\r\n"), mode: StreamingUnsignedPayloadTrailer, expected: -1, code: CodeInvalidRequest},
		{name: "size too long for decoded length", body: []byte("ffffffffffffff\r\nabc\r\n"), mode: StreamingUnsignedPayloadTrailer, expected: 100, code: CodeIncompleteBody},
		{name: "oversize chunk", body: []byte("1000001;chunk-signature=" + strings.Repeat("0", 64) + "\r\nabc"), mode: StreamingPayload,
			expected: -1, code: CodeInvalidRequest},
		{name: "missing data crlf", body: []byte("3\r\nabcd\r\n0\r\n\r\n"), mode: StreamingUnsignedPayloadTrailer, expected: -1, code: CodeInvalidRequest, maxGood: 3},
		{name: "bare lf header", body: []byte("3\nabc\r\n0\r\n\r\n"), mode: StreamingUnsignedPayloadTrailer, expected: -1, code: CodeInvalidRequest},
		{name: "long header line", body: []byte(strings.Repeat("0", 5000) + "3\r\nabc\r\n0\r\n\r\n"), mode: StreamingUnsignedPayloadTrailer, expected: -1, code: CodeInvalidRequest},
		{name: "very long header line", body: bytes.Repeat([]byte("0"), 100000), mode: StreamingUnsignedPayloadTrailer, expected: -1, code: CodeInvalidRequest},
		{name: "short signature", body: replace(bytes.Clone(signed), ";chunk-signature=", ";chunk-signature=0"), mode: StreamingPayload, expected: 3000, code: CodeInvalidRequest},
		{name: "decoded length too small", body: signed, mode: StreamingPayload, expected: 2999, code: CodeIncompleteBody, maxGood: 2000},
		{name: "decoded length too large", body: signed, mode: StreamingPayload, expected: 3001, code: CodeIncompleteBody, maxGood: 3000},
		{name: "unsigned decoded length too small", body: unsigned, mode: StreamingUnsignedPayloadTrailer, expected: 2500,
			want: []string{"x-amz-checksum-crc32c"}, code: CodeIncompleteBody, maxGood: 2000},
		{name: "unsigned decoded length too large", body: unsigned, mode: StreamingUnsignedPayloadTrailer, expected: 3001,
			want: []string{"x-amz-checksum-crc32c"}, code: CodeIncompleteBody, maxGood: 3000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testChunkReader(tt.body, kindOf(tt.mode), tt.expected, tt.want)
			var got []byte
			buf := make([]byte, 700)
			var err error
			for {
				var n int
				n, err = c.Read(buf)
				got = append(got, buf[:n]...)
				if err != nil {
					break
				}
			}
			if tt.code == "" {
				if err != io.EOF {
					t.Fatalf("error %v", err)
				}
				return
			}
			wantCode(t, err, tt.code)
			if len(got) > tt.maxGood {
				t.Errorf("returned %d bytes before failing, at most %d allowed", len(got), tt.maxGood)
			}
			if c.trailerHeader() != nil {
				t.Errorf("trailers after an error")
			}
			// Sticky.
			if _, err2 := c.Read(buf); err2 != err {
				t.Errorf("second read: %v, want %v", err2, err)
			}
		})
	}
}

// swapFirstChunks swaps the first two chunks of an encoded body of 1000-byte
// chunks.
func swapFirstChunks(b []byte) []byte {
	frame := func(b []byte) int { return bytes.Index(b, []byte("\r\n")) + 2 + 1000 + 2 }
	n1 := frame(b)
	n2 := frame(b[n1:])
	out := append([]byte(nil), b[n1:n1+n2]...)
	out = append(out, b[:n1]...)
	return append(out, b[n1+n2:]...)
}

// errReader fails with a non-EOF error after its data.
type errReader struct {
	data []byte
	err  error
}

func (r *errReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestChunkedPassesThroughErrors(t *testing.T) {
	boom := errors.New("connection reset")
	for _, kind := range []payloadType{payloadSigned, payloadUnsignedTrailer} {
		c := newChunkReader(io.NopCloser(&errReader{[]byte("10;chunk-signature=" + strings.Repeat("0", 64) + "\r\nabc"), boom}), kind, -1, nil)
		if kind == payloadUnsignedTrailer {
			c = newChunkReader(io.NopCloser(&errReader{[]byte("10\r\nabc"), boom}), kind, -1, nil)
		} else {
			var key, seed [32]byte
			c.setSigning(&key, "20260314T150926Z", "scope", &seed)
		}
		_, err := io.ReadAll(c)
		if err != boom {
			t.Errorf("kind %d: error %v, want %v", kind, err, boom)
		}
	}
}

// TestChunkedMemory checks that a declared chunk size is not allocated before
// its bytes arrive.
func TestChunkedMemory(t *testing.T) {
	body := []byte("ffffff;chunk-signature=" + strings.Repeat("0", 64) + "\r\n" + strings.Repeat("x", 1000))
	c := testChunkReader(body, payloadSigned, -1, nil)
	_, err := io.ReadAll(c)
	wantCode(t, err, CodeIncompleteBody)
	if cap(c.buf) > 128<<10 {
		t.Errorf("buffer grew to %d bytes for 1000 bytes of data", cap(c.buf))
	}
}

func FuzzChunkedDecode(f *testing.F) {
	data := testData(300)
	crc := [][2]string{{"x-amz-checksum-crc32c", crc32cValue(data)}}
	f.Add(newTestEncoder(StreamingPayload).encode(data, 100, nil))
	f.Add(newTestEncoder(StreamingPayloadTrailer).encode(data, 128, crc))
	f.Add(newTestEncoder(StreamingUnsignedPayloadTrailer).encode(data, 64, crc))
	f.Add(newTestEncoder(StreamingUnsignedPayloadTrailer).encode(nil, 64, nil))
	f.Add([]byte("3\r\nabc\r\n0\r\n\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n"))
	f.Add([]byte("3;foo=bar\r\nabc\r\n0\r\nx-amz-checksum-crc32 : AAAAAA== \r\n"))
	f.Add([]byte("ffffffffffffff\r\nabc\r\n"))
	f.Add([]byte("1000001;chunk-signature=" + strings.Repeat("0", 64) + "\r\nabc"))
	want := []string{"x-amz-checksum-crc32c", "x-amz-checksum-crc32"}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, kind := range []payloadType{payloadUnsignedTrailer, payloadSigned, payloadSignedTrailer} {
			for _, expected := range []int64{-1, 300} {
				c := testChunkReader(body, kind, expected, want[:1])
				n, err := io.Copy(io.Discard, c)
				if n > int64(len(body)) {
					t.Fatalf("decoded %d bytes from %d", n, len(body))
				}
				if expected >= 0 && n > expected {
					t.Fatalf("decoded %d bytes, more than the declared %d", n, expected)
				}
				var e *Error
				if err != nil && !errors.As(err, &e) {
					t.Fatalf("error %v is not an *Error", err)
				}
				if err == nil && expected >= 0 && n != expected {
					t.Fatalf("success with %d bytes, declared %d", n, expected)
				}
			}
		}
	})
}

func BenchmarkChunkedDecode(b *testing.B) {
	data := testData(64 << 20)
	crc := [][2]string{{"x-amz-checksum-crc32c", crc32cValue(data)}}
	for _, mode := range []string{StreamingUnsignedPayloadTrailer, StreamingPayload} {
		var trailers [][2]string
		want := []string(nil)
		if mode == StreamingUnsignedPayloadTrailer {
			trailers, want = crc, []string{crc[0][0]}
		}
		body := newTestEncoder(mode).encode(data, 64<<10, trailers)
		b.Run(mode, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			rd := bytes.NewReader(body)
			buf := make([]byte, 256<<10)
			for b.Loop() {
				rd.Reset(body)
				c := testChunkReader(nil, kindOf(mode), int64(len(data)), want)
				c.src = io.NopCloser(rd)
				c.br.Reset(rd)
				n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{c}, buf)
				if err != nil || n != int64(len(data)) {
					b.Fatal(n, err)
				}
			}
		})
	}
}

func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }
