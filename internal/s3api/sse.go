package s3api

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"io"
	"net/http"
	"strconv"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/sse"
)

// Server-side encryption (docs/design/sse.md): which requests encrypt and decrypt, with
// which key, and what the answers say. Bodies are encrypted here, before the gateway sees
// them, and decrypted here; the format is package sse's. Records keep stored
// (ciphertext) sizes; SSE.PlainSize is what S3 reports.

// MasterKeys seals and opens the data keys of SSE-S3 objects (sse.Keyring).
type MasterKeys interface {
	// Seal seals dataKey for bucket/key with the newest master key and names it.
	Seal(bucket, key string, dataKey []byte) (keyID string, sealed []byte, err error)
	// Open opens a data key sealed by master key keyID: NotExist if there is no such
	// key, Permission if it does not open.
	Open(keyID, bucket, key string, sealed []byte) ([]byte, error)
}

// Header names.
const (
	hdSSE           = "X-Amz-Server-Side-Encryption"
	hdCustomer      = "X-Amz-Server-Side-Encryption-Customer-"
	hdCopyCustomer  = "X-Amz-Copy-Source-Server-Side-Encryption-Customer-"
	encryptionKind  = "encryption" // the bucket configuration kind
	maxEncryptionXM = 64 << 10
)

var (
	errSSEOverHTTP = &apiError{"InvalidRequest", "Requests specifying Server Side Encryption with Customer provided keys must be made over a secure connection.", 400}
	errSSECMissing = &apiError{"InvalidRequest", "The object was stored using a form of Server Side Encryption. The correct parameters must be provided to retrieve the object.", 400}
	errSSECWrong   = &apiError{"AccessDenied", "The SSE-C key provided does not match the key the object was encrypted with.", 403}
	errSSENotThis  = &apiError{"InvalidRequest", "The encryption parameters are not applicable to this object.", 400}
	errSSEBoth     = &apiError{"InvalidArgument", "Server Side Encryption with Customer provided key is incompatible with the encryption method specified.", 400}
	errNoMasterKey = &apiError{"NotImplemented", "Server-side encryption with AES256 (SSE-S3) needs a master key: this server was started without --master-key-file.", 501}
	errSSEUpgrade  = &apiError{"ServiceUnavailable", "The cluster is being upgraded: server-side encryption works once every node runs a build of feature level 5.", 503}
	errNoSSEConfig = &apiError{"ServerSideEncryptionConfigurationNotFoundError", "The server side encryption configuration was not found.", 404}
)

// customerKey is an SSE-C key a request presents.
type customerKey struct {
	key []byte
	md5 string // base64, as sent and stored
}

// customerHeaders are the names of the three SSE-C headers (algorithm, key, key MD5)
// under hdCustomer and hdCopyCustomer, made once: every GET looks for them.
var customerHeaders = [2][3]string{
	{hdCustomer + "Algorithm", hdCustomer + "Key", hdCustomer + "Key-Md5"},
	{hdCopyCustomer + "Algorithm", hdCopyCustomer + "Key", hdCopyCustomer + "Key-Md5"},
}

func customerHeaderNames(prefix string) [3]string {
	switch prefix {
	case hdCustomer:
		return customerHeaders[0]
	case hdCopyCustomer:
		return customerHeaders[1]
	}
	return [3]string{prefix + "Algorithm", prefix + "Key", prefix + "Key-Md5"}
}

// parseCustomerKey reads the three SSE-C headers under prefix (hdCustomer or
// hdCopyCustomer): nil if none is present.
func parseCustomerKey(hd http.Header, prefix string, tls bool) (*customerKey, error) {
	n := customerHeaderNames(prefix)
	algo, key, sum := hd.Get(n[0]), hd.Get(n[1]), hd.Get(n[2])
	if algo == "" && key == "" && sum == "" {
		return nil, nil
	}
	if !tls {
		return nil, errSSEOverHTTP
	}
	switch {
	case algo == "":
		return nil, errf(400, "InvalidArgument", "Requests specifying Server Side Encryption with Customer provided keys must provide a valid encryption algorithm.")
	case algo != "AES256":
		return nil, errf(400, "InvalidEncryptionAlgorithmError", "The encryption request you specified is not valid. The valid value is AES256.")
	case key == "":
		return nil, errf(400, "InvalidArgument", "Requests specifying Server Side Encryption with Customer provided keys must provide an appropriate secret key.")
	case sum == "":
		return nil, errf(400, "InvalidArgument", "Requests specifying Server Side Encryption with Customer provided keys must provide the client calculated MD5 of the secret key.")
	}
	k, err := base64.StdEncoding.DecodeString(key)
	if err != nil || len(k) != sse.KeySize {
		return nil, errf(400, "InvalidArgument", "The secret key was invalid for the specified algorithm.")
	}
	s := md5.Sum(k)
	if base64.StdEncoding.EncodeToString(s[:]) != sum {
		return nil, errf(400, "InvalidArgument", "The calculated MD5 hash of the key did not match the hash that was provided.")
	}
	return &customerKey{key: k, md5: sum}, nil
}

