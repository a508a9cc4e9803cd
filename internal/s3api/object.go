package s3api

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"hash"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/checksum"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/sse"
)

// metaFromHeaders builds an object record's metadata from request headers.
func metaFromHeaders(hd http.Header) (*object.Object, error) {
	o := &object.Object{
		ContentType:        hd.Get("Content-Type"),
		ContentEncoding:    hd.Get("Content-Encoding"),
		ContentDisposition: hd.Get("Content-Disposition"),
		ContentLanguage:    hd.Get("Content-Language"),
		CacheControl:       hd.Get("Cache-Control"),
		Expires:            hd.Get("Expires"),
	}
	// aws-chunked is a transfer detail, not part of the stored encoding.
	if ce := o.ContentEncoding; ce != "" {
		var keep []string
		for _, p := range strings.Split(ce, ",") {
			if p = strings.TrimSpace(p); p != "" && !strings.EqualFold(p, "aws-chunked") {
				keep = append(keep, p)
			}
		}
		o.ContentEncoding = strings.Join(keep, ",")
	}
	if sc := hd.Get("x-amz-storage-class"); sc != "" && sc != "STANDARD" {
		o.StorageClass = sc // the backend checks it against the cluster's classes
	}
	size := 0
	for k, v := range hd {
		lk := strings.ToLower(k)
		if name, ok := strings.CutPrefix(lk, "x-amz-meta-"); ok {
			val := decodeMetaValue(strings.Join(v, ","))
			o.UserMeta = append(o.UserMeta, [2]string{name, val})
			size += len(name) + len(val)
		}
	}
	if size > 2048 {
		return nil, errf(400, "MetadataTooLarge", "Your metadata headers exceed the maximum allowed metadata size.")
	}
	sort.Slice(o.UserMeta, func(i, j int) bool { return o.UserMeta[i][0] < o.UserMeta[j][0] })
	tags, err := parseTaggingHeader(hd.Get("x-amz-tagging"))
	if err != nil {
		return nil, err
	}
	o.Tags = tags
	return o, nil
}

// bodyCheck hashes a request body as it streams and verifies it at the end: the MD5 (the
// ETag, compared with Content-MD5 if given) and the flexible checksum the client declared.
type bodyCheck struct {
	src        io.Reader
	md5        hash.Hash
	contentMD5 []byte
	expect     checksum.Expect
	sum        hash.Hash
	trailers   func() http.Header
	n          int64
}

func newBodyCheck(hd http.Header, rq *request, src io.Reader) (*bodyCheck, error) {
	bc := &bodyCheck{src: src, md5: md5.New()}
	if cm := hd.Values("Content-Md5"); len(cm) > 0 { // present but empty is InvalidDigest
		v, err := base64.StdEncoding.DecodeString(cm[0])
		if err != nil || len(v) != md5.Size {
			return nil, errInvalidDigest
		}
		bc.contentMD5 = v
	}
	exp, err := checksum.FromHeaders(hd)
	if err != nil {
		return nil, errf(400, "InvalidRequest", "%v", err)
	}
	bc.expect = exp
	if exp.Algo != "" {
		bc.sum = exp.Algo.New()
	}
	if rq.auth != nil {
		bc.trailers = rq.auth.Trailers
	}
	return bc, nil
}

// xmlBodyCheck wraps the body of a request that carries an XML document so that its
// Content-MD5 and flexible checksum are verified, except the checksum headers of
// CompleteMultipartUpload, which state the object's checksum, not the document's.
func xmlBodyCheck(r *http.Request, rq *request) (*bodyCheck, error) {
	hd := r.Header
	if rq.op == "CompleteMultipartUpload" {
		hd = http.Header{"Content-Md5": r.Header["Content-Md5"]}
	}
	return newBodyCheck(hd, rq, rq.auth.Body)
}

func (bc *bodyCheck) Read(p []byte) (int, error) {
	n, err := bc.src.Read(p)
	if n > 0 {
		bc.md5.Write(p[:n])
		if bc.sum != nil {
			bc.sum.Write(p[:n])
		}
		bc.n += int64(n)
	}
	return n, err
}

