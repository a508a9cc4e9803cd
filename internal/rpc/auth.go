// Package rpc is cairn's node-to-node transport: HTTP/1.1 with keep-alive on the node
// address, every request signed with the cluster secret (HMAC-SHA256 over the method, path,
// query, sender, map epoch and time), object operations additionally carrying a short-lived
// capability that names the bucket, key and operation (AFS/OSD's handles: storage nodes do
// not know users, only the cluster secret). The same listener also carries Raft traffic,
// told apart by its first bytes (see Mux). Bodies stream in both directions; nothing here
// buffers an object.
package rpc

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
)

// Header names of the internode protocol.
const (
	HdrNode    = "X-Cairn-Node"    // sender's node id
	HdrEpoch   = "X-Cairn-Epoch"   // sender's map epoch (requests and responses)
	HdrTime    = "X-Cairn-Time"    // unix seconds when signed
	HdrSig     = "X-Cairn-Sig"     // hex HMAC of the canonical request
	HdrCap     = "X-Cairn-Cap"     // capability token for object operations
	HdrMeta    = "X-Cairn-Meta"    // object metadata (JSON) in requests and responses
	HdrFinal   = "X-Cairn-Final"   // trailer: final metadata once the body is complete
	HdrVersion = "X-Cairn-Version" // HLC of the stored record
	HdrError   = "X-Cairn-Error"   // error kind and sentinel on failures
)

// MaxSkew is how far a request's signing time may be from the receiver's clock.
const MaxSkew = 5 * time.Minute

// Secret is the cluster secret shared by every node. Distinct keys for request signatures,
// capabilities and Raft are derived from it, so a token of one kind is never valid as
// another.
type Secret struct{ req, capa, raft []byte }

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
	return &Secret{req: derive("request"), capa: derive("capability"), raft: derive("raft")}, nil
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

// Sign adds the authentication headers to r.
func (s *Secret) Sign(r *http.Request, node string, epoch uint64, now time.Time) {
	ts := strconv.FormatInt(now.Unix(), 10)
	ep := strconv.FormatUint(epoch, 10)
	r.Header.Set(HdrNode, node)
	r.Header.Set(HdrEpoch, ep)
	r.Header.Set(HdrTime, ts)
	r.Header.Set(HdrSig, hex.EncodeToString(mac(s.req, r.Method, r.URL.EscapedPath(), r.URL.RawQuery, node, ep, ts)))
}

// Verify checks r's signature and returns the sender's node id and epoch.
func (s *Secret) Verify(r *http.Request, now time.Time) (node string, epoch uint64, err error) {
	const op errors.Op = "rpc.Verify"
	node, ep, ts := r.Header.Get(HdrNode), r.Header.Get(HdrEpoch), r.Header.Get(HdrTime)
	sig, err := hex.DecodeString(r.Header.Get(HdrSig))
	if err != nil || len(sig) == 0 {
		return "", 0, errors.E(op, errors.Permission, "missing or malformed internode signature")
	}
	if !hmac.Equal(sig, mac(s.req, r.Method, r.URL.EscapedPath(), r.URL.RawQuery, node, ep, ts)) {
		return "", 0, errors.E(op, errors.Permission, "bad internode signature (wrong cluster secret?)")
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
	return node, epoch, nil
}

// Capability operations.
const (
	CapRead   = "read"
	CapWrite  = "write"
	CapDelete = "delete"
	CapList   = "list"
)

// MintCap returns a capability for op on bucket/key valid until now+ttl. A gateway mints
// one per request after it has authenticated the user.
func (s *Secret) MintCap(op, bucket, key string, now time.Time, ttl time.Duration) string {
	exp := now.Add(ttl).Unix()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(exp))
	sum := mac(s.capa, op, bucket, key, strconv.FormatInt(exp, 10))
	return base64.RawURLEncoding.EncodeToString(append(b[:], sum...))
}

// CheckCap verifies that token grants op on bucket/key at time now.
func (s *Secret) CheckCap(token, op, bucket, key string, now time.Time) error {
	const eop errors.Op = "rpc.CheckCap"
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimSpace(token))
	if err != nil || len(raw) != 8+sha256.Size {
		return errors.E(eop, errors.Permission, "missing or malformed capability")
	}
	exp := int64(binary.BigEndian.Uint64(raw[:8]))
	if !hmac.Equal(raw[8:], mac(s.capa, op, bucket, key, strconv.FormatInt(exp, 10))) {
		return errors.E(eop, errors.Permission, fmt.Sprintf("capability not valid for %s of %s/%s", op, bucket, key))
	}
	if now.Unix() > exp {
		return errors.E(eop, errors.Permission, "capability expired")
	}
	return nil
}
