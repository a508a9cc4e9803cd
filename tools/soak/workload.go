package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

const (
	bucket  = "soak"
	metaKey = "soak-id" // x-amz-meta-soak-id: the value id of the body
)

// A value is one body written for a key. Its bytes are a function of key, id and size:
// the first size bytes of a header line naming them, followed by pseudo-random bytes
// seeded by key and id. A read is verified by regenerating the value its id names.
type value struct {
	key   string
	id    string
	size  int
	class string // the storage class it was written with ("" for STANDARD)
	part  int    // written by a multipart upload in parts of this many bytes (0: one PUT)
}

// etag is the ETag S3 gives the value: the MD5 of its bytes, or for a multipart upload
// the MD5 of its parts' MD5s and the part count.
func (v *value) etag() string {
	b := v.bytes()
	if v.part == 0 {
		return md5hex(b)
	}
	h := md5.New()
	n := 0
	for off := 0; off < len(b); off += v.part {
		s := md5.Sum(b[off:min(off+v.part, len(b))])
		h.Write(s[:])
		n++
	}
	return fmt.Sprintf("%x-%d", h.Sum(nil), n)
}

func (v *value) bytes() []byte {
	out := make([]byte, 0, v.size+8)
	out = append(out, fmt.Sprintf("cairn-soak key=%s id=%s size=%d\n", v.key, v.id, v.size)...)
	h := fnv.New64a()
	io.WriteString(h, v.key+"\x00"+v.id)
	r := rand.New(rand.NewPCG(h.Sum64(), uint64(v.size)))
	for len(out) < v.size {
		x := r.Uint64()
		for i := 0; i < 8; i++ {
			out = append(out, byte(x>>(8*i)))
		}
	}
	return out[:v.size]
}

// outcome is what a client learned about a write.
type outcome int

const (
	acked   outcome = iota // 2xx: durable on a write quorum
	failed                 // the server answered with an error: it may have been applied, but with a version assigned before the answer
	unknown                // no answer (timeout, connection reset): it may take effect at any later time
	notSent                // the connection was refused: the request never reached a server
)

func (o outcome) String() string {
	return [...]string{"acked", "failed", "unknown", "not sent"}[o]
}

// op is one client operation on one key.
type op struct {
	client  int
	seq     int
	node    string
	key     string
	kind    string // put, del, get
	id      string // put: the value written; get: the value read ("" = not found)
	size    int
	class   string // put: the storage class ("" for STANDARD)
	start   time.Time
	end     time.Time
	outcome outcome // writes; a get is recorded only when it was answered (acked)
	err     string
}

func (o *op) String() string {
	s := fmt.Sprintf("%s-%s c%d %s via %s", o.start.Format("15:04:05.000000"), o.end.Format("15:04:05.000000"), o.client, o.kind, o.node)
	switch o.kind {
	case "put":
		s += fmt.Sprintf(" %s (%d B)", o.id, o.size)
		if o.class != "" {
			s += " class " + o.class
		}
	case "get":
		if o.id == "" {
			s += " -> not found"
		} else {
			s += " -> " + o.id
		}
	}
	if o.kind != "get" {
		s += " " + o.outcome.String()
	}
	if o.err != "" {
		s += ": " + o.err
	}
	return s
}

// history is every operation of the run, by key, and every value written.
type history struct {
	mu     sync.Mutex
	ops    map[string][]*op
	values map[string]*value // by id
	stats  map[string]int    // counters for the summary
	errs   map[string]int    // error kinds
	sample map[string]string // error kind -> the first such error, for the summary
	bad    []string          // violations seen while running (corrupt reads)
	// completed are the multipart uploads whose Complete was acknowledged.
	completed []*upload
	// versions are the acknowledged writes' versions (--versioned).
	versions []written
}

// written is an acknowledged write's version: key, version id, value id.
type written struct{ key, vid, id string }

// version notes the version an acknowledged write of value id to key answered.
func (h *history) version(key, vid, id string) {
	if vid == "" {
		return
	}
	h.mu.Lock()
	h.versions = append(h.versions, written{key, vid, id})
	h.mu.Unlock()
}

