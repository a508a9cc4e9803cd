package s3api

import (
	"encoding/xml"
	"io"
	"math"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/sigv4"
)

// Browser POST uploads (S3 POST Object): an HTML form posts multipart/form-data to the
// bucket's URL. It carries no Authorization: the form's policy document, signed with the
// user's key, says what may be uploaded (a key prefix, a size range, metadata values) and
// until when. The fields before the file are read and checked first; the file's bytes then
// stream to the store like a PUT of unknown length, never held whole in memory.

var errPostEnclosure = &apiError{"PreconditionFailed", "At least one of the pre-conditions you specified did not hold: Bucket POST must be of the enclosure-type multipart/form-data.", 412}

// postHeaders maps the form fields that stand for request headers of a PUT to them.
func postHeaders(fields map[string]string) (http.Header, error) {
	hd := make(http.Header)
	for name, v := range fields {
		switch name {
		case "content-type", "cache-control", "content-disposition", "content-encoding", "content-language", "expires":
			hd.Set(name, v)
		case "acl":
			hd.Set("X-Amz-Acl", v) // checked as the header would be (aclWrite)
		case "tagging":
			// A Tagging document (not the header's query form): parsed in postObject.
		case "x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-signature":
			// authentication, checked by VerifyPOST
		default:
			if strings.HasPrefix(name, "x-amz-") {
				hd.Set(name, v) // metadata, the storage class; the refusal table judges the rest
			}
		}
	}
	return hd, nil
}

// postFile is the file's content, limited to max bytes (EntityTooLarge beyond).
type postFile struct {
	src io.Reader
	n   int64
	max int64
}

func (f *postFile) Read(p []byte) (int, error) {
	n, err := f.src.Read(p)
	f.n += int64(n)
	if f.n > f.max {
		return n, errf(400, "EntityTooLarge", "Your proposed upload exceeds the maximum allowed size (%d bytes).", f.max)
	}
	return n, err
}

func (h *Handler) now() time.Time {
	if h.cfg.Now != nil {
		return h.cfg.Now()
	}
	return time.Now()
}

// anonymousPost reports whether a form carries none of the fields of a signed upload
// (policy, signature, credentials).
func anonymousPost(f map[string]string) bool {
	for _, name := range []string{"policy", "x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-signature", "awsaccesskeyid", "signature"} {
		if _, ok := f[name]; ok {
			return false
		}
	}
	return true
}

