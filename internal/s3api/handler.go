// Package s3api serves the S3 HTTP API: it authenticates requests (SigV4), parses them,
// calls the store, and writes S3 XML responses and errors. It owns everything about the
// wire format and nothing about how data is kept.
package s3api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/sigv4"
)

// Observer receives one call per finished request, for metrics.
type Observer interface {
	ObserveRequest(op string, status int, d time.Duration, bytesIn, bytesOut int64)
}

// Backend is what the S3 API needs of the storage system: bucket, object and multipart
// operations with S3 semantics. gateway.Gateway implements it over the cluster.
type Backend interface {
	ListBuckets(ctx context.Context) ([]object.Bucket, error)
	// CreateBucket creates a bucket owned by the named user ("": the root user).
	CreateBucket(ctx context.Context, name, owner string) error
	// HeadBucket returns the bucket with its configurations (Bucket.Config).
	HeadBucket(ctx context.Context, name string) (object.Bucket, error)
	// LocalBucket is HeadBucket without asking any other node (for unauthenticated
	// requests): a bucket created elsewhere a moment ago may be missing.
	LocalBucket(name string) (object.Bucket, error)
	DeleteBucket(ctx context.Context, name string) error
	// SetBucketConfig sets the bucket's configuration of a kind (the sub-resource: "cors",
	// "tagging") to doc; an empty doc deletes it.
	SetBucketConfig(ctx context.Context, bucket, kind string, doc []byte) error
	ObjectBackend
	MultipartBackend
}

// ObjectBackend is the object part of Backend.
type ObjectBackend interface {
	PutObject(ctx context.Context, bucket, key string, meta *object.Object, src io.Reader, size int64, opts object.PutOptions) (*object.Object, error)
	StatObject(ctx context.Context, bucket, key string) (*object.Object, error)
	OpenObject(ctx context.Context, bucket, key string) (gateway.ObjectReader, error)
	DeleteObject(ctx context.Context, bucket, key string) error
	// SetObjectTags replaces the tag set of the object's current version in place (nil
	// removes it), without a new version.
	SetObjectTags(ctx context.Context, bucket, key string, tags [][2]string) (*object.Object, error)
	List(ctx context.Context, bucket string, opts object.ListOptions) (*object.ListResult, error)
	// OpenVersion opens version hlc of bucket/key, current or not (0: the null version);
	// a delete marker is a *object.DeleteMarkerError, a version no holder has
	// object.ErrNoSuchVersion.
	OpenVersion(ctx context.Context, bucket, key string, hlc uint64) (gateway.ObjectReader, error)
	// DeleteRecord writes a delete marker, a purge of a version or a tombstone of the
	// null version (see gateway.Gateway.DeleteRecord).
	DeleteRecord(ctx context.Context, bucket, key string, d object.Object) (*object.Object, error)
	ListVersions(ctx context.Context, bucket string, opts object.VersionListOptions) (*object.VersionList, error)
	// ChangeMeta changes groups of in-place metadata (tags, retention, legal hold) of a
	// version (0: the current one).
	ChangeMeta(ctx context.Context, bucket, key string, hlc uint64, c gateway.MetaChange) (*object.Object, error)
}

// MultipartBackend is the multipart-upload part of Backend.
type MultipartBackend interface {
	CreateUpload(ctx context.Context, bucket, key string, meta *object.Object) (string, error)
	// StatUpload returns a pending upload's record (its metadata and encryption).
	StatUpload(ctx context.Context, bucket, key, uploadID string) (*object.Object, error)
	PutPart(ctx context.Context, bucket, key, uploadID string, n int, src io.Reader, size int64, finish func(*object.Object) error) (*object.Object, error)
	ListParts(ctx context.Context, bucket, key, uploadID string, after, max int) ([]object.Part, bool, error)
	CompleteUpload(ctx context.Context, bucket, key, uploadID string, list []object.CompletePart, minPart int64, finish func(o *object.Object, parts []*object.Object) error) (*object.Object, error)
	// CompleteUploadIf is CompleteUpload with cond's IfMatch and IfNoneMatch evaluated
	// atomically with the completion.
	CompleteUploadIf(ctx context.Context, bucket, key, uploadID string, list []object.CompletePart, minPart int64, cond object.PutOptions, finish func(o *object.Object, parts []*object.Object) error) (*object.Object, error)
	AbortUpload(ctx context.Context, bucket, key, uploadID string) error
	ListUploads(ctx context.Context, bucket string, opts object.UploadListOptions) (*object.UploadList, error)
}