func newHistory() *history {
	return &history{ops: map[string][]*op{}, values: map[string]*value{}, stats: map[string]int{}, errs: map[string]int{}, sample: map[string]string{}}
}

func (h *history) add(o *op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops[o.key] = append(h.ops[o.key], o)
}

func (h *history) count(name string, n int) {
	h.mu.Lock()
	h.stats[name] += n
	h.mu.Unlock()
}

// failure counts an error of the given kind and keeps the first one of each kind.
func (h *history) failure(kind string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs[kind]++
	if _, ok := h.sample[kind]; !ok {
		h.sample[kind] = err.Error()
	}
}

func (h *history) violation(format string, args ...any) {
	h.mu.Lock()
	h.bad = append(h.bad, fmt.Sprintf(format, args...))
	h.mu.Unlock()
}

// lastAckedPut reports whether the key's latest acknowledged write (by end time) is a put.
func (h *history) lastAckedPut(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	var last *op
	for _, o := range h.ops[key] {
		if o.kind != "get" && o.outcome == acked && (last == nil || o.end.After(last.end)) {
			last = o
		}
	}
	return last != nil && last.kind == "put"
}

// writes returns the key's put and delete operations.
func (h *history) writes(key string) []*op {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*op
	for _, o := range h.ops[key] {
		if o.kind != "get" {
			out = append(out, o)
		}
	}
	return out
}

// identify verifies a body read for key: the value id named by its metadata (or its
// header) must be a value written for key, and the body must be exactly that value. It
// returns the id, or an error describing the corruption.
func (h *history) identify(key, metaID, class string, body []byte) (string, error) {
	id := metaID
	if id == "" {
		// No metadata: fall back to the header, for the report.
		line, _, _ := bytes.Cut(body, []byte("\n"))
		for _, f := range strings.Fields(string(line)) {
			if v, ok := strings.CutPrefix(f, "id="); ok {
				id = v
			}
		}
		if id == "" {
			return "", fmt.Errorf("body of %d bytes without %s metadata or a soak header (starts %q)", len(body), metaKey, prefix(body, 40))
		}
		if !bytes.HasPrefix(body, []byte("cairn-soak key=")) {
			return "", fmt.Errorf("body of %d bytes without %s metadata", len(body), metaKey)
		}
	}
	h.mu.Lock()
	v := h.values[id]
	h.mu.Unlock()
	if v == nil {
		return "", fmt.Errorf("value id %q was never written (body of %d bytes, starts %q)", id, len(body), prefix(body, 40))
	}
	if v.key != key {
		return "", fmt.Errorf("value %s belongs to key %s", id, v.key)
	}
	want := v.bytes()
	if !bytes.Equal(body, want) {
		at := 0
		for at < len(body) && at < len(want) && body[at] == want[at] {
			at++
		}
		return "", fmt.Errorf("body differs from value %s: %d bytes, want %d, first difference at offset %d (body starts %q)", id, len(body), len(want), at, prefix(body, 40))
	}
	if metaID == "" {
		return "", fmt.Errorf("body is value %s but the %s metadata is missing", id, metaKey)
	}
	if class == "STANDARD" {
		class = ""
	}
	if class != v.class {
		return "", fmt.Errorf("value %s was written in storage class %s but reads as %s", id, className(v.class), className(class))
	}
	return id, nil
}

func className(c string) string {
	if c == "" {
		return "STANDARD"
	}
	return c
}

func prefix(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(b)
}

// classify maps a request error to an outcome and a short kind for the summary.
func classify(err error) (outcome, string) {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() != 0 { // 0: the request could not be sent or its answer read
		kind := fmt.Sprint(re.HTTPStatusCode())
		var ae smithy.APIError
		if errors.As(err, &ae) && ae.ErrorCode() != "" {
			kind += " " + ae.ErrorCode()
		}
		return failed, kind
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return notSent, "connection refused"
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || strings.Contains(err.Error(), "Client.Timeout"):
		return unknown, "timeout"
	case errors.Is(err, syscall.ECONNRESET):
		return unknown, "connection reset"
	case errors.Is(err, syscall.EPIPE):
		return unknown, "broken pipe"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return unknown, "connection closed (EOF)"
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:] // the innermost cause
	}
	return unknown, "other: " + msg
}

