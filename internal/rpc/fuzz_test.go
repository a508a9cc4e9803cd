package rpc_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/wire"
)

// FuzzCheckCap feeds arbitrary tokens, operations, buckets, keys and times to CheckCap: it
// must never panic, every refusal must be a Permission error, and a token is accepted only
// if it is the capability MintCap makes for exactly that operation, bucket and key with
// the expiry the token carries (and that expiry is not past).
func FuzzCheckCap(f *testing.F) {
	s := mustSecret(f, testSecret)
	other := mustSecret(f, otherSecret)
	tok := s.MintCap(rpc.CapRead, "photos", "2026/a.jpg", t0, time.Minute)
	raw, _ := base64.RawURLEncoding.DecodeString(tok)
	flipped := append([]byte(nil), raw...)
	flipped[len(flipped)-1] ^= 1
	for _, c := range []struct {
		token, op, bucket, key string
		now                    int64
	}{
		{tok, rpc.CapRead, "photos", "2026/a.jpg", t0.Unix()},
		{tok, rpc.CapRead, "photos", "2026/a.jpg", t0.Unix() + 61},
		{tok, rpc.CapWrite, "photos", "2026/a.jpg", t0.Unix()},
		{tok, rpc.CapRead, "photos2", "2026/a.jpg", t0.Unix()},
		{tok, rpc.CapRead, "photos", "2026/b.jpg", t0.Unix()},
		{s.MintCap(rpc.CapList, "b", "", t0, time.Hour), rpc.CapList, "b", "", t0.Unix()},
		{s.MintCap(rpc.CapDelete, "b", "k", t0, -time.Hour), rpc.CapDelete, "b", "k", t0.Unix()},
		{other.MintCap(rpc.CapRead, "photos", "2026/a.jpg", t0, time.Minute), rpc.CapRead, "photos", "2026/a.jpg", t0.Unix()},
		{base64.RawURLEncoding.EncodeToString(flipped), rpc.CapRead, "photos", "2026/a.jpg", t0.Unix()},
		{tok[:len(tok)-1], rpc.CapRead, "photos", "2026/a.jpg", t0.Unix()},
		{"", rpc.CapRead, "photos", "2026/a.jpg", t0.Unix()},
		{"AAAA", "", "", "", 0},
		{base64.RawURLEncoding.EncodeToString(make([]byte, 40)), rpc.CapRead, "", "", -1},
	} {
		f.Add(c.token, c.op, c.bucket, c.key, c.now)
	}
	f.Fuzz(func(t *testing.T, token, op, bucket, key string, now int64) {
		at := time.Unix(now, 0)
		err := s.CheckCap(token, op, bucket, key, at)
		if err != nil {
			if !errors.Is(errors.Permission, err) {
				t.Fatalf("refusal %v has kind %v, want Permission", err, errors.KindOf(err))
			}
			_ = err.Error()
			return
		}
		raw, derr := base64.RawURLEncoding.DecodeString(strings.TrimSpace(token))
		if derr != nil || len(raw) < 8 {
			t.Fatalf("accepted a token that does not decode: %q (%v)", token, derr)
		}
		exp := int64(binary.BigEndian.Uint64(raw[:8]))
		if now > exp {
			t.Fatalf("accepted a token expired at %d at time %d", exp, now)
		}
		want, _ := base64.RawURLEncoding.DecodeString(s.MintCap(op, bucket, key, time.Unix(exp, 0), 0))
		if !bytes.Equal(raw, want) {
			t.Fatalf("accepted token %q for %q %q %q is not the minted capability", token, op, bucket, key)
		}
		if other.CheckCap(token, op, bucket, key, at) == nil {
			t.Fatalf("token %q accepted under two different secrets", token)
		}
	})
}