// Config configures a Handler.
type Config struct {
	// Store keeps the data: the cluster gateway. Required.
	Store Backend
	// Lookup returns the secret key of an access key. Required.
	Lookup sigv4.SecretLookup
	// Principal returns the user an access key belongs to (called after the request's
	// signature was verified with the key). Nil: every key is the root user's.
	Principal func(accessKey string) Principal
	// Users returns the names of the cluster's users, against which the canonical IDs of
	// ACL grants are resolved (called only for requests that set grants). Nil: the root
	// user alone.
	Users func() []string
	// Region is reported by GetBucketLocation (default "us-east-1"). Requests signed for any
	// region are accepted.
	Region string
	// Domains are the base domains for virtual-host-style addressing: a request for
	// Host "bucket.<domain>" addresses bucket. Default: "localhost".
	Domains []string
	// Logger, nil means slog.Default().
	Logger *slog.Logger
	// Observer, if set, is told about every request.
	Observer Observer
	// AccessLog, if set, gets a record of every request once it is answered, refused
	// ones included (the audit log).
	AccessLog func(AccessRecord)
	// MaxObjectSize is the largest single PUT (default 5 GiB, as S3).
	MaxObjectSize int64
	// MaxPresignV2 is how far ahead a Signature Version 2 presigned URL may expire
	// (default 7 days, the limit of Version 4).
	MaxPresignV2 time.Duration
	// MinPartSize is the smallest multipart part but the last (default 5 MiB, as S3).
	MinPartSize int64
	// IdleTimeout bounds how long a request body may stall (no byte received) and a response
	// may wait for the client to take bytes, before the connection is closed (default 2m).
	// Large transfers are not limited in total, only in how long they may make no progress.
	IdleTimeout time.Duration
	// Now, for tests; nil means time.Now.
	Now func() time.Time
	// FeatureLevel returns the feature level every node of the cluster has reached
	// (clustermap.Map.Level). Requests that would write records an older build misreads
	// (an owner, an ACL, encryption: level 5) are refused below it. Nil: the cluster is
	// this build alone.
	FeatureLevel func() int
	// MasterKeys seal the data keys of SSE-S3 objects (an sse.Keyring from
	// --master-key-file). Nil: SSE-S3 and bucket default encryption are refused (SSE-C
	// needs no master key).
	MasterKeys MasterKeys
	// NotifyTarget reports whether a bucket-notification target of that name exists
	// (the cluster map's targets). Nil: there are none, and every configuration naming
	// one is refused.
	NotifyTarget func(name string) bool
	// ArchiveTier reports whether an archive tier of that name exists (the cluster map's
	// tiers), for lifecycle Transition rules. Nil: there are none, and every Transition
	// is refused.
	ArchiveTier func(name string) bool
}

// Handler is the S3 API as an http.Handler.
type Handler struct {
	cfg      Config
	log      *slog.Logger
	store    Backend
	verifier *sigv4.Verifier
	cors     corsCache
	// lifecycle caches parsed lifecycle configurations (x-amz-expiration).
	lifecycle lifecycleCache
	policies  policyCache
	reqSeq    atomic.Uint64
	reqBase   string
}

// New returns a Handler.
func New(cfg Config) *Handler {
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.Domains == nil {
		cfg.Domains = []string{"localhost"}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxObjectSize <= 0 {
		cfg.MaxObjectSize = 5 << 30
	}
	if cfg.MinPartSize <= 0 {
		cfg.MinPartSize = 5 << 20
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 2 * time.Minute
	}
	var b [4]byte
	rand.Read(b[:])
	h := &Handler{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "s3api"),
		store:   cfg.Store,
		reqBase: strings.ToUpper(hex.EncodeToString(b[:])),
	}
	h.verifier = &sigv4.Verifier{Lookup: cfg.Lookup, Now: cfg.Now, VirtualHostBucket: h.vhostBucket, MaxPresignV2: cfg.MaxPresignV2}
	return h
}