// finish verifies the digests and records the ETag and checksum in o.
func (bc *bodyCheck) finish(o *object.Object) error {
	sum := bc.md5.Sum(nil)
	if bc.contentMD5 != nil && !bytes.Equal(sum, bc.contentMD5) {
		return errBadDigest
	}
	o.ETag = hex.EncodeToString(sum)
	if bc.sum == nil {
		return nil
	}
	want := bc.expect.Value
	if bc.expect.Trailer {
		var tr http.Header
		if bc.trailers != nil {
			tr = bc.trailers()
		}
		want = tr.Get(bc.expect.Algo.HeaderName())
		if want == "" {
			return errf(400, "InvalidRequest", "The trailing checksum %s was announced but not sent.", bc.expect.Algo.HeaderName())
		}
	}
	got := checksum.Encode(bc.sum.Sum(nil))
	if want != "" && want != got {
		return errf(400, "BadDigest", "The %s you specified did not match the calculated checksum.", bc.expect.Algo)
	}
	o.ChecksumAlgo = string(bc.expect.Algo)
	o.Checksum = got
	o.ChecksumType = "FULL_OBJECT"
	return nil
}

// bodySize returns the payload length of a request that carries an object body, or -1
// for a body sent with Transfer-Encoding: chunked and no declared length: it is streamed
// to the replicas like any other, and refused with EntityTooLarge once it passes the size
// limit (as the ceph s3-tests expect of S3 servers, and as MinIO and RGW do; AWS itself
// answers 501).
func bodySize(r *http.Request, rq *request) (int64, error) {
	if rq.auth.Streaming {
		return rq.auth.DecodedLength, nil
	}
	if r.ContentLength < 0 && !chunked(r) {
		return 0, errMissingLength
	}
	if r.ContentLength == 0 && r.ProtoMajor == 1 && len(r.TransferEncoding) == 0 && len(r.Header["Content-Length"]) == 0 {
		// An HTTP/1 request with neither Content-Length nor Transfer-Encoding: net/http
		// reads no body, which is not an empty object the client declared. S3: 411.
		return 0, errMissingLength
	}
	return r.ContentLength, nil
}

func chunked(r *http.Request) bool {
	return len(r.TransferEncoding) > 0 && r.TransferEncoding[0] == "chunked"
}

// sizeLimit fails a body of unknown length once it passes max bytes.
type sizeLimit struct {
	r   io.Reader
	max int64
}

func (l *sizeLimit) Read(p []byte) (int, error) {
	if l.max < 0 {
		return 0, errEntityTooLarge
	}
	if int64(len(p)) > l.max+1 {
		p = p[:l.max+1]
	}
	n, err := l.r.Read(p)
	l.max -= int64(n)
	if l.max < 0 {
		return 0, errEntityTooLarge
	}
	return n, err
}

// requestBody returns the verified, hashed body of a PUT or UploadPart and its size (-1 if
// the client streams without announcing it).
func (h *Handler) requestBody(r *http.Request, rq *request) (*bodyCheck, int64, error) {
	size, err := bodySize(r, rq)
	if err != nil {
		return nil, 0, err
	}
	if size > h.cfg.MaxObjectSize {
		return nil, 0, errEntityTooLarge
	}
	var src io.Reader = rq.auth.Body
	if size < 0 {
		src = &sizeLimit{r: src, max: h.cfg.MaxObjectSize}
	}
	bc, err := newBodyCheck(r.Header, rq, src)
	return bc, size, err
}

func (h *Handler) putObject(w http.ResponseWriter, r *http.Request, rq *request) error {
	meta, err := metaFromHeaders(r.Header)
	if err != nil {
		return err
	}
	bc, size, err := h.requestBody(r, rq)
	if err != nil {
		return err
	}
	opts := object.PutOptions{Finish: bc.finish}
	if err := writeConditions(r.Header, &opts); err != nil { // evaluated atomically with the write (conditional.go)
		return err
	}
	enc, err := h.newEncryption(r.Context(), r.Header, r.TLS != nil, rq.bucket, rq.key)
	if err != nil {
		return err
	}
	if err := h.aclWrite(r.Context(), r.Header, rq, meta); err != nil {
		return err
	}
	err = h.versionWrite(r.Context(), r.Header, rq.bucket, meta)
	if err != nil {
		return err
	}
	body, err := encryptBody(enc, bc, &size, meta, &opts)
	if err != nil {
		return err
	}
	o, err := h.store.PutObject(r.Context(), rq.bucket, rq.key, meta, body, size, opts)
	rq.bytesIn = bc.n
	if err != nil {
		return bodyError(err)
	}
	versionHeader(w.Header(), o)
	h.expirationHeader(r.Context(), w.Header(), rq.bucket, rq.key, o)
	w.Header().Set("ETag", quote(o.ETag))
	setChecksumHeaders(w.Header(), o)
	sseHeaders(w.Header(), o.SSE)
	w.WriteHeader(http.StatusOK)
	return nil
}

