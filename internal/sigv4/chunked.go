package sigv4

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"net/http"
	"slices"
	"strings"
)

// hashReader passes a body through and checks its SHA-256 at EOF.
type hashReader struct {
	src  io.ReadCloser
	h    hash.Hash
	want [32]byte
	sum  [32]byte
	err  error // sticky
}

func (r *hashReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.src.Read(p)
	r.h.Write(p[:n])
	if err == io.EOF {
		r.h.Sum(r.sum[:0])
		if r.sum != r.want {
			err = newError(CodeXAmzContentSHA256Mismatch, http.StatusBadRequest,
				"The provided 'x-amz-content-sha256' header does not match what was computed.")
		}
	}
	r.err = err
	return n, err
}

func (r *hashReader) Close() error { return r.src.Close() }

// chunkReader decodes an aws-chunked body:
//
//	chunk   = hex-size [ ";chunk-signature=" 64HEXDIG ] CRLF data CRLF
//	last    = "0" [ ";chunk-signature=" 64HEXDIG ] CRLF
//	trailer = *( name ":" value CRLF ) [ "x-amz-trailer-signature:" 64HEXDIG CRLF ] CRLF
//
// In the signed kinds every chunk carries a signature chained from the request
// signature; a chunk is read whole into a buffer (at most MaxChunkSize bytes,
// grown as its bytes arrive) and released only once its signature verifies, so
// the caller never sees unverified bytes. In the unsigned kind there is nothing
// to verify and chunk data streams straight through.
//
// Errors are sticky. Framing errors are *Error values; errors of the
// underlying body other than a premature EOF are passed through.
type chunkReader struct {
	src  io.ReadCloser
	br   *bufio.Reader
	kind payloadType
	err  error // sticky; io.EOF once the body and trailers are complete

	// Unsigned kind.
	left     int64 // bytes of the current chunk not yet read
	needCRLF bool  // the CRLF after the current chunk's data is not yet read

	// Signed kinds.
	buf []byte // the current, verified, chunk
	off int    // bytes of buf already returned

	decoded  int64 // payload bytes so far
	expected int64 // x-amz-decoded-content-length, or -1

	// Signing state, for the signed kinds.
	mac     hash.Hash // HMAC-SHA256 keyed with the signing key
	sha     hash.Hash
	amzDate string
	scope   string
	prevSig [64]byte // hex of the previous signature
	sts     []byte   // string-to-sign scratch
	sum     [32]byte // digest scratch
	sig     [32]byte // the signature of the current chunk as sent

	want     []string // lowercase trailer names announced by x-amz-trailer
	trailers http.Header
}

// readerSize is the size of the chunkReader's bufio buffer; it must exceed
// maxLineLen.
const readerSize = 16 << 10

func newChunkReader(src io.ReadCloser, kind payloadType, expected int64, want []string) *chunkReader {
	return &chunkReader{
		src:      src,
		br:       bufio.NewReaderSize(src, readerSize),
		kind:     kind,
		expected: expected,
		want:     want,
	}
}

// setSigning prepares a reader of a signed kind to verify signatures made with
// key, the request's date and scope, seeded with the request signature.
func (c *chunkReader) setSigning(key *[32]byte, amzDate, scope string, seed *[32]byte) {
	k := *key // a copy, so that the caller's key can stay on its stack
	c.mac = hmac.New(sha256.New, k[:])
	c.sha = sha256.New()
	c.amzDate = amzDate
	c.scope = scope
	hex.Encode(c.prevSig[:], seed[:])
	c.sts = make([]byte, 0, 256)
}

func (c *chunkReader) signed() bool { return c.kind != payloadUnsignedTrailer }

func (c *chunkReader) Read(p []byte) (int, error) {
	for c.err == nil {
		if !c.signed() {
			if c.left > 0 {
				if len(p) == 0 {
					return 0, nil
				}
				if int64(len(p)) > c.left {
					p = p[:c.left]
				}
				n, err := c.br.Read(p)
				c.left -= int64(n)
				if err != nil && c.left > 0 {
					c.err = bodyErr(err)
				}
				if n > 0 {
					return n, nil
				}
				continue
			}
			if c.needCRLF {
				if c.err = c.readCRLF(); c.err != nil {
					break
				}
				c.needCRLF = false
			}
		} else if c.off < len(c.buf) {
			n := copy(p, c.buf[c.off:])
			c.off += n
			return n, nil
		}
		c.err = c.nextChunk()
	}
	return 0, c.err
}

func (c *chunkReader) Close() error { return c.src.Close() }

