package s3api

import (
	"crypto/md5"
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/checksum"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/sse"
)

func (h *Handler) createUpload(w http.ResponseWriter, r *http.Request, rq *request) error {
	meta, err := metaFromHeaders(r.Header)
	if err != nil {
		return err
	}
	if a := r.Header.Get("x-amz-checksum-algorithm"); a != "" {
		algo, ok := checksum.ParseAlgorithm(a)
		if !ok {
			return errf(400, "InvalidRequest", "Invalid checksum algorithm %q.", a)
		}
		meta.ChecksumAlgo = string(algo)
		meta.ChecksumType = "COMPOSITE"
		if t := r.Header.Get("x-amz-checksum-type"); t != "" {
			if t != "COMPOSITE" && t != "FULL_OBJECT" {
				return errf(400, "InvalidRequest", "Invalid checksum type %q.", t)
			}
			if t == "FULL_OBJECT" && (algo == checksum.SHA1 || algo == checksum.SHA256) {
				return errf(400, "InvalidRequest", "The FULL_OBJECT checksum type cannot be used with the %s checksum algorithm.", algo)
			}
			meta.ChecksumType = t
		}
	}
	enc, err := h.newEncryption(r.Context(), r.Header, r.TLS != nil, rq.bucket, rq.key)
	if err != nil {
		return err
	}
	if enc != nil {
		meta.SSE = enc.rec // the parts are encrypted under its data key, each on its own
	}
	if err := h.aclWrite(r.Context(), r.Header, rq, meta); err != nil {
		return err
	}
	if err := h.versionWrite(r.Context(), r.Header, rq.bucket, meta); err != nil {
		return err
	}
	meta.Versioned = false // decided at completion, by the versioning then
	id, err := h.store.CreateUpload(r.Context(), rq.bucket, rq.key, meta)
	if err != nil {
		return err
	}
	sseHeaders(w.Header(), meta.SSE)
	if meta.ChecksumAlgo != "" {
		w.Header().Set("x-amz-checksum-algorithm", meta.ChecksumAlgo)
		w.Header().Set("x-amz-checksum-type", meta.ChecksumType)
	}
	return writeXML(w, struct {
		XMLName  xml.Name `xml:"InitiateMultipartUploadResult"`
		Xmlns    string   `xml:"xmlns,attr"`
		Bucket   string
		Key      string
		UploadID string `xml:"UploadId"`
	}{Xmlns: xmlns, Bucket: rq.bucket, Key: rq.key, UploadID: id})
}

func partNumber(q string) (int, error) {
	n, err := strconv.Atoi(q)
	if err != nil || n < 1 || n > 10000 {
		return 0, errf(400, "InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive")
	}
	return n, nil
}

func (h *Handler) uploadPart(w http.ResponseWriter, r *http.Request, rq *request) error {
	q := r.URL.Query()
	n, err := partNumber(q.Get("partNumber"))
	if err != nil {
		return err
	}
	uploadID := q.Get("uploadId")
	enc, err := h.partEncryption(r, rq, uploadID)
	if err != nil {
		return err
	}
	if rq.op == "UploadPartCopy" {
		return h.uploadPartCopy(w, r, rq, uploadID, n, enc)
	}
	bc, size, err := h.requestBody(r, rq)
	if err != nil {
		return err
	}
	opts := object.PutOptions{Finish: bc.finish}
	body, err := encryptBody(enc, bc, &size, &object.Object{}, &opts)
	if err != nil {
		return err
	}
	p, err := h.store.PutPart(r.Context(), rq.bucket, rq.key, uploadID, n, body, size, opts.Finish)
	rq.bytesIn = bc.n
	if err != nil {
		return bodyError(err)
	}
	w.Header().Set("ETag", quote(p.ETag))
	setChecksumHeaders(w.Header(), p)
	sseHeaders(w.Header(), p.SSE)
	w.WriteHeader(http.StatusOK)
	return nil
}

// partEncryption returns the encryption of a part of upload uploadID (nil if the upload
// is not encrypted): the upload's data key, which for SSE-C needs the request to present
// the upload's key.
func (h *Handler) partEncryption(r *http.Request, rq *request, uploadID string) (*encryption, error) {
	up, err := h.store.StatUpload(r.Context(), rq.bucket, rq.key, uploadID)
	if err != nil {
		return nil, err
	}
	dk, err := h.dataKey(r.Header, r.TLS != nil, hdCustomer, rq.bucket, rq.key, up)
	if err != nil || dk == nil {
		return nil, err
	}
	return &encryption{dataKey: dk, rec: object.Encryption{Algorithm: up.SSE.Algorithm, KeyMD5: up.SSE.KeyMD5}}, nil
}