// bodyError turns a failure to read or store a body into the S3 error: a short or
// malformed body is IncompleteBody, an authentication failure inside the body keeps its code.
func bodyError(err error) error {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	if errors.IsErr(err, io.ErrUnexpectedEOF) {
		return errIncompleteBody
	}
	return err
}

func setChecksumHeaders(hd http.Header, o *object.Object) {
	if o.ChecksumAlgo == "" {
		return
	}
	if a, ok := checksum.ParseAlgorithm(o.ChecksumAlgo); ok {
		hd.Set(a.HeaderName(), o.Checksum)
		if o.ChecksumType != "" {
			hd.Set("x-amz-checksum-type", o.ChecksumType)
		}
	}
}

func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		t = strings.TrimPrefix(t, "W/")
		if t == "*" || strings.Trim(t, `"`) == etag {
			return true
		}
	}
	return false
}

// checkConditions evaluates If-Match, If-None-Match, If-Modified-Since and
// If-Unmodified-Since (under the given header names) as S3 does.
func checkConditions(hd http.Header, prefix string, o *object.Object, get bool) error {
	mod := time.Unix(0, o.ModTime).Truncate(time.Second)
	im := hd.Get(prefix + "If-Match")
	inm := hd.Get(prefix + "If-None-Match")
	ims := hd.Get(prefix + "If-Modified-Since")
	ius := hd.Get(prefix + "If-Unmodified-Since")
	notModified := errNotModified
	if !get {
		notModified = errPrecondition
	}
	if im != "" {
		if !etagMatches(im, o.ETag) {
			return errPrecondition
		}
	} else if ius != "" {
		if t, err := http.ParseTime(ius); err == nil && mod.After(t) {
			return errPrecondition
		}
	}
	if inm != "" {
		if etagMatches(inm, o.ETag) {
			return notModified
		}
	} else if ims != "" {
		if t, err := http.ParseTime(ims); err == nil && !mod.After(t) {
			return notModified
		}
	}
	return nil
}

// parseRange parses a single "bytes=" range against size. ok=false means serve the whole
// object (no or unsupported Range header).
func parseRange(hv string, size int64) (off, n int64, ok bool, err error) {
	spec, found := strings.CutPrefix(strings.TrimSpace(hv), "bytes=")
	if !found || strings.Contains(spec, ",") {
		return 0, 0, false, nil
	}
	first, last, found := strings.Cut(spec, "-")
	if !found {
		return 0, 0, false, nil
	}
	first, last = strings.TrimSpace(first), strings.TrimSpace(last)
	if first == "" {
		k, perr := strconv.ParseInt(last, 10, 64)
		if perr != nil || k < 0 || strings.HasPrefix(last, "+") {
			return 0, 0, false, nil
		}
		if k == 0 || size == 0 {
			return 0, 0, false, errInvalidRange
		}
		k = min(k, size)
		return size - k, k, true, nil
	}
	a, perr := strconv.ParseInt(first, 10, 64)
	if perr != nil || a < 0 || strings.HasPrefix(first, "+") {
		return 0, 0, false, nil
	}
	if a >= size {
		return 0, 0, false, errInvalidRange
	}
	b := size - 1
	if last != "" {
		bb, perr := strconv.ParseInt(last, 10, 64)
		if perr != nil || bb < a || strings.HasPrefix(last, "+") {
			return 0, 0, false, nil
		}
		b = min(bb, size-1)
	}
	return a, b - a + 1, true, nil
}

