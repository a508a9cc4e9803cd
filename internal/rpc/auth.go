// Package rpc is cairn's node-to-node transport: HTTP/1.1 with keep-alive on the node
// address, every request signed with the cluster secret (HMAC-SHA256 over the method, path,
// query, sender, map epoch and time), object operations additionally carrying a short-lived
// capability that names the bucket, key and operation (AFS/OSD's handles: storage nodes do
// not know users, only the cluster secret). The same listener also carries Raft traffic,
// told apart by its first bytes (see Mux). Bodies stream in both directions; nothing here
// buffers an object.
package rpc

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/wire"
)

// Header names of the internode protocol.
const (
	HdrNode    = "X-Cairn-Node"     // sender's node id
	HdrEpoch   = "X-Cairn-Epoch"    // sender's map epoch (requests and responses)
	HdrTime    = "X-Cairn-Time"     // unix seconds when signed
	HdrNonce   = "X-Cairn-Nonce"    // sender's boot id and request counter: each request is accepted once
	HdrBody    = "X-Cairn-Body"     // the body: "" (none), its SHA-256 (hex), or "stream" (a trailer MAC)
	HdrBodyMAC = "X-Cairn-Body-Mac" // trailer of a streamed body: MAC of the body, its trailers and the signature
	HdrSig     = "X-Cairn-Sig"      // hex HMAC of the canonical request
	HdrRespSig = "X-Cairn-Resp-Sig" // hex HMAC of the response's status and headers, bound to the request's nonce
	HdrCap     = "X-Cairn-Cap"      // capability token for object operations
)

// MaxSkew is how far a request's signing time may be from the receiver's clock. Within
// it, each request is accepted once (its nonce), so a captured request cannot be replayed.
const MaxSkew = 60 * time.Second

// maxHashedBody is the largest body signed by its hash (the receiver reads it whole before
// the handler runs); larger ones, and bodies of unknown length, are streamed with a
// trailer MAC that the receiver checks when it reaches the end of the body.
const maxHashedBody = 64 << 10

// Secret is the cluster secret shared by every node. Distinct keys for request signatures,
// responses, capabilities and Raft are derived from it, so a token of one kind is never
// valid as another. It also holds this process's request counter and the nonces seen
// from others.
type Secret struct {
	req, resp, capa, raft []byte
	// reqMAC, respMAC and capMAC compute the MACs under req, resp and capa.
	reqMAC, respMAC, capMAC *macKey
	boot                    string        // this process's random id, in its nonces
	counter                 atomic.Uint64 // its requests
	seen                    replayGuard
}

// NewSecret derives the keys from the cluster secret. An empty secret is refused.
func NewSecret(s string) (*Secret, error) {
	if len(s) < 16 {
		return nil, errors.E(errors.Invalid, "the cluster secret must be at least 16 characters")
	}
	derive := func(label string) []byte {
		m := hmac.New(sha256.New, []byte(s))
		m.Write([]byte("cairn/" + label))
		return m.Sum(nil)
	}
	var b [8]byte
	rand.Read(b[:])
	sec := &Secret{req: derive("request"), resp: derive("response"), capa: derive("capability"), raft: derive("raft"),
		boot: hex.EncodeToString(b[:])}
	sec.reqMAC, sec.respMAC, sec.capMAC = newMacKey(sec.req), newMacKey(sec.resp), newMacKey(sec.capa)
	return sec, nil
}

// mac is the HMAC of parts, each prefixed with its length so that no two lists of parts
// (a key holding a separator, say) give the same input.
func mac(key []byte, parts ...string) []byte {
	m := hmac.New(sha256.New, key)
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		m.Write(n[:])
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

// appendCairnHeaders appends the canonical form of h's X-Cairn-* headers but skip to dst:
// sorted names with their values, so that none can be added, removed or changed unseen.
func appendCairnHeaders(dst []byte, h http.Header, skip string) []byte {
	var arr [16]string // a request has about ten
	names := arr[:0]
	for k := range h {
		if len(k) > 8 && strings.EqualFold(k[:8], "X-Cairn-") {
			if k = http.CanonicalHeaderKey(k); k != skip {
				names = append(names, k)
			}
		}
	}
	slices.Sort(names)
	for _, k := range names {
		dst = append(dst, k...)
		dst = append(dst, ':')
		for i, v := range h.Values(k) {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, strings.TrimSpace(v)...) // as the receiver's parser sees it
		}
		dst = append(dst, '\n')
	}
	return dst
}