// workload runs the clients until ctx is done.
type workload struct {
	cfg    *config
	cl     *cluster
	h      *history
	faults *faults
	keys   []string
}

func newWorkload(cfg *config, cl *cluster, h *history, f *faults) *workload {
	w := &workload{cfg: cfg, cl: cl, h: h, faults: f}
	for i := 0; i < cfg.keys; i++ {
		w.keys = append(w.keys, fmt.Sprintf("k%04d", i))
	}
	return w
}

func (w *workload) run(ctx context.Context) {
	var wg sync.WaitGroup
	for c := 0; c < w.cfg.clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.client(ctx, c)
		}()
	}
	wg.Wait()
}

// size draws an object size: half of them up to 4 KiB, 30% up to 128 KiB (bodies stored
// inline in the index), the rest up to --max-size (chunks in segments).
func (w *workload) size(r *rand.Rand) int {
	switch p := r.IntN(10); {
	case p < 5:
		return r.IntN(min(4<<10, w.cfg.maxSize) + 1)
	case p < 8:
		return r.IntN(min(128<<10, w.cfg.maxSize) + 1)
	default:
		return r.IntN(w.cfg.maxSize + 1)
	}
}

func (w *workload) client(ctx context.Context, c int) {
	r := rand.New(rand.NewPCG(w.cfg.seed, uint64(c)+1))
	for seq := 0; ctx.Err() == nil; seq++ {
		key := w.keys[r.IntN(len(w.keys))]
		n := w.cl.nodes[w.faults.pickGateway(r)]
		o := &op{client: c, seq: seq, node: n.id, key: key}
		p := r.IntN(100)
		switch {
		case p < w.cfg.multipart:
			w.multipart(n, o, r)
		case p < 2*w.cfg.multipart:
			w.retryUpload(n, r)
		case p < 45:
			w.put(n, o, r)
		case p < 60:
			w.del(n, o)
		default:
			w.get(n, o)
		}
	}
}

func (w *workload) put(n *node, o *op, r *rand.Rand) {
	o.kind, o.id, o.size = "put", fmt.Sprintf("c%d-%d", o.client, o.seq), w.size(r)
	if w.cfg.class != "" && r.IntN(2) == 0 {
		o.class = soakClass
	}
	v := &value{key: o.key, id: o.id, size: o.size, class: o.class}
	body := v.bytes()
	overwrite := w.h.lastAckedPut(o.key)
	w.h.mu.Lock()
	w.h.values[o.id] = v
	w.h.mu.Unlock()
	o.start = time.Now()
	out, err := n.client.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(o.key),
		Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))), Metadata: map[string]string{metaKey: o.id},
		StorageClass: types.StorageClass(o.class)})
	o.end = time.Now()
	w.finishWrite(o, err)
	if err == nil && w.cfg.versioned {
		w.h.version(o.key, aws.ToString(out.VersionId), o.id)
	}
	if o.class != "" {
		w.h.count("put class "+o.class+" "+o.outcome.String(), 1)
	}
	if overwrite {
		w.h.count("put (overwrite)", 1)
	} else {
		w.h.count("put (new)", 1)
	}
}

func (w *workload) del(n *node, o *op) {
	o.kind = "del"
	o.start = time.Now()
	_, err := n.client.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(o.key)})
	o.end = time.Now()
	w.finishWrite(o, err)
	w.h.count("delete", 1)
}

func (w *workload) finishWrite(o *op, err error) {
	if err != nil {
		var kind string
		o.outcome, kind = classify(err)
		o.err = kind
		w.h.failure(o.kind+": "+kind, err)
	}
	w.h.count(o.kind+" "+o.outcome.String(), 1)
	w.h.add(o)
}