func setObjectHeaders(hd http.Header, o *object.Object) {
	ct := o.ContentType
	if ct == "" {
		ct = "binary/octet-stream"
	}
	// Canonical names set directly, the values in one array: every GET sets these.
	v := []string{ct, quote(o.ETag), time.Unix(0, o.ModTime).UTC().Format(http.TimeFormat), "bytes"}
	hd["Content-Type"], hd["Etag"], hd["Last-Modified"], hd["Accept-Ranges"] = v[0:1:1], v[1:2:2], v[2:3:3], v[3:4:4]
	for _, kv := range []struct{ name, v string }{
		{"Content-Encoding", o.ContentEncoding}, {"Content-Disposition", o.ContentDisposition},
		{"Content-Language", o.ContentLanguage}, {"Cache-Control", o.CacheControl},
		{"Expires", o.Expires}, {"x-amz-storage-class", o.StorageClass}, {"x-amz-restore", o.Restore},
	} {
		if kv.v != "" {
			hd.Set(kv.name, kv.v)
		}
	}
	for _, kv := range o.UserMeta {
		hd["X-Amz-Meta-"+kv[0]] = []string{encodeMetaValue(kv[1])}
	}
	setTaggingCount(hd, o)
}

// decodeMetaValue returns a user metadata value as stored: RFC 2047 encoded-words
// ("=?UTF-8?B?...?=", how clients send text that is not US-ASCII) are decoded, as S3 does;
// a value that is not valid encoded-word text is kept as sent.
func decodeMetaValue(v string) string {
	if !strings.Contains(v, "=?") {
		return v
	}
	d, err := metaWords.DecodeHeader(v)
	if err != nil {
		return v
	}
	return d
}

var metaWords = &mime.WordDecoder{CharsetReader: func(charset string, in io.Reader) (io.Reader, error) {
	switch strings.ToLower(charset) {
	case "utf-8", "us-ascii":
		return in, nil
	}
	return nil, fmt.Errorf("charset %q: only UTF-8 is decoded", charset)
}}

// encodeMetaValue returns a stored user metadata value for a response header: a value
// that is not printable US-ASCII is sent as RFC 2047 encoded-words (base64 of its UTF-8
// bytes), as S3 does, so that it survives every HTTP stack and decodes to the text stored.
func encodeMetaValue(v string) string {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c >= 0x7f || (c < 0x20 && c != '\t') {
			return mime.BEncoding.Encode("UTF-8", v)
		}
	}
	return v
}

var responseOverrides = []struct{ query, header string }{
	{"response-content-type", "Content-Type"},
	{"response-content-language", "Content-Language"},
	{"response-expires", "Expires"},
	{"response-cache-control", "Cache-Control"},
	{"response-content-disposition", "Content-Disposition"},
	{"response-content-encoding", "Content-Encoding"},
}