// levelAtLeast reports whether every node of the cluster runs a build at feature level l
// or later (Config.FeatureLevel).
func (h *Handler) levelAtLeast(l int) bool {
	return h.cfg.FeatureLevel == nil || h.cfg.FeatureLevel() >= l
}

// vhostBucket returns the bucket named by a virtual-host-style Host header, or "".
func (h *Handler) vhostBucket(r *http.Request) string {
	host := r.Host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		host = hh
	}
	host = strings.ToLower(host)
	for _, d := range h.cfg.Domains {
		if b, ok := strings.CutSuffix(host, "."+d); ok && b != "" {
			return b
		}
	}
	return ""
}

// request is the per-request state shared by the handlers.
type request struct {
	id       string
	op       string
	bucket   string
	key      string
	status   int
	code     string
	bytesIn  int64
	bytesOut int64
	auth     *sigv4.Result
	who      Principal // who signed the request
	full     bool      // who may do everything in the request's bucket (authorize)
	// bkt is the request's bucket if authorize looked it up (a principal other than the
	// root user); objectACL the permission only the object's ACL can give the request
	// (acl.go: checkObjectACL), 0 if none is needed.
	bkt       object.Bucket
	hasBkt    bool
	objectACL perm
}

type countingWriter struct {
	http.ResponseWriter
	rc     *http.ResponseController
	idle   time.Duration
	n      int64
	status int
}

func (c *countingWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = 200
	}
	c.rc.SetWriteDeadline(time.Now().Add(c.idle))
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) WriteHeader(code int) {
	if c.status == 0 && code >= 200 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

// ReadFrom keeps the sendfile/splice fast path of the underlying writer reachable.
func (c *countingWriter) ReadFrom(r io.Reader) (int64, error) {
	if c.status == 0 {
		c.status = 200
	}
	n, err := io.Copy(c.ResponseWriter, r)
	c.n += n
	return n, err
}

func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// idleBody extends the connection's read deadline before every read of a request body, so a
// client that stops sending is cut off after the idle timeout however large its upload.
type idleBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	idle time.Duration
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.rc.SetReadDeadline(time.Now().Add(b.idle))
	return b.ReadCloser.Read(p)
}