func (h *Handler) postObject(w http.ResponseWriter, r *http.Request, rq *request) error {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		return errPostEnclosure
	}
	if params["boundary"] == "" {
		return errMalformedPOST
	}
	form, err := readPostForm(r.Body, params["boundary"])
	if err != nil {
		return err
	}
	f := form.fields
	key, ok := f["key"]
	if !ok {
		return errf(400, "InvalidArgument", "Bucket POST must contain a field named 'key'.  If it is specified, please check the order of the fields.")
	}
	pol := &postPolicy{maxSize: math.MaxInt64}
	if anonymousPost(f) {
		// A form with no policy and no signature is an anonymous upload, as in S3: the
		// bucket's policy or ACL must let anyone write the key (authorize, below).
		rq.auth = &sigv4.Result{}
		rq.who = Principal{Anonymous: true}
	} else {
		ak, err := h.verifier.VerifyPOST(sigv4.PostAuth{
			Policy:    f["policy"],
			Algorithm: f["x-amz-algorithm"], Credential: f["x-amz-credential"], Date: f["x-amz-date"], Signature: f["x-amz-signature"],
			AccessKeyID: f["awsaccesskeyid"], SignatureV2: f["signature"],
		})
		if err != nil {
			return err
		}
		rq.auth = &sigv4.Result{AccessKey: ak}
		rq.who = h.principal(ak)
		if pol, err = parsePostPolicy(f["policy"]); err != nil {
			return err
		}
		// The conditions apply to the key as the form gives it, before ${filename} is
		// replaced (SDKs presign {"key": "dir/${filename}"}). Browsers send the file's base
		// name; older ones sent a whole path.
		if err := pol.check(f, rq.bucket, h.now()); err != nil {
			return err
		}
	}
	filename := form.filename[strings.LastIndexAny(form.filename, `/\`)+1:]
	key = strings.ReplaceAll(key, "${filename}", filename)
	rq.key = key
	switch {
	case key == "":
		return errf(400, "InvalidArgument", "User key must have a length greater than 0.")
	case len(key) > 1024:
		return errKeyTooLong
	}
	if err := h.authorize(r, rq); err != nil { // for the key the object gets
		return err
	}
	hd, err := postHeaders(f)
	if err != nil {
		return err
	}
	if err := checkFeatures(&http.Request{Header: hd, URL: &url.URL{}}, "PutObject"); err != nil {
		return err
	}
	meta, err := metaFromHeaders(hd)
	if err != nil {
		return err
	}
	if doc, ok := f["tagging"]; ok {
		if meta.Tags, err = parseTagging([]byte(doc), maxObjectTags); err != nil {
			return err
		}
	}
	src := &postFile{src: form.file, max: min(pol.maxSize, h.cfg.MaxObjectSize)}
	bc, err := newBodyCheck(hd, rq, src) // an x-amz-checksum-* field is verified, as its header would be
	if err != nil {
		return err
	}
	opts := object.PutOptions{Finish: func(o *object.Object) error {
		if bc.n < pol.minSize {
			return errf(400, "EntityTooSmall", "Your proposed upload is smaller than the minimum allowed size (%d bytes).", pol.minSize)
		}
		return bc.finish(o)
	}}
	enc, err := h.newEncryption(r.Context(), hd, r.TLS != nil, rq.bucket, key) // the form's SSE fields, or the bucket's default
	if err != nil {
		return err
	}
	if err := h.aclWrite(r.Context(), hd, rq, meta); err != nil { // the form's acl field
		return err
	}
	err = h.versionWrite(r.Context(), hd, rq.bucket, meta)
	if err != nil {
		return err
	}
	size := int64(-1)
	body, err := encryptBody(enc, bc, &size, meta, &opts)
	if err != nil {
		return err
	}
	o, err := h.store.PutObject(r.Context(), rq.bucket, key, meta, body, size, opts)
	rq.bytesIn = bc.n
	if err != nil {
		return bodyError(err)
	}
	versionHeader(w.Header(), o)
	sseHeaders(w.Header(), o.SSE)
	etag := quote(o.ETag)
	w.Header().Set("ETag", etag)
	setChecksumHeaders(w.Header(), o)
	w.Header().Set("Location", h.objectURL(r, rq.bucket, key))
	redirect := f["success_action_redirect"]
	if redirect == "" {
		redirect = f["redirect"]
	}
	if u, err := url.Parse(redirect); redirect != "" && err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		// S3 appends bucket, key and etag, in that order, to the URL's own query.
		extra := "bucket=" + url.QueryEscape(rq.bucket) + "&key=" + url.QueryEscape(key) + "&etag=" + url.QueryEscape(etag)
		if u.RawQuery != "" {
			extra = u.RawQuery + "&" + extra
		}
		u.RawQuery = extra
		w.Header().Set("Location", u.String())
		w.WriteHeader(http.StatusSeeOther)
		return nil
	}
	switch f["success_action_status"] {
	case "200":
		w.WriteHeader(http.StatusOK)
	case "201":
		out, err := xml.Marshal(struct {
			XMLName  xml.Name `xml:"PostResponse"`
			Location string
			Bucket   string
			Key      string
			ETag     string
		}{Location: h.objectURL(r, rq.bucket, key), Bucket: rq.bucket, Key: key, ETag: etag})
		if err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/xml")
		w.Header().Set("Content-Length", strconv.Itoa(len(xml.Header)+len(out)))
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, xml.Header)
		w.Write(out)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
	return nil
}

// objectURL is the URL of bucket/key on the host the request addressed, in its style.
func (h *Handler) objectURL(r *http.Request, bucket, key string) string {
	u := url.URL{Scheme: "http", Host: r.Host, Path: "/" + bucket + "/" + key}
	if r.TLS != nil {
		u.Scheme = "https"
	}
	if h.vhostBucket(r) != "" {
		u.Path = "/" + key
	}
	return u.String()
}