func (h *Handler) getObject(w http.ResponseWriter, r *http.Request, rq *request) error {
	head := r.Method == http.MethodHead
	if rq.who.Anonymous {
		// S3 honours response-* overrides only in signed requests (a header or a
		// presigned URL), so that a public object's headers are its owner's.
		q := queryOf(r)
		for _, ov := range responseOverrides {
			if q.Has(ov.query) {
				return errf(400, "InvalidRequest", "Request specific response headers cannot be used for anonymous GET requests.")
			}
		}
	}
	ref, err := queryVersion(r)
	if err != nil {
		return err
	}
	o, rd, err := h.openVersion(r.Context(), rq.bucket, rq.key, ref, head)
	if err != nil {
		return deferredReadError(w.Header(), rq, err)
	}
	if rd != nil {
		defer rd.Close()
	}
	if err := checkObjectACL(rq, o); err != nil { // before any header of the object
		return err
	}
	if ref.set || o.Versioned || h.versioningConfigured(rq) {
		w.Header().Set("x-amz-version-id", versionIDOf(o))
	}
	if !ref.set {
		h.expirationHeader(r.Context(), w.Header(), rq.bucket, rq.key, o)
	}
	var dataKey []byte
	if !head || o.SSE.Algorithm != sse.S3 { // a HEAD needs no master key; an SSE-C one checks the key
		if dataKey, err = h.dataKey(r.Header, r.TLS != nil, hdCustomer, rq.bucket, rq.key, o); err != nil {
			return err
		}
	}
	if err := checkConditions(r.Header, "", o, true); err != nil {
		if err == errNotModified {
			w.Header().Set("ETag", quote(o.ETag))
			w.Header().Set("Last-Modified", time.Unix(0, o.ModTime).UTC().Format(http.TimeFormat))
		}
		return err
	}
	hd := w.Header()
	setObjectHeaders(hd, o)
	lockHeaders(hd, o)
	q := queryOf(r)
	for _, ov := range responseOverrides {
		if v := q.Get(ov.query); v != "" {
			hd.Set(ov.header, v)
		}
	}
	size := plainSize(o)
	sseHeaders(hd, o.SSE)
	off, n := int64(0), size
	partial := false
	part := 0 // the part read, for a partNumber read of a multipart object
	if pn := q.Get("partNumber"); pn != "" {
		num, err := strconv.Atoi(pn)
		if err != nil || num < 1 || num > 10000 {
			return errf(400, "InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive")
		}
		part = num
		if parts := plainPartSizes(o); len(parts) == 0 {
			if num != 1 {
				return errInvalidRange
			}
		} else {
			if num > len(parts) {
				return errInvalidRange
			}
			for i := 0; i < num-1; i++ {
				off += parts[i]
			}
			n = parts[num-1]
			partial = true
			hd.Set("x-amz-mp-parts-count", strconv.Itoa(len(parts)))
		}
	} else if rg := r.Header.Get("Range"); rg != "" {
		a, b, ok, err := parseRange(rg, size)
		if err != nil {
			hd.Del("ETag")
			return err
		}
		if ok {
			off, n, partial = a, b, true
		}
	}
	if partial {
		hd.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, size))
	}
	if strings.EqualFold(r.Header.Get("X-Amz-Checksum-Mode"), "ENABLED") {
		switch {
		case !partial:
			setChecksumHeaders(hd, o)
		case part > 0 && part <= len(o.PartChecksums):
			// A part read: the part's own checksum, as the upload stored it (a range read
			// has no checksum of its own).
			if a, ok := checksum.ParseAlgorithm(o.ChecksumAlgo); ok {
				hd.Set(a.HeaderName(), o.PartChecksums[part-1])
			}
		}
	}
	hd["Content-Length"] = []string{strconv.FormatInt(n, 10)}
	if p, ok := rd.(gateway.Preparer); ok && !head && n > 0 {
		// An erasure-coded object: fetch its first stripe now, so that one that cannot
		// be read is an error status, not a 200 with a cut-off body.
		soff, sn := off, n
		if dataKey != nil {
			soff, sn = sse.StoredStart(segments(o), off), sse.HeaderSize
		}
		if err := p.Prepare(r.Context(), soff, sn); err != nil {
			return err
		}
	}
	status := http.StatusOK
	if partial {
		status = http.StatusPartialContent
	}
	w.WriteHeader(status)
	rq.status = status
	if head || n == 0 {
		return nil
	}
	written, err := writePlain(r.Context(), rd, o, dataKey, w, off, n)
	rq.bytesOut = written
	if err != nil {
		// Headers are gone; the client sees a short body and its length check fails. Log
		// it: a corrupt chunk needs an operator's (or, later, the cluster's) attention.
		if errors.Is(errors.Corrupt, err) {
			h.log.Error("GET aborted: stored data failed its checksum", "bucket", rq.bucket, "key", rq.key, "err", err)
		} else {
			h.log.Debug("GET aborted", "bucket", rq.bucket, "key", rq.key, "err", err)
		}
		panic(http.ErrAbortHandler)
	}
	return nil
}