// requestID is a new request id: the handler's random base and a counter, as
// fmt.Sprintf("%s%012X", base, n) gives, in one allocation.
func (h *Handler) requestID() string {
	var b [64]byte
	id := append(b[:0], h.reqBase...)
	n := h.reqSeq.Add(1)
	var digits [16]byte
	d := strconv.AppendUint(digits[:0], n, 16)
	for i := len(d); i < 12; i++ {
		id = append(id, '0')
	}
	for _, c := range d {
		if c >= 'a' {
			c -= 'a' - 'A'
		}
		id = append(id, c)
	}
	return string(id)
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rq := &request{id: h.requestID()}
	rc := http.NewResponseController(rw)
	w := &countingWriter{ResponseWriter: rw, rc: rc, idle: h.cfg.IdleTimeout}
	rc.SetWriteDeadline(time.Now().Add(h.cfg.IdleTimeout)) // clear what an earlier request on this connection left
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &idleBody{ReadCloser: r.Body, rc: rc, idle: h.cfg.IdleTimeout}
	}
	hd := w.Header()
	v := []string{rq.id, "cairn"} // one array for the headers every answer has
	hd["X-Amz-Request-Id"], hd["X-Amz-Id-2"], hd["Server"] = v[0:1:1], v[0:1:1], v[1:2:2]
	defer func() {
		if v := recover(); v != nil {
			h.log.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "panic", v)
			if w.status == 0 {
				h.writeError(w, r, rq, errInternal)
			}
		}
		if rq.status == 0 {
			rq.status = w.status
		}
		if h.cfg.Observer != nil {
			h.cfg.Observer.ObserveRequest(rq.op, rq.status, time.Since(start), rq.bytesIn, w.n)
		}
		if h.cfg.AccessLog != nil {
			h.cfg.AccessLog(h.accessRecord(r, rq, start, w.n))
		}
	}()
	rq.bucket, rq.key = h.bucketAndKey(r)
	rq.op = operation(r, rq.bucket, rq.key)
	if (rq.op == "PutObject" || rq.op == "UploadPart") && declaredLength(r) > h.cfg.MaxObjectSize {
		// Refused before anything else, without reading the body: the connection is
		// closed after the answer.
		h.writeError(w, r, rq, errEntityTooLarge)
		return
	}
	switch rq.op {
	case "Preflight":
		// Browsers send no credentials with a preflight, and it carries the query of the
		// request it asks about, which the refusal table judges when that one comes.
		if err := h.preflight(w, r, rq); err != nil {
			h.writeError(w, r, rq, err)
		}
		return
	case "PostObject":
		// A browser upload is authenticated by the signed policy in its form (postObject);
		// the page reads the answer, refusals included, only with the CORS headers, which
		// come from this node's map alone (the form is not verified yet).
		h.corsHeaders(w, r, rq, true)
	default:
		auth, err := h.verifier.Verify(r)
		switch {
		case err == sigv4.ErrAnonymous:
			// No credentials: a bucket policy may allow it (authorize decides). Its body is
			// decoded as its x-amz-content-sha256 says (SDKs send unsigned uploads
			// aws-chunked, with a trailing checksum).
			if auth, err = sigv4.UnsignedBody(r); err != nil {
				h.writeError(w, r, rq, err)
				return
			}
			rq.who = Principal{Anonymous: true}
		case err != nil:
			h.writeError(w, r, rq, err)
			return
		default:
			rq.who = h.principal(auth.AccessKey)
		}
		rq.auth = auth
		// After authentication: an anonymous request must not cost a bucket lookup (which
		// may ask the Raft leader about a bucket this node does not know).
		h.corsHeaders(w, r, rq, rq.who.Anonymous)
	}
	if err := checkFeatures(r, rq.op); err != nil {
		h.writeError(w, r, rq, err)
		return
	}
	if r.ContentLength == 0 && strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		// net/http sends "100 Continue" only when a body is read; some clients (the
		// botocore bundled with aws cli v1) then misparse the next response on the
		// connection. Answer the expectation explicitly.
		w.WriteHeader(http.StatusContinue)
	}
	if err := h.route(w, r, rq); err != nil {
		h.writeError(w, r, rq, err)
	}
}

// bucketAndKey finds the bucket and key, virtual-host style first, then path style.
func (h *Handler) bucketAndKey(r *http.Request) (bucket, key string) {
	if b := h.vhostBucket(r); b != "" {
		return b, strings.TrimPrefix(r.URL.Path, "/")
	}
	path := strings.TrimPrefix(r.URL.Path, "/")
	bucket, key, _ = strings.Cut(path, "/")
	return bucket, key
}

// queryOf is r's parsed query, nil (which reads as empty) if it has none: most GETs have
// none, and parsing allocates. The result must not be modified.
func queryOf(r *http.Request) url.Values {
	if r.URL.RawQuery == "" {
		return nil
	}
	return r.URL.Query()
}