// macKey computes MACs in mac's format under one key, reusing keyed HMAC states: a new
// one costs several allocations and two SHA-256 blocks, and every internode request
// takes four to six MACs (its signature, its capability, its answer's signature, each
// made and checked). Safe for concurrent use.
type macKey struct {
	pool sync.Pool // *macState
}

// macState is a keyed HMAC and the buffer its input is gathered in.
type macState struct {
	h   hash.Hash
	buf []byte
}

func newMacKey(key []byte) *macKey {
	k := &macKey{}
	k.pool.New = func() any { return &macState{h: hmac.New(sha256.New, key), buf: make([]byte, 0, 1024)} }
	return k
}

// sum is mac(key, parts...).
func (k *macKey) sum(parts ...string) [sha256.Size]byte {
	st := k.pool.Get().(*macState)
	b := st.buf[:0]
	for _, p := range parts {
		b = binary.BigEndian.AppendUint64(b, uint64(len(p)))
		b = append(b, p...)
	}
	return k.finish(st, b)
}

// sumHeaders is mac(key, parts..., the canonical X-Cairn-* headers of h but skip).
func (k *macKey) sumHeaders(h http.Header, skip string, parts ...string) [sha256.Size]byte {
	st := k.pool.Get().(*macState)
	b := st.buf[:0]
	for _, p := range parts {
		b = binary.BigEndian.AppendUint64(b, uint64(len(p)))
		b = append(b, p...)
	}
	at := len(b)
	b = binary.BigEndian.AppendUint64(b, 0)
	b = appendCairnHeaders(b, h, skip)
	binary.BigEndian.PutUint64(b[at:], uint64(len(b)-at-8))
	return k.finish(st, b)
}

// maxMacBuf is the largest input buffer a macState keeps for the next use.
const maxMacBuf = 64 << 10

func (k *macKey) finish(st *macState, b []byte) [sha256.Size]byte {
	st.h.Reset()
	st.h.Write(b)
	var out [sha256.Size]byte
	copy(out[:], st.h.Sum(b[:0]))
	if cap(b) <= maxMacBuf {
		st.buf = b[:0]
		k.pool.Put(st)
	}
	return out
}

// Sign adds the authentication headers to r: a MAC over the method, path, query, every
// X-Cairn-* header (node, epoch, time, a nonce, the capability, metadata...) and the body.
// A body of at most 64 KiB with a known length is signed by its hash (r.GetBody must be
// set, as http.NewRequest does for byte readers); any other is sent chunked, with a
// trailer MAC over the body and the other trailers.
func (s *Secret) Sign(r *http.Request, node string, epoch uint64, now time.Time) {
	s.SignAs(r, node, epoch, now, wire.Version)
}

// SignAs signs r as a peer speaking protocol version proto (0: a peer from before
// versioning, which sends no version): a node speaks an older version to an older peer,
// and tests check how nodes answer other versions.
func (s *Secret) SignAs(r *http.Request, node string, epoch uint64, now time.Time, proto int) {
	ts := strconv.FormatInt(now.Unix(), 10)
	ep := strconv.FormatUint(epoch, 10)
	r.Header.Set(HdrNode, node)
	r.Header.Del(wire.HdrProto)
	if proto != 0 {
		r.Header.Set(wire.HdrProto, strconv.Itoa(proto))
	}
	r.Header.Set(HdrEpoch, ep)
	r.Header.Set(HdrTime, ts)
	r.Header.Set(HdrNonce, s.boot+"."+strconv.FormatUint(s.counter.Add(1), 10))
	stream := false
	switch {
	case r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0:
		r.Header.Set(HdrBody, "")
	case r.ContentLength > 0 && r.ContentLength <= maxHashedBody && r.GetBody != nil:
		sum := sha256.New()
		if rc, err := r.GetBody(); err == nil {
			io.Copy(sum, rc)
			rc.Close()
		}
		r.Header.Set(HdrBody, hex.EncodeToString(sum.Sum(nil)))
	default:
		r.Header.Set(HdrBody, "stream")
		stream = true
	}
	sum := s.reqMAC.sumHeaders(r.Header, HdrSig, r.Method, r.URL.EscapedPath(), r.URL.RawQuery)
	sig := hex.EncodeToString(sum[:])
	r.Header.Set(HdrSig, sig)
	if stream {
		if r.Trailer == nil {
			r.Trailer = http.Header{}
		}
		r.Trailer[HdrBodyMAC] = nil
		r.ContentLength = -1 // chunked: trailers follow the body
		tr := r.Trailer
		r.Body = &macReader{r: r.Body, sum: sha256.New(), atEOF: func(sum []byte) error {
			m := s.reqMAC.sumHeaders(tr, HdrBodyMAC, sig, string(sum))
			tr.Set(HdrBodyMAC, hex.EncodeToString(m[:]))
			return nil
		}, closer: r.Body}
	}
}

