package rpc_test

import (
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/rpc"
)

const (
	testSecret  = "cluster-secret-for-tests-0123456789"
	otherSecret = "another-cluster-secret-9876543210"
)

// t0 is a fixed signing/minting time, so that no test depends on the wall clock.
var t0 = time.Unix(1_800_000_000, 0)

func mustSecret(tb testing.TB, s string) *rpc.Secret {
	tb.Helper()
	sec, err := rpc.NewSecret(s)
	if err != nil {
		tb.Fatalf("NewSecret(%q): %v", s, err)
	}
	return sec
}

func TestNewSecret(t *testing.T) {
	for _, tc := range []struct {
		secret string
		ok     bool
	}{
		{"", false},
		{"x", false},
		{"fifteen-chars-x", false}, // 15
		{"sixteen-chars-xx", true}, // 16
		{testSecret, true},
	} {
		s, err := rpc.NewSecret(tc.secret)
		if tc.ok {
			if err != nil || s == nil {
				t.Errorf("NewSecret(%q) = %v, %v; want a secret", tc.secret, s, err)
			}
			continue
		}
		if err == nil || s != nil {
			t.Errorf("NewSecret(%q) = %v, %v; want an error", tc.secret, s, err)
			continue
		}
		if !errors.Is(errors.Invalid, err) {
			t.Errorf("NewSecret(%q): error %v has kind %v, want Invalid", tc.secret, err, errors.KindOf(err))
		}
	}
}

func newSignedRequest(tb testing.TB, s *rpc.Secret, method, url, node string, epoch uint64, at time.Time) *http.Request {
	tb.Helper()
	r, err := http.NewRequest(method, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	s.Sign(r, node, epoch, at)
	return r
}

const signURL = "http://10.0.0.1:7000/internal/v1/o?b=photos&k=2026%2Fa+b.jpg&v=123456&mod=99"

func TestSignVerifyRoundTrip(t *testing.T) {
	s := mustSecret(t, testSecret)
	for _, tc := range []struct {
		name   string
		method string
		url    string
		node   string
		epoch  uint64
		at     time.Time // verification time; the request is signed at t0
	}{
		{"put", http.MethodPut, signURL, "gw-1", 7, t0},
		{"head no query", http.MethodHead, "http://h/internal/v1/o", "n2", 0, t0},
		{"escaped path", http.MethodGet, "http://h/a%2Fb/c%20d?x=%2F", "node-3", 1 << 40, t0},
		{"max epoch", http.MethodDelete, signURL, "n", ^uint64(0), t0},
		{"empty node", http.MethodPost, signURL, "", 3, t0},
		{"receiver clock behind by MaxSkew", http.MethodPut, signURL, "gw", 1, t0.Add(-rpc.MaxSkew)},
		{"receiver clock ahead by MaxSkew", http.MethodPut, signURL, "gw", 1, t0.Add(rpc.MaxSkew)},
		{"receiver clock ahead a little", http.MethodPut, signURL, "gw", 1, t0.Add(1500 * time.Millisecond)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newSignedRequest(t, s, tc.method, tc.url, tc.node, tc.epoch, t0)
			node, epoch, err := s.Verify(r, tc.at)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if node != tc.node || epoch != tc.epoch {
				t.Fatalf("Verify = %q, %d; want %q, %d", node, epoch, tc.node, tc.epoch)
			}
			// The same secret rebuilt from the same string verifies too.
			if _, _, err := mustSecret(t, testSecret).Verify(r, tc.at); err != nil {
				t.Fatalf("Verify with a re-derived secret: %v", err)
			}
		})
	}
}