// encryption is how a new body (an object, or the parts of an upload) is encrypted.
type encryption struct {
	dataKey []byte
	rec     object.Encryption // without PlainSize
}

// newEncryption decides the encryption of a new object bucket/key from the request's
// headers (a browser upload's form fields) and the bucket's default: nil for none.
func (h *Handler) newEncryption(ctx context.Context, hd http.Header, tls bool, bucket, key string) (*encryption, error) {
	ck, err := parseCustomerKey(hd, hdCustomer, tls)
	if err != nil {
		return nil, err
	}
	algo := hd.Get(hdSSE)
	if ck != nil && algo != "" {
		return nil, errSSEBoth
	}
	if ck == nil && algo == "" {
		b, err := h.store.HeadBucket(ctx, bucket)
		if err != nil {
			return nil, err
		}
		if b.Config[encryptionKind] == "" {
			return nil, nil
		}
		algo = sse.S3 // the only default a configuration may set
	}
	if !h.levelAtLeast(5) {
		return nil, errSSEUpgrade
	}
	e := &encryption{dataKey: sse.NewDataKey()}
	if ck != nil {
		sealed, err := sse.SealCustomer(ck.key, bucket, key, e.dataKey)
		if err != nil {
			return nil, err
		}
		e.rec = object.Encryption{Algorithm: sse.Customer, SealedKey: sealed, KeyMD5: ck.md5}
		return e, nil
	}
	if algo != sse.S3 {
		return nil, errNotImplemented // the refusal table lets only AES256 through
	}
	if h.cfg.MasterKeys == nil {
		return nil, errNoMasterKey
	}
	id, sealed, err := h.cfg.MasterKeys.Seal(bucket, key, e.dataKey)
	if err != nil {
		return nil, err
	}
	e.rec = object.Encryption{Algorithm: sse.S3, KeyID: id, SealedKey: sealed}
	return e, nil
}

// encrypt returns the body to store for a plaintext body of size bytes (-1: unknown)
// and its size.
func (e *encryption) encrypt(src io.Reader, size int64) (io.Reader, int64, error) {
	r, err := sse.NewReader(src, e.dataKey)
	return r, sse.CipherSize(size), err
}

// finish records the encryption in o, a new version or part whose body of plain bytes
// was just verified (o.ETag is the plaintext's MD5): SSE-C ETags are keyed.
func (e *encryption) finish(o *object.Object, plain int64) error {
	o.SSE = e.rec
	o.SSE.PlainSize = plain
	if e.rec.Algorithm == sse.Customer {
		sum, err := hex.DecodeString(o.ETag)
		if err != nil {
			return err
		}
		o.ETag = sse.CustomerETag(e.dataKey, sum)
	}
	return nil
}

// sseHeaders says in an answer how o is encrypted.
func sseHeaders(hd http.Header, e object.Encryption) {
	switch e.Algorithm {
	case sse.S3:
		hd.Set("x-amz-server-side-encryption", "AES256")
	case sse.Customer:
		hd.Set("x-amz-server-side-encryption-customer-algorithm", "AES256")
		hd.Set("x-amz-server-side-encryption-customer-key-MD5", e.KeyMD5)
	}
}

// dataKey returns the data key of o (the record of bucket/key, or of an upload) for a
// request whose SSE-C headers are under prefix: nil for an object that is not encrypted.
// An SSE-C object needs the key it was written with (missing: InvalidRequest; another:
// AccessDenied); SSE-C headers for another object are InvalidRequest.
func (h *Handler) dataKey(hd http.Header, tls bool, prefix, bucket, key string, o *object.Object) ([]byte, error) {
	ck, err := parseCustomerKey(hd, prefix, tls)
	if err != nil {
		return nil, err
	}
	switch o.SSE.Algorithm {
	case "":
		if ck != nil {
			return nil, errSSENotThis
		}
		return nil, nil
	case sse.S3:
		if ck != nil {
			return nil, errSSENotThis
		}
		if h.cfg.MasterKeys == nil {
			return nil, errf(500, "MasterKeyNotFound", "The object is encrypted with master key %q, and this server was started without --master-key-file: every gateway of a cluster needs the same master key file.", o.SSE.KeyID)
		}
		k, err := h.cfg.MasterKeys.Open(o.SSE.KeyID, bucket, key, o.SSE.SealedKey)
		switch {
		case errors.Is(errors.NotExist, err):
			return nil, errf(500, "MasterKeyNotFound", "The object is encrypted with master key %q, which is not in this server's --master-key-file: every gateway of a cluster needs the same master key file, with every key still in use.", o.SSE.KeyID)
		case err != nil:
			return nil, errf(500, "InternalError", "The data key of the object does not open with master key %q: the key of that name in --master-key-file is not the one that sealed it, or the record is damaged.", o.SSE.KeyID)
		}
		return k, nil
	case sse.Customer:
		if ck == nil {
			return nil, errSSECMissing
		}
		if ck.md5 != o.SSE.KeyMD5 {
			return nil, errSSECWrong
		}
		k, err := sse.OpenCustomer(ck.key, bucket, key, o.SSE.SealedKey)
		if err != nil {
			return nil, errSSECWrong
		}
		return k, nil
	}
	return nil, errf(500, "InternalError", "The object is encrypted with %q, which this server does not know.", o.SSE.Algorithm)
}