// macReader hashes what it reads and calls atEOF with the hash before it returns EOF; an
// error from atEOF is returned instead of EOF.
type macReader struct {
	r      io.Reader
	closer io.Closer
	sum    hash.Hash
	atEOF  func(sum []byte) error
	done   bool
	err    error
}

func (m *macReader) Read(p []byte) (int, error) {
	if m.done {
		return 0, m.err
	}
	n, err := m.r.Read(p)
	m.sum.Write(p[:n])
	if err == io.EOF {
		m.done, m.err = true, io.EOF
		if e := m.atEOF(m.sum.Sum(nil)); e != nil {
			m.err = e
		}
		return n, m.err
	}
	return n, err
}

func (m *macReader) Close() error {
	if m.closer != nil {
		return m.closer.Close()
	}
	return nil
}

// Verify checks r's signature, that its nonce was not seen before, and its body: a hashed
// body is read and checked here (r.Body is replaced by the bytes read), a streamed one
// when the handler reads its end (an error instead of EOF if its trailer MAC does not
// match, so nothing that reads to the end commits a forged body). It returns the
// sender's node id and epoch.
func (s *Secret) Verify(r *http.Request, now time.Time) (node string, epoch uint64, err error) {
	const op errors.Op = "rpc.Verify"
	node, ep, ts := r.Header.Get(HdrNode), r.Header.Get(HdrEpoch), r.Header.Get(HdrTime)
	sigHex := r.Header.Get(HdrSig)
	sig, err := hex.DecodeString(sigHex)
	if err != nil || len(sig) == 0 {
		return "", 0, errors.E(op, errors.Permission, "missing or malformed internode signature")
	}
	if want := s.reqMAC.sumHeaders(r.Header, HdrSig, r.Method, r.URL.EscapedPath(), r.URL.RawQuery); !hmac.Equal(sig, want[:]) {
		return "", 0, errors.E(op, errors.Permission, "bad internode signature (wrong cluster secret, or the request was changed)")
	}
	if err := wire.CheckVersion(r.Header.Get(wire.HdrProto)); err != nil {
		return "", 0, errors.E(op, err)
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", 0, errors.E(op, errors.Permission, "malformed signing time")
	}
	if d := now.Sub(time.Unix(t, 0)); d > MaxSkew || d < -MaxSkew {
		return "", 0, errors.E(op, errors.Permission, fmt.Sprintf("signing time is %s away from this node's clock", d.Round(time.Second)))
	}
	epoch, err = strconv.ParseUint(ep, 10, 64)
	if err != nil {
		return "", 0, errors.E(op, errors.Permission, "malformed epoch")
	}
	if err := s.seen.check(node, r.Header.Get(HdrNonce), now); err != nil {
		return "", 0, errors.E(op, errors.Permission, err)
	}
	switch tag := r.Header.Get(HdrBody); tag {
	case "":
		if r.ContentLength != 0 {
			return "", 0, errors.E(op, errors.Permission, "a body the signature does not cover")
		}
	case "stream":
		body := r.Body
		r.Body = &macReader{r: body, closer: body, sum: sha256.New(), atEOF: func(sum []byte) error {
			want := s.reqMAC.sumHeaders(r.Trailer, HdrBodyMAC, sigHex, string(sum))
			got, _ := hex.DecodeString(r.Trailer.Get(HdrBodyMAC))
			if !hmac.Equal(got, want[:]) {
				return errors.E(op, errors.Permission, "the body does not match its signature (changed in transit, or cut)")
			}
			return nil
		}}
	default:
		if r.ContentLength < 0 || r.ContentLength > maxHashedBody {
			return "", 0, errors.E(op, errors.Permission, "a hashed body of the wrong length")
		}
		data, err := readHashed(r.Body, r.ContentLength)
		if err != nil {
			return "", 0, errors.E(op, errors.Transient, fmt.Errorf("reading the body: %w", err))
		}
		sum := sha256.Sum256(data)
		if hex.EncodeToString(sum[:]) != tag {
			return "", 0, errors.E(op, errors.Permission, "the body does not match its signature")
		}
		r.Body = io.NopCloser(bytes.NewReader(data))
	}
	return node, epoch, nil
}

// readHashed reads a hashed body, declared to be n bytes (at most maxHashedBody), into
// one buffer of that size: what it returns is the whole body, up to one byte more if it
// is longer (the hash check then refuses it), or short if it ends early.
func readHashed(body io.Reader, n int64) ([]byte, error) {
	if n < 0 {
		n = maxHashedBody // unknown (chunked): at most what a hashed body may be
	}
	buf := make([]byte, n+1)
	got, err := io.ReadFull(body, buf)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		err = nil
	}
	return buf[:got], err
}