// FuzzVerify feeds arbitrary requests and header values to Verify: it must never panic,
// every refusal must be a Permission error, and a request is accepted only if Sign, given
// the node, epoch and time it names, makes exactly its headers.
func FuzzVerify(f *testing.F) {
	s := mustSecret(f, testSecret)
	other := mustSecret(f, otherSecret)
	add := func(sec *rpc.Secret, method, rawURL, node string, epoch uint64, signAt, now time.Time) {
		r := newSignedRequest(f, sec, method, rawURL, node, epoch, signAt)
		f.Add(r.Method, r.URL.Path, r.URL.RawPath, r.URL.RawQuery,
			r.Header.Get(rpc.HdrNode), r.Header.Get(rpc.HdrEpoch), r.Header.Get(rpc.HdrTime), r.Header.Get(rpc.HdrSig), now.Unix())
	}
	add(s, http.MethodPut, signURL, "gw", 7, t0, t0)
	add(s, http.MethodGet, "http://h/a%2Fb?x=1", "n2", 0, t0, t0.Add(rpc.MaxSkew))
	add(s, http.MethodGet, signURL, "gw", 7, t0, t0.Add(rpc.MaxSkew+time.Second))
	add(s, http.MethodHead, "http://h/", "", ^uint64(0), t0, t0)
	add(other, http.MethodPut, signURL, "gw", 7, t0, t0)
	f.Add("PUT", "/internal/v1/o", "", "b=x", "gw", "1", "1800000000", "zz", t0.Unix())
	f.Add("", "", "", "", "", "", "", "", int64(0))
	f.Fuzz(func(t *testing.T, method, path, rawPath, rawQuery, node, epoch, ts, sig string, now int64) {
		r := &http.Request{Method: method, URL: &url.URL{Path: path, RawPath: rawPath, RawQuery: rawQuery}, Header: http.Header{}}
		for k, v := range map[string]string{rpc.HdrNode: node, rpc.HdrEpoch: epoch, rpc.HdrTime: ts, rpc.HdrSig: sig} {
			if v != "" {
				r.Header.Set(k, v)
			}
		}
		gotNode, gotEpoch, err := s.Verify(r, time.Unix(now, 0))
		if err != nil {
			if !errors.Is(errors.Permission, err) {
				t.Fatalf("refusal %v has kind %v, want Permission", err, errors.KindOf(err))
			}
			if gotNode != "" || gotEpoch != 0 {
				t.Fatalf("refused but returned %q, %d", gotNode, gotEpoch)
			}
			return
		}
		if gotNode != node {
			t.Fatalf("Verify returned node %q, header has %q", gotNode, node)
		}
		signedAt, perr := strconv.ParseInt(ts, 10, 64)
		if perr != nil {
			t.Fatalf("accepted a malformed signing time %q", ts)
		}
		if d := time.Unix(now, 0).Sub(time.Unix(signedAt, 0)); d > rpc.MaxSkew || d < -rpc.MaxSkew {
			t.Fatalf("accepted a request signed %v away from the receiver's clock", d)
		}
		re := &http.Request{Method: method, URL: &url.URL{Path: path, RawPath: rawPath, RawQuery: rawQuery}, Header: http.Header{}}
		s.Sign(re, gotNode, gotEpoch, time.Unix(signedAt, 0))
		gotSig, _ := hex.DecodeString(sig)
		wantSig, _ := hex.DecodeString(re.Header.Get(rpc.HdrSig))
		if re.Header.Get(rpc.HdrEpoch) != epoch || re.Header.Get(rpc.HdrTime) != ts || !bytes.Equal(gotSig, wantSig) {
			t.Fatalf("accepted headers (epoch %q, time %q, sig %q) that Sign does not make (%q, %q, %q)",
				epoch, ts, sig, re.Header.Get(rpc.HdrEpoch), re.Header.Get(rpc.HdrTime), re.Header.Get(rpc.HdrSig))
		}
		if _, _, err := other.Verify(r, time.Unix(now, 0)); err == nil {
			t.Fatal("request accepted under two different secrets")
		}
	})
}