// operation names the S3 operation, for routing, metrics and logs.
func operation(r *http.Request, bucket, key string) string {
	q := queryOf(r)
	has := func(k string) bool { _, ok := q[k]; return ok }
	switch {
	case bucket == "":
		if r.Method == http.MethodGet {
			return "ListBuckets"
		}
	case key == "":
		switch r.Method {
		case http.MethodGet:
			switch {
			case has("location"):
				return "GetBucketLocation"
			case has("uploads"):
				return "ListMultipartUploads"
			case has("versioning"):
				return "GetBucketVersioning"
			case has("acl"):
				return "GetBucketAcl"
			case has("versions"):
				return "ListObjectVersions"
			case has("tagging"):
				return "GetBucketTagging"
			case has("cors"):
				return "GetBucketCors"
			case has("ownershipControls"):
				return "GetBucketOwnershipControls"
			case has("policy"):
				return "GetBucketPolicy"
			case has("policyStatus"):
				return "GetBucketPolicyStatus"
			case has("publicAccessBlock"):
				return "GetPublicAccessBlock"
			case has("logging"):
				return "GetBucketLogging"
			case has("object-lock"):
				return "GetObjectLockConfiguration"
			case has("encryption"):
				return "GetBucketEncryption"
			case has("lifecycle"):
				return "GetBucketLifecycleConfiguration"
			case has("notification"):
				return "GetBucketNotificationConfiguration"
			case has("replication"), has("website"),
				has("accelerate"), has("requestPayment"):
				return "Unsupported"
			case q.Get("list-type") == "2":
				return "ListObjectsV2"
			}
			return "ListObjects"
		case http.MethodPut:
			switch {
			case has("tagging"):
				return "PutBucketTagging"
			case has("cors"):
				return "PutBucketCors"
			case has("lifecycle"):
				return "PutBucketLifecycleConfiguration"
			case has("ownershipControls"):
				return "PutBucketOwnershipControls"
			case has("acl"):
				return "PutBucketAcl"
			case has("policy"):
				return "PutBucketPolicy"
			case has("publicAccessBlock"):
				return "PutPublicAccessBlock"
			case has("logging"):
				return "PutBucketLogging"
			case has("versioning"):
				return "PutBucketVersioning"
			case has("object-lock"):
				return "PutObjectLockConfiguration"
			case has("encryption"):
				return "PutBucketEncryption"
			case has("notification"):
				return "PutBucketNotificationConfiguration"
			}
			return "CreateBucket" // other sub-resources are refused by the feature table
		case http.MethodHead:
			return "HeadBucket"
		case http.MethodDelete:
			switch {
			case has("tagging"):
				return "DeleteBucketTagging"
			case has("cors"):
				return "DeleteBucketCors"
			case has("lifecycle"):
				return "DeleteBucketLifecycle"
			case has("policy"):
				return "DeleteBucketPolicy"
			case has("publicAccessBlock"):
				return "DeletePublicAccessBlock"
			case has("encryption"):
				return "DeleteBucketEncryption"
			case has("ownershipControls"):
				return "DeleteBucketOwnershipControls"
			}
			return "DeleteBucket"
		case http.MethodPost:
			if has("delete") {
				return "DeleteObjects"
			}
			if len(q) == 0 {
				return "PostObject" // a browser upload (multipart/form-data)
			}
		case http.MethodOptions:
			return "Preflight"
		}
	default:
		switch r.Method {
		case http.MethodPut:
			switch {
			case has("uploadId") && r.Header.Get("x-amz-copy-source") != "":
				return "UploadPartCopy"
			case has("uploadId"):
				return "UploadPart"
			case has("tagging"):
				return "PutObjectTagging"
			case has("retention"):
				return "PutObjectRetention"
			case has("legal-hold"):
				return "PutObjectLegalHold"
			case has("acl"):
				return "PutObjectAcl"
			case r.Header.Get("x-amz-copy-source") != "":
				return "CopyObject"
			}
			return "PutObject"
		case http.MethodGet:
			switch {
			case has("uploadId"):
				return "ListParts"
			case has("acl"):
				return "GetObjectAcl"
			case has("tagging"):
				return "GetObjectTagging"
			case has("attributes"):
				return "GetObjectAttributes"
			case has("retention"):
				return "GetObjectRetention"
			case has("legal-hold"):
				return "GetObjectLegalHold"
			case has("torrent"):
				return "Unsupported"
			}
			return "GetObject"
		case http.MethodHead:
			return "HeadObject"
		case http.MethodDelete:
			if has("uploadId") {
				return "AbortMultipartUpload"
			}
			if has("tagging") {
				return "DeleteObjectTagging"
			}
			return "DeleteObject"
		case http.MethodPost:
			switch {
			case has("uploads"):
				return "CreateMultipartUpload"
			case has("uploadId"):
				return "CompleteMultipartUpload"
			case has("restore"):
				return "RestoreObject"
			}
		case http.MethodOptions:
			return "Preflight"
		}
	}
	return "Unknown"
}