func TestVerifyRefuses(t *testing.T) {
	s := mustSecret(t, testSecret)
	other := mustSecret(t, otherSecret)
	for _, tc := range []struct {
		name   string
		mutate func(r *http.Request)
		verify *rpc.Secret // nil: s
		at     time.Time   // zero: t0
		signAt time.Time   // zero: t0
	}{
		{name: "other secret", verify: other},
		{name: "signed with other secret", mutate: func(r *http.Request) { other.Sign(r, "gw", 7, t0) }},
		{name: "method", mutate: func(r *http.Request) { r.Method = http.MethodDelete }},
		{name: "path", mutate: func(r *http.Request) { r.URL.Path, r.URL.RawPath = "/internal/v1/upload", "" }},
		{name: "path trailing slash", mutate: func(r *http.Request) { r.URL.Path += "/" }},
		{name: "path escaping", mutate: func(r *http.Request) {
			r.URL.Path, r.URL.RawPath = "/internal/v1/o/x", "/internal/v1/o%2Fx"
		}},
		{name: "query bucket", mutate: func(r *http.Request) {
			r.URL.RawQuery = strings.Replace(r.URL.RawQuery, "b=photos", "b=secrets", 1)
		}},
		{name: "query key", mutate: func(r *http.Request) {
			r.URL.RawQuery = strings.Replace(r.URL.RawQuery, "k=2026%2Fa+b.jpg", "k=other", 1)
		}},
		{name: "query version", mutate: func(r *http.Request) {
			r.URL.RawQuery = strings.Replace(r.URL.RawQuery, "v=123456", "v=123457", 1)
		}},
		{name: "query appended", mutate: func(r *http.Request) { r.URL.RawQuery += "&off=0" }},
		{name: "query dropped", mutate: func(r *http.Request) { r.URL.RawQuery = "" }},
		{name: "node header", mutate: func(r *http.Request) { r.Header.Set(rpc.HdrNode, "gw-2") }},
		{name: "node header removed", mutate: func(r *http.Request) { r.Header.Del(rpc.HdrNode) }},
		{name: "epoch header", mutate: func(r *http.Request) { r.Header.Set(rpc.HdrEpoch, "8") }},
		{name: "epoch header leading zero", mutate: func(r *http.Request) { r.Header.Set(rpc.HdrEpoch, "07") }},
		{name: "epoch header removed", mutate: func(r *http.Request) { r.Header.Del(rpc.HdrEpoch) }},
		{name: "time header moved within skew", mutate: func(r *http.Request) {
			r.Header.Set(rpc.HdrTime, "1800000001")
		}},
		{name: "time header removed", mutate: func(r *http.Request) { r.Header.Del(rpc.HdrTime) }},
		{name: "signature missing", mutate: func(r *http.Request) { r.Header.Del(rpc.HdrSig) }},
		{name: "signature empty", mutate: func(r *http.Request) { r.Header.Set(rpc.HdrSig, "") }},
		{name: "signature not hex", mutate: func(r *http.Request) { r.Header.Set(rpc.HdrSig, "zz"+r.Header.Get(rpc.HdrSig)[2:]) }},
		{name: "signature odd length", mutate: func(r *http.Request) { r.Header.Set(rpc.HdrSig, r.Header.Get(rpc.HdrSig)[1:]) }},
		{name: "signature truncated", mutate: func(r *http.Request) { r.Header.Set(rpc.HdrSig, r.Header.Get(rpc.HdrSig)[:32]) }},
		{name: "signature extended", mutate: func(r *http.Request) { r.Header.Set(rpc.HdrSig, r.Header.Get(rpc.HdrSig)+"00") }},
		{name: "signature zeros", mutate: func(r *http.Request) { r.Header.Set(rpc.HdrSig, strings.Repeat("0", 64)) }},
		{name: "signature bit flipped", mutate: func(r *http.Request) {
			b, _ := hex.DecodeString(r.Header.Get(rpc.HdrSig))
			b[len(b)-1] ^= 1
			r.Header.Set(rpc.HdrSig, hex.EncodeToString(b))
		}},
		{name: "signature base64 not hex", mutate: func(r *http.Request) {
			b, _ := hex.DecodeString(r.Header.Get(rpc.HdrSig))
			r.Header.Set(rpc.HdrSig, base64.StdEncoding.EncodeToString(b))
		}},
		{name: "signed too long ago", signAt: t0.Add(-rpc.MaxSkew - time.Second)},
		{name: "signed far in the past", signAt: time.Unix(0, 0)},
		{name: "signed too far in the future", signAt: t0.Add(rpc.MaxSkew + time.Second)},
		{name: "signed far in the future", signAt: t0.Add(100 * 365 * 24 * time.Hour)},
		{name: "receiver clock far ahead", at: t0.Add(time.Hour)},
		{name: "receiver clock far behind", at: t0.Add(-time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			signAt := tc.signAt
			if signAt.IsZero() {
				signAt = t0
			}
			at := tc.at
			if at.IsZero() {
				at = t0
			}
			v := tc.verify
			if v == nil {
				v = s
			}
			r := newSignedRequest(t, s, http.MethodPut, signURL, "gw", 7, signAt)
			if tc.mutate != nil {
				tc.mutate(r)
			}
			node, epoch, err := v.Verify(r, at)
			if err == nil {
				t.Fatalf("Verify accepted the request (node %q, epoch %d)", node, epoch)
			}
			if !errors.Is(errors.Permission, err) {
				t.Fatalf("Verify error %v has kind %v, want Permission", err, errors.KindOf(err))
			}
			if node != "" || epoch != 0 {
				t.Fatalf("Verify refused but returned node %q, epoch %d", node, epoch)
			}
		})
	}
}