// errorCases are errors a node answers with, for the WriteError/DecodeError round trip and
// as seeds of FuzzDecodeError.
var errorCases = []struct {
	err      error
	kind     errors.Kind
	status   int
	sentinel error
}{
	{errors.E(errors.Op("store.StatVersion"), errors.NotExist, object.ErrNoSuchKey), errors.NotExist, http.StatusNotFound, object.ErrNoSuchKey},
	{errors.E(errors.NotExist, object.ErrNoSuchBucket), errors.NotExist, http.StatusNotFound, object.ErrNoSuchBucket},
	{errors.E(errors.NotExist, fmt.Errorf("upload x: %w", object.ErrNoSuchUpload)), errors.NotExist, http.StatusNotFound, object.ErrNoSuchUpload},
	{errors.E(errors.Invalid, object.ErrInvalidPart), errors.Invalid, http.StatusBadRequest, object.ErrInvalidPart},
	{errors.E(errors.Invalid, object.ErrInvalidPartOrder), errors.Invalid, http.StatusBadRequest, object.ErrInvalidPartOrder},
	{errors.E(errors.Invalid, object.ErrEntityTooSmall), errors.Invalid, http.StatusBadRequest, object.ErrEntityTooSmall},
	{errors.E(errors.Op("rpc.CheckCap"), errors.Permission, "capability expired"), errors.Permission, http.StatusForbidden, nil},
	{errors.E(errors.Precondition, "the object changed"), errors.Precondition, http.StatusPreconditionFailed, nil},
	{errors.E(errors.Transient, "busy"), errors.Transient, http.StatusServiceUnavailable, nil},
	{errors.E(errors.NoSpace, "disk full"), errors.NoSpace, http.StatusInsufficientStorage, nil},
	{errors.E(errors.Exist, "exists"), errors.Exist, http.StatusConflict, nil},
	{errors.E(errors.NotEmpty, "not empty"), errors.NotEmpty, http.StatusConflict, nil},
	{errors.E(errors.Corrupt, "bad chunk"), errors.Corrupt, http.StatusInternalServerError, nil},
	{errors.E(errors.IO, "read failed"), errors.IO, http.StatusInternalServerError, nil},
	{errors.E(errors.TooLarge, "too large"), errors.TooLarge, http.StatusInternalServerError, nil},
	{io.ErrUnexpectedEOF, errors.Other, http.StatusInternalServerError, nil},
}

func TestWriteDecodeErrorRoundTrip(t *testing.T) {
	for _, tc := range errorCases {
		t.Run(tc.err.Error(), func(t *testing.T) {
			w := httptest.NewRecorder()
			wire.WriteError(w, tc.err)
			resp := w.Result()
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
			err := wire.DecodeError(resp)
			if err == nil {
				t.Fatal("DecodeError returned nil")
			}
			if k := errors.KindOf(err); k != tc.kind {
				t.Errorf("decoded kind %v, want %v (%v)", k, tc.kind, err)
			}
			if tc.sentinel != nil && !errors.IsErr(err, tc.sentinel) {
				t.Errorf("decoded error %v lost the sentinel %v", err, tc.sentinel)
			}
			if !strings.Contains(err.Error(), tc.err.Error()) {
				t.Errorf("decoded message %q lost %q", err.Error(), tc.err.Error())
			}
		})
	}
}

// FuzzDecodeError feeds arbitrary statuses, X-Cairn-Error headers and bodies to
// DecodeError: it must never panic and always return an error, whose kind follows the
// header when the header names one and the status otherwise.
func FuzzDecodeError(f *testing.F) {
	for _, tc := range errorCases {
		w := httptest.NewRecorder()
		wire.WriteError(w, tc.err)
		f.Add(w.Code, w.Header().Get(wire.HdrError), true, w.Body.Bytes())
	}
	f.Add(http.StatusForbidden, "", false, []byte("forbidden by a proxy"))
	f.Add(http.StatusBadGateway, "", false, []byte{})
	f.Add(http.StatusNotFound, "x NoSuchKey", true, []byte("\x00\xff"))
	f.Add(http.StatusTeapot, "4", true, bytes.Repeat([]byte("a"), 5000))
	f.Add(0, " ", true, []byte(nil))
	f.Add(-1, "999999999999999999999 NoSuchBucket", true, []byte(" \n "))
	f.Fuzz(func(t *testing.T, status int, hdr string, setHdr bool, body []byte) {
		resp := &http.Response{
			StatusCode: status,
			Status:     strconv.Itoa(status) + " " + http.StatusText(status),
			Header:     http.Header{},
			Body:       io.NopCloser(bytes.NewReader(body)),
		}
		if setHdr {
			resp.Header.Set(wire.HdrError, hdr)
		}
		err := wire.DecodeError(resp)
		if err == nil {
			t.Fatal("DecodeError returned nil")
		}
		_ = err.Error()
		kindS, _, _ := strings.Cut(resp.Header.Get(wire.HdrError), " ")
		if k, perr := strconv.Atoi(kindS); perr == nil {
			if k >= 1 && k <= int(errors.TooLarge) && errors.KindOf(err) != errors.Kind(k) {
				t.Fatalf("header %q decoded to kind %v", hdr, errors.KindOf(err))
			}
			return
		}
		want := errors.Invalid
		switch {
		case status == http.StatusForbidden:
			want = errors.Permission
		case status >= 500:
			want = errors.Transient
		}
		if got := errors.KindOf(err); got != want {
			t.Fatalf("status %d without a kind header decoded to %v, want %v", status, got, want)
		}
	})
}