func (w *workload) get(n *node, o *op) {
	o.kind = "get"
	w.h.count("get", 1)
	o.start = time.Now()
	id, found, err := w.read(context.Background(), n, o.key)
	o.end = time.Now()
	switch {
	case err != nil && errors.Is(err, errCorrupt):
		w.h.violation("corrupt read of %s via %s at %s: %v", o.key, n.id, o.start.Format("15:04:05.000"), err)
		w.h.count("get corrupt", 1)
		return
	case err != nil:
		_, kind := classify(err)
		w.h.failure("get: "+kind, err)
		w.h.count("get failed", 1)
		return
	}
	if found {
		o.id = id
		w.h.count("get found", 1)
	} else {
		w.h.count("get not found", 1)
	}
	w.h.add(o)
}

var errCorrupt = errors.New("corrupt")

// read GETs key through n: the value id it holds (verified byte for byte), or found =
// false for 404. A body that is not exactly a value written for key is errCorrupt.
func (w *workload) read(ctx context.Context, n *node, key string) (id string, found bool, err error) {
	return w.readVersion(ctx, n, key, "")
}

// readVersion is read of version vid of key ("": the current one).
func (w *workload) readVersion(ctx context.Context, n *node, key, vid string) (id string, found bool, err error) {
	in := &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}
	if vid != "" {
		in.VersionId = aws.String(vid)
	}
	out, err := n.client.GetObject(ctx, in)
	if err != nil {
		var ae smithy.APIError
		if errors.As(err, &ae) && ae.ErrorCode() == "NoSuchKey" {
			return "", false, nil
		}
		return "", false, err
	}
	defer out.Body.Close()
	body, err := io.ReadAll(out.Body)
	if err != nil && strings.Contains(err.Error(), "checksum did not match") {
		return "", true, fmt.Errorf("%w: %v", errCorrupt, err) // the SDK checked the stored checksum
	}
	if err != nil {
		return "", false, err // a cut-off body is an error, not a corruption
	}
	id, err = w.h.identify(key, out.Metadata[metaKey], string(out.StorageClass), body)
	if err != nil {
		return "", true, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	return id, true, nil
}

// summary lines of the counters, sorted.
func sortedCounts(m map[string]int) []string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(out)
	return out
}

// mpuPart is the part size of multipart values: S3's smallest part but the last.
const mpuPart = 5 << 20

// multipart writes a value of two parts (5 MiB and up to 64 KiB) by a multipart upload.
// The Complete is the write (its version is chosen then); an upload whose parts could
// not be stored is aborted and writes nothing. A completed upload is later probed as a
// client retrying after a timeout would: the same Complete must answer 200 with the
// same ETag and write nothing (a new version would bring the value back over later
// writes, which the checker sees as a stale read), and any other Complete or UploadPart
// on it must answer NoSuchUpload (a truncated object would read as corrupt).
func (w *workload) multipart(n *node, o *op, r *rand.Rand) {
	o.kind, o.id, o.size = "put", fmt.Sprintf("c%d-%d", o.client, o.seq), mpuPart+1+r.IntN(64<<10)
	if w.cfg.class != "" && r.IntN(2) == 0 {
		o.class = soakClass
	}
	v := &value{key: o.key, id: o.id, size: o.size, class: o.class, part: mpuPart}
	body := v.bytes()
	w.h.mu.Lock()
	w.h.values[o.id] = v
	w.h.mu.Unlock()
	ctx := context.Background()
	cr, err := n.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(o.key),
		Metadata: map[string]string{metaKey: o.id}, StorageClass: types.StorageClass(o.class)})
	if err != nil {
		_, kind := classify(err)
		w.h.failure("multipart create: "+kind, err)
		w.h.count("multipart abandoned", 1)
		return
	}
	up := &upload{key: o.key, id: aws.ToString(cr.UploadId), value: v}
	for i, off := 0, 0; off < len(body); i, off = i+1, off+mpuPart {
		part := body[off:min(off+mpuPart, len(body))]
		pr, err := n.client.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(o.key), UploadId: cr.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(part), ContentLength: aws.Int64(int64(len(part)))})
		if err != nil {
			_, kind := classify(err)
			w.h.failure("multipart part: "+kind, err)
			w.h.count("multipart abandoned", 1)
			n.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(o.key), UploadId: cr.UploadId})
			return
		}
		up.parts = append(up.parts, types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: pr.ETag})
	}
	o.start = time.Now()
	res, err := w.complete(n, up, up.parts)
	o.end = time.Now()
	w.finishWrite(o, err)
	w.h.count("multipart "+o.outcome.String(), 1)
	switch {
	case err == nil && strings.Trim(aws.ToString(res.ETag), `"`) != v.etag():
		w.h.violation("multipart %s of %s via %s: Complete answered ETag %s, want %s", up.id, o.key, n.id, aws.ToString(res.ETag), v.etag())
	case err == nil:
		w.h.mu.Lock()
		w.h.completed = append(w.h.completed, up)
		w.h.mu.Unlock()
		if w.cfg.versioned {
			w.h.version(o.key, aws.ToString(res.VersionId), o.id)
		}
	}
}