// segments are the stored sizes of o's segments: one per part, or the whole body.
func segments(o *object.Object) []int64 {
	if len(o.PartSizes) > 0 {
		return o.PartSizes
	}
	return []int64{o.Size}
}

// plainSize is the size S3 reports for o.
func plainSize(o *object.Object) int64 {
	if o.SSE.Encrypted() {
		return o.SSE.PlainSize
	}
	return o.Size
}

// plainPartSizes are the sizes S3 reports for o's parts.
func plainPartSizes(o *object.Object) []int64 {
	if !o.SSE.Encrypted() || len(o.PartSizes) == 0 {
		return o.PartSizes
	}
	ps, _, err := sse.PlainSizes(o.PartSizes)
	if err != nil {
		return o.PartSizes
	}
	return ps
}

// partPlainSize is the plaintext size of an uploaded part.
func partPlainSize(p *object.Object) int64 {
	if p.SSE.Encrypted() {
		return p.SSE.PlainSize
	}
	return p.Size
}

// writePlain writes plaintext [off, off+n) of o, open in rd, to w: decrypted with
// dataKey, or as stored if it is nil.
func writePlain(ctx context.Context, rd gateway.ObjectReader, o *object.Object, dataKey []byte, w io.Writer, off, n int64) (int64, error) {
	if dataKey == nil {
		return rd.WriteRange(ctx, w, off, n)
	}
	return sse.WriteRange(ctx, rd, dataKey, segments(o), w, off, n)
}

// Bucket default encryption: PutBucketEncryption keeps the bucket's configuration of kind
// "encryption" (AES256 only) in the cluster map.

type encryptionConfig struct {
	XMLName xml.Name `xml:"ServerSideEncryptionConfiguration"`
	Xmlns   string   `xml:"xmlns,attr,omitempty"`
	Rules   []struct {
		Default *struct {
			SSEAlgorithm   string
			KMSMasterKeyID string `xml:",omitempty"`
		} `xml:"ApplyServerSideEncryptionByDefault"`
		BucketKeyEnabled *bool `xml:",omitempty"`
	} `xml:"Rule"`
}

const storedEncryptionConfig = `<ServerSideEncryptionConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Rule><ApplyServerSideEncryptionByDefault><SSEAlgorithm>AES256</SSEAlgorithm></ApplyServerSideEncryptionByDefault><BucketKeyEnabled>false</BucketKeyEnabled></Rule></ServerSideEncryptionConfiguration>`

func (h *Handler) putBucketEncryption(w http.ResponseWriter, r *http.Request, rq *request) error {
	var cfg encryptionConfig
	if err := readXML(r, rq, maxEncryptionXM, &cfg); err != nil {
		return err
	}
	if len(cfg.Rules) != 1 || cfg.Rules[0].Default == nil {
		return errMalformedXML
	}
	rl := cfg.Rules[0]
	switch rl.Default.SSEAlgorithm {
	case "AES256":
	case "aws:kms", "aws:kms:dsse":
		return errf(501, "NotImplemented", "SSE-KMS (%s) is not implemented: cairn has no KMS. Use AES256.", rl.Default.SSEAlgorithm)
	default:
		return errMalformedXML
	}
	if rl.Default.KMSMasterKeyID != "" {
		return errf(400, "InvalidArgument", "a KMSMasterKeyID is allowed only with SSEAlgorithm aws:kms.")
	}
	if rl.BucketKeyEnabled != nil && *rl.BucketKeyEnabled {
		return errf(501, "NotImplemented", "S3 Bucket Keys are an SSE-KMS feature, which cairn does not implement.")
	}
	if !h.levelAtLeast(5) {
		return errSSEUpgrade
	}
	if h.cfg.MasterKeys == nil {
		return errNoMasterKey
	}
	if err := h.store.SetBucketConfig(r.Context(), rq.bucket, encryptionKind, []byte(storedEncryptionConfig)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (h *Handler) getBucketEncryption(w http.ResponseWriter, r *http.Request, rq *request) error {
	b, err := h.store.HeadBucket(r.Context(), rq.bucket)
	if err != nil {
		return err
	}
	doc := b.Config[encryptionKind]
	if doc == "" {
		return errNoSSEConfig
	}
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(xml.Header)+len(doc)))
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, xml.Header)
	io.WriteString(w, doc)
	return nil
}

func (h *Handler) deleteBucketEncryption(w http.ResponseWriter, r *http.Request, rq *request) error {
	if err := h.store.SetBucketConfig(r.Context(), rq.bucket, encryptionKind, nil); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