func (h *Handler) route(w http.ResponseWriter, r *http.Request, rq *request) error {
	if err := h.authorize(r, rq); err != nil {
		return err
	}
	if rq.bucket != "" && rq.op != "CreateBucket" && !validBucketName(rq.bucket) {
		// An invalid name cannot exist.
		return errNoSuchBucket
	}
	if len(rq.key) > 1024 {
		return errKeyTooLong
	}
	switch rq.op {
	case "ListBuckets":
		return h.listBuckets(w, r, rq)
	case "CreateBucket":
		return h.createBucket(w, r, rq)
	case "HeadBucket":
		return h.headBucket(w, r, rq)
	case "DeleteBucket":
		return h.deleteBucket(w, r, rq)
	case "GetBucketLocation":
		return h.getBucketLocation(w, r, rq)
	case "GetBucketVersioning":
		return h.getBucketVersioning(w, r, rq)
	case "PutBucketVersioning":
		return h.putBucketVersioning(w, r, rq)
	case "GetObjectLockConfiguration":
		return h.getObjectLockConfiguration(w, r, rq)
	case "PutObjectLockConfiguration":
		return h.putObjectLockConfiguration(w, r, rq)
	case "GetObjectRetention":
		return h.getObjectRetention(w, r, rq)
	case "PutObjectRetention":
		return h.putObjectRetention(w, r, rq)
	case "GetObjectLegalHold":
		return h.getObjectLegalHold(w, r, rq)
	case "PutObjectLegalHold":
		return h.putObjectLegalHold(w, r, rq)
	case "GetBucketAcl", "GetObjectAcl":
		return h.getACL(w, r, rq)
	case "GetBucketOwnershipControls":
		return h.getOwnershipControls(w, r, rq)
	case "GetBucketPolicy", "PutBucketPolicy", "DeleteBucketPolicy", "GetBucketPolicyStatus":
		return h.bucketPolicy(w, r, rq)
	case "GetPublicAccessBlock", "PutPublicAccessBlock", "DeletePublicAccessBlock":
		return h.publicAccessBlock(w, r, rq)
	case "GetBucketLogging", "PutBucketLogging":
		return h.bucketLogging(w, r, rq)
	case "PutBucketOwnershipControls":
		return h.putOwnershipControls(w, r, rq)
	case "DeleteBucketOwnershipControls":
		return h.deleteOwnershipControls(w, r, rq)
	case "PutBucketAcl":
		return h.putBucketACL(w, r, rq)
	case "PutObjectAcl":
		return h.putObjectACL(w, r, rq)
	case "ListObjects":
		return h.listObjects(w, r, rq, false)
	case "ListObjectsV2":
		return h.listObjects(w, r, rq, true)
	case "ListObjectVersions":
		return h.listObjectVersions(w, r, rq)
	case "ListMultipartUploads":
		return h.listUploads(w, r, rq)
	case "DeleteObjects":
		return h.deleteObjects(w, r, rq)
	case "PutObject":
		return h.putObject(w, r, rq)
	case "CopyObject":
		return h.copyObject(w, r, rq)
	case "GetObject", "HeadObject":
		return h.getObject(w, r, rq)
	case "RestoreObject":
		return h.restoreObject(w, r, rq)
	case "DeleteObject":
		return h.deleteObject(w, r, rq)
	case "CreateMultipartUpload":
		return h.createUpload(w, r, rq)
	case "UploadPart", "UploadPartCopy":
		return h.uploadPart(w, r, rq)
	case "CompleteMultipartUpload":
		return h.completeUpload(w, r, rq)
	case "AbortMultipartUpload":
		return h.abortUpload(w, r, rq)
	case "ListParts":
		return h.listParts(w, r, rq)
	case "GetObjectAttributes":
		return h.getObjectAttributes(w, r, rq)
	case "PutObjectTagging":
		return h.putObjectTagging(w, r, rq)
	case "GetObjectTagging":
		return h.getObjectTagging(w, r, rq)
	case "DeleteObjectTagging":
		return h.deleteObjectTagging(w, r, rq)
	case "PutBucketTagging":
		return h.putBucketTagging(w, r, rq)
	case "GetBucketTagging":
		return h.getBucketTagging(w, r, rq)
	case "DeleteBucketTagging":
		return h.deleteBucketTagging(w, r, rq)
	case "PutBucketCors":
		return h.putBucketCors(w, r, rq)
	case "GetBucketCors":
		return h.getBucketCors(w, r, rq)
	case "DeleteBucketCors":
		return h.deleteBucketCors(w, r, rq)
	case "PutBucketLifecycleConfiguration":
		return h.putBucketLifecycle(w, r, rq)
	case "GetBucketLifecycleConfiguration":
		return h.getBucketLifecycle(w, r, rq)
	case "DeleteBucketLifecycle":
		return h.deleteBucketLifecycle(w, r, rq)
	case "PostObject":
		return h.postObject(w, r, rq)
	case "PutBucketEncryption":
		return h.putBucketEncryption(w, r, rq)
	case "GetBucketEncryption":
		return h.getBucketEncryption(w, r, rq)
	case "DeleteBucketEncryption":
		return h.deleteBucketEncryption(w, r, rq)
	case "Preflight":
		return h.preflight(w, r, rq)
	case "PutBucketNotificationConfiguration":
		return h.putBucketNotification(w, r, rq)
	case "GetBucketNotificationConfiguration":
		return h.getBucketNotification(w, r, rq)
	case "Unsupported":
		return errNotImplemented
	}
	return errMethodNotAllowed
}