func (h *Handler) uploadPartCopy(w http.ResponseWriter, r *http.Request, rq *request, uploadID string, n int, enc *encryption) error {
	rd, err := h.openCopySource(r)
	if err != nil {
		return err
	}
	defer rd.Close()
	off, size := int64(0), plainSize(rd.Info())
	if rg := r.Header.Get("x-amz-copy-source-range"); rg != "" {
		a, n, err := parseCopyRange(rg, size)
		if err != nil {
			return err
		}
		off, size = a, n
	}
	if size > h.cfg.MaxObjectSize {
		return errEntityTooLarge
	}
	body := pipeRange(r.Context(), rd, off, size)
	defer body.Close()
	bc := &bodyCheck{src: body, md5: md5.New()}
	opts := object.PutOptions{Finish: bc.finish}
	stored, err := encryptBody(enc, bc, &size, &object.Object{}, &opts)
	if err != nil {
		return err
	}
	p, err := h.store.PutPart(r.Context(), rq.bucket, rq.key, uploadID, n, stored, size, opts.Finish)
	if err != nil {
		return err
	}
	sseHeaders(w.Header(), p.SSE)
	return writeXML(w, struct {
		XMLName      xml.Name `xml:"CopyPartResult"`
		Xmlns        string   `xml:"xmlns,attr"`
		LastModified string
		ETag         string
	}{Xmlns: xmlns, LastModified: isoTime(time.Unix(0, p.ModTime)), ETag: quote(p.ETag)})
}

// parseCopyRange parses an x-amz-copy-source-range, bytes=first-last, into an offset
// and a length. Unlike a GET's Range, both ends are required and last is not clamped: a
// range that does not lie within the source's size bytes is 400 InvalidArgument, as S3
// answers ("Range specified is not valid for source object of size: N").
func parseCopyRange(hv string, size int64) (off, n int64, err error) {
	spec, found := strings.CutPrefix(hv, "bytes=")
	first, last, dash := strings.Cut(spec, "-")
	a, aerr := strconv.ParseInt(first, 10, 64)
	b, berr := strconv.ParseInt(last, 10, 64)
	if !found || !dash || aerr != nil || berr != nil || strings.HasPrefix(first, "+") || strings.HasPrefix(last, "+") || a < 0 {
		return 0, 0, errf(400, "InvalidArgument", "The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy")
	}
	if b < a || b >= size {
		return 0, 0, errf(400, "InvalidArgument", "Range specified is not valid for source object of size: %d", size)
	}
	return a, b - a + 1, nil
}

type completeRequest struct {
	XMLName xml.Name `xml:"CompleteMultipartUpload"`
	Parts   []struct {
		PartNumber        int
		ETag              string
		ChecksumCRC32     string
		ChecksumCRC32C    string
		ChecksumCRC64NVME string
		ChecksumSHA1      string
		ChecksumSHA256    string
	} `xml:"Part"`
}