// trailerHeader returns the trailers once the body is complete.
func (c *chunkReader) trailerHeader() http.Header {
	if c.err != io.EOF {
		return nil
	}
	return c.trailers
}

// bodyErr maps an error of the underlying body: a premature end is an
// IncompleteBody, anything else passes through.
func bodyErr(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return errIncomplete("The request body terminated unexpectedly")
	}
	return err
}

func errFraming(msg string) *Error {
	return errInvalidRequest("Malformed aws-chunked encoding: " + msg)
}

// readLine reads a CRLF-terminated line of at most maxLineLen bytes and
// returns it without the CRLF. The slice is valid until the next read.
func (c *chunkReader) readLine() ([]byte, error) {
	line, err := c.br.ReadSlice('\n')
	switch {
	case err == bufio.ErrBufferFull || len(line) > maxLineLen:
		return nil, errFraming("line too long")
	case err != nil:
		return nil, bodyErr(err)
	case len(line) < 2 || line[len(line)-2] != '\r':
		return nil, errFraming("line not terminated by CRLF")
	}
	return line[:len(line)-2], nil
}

func (c *chunkReader) readCRLF() error {
	b, err := c.br.Peek(2)
	if err != nil {
		return bodyErr(err)
	}
	if b[0] != '\r' || b[1] != '\n' {
		return errFraming("chunk data not followed by CRLF")
	}
	c.br.Discard(2)
	return nil
}

// parseSize parses a chunk size: 1 to 15 hex digits.
func parseSize(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		n = n<<4 | int64(c)
	}
	return n, true
}

// nextChunk reads the next chunk header and, for the signed kinds, the chunk
// itself, verifying it. At the last chunk it reads the trailers and returns
// io.EOF.
func (c *chunkReader) nextChunk() error {
	line, err := c.readLine()
	if err != nil {
		return err
	}
	sizeField, ext, hasExt := bytes.Cut(line, []byte{';'})
	size, ok := parseSize(sizeField)
	if !ok {
		return errFraming("invalid chunk size")
	}
	if c.signed() {
		const prefix = "chunk-signature="
		sig, ok := bytes.CutPrefix(ext, []byte(prefix))
		if !hasExt || !ok || len(sig) != 64 || !isHex(sig) {
			return errFraming("missing or invalid chunk-signature")
		}
		decodeHex(c.sig[:], sig)
		if size > MaxChunkSize {
			return errFraming("chunk larger than 16 MiB")
		}
	}
	if c.expected >= 0 && size > c.expected-c.decoded {
		return errIncomplete("The decoded body is longer than x-amz-decoded-content-length")
	}
	if !c.signed() {
		c.left = size
		c.needCRLF = size > 0
		c.decoded += size
	} else {
		if err := c.readData(int(size)); err != nil {
			return err
		}
		if err := c.verifyChunk(); err != nil {
			return err
		}
		if size > 0 {
			if err := c.readCRLF(); err != nil {
				return err
			}
		}
		c.decoded += size
	}
	if size > 0 {
		return nil
	}
	if c.expected >= 0 && c.decoded != c.expected {
		return errIncomplete("The decoded body is shorter than x-amz-decoded-content-length")
	}
	return c.readTrailers()
}

// readData reads size bytes into c.buf, growing it as the bytes arrive rather
// than trusting the declared size up front.
func (c *chunkReader) readData(size int) error {
	c.buf, c.off = c.buf[:0], 0
	for len(c.buf) < size {
		if len(c.buf) == cap(c.buf) {
			c.buf = slices.Grow(c.buf, min(size-len(c.buf), max(cap(c.buf), 64<<10)))
		}
		n, err := c.br.Read(c.buf[len(c.buf):min(cap(c.buf), size)])
		c.buf = c.buf[:len(c.buf)+n]
		if err != nil && len(c.buf) < size {
			return bodyErr(err)
		}
	}
	return nil
}

// verifyChunk checks c.sig against the signature of the chunk in c.buf.
func (c *chunkReader) verifyChunk() error {
	c.sha.Reset()
	c.sha.Write(c.buf)
	c.sha.Sum(c.sum[:0])
	sts := append(c.sts[:0], "AWS4-HMAC-SHA256-PAYLOAD\n"...)
	sts = c.appendScope(sts)
	sts = append(sts, EmptySHA256+"\n"...)
	sts = hex.AppendEncode(sts, c.sum[:])
	c.sts = sts
	return c.checkSig(sts)
}