// declaredLength is the body length a request declares: x-amz-decoded-content-length for
// aws-chunked bodies, else Content-Length (-1 if neither).
func declaredLength(r *http.Request) int64 {
	if v := r.Header.Get("X-Amz-Decoded-Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	}
	return r.ContentLength
}

// writeXML sends v as an XML document with status 200.
func writeXML(w http.ResponseWriter, v any) error {
	out, err := xml.Marshal(v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(xml.Header)+len(out)))
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, xml.Header)
	_, err = w.Write(out)
	return err
}

// readXML decodes a small XML request body into v, after checking it against the digests
// the request declares.
func readXML(r *http.Request, rq *request, limit int64, v any) error {
	data, err := readBody(r, rq, limit)
	if err != nil {
		return err
	}
	if err := xml.Unmarshal(data, v); err != nil {
		return errMalformedXML
	}
	return nil
}

// readBody reads a small XML request body whole, after checking it against the digests
// the request declares.
func readBody(r *http.Request, rq *request, limit int64) ([]byte, error) {
	body, err := xmlBodyCheck(r, rq)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, errf(400, "MalformedXML", "The XML you provided was larger than %d bytes.", limit)
	}
	if err := body.finish(&object.Object{}); err != nil {
		return nil, err
	}
	rq.bytesIn += int64(len(data))
	return data, nil
}

// validBucketName applies S3's bucket naming rules.
func validBucketName(b string) bool {
	if len(b) < 3 || len(b) > 63 {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' || c == '.':
			if i == 0 || i == len(b)-1 {
				return false
			}
		default:
			return false
		}
	}
	if strings.Contains(b, "..") || strings.Contains(b, ".-") || strings.Contains(b, "-.") {
		return false
	}
	if strings.Trim(b, "0123456789.") == "" && net.ParseIP(b) != nil {
		return false // only digits and dots can be an IPv4 address; no ':' gets here
	}
	if strings.HasPrefix(b, "xn--") || strings.HasSuffix(b, "-s3alias") {
		return false
	}
	return true
}

const s3Time = "2006-01-02T15:04:05.000Z"

func isoTime(t time.Time) string { return t.UTC().Format(s3Time) }

func quote(etag string) string { return `"` + etag + `"` }
