package server

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/sigv4"
	"github.com/cairnfs/cairn/internal/wire"
)

// TestProtocolVersions sends internode and admin requests signed as peers of several
// protocol versions to a real node: its own version is served and answered in it; a
// peer that sends no version (version 0) or a version it does not accept is refused with
// an error naming both versions, and a refused write writes nothing.
func TestProtocolVersions(t *testing.T) {
	r := startNode(t, Limits{}, Limits{}, Limits{})
	sec, err := rpc.NewSecret(r.Secret)
	if err != nil {
		t.Fatal(err)
	}
	mk, _ := http.NewRequest("PUT", "http://"+r.S3Addr+"/bkt", nil)
	sigv4.SignRequest(mk, r.Creds.AccessKey, r.Creds.SecretKey, "us-east-1", "UNSIGNED-PAYLOAD", time.Now())
	if st, body := send(t, mk); st != 200 {
		t.Fatalf("create bucket: %d %s", st, body)
	}
	// A replica write of a small object, as a gateway sends it.
	write := func(proto int) *http.Request {
		meta := `{"hlc":0,"size":2}`
		u := "http://" + r.NodeAddr + wire.PathObject + "?" + wire.QBucket + "=bkt&" + wire.QKey + "=k&" + wire.QVersion + "=5"
		req, _ := http.NewRequest("PUT", u, bytes.NewReader([]byte("hi")))
		req.Header.Set(wire.HdrMeta, meta)
		req.Header.Set(wire.HdrFinal, `{"hlc":0,"size":2,"etag":"x"}`)
		req.Header.Set(rpc.HdrCap, sec.MintCap(rpc.CapWrite, "bkt", "k", time.Now(), time.Minute))
		sec.SignAs(req, "peer", 0, time.Now(), proto)
		return req
	}
	status := func(proto int) *http.Request {
		req, _ := http.NewRequest("GET", "http://"+r.AdminAddr+"/admin/v1/status", nil)
		sec.SignAs(req, "peer", 0, time.Now(), proto)
		return req
	}
	head := func() int {
		u := "http://" + r.NodeAddr + wire.PathObject + "?" + wire.QBucket + "=bkt&" + wire.QKey + "=k"
		req, _ := http.NewRequest("HEAD", u, nil)
		req.Header.Set(rpc.HdrCap, sec.MintCap(rpc.CapRead, "bkt", "k", time.Now(), time.Minute))
		sec.Sign(req, "peer", 0, time.Now())
		st, _ := send(t, req)
		return st
	}
	for _, tc := range []struct {
		proto int
		want  []string // in the refusal; nil: accepted
	}{
		{0, []string{"version 0", "sent no version", "version 1"}},
		{wire.Version + 1, []string{"version 2", "version 1"}},
		{wire.Version, nil},
	} {
		for _, mkReq := range []func(int) *http.Request{write, status} {
			req := mkReq(tc.proto)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := new(bytes.Buffer)
			body.ReadFrom(resp.Body)
			resp.Body.Close()
			if err := sec.VerifyResponse(resp, req.Header.Get(rpc.HdrNonce)); tc.want == nil && err != nil {
				t.Errorf("version %d, %s: answer does not verify: %v", tc.proto, req.URL.Path, err)
			}
			if tc.want == nil {
				if resp.StatusCode != 200 || resp.Header.Get(wire.HdrProto) != wire.ProtoValue {
					t.Errorf("version %d, %s: %d %q (answered in version %q)", tc.proto, req.URL.Path, resp.StatusCode, body, resp.Header.Get(wire.HdrProto))
				}
				continue
			}
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("version %d, %s: %d %q, want 400", tc.proto, req.URL.Path, resp.StatusCode, body)
			}
			for _, w := range tc.want {
				if !strings.Contains(body.String(), w) {
					t.Errorf("version %d, %s: refusal %q does not say %q", tc.proto, req.URL.Path, body, w)
				}
			}
			if req.Method == "PUT" {
				if st := head(); st != http.StatusNotFound {
					t.Errorf("after a refused version-%d write the object answers %d, want 404 (nothing written)", tc.proto, st)
				}
			}
		}
	}
	if st := head(); st != 200 {
		t.Errorf("the accepted write is not there: HEAD %d", st)
	}
}