func (h *Handler) completeUpload(w http.ResponseWriter, r *http.Request, rq *request) error {
	uploadID := r.URL.Query().Get("uploadId")
	var cond object.PutOptions // If-Match, If-None-Match (conditional.go)
	if err := writeConditions(r.Header, &cond); err != nil {
		return err
	}
	var req completeRequest
	if err := readXML(r, rq, 4<<20, &req); err != nil {
		return err
	}
	if len(req.Parts) == 0 || len(req.Parts) > 10000 {
		return errMalformedXML
	}
	list := make([]object.CompletePart, len(req.Parts))
	given := make([]string, len(req.Parts))
	for i, p := range req.Parts {
		list[i] = object.CompletePart{Number: p.PartNumber, ETag: strings.Trim(p.ETag, `"`)}
		for _, v := range []string{p.ChecksumCRC32, p.ChecksumCRC32C, p.ChecksumCRC64NVME, p.ChecksumSHA1, p.ChecksumSHA256} {
			if v != "" {
				given[i] = v
			}
		}
	}
	finish := func(o *object.Object, parts []*object.Object) error {
		if t := r.Header.Get("x-amz-checksum-type"); t != "" && t != o.ChecksumType {
			return errf(400, "InvalidRequest", "The checksum type %s does not match the upload's checksum type %q.", t, o.ChecksumType)
		}
		if o.ChecksumAlgo == "" {
			return nil
		}
		algo, ok := checksum.ParseAlgorithm(o.ChecksumAlgo)
		if !ok {
			o.ChecksumAlgo, o.ChecksumType = "", ""
			return nil
		}
		for i, p := range parts {
			if given[i] != "" && p.Checksum != "" && given[i] != p.Checksum {
				return errf(400, "InvalidPart", "The checksum of part %d does not match the uploaded part.", list[i].Number)
			}
		}
		var sums [][]byte
		for _, p := range parts {
			raw, err := base64.StdEncoding.DecodeString(p.Checksum)
			if p.Checksum == "" || err != nil || p.ChecksumAlgo != o.ChecksumAlgo {
				// A part was uploaded without its checksum: store none rather than a wrong one.
				o.ChecksumAlgo, o.ChecksumType, o.Checksum, o.PartChecksums = "", "", "", nil
				return nil
			}
			sums = append(sums, raw)
			o.PartChecksums = append(o.PartChecksums, p.Checksum)
		}
		if o.ChecksumType == "FULL_OBJECT" {
			// The CRC of the whole object, combined from the parts' CRCs and sizes.
			full := sums[0]
			for i := 1; i < len(sums); i++ {
				var ok bool
				if full, ok = algo.Combine(full, sums[i], partPlainSize(parts[i])); !ok {
					return errf(400, "InvalidRequest", "The FULL_OBJECT checksum type is not supported for %s.", algo)
				}
			}
			o.Checksum = checksum.Encode(full)
		} else {
			hs := algo.New()
			for _, raw := range sums {
				hs.Write(raw)
			}
			o.Checksum = fmt.Sprintf("%s-%d", checksum.Encode(hs.Sum(nil)), len(parts))
			o.ChecksumType = "COMPOSITE"
		}
		// The client may state the object's checksum on completion: it must agree.
		if want := r.Header.Get(algo.HeaderName()); want != "" && want != o.Checksum {
			return errf(400, "BadDigest", "The %s you specified did not match the calculated checksum.", algo)
		}
		return nil
	}
	status, err := h.versioning(r.Context(), rq.bucket)
	if err != nil {
		return err
	}
	sums := finish
	finish = func(o *object.Object, parts []*object.Object) error {
		o.Versioned = status == versioningEnabled
		if err := h.completeEncryption(r, rq, o, parts); err != nil {
			return err
		}
		return sums(o, parts)
	}
	o, err := h.store.CompleteUploadIf(r.Context(), rq.bucket, rq.key, uploadID, list, h.cfg.MinPartSize, cond, finish)
	if err != nil {
		return err
	}
	versionHeader(w.Header(), o)
	h.expirationHeader(r.Context(), w.Header(), rq.bucket, rq.key, o)
	setChecksumHeaders(w.Header(), o)
	sseHeaders(w.Header(), o.SSE)
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	res := struct {
		XMLName  xml.Name `xml:"CompleteMultipartUploadResult"`
		Xmlns    string   `xml:"xmlns,attr"`
		Location string
		Bucket   string
		Key      string
		ETag     string
		checksumFields
		ChecksumType string `xml:",omitempty"`
	}{Xmlns: xmlns, Location: fmt.Sprintf("%s://%s/%s/%s", scheme, r.Host, rq.bucket, s3Escape(rq.key)),
		Bucket: rq.bucket, Key: rq.key, ETag: quote(o.ETag), ChecksumType: o.ChecksumType}
	res.set(o.ChecksumAlgo, o.Checksum) // SDKs read the checksum from the document, not the headers
	return writeXML(w, res)
}

// completeEncryption checks the parts of an encrypted upload being completed as o (an
// SSE-C key, if sent, must be the upload's; every part but the last at least the minimum
// part size in plaintext) and records the object's plaintext size.
func (h *Handler) completeEncryption(r *http.Request, rq *request, o *object.Object, parts []*object.Object) error {
	ck, err := parseCustomerKey(r.Header, hdCustomer, r.TLS != nil)
	if err != nil {
		return err
	}
	switch {
	case !o.SSE.Encrypted():
		if ck != nil {
			return errSSENotThis
		}
		return nil
	case ck != nil && (o.SSE.Algorithm != sse.Customer || ck.md5 != o.SSE.KeyMD5):
		if o.SSE.Algorithm != sse.Customer {
			return errSSENotThis
		}
		return errSSECWrong
	}
	var total int64
	for i, p := range parts {
		if !p.SSE.Encrypted() {
			return errf(400, "InvalidPart", "Part %d was not uploaded encrypted as its upload is.", i+1)
		}
		n := partPlainSize(p)
		if i < len(parts)-1 && n < h.cfg.MinPartSize {
			return errEntityTooSmall
		}
		total += n
	}
	o.SSE.PlainSize = total
	return nil
}