// SignResponse adds to a response's headers (before they are written) a MAC over its
// status, its X-Cairn-* headers and the request's nonce, so that an answer cannot be
// forged, changed or given to another request.
//
// The answer carries the protocol version the request was made in (this node accepted it,
// so it answers in it), or this node's own version for a request it could not read.
func (s *Secret) SignResponse(h http.Header, status int, reqNonce, reqProto string) {
	if reqProto == "" || wire.CheckVersion(reqProto) != nil {
		reqProto = wire.ProtoValue
	}
	h.Set(wire.HdrProto, reqProto)
	sum := s.respMAC.sumHeaders(h, HdrRespSig, strconv.Itoa(status), reqNonce)
	h.Set(HdrRespSig, hex.EncodeToString(sum[:]))
}

// VerifyResponse checks the MAC SignResponse added, for the request whose nonce was
// reqNonce.
func (s *Secret) VerifyResponse(resp *http.Response, reqNonce string) error {
	got, err := hex.DecodeString(resp.Header.Get(HdrRespSig))
	want := s.respMAC.sumHeaders(resp.Header, HdrRespSig, strconv.Itoa(resp.StatusCode), reqNonce)
	if err != nil || !hmac.Equal(got, want[:]) {
		return errors.E(errors.Op("rpc.VerifyResponse"), errors.Permission, "the answer is not signed by the cluster (changed in transit, or not from a node)")
	}
	return wire.CheckVersion(resp.Header.Get(wire.HdrProto))
}

// SignedResponses is a handler's ResponseWriter that signs the status and headers when
// they are written (SignResponse).
func (s *Secret) SignedResponses(w http.ResponseWriter, r *http.Request) http.ResponseWriter {
	return &signingWriter{ResponseWriter: w, s: s, nonce: r.Header.Get(HdrNonce), proto: r.Header.Get(wire.HdrProto)}
}

type signingWriter struct {
	http.ResponseWriter
	s     *Secret
	nonce string
	proto string // the request's protocol version
	wrote bool
}