func TestCheckCap(t *testing.T) {
	s := mustSecret(t, testSecret)
	other := mustSecret(t, otherSecret)
	const ttl = time.Minute
	tok := s.MintCap(rpc.CapRead, "photos", "2026/a.jpg", t0, ttl)
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		t.Fatalf("minted token %q is not raw URL base64: %v", tok, err)
	}
	reencode := func(f func(b []byte) []byte) string {
		b := append([]byte(nil), raw...)
		return base64.RawURLEncoding.EncodeToString(f(b))
	}
	random := make([]byte, len(raw))
	for i := range random {
		random[i] = byte(i*37 + 11)
	}

	type tcase struct {
		name            string
		token           string
		op, bucket, key string
		now             time.Time
		ok              bool
	}
	valid := func(name, token string, now time.Time) tcase {
		return tcase{name, token, rpc.CapRead, "photos", "2026/a.jpg", now, true}
	}
	refused := func(name, token, op, bucket, key string, now time.Time) tcase {
		return tcase{name, token, op, bucket, key, now, false}
	}
	cases := []tcase{
		valid("valid at mint time", tok, t0),
		valid("valid before expiry", tok, t0.Add(ttl-time.Second)),
		valid("valid at expiry", tok, t0.Add(ttl)),
		valid("valid with surrounding space", " "+tok+"\t", t0),
		valid("longer ttl", s.MintCap(rpc.CapRead, "photos", "2026/a.jpg", t0, time.Hour), t0.Add(59*time.Minute)),

		refused("expired", tok, rpc.CapRead, "photos", "2026/a.jpg", t0.Add(ttl+time.Second)),
		refused("expired long ago", tok, rpc.CapRead, "photos", "2026/a.jpg", t0.Add(24*time.Hour)),
		refused("minted expired", s.MintCap(rpc.CapRead, "photos", "2026/a.jpg", t0.Add(-time.Hour), ttl), rpc.CapRead, "photos", "2026/a.jpg", t0),
		refused("negative ttl", s.MintCap(rpc.CapRead, "photos", "2026/a.jpg", t0, -time.Second), rpc.CapRead, "photos", "2026/a.jpg", t0),

		refused("op write", tok, rpc.CapWrite, "photos", "2026/a.jpg", t0),
		refused("op delete", tok, rpc.CapDelete, "photos", "2026/a.jpg", t0),
		refused("op list", tok, rpc.CapList, "photos", "2026/a.jpg", t0),
		refused("op empty", tok, "", "photos", "2026/a.jpg", t0),
		refused("op case", tok, "READ", "photos", "2026/a.jpg", t0),

		refused("other bucket", tok, rpc.CapRead, "photos2", "2026/a.jpg", t0),
		refused("bucket prefix", tok, rpc.CapRead, "photo", "2026/a.jpg", t0),
		refused("empty bucket", tok, rpc.CapRead, "", "2026/a.jpg", t0),
		refused("other key", tok, rpc.CapRead, "photos", "2026/b.jpg", t0),
		refused("key prefix", tok, rpc.CapRead, "photos", "2026/", t0),
		refused("key extended", tok, rpc.CapRead, "photos", "2026/a.jpg/x", t0),
		refused("empty key", tok, rpc.CapRead, "photos", "", t0),
		refused("bucket and key swapped", s.MintCap(rpc.CapRead, "2026", "photos", t0, ttl), rpc.CapRead, "photos", "2026", t0),
		// The fields a capability names must be bound unambiguously: moving a separator
		// between the bucket and the key must not give a capability for another object.
		refused("separator moved from key to bucket", s.MintCap(rpc.CapRead, "photos", "x\ny", t0, ttl), rpc.CapRead, "photos\nx", "y", t0),
		refused("separator moved from bucket to key", s.MintCap(rpc.CapWrite, "a\nb", "c", t0, ttl), rpc.CapWrite, "a", "b\nc", t0),

		refused("other secret", other.MintCap(rpc.CapRead, "photos", "2026/a.jpg", t0, ttl), rpc.CapRead, "photos", "2026/a.jpg", t0),
		refused("empty", "", rpc.CapRead, "photos", "2026/a.jpg", t0),
		refused("blank", "   ", rpc.CapRead, "photos", "2026/a.jpg", t0),
		refused("random bytes", base64.RawURLEncoding.EncodeToString(random), rpc.CapRead, "photos", "2026/a.jpg", t0),
		refused("zeros", base64.RawURLEncoding.EncodeToString(make([]byte, len(raw))), rpc.CapRead, "photos", "2026/a.jpg", t0),
		refused("not base64", "!!!!"+tok[4:], rpc.CapRead, "photos", "2026/a.jpg", t0),
		refused("padded std base64", base64.StdEncoding.EncodeToString(raw), rpc.CapRead, "photos", "2026/a.jpg", t0),
		refused("truncated one char", tok[:len(tok)-1], rpc.CapRead, "photos", "2026/a.jpg", t0),
		refused("truncated one byte", reencode(func(b []byte) []byte { return b[:len(b)-1] }), rpc.CapRead, "photos", "2026/a.jpg", t0),
		refused("only expiry", reencode(func(b []byte) []byte { return b[:8] }), rpc.CapRead, "photos", "2026/a.jpg", t0),
		refused("extended", reencode(func(b []byte) []byte { return append(b, 0) }), rpc.CapRead, "photos", "2026/a.jpg", t0),
		refused("mac bit flipped", reencode(func(b []byte) []byte { b[20] ^= 0x10; return b }), rpc.CapRead, "photos", "2026/a.jpg", t0),
		refused("last mac bit flipped", reencode(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), rpc.CapRead, "photos", "2026/a.jpg", t0),
		refused("expiry extended", reencode(func(b []byte) []byte { b[5] ^= 0x01; return b }), rpc.CapRead, "photos", "2026/a.jpg", t0.Add(ttl+time.Second)),
		refused("expiry maxed", reencode(func(b []byte) []byte {
			for i := 0; i < 8; i++ {
				b[i] = 0x7f
			}
			return b
		}), rpc.CapRead, "photos", "2026/a.jpg", t0.Add(ttl+time.Second)),
		refused("hex not base64", hex.EncodeToString(raw), rpc.CapRead, "photos", "2026/a.jpg", t0),
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := s.CheckCap(tc.token, tc.op, tc.bucket, tc.key, tc.now)
			if tc.ok {
				if err != nil {
					t.Fatalf("CheckCap refused a valid capability: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("CheckCap(%q, %q, %q, %q, %v) accepted", tc.token, tc.op, tc.bucket, tc.key, tc.now.Unix())
			}
			if !errors.Is(errors.Permission, err) {
				t.Fatalf("CheckCap error %v has kind %v, want Permission", err, errors.KindOf(err))
			}
		})
	}
}

// TestMintCapDistinct checks that capabilities differ for every field they name.
func TestMintCapDistinct(t *testing.T) {
	s := mustSecret(t, testSecret)
	seen := map[string]string{}
	for _, c := range []struct{ op, bucket, key string }{
		{rpc.CapRead, "b", "k"}, {rpc.CapWrite, "b", "k"}, {rpc.CapDelete, "b", "k"}, {rpc.CapList, "b", "k"},
		{rpc.CapRead, "b2", "k"}, {rpc.CapRead, "b", "k2"}, {rpc.CapRead, "b", ""}, {rpc.CapRead, "", "b"},
	} {
		tok := s.MintCap(c.op, c.bucket, c.key, t0, time.Minute)
		id := c.op + "|" + c.bucket + "|" + c.key
		if prev, ok := seen[tok]; ok {
			t.Errorf("%s and %s have the same capability", prev, id)
		}
		seen[tok] = id
		if strings.ContainsAny(tok, "+/= \n") {
			t.Errorf("capability %q is not a raw URL-safe token", tok)
		}
	}
}