func (h *Handler) abortUpload(w http.ResponseWriter, r *http.Request, rq *request) error {
	if err := h.store.AbortUpload(r.Context(), rq.bucket, rq.key, r.URL.Query().Get("uploadId")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func intParam(q string, def, max int, name string) (int, error) {
	if q == "" {
		return def, nil
	}
	n, err := strconv.Atoi(q)
	if err != nil || n < 0 {
		return 0, errf(400, "InvalidArgument", "Argument %s must be a non-negative integer", name)
	}
	return min(n, max), nil
}

func (h *Handler) listParts(w http.ResponseWriter, r *http.Request, rq *request) error {
	q := r.URL.Query()
	uploadID := q.Get("uploadId")
	max, err := intParam(q.Get("max-parts"), 1000, 1000, "max-parts")
	if err != nil {
		return err
	}
	marker, err := intParam(q.Get("part-number-marker"), 0, 10000, "part-number-marker")
	if err != nil {
		return err
	}
	parts, truncated, err := h.store.ListParts(r.Context(), rq.bucket, rq.key, uploadID, marker, max)
	if err != nil {
		return err
	}
	type part struct {
		PartNumber   int
		LastModified string
		ETag         string
		Size         int64
		checksumFields
	}
	o := h.owner(rq)
	res := struct {
		XMLName              xml.Name `xml:"ListPartsResult"`
		Xmlns                string   `xml:"xmlns,attr"`
		Bucket               string
		Key                  string
		UploadID             string `xml:"UploadId"`
		Initiator            owner
		Owner                owner
		StorageClass         string
		PartNumberMarker     int
		NextPartNumberMarker int
		MaxParts             int
		IsTruncated          bool
		Parts                []part `xml:"Part"`
	}{Xmlns: xmlns, Bucket: rq.bucket, Key: rq.key, UploadID: uploadID, Initiator: o, Owner: o,
		StorageClass: "STANDARD", PartNumberMarker: marker, MaxParts: max, IsTruncated: truncated}
	for _, p := range parts {
		pp := part{PartNumber: p.Number, LastModified: isoTime(time.Unix(0, p.ModTime)), ETag: quote(p.ETag), Size: partPlainSize(p.Object)}
		pp.set(p.ChecksumAlgo, p.Checksum)
		res.Parts = append(res.Parts, pp)
		res.NextPartNumberMarker = p.Number
	}
	return writeXML(w, res)
}

func (h *Handler) listUploads(w http.ResponseWriter, r *http.Request, rq *request) error {
	q := r.URL.Query()
	max, err := intParam(q.Get("max-uploads"), 1000, 1000, "max-uploads")
	if err != nil {
		return err
	}
	enc, esc := listEncoding(q)
	opts := object.UploadListOptions{Prefix: q.Get("prefix"), Delimiter: q.Get("delimiter"),
		KeyMarker: q.Get("key-marker"), UploadMarker: q.Get("upload-id-marker"), Max: max}
	res, err := h.store.ListUploads(r.Context(), rq.bucket, opts)
	if err != nil {
		return err
	}
	type upload struct {
		Key          string
		UploadID     string `xml:"UploadId"`
		Initiator    owner
		Owner        owner
		StorageClass string
		Initiated    string
	}
	o := h.owner(rq)
	out := struct {
		XMLName            xml.Name `xml:"ListMultipartUploadsResult"`
		Xmlns              string   `xml:"xmlns,attr"`
		Bucket             string
		KeyMarker          string
		UploadIDMarker     string `xml:"UploadIdMarker"`
		NextKeyMarker      string
		NextUploadIDMarker string `xml:"NextUploadIdMarker"`
		Prefix             string
		Delimiter          string `xml:",omitempty"`
		MaxUploads         int
		EncodingType       string `xml:",omitempty"`
		IsTruncated        bool
		Uploads            []upload `xml:"Upload"`
		CommonPrefixes     []commonPrefix
	}{Xmlns: xmlns, Bucket: rq.bucket, KeyMarker: esc(opts.KeyMarker), UploadIDMarker: opts.UploadMarker,
		Prefix: esc(opts.Prefix), Delimiter: esc(opts.Delimiter), MaxUploads: max, EncodingType: enc, IsTruncated: res.Truncated}
	if res.Truncated {
		out.NextKeyMarker, out.NextUploadIDMarker = esc(res.NextKey), res.NextUpload
	}
	for _, u := range res.Uploads {
		out.Uploads = append(out.Uploads, upload{Key: esc(u.Key), UploadID: u.UploadID, Initiator: o, Owner: o,
			StorageClass: storageClass(u.Meta), Initiated: isoTime(u.Initiated)})
	}
	for _, p := range res.CommonPrefixes {
		out.CommonPrefixes = append(out.CommonPrefixes, commonPrefix{esc(p)})
	}
	return writeXML(w, out)
}