// upload is a multipart upload a client completed.
type upload struct {
	key, id string
	value   *value
	parts   []types.CompletedPart
}

func (w *workload) complete(n *node, up *upload, parts []types.CompletedPart) (*s3.CompleteMultipartUploadOutput, error) {
	return n.client.CompleteMultipartUpload(context.Background(), &s3.CompleteMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(up.key),
		UploadId: aws.String(up.id), MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
}

// retryUpload probes a completed upload through n, as a client retrying would: the same
// Complete (200, the same ETag, no new version), a Complete with only its first part,
// and an UploadPart (both NoSuchUpload). Errors other than those answers (a node down)
// are counted, not violations: the client would retry them.
func (w *workload) retryUpload(n *node, r *rand.Rand) {
	w.h.mu.Lock()
	if len(w.h.completed) == 0 {
		w.h.mu.Unlock()
		return
	}
	up := w.h.completed[r.IntN(len(w.h.completed))]
	w.h.mu.Unlock()
	noSuchUpload := func(err error) bool {
		var ae smithy.APIError
		return errors.As(err, &ae) && ae.ErrorCode() == "NoSuchUpload"
	}
	switch r.IntN(3) {
	case 0:
		res, err := w.complete(n, up, up.parts)
		switch {
		case err == nil && strings.Trim(aws.ToString(res.ETag), `"`) != up.value.etag():
			w.h.violation("retried Complete of %s (%s) via %s answered ETag %s, want %s", up.id, up.key, n.id, aws.ToString(res.ETag), up.value.etag())
		case err == nil:
			w.h.count("multipart retry: 200", 1)
		case noSuchUpload(err):
			w.h.violation("retried Complete of %s (%s) with its own parts via %s answered NoSuchUpload, want 200", up.id, up.key, n.id)
		default:
			_, kind := classify(err)
			w.h.count("multipart retry: "+kind, 1)
		}
	case 1:
		_, err := w.complete(n, up, up.parts[:1])
		switch {
		case err == nil:
			w.h.violation("Complete of finished upload %s (%s) with another part list via %s answered 200, want NoSuchUpload", up.id, up.key, n.id)
		case noSuchUpload(err):
			w.h.count("multipart other list: NoSuchUpload", 1)
		default:
			_, kind := classify(err)
			w.h.count("multipart other list: "+kind, 1)
		}
	default:
		_, err := n.client.UploadPart(context.Background(), &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(up.key), UploadId: aws.String(up.id),
			PartNumber: aws.Int32(3), Body: bytes.NewReader([]byte("late")), ContentLength: aws.Int64(4)})
		switch {
		case err == nil:
			w.h.violation("UploadPart into finished upload %s (%s) via %s answered 200, want NoSuchUpload", up.id, up.key, n.id)
		case noSuchUpload(err):
			w.h.count("multipart late part: NoSuchUpload", 1)
		default:
			_, kind := classify(err)
			w.h.count("multipart late part: "+kind, 1)
		}
	}
}
