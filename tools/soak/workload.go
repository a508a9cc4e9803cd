package main

import (
	"bytes"
	"context"
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
	_, err := n.client.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(o.key),
		Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))), Metadata: map[string]string{metaKey: o.id},
		StorageClass: types.StorageClass(o.class)})
	o.end = time.Now()
	w.finishWrite(o, err)
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
	out, err := n.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
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