func (h *Handler) deleteObject(w http.ResponseWriter, r *http.Request, rq *request) error {
	ref, err := queryVersion(r)
	if err != nil {
		return err
	}
	vid, marker, err := h.deleteVersion(r.Context(), rq.bucket, rq.key, ref, h.bypass(r, rq, rq.key))
	if err != nil {
		return err
	}
	deleteHeaders(w.Header(), vid, marker)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// copySource parses x-amz-copy-source.
func copySource(hv string) (bucket, key string, err error) {
	bucket, key, _, err = copySourceVersion(hv)
	return bucket, key, err
}

// copySourceVersion parses x-amz-copy-source with the version it names, if any.
func copySourceVersion(hv string) (bucket, key string, ref versionRef, err error) {
	src, version, hasVersion := strings.Cut(hv, "?versionId=")
	if hasVersion {
		if version == "" {
			return "", "", ref, errInvalidVersion
		}
		if ref, err = parseVersionID(version); err != nil {
			return "", "", ref, err
		}
	}
	bucket, key, err = copySourceKey(src)
	return bucket, key, ref, err
}

// copySourceKey parses the bucket/key part of x-amz-copy-source.
func copySourceKey(src string) (bucket, key string, err error) {
	src, uerr := url.PathUnescape(src)
	if uerr != nil {
		return "", "", errf(400, "InvalidArgument", "Copy Source must mention the source bucket and key: sourcebucket/sourcekey")
	}
	src = strings.TrimPrefix(src, "/")
	bucket, key, ok := strings.Cut(src, "/")
	if !ok || bucket == "" || key == "" {
		return "", "", errf(400, "InvalidArgument", "Copy Source must mention the source bucket and key: sourcebucket/sourcekey")
	}
	if len(key) > 1024 {
		return "", "", errKeyTooLong
	}
	return bucket, key, nil
}

// copySrc is the open source of CopyObject or UploadPartCopy.
type copySrc struct {
	gateway.ObjectReader
	bucket, key string
	dataKey     []byte // nil: not encrypted
}

// openCopySource opens and checks the source of CopyObject or UploadPartCopy (the
// version it names, or the current one), with the key that decrypts it (an SSE-C source
// needs its key in the x-amz-copy-source-server-side-encryption-customer-* headers).
func (h *Handler) openCopySource(r *http.Request) (*copySrc, error) {
	sb, sk, ref, err := copySourceVersion(r.Header.Get("x-amz-copy-source"))
	if err != nil {
		return nil, err
	}
	_, rd, err := h.openVersion(r.Context(), sb, sk, ref, false)
	var dm *object.DeleteMarkerError
	if errors.As(err, &dm) && !dm.Current {
		return nil, errf(400, "InvalidRequest", "The source of a copy request may not specifically refer to a delete marker by version id.")
	}
	if err != nil {
		return nil, err
	}
	dataKey, err := h.dataKey(r.Header, r.TLS != nil, hdCopyCustomer, sb, sk, rd.Info())
	if err != nil {
		rd.Close()
		return nil, err
	}
	if err := checkConditions(r.Header, "x-amz-copy-source-", rd.Info(), false); err != nil {
		rd.Close()
		return nil, err
	}
	return &copySrc{ObjectReader: rd, bucket: sb, key: sk, dataKey: dataKey}, nil
}

// pipeRange streams plaintext [off, off+n) of src through a pipe, for the store to read
// as a body.
func pipeRange(ctx context.Context, src *copySrc, off, n int64) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		_, err := writePlain(ctx, src, src.Info(), src.dataKey, pw, off, n)
		pw.CloseWithError(err)
	}()
	return pr
}

// encryptBody returns the body to store for bc: bc itself, or, with enc, bc encrypted,
// with *size (the plaintext's, or -1) made the stored size, meta's and opts' Finish
// recording the encryption.
func encryptBody(enc *encryption, bc *bodyCheck, size *int64, meta *object.Object, opts *object.PutOptions) (io.Reader, error) {
	if enc == nil {
		return bc, nil
	}
	body, stored, err := enc.encrypt(bc, *size)
	if err != nil {
		return nil, err
	}
	*size = stored
	meta.SSE = enc.rec
	fin := opts.Finish
	opts.Finish = func(o *object.Object) error {
		if err := fin(o); err != nil {
			return err
		}
		return enc.finish(o, bc.n)
	}
	return body, nil
}

