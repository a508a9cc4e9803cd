package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/sigv4"
	"github.com/cairnfs/cairn/internal/wire"
)

// signedReq builds a request signed as the admin CLI or a node signs it.
func signedReq(t *testing.T, sec *rpc.Secret, method, url string, body []byte, hdr http.Header) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	r, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		r.Header[k] = v
	}
	sec.Sign(r, "test-node", 0, time.Now())
	return r
}

// clone copies r with a new body (nil: r's bytes) for a replay.
func clone(t *testing.T, r *http.Request, body []byte) *http.Request {
	t.Helper()
	c, err := http.NewRequest(r.Method, r.URL.String(), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	c.Header = r.Header.Clone()
	c.ContentLength = int64(len(body))
	return c
}

func send(t *testing.T, r *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// s3Status is the status of an S3 ListBuckets signed with the given credentials.
func s3Status(t *testing.T, addr, ak, sk string) int {
	t.Helper()
	r, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	sigv4.SignRequest(r, ak, sk, "us-east-1", "UNSIGNED-PAYLOAD", time.Now())
	st, _ := send(t, r)
	return st
}

// TestAdminApplyReplay is the reported attack: a captured POST /admin/v1/apply replayed
// with the same signature headers and another body ({"op":"put_user",...}) created an S3
// user. The signature now covers the body, and each request is accepted once.
func TestAdminApplyReplay(t *testing.T) {
	r := startNode(t, Limits{}, Limits{}, Limits{})
	sec, err := rpc.NewSecret(r.Secret)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + r.AdminAddr + "/admin/v1/apply"
	legit := []byte(`{"op":"set_recovery_rate","name":"x"}`)
	captured := signedReq(t, sec, "POST", url, legit, nil)
	send(t, clone(t, captured, legit)) // the operator's own request (its answer does not matter)
	evil := []byte(`{"op":"put_user","user":{"access_key":"EVILEVILEVILEVIL0001","secret_key":"evilevilevilevilevilevilevilevil00000001"}}`)
	st, body := send(t, clone(t, captured, evil))
	if st != http.StatusForbidden {
		t.Errorf("replay with another body: %d %s, want 403", st, body)
	}
	st, body = send(t, clone(t, captured, legit))
	if st != http.StatusForbidden {
		t.Errorf("identical replay: %d %s, want 403", st, body)
	}
	// A fresh signature of the evil body by someone without the secret is refused too.
	other, _ := rpc.NewSecret("not-the-cluster-secret-0123456789")
	if st, _ := send(t, signedReq(t, other, "POST", url, evil, nil)); st != http.StatusForbidden {
		t.Errorf("apply signed with another secret: %d, want 403", st)
	}
	if st := s3Status(t, r.S3Addr, "EVILEVILEVILEVIL0001", "evilevilevilevilevilevilevilevil00000001"); st != http.StatusForbidden {
		t.Fatalf("the attacker's S3 user answers %d: it was created", st)
	}
	if st := s3Status(t, r.S3Addr, r.Creds.AccessKey, r.Creds.SecretKey); st != http.StatusOK {
		t.Fatalf("the real user answers %d", st)
	}
}

// TestSignedRequestsRefuseEveryChange closes the class: admin and internode requests of
// each kind (no body, a hashed JSON body, a streamed object body with trailers), each
// sent once as signed, then replayed and with every part changed (method, path, query,
// each X-Cairn-* header changed, removed or added, the body, the trailer): every variant
// is refused with 403, and the store and the map are unchanged.
func TestSignedRequestsRefuseEveryChange(t *testing.T) {
	r := startNode(t, Limits{}, Limits{}, Limits{})
	sec, err := rpc.NewSecret(r.Secret)
	if err != nil {
		t.Fatal(err)
	}
	// Internode writes need a bucket; make one through S3.
	mk, _ := http.NewRequest("PUT", "http://"+r.S3Addr+"/bkt", nil)
	sigv4.SignRequest(mk, r.Creds.AccessKey, r.Creds.SecretKey, "us-east-1", "UNSIGNED-PAYLOAD", time.Now())
	if st, body := send(t, mk); st != 200 {
		t.Fatalf("create bucket: %d %s", st, body)
	}
	state := func() string {
		r1, _ := http.NewRequest("GET", "http://"+r.S3Addr+"/bkt", nil)
		sigv4.SignRequest(r1, r.Creds.AccessKey, r.Creds.SecretKey, "us-east-1", "UNSIGNED-PAYLOAD", time.Now())
		_, objects := send(t, r1)
		st := signedReq(t, sec, "GET", "http://"+r.AdminAddr+"/admin/v1/status", nil, nil)
		resp, err := http.DefaultClient.Do(st)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var s struct {
			Epoch uint64 `json:"epoch"`
		}
		json.NewDecoder(resp.Body).Decode(&s)
		return fmt.Sprintf("epoch %d\n%s", s.Epoch, objects)
	}
	capa := sec.MintCap(rpc.CapWrite, "bkt", "victim", time.Now(), time.Minute)
	type kind struct {
		name   string
		method string
		url    string
		body   []byte
		stream bool
		hdr    http.Header
	}
	obj := "http://" + r.NodeAddr + "/internal/v1/o?b=bkt&k=victim&v=7354688697877495808&mod=1"
	kinds := []kind{
		{name: "admin GET status", method: "GET", url: "http://" + r.AdminAddr + "/admin/v1/status"},
		{name: "admin POST apply", method: "POST", url: "http://" + r.AdminAddr + "/admin/v1/apply",
			body: []byte(`{"op":"put_bucket","bucket":{"name":"made-by-replay"}}`)},
		{name: "internode PUT object (hashed body)", method: "PUT", url: obj, body: []byte("the object's bytes"),
			hdr: http.Header{rpc.HdrCap: {capa}, wire.HdrMeta: {`{"Size":18}`}, wire.HdrFinal: {`{"Size":18,"ETag":"x"}`}}},
		{name: "internode PUT object (streamed body)", method: "PUT", url: obj, body: bytes.Repeat([]byte("s"), 2<<20), stream: true,
			hdr: http.Header{rpc.HdrCap: {capa}, wire.HdrMeta: {`{"Size":2097152}`}}},
	}
	before := state()
	refusedAll := func(k kind, what string, req *http.Request) {
		t.Helper()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return // the server refused early and closed the connection while the body was sent
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		st, body := resp.StatusCode, string(b)
		if st != http.StatusForbidden && st != http.StatusBadRequest {
			t.Errorf("%s, %s: %d %.200s, want a refusal (403)", k.name, what, st, body)
		}
	}
	build := func(k kind) *http.Request {
		var rd io.Reader
		if k.body != nil {
			rd = bytes.NewReader(k.body)
			if k.stream {
				rd = io.MultiReader(bytes.NewReader(k.body)) // no GetBody: streamed with a trailer MAC
			}
		}
		req, _ := http.NewRequest(k.method, k.url, rd)
		for h, v := range k.hdr {
			req.Header[h] = v
		}
		if k.stream {
			req.ContentLength = int64(len(k.body))
		}
		sec.Sign(req, "test-node", 0, time.Now())
		return req
	}
	for _, k := range kinds {
		// Mutations of the request line and headers, each on a freshly signed request.
		muts := map[string]func(*http.Request){
			"method": func(q *http.Request) {
				q.Method = map[string]string{"GET": "DELETE", "POST": "PUT", "PUT": "POST"}[q.Method]
			},
			"path":           func(q *http.Request) { q.URL.Path += "x" },
			"query":          func(q *http.Request) { q.URL.RawQuery += "&b=other" },
			"query replaced": func(q *http.Request) { q.URL.RawQuery = "x=1" },
			"added header":   func(q *http.Request) { q.Header.Set("X-Cairn-Extra", "1") },
		}
		probe := build(k)
		for h := range probe.Header {
			if strings.HasPrefix(h, "X-Cairn-") {
				muts["header "+h+" changed"] = func(q *http.Request) { q.Header.Set(h, q.Header.Get(h)+"0") }
				muts["header "+h+" removed"] = func(q *http.Request) { q.Header.Del(h) }
			}
		}
		if k.body != nil && !k.stream {
			muts["body changed"] = func(q *http.Request) {
				b := append([]byte(nil), k.body...)
				b[0] ^= 1
				q.Body, q.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
			}
		}
		if k.stream {
			muts["streamed body changed"] = func(q *http.Request) {
				b := append([]byte(nil), k.body...)
				b[len(b)/2] ^= 1
				q.Body = io.NopCloser(bytes.NewReader(b))
				// The trailer MAC is computed by the signer's reader over the original.
				tr := q.Trailer
				q.Body = &forgedTrailer{r: bytes.NewReader(b), tr: tr}
			}
			muts["trailer changed"] = func(q *http.Request) {
				q.Trailer.Set(wire.HdrFinal, `{"Size":1}`)
				body := q.Body
				q.Body = &keepTrailer{r: body, tr: q.Trailer, key: wire.HdrFinal, val: `{"Size":1}`}
			}
		}
		for what, mut := range muts {
			q := build(k)
			mut(q)
			refusedAll(k, what, q)
		}
	}
	if after := state(); after != before {
		t.Fatalf("refused requests changed the store or the map:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// Replays: each request sent as signed, then again; the second is refused.
	for _, k := range kinds {
		if k.stream {
			continue // a streamed body cannot be sent twice by this client; its nonce is the same check
		}
		q := build(k)
		send(t, clone(t, q, k.body))
		refusedAll(k, "replayed", clone(t, q, k.body))
	}
	if st := s3Status(t, r.S3Addr, r.Creds.AccessKey, r.Creds.SecretKey); st != http.StatusOK {
		t.Fatalf("S3 after the refused requests: %d", st)
	}
}

// forgedTrailer sends r as the body and a trailer MAC it cannot compute: the original's.
type forgedTrailer struct {
	r  io.Reader
	tr http.Header
}

func (f *forgedTrailer) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF && f.tr.Get(rpc.HdrBodyMAC) == "" {
		f.tr.Set(rpc.HdrBodyMAC, strings.Repeat("ab", 32))
	}
	return n, err
}
func (f *forgedTrailer) Close() error { return nil }

// keepTrailer passes the signed body through, then sets key to val after the signer's
// reader filled in the trailer MAC.
type keepTrailer struct {
	r        io.ReadCloser
	tr       http.Header
	key, val string
}

func (k *keepTrailer) Read(p []byte) (int, error) {
	n, err := k.r.Read(p)
	if err == io.EOF {
		k.tr.Set(k.key, k.val)
	}
	return n, err
}
func (k *keepTrailer) Close() error { return k.r.Close() }