// appendScope appends the date, scope and previous signature lines common to
// chunk and trailer strings to sign.
func (c *chunkReader) appendScope(sts []byte) []byte {
	sts = append(sts, c.amzDate...)
	sts = append(sts, '\n')
	sts = append(sts, c.scope...)
	sts = append(sts, '\n')
	sts = append(sts, c.prevSig[:]...)
	return append(sts, '\n')
}

func (c *chunkReader) checkSig(sts []byte) error {
	c.mac.Reset()
	c.mac.Write(sts)
	c.mac.Sum(c.sum[:0])
	if !hmac.Equal(c.sum[:], c.sig[:]) {
		return errSignature()
	}
	hex.Encode(c.prevSig[:], c.sum[:])
	return nil
}

// trailer is one trailing header.
type trailer struct {
	name  string // lowercase
	value string
}

// readTrailers reads the trailer section after the last chunk, checks it
// against x-amz-trailer and, in the signed trailer kind, its signature. It
// returns io.EOF on success.
//
// Two leniencies: the end of the body may stand in for the final empty line,
// and in the trailer kinds one empty line before the trailers is skipped.
func (c *chunkReader) readTrailers() error {
	var (
		got      []trailer
		total    int
		sigSeen  bool
		skipped  bool
		trailing = c.kind != payloadSigned
	)
	for {
		line, err := c.br.ReadSlice('\n')
		if err == io.EOF && len(line) == 0 {
			break // end of body at a line boundary
		}
		total += len(line)
		switch {
		case err == bufio.ErrBufferFull || total > maxTrailerLen:
			return errTrailer("trailers too long")
		case err != nil:
			return bodyErr(err)
		case len(line) < 2 || line[len(line)-2] != '\r':
			return errTrailer("line not terminated by CRLF")
		}
		line = line[:len(line)-2]
		if len(line) == 0 {
			if trailing && !skipped && len(got) == 0 && !sigSeen {
				if _, err := c.br.Peek(1); err == nil {
					skipped = true
					continue
				}
			}
			break
		}
		if sigSeen {
			return errTrailer("data after x-amz-trailer-signature")
		}
		name, value, ok := bytes.Cut(line, []byte{':'})
		name = bytes.TrimSpace(name)
		value = bytes.TrimSpace(value)
		if !ok || len(name) == 0 || !isToken(name) {
			return errTrailer("invalid trailer line")
		}
		if c.kind == payloadSignedTrailer && strings.EqualFold(string(name), "x-amz-trailer-signature") {
			if len(value) != 64 || !isHex(value) {
				return errTrailer("invalid x-amz-trailer-signature")
			}
			decodeHex(c.sig[:], value)
			sigSeen = true
			continue
		}
		n := strings.ToLower(string(name))
		if !slices.Contains(c.want, n) {
			return errTrailer("trailer " + n + " was not announced in x-amz-trailer")
		}
		for _, t := range got {
			if t.name == n {
				return errTrailer("trailer " + n + " given more than once")
			}
		}
		got = append(got, trailer{n, string(value)})
	}

	for _, w := range c.want {
		if !slices.ContainsFunc(got, func(t trailer) bool { return t.name == w }) {
			return errTrailer("trailer " + w + " announced in x-amz-trailer is missing")
		}
	}
	if c.kind == payloadSignedTrailer {
		if !sigSeen {
			return errTrailer("missing x-amz-trailer-signature")
		}
		if err := c.verifyTrailers(got); err != nil {
			return err
		}
	}
	if len(got) > 0 {
		c.trailers = make(http.Header, len(got))
		for _, t := range got {
			c.trailers[http.CanonicalHeaderKey(t.name)] = []string{t.value}
		}
	}
	return io.EOF
}

// verifyTrailers checks c.sig against the signature of the trailers: the
// SHA-256 of their canonical form, "name:value\n" for each, sorted by name.
func (c *chunkReader) verifyTrailers(got []trailer) error {
	slices.SortFunc(got, func(a, b trailer) int { return strings.Compare(a.name, b.name) })
	c.sha.Reset()
	for _, t := range got {
		io.WriteString(c.sha, t.name)
		io.WriteString(c.sha, ":")
		io.WriteString(c.sha, t.value)
		io.WriteString(c.sha, "\n")
	}
	c.sha.Sum(c.sum[:0])
	sts := append(c.sts[:0], "AWS4-HMAC-SHA256-TRAILER\n"...)
	sts = c.appendScope(sts)
	sts = hex.AppendEncode(sts, c.sum[:])
	c.sts = sts
	return c.checkSig(sts)
}

func isToken(b []byte) bool {
	for _, c := range b {
		if !isTokenChar(c) {
			return false
		}
	}
	return true
}