func (h *Handler) copyObject(w http.ResponseWriter, r *http.Request, rq *request) error {
	directive := r.Header.Get("x-amz-metadata-directive")
	if directive != "" && directive != "COPY" && directive != "REPLACE" {
		return errf(400, "InvalidArgument", "Unknown metadata directive.")
	}
	if td := r.Header.Get("x-amz-tagging-directive"); td != "" && td != "COPY" && td != "REPLACE" {
		return errTaggingDirective
	}
	var cond object.PutOptions // If-Match, If-None-Match: conditions on the destination
	if err := writeConditions(r.Header, &cond); err != nil {
		return err
	}
	rd, err := h.openCopySource(r)
	if err != nil {
		return err
	}
	defer rd.Close()
	sb, sk := rd.bucket, rd.key
	src := rd.Info()
	var meta *object.Object
	switch directive {
	case "", "COPY":
		if sb == rq.bucket && sk == rq.key && r.Header.Get("x-amz-storage-class") == "" && !strings.Contains(r.Header.Get("x-amz-copy-source"), "?versionId=") &&
			r.Header.Get(hdSSE) == "" && r.Header.Get(hdCustomer+"Algorithm") == "" {
			return errf(400, "InvalidRequest", "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes.")
		}
		m := *src
		m.Chunks, m.PartSizes, m.Inline, m.Embedded, m.Body = nil, nil, false, false, nil
		m.SSE = object.Encryption{} // the target's encryption is its own (newEncryption)
		m.ModTime = 0
		// As in S3, the copy's class is the one the request names, not the source's:
		// none means STANDARD (here: what the bucket's placement policy chooses).
		m.StorageClass = ""
		meta = &m
		if sc := r.Header.Get("x-amz-storage-class"); sc != "STANDARD" {
			meta.StorageClass = sc
		}
	case "REPLACE":
		if meta, err = metaFromHeaders(r.Header); err != nil {
			return err
		}
	}
	if meta.Tags, err = copyTags(r.Header, src); err != nil {
		return err
	}
	meta.MetaHLC = 0 // a new version
	size := plainSize(src)
	if size > h.cfg.MaxObjectSize {
		return errEntityTooLarge
	}
	enc, err := h.newEncryption(r.Context(), r.Header, r.TLS != nil, rq.bucket, rq.key)
	if err != nil {
		return err
	}
	body := pipeRange(r.Context(), rd, 0, size)
	defer body.Close()
	bc := &bodyCheck{src: body, md5: md5.New()}
	algo := r.Header.Get("x-amz-checksum-algorithm")
	if algo == "" {
		algo = src.ChecksumAlgo
	}
	if algo != "" {
		a, ok := checksum.ParseAlgorithm(algo)
		if !ok {
			return errf(400, "InvalidRequest", "Invalid checksum algorithm %q.", algo)
		}
		bc.expect = checksum.Expect{Algo: a}
		bc.sum = a.New()
	}
	if err := h.aclWrite(r.Context(), r.Header, rq, meta); err != nil { // not the source's: the request's
		return err
	}
	err = h.versionWrite(r.Context(), r.Header, rq.bucket, meta)
	if err != nil {
		return err
	}
	opts := object.PutOptions{Finish: bc.finish, IfMatch: cond.IfMatch, IfNoneMatch: cond.IfNoneMatch}
	stored, err := encryptBody(enc, bc, &size, meta, &opts)
	if err != nil {
		return err
	}
	o, err := h.store.PutObject(r.Context(), rq.bucket, rq.key, meta, stored, size, opts)
	if err != nil {
		return err
	}
	versionHeader(w.Header(), o)
	h.expirationHeader(r.Context(), w.Header(), rq.bucket, rq.key, o)
	sseHeaders(w.Header(), o.SSE)
	if src.Versioned || strings.Contains(r.Header.Get("x-amz-copy-source"), "?versionId=") {
		w.Header().Set("x-amz-copy-source-version-id", versionIDOf(src))
	}
	res := struct {
		XMLName      xml.Name `xml:"CopyObjectResult"`
		Xmlns        string   `xml:"xmlns,attr"`
		LastModified string
		ETag         string
		ChecksumType string `xml:",omitempty"`
		checksumFields
	}{Xmlns: xmlns, LastModified: isoTime(time.Unix(0, o.ModTime)), ETag: quote(o.ETag)}
	// The new object's checksum, as S3 states it in the result (and GET and HEAD with
	// x-amz-checksum-mode would).
	if o.ChecksumAlgo != "" {
		res.set(o.ChecksumAlgo, o.Checksum)
		res.ChecksumType = o.ChecksumType
	}
	return writeXML(w, res)
}