func (w *signingWriter) WriteHeader(code int) {
	if !w.wrote && code >= 200 {
		w.wrote = true
		w.s.SignResponse(w.Header(), code, w.nonce, w.proto)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *signingWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// EndResponse signs and writes the status of a response whose handler wrote nothing (net/http
// would answer 200 unsigned); call it when the handler returns.
func EndResponse(w http.ResponseWriter) {
	if sw, ok := w.(*signingWriter); ok && !sw.wrote {
		sw.WriteHeader(http.StatusOK)
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *signingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush passes flushes on.
func (w *signingWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Authenticate is what a handler of signed requests does first: it wraps w so that the
// answer is signed (SignedResponses), and verifies r (Verify). A refused request is
// answered here, and ok is false. Call EndResponse(sw) when the handler returns.
func (s *Secret) Authenticate(w http.ResponseWriter, r *http.Request) (sw http.ResponseWriter, node string, epoch uint64, ok bool) {
	sw = s.SignedResponses(w, r)
	node, epoch, err := s.Verify(r, time.Now())
	if err != nil {
		wire.WriteError(sw, err)
		return sw, "", 0, false
	}
	return sw, node, epoch, true
}

// replayGuard remembers the nonces accepted within MaxSkew: per sender and boot id, the
// highest counter and a window of the counters below it (requests of one sender arrive
// slightly out of order over its parallel connections). Memory is bounded by the
// senders seen in the last two skew windows, each of which had to sign with the secret.
type replayGuard struct {
	mu      sync.Mutex
	senders map[string]*replayWindow
	swept   time.Time
}

const replayWindowBits = 1 << 16

type replayWindow struct {
	top  uint64 // highest counter accepted
	bits [replayWindowBits / 64]uint64
	last time.Time
}

func (g *replayGuard) check(node, nonce string, now time.Time) error {
	boot, cs, ok := strings.Cut(nonce, ".")
	n, err := strconv.ParseUint(cs, 10, 64)
	if !ok || err != nil || n == 0 || len(boot) != 16 {
		return fmt.Errorf("missing or malformed nonce")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.senders == nil {
		g.senders = map[string]*replayWindow{}
	}
	if now.Sub(g.swept) > MaxSkew {
		for k, w := range g.senders {
			if now.Sub(w.last) > 2*MaxSkew {
				delete(g.senders, k)
			}
		}
		g.swept = now
	}
	key := node + "\x00" + boot
	w := g.senders[key]
	if w == nil {
		w = &replayWindow{}
		g.senders[key] = w
	}
	w.last = now
	switch {
	case n > w.top:
		shift := n - w.top
		if shift >= replayWindowBits {
			w.bits = [replayWindowBits / 64]uint64{}
		} else {
			for i := w.top + 1; i <= n; i++ { // clear the slots the window moves over
				w.bits[(i%replayWindowBits)/64] &^= 1 << (i % 64)
			}
		}
		w.top = n
	case w.top-n >= replayWindowBits:
		return fmt.Errorf("request %d is too old to be accepted (replayed?)", n)
	}
	slot, bit := (n%replayWindowBits)/64, uint64(1)<<(n%64)
	if w.bits[slot]&bit != 0 {
		return fmt.Errorf("request %s was already accepted: a replay", nonce)
	}
	w.bits[slot] |= bit
	return nil
}

// Cap names what a capability is minted for: an operation (CapRead, CapWrite, CapDelete,
// CapList) on a bucket and key (a key prefix for CapList).
type Cap struct {
	Op, Bucket, Key string
}

// Capability operations.
const (
	CapRead   = "read"
	CapWrite  = "write"
	CapDelete = "delete"
	CapList   = "list"
	// CapRangeBatch grants a batch of in-place writes of a bucket's mutable objects
	// (wire.PathRangeBatch): the bucket is named, the keys are the batch's.
	CapRangeBatch = "range-batch"
	// CapObjectBatch grants a batch of replica writes of a bucket's object versions
	// (wire.PathObjectBatch): the bucket is named, the keys are the batch's.
	CapObjectBatch = "object-batch"
)

// MintCap returns a capability for op on bucket/key valid until now+ttl. A gateway mints
// one per request after it has authenticated the user.
func (s *Secret) MintCap(op, bucket, key string, now time.Time, ttl time.Duration) string {
	exp := now.Add(ttl).Unix()
	sum := s.capMAC.sum(op, bucket, key, strconv.FormatInt(exp, 10))
	var raw [8 + sha256.Size]byte
	copy(raw[8:], sum[:])
	binary.BigEndian.PutUint64(raw[:8], uint64(exp))
	return base64.RawURLEncoding.EncodeToString(raw[:])
}

// CheckCap verifies that token grants op on bucket/key at time now.
func (s *Secret) CheckCap(token, op, bucket, key string, now time.Time) error {
	const eop errors.Op = "rpc.CheckCap"
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimSpace(token))
	if err != nil || len(raw) != 8+sha256.Size {
		return errors.E(eop, errors.Permission, "missing or malformed capability")
	}
	exp := int64(binary.BigEndian.Uint64(raw[:8]))
	if want := s.capMAC.sum(op, bucket, key, strconv.FormatInt(exp, 10)); !hmac.Equal(raw[8:], want[:]) {
		return errors.E(eop, errors.Permission, fmt.Sprintf("capability not valid for %s of %s/%s", op, bucket, key))
	}
	if now.Unix() > exp {
		return errors.E(eop, errors.Permission, "capability expired")
	}
	return nil
}

// WriteSignedBody answers body with its SHA-256 in wire.HdrBodySum: w must sign the
// answer's headers (SignedResponses), so the body is bound to the request as the status
// is. For small answers that must not be changed in transit (an enrolment answer: a
// changed CA certificate would make the node trust an attacker).
func WriteSignedBody(w http.ResponseWriter, contentType string, body []byte) {
	sum := sha256.Sum256(body)
	w.Header().Set(wire.HdrBodySum, hex.EncodeToString(sum[:]))
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

// ReadSignedBody reads the body of an answer Client.Do verified (at most max bytes) and
// checks it against wire.HdrBodySum; an answer without one, or whose body differs, is
// an error (Permission).
func ReadSignedBody(resp *http.Response, max int64) ([]byte, error) {
	const op errors.Op = "rpc.ReadSignedBody"
	defer resp.Body.Close()
	want, err := hex.DecodeString(resp.Header.Get(wire.HdrBodySum))
	if err != nil || len(want) != sha256.Size {
		return nil, errors.E(op, errors.Permission, "the answer's body is not signed")
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, errors.E(op, errors.Transient, err)
	}
	if int64(len(body)) > max {
		return nil, errors.E(op, errors.TooLarge, "the answer's body is too large")
	}
	sum := sha256.Sum256(body)
	if !hmac.Equal(sum[:], want) {
		return nil, errors.E(op, errors.Permission, "the answer's body does not match its signature (changed in transit)")
	}
	return body, nil
}
